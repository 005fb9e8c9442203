"""NNEF operations -> IR ops (ONNX types, NCHW): the NNEF frontend's op table.

Each entry of :data:`OPS` converts one NNEF operation (S1 chapter 4; ``formats.md`` §4.2-4.3)
into IR ops with the same numbers; :data:`LOWERED` lists the standard compound fragments
that the Khronos parser expands into their defining primitives instead (so the op set stays
small and each conversion is exact); anything else is refused by name.  The table is the one
the README's NNEF section is generated from (``tools/gen_ops_table.py``).

Semantics that differ from ONNX and are handled here:

* broadcasting aligns shapes on the *left* (trailing singleton dimensions are implicit), so a
  ``[1, C]`` bias against ``[N, C, H, W]`` means ``[1, C, 1, 1]``: lower-rank operands get
  trailing singleton axes;
* empty ``padding`` is automatic (§4.3: ``x = ceil(X/s)``, the odd cell at the end), pooling
  ``size``/``padding``/``stride`` cover batch and channel too, ``groups = 0`` is depth-wise;
* ``border``: ``'constant'`` pads with zeros (also for ``max_pool``), ``'ignore'`` leaves
  padded cells out, ``'replicate'``/``'reflect'`` become an explicit ``Pad`` (edge / reflect,
  on the CPU) before the window op; ``'reflect-even'`` has no IR form and is refused by name;
* ``round`` is ``floor(x + 0.5)``; ``elu`` has ``alpha``; ``local_response_normalization``
  normalizes the box (alpha is per element, as ONNX LRN's ``alpha / size``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ModelError
from ..ir import Op, Tensor

__all__ = ["OPS", "LOWERED", "REFUSED", "NnefOp", "Converter", "Refused"]


class Refused(Exception):
    """This op (with these attributes) has no IR form: ``reason`` names the attribute."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


_DTYPES = {"scalar": np.float32, "integer": np.int64, "logical": np.bool_}
_PAD_MODE = {"constant": "constant", "replicate": "edge", "reflect": "reflect"}


def _ident(v: Any) -> bool:
    """A tensor identifier (tensor arguments are identifiers or literals, never strings)."""
    return isinstance(v, str)


