"""Keras layers -> IR ops: one converter per Keras class, and the table of them (:data:`LAYERS`).

Every converter takes the :class:`~.keras_ir.Builder`, the :class:`~.keras_ir.Layer` and its
input tensors and returns the output tensor; conventions in :mod:`.keras_ir`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .keras_ir import (
    ACTIVATIONS,
    KT,
    NCHW_TO_NHWC,
    NHWC_TO_NCHW,
    TO_IR,
    Builder,
    Layer,
    activate,
    channels_last,
    check_activation,
    clip,
    ints,
    ir_axis,
    ir_shape,
    one,
    positive,
    rank,
    softmax,
    window,
)
from .keras_prep import (
    center_crop,
    check_layer_norm,
    layer_norm,
    layer_scale,
    normalization,
    rescaling,
)


# ----------------------------------------------------------------------------- convolutions
def _conv_geometry(layer: Layer, x: KT):
    _, h, w, cin = x.shape
    k = ints(layer.cfg.get("kernel_size"), 2, "kernel_size", layer)
    s = ints(layer.cfg.get("strides", 1), 2, "strides", layer)
    d = ints(layer.cfg.get("dilation_rate", 1), 2, "dilation_rate", layer)
    for v, what in ((k, "kernel_size"), (s, "strides"), (d, "dilation_rate")):
        positive(v, what, layer)
    return (h, w), cin, k, s, d


def _conv_op(b: Builder, layer: Layer, x: str, kernel: np.ndarray, bias: np.ndarray | None,
             k, s, d, pads: list[int], group: int) -> str:
    ins = [x, b.const(f"{layer.name}_kernel", kernel)]
    if bias is not None:
        ins.append(b.const(f"{layer.name}_bias", bias))
    return b.op("Conv", ins, {"kernel_shape": list(k), "strides": list(s), "dilations": list(d),
                              "pads": pads, "group": group})


def _bias(layer: Layer, n: int) -> np.ndarray | None:
    return layer.weight("bias", (n,)) if layer.cfg.get("use_bias", True) else None


def conv2d(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    size, cin, k, s, d = _conv_geometry(layer, x)
    filters = int(layer.cfg.get("filters", 0))
    groups = int(layer.cfg.get("groups", 1) or 1)
    positive((filters, groups), "filters/groups", layer)
    if cin % groups or filters % groups:
        raise layer.err("channels not divisible by groups", value=(cin, filters, groups))
    kernel = layer.weight("kernel", (*k, cin // groups, filters))
    pads, (oh, ow) = window(layer, size, k, s, d)
    y = _conv_op(b, layer, x.name, kernel.transpose(3, 2, 0, 1), _bias(layer, filters),
                 k, s, d, pads, groups)
    return activate(b, layer, KT(y, (1, oh, ow, filters)))


def _depthwise(b: Builder, layer: Layer, x: KT, with_bias: bool) -> KT:
    size, cin, k, s, d = _conv_geometry(layer, x)
    mult = int(layer.cfg.get("depth_multiplier", 1))
    positive((mult,), "depth_multiplier", layer)
    dk = layer.weight("depthwise_kernel", (*k, cin, mult))
    pads, (oh, ow) = window(layer, size, k, s, d)
    w = dk.transpose(2, 3, 0, 1).reshape(cin * mult, 1, *k)   # output channel c * mult + m
    bias = _bias(layer, cin * mult) if with_bias else None
    y = _conv_op(b, layer, x.name, w, bias, k, s, d, pads, cin)
    return KT(y, (1, oh, ow, cin * mult))


def depthwise_conv2d(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    return activate(b, layer, _depthwise(b, layer, x, True))


def separable_conv2d(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    y = _depthwise(b, layer, x, False)
    filters = int(layer.cfg.get("filters", 0))
    positive((filters,), "filters", layer)
    pk = layer.weight("pointwise_kernel", (1, 1, y.shape[3], filters))
    z = _conv_op(b, layer, y.name, pk.transpose(3, 2, 0, 1), _bias(layer, filters),
                 (1, 1), (1, 1), (1, 1), [0, 0, 0, 0], 1)
    return activate(b, layer, KT(z, (*y.shape[:3], filters)))


def _deconv_length(n: int, k_eff: int, s: int, padding: str, opad: int | None) -> int:
    """Keras ``deconv_output_length``."""
    if opad is None:
        return n * s + max(k_eff - s, 0) if padding == "valid" else n * s
    pad = k_eff // 2 if padding == "same" else 0
    return (n - 1) * s + k_eff - 2 * pad + opad


def conv2d_transpose(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    (h, w), cin, k, s, d = _conv_geometry(layer, x)
    filters = int(layer.cfg.get("filters", 0))
    positive((filters,), "filters", layer)
    padding = str(layer.cfg.get("padding", "valid")).lower()
    if padding not in ("valid", "same"):
        raise layer.err("padding not supported", value=padding, limit=("valid", "same"))
    opad_cfg = layer.cfg.get("output_padding")
    opads = (None, None) if opad_cfg is None else ints(opad_cfg, 2, "output_padding", layer)
    kernel = layer.weight("kernel", (*k, filters, cin))
    begins, ends, extra, out = [], [], [], []
    for n, kk, ss, dd, op in zip((h, w), k, s, d, opads):
        k_eff = (kk - 1) * dd + 1
        length = _deconv_length(n, k_eff, ss, padding, op)
        full = (n - 1) * ss + k_eff   # the whole transposed convolution
        total = max(full - length, 0) if padding == "same" else 0
        begin = total // 2
        if length < 1 or full - begin < 1:
            raise layer.err("output size out of range", value=length, limit=">= 1")
        end = max(full - begin - length, 0)
        begins.append(begin)
        ends.append(end)
        extra.append(length - (full - begin - end))
        out.append(length)
    ins = [x.name, b.const(f"{layer.name}_kernel", kernel.transpose(3, 2, 0, 1))]
    bias = _bias(layer, filters)
    if bias is not None:
        ins.append(b.const(f"{layer.name}_bias", bias))
    y = b.op("ConvTranspose", ins, {"kernel_shape": list(k), "strides": list(s),
                                    "dilations": list(d), "pads": begins + ends,
                                    "output_padding": extra, "group": 1})
    return activate(b, layer, KT(y, (1, out[0], out[1], filters)))


# ----------------------------------------------------------------------------- dense, norm
def dense(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = one(layer, xs)
    units = int(layer.cfg.get("units", 0))
    positive((units,), "units", layer)
    fan_in = x.shape[-1]
    kernel = layer.weight("kernel", (fan_in, units))
    bias = _bias(layer, units)
    if len(x.shape) == 2:
        if x.chw is not None:  # Keras rows are (h, w, c); the IR flattened (c, h, w)
            h, w, c = x.chw[:3]
            kernel = kernel.reshape(h, w, c, units).transpose(2, 0, 1, 3).reshape(-1, units)
        ins = [x.name, b.const(f"{layer.name}_kernel", kernel)]
        if bias is not None:
            ins.append(b.const(f"{layer.name}_bias", bias))
        y = b.op("Gemm", ins)
    elif len(x.shape) == 4:   # on the channels of every pixel: a 1x1 convolution
        y = _conv_op(b, layer, x.name, kernel.T[:, :, None, None], bias, (1, 1), (1, 1),
                     (1, 1), [0, 0, 0, 0], 1)
    else:
        y = b.op("MatMul", [x.name, b.const(f"{layer.name}_kernel", kernel)])
        if bias is not None:
            y = b.op("Add", [y, b.const(f"{layer.name}_bias", bias)])
    return activate(b, layer, KT(y, (*x.shape[:-1], units)))


def batch_norm(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    r = len(x.shape)
    ax = ir_axis(layer, layer.cfg.get("axis", -1), r)
    n = x.shape[ax if r != 4 else [0, 3, 1, 2][ax]]
    gamma = layer.weight("gamma", (n,)) if layer.cfg.get("scale", True) else np.ones(n, np.float32)
    beta = layer.weight("beta", (n,)) if layer.cfg.get("center", True) \
        else np.zeros(n, np.float32)
    mean = layer.weight("moving_mean", (n,))
    var = layer.weight("moving_variance", (n,))
    eps = float(layer.cfg.get("epsilon", 1e-3))
    if ax == 1:
        y = b.op("BatchNormalization", [x.name] + [b.const(f"{layer.name}_{k}", v) for k, v in (
            ("gamma", gamma), ("beta", beta), ("mean", mean), ("var", var))], {"epsilon": eps})
    else:   # another axis: the same affine map, broadcast along that IR axis
        a = (gamma / np.sqrt(var.astype(np.float64) + eps)).astype(np.float32)
        shape = [1] * r
        shape[ax] = n
        y = b.op("Mul", [x.name, b.const(f"{layer.name}_scale", a.reshape(shape))])
        y = b.op("Add", [y, b.const(f"{layer.name}_shift", (beta - mean * a).reshape(shape))])
    return KT(y, x.shape)


# ----------------------------------------------------------------------------- activations
def activation_layer(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return activate(b, layer, b.plain(one(layer, xs)))


def _num(layer: Layer, key: str, default: float | None) -> float | None:
    v = layer.cfg.get(key, default)
    if v is None:
        return None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
        raise layer.err(f"{key} must be a number", value=v)
    return float(v)


def relu_layer(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """Keras ReLU: x >= max_value -> max_value; threshold <= x -> x; else slope (x - t)."""
    x = b.plain(one(layer, xs))
    top = _num(layer, "max_value", None)
    slope = _num(layer, "negative_slope", 0.0)
    t = _num(layer, "threshold", 0.0)
    if top is not None and top < 0:
        raise layer.err("max_value must be >= 0", value=top)
    if t == 0.0:
        y = b.op("Relu", [x.name]) if slope == 0.0 else \
            b.op("LeakyRelu", [x.name], {"alpha": slope})
        if top is not None:
            y = clip(b, y, 0.0 if slope == 0.0 else None, top)
    else:
        below = b.op("Mul", [b.op("Sub", [x.name, b.const("threshold", t)]),
                             b.const("slope", slope)])
        y = b.op("Where", [b.op("GreaterOrEqual", [x.name, b.const("threshold", t)]), x.name,
                           below])
        if top is not None:
            y = clip(b, y, None, top)
    return KT(y, x.shape)


def leaky_relu(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    alpha = _num(layer, "negative_slope", None)
    if alpha is None:
        alpha = _num(layer, "alpha", 0.3)
    return KT(b.op("LeakyRelu", [x.name], {"alpha": alpha}), x.shape)


def elu_layer(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    return KT(b.op("Elu", [x.name], {"alpha": _num(layer, "alpha", 1.0)}), x.shape)


def thresholded_relu(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    t = _num(layer, "theta", 1.0)
    zero = b.const("zero", 0.0)
    y = b.op("Where", [b.op("Greater", [x.name, b.const("theta", t)]), x.name, zero])
    return KT(y, x.shape)


def prelu(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    shared = layer.cfg.get("shared_axes") or []
    shared = [shared] if isinstance(shared, int) else list(shared)
    want = list(x.shape[1:])
    for a in shared:
        if not isinstance(a, int) or not 1 <= a < len(x.shape):
            raise layer.err("shared_axes out of range", value=shared)
        want[a - 1] = 1
    alpha = layer.weight("alpha", tuple(want))
    if len(x.shape) == 4:
        alpha = alpha.transpose(2, 0, 1)   # (H, W, C) -> (C, H, W)
    return KT(b.op("PRelu", [x.name, b.const(f"{layer.name}_alpha", alpha)]), x.shape)


def softmax_layer(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    return KT(softmax(b, x, layer.cfg.get("axis", -1), layer), x.shape)


# ----------------------------------------------------------------------------- pooling
def _pool(b: Builder, layer: Layer, xs: list[KT], op_type: str) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    _, h, w, c = x.shape
    k = ints(layer.cfg.get("pool_size", 2), 2, "pool_size", layer)
    strides = layer.cfg.get("strides")
    s = k if strides is None else ints(strides, 2, "strides", layer)
    positive(k + s, "pool_size/strides", layer)
    pads, (oh, ow) = window(layer, (h, w), k, s)
    attrs = {"kernel_shape": list(k), "strides": list(s), "pads": pads}
    if op_type == "AveragePool":
        attrs["count_include_pad"] = 0   # Keras averages over the window inside the input
    return KT(b.op(op_type, [x.name], attrs), (1, oh, ow, c))


def max_pool(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return _pool(b, layer, xs, "MaxPool")


def avg_pool(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return _pool(b, layer, xs, "AveragePool")


def _global_pool(b: Builder, layer: Layer, xs: list[KT], op_type: str) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    c = x.shape[3]
    y = b.op(op_type, [x.name])
    if layer.cfg.get("keepdims", False):
        return KT(y, (1, 1, 1, c))
    return KT(b.op("Flatten", [y], {"axis": 1}), (1, c))


def global_avg_pool(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return _global_pool(b, layer, xs, "GlobalAveragePool")


def global_max_pool(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return _global_pool(b, layer, xs, "GlobalMaxPool")


# ----------------------------------------------------------------------------- spatial
def _pairs(layer: Layer, key: str) -> tuple[int, int, int, int]:
    """Keras ``padding``/``cropping``: int, (sym_h, sym_w) or ((top, bottom), (left, right))."""
    v = layer.cfg.get(key, 1)
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(p, (list, tuple))
                                                            for p in v):
        (t, bo), (le, r) = (ints(p, 2, key, layer) for p in v)
    else:
        hh, ww = ints(v, 2, key, layer)
        t, bo, le, r = hh, hh, ww, ww
    positive((t, bo, le, r), key, layer, 0)
    return t, bo, le, r


def zero_padding(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    t, bo, le, r = _pairs(layer, "padding")
    pads = b.const(f"{layer.name}_pads", [0, 0, t, le, 0, 0, bo, r], np.int64)
    _, h, w, c = x.shape
    return KT(b.op("Pad", [x.name, pads], {"mode": "constant"}), (1, h + t + bo, w + le + r, c))


def cropping(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    t, bo, le, r = _pairs(layer, "cropping")
    _, h, w, c = x.shape
    if t + bo >= h or le + r >= w:
        raise layer.err("cropping removes the whole input", value=(t, bo, le, r),
                        limit=(h, w))
    ins = [x.name] + [b.const(f"{layer.name}_{k}", v, np.int64) for k, v in (
        ("starts", [t, le]), ("ends", [h - bo, w - r]), ("axes", [2, 3]))]
    return KT(b.op("Slice", ins), (1, h - t - bo, w - le - r, c))


def upsampling(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    rank(layer, x, 4)
    sh, sw = ints(layer.cfg.get("size", 2), 2, "size", layer)
    positive((sh, sw), "size", layer)
    mode = str(layer.cfg.get("interpolation", "nearest"))
    if mode == "nearest":
        attrs = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": "floor"}
    else:   # bilinear: TF2-era resize (half-pixel centers)
        attrs = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
    scales = b.const(f"{layer.name}_scales", [1.0, 1.0, sh, sw])
    _, h, w, c = x.shape
    return KT(b.op("Resize", [x.name, "", scales], attrs), (1, h * sh, w * sw, c))


# ----------------------------------------------------------------------------- merging
def _merge(op_type: str) -> Callable[[Builder, Layer, list[KT]], KT]:
    def convert(b: Builder, layer: Layer, xs: list[KT]) -> KT:
        if len(xs) < 2:
            raise layer.err("a merge layer needs at least two inputs", value=len(xs))
        xs = [b.plain(x) for x in xs]
        if len({len(x.shape) for x in xs}) != 1:
            raise layer.err("inputs of different rank", value=[x.shape for x in xs])
        shape = tuple(int(v) for v in np.broadcast_shapes(*(ir_shape(x.shape) for x in xs)))
        if op_type in ("Mean", "Max", "Min"):
            y = b.op(op_type, [x.name for x in xs])
        else:
            y = xs[0].name
            for x in xs[1:]:
                y = b.op(op_type, [y, x.name])
        return KT(y, ir_shape(shape) if len(shape) != 4 else
                  (shape[0], shape[2], shape[3], shape[1]))
    return convert


def concatenate(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    if len(xs) < 1:
        raise layer.err("Concatenate needs inputs", value=0)
    xs = [b.plain(x) for x in xs]
    r = len(xs[0].shape)
    ax = ir_axis(layer, layer.cfg.get("axis", -1), r)
    kax = [0, 3, 1, 2][ax] if r == 4 else ax
    for x in xs:
        if len(x.shape) != r or any(x.shape[i] != xs[0].shape[i] for i in range(r) if i != kax):
            raise layer.err("inputs do not match outside the concatenation axis",
                            value=[x.shape for x in xs])
    shape = list(xs[0].shape)
    shape[kax] = sum(x.shape[kax] for x in xs)
    return KT(b.op("Concat", [x.name for x in xs], {"axis": ax}), tuple(shape))


# ----------------------------------------------------------------------------- shapes
def flatten(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    n = int(np.prod(x.shape[1:]))
    y = b.op("Flatten", [x.name], {"axis": 1})
    if len(x.shape) == 4 and x.shape[3] > 1 and x.shape[1] * x.shape[2] > 1:
        _, h, w, c = x.shape
        return KT(y, (1, n), (h, w, c, x.name, layer.origin))
    return KT(y, (1, n))


def _target(layer: Layer, x: KT) -> tuple[int, ...]:
    t = layer.cfg.get("target_shape")
    if not isinstance(t, (list, tuple)) or not t:
        raise layer.err("target_shape missing", value=t)
    dims = list(ints(list(t), len(t), "target_shape", layer))
    total = int(np.prod(x.shape))
    if dims.count(-1) > 1 or any(v == 0 or v < -1 for v in dims):
        raise layer.err("target_shape out of range", value=t)
    if -1 in dims:
        known = int(np.prod([v for v in dims if v != -1]))
        dims[dims.index(-1)] = total // known if total % known == 0 else -1
    if int(np.prod(dims)) != total:
        raise layer.err("target_shape does not hold the input", value=t, limit=x.shape[1:])
    return (1, *dims)


def _keras_order(b: Builder, x: KT) -> str:
    """The IR tensor holding ``x`` in Keras element order (rank 4: transposed to NHWC)."""
    if len(x.shape) == 4 and x.shape[3] > 1 and x.shape[1] * x.shape[2] > 1:
        return b.op("Transpose", [x.name], {"perm": NCHW_TO_NHWC})
    return x.name


def _from_keras_order(b: Builder, layer: Layer, name: str, shape: tuple[int, ...]) -> str:
    """A tensor in Keras element order with Keras ``shape`` -> its IR form."""
    if len(shape) == 4 and shape[3] > 1 and shape[1] * shape[2] > 1:
        y = b.op("Reshape", [name, b.const(f"{layer.name}_shape", shape, np.int64)])
        return b.op("Transpose", [y], {"perm": NHWC_TO_NCHW})
    return b.op("Reshape", [name, b.const(f"{layer.name}_shape", ir_shape(shape), np.int64)])


def reshape(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    shape = _target(layer, x)
    return KT(_from_keras_order(b, layer, _keras_order(b, x), shape), shape)


def permute(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    x = b.plain(one(layer, xs))
    r = len(x.shape)
    dims = layer.cfg.get("dims")
    if not isinstance(dims, (list, tuple)) or sorted(dims) != list(range(1, r)):
        raise layer.err("dims must be a permutation of 1..rank-1", value=dims, limit=r - 1)
    p = [0, *(int(v) for v in dims)]
    shape = tuple(x.shape[i] for i in p)
    q = [TO_IR[p[i]] for i in NHWC_TO_NCHW] if r == 4 else p
    if q == list(range(r)):
        return KT(x.name, shape)
    return KT(b.op("Transpose", [x.name], {"perm": q}), shape)


def identity(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    return one(layer, xs)


# ----------------------------------------------------------------------------- the table
HW, CPU, EITHER, GONE = "DV700", "CPU", "DV700 or CPU", "removed"


@dataclass(frozen=True)
class LayerSpec:
    """How one Keras class converts: the converter, the IR ops it emits (activations
    aside), where those run (:data:`HW`, :data:`CPU`, :data:`EITHER` as ``note`` says, or
    :data:`GONE`), and a config-only refusal check."""

    convert: Callable[[Builder, Layer, list[KT]], KT]
    ir_ops: tuple[str, ...]
    runs: str
    note: str = ""
    #: config-only check: a refusal label ("Conv2D[data_format=channels_first]") or None
    check: Callable[[Layer], str | None] | None = None


def _checks(*fns: Callable[[Layer], str | None]) -> Callable[[Layer], str | None]:
    def check(layer: Layer) -> str | None:
        for fn in fns:
            label = fn(layer)
            if label:
                return label
        return None
    return check


def _upsampling_mode(layer: Layer) -> str | None:
    mode = str(layer.cfg.get("interpolation", "nearest"))
    return None if mode in ("nearest", "bilinear") else f"{layer.cls}[interpolation={mode}]"


def _groups_deconv(layer: Layer) -> str | None:
    return None if int(layer.cfg.get("groups", 1) or 1) == 1 else f"{layer.cls}[groups]"


def _no_lora(layer: Layer) -> str | None:
    return f"{layer.cls}[lora]" if layer.cfg.get("lora_rank") else None


_CONV = _checks(channels_last, check_activation, _no_lora)
_IDENTITY = LayerSpec(identity, (), GONE, "inference: an identity")
_TENSORS = "of two tensors: on the CPU"
_AFFINE_NOTE = ("chains of them are one map a x + b: a into the weights of the conv that "
                "reads it, b into its bias when that conv does not pad; else a depthwise "
                "1x1 run (or the CPU)")

#: Keras class -> how it converts (the README's Keras table is generated from this)
LAYERS: dict[str, LayerSpec] = {
    "InputLayer": LayerSpec(identity, (), GONE, "the network input"),
    "Conv2D": LayerSpec(conv2d, ("Conv",), HW, "activation fused; groups > 1 split into "
                        "convs (CPU Split/Concat)", _CONV),
    "DepthwiseConv2D": LayerSpec(depthwise_conv2d, ("Conv",), EITHER, "DV700 depthwise run "
                                 "for depth_multiplier 1, else the CPU", _CONV),
    "SeparableConv2D": LayerSpec(separable_conv2d, ("Conv",), EITHER,
                                 "depthwise run + 1x1 conv (depth_multiplier 1)", _CONV),
    "Conv2DTranspose": LayerSpec(conv2d_transpose, ("ConvTranspose",), HW, "deconv run",
                                 _checks(channels_last, check_activation, _groups_deconv)),
    "Dense": LayerSpec(dense, ("Gemm", "Conv"), HW, "after Flatten the kernel rows are "
                       "permuted to the IR's C, H, W order (no runtime op); on a rank-4 input "
                       "a 1x1 conv; on rank 3 a MatMul, a 1x1 conv over the rows",
                       _checks(check_activation, _no_lora)),
    "BatchNormalization": LayerSpec(batch_norm, ("BatchNormalization",), HW,
                                    "folded into the conv before it, else a depthwise run; "
                                    "not on the channel axis: CPU Mul/Add"),
    "Activation": LayerSpec(activation_layer, (), "see below", "", check_activation),
    "ReLU": LayerSpec(relu_layer, ("Relu",), EITHER, "fused; max_value 6 (or any with slope "
                      "0) fused as Clip; threshold != 0 on the CPU"),
    "LeakyReLU": LayerSpec(leaky_relu, ("LeakyRelu",), HW, "fused"),
    "PReLU": LayerSpec(prelu, ("PRelu",), EITHER, "fused when shared over H and W"),
    "ELU": LayerSpec(elu_layer, ("Elu",), EITHER, "fused with alpha 1 (DMP's ELU takes no "
                     "alpha); other alphas on the CPU"),
    "ThresholdedReLU": LayerSpec(thresholded_relu, ("Greater", "Where"), CPU),
    "Softmax": LayerSpec(softmax_layer, ("Softmax",), CPU),
    "MaxPooling2D": LayerSpec(max_pool, ("MaxPool",), HW, "fused into the conv run before "
                              "it when it can be", channels_last),
    "AveragePooling2D": LayerSpec(avg_pool, ("AveragePool",), EITHER, "padding='same' "
                                  "(pad left out of the count) on the CPU", channels_last),
    "GlobalAveragePooling2D": LayerSpec(global_avg_pool, ("GlobalAveragePool",), HW,
                                        "keepdims", channels_last),
    "GlobalMaxPooling2D": LayerSpec(global_max_pool, ("GlobalMaxPool",), HW, "keepdims",
                                    channels_last),
    "ZeroPadding2D": LayerSpec(zero_padding, ("Pad",), EITHER, "folded into the next conv "
                               "or pool, else the CPU", channels_last),
    "Cropping2D": LayerSpec(cropping, ("Slice",), CPU, "", channels_last),
    "UpSampling2D": LayerSpec(upsampling, ("Resize",), EITHER, "2x nearest: upsample run; "
                              "other sizes and bilinear: CPU (bilinear from Keras < 2.4 "
                              "refused)",
                              _checks(channels_last, _upsampling_mode)),
    "Add": LayerSpec(_merge("Add"), ("Add",), HW, "element-wise run"),
    "Subtract": LayerSpec(_merge("Sub"), ("Sub",), CPU, _TENSORS),
    "Multiply": LayerSpec(_merge("Mul"), ("Mul",), CPU, _TENSORS),
    "Average": LayerSpec(_merge("Mean"), ("Mean",), CPU),
    "Maximum": LayerSpec(_merge("Max"), ("Max",), CPU),
    "Minimum": LayerSpec(_merge("Min"), ("Min",), CPU),
    "Concatenate": LayerSpec(concatenate, ("Concat",), EITHER, "channel axis: multi-run "
                             "command or zero-copy placement; CPU when only the CPU makes and "
                             "reads the members"),
    "Flatten": LayerSpec(flatten, ("Flatten",), EITHER, "read in place by a following Dense; "
                         "any other reader gets a CPU Transpose to Keras's H, W, C order",
                         channels_last),
    "Reshape": LayerSpec(reshape, ("Reshape", "Transpose"), EITHER, "a free view when H = W "
                         "= 1; else a CPU Transpose to/from Keras's H, W, C order"),
    "Permute": LayerSpec(permute, ("Transpose",), CPU),
    "Rescaling": LayerSpec(rescaling, ("Mul", "Add"), EITHER, _AFFINE_NOTE),
    "Normalization": LayerSpec(normalization, ("Mul", "Add"), EITHER, _AFFINE_NOTE),
    "LayerScale": LayerSpec(layer_scale, ("Mul",), EITHER, "ConvNeXt's per-channel factor: "
                            "folded into the conv before it"),
    "LayerNormalization": LayerSpec(layer_norm, ("LayerNormalization", "Transpose"), CPU,
                                    "over the trailing axes; rms_scaling refused",
                                    check_layer_norm),
    "CenterCrop": LayerSpec(center_crop, ("Slice",), CPU, "a crop only (no resize)"),
    "Dropout": _IDENTITY,
    "SpatialDropout2D": _IDENTITY,
    "GaussianNoise": _IDENTITY,
    "GaussianDropout": _IDENTITY,
    "AlphaDropout": _IDENTITY,
    "ActivityRegularization": _IDENTITY,
    # the base class with no weights: an identity (SegNet_Basic's input layer)
    "Layer": LayerSpec(identity, (), GONE, "an identity (old models' input placeholder)"),
}

#: where each activation runs: the DV700 fuses these into the conv/pool run before them
ACTIVATION_RUNS = {n: HW for n in ("relu", "relu6", "sigmoid", "tanh", "elu", "leaky_relu")}
ACTIVATION_RUNS.update({n: f"{HW} + {CPU}" for n in ("swish", "silu", "mish")})
ACTIVATION_RUNS.update({n: CPU for n in ACTIVATIONS if n not in ACTIVATION_RUNS})
