"""NNEF sliding-window operations -> IR ops (S1 "Sliding-window operations";
``formats.md`` §4.3): conv, deconv, box and the pools, up/down-sampling, local response
normalization, and the explicit pads that border modes need.

* empty ``padding`` is automatic (``x = ceil(X/s)``, total ``t`` split floor/ceil, the odd
  cell at the end); pooling ``size``/``padding``/``stride`` cover batch and channel too (they
  must be 1 / 0 there); conv ``groups = 0`` is depth-wise;
* ``border``: ``'constant'`` pads with zeros (also for ``max_pool``: an explicit zero Pad),
  ``'ignore'`` leaves padded cells out (MaxPool padding, AveragePool
  ``count_include_pad = 0``), ``'replicate'``/``'reflect'`` become an ONNX Pad (edge /
  reflect) and ``'reflect-even'`` a Gather of mirrored indices before the window op;
* a deconv's ``output_shape`` beyond the natural size is ONNX ``output_padding``;
* ``multilinear_upsample`` with ``border = 'constant'`` and factor 2 is the depth-wise deconv
  S1 gives (the hardware's deconv run); with ``'replicate'`` (clamped edges) or ``'aligned'``
  it is ONNX linear Resize (half_pixel / asymmetric / align_corners);
* ``local_response_normalization`` normalizes its box: across channels it is ONNX LRN with
  the same alpha (ONNX divides alpha by the size), over space an explicit
  ``x / (bias + alpha * avg_pool(x * x))^beta``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .nnef_convert import Converter, Refused, with_bias

__all__ = ["auto_padding", "conv", "deconv", "box", "max_pool", "avg_pool",
           "nearest_downsample", "area_downsample", "nearest_upsample",
           "multilinear_upsample", "lrn", "pad"]

_PAD_MODE = {"constant": "constant", "replicate": "edge", "reflect": "reflect"}


def auto_padding(extents: Sequence[int], kernel: Sequence[int], stride: Sequence[int],
                 dilation: Sequence[int]) -> list[tuple[int, int]]:
    """NNEF automatic padding (§4.3): ``x = ceil(X/s)``, total ``t`` split floor/ceil."""
    out = []
    for X, f, s, d in zip(extents, kernel, stride, dilation):
        x = -(-X // s)
        t = max((x - 1) * s + (f - 1) * d + 1 - X, 0)
        out.append((t // 2, t - t // 2))
    return out


def _window(cv: Converter, op: Any, spatial_only: bool) -> tuple[list, list, list, list]:
    """(kernel, stride, dilation, padding) over the dims the attributes cover."""
    x = cv.shape(op.inputs["input"])
    a = op.attribs
    if spatial_only:
        kernel = list(cv.shape(op.inputs["filter"])[2:])
        dims = x[2:]
    else:
        kernel = list(a["size"])
        dims = x
    n = len(kernel)
    stride = list(a.get("stride") or [1] * n)
    dilation = list(a.get("dilation") or [1] * n)
    padding = [tuple(p) for p in a.get("padding") or auto_padding(dims, kernel, stride, dilation)]
    return kernel, stride, dilation, padding


def _border_pad(cv: Converter, x: str, border: str, padding: list, full: bool,
                rank: int, value: float = 0.0, out: str | None = None) -> str:
    """An explicit pad for a border mode the window op itself cannot do: ONNX Pad for
    constant/replicate/reflect, a Gather of mirrored indices per axis for reflect-even."""
    lead = [] if full else [(0, 0), (0, 0)]
    pads = lead + [tuple(int(v) for v in p) for p in padding]
    pads += [(0, 0)] * (rank - len(pads))
    if border == "reflect-even":
        if any(p < 0 or q < 0 for p, q in pads):
            raise Refused("border=reflect-even with negative padding")
        shape = cv.shape(x)
        todo = [(a, p, q) for a, (p, q) in enumerate(pads) if p or q]
        for i, (axis, p, q) in enumerate(todo):
            idx = np.pad(np.arange(shape[axis]), (p, q), mode="symmetric")
            x = cv.emit("Gather", [x, cv.const(idx, np.int64)],
                        [out] if out and i == len(todo) - 1 else None, axis=axis)
        return x
    if border not in _PAD_MODE:
        raise Refused(f"border={border}")
    flat = [p for p, _ in pads] + [q for _, q in pads]
    return cv.emit("Pad", [x, cv.const(flat, np.int64), cv.const(value)],
                   [out] if out else None, mode=_PAD_MODE[border])


def _onnx_pads(padding: Sequence[tuple[int, int]]) -> list[int]:
    return [int(p) for p, _ in padding] + [int(q) for _, q in padding]


# ---------------------------------------------------------------------- converters
def conv(cv: Converter, op: Any) -> None:
    x, w = str(op.inputs["input"]), op.inputs["filter"]
    xs, ws = cv.shape(x), cv.shape(w)
    a = op.attribs
    kernel, stride, dilation, padding = _window(cv, op, spatial_only=True)
    groups = int(a["groups"]) or xs[1]
    border = a.get("border", "constant")
    if any(p < 0 or q < 0 for p, q in padding) or (border != "constant" and
                                                   any(p or q for p, q in padding)):
        x = _border_pad(cv, x, border, padding, False, len(xs))
        padding = [(0, 0)] * len(padding)
    with_bias(cv, "Conv", [x, cv.tensor(w)], op.inputs.get("bias", 0.0), ws[0],
              str(op.outputs["output"]), len(xs), kernel_shape=kernel, strides=stride,
              dilations=dilation, pads=_onnx_pads(padding), group=groups)


def deconv(cv: Converter, op: Any) -> None:
    x, w = str(op.inputs["input"]), op.inputs["filter"]
    xs, ws = cv.shape(x), cv.shape(w)
    a = op.attribs
    out = str(op.outputs["output"])
    os_ = cv.shapes[out]
    if a.get("border", "constant") != "constant":
        raise Refused(f"border={a['border']}")
    n = len(xs) - 2
    kernel, stride = list(ws[2:]), list(a.get("stride") or [1] * n)
    dilation = list(a.get("dilation") or [1] * n)
    groups = int(a["groups"]) or (os_[1] if a.get("output_shape") else xs[1])  # as S1 shapes
    padding = [tuple(p) for p in a.get("padding") or []]
    if not padding:
        padding = []
        for xi, X, f, s, d in zip(xs[2:], os_[2:], kernel, stride, dilation):
            t = max((xi - 1) * s + (f - 1) * d + 1 - X, 0)
            padding.append((t // 2, t - t // 2))
    if any(p < 0 or q < 0 for p, q in padding):
        raise Refused("negative padding")
    extra = []
    for xi, X, f, s, d, (p, q) in zip(xs[2:], os_[2:], kernel, stride, dilation, padding):
        e = X - ((xi - 1) * s + (f - 1) * d + 1 - p - q)
        if not 0 <= e < max(s, d):
            raise Refused(f"output_shape={list(os_)}")
        extra.append(e)
    attrs: dict[str, Any] = dict(kernel_shape=kernel, strides=stride, dilations=dilation,
                                 pads=_onnx_pads(padding), group=groups)
    if any(extra):
        attrs["output_padding"] = extra
    with_bias(cv, "ConvTranspose", [x, cv.tensor(w)], op.inputs.get("bias", 0.0),
              ws[1] * groups, out, len(xs), **attrs)


def _pool_geometry(cv: Converter, op: Any) -> tuple[list, list, list, list]:
    kernel, stride, dilation, padding = _window(cv, op, spatial_only=False)
    if kernel[:2] != [1, 1] or stride[:2] != [1, 1] or list(padding[:2]) != [(0, 0), (0, 0)]:
        raise Refused(f"window over batch/channel size={kernel}")
    return kernel[2:], stride[2:], dilation[2:], padding[2:]


def _pool(cv: Converter, op: Any, kind: str) -> None:
    """max_pool, avg_pool and box (normalize false: a depth-wise conv of ones)."""
    x = str(op.inputs["input"])
    xs = cv.shape(x)
    kernel, stride, dilation, padding = _pool_geometry(cv, op)
    border = op.attribs.get("border", "constant")
    out = str(op.outputs["output"])
    padded = any(p or q for p, q in padding)
    if padded and any(p < 0 or q < 0 for p, q in padding):
        raise Refused("negative padding")
    if kind == "sum":  # box without normalization: 'ignore' and 'constant' both add zeros
        if padded and border not in ("constant", "ignore"):
            x = _border_pad(cv, x, border, padding, False, len(xs))
            padding = [(0, 0)] * len(padding)
        ones = np.ones((xs[1], 1, *kernel), np.float32)
        cv.emit("Conv", [x, cv.const(ones, hint=f"{cv.base}_ones")], [out], kernel_shape=kernel,
                strides=stride, dilations=dilation, pads=_onnx_pads(padding), group=xs[1])
        return
    attrs: dict[str, Any] = {"dilations": dilation} if any(d != 1 for d in dilation) else {}
    if padded and (border not in ("constant", "ignore") or (kind == "max" and
                                                             border == "constant")):
        x = _border_pad(cv, x, border, padding, False, len(xs))
        padding = [(0, 0)] * len(padding)
    elif kind == "avg" and padded:
        attrs["count_include_pad"] = int(border == "constant")
    cv.emit("MaxPool" if kind == "max" else "AveragePool", [x], [out], kernel_shape=kernel,
            strides=stride, pads=_onnx_pads(padding), **attrs)


def box(cv: Converter, op: Any) -> None:
    _pool(cv, op, "avg" if op.attribs.get("normalize", False) else "sum")


def max_pool(cv: Converter, op: Any) -> None:
    _pool(cv, op, "max")


def avg_pool(cv: Converter, op: Any) -> None:
    _pool(cv, op, "avg")


def nearest_downsample(cv: Converter, op: Any) -> None:
    _downsample(cv, op, False)


def area_downsample(cv: Converter, op: Any) -> None:
    _downsample(cv, op, True)


def _downsample(cv: Converter, op: Any, area: bool) -> None:
    f = [int(v) for v in op.attribs["factor"]]
    cv.emit("AveragePool", [str(op.inputs["input"])], [str(op.outputs["output"])],
            kernel_shape=f if area else [1] * len(f), strides=f, pads=[0] * (2 * len(f)))


def nearest_upsample(cv: Converter, op: Any) -> None:
    f = [float(v) for v in op.attribs["factor"]]
    cv.emit("Resize", [str(op.inputs["input"]), "", cv.const([1.0, 1.0] + f)],
            [str(op.outputs["output"])], mode="nearest",
            coordinate_transformation_mode="asymmetric", nearest_mode="floor")


#: factor-2 multilinear kernels as depth-wise deconvolutions (S1, multilinear_upsample).
#: S1's illustrative asymmetric fragment pads (0, 1), which would make output[0] =
#: 0.5 input[0]; the definition (output[2j] = input[j]) needs (1, 0), as the Khronos runtime
#: computes.
_UP2 = {"symmetric": (np.array([0.25, 0.75, 0.75, 0.25]), (1, 1)),
        "asymmetric": (np.array([0.5, 1.0, 0.5]), (1, 0))}
_CTM = {"symmetric": "half_pixel", "asymmetric": "asymmetric", "aligned": "align_corners"}


def multilinear_upsample(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    xs = cv.shape(x)
    out = str(op.outputs["output"])
    f = [int(v) for v in op.attribs["factor"]]
    method = op.attribs.get("method", "symmetric")
    border = op.attribs.get("border", "replicate")
    if method not in _CTM:
        raise Refused(f"method={method}")
    if method == "aligned" or border == "replicate":  # edges clamp: ONNX linear Resize
        cv.emit("Resize", [x, "", cv.const([1.0, 1.0] + [float(v) for v in f])], [out],
                mode="linear", coordinate_transformation_mode=_CTM[method])
        return
    if border != "constant" or f != [2] * len(f) or len(f) != 2:
        raise Refused(f"border={border} factor={f}" if border == "constant" else
                      f"border={border}")
    k1, pad = _UP2[method]
    k = np.outer(k1, k1).astype(np.float32)
    w = np.broadcast_to(k, (xs[1], 1, *k.shape)).copy()
    cv.emit("ConvTranspose", [x, cv.const(w, hint=f"{cv.base}_kernel")], [out],
            kernel_shape=list(k.shape), strides=[2, 2], dilations=[1, 1],
            pads=[pad[0], pad[0], pad[1], pad[1]], group=xs[1])


def lrn(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    xs = cv.shape(x)
    a = op.attribs
    size = [int(s) for s in a["size"]]
    alpha, beta, bias = float(a["alpha"]), float(a["beta"]), float(a["bias"])
    out = str(op.outputs["output"])
    if len(size) == len(xs) and size[0] == 1 and all(s == 1 for s in size[2:]):
        cv.emit("LRN", [x], [out], size=size[1], alpha=alpha, beta=beta, bias=bias)
        return
    if len(size) != len(xs) or size[:2] != [1, 1]:
        raise Refused(f"size={size}")
    k = size[2:]
    pads = auto_padding(xs[2:], k, [1] * len(k), [1] * len(k))
    sq = cv.emit("Mul", [x, x])
    avg = cv.emit("AveragePool", [sq], kernel_shape=k, strides=[1] * len(k),
                  pads=_onnx_pads(pads), count_include_pad=1)
    sigma = cv.emit("Add", [cv.emit("Mul", [avg, cv.const(alpha)]), cv.const(bias)])
    cv.emit("Div", [x, cv.emit("Pow", [sigma, cv.const(beta)])], [out])


def pad(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    border = op.attribs.get("border", "constant")
    out = str(op.outputs["output"])
    if not any(p or q for p, q in op.attribs["padding"]):
        cv.emit("Identity", [x], [out])
        return
    _border_pad(cv, x, border, list(op.attribs["padding"]), True, len(cv.shape(x)),
                float(op.attribs.get("value", 0.0)), out)


