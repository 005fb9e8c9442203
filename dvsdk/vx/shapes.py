"""The NN kernels' size rules and parameter checks (``formats.md`` §2.6, §2.7).

Convolution: ``W_out = R((W + 2 pad - k - (k - 1) dil) / skip + 1)`` with R floor or ceil
(``down_scale_size_rounding``); the skip is not a parameter: it is inferred from the
output size, the smallest positive integer that gives it.  Pooling: the same with the
window size for ``k`` and no dilation.  Deconvolution: ``W_out = (W - 1) upscale - 2 pad
+ k + a`` with ``0 <= a < upscale``, the upscale inferred.  An output dimension left
undefined (a virtual tensor's 0) resolves with the smallest skip or upscale: 1 for
convolution and pooling, ``a + 1`` for deconvolution.

Each validator takes the node's parameter values and the metadata of its tensor
parameters and returns ``({output index: (dims, type, fpp)}, derived)`` where ``derived``
holds what the compiler needs (skips, upscales); a problem raises :class:`ParamError`
naming the parameter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .types import (
    ActivationFunction,
    ConvertPolicy,
    NormType,
    PoolingType,
    RoundingType,
    RoundPolicy,
    Status,
    Type,
    VxError,
    enum_value,
)

__all__ = ["Meta", "ParamError", "conv_size", "infer_skip", "deconv_size", "infer_upscale"]


@dataclass
class Meta:
    """A tensor parameter as the validator sees it (dims may hold 0 = undefined)."""

    dims: tuple[int, ...] | None
    type: Type | None
    fpp: int
    name: str


class ParamError(VxError):
    """A check failed on parameter ``index`` (the verifier adds the node's name)."""

    def __init__(self, status: Status, index: int, message: str, **kw: Any) -> None:
        self.index = index
        super().__init__(status, message, **kw)
        self.bare = message


# -- size formulas ---------------------------------------------------------------------------

def conv_size(size: int, pad: int, k_eff: int, skip: int, rounding: int) -> int:
    """OpenVX's output size (floor or ceil)."""
    span = size + 2 * pad - k_eff
    q = span // skip if rounding == RoundingType.FLOOR else -(-span // skip)
    return q + 1


def infer_skip(size: int, pad: int, k_eff: int, out: int, rounding: int) -> int | None:
    """The smallest skip giving ``out`` outputs, or None."""
    span = size + 2 * pad - k_eff
    if span < 0:
        return None
    for skip in range(1, span + 2):
        if conv_size(size, pad, k_eff, skip, rounding) == out:
            return skip
    return None


def deconv_size(size: int, pad: int, k: int, upscale: int, a: int) -> int:
    return (size - 1) * upscale - 2 * pad + k + a


def infer_upscale(size: int, pad: int, k: int, a: int, out: int) -> int | None:
    if size == 1:
        return a + 1 if out == k - 2 * pad + a else None
    num = out + 2 * pad - k - a
    if num <= 0 or num % (size - 1):
        return None
    up = num // (size - 1)
    return up if a < up else None


# -- helpers -----------------------------------------------------------------------------------

def _fail(index: int, message: str, status: Status = Status.ERROR_INVALID_DIMENSION,
          **kw: Any) -> None:
    raise ParamError(status, index, message, **kw)


def _enum(values: list, index: int, enum: type, name: str) -> Any:
    try:
        return enum_value(enum, values[index], name)
    except VxError as e:
        raise ParamError(Status.ERROR_INVALID_PARAMETERS, index, e.message.split(": ", 1)[1],
                         value=values[index], limit=[m.name for m in enum]) from None


def _same_type(t: list[Meta], index: int, ref: int = 0) -> None:
    a, b = t[ref], t[index]
    if b.type is not None and (a.type != b.type or a.fpp != b.fpp):
        _fail(index, f"{b.name} is {_tn(b)} but the input is {_tn(a)} (the kernel needs "
              "one data type)", Status.ERROR_INVALID_FORMAT, value=_tn(b), limit=_tn(a))


def _tn(m: Meta) -> str:
    if m.type is None:
        return "undefined"
    return m.type.name + (f" (fixed point {m.fpp})" if m.fpp else "")


def _rank(t: list[Meta], index: int, ranks: tuple[int, ...], what: str) -> tuple[int, ...]:
    d = t[index].dims
    if d is None or len(d) not in ranks:
        _fail(index, f"{t[index].name} must have {what}", value=d,
              limit=f"rank in {ranks}")
    return d


def _out(t: list[Meta], index: int, want: tuple[int, ...], ref: int = 0
         ) -> dict[int, tuple]:
    """Output ``index`` resolved to ``want``: a defined dimension must match."""
    got = t[index].dims
    if got is not None:
        if len(got) != len(want):
            _fail(index, f"{t[index].name} has {len(got)} dimensions, the kernel makes "
                  f"{len(want)}: {list(want)}", value=list(got), limit=list(want))
        for i, (g, w) in enumerate(zip(got, want)):
            if g and g != w:
                _fail(index, f"{t[index].name} dimension {i} is {g}, the kernel makes {w}",
                      value=list(got), limit=list(want))
    _same_type(t, index, ref)
    return {index: (tuple(want), t[ref].type, t[ref].fpp)}


def _nonneg(values: list, index: int, what: str, minimum: int = 0) -> int:
    try:
        v = int(values[index])
    except (TypeError, ValueError):
        _fail(index, f"{what} is not an integer", Status.ERROR_INVALID_PARAMETERS,
              value=values[index])
    if v < minimum:
        _fail(index, f"{what} must be >= {minimum}", Status.ERROR_INVALID_PARAMETERS,
              value=v, limit=f">= {minimum}")
    return v


def _field(p: Any, name: str, index: int, minimum: int = 0) -> int:
    """A non-negative integer field of a params struct (parameter ``index``)."""
    try:
        v = int(getattr(p, name))
    except (TypeError, ValueError):
        _fail(index, f"{name} is not an integer", Status.ERROR_INVALID_PARAMETERS,
              value=getattr(p, name, None))
    if v < minimum:
        _fail(index, f"{name} must be >= {minimum}", Status.ERROR_INVALID_PARAMETERS,
              value=v, limit=f">= {minimum}")
    return v


def _struct_enum(p: Any, name: str, index: int, enum: type) -> Any:
    try:
        return enum_value(enum, getattr(p, name), name)
    except VxError as e:
        raise ParamError(Status.ERROR_INVALID_PARAMETERS, index,
                         e.message.split(": ", 1)[1], value=getattr(p, name),
                         limit=[m.name for m in enum]) from None


def _spatial_out(t: list[Meta], out_i: int, in_dims: tuple[int, ...], axis: int) -> int:
    d = t[out_i].dims
    return 0 if d is None or len(d) != len(in_dims) else d[axis]


# -- the kernels -------------------------------------------------------------------------------

def convolution(v: list, t: list[Meta]) -> tuple[dict, dict]:
    x = _rank(t, 0, (3, 4, 5, 6), "[width, height, #IFM, #batches...] dimensions")
    w = _rank(t, 1, (4,), "[kernel_x, kernel_y, #IFM, #OFM] dimensions")
    _same_type(t, 1)
    p = v[3]
    px, py = _field(p, "padding_x", 3), _field(p, "padding_y", 3)
    dx, dy = _field(p, "dilation_x", 3), _field(p, "dilation_y", 3)
    _struct_enum(p, "overflow_policy", 3, ConvertPolicy)
    _struct_enum(p, "rounding_policy", 3, RoundPolicy)
    _struct_enum(p, "down_scale_size_rounding", 3, RoundingType)
    if w[2] != x[2]:
        _fail(1, f"weights have {w[2]} input maps, the input has {x[2]}", value=list(w),
              limit=f"dimension 2 = {x[2]}")
    rounding = int(p.down_scale_size_rounding)
    sizes, skips = [], []
    for axis, (k, pad, dil) in enumerate(((w[0], px, dx), (w[1], py, dy))):
        k_eff = k + (k - 1) * dil
        if x[axis] + 2 * pad < k_eff:
            _fail(1, f"kernel {'xy'[axis]} extent {k_eff} is larger than the padded input "
                  f"{x[axis] + 2 * pad}", value=k_eff, limit=x[axis] + 2 * pad)
        want = _spatial_out(t, 4, x, axis)
        skip = 1 if not want else infer_skip(x[axis], pad, k_eff, want, rounding)
        if skip is None:
            _fail(4, f"output {'width' if axis == 0 else 'height'} {want} cannot come from "
                  f"input {x[axis]}, padding {pad}, kernel extent {k_eff} and "
                  f"{RoundingType(rounding).name.lower()} rounding with an integer skip",
                  value=want)
        sizes.append(conv_size(x[axis], pad, k_eff, skip, rounding))
        skips.append(skip)
    out = _out(t, 4, (sizes[0], sizes[1], w[3], *x[3:]))
    if t[2].dims is not None:
        b = t[2].dims
        if b not in ((w[3],), (sizes[0], sizes[1], w[3])):
            _fail(2, f"biases must be [#OFM] = [{w[3]}] (shared) or [width, height, #OFM] = "
                  f"{[sizes[0], sizes[1], w[3]]} (unshared)", value=list(b))
        _same_type(t, 2)
    return out, {"skip": tuple(skips), "pad": (px, py), "dilation": (dx, dy),
                 "rounding": rounding}


def deconvolution(v: list, t: list[Meta]) -> tuple[dict, dict]:
    x = _rank(t, 0, (3, 4, 5, 6), "[width, height, #IFM, #batches...] dimensions")
    w = _rank(t, 1, (4,), "[width, height, #IFM, #OFM] dimensions")
    _same_type(t, 1)
    p = v[3]
    pads = (_field(p, "padding_x", 3), _field(p, "padding_y", 3))
    a = (_field(p, "a_x", 3), _field(p, "a_y", 3))
    _struct_enum(p, "overflow_policy", 3, ConvertPolicy)
    _struct_enum(p, "rounding_policy", 3, RoundPolicy)
    if w[2] != x[2]:
        _fail(1, f"weights have {w[2]} input maps, the input has {x[2]}", value=list(w),
              limit=f"dimension 2 = {x[2]}")
    sizes, ups = [], []
    for axis in (0, 1):
        k, pad = w[axis], pads[axis]
        if k < pad + 1:
            _fail(3, f"kernel {'xy'[axis]} {k} needs to exceed padding {pad} (the effective "
                  "input padding kernel - padding - 1 is negative)",
                  Status.ERROR_INVALID_PARAMETERS, value=(k, pad))
        want = _spatial_out(t, 4, x, axis)
        up = a[axis] + 1 if not want else infer_upscale(x[axis], pad, k, a[axis], want)
        if up is None:
            _fail(4, f"output {'width' if axis == 0 else 'height'} {want} is not "
                  f"(W - 1) * upscale - 2 * {pad} + {k} + {a[axis]} for an integer upscale "
                  f"> a = {a[axis]} (input {x[axis]})", value=want)
        sizes.append(deconv_size(x[axis], pad, k, up, a[axis]))
        ups.append(up)
    out = _out(t, 4, (sizes[0], sizes[1], w[3], *x[3:]))
    if t[2].dims is not None:
        # [#OFM] per the text; [width, height, #OFM] (one per output location, as for the
        # convolution) is beyond it, tested by the CTS, and costs one Add
        if t[2].dims not in ((w[3],), (sizes[0], sizes[1], w[3])):
            _fail(2, f"biases must be [#OFM] = [{w[3]}] (or one per output location, "
                  f"{[sizes[0], sizes[1], w[3]]})", value=list(t[2].dims))
        _same_type(t, 2)
    return out, {"upscale": tuple(ups), "pad": pads, "a": a}


def _fc_core(x: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...] | None) -> int:
    """How many of the input's dimensions one input is: 1 (``[#IFM, #batches...]``) or 3
    (``[width, height, #IFM, #batches...]``), from the weights (4-D weights are
    ``[width, height, #IFM, #OFM]``), and from the output's rank when both fit (a
    ``[n, 1, 1, ...]`` input)."""
    if len(w) == 4 or len(x) <= 2:
        return 3 if len(w) == 4 else 1
    one, three = w[0] == x[0], w[0] == x[0] * x[1] * x[2]
    if one and three and out is not None:
        return 1 if len(out) == len(x) else 3
    return 1 if one and not three else 3


