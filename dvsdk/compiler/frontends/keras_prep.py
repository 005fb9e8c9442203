"""Keras constant preprocessing and normalization layers -> IR ops.

``Rescaling`` (``x * scale + offset``) and ``Normalization`` (``(x - mean) / max(sqrt(var),
eps)``, or ``mean + x * max(sqrt(var), eps)`` when ``invert``) are constant affine maps
``a x + b``, ``a`` and ``b`` broadcast against the tensor's Keras shape.  A chain of them
(EfficientNet's ``Rescaling(1/255)`` then ``Normalization``) becomes *one* affine map of the
chain's input: the frontend remembers which tensors are such maps (:data:`AFFINE`), and the
intermediate ops are dropped when nothing else reads them.  (:attr:`Builder.affine`)

Where the map goes (the choice, documented in the README's Keras section):

* **not** into the net.bin's ``preprocess`` record: that record is applied by
  ``net.run_image`` / ``dvsdk-run`` to *images* only, while ``net.run`` takes the model's own
  input (what ``model.predict`` takes); moving a layer there would change what ``net.run``
  computes.  A Keras application with its built-in preprocessing takes 0..255 RGB, which is
  the recorded default (mean 0, scale 1), so images need nothing more;
* ``a x + b`` is emitted as ``Mul(Add(x, b / a), a)`` (``Add`` left out when ``b`` is 0,
  ``Mul`` when ``a`` is 1): the compiler's ``fold_affine`` moves the ``Mul`` into the
  weights of the convolution that reads it (exact with any padding: every product is the
  weight times the scale, rounded once to FP16 with the weights) and the ``Add`` into its
  bias when that convolution does not pad (padded zeros would otherwise see the offset);
  what does not fold is a per-channel element-wise step: a depthwise 1x1 run of the DV700,
  or a CPU step when the DV700 cannot take it.  With ``a`` 0 somewhere, ``Add(Mul(x, a),
  b)``.

``LayerScale`` (ConvNeXt's per-channel ``x * gamma``) is a ``Mul`` by a constant (folded into
the convolution before it); ``LayerNormalization`` is the IR's ``LayerNormalization`` (ONNX
semantics, over the last axes), with the channel axis of a rank-4 tensor moved last and back
by ``Transpose`` ops; ``CenterCrop`` is a ``Slice`` (a crop only: an input smaller than the
target, which Keras resizes, is refused).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .keras_ir import KT, NCHW_TO_NHWC, NHWC_TO_NCHW, Builder, Layer, ints, one

__all__ = ["rescaling", "normalization", "layer_scale", "layer_norm", "center_crop",
           "check_layer_norm"]

#: Keras's backend epsilon (Normalization's floor of the standard deviation)
EPSILON = 1e-7


def _number_array(layer: Layer, v: Any, what: str) -> np.ndarray:
    if isinstance(v, dict) and v.get("class_name") == "__numpy__":
        cfg = v.get("config")
        v = cfg.get("value") if isinstance(cfg, dict) else None
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise layer.err(f"{what} is not a number or a list of numbers",
                        value=str(v)[:80]) from None
    if isinstance(v, bool) or arr.dtype == object or not np.all(np.isfinite(arr)):
        raise layer.err(f"{what} must be finite numbers", value=str(v)[:80])
    return arr


def _keras_shaped(layer: Layer, arr: np.ndarray, x: KT, what: str) -> np.ndarray:
    """``arr`` broadcast the numpy way against the Keras shape of ``x``, as a rank-r array."""
    r = len(x.shape)
    if arr.ndim > r:
        raise layer.err(f"{what} has more dimensions than the input", value=arr.shape,
                        limit=x.shape)
    arr = arr.reshape((1,) * (r - arr.ndim) + arr.shape)
    try:
        np.broadcast_shapes(arr.shape, x.shape)
    except ValueError:
        raise layer.err(f"{what} does not broadcast against the input", value=arr.shape,
                        limit=x.shape) from None
    if any(a != 1 and a != s for a, s in zip(arr.shape, x.shape)) or arr.shape[0] != 1:
        raise layer.err(f"{what} would change the input's shape", value=arr.shape,
                        limit=x.shape)
    return arr


def _ir_const(arr: np.ndarray) -> np.ndarray:
    return (arr.transpose(NHWC_TO_NCHW) if arr.ndim == 4 else arr).astype(np.float32)


def _affine(b: Builder, layer: Layer, x: KT, a: np.ndarray, c: np.ndarray) -> KT:
    """``a x + c`` (Keras-shaped float64 arrays) as IR ops, composed with the affine layer
    that made ``x`` if there is one."""
    table = b.affine
    if x.name in table:   # x = a0 src + c0: a (a0 src + c0) + c
        src, a0, c0 = table[x.name]
        x, a, c = src, a * a0, a * c0 + c
    name = x.name
    if np.all(a != 0) and np.all(np.isfinite(c / np.where(a == 0, 1, a))):
        shift = c / a
        if np.any(shift != 0):
            name = b.op("Add", [name, b.const(f"{layer.name}_shift", _ir_const(shift))])
        if np.any(a != 1):
            name = b.op("Mul", [name, b.const(f"{layer.name}_scale", _ir_const(a))])
    else:
        name = b.op("Mul", [name, b.const(f"{layer.name}_scale", _ir_const(a))])
        if np.any(c != 0):
            name = b.op("Add", [name, b.const(f"{layer.name}_offset", _ir_const(c))])
    if name == x.name:   # the identity map: still an op, so the layer has an output
        name = b.op("Identity", [name])
    table[name] = (x, a, c)
    return KT(name, x.shape)


def rescaling(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """``Rescaling``: ``x * scale + offset`` (scalars, or arrays broadcast the numpy way)."""
    x = b.plain(one(layer, xs))
    scale = _keras_shaped(layer, _number_array(layer, layer.cfg.get("scale", 1.0), "scale"),
                          x, "scale")
    offset = _keras_shaped(layer, _number_array(layer, layer.cfg.get("offset", 0.0), "offset"),
                           x, "offset")
    both = np.broadcast_shapes(scale.shape, offset.shape)
    return _affine(b, layer, x, np.broadcast_to(scale, both), np.broadcast_to(offset, both))


def _norm_axes(layer: Layer, r: int) -> tuple[int, ...]:
    """Keras axes (non-negative, batch excluded) Normalization keeps."""
    axis = layer.cfg.get("axis", -1)
    if axis is None:
        return ()
    axes = [axis] if isinstance(axis, int) else axis
    if not isinstance(axes, (list, tuple)) or not all(
            isinstance(v, int) and not isinstance(v, bool) and -r <= v < r and v % r
            for v in axes):
        raise layer.err("axis out of range", value=axis, limit=f"1..{r - 1} or -{r - 1}..-1")
    return tuple(sorted({v % r for v in axes}))


def normalization(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """``Normalization``: ``(x - mean) / max(sqrt(variance), 1e-7)`` (``invert``: the
    inverse), ``mean``/``variance`` from the config, else the layer's weights."""
    x = b.plain(one(layer, xs))
    r = len(x.shape)
    keep = _norm_axes(layer, r)
    stats_shape = tuple(x.shape[i] for i in keep)
    bshape = tuple(x.shape[i] if i in keep else 1 for i in range(r))
    stats = []
    for key in ("mean", "variance"):
        v = layer.cfg.get(key)
        if v is None:
            arr = layer.weight(key, stats_shape).astype(np.float64)
        else:
            arr = _number_array(layer, v, key)
            if arr.size == 1:
                arr = np.full(stats_shape, float(arr.reshape(-1)[0]))
            if arr.size != int(np.prod(stats_shape)):
                raise layer.err(f"{key} does not match the kept axes", value=arr.shape,
                                limit=stats_shape)
        stats.append(arr.reshape(bshape))
    mean, var = stats
    if np.any(var < 0):
        raise layer.err("variance must not be negative", value=float(var.min()))
    # Keras computes in float32: sqrt and the floor on float32 values
    std = np.maximum(np.sqrt(var.astype(np.float32)), np.float32(EPSILON)).astype(np.float64)
    if layer.cfg.get("invert", False):
        return _affine(b, layer, x, std, mean)
    return _affine(b, layer, x, 1.0 / std, -mean / std)


