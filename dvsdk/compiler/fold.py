"""Shape inference and constant folding over the IR.

* :func:`infer_shapes` computes every tensor's shape and dtype with our own per-op rules
  (``SHAPE_RULES``; onnx.shape_inference is not used) and, on the way, makes attributes
  explicit: Conv/ConvTranspose/pool ``auto_pad``/``output_shape`` become explicit ``pads``
  (and ``output_padding``), defaults are written out, negative axes are made non-negative.
* :func:`fold_constants` evaluates every op whose inputs are all constants with
  :data:`dvsdk.cpu.ops.KERNELS`, and turns ``Shape``/``Size`` of a statically shaped tensor
  into a constant.
* :func:`infer_and_fold` iterates both to a fixed point, so the shape subgraphs that
  torch.onnx.export writes (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, ConstantOfShape,
  Slice, Cast, Transpose feeding Pad/Reshape ...) collapse into constants.

Each function is pure: it returns a new graph and leaves its argument untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cpu.dtypes import onnx_dtype, refusal
from ..cpu.nn import (
    conv_output_shape,
    conv_transpose_output_shape,
    pool_output_shape,
    resolve_conv,
    resolve_conv_transpose,
    resolve_pool,
)
from ..cpu.ops import KERNELS, full_pads, run_op, slice_index, split_sizes
from ..cpu.resize import resize_output_shape
from ..errors import ModelError
from .fold_checks import check_dtypes as _check_dtypes
from .fold_checks import not_constant
from .fold_ops import MORE_RULES
from .fold_ops_b import RULES_B
from .fold_params import check_params
from .ir import Graph, Op
from .limits import check_split, check_tensor, check_window, check_window_attrs, range_length

__all__ = ["infer_shapes", "fold_constants", "infer_and_fold", "check_dtypes", "SHAPE_RULES"]

Shape = tuple[int, ...]
Result = list[tuple[Shape, np.dtype]] | None

_BOOL = np.dtype(np.bool_)
_I64 = np.dtype(np.int64)


class _Ctx:
    """What a shape rule may look at: input shapes, dtypes and constant values."""

    def __init__(self, graph: Graph, op: Op) -> None:
        self.g, self.op = graph, op

    def has(self, i: int) -> bool:
        return bool(self.op.input(i))

    def shape(self, i: int) -> Shape | None:
        return self.g.shape(self.op.input(i))

    def dtype(self, i: int) -> np.dtype | None:
        n = self.op.input(i)
        return self.g.tensors[n].dtype if n else None

    def const(self, i: int) -> np.ndarray | None:
        return self.g.const(self.op.input(i))

    @property
    def where(self) -> str:
        return f"{self.op.type} {self.op.name}"

    def fail(self, message: str, **kw: Any) -> ModelError:
        return ModelError(message, field=f"{self.op.type} {self.op.name}", **kw)


def _bcast(c: _Ctx, *shapes: Shape) -> Shape:
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise c.fail("inputs cannot be broadcast together", value=shapes) from None


# --------------------------------------------------------------------------- rules
def _same(c: _Ctx) -> Result:
    return [(c.shape(0), c.dtype(0))]


def _broadcast(c: _Ctx) -> Result:
    n = [i for i in range(len(c.op.inputs)) if c.has(i)]
    return [(_bcast(c, *(c.shape(i) for i in n)), c.dtype(n[0]))]


def _compare(c: _Ctx) -> Result:
    return [(_bcast(c, c.shape(0), c.shape(1)), _BOOL)]


def _where(c: _Ctx) -> Result:
    return [(_bcast(c, c.shape(0), c.shape(1), c.shape(2)), c.dtype(1))]


def _norm_axis(c: _Ctx, rank: int, key: str = "axis", default: int = 0) -> int:
    axis = int(c.op.attrs.get(key, default))
    if not -rank <= axis < max(rank, 1):
        raise c.fail("axis out of range", value=axis, limit=f"[{-rank}, {rank - 1}]")
    axis %= max(rank, 1)
    c.op.attrs[key] = axis
    return axis


def _conv(c: _Ctx) -> Result:
    x, w = c.shape(0), c.shape(1)
    check_window_attrs(c.op.attrs, c.where)
    a = resolve_conv(c.op.attrs, x, w)
    check_window(a, len(x) - 2, c.where)
    if x[1] != w[1] * a["group"] or w[0] % a["group"]:
        raise c.fail("Conv channel count does not match the weights and group",
                     value=(x[1], tuple(w), a["group"]))
    c.op.attrs = a
    out = conv_output_shape(x, w, a)
    if min(out[1:]) <= 0:                    # no channels (0 filters) or no pixels
        raise c.fail("Conv output would be empty", value=out)
    return [(out, c.dtype(0))]


def _conv_transpose(c: _Ctx) -> Result:
    x, w = c.shape(0), c.shape(1)
    check_window_attrs(c.op.attrs, c.where)
    a = resolve_conv_transpose(c.op.attrs, x, w)
    check_window(a, len(x) - 2, c.where, pads=False)
    if x[1] != w[0] or x[1] % a["group"]:
        raise c.fail("ConvTranspose channel count does not match the weights",
                     value=(x[1], tuple(w), a["group"]))
    c.op.attrs = a
    return [(conv_transpose_output_shape(x, w, a), c.dtype(0))]


def _pool(c: _Ctx) -> Result:
    x = c.shape(0)
    check_window_attrs(c.op.attrs, c.where)
    a = resolve_pool(c.op.attrs, x)
    check_window(a, len(x) - 2, c.where)
    if c.op.type == "AveragePool":
        a.setdefault("count_include_pad", 0)
    c.op.attrs = a
    return [(pool_output_shape(x, a), c.dtype(0))]


def _global_pool(c: _Ctx) -> Result:
    x = c.shape(0)
    return [((x[0], x[1], *([1] * (len(x) - 2))), c.dtype(0))]


def _resize(c: _Ctx) -> Result:
    x = c.shape(0)
    scales = c.const(2) if c.has(2) else None
    sizes = c.const(3) if c.has(3) else None
    if (c.has(2) and scales is None) or (c.has(3) and sizes is None):
        return None
    attrs = c.op.attrs
    if attrs.get("nearest_mode") == "simple" and scales is not None and scales.size:
        s = [float(v) for v in scales.ravel() if float(v) != 1.0]
        if all(v >= 1 for v in s):
            attrs["nearest_mode"] = "floor"
        elif all(v < 1 for v in s):
            attrs["nearest_mode"] = "ceil"
    return [(resize_output_shape(x, scales, sizes, attrs), c.dtype(0))]


def _softmax(c: _Ctx) -> Result:
    opset = int(c.op.attrs.get("opset", 13))
    _norm_axis(c, len(c.shape(0)), default=-1 if opset >= 13 else 1)
    return _same(c)


def _gemm(c: _Ctx) -> Result:
    a, b = c.shape(0), c.shape(1)
    if len(a) != 2 or len(b) != 2:
        raise c.fail("Gemm needs 2-D inputs", value=(a, b))
    m, k = (a[1], a[0]) if c.op.attrs.get("transA", 0) else a
    k2, n = (b[1], b[0]) if c.op.attrs.get("transB", 0) else b
    if k != k2:
        raise c.fail("Gemm inner dimensions differ", value=(a, b))
    if c.has(2):
        _bcast(c, c.shape(2), (m, n))
    return [((m, n), c.dtype(0))]


def _matmul(c: _Ctx) -> Result:
    a, b = list(c.shape(0)), list(c.shape(1))
    a1, b1 = len(a) == 1, len(b) == 1
    if a1:
        a = [1] + a
    if b1:
        b = b + [1]
    if a[-1] != b[-2]:
        raise c.fail("MatMul inner dimensions differ", value=(c.shape(0), c.shape(1)))
    out = list(_bcast(c, tuple(a[:-2]), tuple(b[:-2]))) + [a[-2], b[-1]]
    if a1:
        out.pop(-2)
    if b1:
        out.pop(-1)
    return [(tuple(out), c.dtype(0))]


def _flatten(c: _Ctx) -> Result:
    x = c.shape(0)
    axis = int(c.op.attrs.get("axis", 1))
    axis = axis + len(x) if axis < 0 else axis
    c.op.attrs["axis"] = axis
    return [((int(np.prod(x[:axis])), int(np.prod(x[axis:]))), c.dtype(0))]


def _reshape(c: _Ctx) -> Result:
    shape = c.const(1)
    if shape is None:
        return None
    x = c.shape(0)
    dims = [int(d) for d in shape.reshape(-1)]
    if not c.op.attrs.get("allowzero", 0):
        dims = [x[i] if d == 0 else d for i, d in enumerate(dims)]
    total = int(np.prod(x))
    if dims.count(-1) > 1:
        raise c.fail("Reshape has more than one -1", value=dims)
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1]))
        if known == 0 or total % known:
            raise c.fail("Reshape cannot infer -1", value=(x, dims))
        dims[dims.index(-1)] = total // known
    if int(np.prod(dims)) != total:
        raise c.fail("Reshape changes the element count", value=(x, dims))
    return [(tuple(dims), c.dtype(0))]


def _axes_input(c: _Ctx, i: int, rank: int) -> list[int] | None | bool:
    """Axes from input i (False if it is present but not constant yet)."""
    if not c.has(i):
        return None
    v = c.const(i)
    if v is None:
        return False
    return [int(a) % rank for a in v.reshape(-1)]


def _squeeze(c: _Ctx) -> Result:
    x = c.shape(0)
    axes = _axes_input(c, 1, len(x))
    if axes is False:
        return None
    if axes is None:
        axes = [i for i, d in enumerate(x) if d == 1]
    if any(x[a] != 1 for a in axes):
        raise c.fail("Squeeze of a dimension that is not 1", value=(x, axes))
    return [(tuple(d for i, d in enumerate(x) if i not in axes), c.dtype(0))]


def _unsqueeze(c: _Ctx) -> Result:
    v = c.const(1)
    if v is None:
        return None
    x = list(c.shape(0))
    rank = len(x) + v.size
    for a in sorted(int(a) % rank for a in v.reshape(-1)):
        x.insert(a, 1)
    return [(tuple(x), c.dtype(0))]


def _concat(c: _Ctx) -> Result:
    shapes = [c.shape(i) for i in range(len(c.op.inputs)) if c.has(i)]
    axis = _norm_axis(c, len(shapes[0]))
    out = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != len(out) or any(s[i] != out[i] for i in range(len(s)) if i != axis):
            raise c.fail("Concat inputs differ outside the axis", value=shapes)
    out[axis] = sum(s[axis] for s in shapes)
    return [(tuple(out), c.dtype(0))]


def _split(c: _Ctx) -> Result:
    x = c.shape(0)
    axis = _norm_axis(c, len(x))
    if c.has(1) and c.const(1) is None:
        return None
    attrs = dict(c.op.attrs)
    attrs.setdefault("num_outputs", len(c.op.outputs))
    sizes = split_sizes(x[axis], c.const(1) if c.has(1) else None, attrs)
    check_split(sizes, c.where)
    if sum(sizes) != x[axis] or len(sizes) != len(c.op.outputs):
        raise c.fail("Split sizes do not match", value=(x[axis], sizes))
    return [(x[:axis] + (s,) + x[axis + 1:], c.dtype(0)) for s in sizes]


def _transpose(c: _Ctx) -> Result:
    x = c.shape(0)
    perm = c.op.attrs.get("perm")
    perm = list(range(len(x)))[::-1] if perm is None or len(perm) == 0 else [int(p) for p in perm]
    if sorted(perm) != list(range(len(x))):
        raise c.fail("Transpose perm is not a permutation", value=perm)
    c.op.attrs["perm"] = perm
    return [(tuple(x[p] for p in perm), c.dtype(0))]


def _slice(c: _Ctx) -> Result:
    vals = [c.const(i) if c.has(i) else None for i in range(1, 5)]
    if any(c.has(i) and vals[i - 1] is None for i in range(1, 5)):
        return None
    x = c.shape(0)
    idx = slice_index(x, vals[0], vals[1], vals[2], vals[3])
    return [(tuple(len(range(d)[s]) for d, s in zip(x, idx, strict=True)), c.dtype(0))]


def _gather(c: _Ctx) -> Result:
    x, i = c.shape(0), c.shape(1)
    axis = _norm_axis(c, len(x))
    return [(x[:axis] + tuple(i) + x[axis + 1:], c.dtype(0))]


def _gather_elements(c: _Ctx) -> Result:
    _norm_axis(c, len(c.shape(0)))
    return [(c.shape(1), c.dtype(0))]


def _pad(c: _Ctx) -> Result:
    pads = c.const(1)
    axes = c.const(3) if c.has(3) else None
    if pads is None or (c.has(3) and axes is None):
        return None
    x = c.shape(0)
    p = full_pads(pads, axes, len(x))
    out = tuple(x[i] + p[i] + p[len(x) + i] for i in range(len(x)))
    if min(out, default=1) < 0:
        raise c.fail("Pad crops more than the input", value=(x, p))
    return [(out, c.dtype(0))]


def _expand(c: _Ctx) -> Result:
    shape = c.const(1)
    if shape is None:
        return None
    return [(_bcast(c, c.shape(0), tuple(int(d) for d in shape.reshape(-1))), c.dtype(0))]


def _tile(c: _Ctx) -> Result:
    rep = c.const(1)
    if rep is None:
        return None
    return [(tuple(d * int(r) for d, r in zip(c.shape(0), rep.reshape(-1), strict=True)),
             c.dtype(0))]


def _shape_op(c: _Ctx) -> Result:
    r = len(c.shape(0))
    n = len(range(r)[c.op.attrs.get("start", 0):c.op.attrs.get("end")])
    return [((n,), _I64)]


def _size(c: _Ctx) -> Result:
    return [((), _I64)]


def _cast(c: _Ctx) -> Result:
    return [(c.shape(0), onnx_dtype(c.op.attrs["to"]))]


def _constant_of_shape(c: _Ctx) -> Result:
    v = c.const(0)
    if v is None:
        return None
    value = c.op.attrs.get("value")
    dtype = np.dtype(np.float32) if value is None else np.asarray(value).dtype
    return [(tuple(int(d) for d in v.reshape(-1)), dtype)]


def _range(c: _Ctx) -> Result:
    vals = [c.const(i) for i in range(3)]
    if any(v is None for v in vals):
        return None
    check_tensor(c.op.outputs[0], (range_length(*vals, c.where),), c.dtype(0), c.where)
    return [(run_op("Range", vals, {})[0].shape, c.dtype(0))]


def _reduce(c: _Ctx) -> Result:
    x = c.shape(0)
    if c.has(1):
        axes = _axes_input(c, 1, len(x))
        if axes is False:
            return None
    elif c.op.attrs.get("axes") is not None:
        axes = [int(a) % len(x) for a in c.op.attrs["axes"]]
    else:
        axes = None
    if not axes:
        if c.op.attrs.get("noop_with_empty_axes", 0):
            return _same(c)
        axes = list(range(len(x)))
    keep = c.op.attrs.get("keepdims", 1)
    out = tuple(1 if i in axes else d for i, d in enumerate(x) if keep or i not in axes)
    return [(out, c.dtype(0))]


def _arg(c: _Ctx) -> Result:
    x = c.shape(0)
    axis = _norm_axis(c, len(x))
    keep = c.op.attrs.get("keepdims", 1)
    out = tuple(1 if i == axis else d for i, d in enumerate(x) if keep or i != axis)
    return [(out, _I64)]


def _max_roi_pool(c: _Ctx) -> Result:
    x, rois = c.shape(0), c.shape(1)
    ph, pw = (int(v) for v in c.op.attrs["pooled_shape"])
    if len(x) != 4 or len(rois) != 2 or rois[1] != 5 or min(ph, pw) < 1:
        raise c.fail("MaxRoiPool needs X (N, C, H, W), rois (R, 5), pooled_shape >= 1",
                     value=(tuple(x), tuple(rois), (ph, pw)))
    return [((rois[0], x[1], ph, pw), c.dtype(0))]


def _vx_fixed_point(c: _Ctx) -> Result:
    """dvsdk.vx's exact fixed-point layer (:mod:`dvsdk.cpu.fixedpoint`): its shape is an
    attribute (the OpenVX output's, set at verification)."""
    return [(tuple(int(d) for d in c.op.attrs["vx_output_shape"]), np.dtype(np.float32))]


def _depth_to_space(c: _Ctx) -> Result:
    n, ch, h, w = c.shape(0)
    b = int(c.op.attrs["blocksize"])
    if c.op.type == "DepthToSpace":
        return [((n, ch // (b * b), h * b, w * b), c.dtype(0))]
    return [((n, ch * b * b, h // b, w // b), c.dtype(0))]


_UNARY = ("Relu LeakyRelu PRelu Sigmoid Tanh Elu Selu Clip HardSigmoid HardSwish Softplus "
          "Softsign Sqrt Exp Log Neg Abs Reciprocal Floor Ceil Round Sign Not Identity Dropout "
          "BatchNormalization InstanceNormalization LRN").split()
_BINARY = "Add Sub Mul Div Mod Pow Max Min Sum Mean".split()
_COMPARE = "Equal Less LessOrEqual Greater GreaterOrEqual And Or Xor".split()

#: ops that compute an empty (zero-size) input right: element-wise and data movement
_EMPTY_OK = frozenset(_UNARY[:_UNARY.index("BatchNormalization")] + _BINARY + _COMPARE + (
    "Where Shape Size Cast Reshape Flatten Squeeze Unsqueeze Concat Split Transpose Slice "
    "Gather Expand Tile").split())

#: op type -> rule(ctx) returning [(shape, dtype)] per output, or None if not inferable yet.
SHAPE_RULES: dict[str, Callable[[_Ctx], Result]] = {
    **{t: _same for t in _UNARY},
    **{t: _broadcast for t in _BINARY},
    **{t: _compare for t in _COMPARE},
    "Where": _where,
    "Softmax": _softmax,
    "LogSoftmax": _softmax,
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool,
    "AveragePool": _pool,
    "GlobalAveragePool": _global_pool,
    "GlobalMaxPool": _global_pool,
    "Resize": _resize,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Flatten": _flatten,
    "Reshape": _reshape,
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
    "Shape": _shape_op,
    "Size": _size,
    "Cast": _cast,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    **{t: _reduce for t in ("ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL2 "
                            "ReduceSumSquare ReduceL1 ReduceLogSum ReduceLogSumExp").split()},
    "Hardmax": _softmax,
    "ArgMax": _arg,
    "ArgMin": _arg,
    "DepthToSpace": _depth_to_space,
    "SpaceToDepth": _depth_to_space,
    "MaxRoiPool": _max_roi_pool,
    "VxFixedPoint": _vx_fixed_point,
    **MORE_RULES,
    **RULES_B,
}


# --------------------------------------------------------------------------- drivers
def _infer_in_place(g: Graph, strict: bool) -> bool:
    """One pass over the ops; returns True if any shape was newly set."""
    changed = False
    for op in g.ops:
        ins = [n for n in op.inputs if n]
        if any(g.shape(n) is None or g.tensors[n].dtype is None for n in ins):
            if strict:
                missing = next(n for n in ins if g.shape(n) is None)
                raise ModelError("cannot infer shape: input shape unknown",
                                 field=f"{op.type} {op.name}", value=missing)
            continue
        rule = SHAPE_RULES.get(op.type)
        if rule is None:
            raise ModelError("no shape rule for op", field=f"{op.type} {op.name}")
        check_params(g, op)                      # stated parameters, before the rule uses them
        target = op.attrs.get("dvsdk_target")   # the lowering's placement hook survives
        res = rule(_Ctx(g, op))                  # rules that rewrite attrs explicitly
        if target is not None:
            op.attrs["dvsdk_target"] = target
        if res is None:
            if strict:
                raise not_constant(g, op)
            continue
        for name, (shape, dtype) in zip(op.outputs, res, strict=False):
            if not name:
                continue
            t = g.tensors[name]
            shape = tuple(int(d) for d in shape)
            check_tensor(name, shape, dtype, f"{op.type} {op.name}")
            if t.shape != shape or t.dtype != dtype:
                t.shape, t.dtype = shape, np.dtype(dtype)
                changed = True
    return changed


def infer_shapes(graph: Graph, *, strict: bool = False) -> Graph:
    """Return a copy of ``graph`` with every inferable shape/dtype set and attrs explicit.

    Graph inputs must have static shapes (the frontend guarantees it). With ``strict`` a
    tensor whose shape cannot be inferred raises ModelError naming the op; otherwise it is
    left unknown (a later :func:`fold_constants` may make it inferable).
    """
    g = graph.copy().topo_sort()
    for name in g.inputs:
        t = g.tensors[name]
        if t.shape is None or any(d <= 0 for d in t.shape):
            raise ModelError("graph input has no static shape", field=name, value=t.shape,
                             hint="pass --input-size HxW")
        check_tensor(name, t.shape, t.dtype, f"input {name}")
    _infer_in_place(g, strict)
    return g


def fold_constants(graph: Graph, *, max_elements: int = 1 << 24) -> Graph:
    """Return a copy of ``graph`` with constant subexpressions evaluated.

    An op is folded when all its inputs are constants (``Shape``/``Size`` only need a known
    input shape); its outputs become constant tensors and the op disappears. Outputs larger
    than ``max_elements`` are not materialised.
    """
    g = graph.copy().topo_sort()
    keep: list[Op] = []
    for op in g.ops:
        ins = [n for n in op.inputs if n]
        value: list[np.ndarray] | None = None
        if op.type in ("Shape", "Size") and g.shape(ins[0]) is not None:
            dummy = np.broadcast_to(np.zeros((), np.float32), g.shape(ins[0]))  # no memory
            value = run_op(op.type, [dummy], op.attrs)
        elif ins and op.type in KERNELS and all(g.is_const(n) for n in ins) and refusal(
                op.type, [g.tensors[n].dtype if n else None for n in op.inputs], op.attrs) is None:
            expect = [g.tensors[o].size for o in op.outputs if o]
            if all(e is not None and e <= max_elements for e in expect) or not any(
                    e is not None for e in expect):
                args = [g.const(n) if n else None for n in op.inputs]
                try:
                    value = run_op(op.type, args, op.attrs)
                except ModelError:
                    raise
                except Exception as exc:
                    raise ModelError(f"constant folding failed: {exc}",
                                     field=f"{op.type} {op.name}") from exc
                if any(np.asarray(v).size > max_elements for v in value):
                    value = None
        if value is None:
            keep.append(op)
            continue
        for name, v in zip(op.outputs, value, strict=False):
            if name:
                t = g.tensors[name]
                arr = np.asarray(v)
                if t.dtype is not None and arr.dtype != t.dtype:
                    arr = arr.astype(t.dtype)
                g.tensors[name] = type(t)(name, const=arr)
    g.ops = keep
    # a graph output that became a constant stays a graph output (read via Graph.const)
    return g


def infer_and_fold(graph: Graph, *, max_iter: int = 50) -> Graph:
    """Alternate :func:`infer_shapes` and :func:`fold_constants` until nothing changes.

    Ends with a strict inference (every shape known, else ModelError) and dead-code
    elimination.
    """
    g = graph
    for _ in range(max_iter):
        g = infer_shapes(g)
        n_ops = len(g.ops)
        known = sum(t.shape is not None for t in g.tensors.values())
        g = fold_constants(g)
        g = infer_shapes(g)
        if len(g.ops) == n_ops and sum(t.shape is not None for t in g.tensors.values()) == known:
            break
    g.dead_code_elimination()
    g = infer_shapes(g, strict=True)
    check_dtypes(g)
    return g


def check_dtypes(graph: Graph) -> None:
    """:func:`.fold_checks.check_dtypes` with the ops that compute empty tensors right."""
    _check_dtypes(graph, _EMPTY_OK)
