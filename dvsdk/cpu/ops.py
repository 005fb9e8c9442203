"""Numpy reference kernels for every op the compiler accepts.

``KERNELS`` maps an ONNX op type to ``kernel(inputs, attrs) -> list[np.ndarray]`` with ONNX
semantics (NCHW; each output in the element type ONNX gives it, for the input types
:mod:`.dtypes` allows). ``inputs`` holds one array per op input, None for an absent
optional input (``""`` in the IR). Attributes are the IR's normalized ones (see
:mod:`dvsdk.compiler.ir`); kernels fall back to ONNX defaults for any that are missing, so
they also run un-normalized graphs.

The compiler uses them for constant folding and, through its interpreter
(:func:`dvsdk.compiler.interpret.run_graph`), for reference outputs; the runtime uses them
as the CPU fallback for ops the DV700 cannot run. This module must not import
onnx: the board has only numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary
from ..hw.fp16 import lookup, to_f16
from .args import optional as _opt
from .attention import attention
from .dtypes import cast_array, onnx_dtype, refusal
from .fixedpoint import OP as VX_FIXED_POINT
from .fixedpoint import fixed_point
from .indexing import INDEXING_KERNELS
from .losses import LOSS_KERNELS
from .ms_attention import OP as MS_ATTENTION
from .ms_attention import ms_attention
from .nn import NN_KERNELS, in_float_type
from .norms import NORM_KERNELS
from .quant import QUANT_KERNELS
from .recurrent import RECURRENT_KERNELS
from .roi import max_roi_pool
from .sample import grid_sample
from .spatial import SPATIAL_KERNELS
from .transformer import TRANSFORMER_KERNELS

__all__ = ["KERNELS", "Kernel", "run_op"]

Arr = np.ndarray
Attrs = dict[str, Any]
Kernel = Callable[[list, Attrs], list]

# --------------------------------------------------------------------------- helpers
# (the kernels run inside run_op's np.errstate(all="ignore"): inf and NaN are values here)
def _unary(fn: Callable[[Arr], Arr]) -> Kernel:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        x = inputs[0]
        return [np.asarray(fn(x)).astype(x.dtype, copy=False)]
    return kernel


def _binary(fn: Callable[[Arr, Arr], Arr], keep_dtype: bool = True) -> Kernel:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        a, b = inputs[0], inputs[1]
        y = np.asarray(fn(a, b))
        return [y.astype(a.dtype, copy=False) if keep_dtype else y]
    return kernel


def _variadic(fn: Callable[[Arr, Arr], Arr], mean: bool = False) -> Kernel:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        xs = [x for x in inputs if x is not None]
        y = xs[0]
        for x in xs[1:]:
            y = fn(y, x)
        if mean:
            y = y / len(xs)
        return [np.asarray(y).astype(xs[0].dtype, copy=False)]
    return kernel


def _div(a: Arr, b: Arr) -> Arr:
    if np.issubdtype(a.dtype, np.integer):  # ONNX integer Div truncates toward zero
        q = np.abs(a) // np.abs(b)
        return np.where((a < 0) ^ (b < 0), -q, q)
    return a / b


def _pow(a: Arr, b: Arr) -> Arr:
    """x ** y in x's type; an integer to a negative integer power truncates toward zero
    (1 and -1 stay +-1, everything else is 0) instead of numpy's ValueError; a float base
    by :func:`dvsdk.hw.elementary.power` (the same bits on every machine)."""
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        neg = b < 0
        if np.any(neg):
            small = np.where(a == 1, 1, np.where(a == -1, np.where(b % 2 == 0, 1, -1), 0))
            return np.where(neg, small, np.power(a, np.where(neg, 0, b)))
    if a.dtype.kind == "f":
        if b.size == 1 and b.ndim <= a.ndim and b.dtype.kind in "fiu":
            v = float(b.reshape(()))  # one integer exponent (LayerNorm's square) as a scalar:
            if v == 2.0 and a.dtype in _SQUARE_EXACT and a.flags.c_contiguous:
                return a * a  # (power's bits and its result's C order: _SQUARE_EXACT)
            if v.is_integer() and 0 < abs(v) <= 64:  # power's own path for it, the same bits
                b = b.reshape(())  # as per element, without the exp(b log|a|) it discards
        return elementary.power(a, b).astype(a.dtype)
    return np.power(a, b)


#: float types whose square by elementary.power (``1.0 * (a * a)`` in float64, the zero and
#: one bases kept) is the type's own ``a * a``: float64 the same product; float32's is exact
#: in float64 (two 24-bit significands, in range), so rounded once as float32's a*a rounds
_SQUARE_EXACT = (np.dtype(np.float32), np.dtype(np.float64))


def _mod(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Mod: ``fmod=0`` (integers only) takes the divisor's sign like Python's %,
    ``fmod=1`` the dividend's like C fmod."""
    fn = np.fmod if attrs.get("fmod", 0) else np.mod
    return _binary(fn)(inputs, attrs)