def fully_connected(v: list, t: list[Meta]) -> tuple[dict, dict]:
    """Inputs ``[#IFM, #batches...]`` or ``[width, height, #IFM, #batches...]``, batches
    possibly multi-dimensional (S0 vxFullyConnectedLayer: "In both cases number of batches
    are optional and may be multidimensional"); weights ``[#IFM, #OFM]``, or
    ``[width, height, #IFM, #OFM]`` for the second layout (beyond the 1.2 text, which
    says 2 dimensions; the CTS tests them and they cost a reshape)."""
    x = _rank(t, 0, (1, 2, 3, 4, 5, 6), "[#IFM, #batches] or [width, height, #IFM, "
              "#batches] dimensions")
    w = _rank(t, 1, (2, 4), "[#IFM, #OFM] (or [width, height, #IFM, #OFM]) dimensions")
    _same_type(t, 1)
    _enum(v, 3, ConvertPolicy, "overflow_policy")
    _enum(v, 4, RoundPolicy, "rounding_policy")
    if len(w) == 4 and len(x) < 3:
        _fail(1, "4-D weights [width, height, #IFM, #OFM] need a [width, height, #IFM, "
              "#batches] input", value=list(w), limit="2-D weights")
    core = _fc_core(x, w, t[5].dims)
    ifm, batches = (x[0], x[1:]) if core == 1 else (x[0] * x[1] * x[2], x[3:])
    k = math.prod(w[:-1])
    if len(w) == 4 and tuple(w[:3]) != tuple(x[:3]):
        _fail(1, f"weights {list(w)} must be [width, height, #IFM, #OFM] with the input's "
              f"{list(x[:3])}", value=list(w), limit=list(x[:3]))
    if k != ifm:
        _fail(1, f"weights have {k} inputs, the input has {ifm}"
              + (" (width * height * #IFM)" if core == 3 else ""), value=list(w),
              limit=f"dimension 0 = {ifm}")
    ofm = w[-1]
    got = t[5].dims
    n = math.prod(batches)
    if got is not None and len(got) and got[0] in (0, ofm) and all(got[1:]) and \
            math.prod(got[1:]) == n and len(got) != 1 + len(batches):
        want = (ofm, *got[1:])               # the same batches written another way
    else:
        want = (ofm, *batches) if batches or core == 1 else (ofm,)
    out = _out(t, 5, want)
    if t[2].dims is not None:
        if t[2].dims != (ofm,):
            _fail(2, f"biases must be [#OFM] = [{ofm}]", value=list(t[2].dims))
        _same_type(t, 2)
    return out, {"flatten": core == 3, "core": core, "k": k}


