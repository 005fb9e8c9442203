"""Conv-engine arithmetic of the DV700 simulator (reference §4).

Every function here is pure: it takes plain HWC ``float32`` arrays (one sample,
``(height, width, channels)``) holding FP16-representable values and returns a
new ``float32`` array.  The command processor unpacks tensors from the
8-channel-chunked layout (§1), calls these functions in the fused order of §4.1
(conv → add → max-pool/upsample → activation → rectify) and rounds to FP16 with
:func:`fp16` where the hardware stores.

Numerics (§4.2 [AMBIG]: the accumulator precision and summation order are not
specified): firmware_spec/arithmetic.md, our choice.  Each output of a convolution is the
float32 sum of its products in a fixed order (:func:`dvsdk.hw.arith.matmul`), so it is the
same on every machine; with the "pure int" test data (§12) every partial sum is an exact
small integer, so the result is exact.

All size arithmetic follows the C integer semantics of §4.2 / §7.1: an output
extent is ``(pad_a + in + pad_b - k_eff) // stride + 1``; a negative numerator
(which C would truncate towards zero) is rejected with
:class:`~dvsdk.errors.InvalidArgument` instead of producing a bogus size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import native
from ..errors import InvalidArgument
from ..hw import arith
from ..hw.activation import (
    ACT_ELU,
    ACT_LEAKY_RELU,
    ACT_NONE,
    ACT_PRELU,
    ACT_RELU6,
    ACT_SIGMOID,
    ACT_TANH,
    activation,
    elu_alpha,
    rectify,
)
from ..hw.fp16 import round_f16

__all__ = [
    "fp16",
    "conv_out_size",
    "conv2d",
    "deconv2d",
    "max_pool",
    "avg_pool",
    "upsample2x",
    "activation",
    "rectify",
    "finish",
    "lrn",
    "ACT_NONE",
    "ACT_TANH",
    "ACT_LEAKY_RELU",
    "ACT_SIGMOID",
    "ACT_PRELU",
    "ACT_ELU",
    "ACT_RELU6",
    "LRN_X_SAMPLE",
    "LRN_H_INV",
    "LRN_COEF0",
    "LRN_COEF1",
]

Pair = tuple[int, int] | Sequence[int] | int
Quad = tuple[int, int, int, int] | Sequence[int] | int

# im2col working-set budget per matmul block (bytes).  Larger convs are split
# into blocks of output rows so memory stays bounded; this is a loop over row
# blocks, never over pixels.
_IM2COL_BUDGET = 32 << 20
# depthwise: float32 elements per block of output rows (the block and one product of it
# stay in L2 while the taps accumulate)
_DW_BLOCK = 16384


# ---------------------------------------------------------------------------
# helpers


def fp16(x: np.ndarray | float) -> np.ndarray:
    """Round to IEEE binary16 (round-to-nearest-even) and back to float32.

    The DV700 stores every tensor as FP16 (§1, conventions); the simulator calls
    this wherever the hardware writes to memory.  Overflow gives ±inf, as a
    float16 cast does.
    """
    return round_f16(np.asarray(x, dtype=np.float32))


def _pair(v: Pair, name: str, minimum: int) -> tuple[int, int]:
    if isinstance(v, (int, np.integer)):
        a = b = int(v)
    else:
        t = tuple(int(e) for e in v)
        if len(t) != 2:
            raise InvalidArgument(f"{name} needs 2 values", field=name, value=v, limit=2)
        a, b = t
    for e in (a, b):
        if e < minimum:
            raise InvalidArgument(f"{name} out of range", field=name, value=v, limit=f">={minimum}")
    return a, b


def _quad(v: Quad, name: str) -> tuple[int, int, int, int]:
    if isinstance(v, (int, np.integer)):
        t = (int(v),) * 4
    else:
        t = tuple(int(e) for e in v)
        if len(t) != 4:
            raise InvalidArgument(f"{name} needs 4 values (l, r, t, b)", field=name, value=v,
                                  limit=4)
    if min(t) < 0:
        raise InvalidArgument(f"{name} must be non-negative", field=name, value=v, limit=">=0")
    return t  # type: ignore[return-value]


def _hwc(x: np.ndarray, name: str = "x") -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    if a.ndim != 3 or min(a.shape) < 1:
        raise InvalidArgument("tensor must be non-empty HWC (height, width, channels)",
                              field=name, value=a.shape, limit="3-D, every extent >= 1")
    return a


def conv_out_size(n: int, k_eff: int, pad_a: int, pad_b: int, stride: int, field: str = "size"
                  ) -> int:
    """Output extent ``(pad_a + n + pad_b - k_eff) // stride + 1`` (§4.2, §7.1).

    Raises :class:`InvalidArgument` when the numerator is negative (the window
    does not fit even once), where C truncation would silently give 1.
    """
    num = pad_a + n + pad_b - k_eff
    if num < 0:
        raise InvalidArgument("window larger than the padded input: empty output",
                              field=field, value=pad_a + n + pad_b, limit=f">={k_eff}")
    return num // stride + 1


def _bias(bias: np.ndarray | None, m: int) -> np.ndarray:
    if bias is None:
        return np.zeros(m, np.float32)
    b = np.asarray(bias, dtype=np.float32).reshape(-1)
    if b.shape != (m,):
        raise InvalidArgument("bias must have one value per output channel", field="bias",
                              value=b.shape, limit=(m,))
    return b


# ---------------------------------------------------------------------------
# convolution


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    stride: Pair = (1, 1),
    pads: Quad = (0, 0, 0, 0),
    dilation: Pair = (1, 1),
    depthwise: bool = False,
    exact_products: bool = False,
) -> np.ndarray:
    """2-D cross-correlation as the conv engine computes it (§4.2).

    Args:
        x: input ``(H, W, C)``.
        w: weights ``(M, C, ky, kx)``, or ``(M, 1, ky, kx)`` with ``M == C`` when
            ``depthwise`` (conv_enable 3: output channel j sees input channel j only).
        bias: ``(M,)`` or None (zeros); added to the accumulated sum.
        stride: ``(sx, sy)``.
        pads: ``(left, right, top, bottom)`` zero padding, asymmetric.
        dilation: ``(dx, dy)``; ``k_eff = (k - 1) * d + 1``.
        depthwise: per-channel convolution.
        exact_products: every product is exact in float32 (binary16 operands, as the
            conv engine's always are): the compiled product may fuse multiply and add
            (:func:`dvsdk.hw.arith.matmul`); with other float32 data leave it False.

    Returns:
        ``float32 (OH, OW, M)``, **not** rounded to FP16 (the caller rounds).
        Output x uses input columns ``x*sx - pad_l + j*dx`` for ``j < kx`` (rows
        likewise), which is what the hardware's ``P = max(kx, ky) | 1`` window with
        the kernel packed bottom-left plus its internal extra pads amounts to for
        even and non-square kernels (§4.2).

    Implementation: the fixed-order product (:func:`dvsdk.hw.arith.matmul`: taps in
    row-major order, channels ascending, one float32 add per product) over an im2col view
    (``sliding_window_view``), in blocks of output rows to bound memory; depthwise is a
    sum over the ``kx*ky`` taps of shifted slices, in the same order.
    """
    x = _hwc(x)
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 4 or min(w.shape) < 1:
        raise InvalidArgument("weights must be (M, C, ky, kx)", field="w", value=w.shape,
                              limit="4-D")
    h_in, w_in, c = x.shape
    m, wc, ky, kx = w.shape
    if depthwise:
        if wc != 1 or m != c:
            raise InvalidArgument("depthwise weights must be (C, 1, ky, kx) with M == C",
                                  field="w", value=w.shape, limit=(c, 1, ky, kx))
    elif wc != c:
        raise InvalidArgument("weight input channels differ from the input's", field="w",
                              value=wc, limit=c)
    b = _bias(bias, m)
    sx, sy = _pair(stride, "stride", 1)
    dx, dy = _pair(dilation, "dilation", 1)
    pl, pr, pt, pb = _quad(pads, "pads")
    kex, key = (kx - 1) * dx + 1, (ky - 1) * dy + 1
    ow = conv_out_size(w_in, kex, pl, pr, sx, "width")
    oh = conv_out_size(h_in, key, pt, pb, sy, "height")

    if depthwise:
        if native.NATIVE is not None:  # the same loop compiled (padding inside): same bits
            out = np.empty((oh, ow, c), np.float32)
            native.NATIVE.depthwise(np.ascontiguousarray(x),
                                    np.ascontiguousarray(w[:, 0].transpose(1, 2, 0)),
                                    np.ascontiguousarray(b), out, sx, sy, dx, dy, pl, pt)
            return out
        xp = np.pad(x, ((pt, pb), (pl, pr), (0, 0))) if pl or pr or pt or pb else x
        return _depthwise(xp, w, b, (oh, ow), (sx, sy), (dx, dy))
    if kx == ky == 1 and sx == sy == 1 and not (pl or pr or pt or pb):
        # pointwise: the input itself is the im2col matrix; the weights as the same (C, M)
        # matrix as below (the conv unit keeps them in that memory order: no copy)
        wmat = np.ascontiguousarray(w.reshape(m, c).T)
        out = arith.matmul(x.reshape(-1, c), wmat,
                           exact_products=exact_products).reshape(oh, ow, m)
        return _add_per_channel(out, b)

    xp = np.pad(x, ((pt, pb), (pl, pr), (0, 0))) if pl or pr or pt or pb else x
    # windows: (rows, cols, C, key, kex) -> strided/dilated (OH, OW, C, ky, kx)
    win = sliding_window_view(xp, (key, kex), axis=(0, 1))
    win = win[: (oh - 1) * sy + 1: sy, : (ow - 1) * sx + 1: sx, :, ::dy, ::dx]
    win = win.transpose(0, 1, 3, 4, 2)  # (OH, OW, ky, kx, C): C innermost for the copy
    kdim = ky * kx * c
    wmat = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(kdim, m))
    packed = arith.pack_b(wmat)
    out = np.empty((oh, ow, m), np.float32)
    rows_per_block = max(1, _IM2COL_BUDGET // max(1, ow * kdim * 4))
    for r in range(0, oh, rows_per_block):
        blk = win[r:r + rows_per_block]
        n = blk.shape[0] * ow
        arith.matmul(blk.reshape(n, kdim), wmat, out[r:r + rows_per_block].reshape(n, m),
                     packed=packed, exact_products=exact_products)
    return _add_per_channel(out, b)


def _add_per_channel(out: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``out += v`` over the channel axis of a contiguous ``(H, W, C)`` array, done as
    ``(H, W*C) += tile(v, W)`` so numpy's inner loop runs over whole rows (not C values)."""
    oh, ow, m = out.shape
    out.reshape(oh, ow * m)[...] += np.tile(v, ow)
    return out


def _depthwise(xp: np.ndarray, w: np.ndarray, b: np.ndarray, out_hw: tuple[int, int],
               stride: tuple[int, int], dilation: tuple[int, int]) -> np.ndarray:
    """Depthwise correlation of the padded input ``xp`` (see :func:`conv2d`).

    ``out = 0 + tap0*w0 + tap1*w1 + ...`` in row-major tap order, each product rounded to
    float32 before its add (no FMA), then ``+ bias``.  Each tap is one multiply-add over
    ``(OH, OW*C)`` rows with a weight row tiled ``OW`` times, so numpy's inner loops are
    whole output rows; a column stride ``sx > 1`` reads from ``sx`` de-interleaved copies
    of the input (one per column phase) to keep the rows contiguous.
    """
    (oh, ow), (sx, sy), (dx, dy) = out_hw, stride, dilation
    hp, wp, c = xp.shape
    m, _, ky, kx = w.shape
    taps = np.tile(w.reshape(m, ky * kx).T, (1, ow))  # (ky*kx, OW*C), channel fastest
    phases: dict[int, np.ndarray] = {}

    def columns(c0: int) -> tuple[np.ndarray, int]:
        """The input as ``(Hp, cols*C)`` rows holding column ``c0`` and every sx-th after
        it, and the flat offset of ``c0`` in them."""
        p = c0 % sx
        if p not in phases:
            plane = xp[:, p::sx, :] if sx > 1 else xp
            phases[p] = np.ascontiguousarray(plane).reshape(hp, -1)
        return phases[p], (c0 // sx) * c

    bias_row = np.tile(b, ow)
    out = np.empty((oh, ow * c), np.float32)
    step = max(1, _DW_BLOCK // (ow * c))  # output rows per block: block and product in L2
    prod = np.empty((min(step, oh), ow * c), np.float32)
    for r0 in range(0, oh, step):
        o = out[r0:r0 + step]
        p = prod[:o.shape[0]]
        o.fill(0)
        for i in range(ky):
            y0 = r0 * sy + i * dy
            rows = slice(y0, y0 + (o.shape[0] - 1) * sy + 1, sy)
            for j in range(kx):
                plane, off = columns(j * dx)
                np.multiply(plane[rows, off:off + ow * c], taps[i * kx + j], out=p)
                o += p
        o += bias_row
    return out.reshape(oh, ow, c)


def deconv2d(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None,
    stride: Pair = (1, 1),
    pads: Quad = (0, 0, 0, 0),
    depthwise: bool = False,
    dilation: Pair = (1, 1),
    exact_products: bool = False,
) -> np.ndarray:
    """Deconvolution as the hardware performs it (§4.2, conv_enable 5 / 7).

    The input is zero-inserted to ``(in - 1) * s + 1`` samples per axis, padded
    with the given **FPGA pads** ``(l, r, t, b)`` and correlated with stride 1.
    The weights are used exactly as stored in the command, i.e. the caller has
    already rotated each kernel plane by 180° and passes ``pad_fpga = k_eff - 1 -
    pad``; under those conventions the result equals a framework transposed
    convolution (see the tests).  ``dilation`` (default 1) is the stride-1
    dilated correlation the user driver allows together with deconv.

    Output extent: ``(in - 1) * s + 1 + pad_a + pad_b - k_eff + 1``.  Returns
    unrounded ``float32 (OH, OW, M)``.
    """
    x = _hwc(x)
    sx, sy = _pair(stride, "stride", 1)
    h_in, w_in, c = x.shape
    if sx == 1 and sy == 1:
        z = x
    else:
        z = np.zeros(((h_in - 1) * sy + 1, (w_in - 1) * sx + 1, c), np.float32)
        z[::sy, ::sx, :] = x
    return conv2d(z, w, bias, (1, 1), pads, dilation, depthwise, exact_products)


# ---------------------------------------------------------------------------
# pooling and resampling


def _pool_windows(x: np.ndarray, size: Pair, stride: Pair, pads: Quad, fill: float
                  ) -> tuple[np.ndarray, int, int, int, int, int, int]:
    kx, ky = _pair(size, "size", 1)
    sx, sy = _pair(stride, "stride", 1)
    pl, pr, pt, pb = _quad(pads, "pads")
    h_in, w_in, _ = x.shape
    ow = conv_out_size(w_in, kx, pl, pr, sx, "width")
    oh = conv_out_size(h_in, ky, pt, pb, sy, "height")
    xp = x
    if pl or pr or pt or pb:
        xp = np.pad(x, ((pt, pb), (pl, pr), (0, 0)), constant_values=fill)
    return xp, kx, ky, sx, sy, ow, oh


def max_pool(
    x: np.ndarray,
    size: Pair = (2, 2),
    stride: Pair = (2, 2),
    pads: Quad = (0, 0, 0, 0),
) -> np.ndarray:
    """Max pooling (pool_enable 1, §4.3).

    ``size = (kx, ky)``, ``stride = (sx, sy)``, ``pads = (l, r, t, b)``.  Padded
    positions behave as −∞, so a window lying entirely in the padding yields −∞.
    Output extent ``(pad_l + W + pad_r - kx) // sx + 1`` (C semantics).  The maximum is
    taken in a total order (firmware_spec/arithmetic.md: [AMBIG] the hardware's is
    unknown): ``+0`` is above ``-0`` and a NaN above everything (the result is then the
    canonical NaN), so no machine's ``max`` instruction decides a tie.  The driver's
    limits on the window (width 2..3, height 1..3) are not enforced here.
    """
    x = _hwc(x)
    xp, kx, ky, sx, sy, ow, oh = _pool_windows(x, size, stride, pads, -np.inf)
    keys = arith.total_keys(xp)
    out: np.ndarray | None = None
    for i in range(ky):
        for j in range(kx):
            tap = keys[i:i + (oh - 1) * sy + 1:sy, j:j + (ow - 1) * sx + 1:sx, :]
            out = tap.copy() if out is None else np.maximum(out, tap, out=out)
    assert out is not None
    return arith.total_values(out)


def avg_pool(
    x: np.ndarray,
    size: Pair,
    stride: Pair,
    pads: Quad,
    param: float,
) -> np.ndarray:
    """Average pooling on the conv engine (pool_enable 2, §4.3).

    Result = Σ(window, padded positions count as 0) × ``param``, where ``param``
    is the decoded FP16 ``pool_avg_param`` (a multiplier, normally
    FP16(1/(kx·ky))).  The window sum is accumulated in float32 tap by tap and
    multiplied once; the result is returned unrounded.
    """
    x = _hwc(x)
    xp, kx, ky, sx, sy, ow, oh = _pool_windows(x, size, stride, pads, 0.0)
    out = np.zeros((oh, ow, x.shape[2]), np.float32)
    for i in range(ky):
        for j in range(kx):
            out += xp[i:i + (oh - 1) * sy + 1:sy, j:j + (ow - 1) * sx + 1:sx, :]
    out *= np.float32(param)
    return out


def upsample2x(x: np.ndarray) -> np.ndarray:
    """Nearest-neighbour 2× upsampling (pool_enable 4, §4.3): bit-exact copy.

    ``out[y, x, c] = in[y // 2, x // 2, c]``; output ``(2H, 2W, C)``.
    """
    x = _hwc(x)
    h, w, c = x.shape
    out = np.empty((2 * h, 2 * w, c), x.dtype)
    out.reshape(h, 2, w, 2, c)[...] = x[:, None, :, None, :]  # (one pass; np.repeat's two)
    return out


# ---------------------------------------------------------------------------
# activation


def finish(t: np.ndarray, code: int, param: float = 0.0, prelu: np.ndarray | None = None,
           rect: bool = False, owned: bool = False) -> np.ndarray:
    """The tail of every run: :func:`activation`, :func:`rectify` if ``rect``, then
    :func:`fp16` rounding as the hardware stores the result (§4.1, §4.5).

    ``owned``: ``t`` is the caller's scratch and may be overwritten.  With the compiled
    loops (:mod:`dvsdk.native`), every activation but PReLU runs fused with the rounding in
    one pass, with the same bits."""
    if native.NATIVE is not None and code != ACT_PRELU and not rect:
        mine = owned and t.dtype == np.float32 and t.flags.c_contiguous and t.flags.writeable
        if code in (ACT_TANH, ACT_SIGMOID, ACT_ELU):
            if mine:
                native.NATIVE.act_elem(t, int(code), elu_alpha(param))
                return t
            x = np.ascontiguousarray(t, np.float32)  # (a stored tensor: read, not copied)
            y = np.empty(x.shape, np.float32)
            native.NATIVE.act_elem(y, int(code), elu_alpha(param), x)
            return y
        y = t if mine else np.array(t, np.float32, order="C")
        native.NATIVE.finish(y, int(code), float(param))
        return y
    if code:
        t = activation(t, code, param, prelu)
    if rect:
        t = rectify(t)
    return fp16(t)


# ---------------------------------------------------------------------------
# LRN (§4.7)

# Hardware tables, values as listed in §4.7 (float32).
LRN_X_SAMPLE = np.array([4.0**i for i in range(12)], np.float32)
LRN_H_INV = np.array([1.0 / (3.0 * 4.0**i) for i in range(12)], np.float32)
LRN_COEF0 = np.array(
    [0.999985, 0.999940004, 0.999760067, 0.999041074, 0.996177123, 0.984910181,
     0.942656873, 0.808499843, 0.533567671, 0.253198576, 0.0985382677, 0.0357579523],
    np.float32,
)
LRN_COEF1 = np.array(
    [-4.49960628e-5, -1.79937019e-4, -7.18993240e-4, -2.86395109e-3, -1.12669417e-2,
     -4.22533085e-2, -1.34157029e-1, -2.74932173e-1, -2.80369094e-1, -1.54660309e-1,
     -6.27803153e-2, -2.30311792e-2],
    np.float32,
)
_LRN_MAX_ADDR = 11


def lrn(x: np.ndarray, sf: int = 5) -> np.ndarray:
    """The hardware's piecewise-linear LRN (§4.7), computed in float32.

    For each element v at channel j:

    1. ``s = Σ_{k=j-2..j+2, clipped to [0, C-1]} (v_k / 2^sf)²`` (summed in
       channel order);
    2. ``addr = max(0, e + 2·sf) >> 1`` with e the unbiased float32 exponent of s
       (``((bits >> 23) & 0xFF) - 127``; s = 0 gives e = −127 → addr 0);
    3. ``f = (s·2^(2sf) − x_sample[addr]) · coef1[addr] · h_inv[addr] + coef0[addr]``;
    4. output ``f · v`` (unrounded; the hardware stores FP16).

    ``sf`` is the ``lrn`` field's bits [11:8] (0..15; the tests use 5).

    [AMBIG] addr > 11 (Σv² ≥ 4^12) is not specified: we clamp addr to 11, i.e.
    the last segment is extrapolated linearly.  That undershoots the true curve
    and turns negative once Σv² exceeds about 2.4e7 (|v| ≳ 2200 in all five
    channels), values far outside normal activations.
    """
    a = _hwc(x)
    sf = int(sf)
    if not 0 <= sf <= 15:
        raise InvalidArgument("LRN scale factor out of range", field="lrn.sf", value=sf,
                              limit="0..15")
    scale = np.float32(2.0**-sf)
    q = np.square(a * scale)
    c = a.shape[2]
    qp = np.pad(q, ((0, 0), (0, 0), (2, 2)))
    s = np.zeros_like(q)
    for k in range(5):  # channel offset k - 2, in order j-2 .. j+2
        s += qp[:, :, k:k + c]
    e = ((s.view(np.uint32) >> 23) & 0xFF).astype(np.int32) - 127
    addr = np.minimum(np.maximum(e + 2 * sf, 0) >> 1, _LRN_MAX_ADDR)
    big = s * np.float32(2.0 ** (2 * sf))
    f = (big - LRN_X_SAMPLE[addr]) * LRN_COEF1[addr] * LRN_H_INV[addr] + LRN_COEF0[addr]
    return (f * a).astype(np.float32)