def _elementary(fn: Callable[[Arr], Arr]) -> Callable[[Arr], Arr]:
    """A float function of :mod:`dvsdk.hw.elementary` (float64, the same bits on every
    machine) in the input's float type; numpy's own for other types."""
    def apply(x: Arr) -> Arr:
        if x.dtype.kind != "f":
            return getattr(np, fn.__name__)(x)
        return in_float_type(fn, x)
    return apply


def _softplus(x: Arr) -> Arr:
    """log(1 + e**x) = max(x, 0) + log1p(e**-|x|), in float64."""
    xd = x.astype(np.float64)
    return (np.where(xd > 0, xd, 0.0) + elementary.log1p(elementary.exp(-np.abs(xd)))
            ).astype(x.dtype)


def _axes(arr: Arr | None, attrs: Attrs, rank: int) -> list[int] | None:
    if arr is not None:
        v = np.asarray(arr).reshape(-1)
    elif attrs.get("axes") is not None:
        v = np.asarray(attrs["axes"]).reshape(-1)
    else:
        return None
    return [int(a) % rank if rank else 0 for a in v]


# --------------------------------------------------------------------------- activations
def _leaky_relu(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    alpha = x.dtype.type(attrs.get("alpha", 0.01))
    return [np.where(x >= 0, x, x * alpha)]


def _prelu(inputs: list, attrs: Attrs) -> list[Arr]:
    x, slope = inputs[0], inputs[1]
    return [np.where(x >= 0, x, x * slope).astype(x.dtype, copy=False)]


def _elu(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    return [elementary.elu(x, alpha).astype(x.dtype)]


def _selu(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.67326319217681884765625))
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))
    return [(gamma * elementary.elu(x, alpha)).astype(x.dtype)]