def pooling(v: list, t: list[Meta]) -> tuple[dict, dict]:
    x = _rank(t, 0, (3, 4, 5, 6), "[width, height, #IFM, #batches...] dimensions")
    kind = _enum(v, 1, PoolingType, "pooling_type")
    size = (_nonneg(v, 2, "pooling_size_x", 1), _nonneg(v, 3, "pooling_size_y", 1))
    pads = (_nonneg(v, 4, "pooling_padding_x"), _nonneg(v, 5, "pooling_padding_y"))
    rounding = int(_enum(v, 6, RoundingType, "rounding"))
    sizes, skips = [], []
    for axis in (0, 1):
        k, pad = size[axis], pads[axis]
        if pad >= k:
            _fail(4 + axis, f"padding {pad} must be smaller than the pooling size {k}",
                  Status.ERROR_INVALID_PARAMETERS, value=pad, limit=f"< {k}")
        if x[axis] + 2 * pad < k:
            _fail(2 + axis, f"pooling size {k} is larger than the padded input "
                  f"{x[axis] + 2 * pad}", Status.ERROR_INVALID_PARAMETERS, value=k)
        want = _spatial_out(t, 7, x, axis)
        skip = 1 if not want else infer_skip(x[axis], pad, k, want, rounding)
        if skip is None:
            _fail(7, f"output {'width' if axis == 0 else 'height'} {want} cannot come from "
                  f"input {x[axis]}, padding {pad}, size {k} and "
                  f"{RoundingType(rounding).name.lower()} rounding with an integer skip",
                  value=want)
        sizes.append(conv_size(x[axis], pad, k, skip, rounding))
        skips.append(skip)
    out = _out(t, 7, (sizes[0], sizes[1], *x[2:]))
    return out, {"kind": kind, "size": size, "pad": pads, "skip": tuple(skips),
                 "rounding": rounding}