def layer_scale(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """ConvNeXt's ``LayerScale``: ``x * gamma``, one factor per channel."""
    x = b.plain(one(layer, xs))
    dim = layer.cfg.get("projection_dim", x.shape[-1])
    if dim != x.shape[-1]:
        raise layer.err("projection_dim is not the channel count", value=dim,
                        limit=x.shape[-1])
    gamma = layer.weight("variable", (x.shape[-1],)).astype(np.float64)
    return _affine(b, layer, x, _keras_shaped(layer, gamma, x, "gamma"),
                   np.zeros((1,) * len(x.shape)))


def check_layer_norm(layer: Layer) -> str | None:
    if layer.cfg.get("rms_scaling"):
        return f"{layer.cls}[rms_scaling]"
    return None


def layer_norm(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """``LayerNormalization`` over the last axis (or trailing axes): the IR's
    ``LayerNormalization`` op (ONNX semantics: mean and variance over ``axis``..end)."""
    x = b.plain(one(layer, xs))
    r = len(x.shape)
    axis = layer.cfg.get("axis", -1)
    axes = [axis] if isinstance(axis, int) else axis
    if not isinstance(axes, (list, tuple)) or not axes or not all(
            isinstance(v, int) and not isinstance(v, bool) and -r <= v < r and v % r
            for v in axes):
        raise layer.err("axis out of range", value=axis, limit=f"1..{r - 1} or -{r - 1}..-1")
    axes = sorted({v % r for v in axes})
    if axes != list(range(axes[0], r)):
        raise layer.err("LayerNormalization over axes other than the trailing ones",
                        value=axis, limit="the last axes")
    eps = layer.cfg.get("epsilon", 1e-3)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0:
        raise layer.err("epsilon must be a non-negative number", value=eps)
    shape = x.shape[axes[0]:]
    gamma = layer.weight("gamma", shape) if layer.cfg.get("scale", True) \
        else np.ones(shape, np.float32)
    beta = layer.weight("beta", shape) if layer.cfg.get("center", True) \
        else np.zeros(shape, np.float32)
    name = x.name
    if r == 4:   # IR is NCHW: normalize in Keras's NHWC order
        name = b.op("Transpose", [name], {"perm": NCHW_TO_NHWC})
    y = b.op("LayerNormalization", [name, b.const(f"{layer.name}_gamma", gamma),
                                    b.const(f"{layer.name}_beta", beta)],
             {"axis": axes[0], "epsilon": float(eps)})
    if r == 4:
        y = b.op("Transpose", [y], {"perm": NHWC_TO_NCHW})
    return KT(y, x.shape)


def center_crop(b: Builder, layer: Layer, xs: list[KT]) -> KT:
    """``CenterCrop(height, width)``: the centred window (Keras's offsets, rounded down)."""
    x = b.plain(one(layer, xs))
    if len(x.shape) != 4:
        raise layer.err("input rank not supported by this layer", value=x.shape,
                        limit="rank 4")
    th, tw = ints([layer.cfg.get("height"), layer.cfg.get("width")], 2, "height/width", layer)
    _, h, w, c = x.shape
    if not (0 < th <= h and 0 < tw <= w):
        raise layer.err("CenterCrop to a size larger than the input (a resize) is not "
                        "supported", value=(th, tw), limit=(h, w))
    top, left = (h - th) // 2, (w - tw) // 2
    ins = [x.name] + [b.const(f"{layer.name}_{k}", v, np.int64) for k, v in (
        ("starts", [top, left]), ("ends", [top + th, left + tw]), ("axes", [2, 3]))]
    return KT(b.op("Slice", ins), (1, th, tw, c))

