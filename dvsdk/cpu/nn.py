"""Numpy kernels for the sliding-window and normalisation ops (ONNX semantics, NCHW).

Conv/ConvTranspose/MaxPool/AveragePool/LRN/BatchNormalization/Softmax/Gemm and friends
(Resize: :mod:`dvsdk.cpu.resize`), plus the attribute-resolution helpers
(:func:`resolve_conv`, :func:`resolve_pool`, :func:`resolve_conv_transpose`) that the
compiler's shape inference shares with the kernels so both agree by construction.

Every kernel has the signature ``kernel(inputs: list[np.ndarray | None], attrs: dict) ->
list[np.ndarray]``; absent optional inputs are None. The registry lives in
:mod:`dvsdk.cpu.ops`. No onnx import here: the board runtime uses these kernels as its CPU
fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ..hw import arith, elementary
from .resize import resize

Arr = np.ndarray
Attrs = dict[str, Any]


# --------------------------------------------------------------------------- attributes
def _ints(v: Any, n: int, default: int) -> list[int]:
    if v is None or (hasattr(v, "__len__") and len(v) == 0):
        return [default] * n
    return [int(i) for i in v]


def split_same(total: int, auto_pad: str) -> tuple[int, int]:
    """ONNX auto_pad: SAME_UPPER puts the odd pixel at the end, SAME_LOWER at the start."""
    small, big = total // 2, total - total // 2
    return (small, big) if auto_pad == "SAME_UPPER" else (big, small)


def _auto_pads(auto_pad: str, in_sp: Sequence[int], k: Sequence[int], s: Sequence[int],
               d: Sequence[int]) -> list[int]:
    """Explicit ``[begins..., ends...]`` for auto_pad SAME_UPPER / SAME_LOWER / VALID."""
    n = len(in_sp)
    if auto_pad == "VALID":
        return [0] * (2 * n)
    begins, ends = [], []
    for i in range(n):
        out = -(-in_sp[i] // s[i])
        total = max(0, (out - 1) * s[i] + (k[i] - 1) * d[i] + 1 - in_sp[i])
        begin, end = split_same(total, auto_pad)
        begins.append(begin)
        ends.append(end)
    return begins + ends


def _window(attrs: Attrs, x_shape: Sequence[int], w_shape: Sequence[int]
            ) -> tuple[int, list[int], list[int], list[int], str]:
    """(spatial rank, kernel, strides, dilations, auto_pad) of a Conv/ConvTranspose."""
    n = len(x_shape) - 2
    k = _ints(attrs.get("kernel_shape"), n, 1) if attrs.get("kernel_shape") else list(
        map(int, w_shape[2:]))
    return (n, k, _ints(attrs.get("strides"), n, 1), _ints(attrs.get("dilations"), n, 1),
            attrs.get("auto_pad", "NOTSET") or "NOTSET")


def resolve_conv(attrs: Attrs, x_shape: Sequence[int], w_shape: Sequence[int]) -> Attrs:
    """Explicit Conv attributes: kernel_shape, strides, pads, dilations, group."""
    n, k, s, d, auto = _window(attrs, x_shape, w_shape)
    if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = _auto_pads(auto, x_shape[2:], k, s, d)
    else:
        pads = _ints(attrs.get("pads"), 2 * n, 0)
    return {"kernel_shape": k, "strides": s, "pads": pads, "dilations": d,
            "group": int(attrs.get("group", 1))}


def conv_output_shape(x_shape: Sequence[int], w_shape: Sequence[int], a: Attrs) -> tuple:
    """NCHW output shape of a Conv with resolved attributes ``a``."""
    n = len(x_shape) - 2
    sp = []
    for i in range(n):
        eff = (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1
        sp.append((x_shape[2 + i] + a["pads"][i] + a["pads"][n + i] - eff) // a["strides"][i] + 1)
    return (int(x_shape[0]), int(w_shape[0]), *sp)


def resolve_pool(attrs: Attrs, x_shape: Sequence[int]) -> Attrs:
    """Explicit MaxPool/AveragePool attributes (kernel_shape must be present)."""
    n = len(x_shape) - 2
    k = [int(i) for i in attrs["kernel_shape"]]
    s = _ints(attrs.get("strides"), n, 1)
    d = _ints(attrs.get("dilations"), n, 1)
    auto = attrs.get("auto_pad", "NOTSET") or "NOTSET"
    if auto in ("SAME_UPPER", "SAME_LOWER", "VALID"):
        pads = _auto_pads(auto, x_shape[2:], k, s, d)
    else:
        pads = _ints(attrs.get("pads"), 2 * n, 0)
    out = {"kernel_shape": k, "strides": s, "pads": pads, "dilations": d,
           "ceil_mode": int(attrs.get("ceil_mode", 0)) if auto == "NOTSET" else 0}
    if "count_include_pad" in attrs:
        out["count_include_pad"] = int(attrs["count_include_pad"])
    if "storage_order" in attrs:
        out["storage_order"] = int(attrs["storage_order"])
    return out


def pool_output_shape(x_shape: Sequence[int], a: Attrs) -> tuple:
    """Output shape of a pool; ceil_mode drops a last window starting in the end padding."""
    n = len(x_shape) - 2
    sp = []
    for i in range(n):
        size, pb, pe = x_shape[2 + i], a["pads"][i], a["pads"][n + i]
        eff = (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1
        span, st = size + pb + pe - eff, a["strides"][i]
        if a.get("ceil_mode", 0):
            o = -(-span // st) + 1
            if (o - 1) * st >= size + pb:
                o -= 1
        else:
            o = span // st + 1
        sp.append(o)
    return (int(x_shape[0]), int(x_shape[1]), *sp)


def resolve_conv_transpose(attrs: Attrs, x_shape: Sequence[int], w_shape: Sequence[int]) -> Attrs:
    """Explicit ConvTranspose attributes: pads and output_padding replace output_shape/auto_pad."""
    n, k, s, d, auto = _window(attrs, x_shape, w_shape)
    op = _ints(attrs.get("output_padding"), n, 0)
    out_shape = attrs.get("output_shape")
    if out_shape is not None and len(out_shape) > 0:
        target = [int(v) for v in out_shape][-n:]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        target = [int(x_shape[2 + i]) * s[i] for i in range(n)]
    else:
        target = None
    if target is None:
        pads = [0] * (2 * n) if auto == "VALID" else _ints(attrs.get("pads"), 2 * n, 0)
    else:
        begins, ends = [], []
        for i in range(n):
            total = s[i] * (x_shape[2 + i] - 1) + op[i] + (k[i] - 1) * d[i] + 1 - target[i]
            if total < 0:  # output larger than the natural size: grow output_padding
                op[i] -= total
                total = 0
            begin, end = split_same(total, auto)
            begins.append(begin)
            ends.append(end)
        pads = begins + ends
    return {"kernel_shape": k, "strides": s, "pads": pads, "dilations": d,
            "group": int(attrs.get("group", 1)), "output_padding": op}


def conv_transpose_output_shape(x_shape: Sequence[int], w_shape: Sequence[int], a: Attrs) -> tuple:
    n = len(x_shape) - 2
    sp = []
    for i in range(n):
        sp.append(a["strides"][i] * (x_shape[2 + i] - 1) + a["output_padding"][i]
                  + (a["kernel_shape"][i] - 1) * a["dilations"][i] + 1
                  - a["pads"][i] - a["pads"][n + i])
    return (int(x_shape[0]), int(w_shape[1]) * a["group"], *sp)


# --------------------------------------------------------------------------- windows
def _windows(xp: Arr, out_sp: Sequence[int], k: Sequence[int], s: Sequence[int],
             d: Sequence[int]) -> Arr:
    """Read-only view (N, C, *out, *k) of the padded input ``xp``."""
    n = len(k)
    st = xp.strides
    shape = (*xp.shape[:2], *out_sp, *k)
    strides = (*st[:2], *(st[2 + i] * s[i] for i in range(n)),
               *(st[2 + i] * d[i] for i in range(n)))
    return as_strided(xp, shape, strides, writeable=False)


def _pad_spatial(x: Arr, pads: Sequence[int], extra: Sequence[int], value: float) -> Arr:
    n = x.ndim - 2
    width = [(0, 0), (0, 0)] + [(pads[i], pads[n + i] + extra[i]) for i in range(n)]
    if not any(b or e for b, e in width):
        return x
    return np.pad(x, width, mode="constant", constant_values=value)


def _crop_negative(x: Arr, pads: Sequence[int]) -> tuple[Arr, list[int]]:
    """Negative pads crop; return the cropped input and the non-negative pads."""
    n = x.ndim - 2
    if min(pads) >= 0:
        return x, list(pads)
    idx = [slice(None), slice(None)]
    for i in range(n):
        b, e = -min(pads[i], 0), -min(pads[n + i], 0)
        idx.append(slice(b, x.shape[2 + i] - e))
    return x[tuple(idx)], [max(p, 0) for p in pads]


def conv(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Conv (any group, dilation, stride, pads; 1-D/2-D/3-D) by im2col + matmul."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    a = resolve_conv(attrs, x.shape, w.shape)
    x, pads = _crop_negative(x, a["pads"])
    a = {**a, "pads": pads}
    out_shape = conv_output_shape(x.shape, w.shape, a)
    n_sp = x.ndim - 2
    g = a["group"]
    N, C = x.shape[:2]
    M = w.shape[0]
    cg, mg = C // g, M // g
    xp = np.ascontiguousarray(_pad_spatial(x, pads, [0] * n_sp, 0.0))
    win = _windows(xp, out_shape[2:], a["kernel_shape"], a["strides"], a["dilations"])
    P = int(np.prod(out_shape[2:]))
    K = int(np.prod(a["kernel_shape"]))
    # (N, G, Cg, *out, *k) -> (N, G, *out, Cg, *k) -> (N, G, P, Cg*K)
    win = win.reshape(N, g, cg, *out_shape[2:], *a["kernel_shape"])
    perm = (0, 1, *range(3, 3 + n_sp), 2, *range(3 + n_sp, 3 + 2 * n_sp))
    cols = win.transpose(perm).reshape(N, g, P, cg * K)
    wm = w.reshape(g, mg, cg * K).transpose(0, 2, 1)  # (G, Cg*K, Mg)
    y = arith.matmul_nd(cols, wm)  # (N, G, P, Mg)
    y = y.transpose(0, 1, 3, 2).reshape(out_shape)
    if b is not None:
        y = y + b.reshape((1, M) + (1,) * n_sp)
    return [y.astype(x.dtype, copy=False)]


def conv_transpose(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX ConvTranspose (groups, dilations, output_padding, output_shape, auto_pad)."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    a = resolve_conv_transpose(attrs, x.shape, w.shape)
    n_sp = x.ndim - 2
    g = a["group"]
    N, C = x.shape[:2]
    cg, mg = C // g, w.shape[1]
    k = a["kernel_shape"]
    in_sp = x.shape[2:]
    K = int(np.prod(k))
    P = int(np.prod(in_sp))
    xg = x.reshape(N, g, cg, P)
    wg = w.reshape(g, cg, mg * K).transpose(0, 2, 1)  # (G, Mg*K, Cg)
    cols = arith.matmul_nd(wg, xg).reshape(N, g * mg, *k, *in_sp)
    full = [a["strides"][i] * (in_sp[i] - 1) + (k[i] - 1) * a["dilations"][i] + 1
            + a["output_padding"][i] for i in range(n_sp)]
    out = np.zeros((N, g * mg, *full), dtype=np.result_type(x.dtype, np.float32))
    for tap in np.ndindex(*k):
        idx = [slice(None), slice(None)]
        for i in range(n_sp):
            start = tap[i] * a["dilations"][i]
            idx.append(slice(start, start + a["strides"][i] * (in_sp[i] - 1) + 1, a["strides"][i]))
        out[tuple(idx)] += cols[(slice(None), slice(None), *tap)]
    crop = [slice(None), slice(None)]
    for i in range(n_sp):
        crop.append(slice(a["pads"][i], full[i] - a["pads"][n_sp + i]))
    y = out[tuple(crop)]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * n_sp)
    return [np.ascontiguousarray(y, dtype=x.dtype)]


def _pool_prepare(x: Arr, a: Attrs, value: float, contiguous: bool = True
                  ) -> tuple[Arr, tuple, list[int]]:
    out_shape = pool_output_shape(x.shape, a)
    n = x.ndim - 2
    extra = []
    for i in range(n):
        need = (out_shape[2 + i] - 1) * a["strides"][i] + (a["kernel_shape"][i] - 1) * \
            a["dilations"][i] + 1
        extra.append(max(0, need - (x.shape[2 + i] + a["pads"][i] + a["pads"][n + i])))
    xp = _pad_spatial(x, a["pads"], extra, value)
    return (np.ascontiguousarray(xp) if contiguous else xp), out_shape, extra


def max_pool(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX MaxPool (pads, dilations, ceil_mode). Only the values output is produced."""
    x = inputs[0]
    a = resolve_pool(attrs, x.shape)
    low = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    kw = (a["kernel_shape"], a["strides"], a["dilations"])
    r = _max_pool_compiled(x, a)
    if r is not None:
        return [r]
    if x.dtype.kind == "f" and math.prod(a["kernel_shape"]) <= _TAPWISE_MAX:
        nhwc = x.transpose(0, 2, 3, 1) if x.ndim == 4 else None
        if nhwc is not None and nhwc.flags.c_contiguous and not x.flags.c_contiguous:
            # an (N, H, W, C) array seen as NCHW (a device tensor): the taps on it as it
            # lies, the result made NCHW once
            xp, out_shape, _ = _pool_prepare(nhwc.transpose(0, 3, 1, 2), a, low,
                                             contiguous=False)
            xn = xp.transpose(0, 2, 3, 1)
            (kh, kw_), (sh, sw), (dh, dw) = kw
            oh, ow = out_shape[2:]
            r = _max_by_taps([xn[:, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                 j * dw:j * dw + sw * (ow - 1) + 1:sw]
                              for i, j in np.ndindex(kh, kw_)])
            if r is not None:
                return [np.ascontiguousarray(r.transpose(0, 3, 1, 2)).astype(x.dtype,
                                                                            copy=False)]
        else:
            xp, out_shape, _ = _pool_prepare(x, a, low)
            win = _windows(xp, out_shape[2:], *kw)
            lead = (slice(None),) * (win.ndim - len(a["kernel_shape"]))
            r = _max_by_taps([win[lead + t] for t in np.ndindex(*a["kernel_shape"])])
            if r is not None:
                return [r.astype(x.dtype, copy=False)]
    xp, out_shape, _ = _pool_prepare(x, a, low)
    win = _windows(xp, out_shape[2:], *kw)
    n = x.ndim - 2
    axes = tuple(range(2 + n, 2 + 2 * n))
    return [arith.reduce_max(win, axis=axes).astype(x.dtype, copy=False)]