def same_shape(v: list, t: list[Meta]) -> tuple[dict, dict]:
    """Softmax and activation: the output has the input's dimensions."""
    x = t[0].dims
    if x is None or not all(x):
        _fail(0, f"{t[0].name} has undefined dimensions", value=x)
    out_i = len(t) - 1
    derived: dict[str, Any] = {}
    if len(v) == 5:                                   # activation: function, a, b
        derived["function"] = _enum(v, 1, ActivationFunction, "function")
        for i, name in ((2, "a"), (3, "b")):
            try:
                derived[name] = float(v[i])
            except (TypeError, ValueError):
                _fail(i, f"{name} is not a number", Status.ERROR_INVALID_PARAMETERS,
                      value=v[i])
            if not math.isfinite(derived[name]):
                _fail(i, f"{name} must be finite", Status.ERROR_INVALID_PARAMETERS,
                      value=v[i])
    return _out(t, out_i, x), derived


def normalization(v: list, t: list[Meta]) -> tuple[dict, dict]:
    x = _rank(t, 0, (3, 4, 5, 6), "[width, height, #IFM, #batches...] dimensions")
    kind = _enum(v, 1, NormType, "type")
    n = _nonneg(v, 2, "normalization_size", 1)
    if n not in (3, 5, 7):
        _fail(2, "normalization_size must be odd, 3 to 7", Status.ERROR_INVALID_PARAMETERS,
              value=n, limit=(3, 5, 7))
    ab = []
    for i, name in ((3, "alpha"), (4, "beta")):
        try:
            val = float(v[i])
        except (TypeError, ValueError):
            val = float("nan")
        if not val > 0 or not math.isfinite(val):
            _fail(i, f"{name} must be a positive number", Status.ERROR_INVALID_PARAMETERS,
                  value=v[i], limit="> 0")
        ab.append(val)
    return _out(t, 5, x), {"kind": kind, "size": n, "alpha": ab[0], "beta": ab[1]}


