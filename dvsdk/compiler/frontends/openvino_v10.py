"""OpenVINO IR v10/v11 (opsets 1-16, as OpenVINO writes them today) -> ONNX-semantics IR ops.

One converter per layer type, registered in :data:`LAYERS` with the IR op types it becomes
(the README's OpenVINO table is generated from it).  Constants (``Const``, the ``Convert``
that decompresses FP16 weights, shape subgraphs of ``ShapeOf``/``Gather``/``Concat`` on
static shapes) fold while loading; everything else becomes IR ops whose ``origin`` is the
layer, so ``--report`` names it.  Semantics follow the OpenVINO operation specifications
(``formats.md`` §5 for the legacy catalog they grew from); where the IR differs from ONNX the
converter adapts it: per-channel ``PRelu`` slopes, ``GroupConvolution`` weights
``[G, O/G, I/G, k...]``, ``StridedSlice`` masks, ``Interpolate`` axes, ``MatMul`` transposes,
``BatchNormInference``-1's input order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import ModelError
from .openvino_common import (
    affine,
    as_int64,
    channel_vector,
    graph_input,
    l2_normalize,
    mvn,
    pool,
    resize,
    window,
)
from .openvino_ir import ONNX_TYPES, Builder, Layer, element_type, widen

Converter = Callable[[Builder, Layer, list, list], "list[str] | None"]
#: layer type -> (converter, IR op types it becomes)
LAYERS: dict[str, tuple[Converter, tuple[str, ...]]] = {}
_BIG = (1 << 63) - 1


def layer(*types: str, ir: tuple[str, ...] | str = ()) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for t in types:
            LAYERS[t] = (fn, (ir,) if isinstance(ir, str) else tuple(ir))
        return fn
    return register


def _rank(L: Layer, i: int = 0) -> int:
    return len(L.inputs[i].dims)


# --------------------------------------------------------------------------- structure
@layer("Parameter", ir="input")
def _parameter(b, L, ins, outs):
    dt = element_type(L.text("element_type", L.outputs[0].precision or "f32"),
                      L.where("element_type"))
    return [graph_input(b, L, L.outputs[0].dims, dt, outs[0])]


@layer("Const", ir="constant")
def _const(b, L, ins, outs):
    et = L.text("element_type")
    if et.lower() not in ("f32", "f16", "f64", "bf16", "i8", "i16", "i32", "i64", "u8", "u16",
                          "u32", "u64", "boolean"):
        return b.refuse(f"element_type={et}")
    dt = element_type(et, L.where("element_type"))
    shape = L.ints("shape", []) if L.has("shape") or not L.outputs else list(L.outputs[0].dims)
    count = int(np.prod(shape, dtype=np.int64))
    arr = b.weights.read(L, L.int1("offset"), L.int1("size"), dt, count).reshape(shape)
    return [b.const_named(outs[0], widen(arr, et))]


@layer("Result", ir="output")
def _result(b, L, ins, outs):
    b.outputs.append(ins[0])
    return []


@layer("Convert", ir="Cast")
def _convert(b, L, ins, outs):
    et = L.text("destination_type")
    dt = element_type(et, L.where("destination_type"))
    v = b.value(ins[0])
    if v is not None:
        return [b.const_named(outs[0], widen(v.astype(dt), et))]
    if dt in (np.float16, np.float64) or et == "bf16":
        return b.refuse(f"destination_type={et} on activations")
    if dt == np.float32 and L.inputs[0].precision.upper() in ("FP32", ""):
        return [b.op1("Identity", ins[:1], outs[0])]
    return [b.op1("Cast", ins[:1], outs[0], {"to": ONNX_TYPES[dt]})]


@layer("ShapeOf", ir="Shape")
def _shape_of(b, L, ins, outs):
    dt = np.int32 if L.text("output_type", "i64") == "i32" else np.int64
    if L.inputs[0].static:
        return [b.const_named(outs[0], np.asarray(L.inputs[0].dims, dt))]
    if dt == np.int64:
        return [b.op1("Shape", ins, outs[0])]
    return [b.op1("Cast", [b.op1("Shape", ins)], outs[0], {"to": ONNX_TYPES[np.dtype(dt)]})]


# --------------------------------------------------------------------------- convolutions
def _conv_like(b, L, x, w, out, nsp, group=1):
    a = window(L, nsp)
    a["group"] = group
    return [b.op1("Conv", [x, w], out, a)]


@layer("Convolution", ir="Conv")
def _convolution(b, L, ins, outs):
    return _conv_like(b, L, ins[0], ins[1], outs[0], _rank(L, 1) - 2)


@layer("GroupConvolution", ir="Conv")
def _group_convolution(b, L, ins, outs):
    g, og, ig, *k = L.inputs[1].dims
    w = b.op1("Reshape", [ins[1], b.ints([g * og, ig, *k], "wshape")])
    return _conv_like(b, L, ins[0], w, outs[0], len(k), g)


def _deconv(b, L, ins, outs, group: int, w: str):
    k = list(L.inputs[1].dims[2 + (group > 1):])
    nsp = len(k)
    a = window(L, nsp)
    a["group"] = group
    a["output_padding"] = L.ints("output_padding", [0] * nsp)
    if len(ins) <= 2:  # OpenVINO pads by pads_begin/pads_end here, whatever auto_pad says
        if a.pop("auto_pad", "") and "pads" not in a:
            a["pads"] = L.ints("pads_begin", [0] * nsp) + L.ints("pads_end", [0] * nsp)
    else:  # output_shape: the padding follows from it (auto_pad distributes it)
        shape = [int(v) for v in b.need(ins[2], "output_shape").reshape(-1)]
        x_sp = L.inputs[0].dims[2:]
        if len(shape) != nsp or any(d < 0 for d in x_sp):
            raise ModelError("output_shape needs static spatial dims", field=L.where(),
                             value=shape)
        # as OpenVINO distributes it (checked against its runtime): explicit keeps
        # pads_begin and puts the rest at the end, same_upper puts the odd pixel at the
        # beginning, same_lower at the end
        auto = a.pop("auto_pad", "")
        given = a.pop("pads", [0] * (2 * nsp))
        begin, end = [], []
        for i in range(nsp):
            s, d = a["strides"][i], a["dilations"][i]
            total = s * (x_sp[i] - 1) + (k[i] - 1) * d + 1 - shape[i] + a["output_padding"][i]
            lo = {"SAME_UPPER": total - total // 2, "SAME_LOWER": total // 2}.get(auto, given[i])
            begin.append(lo), end.append(total - lo)
        if min(begin + end) < 0:
            return b.refuse("output_shape larger than the input allows")
        a["pads"] = begin + end
    return [b.op1("ConvTranspose", [ins[0], w], outs[0], a)]


@layer("ConvolutionBackpropData", ir="ConvTranspose")
def _conv_backprop(b, L, ins, outs):
    return _deconv(b, L, ins, outs, 1, ins[1])


@layer("GroupConvolutionBackpropData", ir="ConvTranspose")
def _group_conv_backprop(b, L, ins, outs):
    g, ig, og, *k = L.inputs[1].dims
    w = b.op1("Reshape", [ins[1], b.ints([g * ig, og, *k], "wshape")])
    return _deconv(b, L, ins, outs, g, w)


# --------------------------------------------------------------------------- element-wise
_BINARY = {"Add": "Add", "Multiply": "Mul", "Subtract": "Sub", "Divide": "Div",
           "Maximum": "Max", "Minimum": "Min", "Power": "Pow"}


def _binary(b, L, ins, outs):
    mode = L.text("auto_broadcast", "numpy").lower()
    if mode not in ("numpy", "none"):
        return b.refuse(f"auto_broadcast={mode}")
    return [b.op1(_BINARY[L.type], ins[:2], outs[0])]


for _t, _ir in _BINARY.items():
    layer(_t, ir=_ir)(_binary)


@layer("SquaredDifference", ir=("Sub", "Mul"))
def _squared_difference(b, L, ins, outs):
    d = b.op1("Sub", ins[:2])
    return [b.op1("Mul", [d, d], outs[0])]


_UNARY = {"Relu": "Relu", "ReLU": "Relu", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
          "HSwish": "HardSwish", "SoftPlus": "Softplus", "Exp": "Exp", "Log": "Log",
          "Sqrt": "Sqrt", "Abs": "Abs", "Negative": "Neg", "Floor": "Floor",
          "Ceiling": "Ceil", "Sign": "Sign", "SoftSign": "Softsign"}


def _unary(b, L, ins, outs):
    return [b.op1(_UNARY[L.type], ins[:1], outs[0])]


for _t, _ir in _UNARY.items():
    layer(_t, ir=_ir)(_unary)


@layer("Elu", ir="Elu")
def _elu(b, L, ins, outs):
    return [b.op1("Elu", ins[:1], outs[0], {"alpha": L.num("alpha", 1.0)})]


@layer("Clamp", ir="Clip")
def _clamp(b, L, ins, outs):
    lo = b.const(np.float32(max(L.num("min"), -3.4e38)), "min")
    hi = b.const(np.float32(min(L.num("max"), 3.4e38)), "max")
    return [b.op1("Clip", [ins[0], lo, hi], outs[0])]


@layer("PRelu", "PReLU", ir="PRelu")
def _prelu(b, L, ins, outs):
    slope = channel_vector(b, ins[1], _rank(L), "slope")
    return [b.op1("PRelu", [ins[0], slope], outs[0])]


@layer("HSigmoid", ir="HardSigmoid")
def _hsigmoid(b, L, ins, outs):
    return [b.op1("HardSigmoid", ins[:1], outs[0], {"alpha": 1 / 6, "beta": 0.5})]


@layer("HardSigmoid", ir="HardSigmoid")
def _hard_sigmoid(b, L, ins, outs):
    alpha = float(b.need(ins[1], "alpha").reshape(-1)[0])
    beta = float(b.need(ins[2], "beta").reshape(-1)[0])
    return [b.op1("HardSigmoid", ins[:1], outs[0], {"alpha": alpha, "beta": beta})]


@layer("Selu", ir="Selu")
def _selu(b, L, ins, outs):
    alpha = float(b.need(ins[1], "alpha").reshape(-1)[0])
    gamma = float(b.need(ins[2], "lambda").reshape(-1)[0])
    return [b.op1("Selu", ins[:1], outs[0], {"alpha": alpha, "gamma": gamma})]


@layer("Swish", ir=("Sigmoid", "Mul"))
def _swish(b, L, ins, outs):
    x = ins[0]
    beta = b.value(ins[1]) if len(ins) > 1 else None
    if len(ins) > 1 and (beta is None or float(beta.reshape(-1)[0]) != 1.0):
        s = b.op1("Sigmoid", [b.op1("Mul", [x, ins[1]])])
    else:
        s = b.op1("Sigmoid", [x])
    return [b.op1("Mul", [x, s], outs[0])]


@layer("Mish", ir=("Softplus", "Tanh", "Mul"))
def _mish(b, L, ins, outs):
    t = b.op1("Tanh", [b.op1("Softplus", ins[:1])])
    return [b.op1("Mul", [ins[0], t], outs[0])]


@layer("SoftMax", "Softmax", ir="Softmax")
def _softmax(b, L, ins, outs):
    return [b.op1("Softmax", ins[:1], outs[0], {"axis": L.int1("axis", 1), "opset": 13})]


@layer("LogSoftmax", ir="LogSoftmax")
def _log_softmax(b, L, ins, outs):
    return [b.op1("LogSoftmax", ins[:1], outs[0], {"axis": L.int1("axis", 1), "opset": 13})]


# --------------------------------------------------------------------------- pooling, reductions
@layer("MaxPool", ir="MaxPool")
def _max_pool(b, L, ins, outs):
    if len(outs) > 1 and b.net.consumers.get((L.id, L.outputs[1].id)):
        return b.refuse("indices output")
    return pool(b, L, ins[0], outs[0], "max", False, L.text("rounding_type", "floor"))


@layer("AvgPool", ir="AveragePool")
def _avg_pool(b, L, ins, outs):
    return pool(b, L, ins[0], outs[0], "avg", L.flag("exclude-pad"),
                L.text("rounding_type", "floor"))


_REDUCE = {"ReduceMean": "ReduceMean", "ReduceMax": "ReduceMax", "ReduceMin": "ReduceMin",
           "ReduceSum": "ReduceSum", "ReduceProd": "ReduceProd", "ReduceL2": "ReduceL2"}


def _reduce(b, L, ins, outs):
    return [b.op1(_REDUCE[L.type], [ins[0], as_int64(b, ins[1])], outs[0],
                  {"keepdims": int(L.flag("keep_dims"))})]


for _t, _ir in _REDUCE.items():
    layer(_t, ir=_ir)(_reduce)


# --------------------------------------------------------------------------- matmul, norms
@layer("MatMul", ir="MatMul")
def _matmul(b, L, ins, outs):
    args = []
    for i, key in ((0, "transpose_a"), (1, "transpose_b")):
        x, r = ins[i], _rank(L, i)
        if L.flag(key) and r >= 2:
            perm = list(range(r - 2)) + [r - 1, r - 2]
            x = b.op1("Transpose", [x], attrs={"perm": perm})
        args.append(x)
    return [b.op1("MatMul", args, outs[0])]


@layer("BatchNormInference", ir="BatchNormalization")
def _batch_norm(b, L, ins, outs):
    # opset1 serializes (gamma, beta, data, mean, variance), opset5 (data, gamma, ...):
    # the data is the input that is not 1-D
    ranks = [len(p.dims) for p in L.inputs]
    d = next((i for i, r in enumerate(ranks) if r != 1), 0)
    rest = [n for i, n in enumerate(ins) if i != d]
    return [b.op1("BatchNormalization", [ins[d], *rest], outs[0],
                  {"epsilon": L.num("epsilon")})]


@layer("NormalizeL2", ir=("ReduceSumSquare", "Max", "Sqrt", "Div"))
def _normalize_l2(b, L, ins, outs):
    axes = [int(a) for a in b.need(ins[1], "axes").reshape(-1)]
    if not axes:
        return b.refuse("empty axes")
    return l2_normalize(b, ins[0], axes, L.num("eps"), L.text("eps_mode", "add") == "max",
                        outs[0])


@layer("GRN", ir=("ReduceSumSquare", "Add", "Sqrt", "Div"))
def _grn(b, L, ins, outs):
    return l2_normalize(b, ins[0], [1], L.num("bias"), False, outs[0])


@layer("MVN", ir=("ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div"))
def _mvn(b, L, ins, outs):
    r = _rank(L)
    if len(ins) > 1:
        axes = [int(a) % r for a in b.need(ins[1], "axes").reshape(-1)]
        inside = L.text("eps_mode", "inside_sqrt").lower() == "inside_sqrt"
    else:  # opset2
        axes = L.ints("reduction_axes", []) or list(range(1 if L.flag("across_channels")
                                                           else 2, r))
        inside = False
    return mvn(b, ins[0], axes, L.flag("normalize_variance", True), L.num("eps"), inside,
               outs[0])


@layer("LRN", ir="LRN")
def _lrn(b, L, ins, outs):
    axes = [int(a) % _rank(L) for a in b.need(ins[1], "axes").reshape(-1)]
    if axes != [1]:
        return b.refuse(f"axes={axes}")
    a = {"size": L.int1("size"), "alpha": L.num("alpha"), "beta": L.num("beta"),
         "bias": L.num("bias", 1.0)}
    return [b.op1("LRN", ins[:1], outs[0], a)]


# --------------------------------------------------------------------------- shapes
@layer("Reshape", ir="Reshape")
def _reshape(b, L, ins, outs):
    return [b.op1("Reshape", [ins[0], as_int64(b, ins[1])], outs[0],
                  {"allowzero": int(not L.flag("special_zero"))})]


@layer("Squeeze", ir="Squeeze")
def _squeeze(b, L, ins, outs):
    return [b.op1("Squeeze", [ins[0]] + [as_int64(b, n) for n in ins[1:2]], outs[0])]


@layer("Unsqueeze", ir="Unsqueeze")
def _unsqueeze(b, L, ins, outs):
    return [b.op1("Unsqueeze", [ins[0], as_int64(b, ins[1])], outs[0])]


@layer("Transpose", ir="Transpose")
def _transpose(b, L, ins, outs):
    perm = [int(p) for p in b.need(ins[1], "order").reshape(-1)]
    if not perm:
        perm = list(range(_rank(L)))[::-1]
    return [b.op1("Transpose", ins[:1], outs[0], {"perm": perm})]


@layer("Concat", ir="Concat")
def _concat(b, L, ins, outs):
    return [b.op1("Concat", ins, outs[0], {"axis": L.int1("axis")})]


@layer("Split", ir="Split")
def _split(b, L, ins, outs):
    axis = int(b.need(ins[1], "axis").reshape(-1)[0])
    n = L.int1("num_splits")
    return b.op("Split", ins[:1], outs, {"axis": axis, "num_outputs": n})


@layer("VariadicSplit", ir="Split")
def _variadic_split(b, L, ins, outs):
    r = _rank(L)
    axis = int(b.need(ins[1], "axis").reshape(-1)[0]) % r
    sizes = [int(v) for v in b.need(ins[2], "split_lengths").reshape(-1)]
    if -1 in sizes:
        dim = L.inputs[0].dims[axis]
        if dim < 0:
            raise ModelError("VariadicSplit of a dynamic axis", field=L.where(), value=axis)
        sizes[sizes.index(-1)] = dim - sum(s for s in sizes if s != -1)
    return b.op("Split", [ins[0], b.ints(sizes, "split")], outs, {"axis": axis})


@layer("Gather", ir="Gather")
def _gather(b, L, ins, outs):
    if L.int1("batch_dims", 0) != 0:
        return b.refuse("batch_dims")
    axis = int(b.need(ins[2], "axis").reshape(-1)[0])
    return [b.op1("Gather", ins[:2], outs[0], {"axis": axis})]


@layer("Slice", ir="Slice")
def _slice(b, L, ins, outs):
    start, stop, step = (as_int64(b, n) for n in ins[1:4])
    axes = as_int64(b, ins[4]) if len(ins) > 4 else ""
    return [b.op1("Slice", [ins[0], start, stop, axes, step], outs[0])]


@layer("StridedSlice", ir=("Slice", "Squeeze", "Unsqueeze"))
def _strided_slice(b, L, ins, outs):
    rank = _rank(L)
    begin = [int(v) for v in b.need(ins[1], "begin").reshape(-1)]
    end = [int(v) for v in b.need(ins[2], "end").reshape(-1)]
    n = len(begin)
    stride = [int(v) for v in b.need(ins[3], "stride").reshape(-1)] if len(ins) > 3 else [1] * n

    def mask(key: str) -> list[bool]:
        m = [bool(v) for v in L.ints(key, [])][:n]
        return m + [False] * (n - len(m))

    bm, em, nm, sm, ell = (mask(k) for k in ("begin_mask", "end_mask", "new_axis_mask",
                                             "shrink_axis_mask", "ellipsis_mask"))
    consuming = sum(1 for j in range(n) if not nm[j] and not ell[j])
    starts, ends, axes, steps, squeeze, final = [], [], [], [], [], []
    ax = 0
    for j in range(n):
        if ell[j]:
            final += ["keep"] * (rank - consuming)
            ax += rank - consuming
            continue
        if nm[j]:
            final.append("new")
            continue
        if stride[j] == 0:
            raise ModelError("StridedSlice stride 0", field=L.where("stride"), value=stride)
        if sm[j]:
            s = 0 if bm[j] else begin[j]
            starts.append(s), ends.append(s + 1 if s != -1 else _BIG), steps.append(1)
            squeeze.append(ax)
        else:
            up = stride[j] > 0
            starts.append((0 if up else _BIG) if bm[j] else begin[j])
            ends.append((_BIG if up else -_BIG) if em[j] else end[j])
            steps.append(stride[j])
            final.append("keep")
        axes.append(ax)
        ax += 1
    if ax > rank:
        raise ModelError("StridedSlice has more entries than the input's rank",
                         field=L.where(), value=n, limit=rank)
    y = ins[0]
    last = [i for i, f in enumerate(final) if f == "new"]
    steps_needed = [bool(axes), bool(squeeze), bool(last)]
    if not any(steps_needed):
        return [b.op1("Identity", [y], outs[0])]
    final_step = max(i for i, s in enumerate(steps_needed) if s)
    if axes:
        y = b.op1("Slice", [y, b.ints(starts, "starts"), b.ints(ends, "ends"),
                            b.ints(axes, "axes"), b.ints(steps, "steps")],
                  outs[0] if final_step == 0 else None)
    if squeeze:
        y = b.op1("Squeeze", [y, b.ints(squeeze, "squeeze")],
                  outs[0] if final_step == 1 else None)
    if last:
        y = b.op1("Unsqueeze", [y, b.ints(last, "unsqueeze")], outs[0])
    return [y]


@layer("Pad", ir="Pad")
def _pad(b, L, ins, outs):
    mode = L.text("pad_mode", "constant").lower()
    if mode not in ("constant", "edge", "reflect"):
        return b.refuse(f"pad_mode={mode}")
    pads = b.op1("Concat", [as_int64(b, ins[1]), as_int64(b, ins[2])], attrs={"axis": 0})
    return [b.op1("Pad", [ins[0], pads] + ins[3:4], outs[0], {"mode": mode})]


@layer("Tile", ir="Tile")
def _tile(b, L, ins, outs):
    reps = [int(v) for v in b.need(ins[1], "repeats").reshape(-1)]
    r = _rank(L)
    if len(reps) > r:
        return b.refuse("repeats longer than the rank")
    return [b.op1("Tile", [ins[0], b.ints([1] * (r - len(reps)) + reps, "repeats")],
                  outs[0])]


@layer("Broadcast", ir="Expand")
def _broadcast(b, L, ins, outs):
    mode = L.text("mode", "numpy").lower()
    if mode not in ("numpy", "bidirectional"):
        return b.refuse(f"mode={mode}")
    return [b.op1("Expand", [ins[0], as_int64(b, ins[1])], outs[0])]


@layer("DepthToSpace", ir="DepthToSpace")
def _depth_to_space(b, L, ins, outs):
    mode = {"blocks_first": "DCR", "depth_first": "CRD"}.get(L.text("mode", "blocks_first"))
    if mode is None or _rank(L) != 4:
        return b.refuse(f"mode={L.text('mode')}")
    return [b.op1("DepthToSpace", ins[:1], outs[0],
                  {"blocksize": L.int1("block_size", 1), "mode": mode})]


@layer("SpaceToDepth", ir="SpaceToDepth")
def _space_to_depth(b, L, ins, outs):
    if L.text("mode", "blocks_first") != "blocks_first" or _rank(L) != 4:
        return b.refuse(f"mode={L.text('mode')}")
    return [b.op1("SpaceToDepth", ins[:1], outs[0], {"blocksize": L.int1("block_size", 1)})]


# --------------------------------------------------------------------------- resize
_CTM = ("half_pixel", "pytorch_half_pixel", "asymmetric", "tf_half_pixel_for_nn",
        "align_corners")


@layer("Interpolate", ir="Resize")
def _interpolate(b, L, ins, outs):
    r = _rank(L)
    if any(L.ints("pads_begin", [0])) or any(L.ints("pads_end", [0])):
        return b.refuse("pads")
    mode = L.text("mode", "nearest").lower()
    if L.version == "opset1":
        align = L.flag("align_corners")
        if mode not in ("nearest", "linear") or L.flag("antialias"):
            return b.refuse(f"mode={mode}")
        ctm = "align_corners" if align else "asymmetric"  # as OpenVINO's runtime computes
        return resize(b, L, ins[0], outs[0], mode, ctm, "simple")
    ir_mode = {"nearest": "nearest", "linear": "linear", "linear_onnx": "linear"}.get(mode)
    if ir_mode is None:
        return b.refuse(f"mode={mode}")
    if L.flag("antialias") and ir_mode == "linear":
        return b.refuse("antialias")
    ctm = L.text("coordinate_transformation_mode", "half_pixel").lower()
    if ctm not in _CTM:
        return b.refuse(f"coordinate_transformation_mode={ctm}")
    near = L.text("nearest_mode", "round_prefer_floor").lower()
    if L.version == "opset11":
        params, axes_in = ins[1], ins[2] if len(ins) > 2 else ""
    else:
        params = ins[2] if L.text("shape_calculation_mode") == "scales" else ins[1]
        axes_in = ins[3] if len(ins) > 3 else ""
    axes = [int(a) % r for a in b.need(axes_in, "axes").reshape(-1)] if axes_in \
        else list(range(r))
    if L.text("shape_calculation_mode") == "scales":
        scales = [float(s) for s in b.need(params, "scales").reshape(-1)]
        return resize(b, L, ins[0], outs[0], ir_mode, ctm, near, scales, axes)
    return resize(b, L, ins[0], outs[0], ir_mode, ctm, near)


# --------------------------------------------------------------------------- misc
@layer("Identity", ir="Identity")
def _identity(b, L, ins, outs):
    return [affine(b, ins[0], 1.0, 0.0, outs[0])]