def _max_pool_compiled(x: Arr, a: Attrs) -> Arr | None:
    """A float32 2-D MaxPool without dilation, on an array whose memory is (N, H, W, C) (a
    device tensor seen as NCHW), by the compiled pool on that order
    (:func:`~dvsdk.hw.arith.max_pool_nhwc`), the result C-ordered NCHW as the other paths
    make it; None where it does not apply or where a result is NaN (the caller's paths
    run).  For every result that is not a NaN the same value as ``arith.reduce_max`` over
    the window, a zero result +0 where a tap holds +0, padded positions -inf."""
    if (x.dtype != np.float32 or x.ndim != 4 or any(d != 1 for d in a["dilations"])
            or min(a["pads"]) < 0 or x.size == 0
            or not x.transpose(0, 2, 3, 1).flags.c_contiguous):  # (else a copy: the taps)
        return None
    (kh, kw), (sh, sw) = a["kernel_shape"], a["strides"]
    oh, ow = pool_output_shape(x.shape, a)[2:]
    if min(kh, kw, sh, sw, oh, ow) < 1:
        return None
    return arith.max_pool_nhwc(x, (kh, kw), (sh, sw), (a["pads"][0], a["pads"][1]), (oh, ow))


#: kernels up to this many taps take the maximum tap by tap (:func:`_max_by_taps`)
_TAPWISE_MAX = 32