def roi_pooling(v: list, t: list[Meta]) -> tuple[dict, dict]:
    """Data ``[width, height, #IFM, (#batches)]``, ROIs ``[4, roi_count, (#batches)]`` (S0:
    "#batches is optional and must be the same as in inputs"), output ``[pooled_width,
    pooled_height, #IFM, roi_count, (#batches)]``: each image pools its own ROIs."""
    x = _rank(t, 0, (3, 4), "[width, height, #IFM, (#batches)] dimensions")
    nb = x[3] if len(x) == 4 else 1
    r = _rank(t, 1, (2, 3), "[4, roi_count, (#batches)] dimensions")
    if r[0] != 4 or (len(r) == 3 and r[2] != nb) or (len(r) == 2 and nb != 1):
        _fail(1, f"ROIs must be [4, roi_count, #batches] with the input's #batches {nb} "
              "(x0, y0, x1, y1 per ROI)", value=list(r), limit=[4, "roi_count", nb])
    kind = getattr(v[2], "pool_type", None)
    if _struct_enum(v[2], "pool_type", 2, PoolingType) != PoolingType.MAX:
        _fail(2, "roi_pool_params.pool_type must be MAX", Status.ERROR_INVALID_PARAMETERS,
              value=kind, limit="MAX")
    got = t[3].dims
    ranks = (4,) if nb == 1 and len(x) == 3 else (4, 5) if nb == 1 else (5,)
    if got is None or len(got) not in ranks or not got[0] or not got[1]:
        _fail(3, f"{t[3].name} must be [pooled_width, pooled_height, #IFM, roi_count"
              + (", #batches" if nb > 1 else "") + "] with the pooled size defined",
              value=got)
    want = (got[0], got[1], x[2], r[1]) + ((nb,) if len(got) == 5 else ())
    return _out(t, 3, want), {"pooled": (got[0], got[1]), "batches": nb}
