"""Fixed-point convolution, deconvolution and fully connected layers, exact: where they run.

The NN extension text (``formats.md`` §2.3, §2.6) defines these layers on UINT8 / INT8
(KHR_NN_8) and INT16 Q7.8 (KHR_NN_16) tensors as ``out = sat(round(sum in * w + b))``:
one sum, rounded once by the node's ``rounding_policy`` (TO_ZERO / TO_NEAREST_EVEN) to the
output's fixed-point position and fitted once to its type by its ``overflow_policy``
(WRAP / SATURATE), in an accumulator whose width the implementation picks (at least 16
bits).  dvsdk's accumulator is int64: the sum is exact, so the result is a function of the
raw integers alone.

The DV700 computes in FP16 (``firmware_spec/arithmetic.md``), which is exact only where
every operand and every partial sum is representable.  :func:`decide` proves that from the
declared ranges or runs the node on the CPU (``VxFixedPoint``, :mod:`dvsdk.cpu.fixedpoint`,
int64).  The bound (``firmware_spec/fixed_point.md`` derives it): in units of
``u = 2**-(p_in + p_w)`` (the products' step) every product ``x_raw * w_raw`` and the
bias ``b_raw * 2**(p_in + p_w - p_b)`` are integers; with ``x_raw`` in ``[lo, hi]`` (the
input's range, with 0 for the padding and inserted zeros), every partial sum of output map
``o``, in any order and over any subset of its taps, lies in
``[sum_j min(0, w_j lo, w_j hi), sum_j max(0, w_j lo, w_j hi)]``, and adding the bias
moves it by at most ``|b_o|``.  If that magnitude ``S = max_o(max(P+_o, -P-_o) + |b_o|)``
is at most ``2048 u`` (and every operand raw value at most 2048), every value the FP16
path forms is an integer multiple of ``u`` of magnitude <= 2048 * u: FP16's 11 significant
bits hold it exactly, whatever the accumulator's own precision and order, and the result
the device stores is the exact sum.  The host (or, for an output another node reads, a
``VxFixedPoint`` ``requantize`` step) then rounds and fits it by the policies, exactly.

The proof needs the input on its type's grid: a graph input, or the output of another
fixed-point layer (whose policies applied); an input another kernel writes (pooling,
activation: no rounding inside the graph) sends the layer to the CPU, which rounds it
first.  A node with target ``"CPU"`` always takes the integer path; target ``"DV700"`` takes the
FP16 path without the bound (as for the LRN unit, :mod:`dvsdk.vx.lrn`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .node import Node
from .tensor import Tensor
from .types import DTYPES, ConvertPolicy, KernelEnum, RoundPolicy, Target, Type

__all__ = ["FP16_EXACT", "Decision", "decide", "is_fixed", "type_label"]

#: the largest magnitude up to which FP16 holds every integer (2**11)
FP16_EXACT = 2048
KERNELS = (KernelEnum.CONVOLUTION_LAYER, KernelEnum.DECONVOLUTION_LAYER,
           KernelEnum.FULLY_CONNECTED_LAYER)
FIXED = (Type.UINT8, Type.INT8, Type.INT16)


@dataclass
class Decision:
    """Where a fixed-point layer runs, why, and what its ``VxFixedPoint`` op needs."""

    on_hw: bool
    why: str
    bound: float                          # S in units of 2**-acc_fpp (inf: unbounded)
    attrs: dict = field(default_factory=dict)
    w_raw: np.ndarray | None = None       # OpenVX order
    b_raw: np.ndarray | None = None       # OpenVX order
    acc_fpp: int = 0


def _meta(plan: object, t: Tensor) -> tuple[Type | None, int]:
    m = plan.meta.get(id(t))  # type: ignore[attr-defined]
    return (m.type, m.fpp) if m is not None else (t._type, t._fpp)


def is_fixed(node: Node, plan: object) -> bool:
    """A convolution / deconvolution / fully connected node on fixed-point tensors
    (input, weights, bias if any and output all UINT8, INT8 or INT16)."""
    if node.kdef.enum not in KERNELS:
        return False
    ts = [node._values[0], node._values[1], node._values[2], node._values[-1]]
    return all(t is None or _meta(plan, t)[0] in FIXED for t in ts)


def type_label(t: Type, fpp: int) -> str:
    if t == Type.UINT8:
        return "U8"
    if t == Type.INT8:
        return "S8"
    return f"Q{15 - fpp}.{fpp}" if fpp else "S16"


def _raw(t: Tensor) -> np.ndarray:
    region = t._storage()
    if region.dtype.kind in "iu":
        return region.astype(np.int64)
    return np.rint(np.asarray(region, np.float64) * 2.0 ** t._fpp).astype(np.int64)


def policies(node: Node) -> tuple[int, int]:
    if node.kdef.enum == KernelEnum.FULLY_CONNECTED_LAYER:
        return int(node.value(3)), int(node.value(4))
    p = node.value(3)
    return int(p.overflow_policy), int(p.rounding_policy)


def decide(node: Node, plan: object, rin: tuple[float, float]) -> Decision:
    """Where the fixed-point layer ``node`` runs; ``rin`` bounds its input's real values
    (the verifier's range analysis, :mod:`dvsdk.vx.ranges`)."""
    x, w, b, y = node._values[0], node._values[1], node._values[2], node._values[-1]
    (tx, px), (_, pw), (ty, py) = _meta(plan, x), _meta(plan, w), _meta(plan, y)
    pb = _meta(plan, b)[1] if b is not None else 0
    overflow, rounding = policies(node)
    acc_fpp = px + pw
    attrs = {"in_fpp": px, "w_fpp": pw, "b_fpp": pb, "out_fpp": py,
             "in_dtype": DTYPES[tx].name, "out_dtype": DTYPES[ty].name,
             "overflow": "saturate" if overflow == ConvertPolicy.SATURATE else "wrap",
             "rounding": "to_nearest_even" if rounding == RoundPolicy.TO_NEAREST_EVEN
             else "to_zero"}
    label = f"{type_label(ty, py)} {ConvertPolicy(overflow).name}"
    if acc_fpp != py:
        label += f" {RoundPolicy(rounding).name}"
    w_raw = _raw(w)
    b_raw = None if b is None else _raw(b)
    d = Decision(False, "", math.inf, attrs, w_raw, b_raw, acc_fpp)
    if node.target == Target.CPU:
        d.why = f"{label}: target CPU: exact int64 sum on the CPU"
        return d
    if node.target == Target.DV700:
        d.on_hw = True
        d.why = f"{label}: target DV700 (FP16 sum, no exactness bound checked)"
        return d
    loose = [u.node for u in plan.writes.get(id(x.root), [])  # type: ignore[attr-defined]
             if not is_fixed(u.node, plan)]
    if loose:
        d.why = (f"{label}: input written by {loose[0].kdef.short} {loose[0].name!r}, whose "
                 "values are not rounded to the type inside the graph; exact int64 sum on "
                 "the CPU (of the input rounded to its type)")
        return d
    d.bound = bound(w_raw, b_raw, rin, px, acc_fpp, pb)
    operands = max(int(np.abs(w_raw).max(initial=0)),
                   int(np.abs(b_raw).max(initial=0)) if b_raw is not None else 0)
    lo, hi = _raw_range(rin, px)
    operands = max(operands, abs(lo), abs(hi))
    if d.bound <= FP16_EXACT and operands <= FP16_EXACT:
        d.on_hw = True
        d.why = (f"{label}: FP16 path exact: |partial sums| <= {d.bound:.6g} <= "
                 f"{FP16_EXACT} units of 2^-{acc_fpp} (firmware_spec/fixed_point.md); "
                 "policies applied exactly after")
    elif operands > FP16_EXACT:
        d.why = (f"{label}: FP16 operands not exact: a raw value of magnitude {operands} > "
                 f"{FP16_EXACT}; exact int64 sum on the CPU")
    else:
        d.why = (f"{label}: FP16 sum not provably exact: |sum| bound {d.bound:.2g} > "
                 f"{FP16_EXACT} units of 2^-{acc_fpp}; exact int64 sum on the CPU")
    return d


def output_range(node: Node, plan: object, r: tuple[float, float]) -> tuple[float, float]:
    """The values a fixed-point layer whose exact sum lies in ``r`` writes: rounded to
    its output's step (one step of slack), then saturated into its type, or, wrapping, its
    whole type's range unless the sum already fits."""
    typ, fpp = _meta(plan, node._values[-1])
    info = np.iinfo(DTYPES[typ])
    tlo, thi = info.min / 2 ** fpp, info.max / 2 ** fpp
    lo, hi = r[0] - 2.0 ** -fpp, r[1] + 2.0 ** -fpp
    if policies(node)[0] == ConvertPolicy.WRAP and not tlo <= lo <= hi <= thi:
        return tlo, thi
    return min(max(lo, tlo), thi), max(min(hi, thi), tlo)


def _raw_range(rin: tuple[float, float], fpp: int) -> tuple[int, int]:
    """Raw integer range of values in ``rin`` at ``fpp`` (with 0: padding, inserted zeros)."""
    lo, hi = rin
    if math.isinf(lo) or math.isinf(hi):
        return -(2 ** 62), 2 ** 62
    return min(0, math.floor(lo * 2 ** fpp)), max(0, math.ceil(hi * 2 ** fpp))


def bound(w_raw: np.ndarray, b_raw: np.ndarray | None, rin: tuple[float, float], px: int,
          acc_fpp: int, pb: int) -> float:
    """``S`` of the module docstring: the largest magnitude any partial sum (bias
    included) can reach, in units of ``2**-acc_fpp``; inf where the bias is finer than
    the products' step."""
    lo, hi = _raw_range(rin, px)
    taps = w_raw.reshape(-1, w_raw.shape[-1]).astype(np.float64)   # exact below 2**53
    a, c = taps * lo, taps * hi
    pos = np.maximum(np.maximum(a, c), 0).sum(axis=0)
    neg = np.minimum(np.minimum(a, c), 0).sum(axis=0)
    s = np.maximum(pos, -neg)
    if b_raw is not None:
        if pb > acc_fpp:
            return math.inf
        bmax = np.abs(b_raw.reshape(-1, b_raw.shape[-1])).max(axis=0).astype(np.float64)
        s = s + bmax * 2.0 ** (acc_fpp - pb)
    return float(s.max(initial=0.0))