def _max_by_taps(taps: list[Arr]) -> Arr | None:
    """``arith.reduce_max`` over a pooling window of every output, given as the out-sized
    views of its taps: one ``maximum`` per tap (numpy's reduction over a few strided
    elements at a time is ~10x slower), the same bits, a zero result's sign included (+0
    where a tap holds +0, as reduce_max has it); None where a result is NaN (whose payload
    the reduction chooses: the caller runs it)."""
    r = taps[0].copy()
    for t in taps[1:]:
        np.maximum(r, t, out=r)
    if np.isnan(r).any():
        return None
    zero = r == 0
    nzero = np.count_nonzero(zero)
    if nzero and nzero <= r.size // 16:  # a few zeros: their taps alone (fancy indexing;
        # r is C-ordered: flatnonzero, where np.nonzero of an N-d mask takes ~15x longer)
        at = np.unravel_index(np.flatnonzero(zero), r.shape)
        uint = np.dtype(f"u{r.dtype.itemsize}")
        plus = taps[0][at].view(uint) == 0
        for t in taps[1:]:
            plus |= t[at].view(uint) == 0
        r[at] = np.where(plus, r.dtype.type(0.0), r.dtype.type(-0.0))
    elif nzero:  # (on the bits: +0 is the pattern of all zeros, -0 the sign bit alone)
        uint = np.dtype(f"u{r.dtype.itemsize}")
        plus = taps[0].view(uint) == 0
        for t in taps[1:]:
            plus |= t.view(uint) == 0
        want = (~plus).astype(uint) << uint.type(8 * r.dtype.itemsize - 1)  # +0 or -0
        bits = r.view(uint)
        bits ^= (bits ^ want) * zero  # (arithmetic: a select on a mask of scattered zeros
    return r                          # runs ~10x slower)


