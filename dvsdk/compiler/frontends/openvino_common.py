"""Conversion helpers both OpenVINO IR generations share: graph inputs, conv/pool windows,
resizing and the normalizations that the IR expresses with several ONNX-semantics ops.

Every helper writes through :class:`~.openvino_ir.Builder`, so each op it emits carries the
current layer as ``Op.origin``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...errors import ModelError
from ..limits import check_window
from .openvino_ir import ONNX_TYPES, Builder, Layer, dim

_HINT_SIZE = "pass --input-size HxW (input_size=(H, W))"
F32 = np.float32


def graph_input(b: Builder, layer: Layer, dims: Sequence[int], dtype: np.dtype,
                name: str) -> str:
    """Register a graph input: a free batch becomes 1, free H, W come from ``input_size``.

    The layer's declared ``shape`` attribute, when it has one, must be a shape (each entry
    ``?``, ``-1``, a range ``a..b`` or a size >= 0) that agrees with the port's ``dims``."""
    dims = [int(d) for d in dims]
    if layer.has("shape"):
        declared = [dim(t, layer.where("shape"))
                    for t in layer.text("shape").strip("[]").split(",")]
        if len(declared) != len(dims) or any(
                a >= 0 and b >= 0 and a != b for a, b in zip(declared, dims)):
            raise ModelError("the declared shape disagrees with the output port's dims",
                             field=layer.where("shape"), value=layer.text("shape"),
                             limit=tuple(dims))
    given = b.input_size
    if given is not None and len(dims) == 4:
        for i, v in zip((2, 3), given):
            if dims[i] >= 0 and dims[i] != int(v):
                raise ModelError("input size conflicts with the model's fixed dimension",
                                 field=f"{name}[{i}]", value=int(v), limit=dims[i])
            dims[i] = int(v)
    if dims and dims[0] < 0:
        dims[0] = 1
    if any(d < 0 for d in dims):
        raise ModelError(f"input {name!r} has a free dimension", field=layer.where(),
                         value=tuple(dims), hint=_HINT_SIZE)
    if dtype == np.float16 or dtype == np.float64:
        dtype = np.dtype(F32)  # the IR computes in float32
    b.add_input(name, tuple(dims), dtype)
    return name


def as_int64(b: Builder, name: str) -> str:
    """``name`` as an int64 tensor (folds when constant)."""
    v = b.value(name)
    if v is not None:
        return name if v.dtype == np.int64 else b.ints(v, "i64")
    return b.op1("Cast", [name], attrs={"to": ONNX_TYPES[np.dtype(np.int64)]})


def channel_vector(b: Builder, name: str, rank: int, what: str) -> str:
    """A per-channel 1-D parameter (C,) shaped to broadcast over axis 1 of a rank-``rank``
    tensor: (C, 1, ...) (IR semantics differ from numpy's trailing-axis broadcast here)."""
    v = b.value(name)
    if v is not None and (v.ndim != 1 or v.size == 1 or rank < 3):
        return name
    shape = [-1] + [1] * (rank - 2)
    if v is not None:
        return b.const(v.reshape(shape), what)
    return b.op1("Reshape", [name, b.ints(shape, f"{what}_shape")])


