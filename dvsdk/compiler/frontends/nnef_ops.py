"""NNEF operations -> IR ops (ONNX types, NCHW): the NNEF frontend's op table.

Each entry of :data:`OPS` converts one NNEF operation (S1 chapter 4; ``formats.md`` §4.2)
into IR ops with the same numbers: element-wise, reduce, shape, matrix, activation and
normalization operations here, the sliding-window ones in :mod:`.nnef_window`.
:data:`LOWERED` lists the standard compound fragments that the Khronos parser expands into
their defining primitives instead (so the op set stays small and each conversion exact);
every other operation (:data:`REFUSED` names the standard ones) is refused by name.  The
README's NNEF table is generated from these tables (``tools/gen_ops_table.py``).

NNEF meanings kept here: broadcasting aligns on the left (:meth:`Converter.aligned`),
``round`` is ``floor(x + 0.5)``, ``elu`` has ``alpha``, ``softmax`` may cover several axes,
``batch_normalization`` takes ``[1, C]`` parameters, ``prelu`` a ``[1, C]`` alpha.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import nnef_window as W
from .nnef_convert import Converter, Refused, with_bias

__all__ = ["OPS", "LOWERED", "REFUSED", "NnefOp", "Converter", "Refused"]


def _reduce(cv: Converter, op: Any, kind: str) -> None:
    x = str(op.inputs["input"])
    xs = cv.shape(x)
    out = str(op.outputs["output"])
    axes = sorted(int(a) for a in op.attribs["axes"])
    if kind == "sum" and op.attribs.get("normalize", False):
        kind = "mean"
    if len(xs) == 4 and axes == [2, 3] and kind in ("mean", "max"):
        cv.emit("GlobalAveragePool" if kind == "mean" else "GlobalMaxPool", [x], [out])
        return
    if kind in ("argmax", "argmin"):
        if len(axes) != 1:
            raise Refused(f"axes={axes}")
        cv.emit("ArgMax" if kind == "argmax" else "ArgMin", [x], [out], axis=axes[0],
                keepdims=1)
        return
    ir = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax", "min": "ReduceMin"}
    cv.emit(ir[kind], [x, cv.const(axes, np.int64)], [out], keepdims=1)


def _unary(ir: str, **fixed: Any) -> Callable[[Converter, Any], None]:
    def conv(cv: Converter, op: Any) -> None:
        x = next(iter(op.inputs.values()))
        cv.emit(ir, [cv.tensor(x)], [str(next(iter(op.outputs.values())))], **fixed)
    return conv


def _binary(ir: str, negate: bool = False,
            dtype: Any = np.float32) -> Callable[[Converter, Any], None]:
    def conv(cv: Converter, op: Any) -> None:
        x, y = op.inputs["x"], op.inputs["y"]
        rank = max(len(cv.shape(x)), len(cv.shape(y)))
        out = str(op.outputs["z"])
        ins = [cv.aligned(x, rank, dtype), cv.aligned(y, rank, dtype)]
        if negate:
            cv.emit("Not", [cv.emit(ir, ins)], [out])
        else:
            cv.emit(ir, ins, [out])
    return conv


def _select(cv: Converter, op: Any) -> None:
    c, t, f = op.inputs["condition"], op.inputs["true_value"], op.inputs["false_value"]
    rank = max(len(cv.shape(v)) for v in (c, t, f))
    cv.emit("Where", [cv.aligned(c, rank, np.bool_), cv.aligned(t, rank),
                      cv.aligned(f, rank)], [str(op.outputs["output"])])


def _clamp(cv: Converter, op: Any) -> None:
    x, lo, hi = op.inputs["x"], op.inputs["a"], op.inputs["b"]
    out = str(op.outputs["y"])
    vlo, vhi = cv.value(lo), cv.value(hi)
    if vlo is not None and vhi is not None and vlo.size == 1 and vhi.size == 1:
        cv.emit("Clip", [str(x), cv.const(float(vlo.reshape(())), hint=f"{cv.base}_min"),
                         cv.const(float(vhi.reshape(())), hint=f"{cv.base}_max")], [out])
        return
    rank = max(len(cv.shape(v)) for v in (x, lo, hi))
    m = cv.emit("Min", [cv.aligned(x, rank), cv.aligned(hi, rank)])
    cv.emit("Max", [m, cv.aligned(lo, rank)], [out])


def _sqr(cv: Converter, op: Any) -> None:
    x = str(op.inputs["x"])
    cv.emit("Mul", [x, x], [str(op.outputs["y"])])


def _round(cv: Converter, op: Any) -> None:  # NNEF round: floor(x + 0.5), halves go up
    cv.emit("Floor", [cv.emit("Add", [str(op.inputs["x"]), cv.const(0.5)])],
            [str(op.outputs["y"])])


def _cast(cv: Converter, op: Any) -> None:
    to = {"scalar": 1, "integer": 7, "logical": 9}.get(str(op.dtype))  # ONNX FLOAT/INT64/BOOL
    if to is None:
        raise Refused(f"type={op.dtype}")
    cv.emit("Cast", [cv.tensor(op.inputs["input"])], [str(op.outputs["output"])], to=to)


def _zero_point_quantize(cv: Converter, op: Any) -> None:
    """S1 zero_point_linear_quantize, from its definition (the Khronos parser's expansion
    gets the lower bound of signed, non-symmetric ranges wrong): q = clamp(round(x / scale)
    + z, lo, r), y = (q - z) * scale."""
    x, out = str(op.inputs["x"]), str(op.outputs["y"])
    bits, signed = int(op.attribs["bits"]), bool(op.attribs["signed"])
    r = 2 ** (bits - 1) - 1 if signed else 2 ** bits - 1
    lo = (-r if op.attribs["symmetric"] else -r - 1) if signed else 0
    rank = len(cv.shape(x))
    z, scale = op.inputs["zero_point"], op.inputs["scale"]
    zv = cv.value(z)
    if zv is not None:
        zt = cv.const(zv.reshape(zv.shape + (1,) * (rank - zv.ndim)) if zv.ndim else zv,
                      hint=f"{cv.base}_zero_point")
    else:
        zt = cv.emit("Cast", [cv.aligned(z, rank, np.int64)], to=1)
    st = cv.aligned(scale, rank)
    q = cv.emit("Floor", [cv.emit("Add", [cv.emit("Div", [x, st]), cv.const(0.5)])])
    q = cv.emit("Clip", [cv.emit("Add", [q, zt]), cv.const(float(lo)), cv.const(float(r))])
    cv.emit("Mul", [cv.emit("Sub", [q, zt]), st], [out])


def _prelu(cv: Converter, op: Any) -> None:
    x, alpha = str(op.inputs["x"]), op.inputs["alpha"]
    out = str(op.outputs["y"])
    v = cv.value(alpha)
    if v is not None and v.size == 1:
        cv.emit("LeakyRelu", [x], [out], alpha=float(v.reshape(())))
        return
    rank = len(cv.shape(x))
    if v is not None:  # [1, C] / [1, C, 1, 1] -> [C, 1, 1] (ONNX aligns on the right)
        full = v.reshape(v.shape + (1,) * (rank - v.ndim))
        cv.emit("PRelu", [x, cv.const(full.reshape(full.shape[1:]), hint=f"{cv.base}_slope")],
                [out])
        return
    cv.emit("PRelu", [x, cv.aligned(alpha, rank)], [out])


def _softmax(cv: Converter, op: Any) -> None:
    x, out = str(op.inputs["x"]), str(op.outputs["y"])
    axes = [int(a) for a in op.attribs.get("axes", [1])]
    if len(axes) == 1:
        cv.emit("Softmax", [x], [out], axis=axes[0], opset=13)
        return
    ax = cv.const(axes, np.int64)  # S1: exp(x - max) / sum over the axes
    e = cv.emit("Exp", [cv.emit("Sub", [x, cv.emit("ReduceMax", [x, ax], keepdims=1)])])
    cv.emit("Div", [e, cv.emit("ReduceSum", [e, ax], keepdims=1)], [out])


def _batch_norm(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    c = cv.shape(x)[1]
    vecs = []
    for key in ("scale", "offset", "mean", "variance"):
        v = cv.channel_vector(op.inputs[key], c, key)
        if v is None:
            raise Refused(f"non-constant {key}")
        vecs.append(cv.const(v, hint=f"{cv.base}_{key}"))
    cv.emit("BatchNormalization", [x, *vecs], [str(op.outputs["output"])],
            epsilon=float(op.attribs["epsilon"]))


def _reshape(cv: Converter, op: Any) -> None:
    out = str(op.outputs["output"])
    cv.emit("Reshape", [str(op.inputs["input"]), cv.const(cv.shapes[out], np.int64)], [out])


def _axes_op(ir: str) -> Callable[[Converter, Any], None]:
    def conv(cv: Converter, op: Any) -> None:
        axes = [int(a) for a in op.attribs["axes"]]
        cv.emit(ir, [str(op.inputs["input"]), cv.const(axes, np.int64)],
                [str(op.outputs["output"])])
    return conv


def _transpose(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    axes = [int(a) for a in op.attribs["axes"]]
    perm = axes + list(range(len(axes), len(cv.shape(x))))
    cv.emit("Transpose", [x], [str(op.outputs["output"])], perm=perm)


def _concat(cv: Converter, op: Any) -> None:
    vals = op.inputs["values"]
    rank = max(len(cv.shape(v)) for v in vals)
    cv.emit("Concat", [cv.aligned(v, rank) for v in vals], [str(op.outputs["value"])],
            axis=int(op.attribs["axis"]))


def _split(cv: Converter, op: Any) -> None:
    outs = [str(o) for o in op.outputs["values"]]
    axis = int(op.attribs["axis"])
    sizes = [cv.shapes[o][axis] for o in outs]
    cv.emit("Split", [str(op.inputs["value"]), cv.const(sizes, np.int64)], outs, axis=axis)


def _slice(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    xs = cv.shape(x)
    a = op.attribs
    axes = [int(v) for v in a["axes"]]
    steps = [int(v) for v in a.get("stride") or [1] * len(axes)]
    if any(s <= 0 for s in steps):
        raise Refused(f"stride={steps}")
    begin = [int(v) for v in a["begin"]]
    end = [int(v) if int(v) != 0 else xs[ax] for v, ax in zip(a["end"], axes)]
    out = str(op.outputs["output"])
    cv.emit("Slice", [x, cv.const(begin, np.int64), cv.const(end, np.int64),
                      cv.const(axes, np.int64), cv.const(steps, np.int64)], [out])


def _tile(cv: Converter, op: Any) -> None:
    cv.emit("Tile", [str(op.inputs["input"]), cv.const(op.attribs["repeats"], np.int64)],
            [str(op.outputs["output"])])


def _stack(cv: Converter, op: Any) -> None:
    axis = int(op.attribs["axis"])
    parts = [cv.emit("Unsqueeze", [str(v), cv.const([axis], np.int64)])
             for v in op.inputs["values"]]
    cv.emit("Concat", parts, [str(op.outputs["value"])], axis=axis)


def _unstack(cv: Converter, op: Any) -> None:
    axis = int(op.attribs["axis"])
    outs = [str(o) for o in op.outputs["values"]]
    parts = [cv.fresh(f"{cv.base}_part") for _ in outs]
    cv.emit("Split", [str(op.inputs["value"]), cv.const([1] * len(outs), np.int64)], parts,
            axis=axis)
    for p, o in zip(parts, outs):
        cv.emit("Squeeze", [p, cv.const([axis], np.int64)], [o])


def _gather(cv: Converter, op: Any) -> None:
    cv.emit("Gather", [str(op.inputs["input"]), cv.tensor(op.inputs["indices"], np.int64)],
            [str(op.outputs["output"])], axis=int(op.attribs.get("axis", 0)))


def _operand_t(cv: Converter, v: Any, transpose: bool) -> str:
    if not transpose:
        return cv.tensor(v)
    c = cv.value(v)
    r = len(cv.shape(v))
    if c is not None and isinstance(v, str):
        return cv.const(np.swapaxes(c, -1, -2), c.dtype, hint=f"{v}_T")
    perm = list(range(r - 2)) + [r - 1, r - 2]
    return cv.emit("Transpose", [str(v)], perm=perm)


def _matmul(cv: Converter, op: Any) -> None:
    a = _operand_t(cv, op.inputs["A"], bool(op.attribs.get("transposeA", False)))
    b = _operand_t(cv, op.inputs["B"], bool(op.attribs.get("transposeB", False)))
    cv.emit("MatMul", [a, b], [str(op.outputs["C"])])


def _linear(cv: Converter, op: Any) -> None:
    x, w = str(op.inputs["input"]), op.inputs["filter"]
    if len(cv.shape(x)) != 2:
        raise Refused(f"input rank {len(cv.shape(x))}")
    out = str(op.outputs["output"])
    with_bias(cv, "Gemm", [x, cv.tensor(w)], op.inputs.get("bias", 0.0), cv.shape(w)[0], out, 2,
              transB=1)


def _attr_unary(ir: str, **names: str) -> Callable[[Converter, Any], None]:
    def conv(cv: Converter, op: Any) -> None:
        attrs = {k: float(op.attribs[v]) for k, v in names.items()}
        cv.emit(ir, [str(op.inputs["x"])], [str(op.outputs["y"])], **attrs)
    return conv


@dataclass(frozen=True)
class NnefOp:
    """How one NNEF operation becomes IR ops (for the conversion and the README)."""

    convert: Callable[[Converter, Any], None]
    ir: tuple[str, ...]    # the IR op types it becomes (the main one first)
    note: str = ""
    cpu_only: tuple[str, ...] = ()  # of those, ones always emitted in a CPU-only form


def _t(*ir: str) -> tuple[str, ...]:
    return ir


OPS: dict[str, NnefOp] = {
    "copy": NnefOp(_unary("Identity"), _t("Identity")),
    "neg": NnefOp(_unary("Neg"), _t("Neg")),
    "rcp": NnefOp(_unary("Reciprocal"), _t("Reciprocal")),
    "exp": NnefOp(_unary("Exp"), _t("Exp")),
    "log": NnefOp(_unary("Log"), _t("Log")),
    "abs": NnefOp(_unary("Abs"), _t("Abs")),
    "sign": NnefOp(_unary("Sign"), _t("Sign")),
    "floor": NnefOp(_unary("Floor"), _t("Floor")),
    "ceil": NnefOp(_unary("Ceil"), _t("Ceil")),
    "round": NnefOp(_round, _t("Add", "Floor"), "floor(x + 0.5)"),
    "not": NnefOp(_unary("Not"), _t("Not")),
    "sqr": NnefOp(_sqr, _t("Mul"), "x * x", cpu_only=_t("Mul")),
    "sqrt": NnefOp(_unary("Sqrt"), _t("Sqrt")),
    "relu": NnefOp(_unary("Relu"), _t("Relu")),
    "sigmoid": NnefOp(_unary("Sigmoid"), _t("Sigmoid")),
    "tanh": NnefOp(_unary("Tanh"), _t("Tanh")),
    "softplus": NnefOp(_unary("Softplus"), _t("Softplus")),
    "elu": NnefOp(_attr_unary("Elu", alpha="alpha"), _t("Elu")),
    "selu": NnefOp(_attr_unary("Selu", alpha="alpha", gamma="lambda"), _t("Selu")),
    "leaky_relu": NnefOp(_attr_unary("LeakyRelu", alpha="alpha"), _t("LeakyRelu")),
    "cast": NnefOp(_cast, _t("Cast")),
    "zero_point_linear_quantize": NnefOp(
        _zero_point_quantize, _t("Div", "Add", "Floor", "Clip", "Sub", "Mul"),
        "fake quantization in the graph: clamp(round(x / scale) + z, lo, r)",
        cpu_only=_t("Floor", "Clip")),
    "prelu": NnefOp(_prelu, _t("PRelu"), "a scalar alpha becomes LeakyRelu"),
    "add": NnefOp(_binary("Add"), _t("Add")),
    "sub": NnefOp(_binary("Sub"), _t("Sub")),
    "mul": NnefOp(_binary("Mul"), _t("Mul")),
    "div": NnefOp(_binary("Div"), _t("Div")),
    "pow": NnefOp(_binary("Pow"), _t("Pow")),
    "min": NnefOp(_binary("Min"), _t("Min")),
    "max": NnefOp(_binary("Max"), _t("Max")),
    "lt": NnefOp(_binary("Less"), _t("Less")),
    "gt": NnefOp(_binary("Greater"), _t("Greater")),
    "le": NnefOp(_binary("LessOrEqual"), _t("LessOrEqual")),
    "ge": NnefOp(_binary("GreaterOrEqual"), _t("GreaterOrEqual")),
    "eq": NnefOp(_binary("Equal"), _t("Equal")),
    "ne": NnefOp(_binary("Equal", negate=True), _t("Equal", "Not")),
    "and": NnefOp(_binary("And", dtype=np.bool_), _t("And")),
    "or": NnefOp(_binary("Or", dtype=np.bool_), _t("Or")),
    "select": NnefOp(_select, _t("Where")),
    "clamp": NnefOp(_clamp, _t("Clip", "Min", "Max"),
                    "scalar bounds: Clip (ReLU6 on the DV700); tensor bounds: Min + Max"),
    "conv": NnefOp(W.conv, _t("Conv", "Pad", "Gather"), "groups 0 = depth-wise; border "
                   "replicate/reflect(-even): an explicit pad first, on the CPU"),
    "deconv": NnefOp(W.deconv, _t("ConvTranspose"), "output_shape via output_padding; border "
                     "constant only"),
    "box": NnefOp(W.box, _t("AveragePool", "Conv"), "normalize: AveragePool; else a depth-wise "
                  "conv of ones"),
    "max_pool": NnefOp(W.max_pool, _t("MaxPool", "Pad"),
                       "border constant with padding: a zero Pad first"),
    "avg_pool": NnefOp(W.avg_pool, _t("AveragePool", "Pad"),
                       "border ignore: count_include_pad 0"),
    "nearest_downsample": NnefOp(W.nearest_downsample, _t("AveragePool"),
                                 "1x1 window, stride = factor"),
    "area_downsample": NnefOp(W.area_downsample, _t("AveragePool")),
    "nearest_upsample": NnefOp(W.nearest_upsample, _t("Resize"), "2x: the upsample run"),
    "multilinear_upsample": NnefOp(W.multilinear_upsample, _t("ConvTranspose", "Resize"),
                                   "border constant, factor 2: depth-wise deconv; replicate "
                                   "or aligned: linear Resize"),
    "sum_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "sum"), _t("ReduceSum", "ReduceMean")),
    "mean_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "mean"),
                          _t("GlobalAveragePool", "ReduceMean"), "axes [2, 3]: global pool"),
    "max_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "max"),
                         _t("GlobalMaxPool", "ReduceMax"), "axes [2, 3]: global pool"),
    "min_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "min"), _t("ReduceMin")),
    "argmax_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "argmax"), _t("ArgMax"),
                            "one axis"),
    "argmin_reduce": NnefOp(lambda cv, op: _reduce(cv, op, "argmin"), _t("ArgMin"),
                            "one axis"),
    "reshape": NnefOp(_reshape, _t("Reshape")),
    "squeeze": NnefOp(_axes_op("Squeeze"), _t("Squeeze")),
    "unsqueeze": NnefOp(_axes_op("Unsqueeze"), _t("Unsqueeze")),
    "transpose": NnefOp(_transpose, _t("Transpose")),
    "concat": NnefOp(_concat, _t("Concat")),
    "split": NnefOp(_split, _t("Split")),
    "slice": NnefOp(_slice, _t("Slice"), "positive strides"),
    "pad": NnefOp(W.pad, _t("Pad", "Gather"), "constant, replicate (edge), reflect; "
                  "reflect-even: a Gather of mirrored indices"),
    "tile": NnefOp(_tile, _t("Tile")),
    "stack": NnefOp(_stack, _t("Unsqueeze", "Concat")),
    "unstack": NnefOp(_unstack, _t("Split", "Squeeze")),
    "gather": NnefOp(_gather, _t("Gather")),
    "matmul": NnefOp(_matmul, _t("MatMul", "Transpose"), "constant B: the FC command"),
    "linear": NnefOp(_linear, _t("Gemm"), "rank-2 input"),
    "softmax": NnefOp(_softmax, _t("Softmax", "ReduceMax", "Sub", "Exp", "ReduceSum", "Div"),
                      "several axes: exp(x - max) / sum", cpu_only=_t("Sub", "Div")),
    "batch_normalization": NnefOp(_batch_norm, _t("BatchNormalization"),
                                  "constant parameters"),
    "local_response_normalization": NnefOp(
        W.lrn, _t("LRN", "AveragePool", "Pow", "Div"), "size [1, n, 1, 1]: LRN; spatial "
        "sizes: x / (bias + alpha * avg_pool(x^2))^beta", cpu_only=_t("Div")),
}

#: standard compound fragments the parser expands into their definitions (S1 chapter 4)
LOWERED = frozenset({
    "rsqr", "rsqrt", "log2", "softabs", "silu", "gelu", "rms_pool", "separable_conv",
    "separable_deconv", "local_mean_normalization", "local_variance_normalization",
    "local_contrast_normalization", "l1_normalization", "l2_normalization", "moments",
    "add_n", "copy_n", "linear_quantize", "min_max_linear_quantize", "logarithmic_quantize",
    "planewise_conv", "planewise_deconv",
})

#: standard operations with no IR form (UnsupportedOps names each use)
REFUSED = ("sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh",
           "atanh", "debox", "argmax_pool", "sample", "desample", "max_pool_with_index",
           "any_reduce", "all_reduce", "avg_roi_pool", "max_roi_pool", "roi_resample",
           "avg_roi_align", "max_roi_align", "update", "avg_unpool", "max_unpool")