def average_pool(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX AveragePool: count_include_pad counts explicit pads but never the ceil_mode tail."""
    x = inputs[0]
    a = resolve_pool(attrs, x.shape)
    n = x.ndim - 2
    xp, out_shape, extra = _pool_prepare(x, a, 0.0)
    axes = tuple(range(2 + n, 2 + 2 * n))
    kw = (a["kernel_shape"], a["strides"], a["dilations"])
    total = _windows(xp, out_shape[2:], *kw).sum(axis=axes, dtype=np.float64)
    # count the window positions that are real input (or input + explicit padding)
    ones = np.ones((1, 1, *x.shape[2:]), dtype=np.float64)
    if a.get("count_include_pad", 0):
        # explicit pads count, the ceil_mode tail beyond them does not
        mask = _pad_spatial(ones, a["pads"], [0] * n, 1.0)
        mask = _pad_spatial(mask, [0] * (2 * n), extra, 0.0)
    else:
        mask = _pad_spatial(ones, a["pads"], extra, 0.0)
    mask = np.ascontiguousarray(mask)
    count = _windows(mask, out_shape[2:], *kw).sum(axis=axes)
    return [(total / np.maximum(count, 1.0)).astype(x.dtype)]


def global_average_pool(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    axes = tuple(range(2, x.ndim))
    return [x.mean(axis=axes, keepdims=True, dtype=np.float64).astype(x.dtype)]


def global_max_pool(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    return [arith.reduce_max(x, axis=tuple(range(2, x.ndim)), keepdims=True)]


# --------------------------------------------------------------------------- norms etc.
def batch_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """Inference BatchNormalization over axis 1."""
    x, scale, bias, mean, var = inputs[:5]
    eps = float(attrs.get("epsilon", 1e-5))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = (scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)).reshape(shape)
    y = (x - mean.reshape(shape)) * inv + bias.reshape(shape)
    return [y.astype(x.dtype)]


def instance_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    x, scale, bias = inputs[:3]
    eps = float(attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    xd = x.astype(np.float64)
    mu = xd.mean(axis=axes, keepdims=True)
    var = xd.var(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (xd - mu) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)
    return [y.astype(x.dtype)]


def lrn(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX LRN across channels: x / (bias + alpha/size * sum(x^2 over window))^beta."""
    x = inputs[0]
    size = int(attrs["size"])
    alpha = float(attrs.get("alpha", 1e-4))
    beta = float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.square(x.astype(np.float64))
    width = [(0, 0), (lo + 1, hi)] + [(0, 0)] * (x.ndim - 2)
    cs = np.cumsum(np.pad(sq, width), axis=1)
    C = x.shape[1]
    win = cs[:, size: size + C] - cs[:, 0:C]
    y = x / elementary.power(bias + alpha / size * win, beta)
    return [y.astype(x.dtype)]


def in_float_type(fn: Any, x: Arr) -> Arr:
    """``fn`` (a function of :mod:`dvsdk.hw.elementary`, float64) of float ``x``, in x's
    type: the bits of ``fn(x).astype(x.dtype)``, for float32 in one compiled pass where
    the module is built (``elementary.compiled_f32``)."""
    y = elementary.compiled_f32(fn, x) if x.dtype == np.float32 else None
    return fn(x).astype(x.dtype) if y is None else y


def _exp(x: Arr) -> Arr:
    """e**x in x's float type (:mod:`dvsdk.hw.elementary`: the same bits on every machine)."""
    return in_float_type(elementary.exp, x) if x.dtype.kind == "f" else np.exp(x)


def _softmax_2d(x: Arr, axis: int, opset: int) -> tuple[Arr, tuple]:
    axis = axis % max(x.ndim, 1)
    if opset >= 13:
        return x, (axis,)
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return x.reshape(lead, -1), (1,)


def softmax(inputs: list, attrs: Attrs) -> list[Arr]:
    """Softmax; ``attrs['opset'] < 13`` selects the old coerce-to-2-D semantics."""
    x = inputs[0]
    opset = int(attrs.get("opset", 13))
    xv, axes = _softmax_2d(x, int(attrs.get("axis", -1 if opset >= 13 else 1)), opset)
    # (z in C order whatever xv's strides: the exponentials then go in place; element by
    # element the same values, and e below is C-ordered either way, so its sums are too)
    z = np.subtract(xv, arith.reduce_max(xv, axis=axes, keepdims=True), order="C")
    # (in place where compiled: each fresh array of a large softmax costs its page faults,
    # ~2 us a page here, as much as the exponentials; element by element, the same values)
    e = elementary.compiled_f32(elementary.exp, z, z) if z.flags.c_contiguous else None
    if e is None:
        e = _exp(z)
    s = e.sum(axis=axes, keepdims=True)
    if s.dtype == e.dtype and e.dtype.kind == "f":
        y = np.divide(e, s, out=e)  # (e is this function's own array)
    else:
        y = e / s
    return [y.reshape(x.shape).astype(x.dtype, copy=False)]


def log_softmax(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    opset = int(attrs.get("opset", 13))
    xv, axes = _softmax_2d(x, int(attrs.get("axis", -1 if opset >= 13 else 1)), opset)
    z = xv - arith.reduce_max(xv, axis=axes, keepdims=True)
    s = _exp(z).sum(axis=axes, keepdims=True)
    y = z - (elementary.log(s).astype(s.dtype) if s.dtype.kind == "f" else np.log(s))
    return [y.reshape(x.shape).astype(x.dtype)]


def gemm(inputs: list, attrs: Attrs) -> list[Arr]:
    """Y = alpha * A' @ B' + beta * C (A', B' optionally transposed)."""
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    y = arith.matmul_nd(a, b)
    alpha = float(attrs.get("alpha", 1.0))
    if alpha != 1.0:
        y = y * np.float32(alpha)
    if c is not None:
        beta = float(attrs.get("beta", 1.0))
        y = y + (c * np.float32(beta) if beta != 1.0 else c)
    return [y.astype(inputs[0].dtype, copy=False)]


def depth_to_space(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    bs = int(attrs["blocksize"])
    n, c, h, w = x.shape
    if attrs.get("mode", "DCR") == "DCR":
        y = x.reshape(n, bs, bs, c // bs**2, h, w).transpose(0, 3, 4, 1, 5, 2)
    else:
        y = x.reshape(n, c // bs**2, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
    return [y.reshape(n, c // bs**2, h * bs, w * bs)]


def space_to_depth(inputs: list, attrs: Attrs) -> list[Arr]:
    x = inputs[0]
    bs = int(attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // bs, bs, w // bs, bs).transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * bs * bs, h // bs, w // bs)]


NN_KERNELS = {
    "Conv": conv,
    "ConvTranspose": conv_transpose,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool,
    "Resize": resize,
    "BatchNormalization": batch_normalization,
    "InstanceNormalization": instance_normalization,
    "LRN": lrn,
    "Softmax": softmax,
    "LogSoftmax": log_softmax,
    "Gemm": gemm,
    "DepthToSpace": depth_to_space,
    "SpaceToDepth": space_to_depth,
}
