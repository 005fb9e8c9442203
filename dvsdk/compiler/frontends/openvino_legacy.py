"""Legacy OpenVINO IR (v2-v7, the layer catalog before opsets) -> ONNX-semantics IR ops.

Reference: ``formats.md`` §5.1-§5.3 and the seed's "IR Notation Reference Catalog".  Layers
hold their parameters in ``<blobs>`` (``weights``/``biases``/``custom``: byte ranges of the
``.bin`` whose element type is the layer ``precision``) and their shapes in the port dims,
which are static in these IRs; shape layers (Reshape, Flatten, Squeeze, Unsqueeze) and
Resample/Interp/Split/Slice/Crop read their result shape from the output port.

Layouts: Convolution weights GOIYX = ``[O, I/G, ky, kx]``; FullyConnected ``[O, I]``;
Deconvolution ``[I, O/G, ky, kx]`` (Caffe's order, which the IR inherited; §5.3 notes that the
catalog's "GOIYX" is ambiguous for deconvolution).  BatchNormalization's ``weights`` blob is
the variance and ``biases`` the mean (the layer has no scale/shift: the Model Optimizer put a
ScaleShift after it).  Resample NEAREST picks ``floor(out / factor)`` (asymmetric), LINEAR
interpolates with half-pixel centres; Interp is align-corners or asymmetric bilinear.  These
three readings are **[EXT]** (not in the seed) and are pinned by the tests' numpy twins.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...errors import ModelError
from .openvino_common import (
    affine,
    graph_input,
    kernel,
    l2_normalize,
    mvn,
    pool,
    resize,
    window,
)
from .openvino_ir import Builder, Layer, element_type, widen

Converter = Callable[[Builder, Layer, list, list], "list[str] | None"]
#: layer type -> (converter, IR op types it becomes)
LAYERS: dict[str, tuple[Converter, tuple[str, ...]]] = {}


def layer(*types: str, ir: tuple[str, ...] | str = ()) -> Callable[[Converter], Converter]:
    def register(fn: Converter) -> Converter:
        for t in types:
            LAYERS[t] = (fn, (ir,) if isinstance(ir, str) else tuple(ir))
        return fn
    return register


def _blob(b: Builder, L: Layer, key: str, shape: list[int], prec: str = "") -> str:
    """The ``key`` blob as a constant of ``shape`` ("" if the layer has none); its element
    type is the blob's, else ``prec``, else the layer's precision."""
    if key not in L.blobs:
        return ""
    offset, size, own = L.blobs[key]
    prec = own or prec or L.precision or "FP32"
    dt = element_type(prec, L.where(f"{key} precision"))
    count = int(np.prod(shape, dtype=np.int64))
    arr = b.weights.read(L, offset, size, dt, count, key).reshape(shape)
    return b.const(widen(arr, prec), key)


def _param(b: Builder, L: Layer, ins: list, i: int, key: str, shape: list[int]) -> str:
    """Parameter ``i`` from an input port (v6-v7 Const inputs) or from the ``key`` blob."""
    if len(ins) > i:
        return ins[i]
    return _blob(b, L, key, shape)


def _out_dims(L: Layer, port: int = 0) -> list[int]:
    d = L.outputs[port].dims
    if not L.outputs[port].static:
        raise ModelError("legacy IR port without static dims", field=L.where(), value=d)
    return list(d)


def _per_channel(rank: int, c: int) -> list[int]:
    return [1, c] + [1] * (rank - 2)


# --------------------------------------------------------------------------- structure
@layer("Input", ir="input")
def _input(b, L, ins, outs):
    dt = element_type(L.outputs[0].precision or L.precision or "FP32", L.where("precision"))
    return [graph_input(b, L, L.outputs[0].dims, dt, outs[0])]


@layer("Const", ir="constant")
def _const(b, L, ins, outs):
    dims = _out_dims(L)
    c = _blob(b, L, "custom", dims, L.outputs[0].precision)
    if not c:
        raise ModelError("Const layer without a custom blob", field=L.where())
    return [b.const_named(outs[0], b.value(c))]


# --------------------------------------------------------------------------- convolutions
@layer("Convolution", ir="Conv")
def _convolution(b, L, ins, outs):
    in_dims = L.inputs[0].dims
    nsp = len(in_dims) - 2
    k, g, o = kernel(L, nsp, True), L.int1("group", 1), L.int1("output")
    c = in_dims[1]
    if c < 0 or c % g or o % g:
        raise ModelError("channels are not divisible by the group", field=L.where("group"),
                         value=(c, o, g))
    w = _param(b, L, ins, 1, "weights", [o, c // g, *k])
    if not w:
        raise ModelError("Convolution without weights", field=L.where())
    bias = _param(b, L, ins, 2, "biases", [o])
    a = window(L, nsp, True)
    a.update(group=g, kernel_shape=k)
    return [b.op1("Conv", [ins[0], w] + ([bias] if bias else []), outs[0], a)]


@layer("Deconvolution", ir="ConvTranspose")
def _deconvolution(b, L, ins, outs):
    in_dims, out_dims = L.inputs[0].dims, _out_dims(L)
    nsp = len(in_dims) - 2
    k, g, o = kernel(L, nsp, True), L.int1("group", 1), L.int1("output")
    c = in_dims[1]
    if c < 0 or c % g or o % g:
        raise ModelError("channels are not divisible by the group", field=L.where("group"),
                         value=(c, o, g))
    w = _param(b, L, ins, 1, "weights", [c, o // g, *k])
    if not w:
        raise ModelError("Deconvolution without weights", field=L.where())
    bias = _param(b, L, ins, 2, "biases", [o])
    a = window(L, nsp, True)
    a.update(group=g, kernel_shape=k)
    if "pads" in a:  # the output port fixes output_padding
        extra = []
        for i in range(nsp):
            s, d = a["strides"][i], a["dilations"][i]
            full = s * (in_dims[2 + i] - 1) + (k[i] - 1) * d + 1 - a["pads"][i] \
                - a["pads"][nsp + i]
            extra.append(out_dims[2 + i] - full)
        if any(e < 0 or e >= max(a["strides"][i], a["dilations"][i])
               for i, e in enumerate(extra)):
            raise ModelError("Deconvolution output dims do not follow from its attributes",
                             field=L.where(), value=out_dims)
        a["output_padding"] = extra
    return [b.op1("ConvTranspose", [ins[0], w] + ([bias] if bias else []), outs[0], a)]


@layer("FullyConnected", "InnerProduct", ir=("Flatten", "Gemm"))
def _fully_connected(b, L, ins, outs):
    in_dims = L.inputs[0].dims
    n_in = int(np.prod(in_dims[1:], dtype=np.int64))
    o = L.int1("out-size")
    w = _param(b, L, ins, 1, "weights", [o, n_in])
    if not w:
        raise ModelError("FullyConnected without weights", field=L.where())
    bias = _param(b, L, ins, 2, "biases", [o])
    x = ins[0] if len(in_dims) == 2 else b.op1("Flatten", ins[:1], attrs={"axis": 1})
    return [b.op1("Gemm", [x, w] + ([bias] if bias else []), outs[0], {"transB": 1})]


# --------------------------------------------------------------------------- pooling
@layer("Pooling", ir=("MaxPool", "AveragePool"))
def _pooling(b, L, ins, outs):
    method = L.text("pool-method", "max").lower()
    rounding = L.text("rounding_type") or None
    return pool(b, L, ins[0], outs[0], method, L.flag("exclude-pad"), rounding, legacy=True)


# --------------------------------------------------------------------------- activations
@layer("ReLU", ir=("Relu", "LeakyRelu"))
def _relu(b, L, ins, outs):
    slope = L.num("negative_slope", 0.0)
    if slope == 0.0:
        return [b.op1("Relu", ins[:1], outs[0])]
    return [b.op1("LeakyRelu", ins[:1], outs[0], {"alpha": slope})]


_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "exp": "Exp", "not": "Not",
                "relu": "Relu"}


@layer("Activation", ir=("Sigmoid", "Tanh", "Elu", "Clip", "Relu", "Exp"))
def _activation(b, L, ins, outs):
    kind = L.text("type").lower()
    if kind in _ACTIVATIONS:
        return [b.op1(_ACTIVATIONS[kind], ins[:1], outs[0])]
    if kind == "elu":
        return [b.op1("Elu", ins[:1], outs[0], {"alpha": L.num("alpha", 1.0)})]
    if kind == "relu6":
        return [b.op1("Clip", [ins[0], b.const(np.float32(0), "min"),
                               b.const(np.float32(6), "max")], outs[0])]
    return b.refuse(f"type={kind}")


@layer("Clamp", ir="Clip")
def _clamp(b, L, ins, outs):
    lo = b.const(np.float32(L.num("min", 0.0)), "min")
    hi = b.const(np.float32(L.num("max", 6.0)), "max")
    return [b.op1("Clip", [ins[0], lo, hi], outs[0])]


@layer("PReLU", ir="PRelu")
def _prelu(b, L, ins, outs):
    rank, c = len(L.inputs[0].dims), L.inputs[0].dims[1]
    n = 1 if L.flag("channel_shared") else c
    slope = _param(b, L, ins, 1, "weights", [n])
    if not slope:
        raise ModelError("PReLU without slopes", field=L.where())
    v = b.value(slope)
    if v is not None and n > 1:
        slope = b.const(v.reshape([n] + [1] * (rank - 2)), "slope")
    return [b.op1("PRelu", [ins[0], slope], outs[0])]


@layer("SoftMax", ir="Softmax")
def _softmax(b, L, ins, outs):
    return [b.op1("Softmax", ins[:1], outs[0], {"axis": L.int1("axis", 1), "opset": 13})]


# --------------------------------------------------------------------------- element-wise
_ELTWISE = {"sum": "Add", "mul": "Mul", "prod": "Mul", "max": "Max", "min": "Min",
            "sub": "Sub", "div": "Div", "pow": "Pow"}


@layer("Eltwise", ir=("Add", "Mul", "Max", "Min", "Sub", "Div", "Pow"))
def _eltwise(b, L, ins, outs):
    kind = L.text("operation", "sum").lower()
    if kind not in _ELTWISE and kind != "squared_diff":
        return b.refuse(f"operation={kind}")
    xs = list(ins)
    coeff = L.floats("coeff", []) if kind == "sum" else []
    if coeff:
        if len(coeff) != len(xs):
            raise ModelError("Eltwise coeff count differs from the inputs", field=L.where(),
                             value=coeff, limit=len(xs))
        xs = [x if c == 1.0 else b.op1("Mul", [x, b.const(np.float32(c), "coeff")])
              for x, c in zip(xs, coeff)]
    if kind == "squared_diff":
        d = b.op1("Sub", xs[:2])
        return [b.op1("Mul", [d, d], outs[0])]
    y = xs[0]
    for i, x in enumerate(xs[1:], 2):
        y = b.op1(_ELTWISE[kind], [y, x], outs[0] if i == len(xs) else None)
    return [y]


@layer("ScaleShift", ir=("Mul", "Add"))
def _scale_shift(b, L, ins, outs):
    dims = L.inputs[0].dims
    shape = _per_channel(len(dims), dims[1])
    gamma = _param(b, L, ins, 1, "weights", shape)
    beta = _param(b, L, ins, 2, "biases", shape)
    y = ins[0]
    if gamma:
        y = b.op1("Mul", [y, gamma], None if beta else outs[0])
    if beta:
        y = b.op1("Add", [y, beta], outs[0])
    if y == ins[0]:
        y = b.op1("Identity", [y], outs[0])
    return [y]


@layer("Power", ir=("Mul", "Add", "Pow"))
def _power(b, L, ins, outs):
    p, scale, shift = L.num("power", 1.0), L.num("scale", 1.0), L.num("shift", 0.0)
    if p == 1.0:
        return [affine(b, ins[0], scale, shift, outs[0])]
    y = affine(b, ins[0], scale, shift, None) if (scale, shift) != (1.0, 0.0) else ins[0]
    return [b.op1("Pow", [y, b.const(np.float32(p), "power")], outs[0])]


# --------------------------------------------------------------------------- normalization
@layer("BatchNormalization", ir="BatchNormalization")
def _batch_norm(b, L, ins, outs):
    c = L.inputs[0].dims[1]
    var = _blob(b, L, "weights", [c])
    mean = _blob(b, L, "biases", [c])
    if not var or not mean:
        raise ModelError("BatchNormalization needs weights (variance) and biases (mean)",
                         field=L.where())
    ones, zeros = b.const(np.ones(c, np.float32), "gamma"), b.const(np.zeros(c, np.float32),
                                                                      "beta")
    return [b.op1("BatchNormalization", [ins[0], ones, zeros, mean, var], outs[0],
                  {"epsilon": L.num("epsilon", 1e-5)})]


@layer("Norm", "LRN", ir=("LRN", "Mul", "Conv", "Pow", "Div"))
def _norm(b, L, ins, outs):
    n = L.int1("local-size", L.int1("local_size", 5))
    alpha, beta, k = L.num("alpha", 1e-4), L.num("beta", 0.75), L.num("k", L.num("bias", 1.0))
    region = L.text("region", "across").lower()
    if region == "across":
        return [b.op1("LRN", ins[:1], outs[0],
                      {"size": n, "alpha": alpha, "beta": beta, "bias": k})]
    if region != "same":
        return b.refuse(f"region={region}")
    # k + alpha/n^2 * (sum of x^2 over the n x n window, zero outside): a depthwise conv
    x, c = ins[0], L.inputs[0].dims[1]
    lo = (n - 1) // 2
    sq = b.op1("Mul", [x, x])
    kern = b.const(np.full((c, 1, n, n), alpha / (n * n), np.float32), "window")
    den = b.op1("Conv", [sq, kern, b.const(np.full(c, k, np.float32), "k")],
                attrs={"kernel_shape": [n, n], "group": c,
                       "pads": [lo, lo, n - 1 - lo, n - 1 - lo]})
    den = b.op1("Pow", [den, b.const(np.float32(beta), "beta")])
    return [b.op1("Div", [x, den], outs[0])]


@layer("Normalize", ir=("ReduceSumSquare", "Add", "Sqrt", "Div", "Mul"))
def _normalize(b, L, ins, outs):
    dims = L.inputs[0].dims
    axes = list(range(1, len(dims))) if L.flag("across_spatial") else [1]
    n = 1 if L.flag("channel_shared") else dims[1]
    scale = _param(b, L, ins, 1, "weights", [n])
    if scale and n > 1:
        scale = b.const(b.value(scale).reshape([n] + [1] * (len(dims) - 2)), "scale")
    return l2_normalize(b, ins[0], axes, L.num("eps", 1e-10), False, outs[0], scale)


@layer("MVN", ir=("ReduceMean", "Sub", "Mul", "Add", "Sqrt", "Div"))
def _mvn(b, L, ins, outs):
    r = len(L.inputs[0].dims)
    axes = list(range(1 if L.flag("across_channels") else 2, r))
    return mvn(b, ins[0], axes, L.flag("normalize_variance", True), L.num("eps", 1e-9), False,
               outs[0])


@layer("GRN", ir=("ReduceSumSquare", "Add", "Sqrt", "Div"))
def _grn(b, L, ins, outs):
    return l2_normalize(b, ins[0], [1], L.num("bias", 0.0), False, outs[0])


# --------------------------------------------------------------------------- shapes
@layer("Reshape", "Flatten", "Squeeze", "Unsqueeze", ir="Reshape")
def _reshape(b, L, ins, outs):
    return [b.op1("Reshape", [ins[0], b.ints(_out_dims(L), "shape")], outs[0])]


@layer("Permute", ir="Transpose")
def _permute(b, L, ins, outs):
    return [b.op1("Transpose", ins[:1], outs[0], {"perm": L.ints("order")})]


@layer("Concat", ir="Concat")
def _concat(b, L, ins, outs):
    return [b.op1("Concat", ins, outs[0], {"axis": L.int1("axis", 1)})]


@layer("Split", "Slice", ir="Split")
def _split(b, L, ins, outs):
    axis = L.int1("axis", 1) % len(L.inputs[0].dims)
    sizes = [_out_dims(L, i)[axis] for i in range(len(L.outputs))]
    return b.op("Split", [ins[0], b.ints(sizes, "split")], outs, {"axis": axis})


@layer("Crop", ir="Slice")
def _crop(b, L, ins, outs):
    in_dims = L.inputs[0].dims
    axes = [a % len(in_dims) for a in L.ints("axis")]
    if L.has("crop_begin"):                              # type 3
        begin, cut = L.ints("crop_begin"), L.ints("crop_end")
        ends = [in_dims[a] - e for a, e in zip(axes, cut)]
    else:
        begin = L.ints("offset")
        if L.has("dim"):                                 # type 2
            sizes = L.ints("dim")
        elif len(L.inputs) > 1:                          # type 1: the second input's dims
            sizes = [L.inputs[1].dims[a] for a in axes]
        else:
            raise ModelError("Crop needs dim, crop_begin/crop_end or a second input",
                             field=L.where())
        ends = [s + n for s, n in zip(begin, sizes)]
    if not (len(axes) == len(begin) == len(ends)):
        raise ModelError("Crop attribute lengths differ", field=L.where(), value=(axes, begin))
    return [b.op1("Slice", [ins[0], b.ints(begin, "starts"), b.ints(ends, "ends"),
                            b.ints(axes, "axes")], outs[0])]


@layer("Tile", ir="Tile")
def _tile(b, L, ins, outs):
    reps = [1] * len(L.inputs[0].dims)
    reps[L.int1("axis") % len(reps)] = L.int1("tiles")
    return [b.op1("Tile", [ins[0], b.ints(reps, "repeats")], outs[0])]


@layer("Pad", ir="Pad")
def _pad(b, L, ins, outs):
    mode = L.text("pad_mode", "constant").lower()
    if mode not in ("constant", "edge", "reflect"):
        return b.refuse(f"pad_mode={mode}")
    pads = b.ints(L.ints("pads_begin") + L.ints("pads_end"), "pads")
    value = b.const(np.float32(L.num("pad_value", 0.0)), "value")
    return [b.op1("Pad", [ins[0], pads, value], outs[0], {"mode": mode})]


@layer("ShuffleChannels", ir=("Reshape", "Transpose"))
def _shuffle(b, L, ins, outs):
    dims = L.inputs[0].dims
    g = L.int1("group", 1)
    if L.int1("axis", 1) % len(dims) != 1 or len(dims) != 4 or dims[1] % g:
        return b.refuse("axis or group")
    n, c, h, w = dims
    y = b.op1("Reshape", [ins[0], b.ints([n, g, c // g, h, w], "split")])
    y = b.op1("Transpose", [y], attrs={"perm": [0, 2, 1, 3, 4]})
    return [b.op1("Reshape", [y, b.ints(dims, "merge")], outs[0])]


@layer("DepthToSpace", ir="DepthToSpace")
def _depth_to_space(b, L, ins, outs):
    return [b.op1("DepthToSpace", ins[:1], outs[0],
                  {"blocksize": L.int1("block_size", 1), "mode": "DCR"})]


# --------------------------------------------------------------------------- resize
@layer("Resample", ir="Resize")
def _resample(b, L, ins, outs):
    kind = L.text("type", "caffe.ResampleParameter.NEAREST").rsplit(".", 1)[-1].upper()
    if kind == "NEAREST":
        return resize(b, L, ins[0], outs[0], "nearest", "asymmetric", "floor")
    if kind == "LINEAR" and not L.flag("antialias"):
        return resize(b, L, ins[0], outs[0], "linear", "half_pixel")
    return b.refuse(f"type={kind}" + (", antialias" if L.flag("antialias") else ""))


@layer("Interp", ir="Resize")
def _interp(b, L, ins, outs):
    if L.int1("pad_beg", 0) or L.int1("pad_end", 0):
        return b.refuse("pad_beg/pad_end")
    ctm = "align_corners" if L.flag("align_corners") else "asymmetric"
    return resize(b, L, ins[0], outs[0], "linear", ctm)