def _hard_sigmoid(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    alpha, beta = float(attrs.get("alpha", 0.2)), float(attrs.get("beta", 0.5))
    t = x * np.float32(alpha)
    t += np.float32(beta)  # (in place: the same rounding as x * alpha + beta)
    return [arith.clip(t, 0, 1, owned=True).astype(x.dtype, copy=False)]


def _hard_swish(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    t = x * np.float32(1 / 6)
    t += np.float32(0.5)
    return [(x * arith.clip(t, 0, 1, owned=True)).astype(x.dtype, copy=False)]


def _clip(inputs: list, attrs: Attrs) -> list[Arr]:
    """Clip with min/max from inputs 1/2 (opset >= 11) or from attributes (normalized form)."""
    x = inputs[0]
    lo, hi = _opt(inputs, 1), _opt(inputs, 2)
    lo = lo if lo is not None else attrs.get("min")
    hi = hi if hi is not None else attrs.get("max")
    y = x
    for bound, fn in ((lo, arith.maximum), (hi, arith.minimum)):
        if bound is None or np.asarray(bound).size == 0:
            continue
        b = np.asarray(bound).reshape(-1)[0]
        if x.dtype.kind in "iu" and np.asarray(b).dtype.kind == "f":
            # float bounds (the attribute form, +-inf when absent) saturate to the type's range
            info = np.iinfo(x.dtype)
            if np.isnan(b):
                continue
            b = info.min if b <= info.min else info.max if b >= info.max else int(b)
        y = fn(y, np.asarray(b).astype(x.dtype))
    return [y]


def _identity(inputs: list, attrs: Attrs) -> list[Arr]:
    return [inputs[0]]


# --------------------------------------------------------------------------- shape ops
def _shape(inputs: list, attrs: Attrs) -> list[Arr]:
    shape = np.array(inputs[0].shape, dtype=np.int64)
    start, end = attrs.get("start", 0), attrs.get("end")
    return [shape[start:end]]


def _size(inputs: list, attrs: Attrs) -> list[Arr]:
    return [np.array(inputs[0].size, dtype=np.int64)]


def _cast(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Cast (:func:`dvsdk.cpu.dtypes.cast_array`)."""
    return [cast_array(inputs[0], onnx_dtype(attrs["to"]))]


def _constant_of_shape(inputs: list, attrs: Attrs) -> list[Arr]:
    value = attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    shape = tuple(int(d) for d in inputs[0].reshape(-1))
    return [np.full(shape, value[0], dtype=value.dtype)]


def _range(inputs: list, attrs: Attrs) -> list[Arr]:
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    n = max(int(np.ceil((limit - start) / delta)), 0)
    return [(start + delta * np.arange(n)).astype(start.dtype)]


def _reshape(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    shape = [int(d) for d in inputs[1].reshape(-1)]
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x.reshape(shape)]


def _flatten(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    axis = int(attrs.get("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return [x.reshape(lead, -1) if x.size else x.reshape(lead, int(np.prod(x.shape[axis:])))]


def _squeeze(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    axes = _axes(_opt(inputs, 1), attrs, x.ndim)
    if axes is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    return [np.squeeze(x, axis=tuple(axes))]


def _unsqueeze(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    raw = _opt(inputs, 1)
    raw = np.asarray(raw if raw is not None else attrs["axes"]).reshape(-1)
    rank = x.ndim + raw.size
    axes = sorted(int(a) % rank for a in raw)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [x.reshape(shape)]


def _concat(inputs: list, attrs: Attrs) -> list[Arr]:
    xs = [x for x in inputs if x is not None]
    return [np.concatenate(xs, axis=int(attrs.get("axis", 1)))]


def split_sizes(dim: int, split: Arr | None, attrs: Attrs) -> list[int]:
    """Sizes of the Split outputs: the ``split`` input, else ceil(dim / num_outputs) chunks."""
    if split is not None and np.asarray(split).size:
        return [int(s) for s in np.asarray(split).reshape(-1)]
    if attrs.get("split"):
        return [int(s) for s in attrs["split"]]
    n = int(attrs["num_outputs"])
    chunk = -(-dim // n)
    sizes = [chunk] * (n - 1)
    sizes.append(dim - chunk * (n - 1))
    return sizes


def _split(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    axis = int(attrs.get("axis", 0)) % x.ndim
    sizes = split_sizes(x.shape[axis], _opt(inputs, 1), attrs)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _transpose(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    perm = attrs.get("perm")
    return [np.transpose(x, None if perm is None else [int(p) for p in perm])]


def slice_index(shape: Sequence[int], starts: Arr, ends: Arr, axes: Arr | None,
                steps: Arr | None) -> tuple:
    """A numpy index tuple implementing ONNX Slice clamping rules."""
    rank = len(shape)
    starts = np.asarray(starts).reshape(-1)
    ends = np.asarray(ends).reshape(-1)
    axes = range(len(starts)) if axes is None else [int(a) % rank for a in np.ravel(axes)]
    steps = [1] * len(starts) if steps is None else [int(s) for s in np.ravel(steps)]
    index: list[slice] = [slice(None)] * rank
    for s, e, ax, st in zip(starts, ends, axes, steps, strict=True):
        dim = int(shape[ax])
        s, e = int(s), int(e)
        s = s + dim if s < 0 else s
        e = e + dim if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), dim), min(max(e, 0), dim)
        else:
            s, e = min(max(s, 0), dim - 1), min(max(e, -1), dim - 1)
        index[ax] = slice(s, e if e >= 0 else None, st)
    return tuple(index)


def _slice(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    idx = slice_index(x.shape, inputs[1], inputs[2], _opt(inputs, 3), _opt(inputs, 4))
    return [np.ascontiguousarray(x[idx])]


def _gather(inputs: list, attrs: Attrs) -> list[Arr]:
    x, idx = inputs[0], np.asarray(inputs[1]).astype(np.int64)
    axis = int(attrs.get("axis", 0)) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take(x, idx, axis=axis)]


def _gather_elements(inputs: list, attrs: Attrs) -> list[Arr]:
    x, idx = inputs[0], np.asarray(inputs[1]).astype(np.int64)
    axis = int(attrs.get("axis", 0)) % x.ndim
    idx = np.where(idx < 0, idx + x.shape[axis], idx)
    return [np.take_along_axis(x, idx, axis=axis)]


def full_pads(pads: Arr, axes: Arr | None, rank: int) -> list[int]:
    """ONNX Pad ``pads`` (optionally for ``axes`` only) as full-rank ``[begins..., ends...]``."""
    p = [int(v) for v in np.asarray(pads).reshape(-1)]
    if axes is None:
        return p
    ax = [int(a) % rank for a in np.ravel(axes)]
    out = [0] * (2 * rank)
    for j, a in enumerate(ax):
        out[a], out[rank + a] = p[j], p[len(ax) + j]
    return out


def _pad(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    rank = x.ndim
    pads = full_pads(inputs[1], _opt(inputs, 3), rank)
    value = _opt(inputs, 2)
    value = 0 if value is None or np.asarray(value).size == 0 else np.asarray(value).ravel()[0]
    # negative pads crop first
    crop = tuple(slice(-min(pads[i], 0), x.shape[i] + min(pads[rank + i], 0)) for i in range(rank))
    x = x[crop]
    width = [(max(pads[i], 0), max(pads[rank + i], 0)) for i in range(rank)]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=value)]
    np_mode = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}.get(mode)
    if np_mode is None:
        raise ModelError("Pad mode not supported", field="Pad.mode", value=mode)
    return [np.pad(x, width, mode=np_mode)]


def _expand(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    shape = tuple(int(d) for d in inputs[1].reshape(-1))
    out = np.broadcast_shapes(x.shape, shape)
    return [np.ascontiguousarray(np.broadcast_to(x, out))]


def _tile(inputs: list, attrs: Attrs) -> list[Arr]:
    return [np.tile(inputs[0], [int(r) for r in inputs[1].reshape(-1)])]


def _where(inputs: list, attrs: Attrs) -> list[Arr]:
    return [np.where(inputs[0], inputs[1], inputs[2])]


def _reduce(fn: Callable[..., Arr], noop: Callable[[Arr], Arr] | None = None) -> Kernel:
    """A Reduce op; with no axes and ``noop_with_empty_axes`` only its element-wise part,
    ``noop`` (ReduceL2 gives |x|, ReduceSumSquare x², as onnxruntime and the ONNX reference
    do; the others x itself)."""
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        x = inputs[0]
        axes = _axes(_opt(inputs, 1), attrs, x.ndim)
        if axes is not None and len(axes) == 0:
            axes = None
        if axes is None and attrs.get("noop_with_empty_axes", 0):
            return [x if noop is None else np.asarray(noop(x)).astype(x.dtype, copy=False)]
        keep = bool(attrs.get("keepdims", 1))
        ax = tuple(range(x.ndim)) if axes is None else tuple(axes)
        return [np.asarray(fn(x, axis=ax, keepdims=keep)).astype(x.dtype, copy=False)]
    return kernel


def _mean(x: Arr, axis: tuple, keepdims: bool) -> Arr:
    """``np.mean`` (numpy's pairwise sum, then the sum divided in place by the count as a
    ``np.intp``, as numpy's own ``_mean`` does) without its Python layer, for a float32 or
    float64 array and a kept shape (the result an array); np.mean itself otherwise."""
    if x.__class__ is not np.ndarray or x.dtype not in _SQUARE_EXACT or not keepdims:
        return np.mean(x, axis=axis, keepdims=keepdims)
    count = 1
    for a in axis:
        count *= x.shape[a]
    if count == 0:
        return np.mean(x, axis=axis, keepdims=keepdims)
    total = np.add.reduce(x, axis=axis, keepdims=True)
    return np.true_divide(total, np.intp(count), out=total, casting="unsafe")


def _arg(fn: Callable[..., Arr]) -> Kernel:
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        x = inputs[0]
        axis = int(attrs.get("axis", 0)) % x.ndim
        if attrs.get("select_last_index", 0):
            flipped = np.flip(x, axis=axis)
            idx = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            idx = fn(x, axis=axis)
        if attrs.get("keepdims", 1):
            idx = np.expand_dims(idx, axis)
        return [idx.astype(np.int64)]
    return kernel


def _fp16_table(inputs: list, attrs: Attrs) -> list[Arr]:
    """dvsdk's ``Fp16Table(x, table)``: ``table[b]`` for the binary16 bits ``b`` of each
    element of ``x`` (a device tensor: its values are binary16; others are rounded to
    nearest even first, a NaN to 0x7E00); 65,536 float32 entries (dvsdk.compiler.table,
    firmware_spec/netbin.md).  The result has ``x``'s memory order, as an element-wise
    ufunc's would: what reduces it later sums in the same order."""
    x, table = np.asarray(inputs[0], np.float32), np.asarray(inputs[1])
    if table.shape != (65536,) or table.dtype != np.float32:
        raise ModelError("Fp16Table needs 65536 float32 entries", field="table",
                         value=f"{table.dtype}{list(table.shape)}", limit="float32[65536]")
    out = np.empty_like(x)
    dst = out.ravel(order="K")  # (a view: out is contiguous in x's axis order)
    lookup(table, to_f16(x.ravel(order="K")).view(np.uint16), dst)
    if not np.shares_memory(dst, out):  # (empty_like keeps a dense layout: not reached)
        out[...] = table[to_f16(np.ascontiguousarray(x)).view(np.uint16)].reshape(x.shape)
    return [out]


def _matmul(inputs: list, attrs: Attrs) -> list[Arr]:
    return [arith.matmul_nd(inputs[0], inputs[1])]


#: IR op types no model may name in the default domain: ops only the compiler writes
#: (firmware_spec/netbin.md) and ``MsAttention``, what the ONNX frontend makes of the
#: ``com.microsoft`` domain's ``Attention``; the frontends refuse them by these names and
#: the supported-ops tables leave them out
COMPILER_OPS = frozenset({"Fp16Table", MS_ATTENTION, VX_FIXED_POINT})

KERNELS: dict[str, Kernel] = {
    # activations / unary math
    "Relu": _unary(lambda x: arith.maximum(x, np.zeros((), x.dtype))),
    "LeakyRelu": _leaky_relu,
    "PRelu": _prelu,
    "Sigmoid": _unary(_elementary(elementary.sigmoid)),
    "Tanh": _unary(_elementary(elementary.tanh)),
    "Elu": _elu,
    "Selu": _selu,
    "Clip": _clip,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "Softplus": _unary(_softplus),
    "Softsign": _unary(lambda x: x / (1 + np.abs(x))),
    "Sqrt": _unary(np.sqrt),
    "Exp": _unary(_elementary(elementary.exp)),
    "Log": _unary(_elementary(elementary.log)),
    "Neg": _unary(np.negative),
    "Abs": _unary(np.abs),
    "Reciprocal": _unary(lambda x: 1 / x),
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Round": _unary(np.round),
    "Sign": _unary(np.sign),
    "Not": _unary(np.logical_not),
    "Identity": _identity,
    "Dropout": _identity,
    # binary / variadic
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Mod": _mod,
    "Max": _variadic(arith.maximum),
    "Min": _variadic(arith.minimum),
    "Sum": _variadic(np.add),
    "Mean": _variadic(np.add, mean=True),
    "Equal": _binary(np.equal, keep_dtype=False),
    "Less": _binary(np.less, keep_dtype=False),
    "LessOrEqual": _binary(np.less_equal, keep_dtype=False),
    "Greater": _binary(np.greater, keep_dtype=False),
    "GreaterOrEqual": _binary(np.greater_equal, keep_dtype=False),
    "And": _binary(np.logical_and, keep_dtype=False),
    "Or": _binary(np.logical_or, keep_dtype=False),
    "Xor": _binary(np.logical_xor, keep_dtype=False),
    "Where": _where,
    "MatMul": _matmul,
    # shape / data movement
    "Shape": _shape,
    "Size": _size,
    "Cast": _cast,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Concat": _concat,
    "Split": _split,
    "Transpose": _transpose,
    "Slice": _slice,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Pad": _pad,
    "Expand": _expand,
    "Tile": _tile,
    # reductions
    "ReduceSum": _reduce(np.sum),
    "ReduceMean": _reduce(_mean),
    "ReduceMax": _reduce(arith.reduce_max),
    "ReduceMin": _reduce(arith.reduce_min),
    "ReduceProd": _reduce(np.prod),
    "ReduceL2": _reduce(lambda x, axis, keepdims: np.sqrt(np.sum(
        np.square(x), axis=axis, keepdims=keepdims)), np.abs),
    "ReduceSumSquare": _reduce(lambda x, axis, keepdims: np.sum(
        np.square(x), axis=axis, keepdims=keepdims), np.square),
    "ArgMax": _arg(np.argmax),
    "ArgMin": _arg(np.argmin),
    **NN_KERNELS,
    "MaxRoiPool": max_roi_pool,
    **TRANSFORMER_KERNELS,
    "Attention": attention,
    MS_ATTENTION: ms_attention,
    **RECURRENT_KERNELS,
    "GridSample": grid_sample,
    **INDEXING_KERNELS,
    **QUANT_KERNELS,
    **SPATIAL_KERNELS,
    **NORM_KERNELS,
    **LOSS_KERNELS,
    "Fp16Table": _fp16_table,
    VX_FIXED_POINT: fixed_point,
}


# --------------------------------------------------------------------------- interpreter
def run_op(op_type: str, inputs: list, attrs: Mapping[str, Any]) -> list[Arr]:
    """Run one kernel; ModelError if there is none, or if it does not compute the inputs'
    element types (:func:`dvsdk.cpu.dtypes.refusal`)."""
    kernel = KERNELS.get(op_type)
    if kernel is None:
        raise ModelError("no CPU kernel for op", field="op_type", value=op_type)
    why = refusal(op_type, [None if x is None else x.dtype if x.__class__ is np.ndarray
                            else np.asarray(x).dtype for x in inputs], attrs)
    if why is not None:
        raise ModelError("the CPU kernel does not support this element type", field=op_type,
                         value=why)
    if op_type in _MOVES:  # (no arithmetic, nothing to warn of: no errstate, ~0.7 us)
        return kernel(inputs, dict(attrs))
    with np.errstate(all="ignore"):  # inf and NaN are values here (FP16 overflow), as on
        return kernel(inputs, dict(attrs))  # the device: no numpy warnings


#: kernels that only move or view elements (no floating-point operation that could warn)
_MOVES = frozenset({"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity",
                    "Dropout", "Shape", "Size"})