def window(layer: Layer, nsp: int, legacy: bool = False) -> dict:
    """ONNX strides/dilations/pads (or auto_pad) of a conv or pool layer."""
    def pair(key: str, x: str, y: str, default: int, z: str = "") -> list[int]:
        if layer.has(key) or not legacy:
            return layer.ints(key, [default] * nsp)
        if layer.has(x) or layer.has(y):  # the oldest IRs: kernel-x/-y, stride-x/-y, ...
            if nsp != 2:
                raise ModelError("x/y attributes on a non-2-D layer", field=layer.where(key))
            return [layer.int1(y, default), layer.int1(x, default)]
        if z and layer.has(z):
            v = layer.ints(z)
            return v * nsp if len(v) == 1 else v
        return [default] * nsp

    a: dict = {"strides": pair("strides", "stride-x", "stride-y", 1, "stride"),
               "dilations": pair("dilations", "dilation-x", "dilation-y", 1)}
    begin = pair("pads_begin", "pad-x", "pad-y", 0)
    if legacy and not layer.has("pads_end") and (layer.has("pad-r") or layer.has("pad-b")):
        end = [layer.int1("pad-b", begin[0]), layer.int1("pad-r", begin[1])]
    elif legacy and not layer.has("pads_end"):
        end = list(begin)
    else:
        end = pair("pads_end", "pad-r", "pad-b", 0)
    for key, v in (("strides", a["strides"]), ("dilations", a["dilations"]),
                   ("pads_begin", begin), ("pads_end", end)):
        if len(v) != nsp:
            raise ModelError("attribute has the wrong length", field=layer.where(key),
                             value=v, limit=f"{nsp} spatial dimensions")
    auto = layer.text("auto_pad", "explicit").lower()
    if auto in ("explicit", "notset", ""):
        a["pads"] = begin + end
    elif auto == "valid":
        a["pads"] = [0] * (2 * nsp)
    elif auto in ("same_upper", "same_lower"):
        a["auto_pad"] = auto.upper()
    else:
        raise ModelError("unknown auto_pad", field=layer.where("auto_pad"), value=auto,
                         limit="explicit, valid, same_upper, same_lower")
    return a


def kernel(layer: Layer, nsp: int, legacy: bool = False) -> list[int]:
    if layer.has("kernel") or not legacy:
        k = layer.ints("kernel")
    elif layer.has("kernel-x") or layer.has("kernel-y"):
        k = [layer.int1("kernel-y"), layer.int1("kernel-x")]
    else:
        k = [layer.int1("kernel_size")] * nsp
    if len(k) != nsp:
        raise ModelError("kernel has the wrong length", field=layer.where("kernel"), value=k,
                         limit=f"{nsp} spatial dimensions")
    return k


def pool(b: Builder, layer: Layer, x: str, out: str, method: str, exclude_pad: bool,
         rounding: str | None, legacy: bool = False) -> list[str]:
    """MaxPool/AvgPool; ``rounding`` None takes floor or ceil from the declared output."""
    if method not in ("max", "avg"):
        return b.refuse(f"pool-method={method}")
    in_dims, out_dims = layer.inputs[0].dims, layer.outputs[0].dims
    nsp = len(in_dims) - 2
    k = kernel(layer, nsp, legacy)
    a = window(layer, nsp, legacy)
    a["kernel_shape"] = k
    check_window(a, nsp, layer.where())   # before the floor/ceil sums below divide
    if method != "max":  # ONNX AveragePool (opset 13) has no dilations
        if any(d != 1 for d in a.pop("dilations")):
            return b.refuse("dilations")
    if rounding is None and "pads" in a and all(d >= 0 for d in in_dims + out_dims):
        floor = [(in_dims[2 + i] + a["pads"][i] + a["pads"][nsp + i] - k[i]) // a["strides"][i]
                 + 1 for i in range(nsp)]
        rounding = "floor" if list(out_dims[2:]) == floor else "ceil"
    rounding = (rounding or "floor").lower()
    if rounding not in ("floor", "ceil", "ceil_torch"):
        return b.refuse(f"rounding_type={rounding}")
    a["ceil_mode"] = int(rounding != "floor")
    static = "pads" in a and all(d >= 0 for d in in_dims[2:] + out_dims[2:])
    if a["ceil_mode"] and static:
        ins, outs = in_dims[2:], out_dims[2:]
        p, s = a["pads"], a["strides"]
        if method == "avg" and not exclude_pad:
            # OpenVINO divides by the whole window, the ceil tail included; ONNX leaves the
            # tail out of the count: make the tail explicit zero padding, floor mode
            for i in range(nsp):
                p[nsp + i] += max(0, (outs[i] - 1) * s[i] + k[i] - (ins[i] + p[i] + p[nsp + i]))
            a["ceil_mode"] = 0
        elif list(outs) != _onnx_ceil(ins, k, s, p):
            return b.refuse(f"rounding_type={rounding} with a window in the padding")
    if method == "max":
        return [b.op1("MaxPool", [x], out, a)]
    a["count_include_pad"] = int(not exclude_pad)
    return [b.op1("AveragePool", [x], out, a)]


