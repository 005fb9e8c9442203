"""Range analysis: an interval holding every value of every tensor, from the graph's
inputs through its nodes (used at verification, e.g. by :mod:`dvsdk.vx.lrn`).

Sources: a tensor's declared ``value_range`` (:meth:`Tensor.set_value_range`, a promise
the analysis trusts), else its type's range (UINT8 [0, 255], INT8 [-128, 127], INT16
[-32768, 32767] / 2**p, FLOAT16 +-65504, FLOAT32 unbounded).  Through the nodes, with the
static weights' real values: a convolution, deconvolution or fully connected output lies in
``[sum(w+) lo + sum(w-) hi + b, sum(w+) hi + sum(w-) lo + b]`` per output map (0 joins
the input interval: zero padding and inserted zeros), pooling and normalization keep the
input interval (with 0), softmax is [0, 1], an activation maps the interval through its
monotone pieces; a fixed-point layer's output is then rounded and saturated (or wrapped)
into its type (:mod:`dvsdk.vx.exact`).  Sound, and loose after many layers; a declared
range tightens it.
"""

from __future__ import annotations

import math

import numpy as np

from .convert import real_values
from .exact import is_fixed, output_range
from .node import Node
from .tensor import Tensor
from .types import DTYPES, KernelEnum, Type
from .types import ActivationFunction as F
from .verify import Plan

__all__ = ["analyze", "type_range"]

INF = math.inf


def type_range(t: Type, fpp: int) -> tuple[float, float]:
    if t in (Type.FLOAT32, None):
        return -INF, INF
    if t == Type.FLOAT16:
        return -65504.0, 65504.0
    info = np.iinfo(DTYPES[t])
    return float(info.min) / 2 ** fpp, float(info.max) / 2 ** fpp


def _real(t: Tensor) -> np.ndarray:
    """A static tensor's real values in OpenVX order."""
    region = t._storage()
    return region.astype(np.float64) if region.dtype.kind == "f" else real_values(region, t._fpp)


def _with0(r: tuple[float, float]) -> tuple[float, float]:
    return min(r[0], 0.0), max(r[1], 0.0)


def _affine(w: np.ndarray, r: tuple[float, float], bias: np.ndarray | None
            ) -> tuple[float, float]:
    """Bounds of sum_j w[j, o] x_j + b[o] over o, x_j in r; w is (taps, outputs)."""
    lo, hi = _with0(r)
    pos = np.clip(w, 0, None).sum(axis=0)
    neg = np.clip(w, None, 0).sum(axis=0)

    def mul(a: np.ndarray, x: float) -> np.ndarray:
        return np.where(a == 0, 0.0, a * x) if math.isinf(x) else a * x

    with np.errstate(invalid="ignore"):
        top = mul(pos, hi) + mul(neg, lo)
        bot = mul(pos, lo) + mul(neg, hi)
    if bias is not None:
        b = bias.reshape(-1, bias.shape[-1]) if bias.ndim > 1 else bias[None]
        top, bot = top + b.max(axis=0), bot + b.min(axis=0)
    return float(np.min(bot)), float(np.max(top))


def _activation(fn: int, a: float, b: float, r: tuple[float, float]) -> tuple[float, float]:
    lo, hi = r

    def through(f) -> tuple[float, float]:  # noqa: ANN001 - a monotone scalar function
        with np.errstate(all="ignore"):
            vals = [float(f(np.float64(lo))), float(f(np.float64(hi)))]
        vals = [0.0 if math.isnan(x) else x for x in vals]
        return min(vals), max(vals)

    if fn == F.LOGISTIC:
        return through(lambda x: 1 / (1 + np.exp(-x)))
    if fn == F.HYPERBOLIC_TAN:
        return through(lambda x: a * np.tanh(b * x))
    if fn == F.RELU:
        return max(lo, 0.0), max(hi, 0.0)
    if fn == F.BRELU:
        return min(a, max(lo, 0.0)), min(a, max(hi, 0.0))
    if fn == F.SOFTRELU:
        return through(lambda x: np.logaddexp(0, x))
    if fn in (F.ABS, F.SQUARE):
        m = max(abs(lo), abs(hi))
        low = 0.0 if lo <= 0 <= hi else min(abs(lo), abs(hi))
        return (low, m) if fn == F.ABS else (low * low, m * m)
    if fn == F.SQRT:
        return math.sqrt(max(lo, 0.0)), math.sqrt(max(hi, 0.0))
    return through(lambda x: a * x + b)                # LINEAR


def _node_range(node: Node, derived: dict, rin: tuple[float, float]) -> tuple[float, float]:
    k = node.kdef.enum
    if k in (KernelEnum.CONVOLUTION_LAYER, KernelEnum.DECONVOLUTION_LAYER):
        w = _real(node._values[1])
        bias = node._values[2]
        return _affine(w.reshape(-1, w.shape[3]), rin,
                       None if bias is None else _real(bias))
    if k == KernelEnum.FULLY_CONNECTED_LAYER:
        bias = node._values[2]
        w = _real(node._values[1])                    # [K, OFM] or [W, H, IFM, OFM]
        return _affine(w.reshape(-1, w.shape[-1]), rin, None if bias is None else _real(bias))
    if k == KernelEnum.SOFTMAX_LAYER:
        return 0.0, 1.0
    if k == KernelEnum.ACTIVATION_LAYER:
        return _activation(derived["function"], derived["a"], derived["b"], rin)
    return _with0(rin)          # pooling, normalization, ROI pooling


def _intersect(a: tuple[float, float], b: tuple[float, float] | None) -> tuple[float, float]:
    if b is None:
        return a
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo <= hi else b


def analyze(plan: Plan) -> dict[int, tuple[float, float]]:
    """Root tensor id -> an interval holding all its values (every root of the plan)."""
    out: dict[int, tuple[float, float]] = {}
    for rid, root in plan.roots.items():
        if rid not in plan.writes:
            out[rid] = _intersect(type_range(root._type, root._fpp), root.value_range)
    for node in plan.order:
        x = node._values[0]
        rin = _intersect(out.get(id(x.root), (-INF, INF)), x.value_range)
        r = _node_range(node, plan.derived[id(node)], rin)
        if is_fixed(node, plan):                 # its policies apply before any reader
            r = output_range(node, plan, r)
        y: Tensor = node._values[len(node._values) - 1]
        r = _intersect(r, y.value_range)
        rid = id(y.root)
        if rid in out and y._parent is not None:
            old = out[rid]
            r = (min(old[0], r[0]), max(old[1], r[1]))
        out[rid] = _intersect(r, y.root.value_range)
    return out