class Converter:
    """Builds IR tensors and ops from parsed NNEF operations.

    ``shapes`` are the NNEF-inferred shapes of every identifier, ``consts`` the constant
    arrays (variables and ``constant`` ops) already placed in ``tensors``.
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]], tensors: dict[str, Tensor]) -> None:
        self.shapes = shapes
        self.tensors = tensors
        self.ops: list[Op] = []
        self.used: set[str] = set(tensors)
        self.op_names: set[str] = set()
        self.origin = ""
        self.base = ""

    # ------------------------------------------------------------------ helpers
    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.used:
            name, i = f"{hint}_{i}", i + 1
        self.used.add(name)
        return name

    def const(self, value: Any, dtype: Any = np.float32, hint: str = "") -> str:
        name = self.fresh(f"{hint or self.base}_c")
        self.tensors[name] = Tensor(name, const=np.asarray(value, dtype=dtype))
        return name

    def value(self, v: Any) -> np.ndarray | None:
        """The constant value of an argument (literal or constant tensor), else None."""
        if _ident(v):
            t = self.tensors.get(str(v))
            return None if t is None else t.const
        if isinstance(v, (bool, int, float, np.number)):
            return np.asarray(v)
        return None

    def shape(self, v: Any) -> tuple[int, ...]:
        if _ident(v):
            return tuple(self.shapes[str(v)])
        return ()

    def tensor(self, v: Any, dtype: Any = np.float32) -> str:
        """The IR tensor of an argument: an identifier, or a literal as a 0-d constant."""
        if _ident(v):
            return str(v)
        if isinstance(v, bool):
            dtype = np.bool_
        return self.const(v, dtype)

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None,
             **attrs: Any) -> str:
        """Append an op; fresh output tensors unless ``outputs`` names them. Returns output 0."""
        outs = list(outputs) if outputs is not None else [self.fresh(f"{self.base}_t")]
        for o in outs:
            self.used.add(o)
            self.tensors.setdefault(o, Tensor(o))
        name, i = self.base, 1
        while name in self.op_names:
            name, i = f"{self.base}_{i}", i + 1
        self.op_names.add(name)
        self.ops.append(Op(op_type, name, list(inputs), outs, attrs, self.origin))
        return outs[0]

    def aligned(self, v: Any, rank: int, dtype: Any = np.float32) -> str:
        """Argument ``v`` with trailing singleton axes up to ``rank`` (NNEF broadcasting)."""
        c = self.value(v)
        if c is not None and not _ident(v):
            return self.tensor(v, dtype)
        r = len(self.shape(v))
        if r >= rank or r == 0:
            return self.tensor(v, dtype)
        if c is not None:
            return self.const(c.reshape(c.shape + (1,) * (rank - r)), c.dtype)
        return self.emit("Unsqueeze", [str(v), self.const(list(range(r, rank)), np.int64)])

    def channel_vector(self, v: Any, channels: int, what: str) -> np.ndarray | None:
        """A per-channel parameter (``[1, C]``, ``[C]`` or a scalar) as a length-C vector."""
        c = self.value(v)
        if c is None:
            return None
        flat = np.asarray(c, dtype=np.float32).reshape(-1)
        if flat.size == 1:
            return np.full(channels, flat[0], np.float32)
        if flat.size != channels:
            raise ModelError(f"{what} does not have one value per channel", field=self.origin,
                             value=list(np.shape(c)), limit=channels)
        return flat


# ---------------------------------------------------------------------- window geometry
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


def _check_shape(cv: Converter, out: str, expected: Sequence[int]) -> None:
    got = tuple(cv.shapes[out])
    if got != tuple(expected):
        raise ModelError("internal: converted op disagrees with NNEF shape inference",
                         field=cv.origin, value=tuple(expected), limit=got)


# ---------------------------------------------------------------------- converters
def _conv(cv: Converter, op: Any) -> None:
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
    bias = _bias(cv, op.inputs.get("bias", 0.0), ws[0])
    ins = [x, cv.tensor(w)] + ([bias] if isinstance(bias, str) and bias else [])
    out = str(op.outputs["output"])
    res = cv.emit("Conv", ins, None if isinstance(bias, tuple) else [out],
                  kernel_shape=kernel, strides=stride, dilations=dilation,
                  pads=_onnx_pads(padding), group=groups)
    if isinstance(bias, tuple):  # a computed bias tensor: add it after the conv
        cv.emit("Add", [res, cv.aligned(bias[0], len(xs))], [out])


def _bias(cv: Converter, b: Any, channels: int) -> str | tuple:
    """'' (no bias), a constant [C] tensor name, or (identifier,) for a tensor bias."""
    vec = cv.channel_vector(b, channels, "bias")
    if vec is None:
        return (b,)
    if not vec.any():
        return ""
    return cv.const(vec, hint=f"{cv.base}_bias")


def _deconv(cv: Converter, op: Any) -> None:
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
    groups = int(a["groups"]) or xs[1]
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
    bias = _bias(cv, op.inputs.get("bias", 0.0), ws[1] * groups)
    ins = [x, cv.tensor(w)] + ([bias] if isinstance(bias, str) and bias else [])
    attrs = dict(kernel_shape=kernel, strides=stride, dilations=dilation,
                 pads=_onnx_pads(padding), group=groups)
    if any(extra):
        attrs["output_padding"] = extra
    res = cv.emit("ConvTranspose", ins, None if isinstance(bias, tuple) else [out], **attrs)
    if isinstance(bias, tuple):
        cv.emit("Add", [res, cv.aligned(bias[0], len(xs))], [out])


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


def _box(cv: Converter, op: Any) -> None:
    _pool(cv, op, "avg" if op.attribs.get("normalize", False) else "sum")


def _downsample(cv: Converter, op: Any, area: bool) -> None:
    f = [int(v) for v in op.attribs["factor"]]
    cv.emit("AveragePool", [str(op.inputs["input"])], [str(op.outputs["output"])],
            kernel_shape=f if area else [1] * len(f), strides=f, pads=[0] * (2 * len(f)))


def _nearest_upsample(cv: Converter, op: Any) -> None:
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


def _multilinear_upsample(cv: Converter, op: Any) -> None:
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


def _lrn(cv: Converter, op: Any) -> None:
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


def _pad(cv: Converter, op: Any) -> None:
    x = str(op.inputs["input"])
    border = op.attribs.get("border", "constant")
    out = str(op.outputs["output"])
    if not any(p or q for p, q in op.attribs["padding"]):
        cv.emit("Identity", [x], [out])
        return
    _border_pad(cv, x, border, list(op.attribs["padding"]), True, len(cv.shape(x)),
                float(op.attribs.get("value", 0.0)), out)


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
    if c is not None and _ident(v):
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
    bias = _bias(cv, op.inputs.get("bias", 0.0), cv.shape(w)[0])
    ins = [x, cv.tensor(w)] + ([bias] if isinstance(bias, str) and bias else [])
    res = cv.emit("Gemm", ins, None if isinstance(bias, tuple) else [out], transB=1)
    if isinstance(bias, tuple):
        cv.emit("Add", [res, cv.aligned(bias[0], 2)], [out])


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
    "sqr": NnefOp(_sqr, _t("Mul"), "x * x"),
    "sqrt": NnefOp(_unary("Sqrt"), _t("Sqrt")),
    "relu": NnefOp(_unary("Relu"), _t("Relu")),
    "sigmoid": NnefOp(_unary("Sigmoid"), _t("Sigmoid")),
    "tanh": NnefOp(_unary("Tanh"), _t("Tanh")),
    "softplus": NnefOp(_unary("Softplus"), _t("Softplus")),
    "elu": NnefOp(_attr_unary("Elu", alpha="alpha"), _t("Elu")),
    "selu": NnefOp(_attr_unary("Selu", alpha="alpha", gamma="lambda"), _t("Selu")),
    "leaky_relu": NnefOp(_attr_unary("LeakyRelu", alpha="alpha"), _t("LeakyRelu")),
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
    "conv": NnefOp(_conv, _t("Conv", "Pad", "Gather"), "groups 0 = depth-wise; border "
                   "replicate/reflect(-even): an explicit pad first, on the CPU"),
    "deconv": NnefOp(_deconv, _t("ConvTranspose"), "output_shape via output_padding; border "
                     "constant only"),
    "box": NnefOp(_box, _t("AveragePool", "Conv"), "normalize: AveragePool; else a depth-wise "
                  "conv of ones"),
    "max_pool": NnefOp(lambda cv, op: _pool(cv, op, "max"), _t("MaxPool", "Pad"),
                       "border constant with padding: a zero Pad first"),
    "avg_pool": NnefOp(lambda cv, op: _pool(cv, op, "avg"), _t("AveragePool", "Pad"),
                       "border ignore: count_include_pad 0"),
    "nearest_downsample": NnefOp(lambda cv, op: _downsample(cv, op, False), _t("AveragePool"),
                                 "1x1 window, stride = factor"),
    "area_downsample": NnefOp(lambda cv, op: _downsample(cv, op, True), _t("AveragePool")),
    "nearest_upsample": NnefOp(_nearest_upsample, _t("Resize"), "2x: the upsample run"),
    "multilinear_upsample": NnefOp(_multilinear_upsample, _t("ConvTranspose", "Resize"),
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
    "pad": NnefOp(_pad, _t("Pad", "Gather"), "constant, replicate (edge), reflect; "
                  "reflect-even: a Gather of mirrored indices"),
    "tile": NnefOp(_tile, _t("Tile")),
    "stack": NnefOp(_stack, _t("Unsqueeze", "Concat")),
    "unstack": NnefOp(_unstack, _t("Split", "Squeeze")),
    "gather": NnefOp(_gather, _t("Gather")),
    "matmul": NnefOp(_matmul, _t("MatMul", "Transpose"), "constant B: the FC command"),
    "linear": NnefOp(_linear, _t("Gemm"), "rank-2 input"),
    "softmax": NnefOp(_softmax, _t("Softmax", "ReduceMax", "Sub", "Exp", "ReduceSum", "Div"),
                      "several axes: exp(x - max) / sum"),
    "batch_normalization": NnefOp(_batch_norm, _t("BatchNormalization"),
                                  "constant parameters"),
    "local_response_normalization": NnefOp(
        _lrn, _t("LRN", "AveragePool"), "size [1, n, 1, 1]: LRN; spatial sizes: "
        "x / (bias + alpha * avg_pool(x^2))^beta"),
}

#: standard compound fragments the parser expands into their definitions (S1 chapter 4)
LOWERED = frozenset({
    "rsqr", "rsqrt", "log2", "softabs", "silu", "gelu", "rms_pool", "separable_conv",
    "separable_deconv", "local_mean_normalization", "local_variance_normalization",
    "local_contrast_normalization", "l1_normalization", "l2_normalization", "moments",
    "add_n", "copy_n", "linear_quantize", "min_max_linear_quantize",
    "zero_point_linear_quantize", "planewise_conv", "planewise_deconv",
})

#: standard operations with no IR form (UnsupportedOps names each use)
REFUSED = ("sin", "cos", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh",
           "atanh", "debox", "argmax_pool", "sample", "desample", "max_pool_with_index",
           "any_reduce", "all_reduce", "avg_roi_pool", "max_roi_pool", "roi_resample",
           "avg_roi_align", "max_roi_align", "logarithmic_quantize", "update", "cast")