def _onnx_ceil(ins: Sequence[int], k: Sequence[int], s: Sequence[int],
               p: Sequence[int]) -> list[int]:
    """Output sizes of an ONNX ceil_mode pool: a last window starting in the end padding
    is dropped (OpenVINO's "ceil" keeps it)."""
    n = len(ins)
    out = []
    for i in range(n):
        o = -(-(ins[i] + p[i] + p[n + i] - k[i]) // s[i]) + 1
        if (o - 1) * s[i] >= ins[i] + p[i]:
            o -= 1
        out.append(o)
    return out


def resize(b: Builder, layer: Layer, x: str, out: str, mode: str, ctm: str,
           nearest_mode: str = "floor", scales: Sequence[float] | None = None,
           axes: Sequence[int] | None = None) -> list[str]:
    """Resize to the declared output dims (or by ``scales`` on ``axes``)."""
    in_dims, out_dims = layer.inputs[0].dims, layer.outputs[0].dims
    rank = len(in_dims)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "nearest_mode": nearest_mode}
    if scales is not None:
        full = [1.0] * rank
        for ax, s in zip(axes if axes is not None else range(rank), scales):
            full[int(ax) % rank] = float(s)
        return [b.op1("Resize", [x, "", b.const(np.asarray(full, F32), "scales")], out, attrs)]
    dims = [1 if i == 0 and d < 0 else d for i, d in enumerate(out_dims)]  # free batch: 1
    if not all(d >= 0 for d in dims):
        raise ModelError("resize needs a static output shape", field=layer.where(),
                         value=out_dims)
    sizes = b.ints(dims, "sizes")
    return [b.op1("Resize", [x, "", "", sizes], out, attrs)]


def l2_normalize(b: Builder, x: str, axes: Sequence[int], eps: float, eps_max: bool,
                 out: str, scale: str = "") -> list[str]:
    """x / sqrt(max(sum(x^2), eps)) (or + eps) over ``axes``; optional per-channel scale."""
    sq = b.op1("ReduceSumSquare", [x, b.ints(axes, "axes")], attrs={"keepdims": 1})
    den = b.op1("Max" if eps_max else "Add", [sq, b.const(np.float32(eps), "eps")])
    den = b.op1("Sqrt", [den])
    if not scale:
        return [b.op1("Div", [x, den], out)]
    y = b.op1("Div", [x, den])
    return [b.op1("Mul", [y, scale], out)]


def mvn(b: Builder, x: str, axes: Sequence[int], normalize_variance: bool, eps: float,
        inside_sqrt: bool, out: str) -> list[str]:
    """(x - mean) / sqrt(var + eps) (or sqrt(var) + eps) over ``axes``."""
    ax = b.ints(axes, "axes")
    mean = b.op1("ReduceMean", [x, ax], attrs={"keepdims": 1})
    if not normalize_variance:
        return [b.op1("Sub", [x, mean], out)]
    d = b.op1("Sub", [x, mean])
    var = b.op1("ReduceMean", [b.op1("Mul", [d, d]), ax], attrs={"keepdims": 1})
    e = b.const(np.float32(eps), "eps")
    den = b.op1("Sqrt", [b.op1("Add", [var, e])]) if inside_sqrt else \
        b.op1("Add", [b.op1("Sqrt", [var]), e])
    return [b.op1("Div", [d, den], out)]


def affine(b: Builder, x: str, scale: float, shift: float, out: str | None) -> str:
    """scale * x + shift with the identity parts left out."""
    y = x
    if scale != 1.0:
        y = b.op1("Mul", [y, b.const(np.float32(scale), "scale")],
                  out if shift == 0.0 else None)
    if shift != 0.0:
        y = b.op1("Add", [y, b.const(np.float32(shift), "shift")], out)
    if y == x:
        y = b.op1("Identity", [x], out)
    return y
