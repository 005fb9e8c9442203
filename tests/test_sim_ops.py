"""Simulator math (dvsdk.sim.ops, dvsdk.sim.ipu_ops) against independent references.

The references below are deliberately naive: explicit loops over output pixels,
bounds checks instead of padding, element-wise transcriptions of the reference
formulas (§4, §9).
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dvsdk.errors import InvalidArgument
from dvsdk.sim import ipu_ops, ops

PURE_INTS = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)


def ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice(PURE_INTS, size=shape).astype(np.float32)


def halfs(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return ops.fp16(rng.uniform(-1, 1, size=shape))


# ---------------------------------------------------------------------------
# naive references


def ref_conv(x, w, b, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1), depthwise=False):
    """Direct cross-correlation, one output pixel at a time, float64."""
    h, wd, c = x.shape
    m, _, ky, kx = w.shape
    sx, sy = stride
    dx, dy = dil
    pl, pr, pt, pb = pads
    ow = (pl + wd + pr - ((kx - 1) * dx + 1)) // sx + 1
    oh = (pt + h + pb - ((ky - 1) * dy + 1)) // sy + 1
    out = np.zeros((oh, ow, m))
    for oy in range(oh):
        for ox in range(ow):
            for mm in range(m):
                acc = float(b[mm])
                for i in range(ky):
                    yy = oy * sy - pt + i * dy
                    if not 0 <= yy < h:
                        continue
                    for j in range(kx):
                        xx = ox * sx - pl + j * dx
                        if not 0 <= xx < wd:
                            continue
                        if depthwise:
                            acc += float(x[yy, xx, mm]) * float(w[mm, 0, i, j])
                        else:
                            acc += float(np.dot(x[yy, xx, :].astype(np.float64),
                                                w[mm, :, i, j].astype(np.float64)))
                out[oy, ox, mm] = acc
    return out


def ref_transposed_conv(x, wf, b, stride, pads, dil=(1, 1), depthwise=False):
    """Framework transposed conv by scatter: each input pixel adds value × kernel.

    ``wf`` is (M, C, ky, kx) (already out/in-swapped), ``pads`` crop (l, r, t, b).
    """
    h, wd, c = x.shape
    m, _, ky, kx = wf.shape
    sx, sy = stride
    dx, dy = dil
    pl, pr, pt, pb = pads
    full = np.zeros(((h - 1) * sy + (ky - 1) * dy + 1, (wd - 1) * sx + (kx - 1) * dx + 1, m))
    for y in range(h):
        for xx in range(wd):
            for i in range(ky):
                for j in range(kx):
                    oy, ox = y * sy + i * dy, xx * sx + j * dx
                    if depthwise:
                        full[oy, ox, :] += x[y, xx, :] * wf[:, 0, i, j]
                    else:
                        full[oy, ox, :] += wf[:, :, i, j].astype(np.float64) @ x[y, xx, :]
    out = full[pt: full.shape[0] - pb, pl: full.shape[1] - pr]
    return out + b


def ref_pool(x, size, stride, pads, mode, param=1.0):
    h, wd, c = x.shape
    kx, ky = size
    sx, sy = stride
    pl, pr, pt, pb = pads
    ow = (pl + wd + pr - kx) // sx + 1
    oh = (pt + h + pb - ky) // sy + 1
    out = np.zeros((oh, ow, c))
    for oy in range(oh):
        for ox in range(ow):
            for ch in range(c):
                vals = []
                for i in range(ky):
                    for j in range(kx):
                        yy, xx = oy * sy - pt + i, ox * sx - pl + j
                        inside = 0 <= yy < h and 0 <= xx < wd
                        if mode == "max":
                            vals.append(float(x[yy, xx, ch]) if inside else -math.inf)
                        else:
                            vals.append(float(x[yy, xx, ch]) if inside else 0.0)
                out[oy, ox, ch] = max(vals) if mode == "max" else sum(vals) * param
    return out


# ---------------------------------------------------------------------------
# conv


CONV_CASES = [
    # (H, W, C, M, kx, ky, stride, pads, dil)
    (7, 9, 3, 5, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),
    (7, 9, 3, 5, 2, 2, (1, 1), (0, 1, 0, 1), (1, 1)),
    (8, 6, 4, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (9, 9, 9, 4, 3, 3, (2, 2), (1, 0, 1, 0), (1, 1)),
    (9, 8, 2, 3, 4, 4, (2, 1), (2, 1, 1, 2), (1, 1)),
    (11, 10, 3, 2, 5, 5, (1, 1), (2, 2, 2, 2), (1, 1)),
    (10, 11, 2, 3, 6, 6, (2, 2), (3, 2, 2, 3), (1, 1)),
    (9, 9, 2, 2, 7, 7, (1, 1), (3, 3, 3, 3), (1, 1)),
    (9, 12, 3, 4, 7, 7, (2, 2), (0, 3, 3, 0), (1, 1)),
    (8, 9, 3, 3, 1, 3, (1, 2), (0, 0, 1, 1), (1, 1)),
    (8, 9, 3, 3, 5, 2, (2, 1), (2, 1, 0, 1), (1, 1)),
    (9, 8, 2, 2, 2, 7, (1, 1), (1, 0, 3, 3), (1, 1)),
    (12, 12, 3, 3, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2)),
    (13, 14, 2, 3, 3, 3, (1, 1), (3, 3, 3, 3), (3, 3)),
    (14, 13, 2, 2, 5, 3, (2, 1), (4, 2, 2, 1), (2, 3)),
    (1, 1, 16, 8, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1)),
]


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_pure_ints_exact(case, depthwise):
    """Pure-int data (§12) must match exactly after FP16 rounding."""
    h, wd, c, m, kx, ky, stride, pads, dil = case
    if depthwise:
        m = c
    rng = np.random.default_rng(hash(case) & 0xFFFF)
    x = ints(rng, (h, wd, c))
    w = ints(rng, (m, 1 if depthwise else c, ky, kx))
    b = ints(rng, (m,))
    got = ops.conv2d(x, w, b, stride=stride, pads=pads, dilation=dil, depthwise=depthwise)
    want = ref_conv(x, w, b, stride, pads, dil, depthwise)
    assert got.dtype == np.float32
    assert got.shape == want.shape
    np.testing.assert_array_equal(ops.fp16(got), ops.fp16(want))


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 9), wd=st.integers(1, 9), c=st.integers(1, 10), m=st.integers(1, 6),
    kx=st.integers(1, 7), ky=st.integers(1, 7), sx=st.integers(1, 3), sy=st.integers(1, 3),
    pads=st.tuples(*[st.integers(0, 4)] * 4), dx=st.integers(1, 3), dy=st.integers(1, 3),
    depthwise=st.booleans(), seed=st.integers(0, 2**16),
)
def test_conv2d_random_floats(h, wd, c, m, kx, ky, sx, sy, pads, dx, dy, depthwise, seed):
    pl, pr, pt, pb = pads
    if depthwise:
        m = c
    kex, key = (kx - 1) * dx + 1, (ky - 1) * dy + 1
    rng = np.random.default_rng(seed)
    x = halfs(rng, (h, wd, c))
    w = halfs(rng, (m, 1 if depthwise else c, ky, kx))
    b = halfs(rng, (m,))
    args = dict(stride=(sx, sy), pads=pads, dilation=(dx, dy), depthwise=depthwise)
    if pl + wd + pr < kex or pt + h + pb < key:
        with pytest.raises(InvalidArgument):
            ops.conv2d(x, w, b, **args)
        return
    got = ops.conv2d(x, w, b, **args)
    want = ref_conv(x, w, b, (sx, sy), pads, (dx, dy), depthwise)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_conv2d_output_size_c_semantics():
    x = np.ones((5, 5, 1), np.float32)
    w = np.ones((1, 1, 3, 3), np.float32)
    # (0 + 5 + 0 - 3) // 2 + 1 = 2 ; (1 + 5 + 0 - 3) // 2 + 1 = 2
    assert ops.conv2d(x, w, None, stride=(2, 2)).shape == (2, 2, 1)
    assert ops.conv2d(x, w, None, stride=(2, 2), pads=(1, 0, 1, 0)).shape == (2, 2, 1)
    assert ops.conv_out_size(5, 3, 1, 1, 2) == 3
    with pytest.raises(InvalidArgument):
        ops.conv2d(np.ones((2, 2, 1), np.float32), w, None)  # numerator −1
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((1, 1, 3, 3), np.float32), None, dilation=(3, 1))


def test_conv2d_bad_arguments():
    x = np.ones((4, 4, 3), np.float32)
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((2, 2, 3, 3), np.float32), None)  # C mismatch
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((2, 3, 1, 1), np.float32), np.zeros(3))  # bias
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((2, 1, 1, 1), np.float32), None, depthwise=True)  # M != C
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((2, 3, 1, 1), np.float32), None, stride=(0, 1))
    with pytest.raises(InvalidArgument):
        ops.conv2d(x, np.ones((2, 3, 1, 1), np.float32), None, pads=(-1, 0, 0, 0))
    with pytest.raises(InvalidArgument):
        ops.conv2d(x[:, :, :, None], np.ones((2, 3, 1, 1), np.float32), None)


def test_conv2d_large_blocks_match_single_matmul(monkeypatch):
    """Row-blocked im2col gives the same result as one block."""
    rng = np.random.default_rng(5)
    x = ints(rng, (13, 11, 5))
    w = ints(rng, (4, 5, 3, 3))
    b = ints(rng, (4,))
    whole = ops.conv2d(x, w, b, stride=(1, 2), pads=(1, 1, 1, 1))
    monkeypatch.setattr(ops, "_IM2COL_BUDGET", 1)
    blocked = ops.conv2d(x, w, b, stride=(1, 2), pads=(1, 1, 1, 1))
    np.testing.assert_array_equal(whole, blocked)


# ---------------------------------------------------------------------------
# deconv


DECONV_CASES = [
    # (H, W, C, M, kx, ky, stride, framework pads (l, r, t, b), dil)
    (3, 4, 2, 3, 3, 3, (1, 1), (1, 1, 1, 1), (1, 1)),
    (3, 4, 2, 3, 3, 3, (2, 2), (1, 1, 1, 1), (1, 1)),
    (4, 3, 3, 2, 4, 4, (2, 2), (1, 1, 1, 1), (1, 1)),
    (3, 3, 2, 2, 2, 2, (2, 2), (0, 0, 0, 0), (1, 1)),
    (3, 5, 2, 3, 5, 3, (2, 1), (2, 1, 0, 1), (1, 1)),
    (2, 3, 2, 2, 7, 7, (2, 2), (3, 3, 3, 3), (1, 1)),
    (4, 4, 2, 2, 1, 1, (2, 2), (0, 0, 0, 0), (1, 1)),
    (4, 4, 2, 2, 3, 3, (1, 1), (2, 2, 2, 2), (2, 2)),
]


@pytest.mark.parametrize("depthwise", [False, True])
@pytest.mark.parametrize("case", DECONV_CASES)
def test_deconv2d_equals_transposed_conv(case, depthwise):
    """Zero insertion + 180°-rotated weights + FPGA pads k_eff-1-pad == scatter (§4.2)."""
    h, wd, c, m, kx, ky, stride, pads, dil = case
    if depthwise:
        m = c
    rng = np.random.default_rng(sum(case[:6]))
    x = ints(rng, (h, wd, c))
    wf = ints(rng, (m, 1 if depthwise else c, ky, kx))
    b = ints(rng, (m,))
    want = ref_transposed_conv(x, wf, b, stride, pads, dil, depthwise)
    kex, key = (kx - 1) * dil[0] + 1, (ky - 1) * dil[1] + 1
    pl, pr, pt, pb = pads
    fpga = (kex - 1 - pl, kex - 1 - pr, key - 1 - pt, key - 1 - pb)
    w_hw = wf[:, :, ::-1, ::-1].copy()  # what the command stores
    got = ops.deconv2d(x, w_hw, b, stride=stride, pads=fpga, depthwise=depthwise, dilation=dil)
    sx, sy = stride
    assert got.shape == ((h - 1) * sy + key - pt - pb, (wd - 1) * sx + kex - pl - pr, m)
    np.testing.assert_array_equal(ops.fp16(got), ops.fp16(want))


def test_deconv2d_is_zero_insertion_then_stride1_correlation():
    rng = np.random.default_rng(3)
    x = halfs(rng, (3, 4, 2))
    w = halfs(rng, (3, 2, 3, 2))
    b = halfs(rng, (3,))
    z = np.zeros((5, 10, 2), np.float32)
    z[::2, ::3] = x
    want = ref_conv(z, w, b, (1, 1), (1, 0, 2, 1))
    got = ops.deconv2d(x, w, b, stride=(3, 2), pads=(1, 0, 2, 1))
    # output (in-1)*s + 1 + pl + pr - k + 1
    assert got.shape == ((3 - 1) * 2 + 1 + 2 + 1 - 3 + 1, (4 - 1) * 3 + 1 + 1 + 0 - 2 + 1, 3)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------
# pooling, upsample


POOL_CASES = [
    ((6, 6, 9), (3, 3), (1, 1), (1, 1, 1, 1)),
    ((6, 6, 3), (2, 2), (2, 2), (0, 0, 0, 0)),
    ((5, 7, 2), (2, 2), (2, 2), (0, 1, 0, 1)),  # ceil-mode right/bottom pads
    ((7, 5, 2), (3, 2), (2, 1), (1, 2, 0, 1)),
    ((4, 4, 2), (2, 1), (1, 1), (0, 0, 0, 0)),
    ((7, 7, 3), (7, 7), (1, 1), (0, 0, 0, 0)),
    ((5, 6, 2), (5, 3), (2, 2), (2, 2, 1, 1)),
]


@pytest.mark.parametrize("case", POOL_CASES)
def test_max_pool(case):
    shape, size, stride, pads = case
    rng = np.random.default_rng(1)
    x = -np.abs(halfs(rng, shape)) - 0.5  # all negative: padding must act as −inf
    got = ops.max_pool(x, size, stride, pads)
    np.testing.assert_array_equal(got, ref_pool(x, size, stride, pads, "max"))


def test_max_pool_window_in_padding_is_minus_inf():
    x = np.ones((2, 2, 1), np.float32)
    got = ops.max_pool(x, (2, 2), (2, 2), (2, 0, 0, 0))
    assert got.shape == (1, 2, 1)
    assert got[0, 0, 0] == -np.inf and got[0, 1, 0] == 1.0


@pytest.mark.parametrize("case", POOL_CASES)
def test_avg_pool(case):
    shape, size, stride, pads = case
    rng = np.random.default_rng(2)
    x = halfs(rng, shape)
    param = float(np.float16(1.0 / (size[0] * size[1])))
    got = ops.avg_pool(x, size, stride, pads, param)
    np.testing.assert_allclose(got, ref_pool(x, size, stride, pads, "avg", param),
                               rtol=1e-6, atol=1e-6)
    xi = ints(rng, shape)
    np.testing.assert_array_equal(ops.avg_pool(xi, size, stride, pads, 1.0),
                                  ref_pool(xi, size, stride, pads, "avg", 1.0))


def test_avg_pool_param_is_a_multiplier():
    x = np.full((2, 2, 1), 3.0, np.float32)
    assert ops.avg_pool(x, (2, 2), (1, 1), (0, 0, 0, 0), 0.5)[0, 0, 0] == 6.0


def test_upsample_bit_exact():
    rng = np.random.default_rng(4)
    x = halfs(rng, (3, 5, 4))
    x[0, 0, 0] = -0.0
    x[1, 2, 3] = np.inf
    x[2, 4, 1] = np.nan
    got = ops.upsample2x(x)
    assert got.shape == (6, 10, 4)
    want = np.empty_like(got)
    for y in range(6):
        for xx in range(10):
            want[y, xx] = x[y // 2, xx // 2]
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


# ---------------------------------------------------------------------------
# activation


@pytest.mark.parametrize("code", range(7))
def test_activation_matches_math(code):
    rng = np.random.default_rng(code)
    x = halfs(rng, (3, 4, 5)) * 8
    x[0, 0, :] = [0.0, -0.0, 7.0, -7.0, 100.0]
    prelu = halfs(rng, (5,))
    param = 0.25
    got = ops.activation(x, code, param, prelu)
    assert got.dtype == np.float32 and got.shape == x.shape
    for idx in np.ndindex(x.shape):
        v = float(x[idx])
        if code == 0:
            t = v
        elif code == 1:
            t = math.tanh(v)
        elif code == 2:
            t = v if v > 0 else v * param
        elif code == 3:
            t = 1.0 / (1.0 + math.exp(-v))
        elif code == 4:
            t = v if v > 0 else v * float(prelu[idx[2]])
        elif code == 5:
            t = v if v > 0 else param * (math.exp(v) - 1.0)
        else:
            t = min(max(v, 0.0), 6.0)
        assert got[idx] == pytest.approx(t, rel=1e-6, abs=1e-7), (idx, v)


def test_activation_defaults_and_errors():
    x = np.array([[[-2.0, -0.5, 0.5, 8.0]]], np.float32)
    np.testing.assert_array_equal(ops.activation(x, 2), [[[0, 0, 0.5, 8]]])  # ReLU
    elu = ops.activation(x, 5)  # param 0 => alpha 1
    np.testing.assert_allclose(elu, [[[math.expm1(-2), math.expm1(-0.5), 0.5, 8]]], rtol=1e-6)
    np.testing.assert_array_equal(ops.activation(x, 6, param=3.0), [[[0, 0, 0.5, 6]]])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        s = ops.activation(np.array([-1e4, 1e4], np.float32), 3)
    np.testing.assert_array_equal(s, [0.0, 1.0])
    for bad in (7, -1, 255):
        with pytest.raises(InvalidArgument):
            ops.activation(x, bad)
    with pytest.raises(InvalidArgument):
        ops.activation(x, 4)
    with pytest.raises(InvalidArgument):
        ops.activation(x, 4, prelu=np.ones(3))


def test_rectify():
    x = np.array([[[-2.0, -0.0, 3.0]]], np.float32)
    np.testing.assert_array_equal(ops.rectify(x), [[[2.0, 0.0, 3.0]]])


# ---------------------------------------------------------------------------
# LRN (§4.7): element-wise transcription with tables from the formulas


def _lrn_tables():
    x_sample = [np.float32(4.0**i) for i in range(12)]
    h_inv = [np.float32(1.0 / (3.0 * 4.0**i)) for i in range(12)]
    c0 = [(1.0 + 2e-5 * 4.0**i) ** -0.75 for i in range(13)]
    coef0 = [np.float32(c0[i]) for i in range(12)]
    coef1 = [np.float32(c0[i + 1] - c0[i]) for i in range(12)]
    return x_sample, h_inv, coef0, coef1


def _f32_exponent(v: np.float32) -> int:
    bits = struct.unpack("<I", struct.pack("<f", float(v)))[0]
    return ((bits >> 23) & 0xFF) - 127


def ref_lrn(x: np.ndarray, sf: int) -> np.ndarray:
    xs, hi, c0, c1 = _lrn_tables()
    f32 = np.float32
    h, wd, c = x.shape
    out = np.zeros_like(x)
    for y in range(h):
        for xx in range(wd):
            for j in range(c):
                s = f32(0.0)
                for k in range(j - 2, j + 3):
                    if 0 <= k < c:
                        t = f32(x[y, xx, k]) / f32(2.0**sf)
                        s = f32(s + f32(t * t))
                addr = max(0, _f32_exponent(s) + 2 * sf) >> 1
                addr = min(addr, 11)
                f = (f32(s * f32(2.0 ** (2 * sf))) - xs[addr]) * c1[addr] * hi[addr] + c0[addr]
                out[y, xx, j] = f32(f) * x[y, xx, j]
    return out


def test_lrn_tables_match_formulas():
    xs, hi, c0, c1 = _lrn_tables()
    np.testing.assert_array_equal(ops.LRN_X_SAMPLE, xs)
    np.testing.assert_array_equal(ops.LRN_H_INV, hi)
    np.testing.assert_allclose(ops.LRN_COEF0, c0, rtol=1e-6)
    np.testing.assert_allclose(ops.LRN_COEF1, c1, rtol=1e-5)


@pytest.mark.parametrize("shape,scale,sf", [((2, 3, 16), 1.0, 5), ((3, 2, 32), 40.0, 5),
                                            ((1, 1, 16), 300.0, 5), ((2, 2, 16), 8.0, 3)])
def test_lrn_matches_transcription(shape, scale, sf):
    rng = np.random.default_rng(int(scale))
    x = ops.fp16(rng.uniform(-1, 1, shape) * scale)
    x[0, 0, :4] = 0.0
    got = ops.lrn(x, sf)
    want = ref_lrn(x, sf)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_lrn_close_to_caffe_within_dmp_tolerance():
    """The piecewise-linear curve approximates Caffe LRN (α=1e-4, n=5, β=.75, k=1)."""
    rng = np.random.default_rng(9)
    x = ops.fp16(rng.uniform(-4, 4, (4, 4, 16)))
    got = ops.fp16(ops.lrn(x))
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (0, 0), (2, 2)))
    ssum = sum(sq[:, :, k:k + 16] for k in range(5))
    caffe = x / (1 + 1e-4 / 5 * ssum) ** 0.75
    np.testing.assert_allclose(got, caffe, rtol=0.01, atol=1e-3)


def test_lrn_addr_clamped_to_11():
    x = np.full((1, 1, 16), 3000.0, np.float32)  # Σv² = 4.5e7 ≥ 4^12
    got = ops.lrn(x)
    np.testing.assert_allclose(got, ref_lrn(x, 5), rtol=2e-6)
    with pytest.raises(InvalidArgument):
        ops.lrn(x, 16)


# ---------------------------------------------------------------------------
# maximizer (§9.2)


def ref_maximizer(s: np.ndarray) -> np.ndarray:
    h, wd, n = s.shape
    out = np.zeros(wd * h, np.uint8)
    for xx in range(wd):
        for y in range(h):
            best, idx = np.float16(s[y, xx, 0]), 0
            for k in range(1, n):
                if np.float16(s[y, xx, k]) > best:
                    best, idx = np.float16(s[y, xx, k]), k
            out[xx * h + y] = idx
    return out


@pytest.mark.parametrize("h,w,n", [(1, 1, 2), (3, 5, 7), (4, 2, 8), (5, 3, 19), (2, 2, 255)])
def test_maximizer_matches_reference(h, w, n):
    rng = np.random.default_rng(n)
    s = rng.integers(-3, 4, (h, w, n)).astype(np.float16)  # many ties
    s[0, 0, rng.integers(0, n)] = np.inf
    np.testing.assert_array_equal(ipu_ops.maximizer(s, n), ref_maximizer(s))


def test_maximizer_x_major_ties_and_fp16():
    s = np.zeros((2, 3, 4), np.float32)  # H=2, W=3
    s[0, 1, 2] = 1.0  # (y=0, x=1) -> class 2 at out[1*2+0]
    s[1, 2, 3] = 5.0  # (y=1, x=2) -> class 3 at out[2*2+1]
    s[1, 0, 1] = s[1, 0, 3] = 2.0  # tie -> lowest index 1 at out[0*2+1]
    # differ in float32 but equal in FP16 -> tie -> class 0
    s[0, 2, 0], s[0, 2, 1] = 1.0, 1.0 + 2**-12
    out = ipu_ops.maximizer(s, 4)
    assert out.dtype == np.uint8 and out.shape == (6,)
    assert out.tolist() == [0, 1, 2, 0, 0, 3]


def test_maximizer_nan_never_wins():
    s = np.array([[[np.nan, 1.0, np.nan, 3.0], [1.0, np.nan, 0.5, 2.0],
                   [np.nan, np.nan, np.nan, np.nan], [np.nan, -np.inf, 0, 0]]], np.float32)
    assert ipu_ops.maximizer(s, 4).tolist() == [3, 3, 0, 2]
    with pytest.raises(InvalidArgument):
        ipu_ops.maximizer(s, 3)
    with pytest.raises(InvalidArgument):
        ipu_ops.maximizer(np.zeros((1, 1, 256)), 256)


# ---------------------------------------------------------------------------
# FP24 (§9.1)


FP24_EXAMPLES = {1: 0x3F0000, 2: 0x3E0000, 3: 0x3D5555, 224: 0x372492, 256: 0x370000,
                 320: 0x36999A, 416: 0x363B14, 480: 0x361111, 640: 0x35999A,
                 1280: 0x34999A, 4095: 0x330010}


@pytest.mark.parametrize("w,code", sorted(FP24_EXAMPLES.items()))
def test_fp24_examples(w, code):
    assert ipu_ops.fp24(np.float32(1) / np.float32(w)) == code


def test_fp24_special_values():
    assert ipu_ops.fp24(0.0) == 0
    assert ipu_ops.fp24(-0.0) == 0
    assert ipu_ops.fp24(2.0**-63) == 0  # e = 0 → 0
    assert ipu_ops.fp24(2.0**-62) == 0x010000
    assert ipu_ops.fp24(-(2.0**-62)) == 0x810000
    assert ipu_ops.fp24(float("inf")) == 0x7F0000
    assert ipu_ops.fp24(float("-inf")) == 0xFF0000
    assert ipu_ops.fp24(2.0**63) == 0x7E0000
    assert ipu_ops.fp24(2.0**64) == 0x7F0000  # e = 127 saturates
    assert ipu_ops.fp24(-1.0) == 0xBF0000
    assert ipu_ops.fp24(np.float32(1.0) * (2 - 2.0**-23)) == 0x400000  # rounding carries


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=2.0**-60, max_value=2.0**60))
def test_fp24_decodes_close(f):
    code = ipu_ops.fp24(f)
    e = (code >> 16) & 0x7F
    mant = code & 0xFFFF
    val = (1 + mant / 65536) * 2.0 ** (e - 63)
    assert val == pytest.approx(float(np.float32(f)), rel=2.0**-16)


# ---------------------------------------------------------------------------
# IPU (§9.1)


def _rgba(rng, h, w):
    return rng.integers(0, 256, (h, w, 4), dtype=np.uint8)


def test_ipu_nearest_identity():
    rng = np.random.default_rng(0)
    tex = _rgba(rng, 5, 7)
    out = ipu_ops.ipu_render(tex, ipu_ops.FMT_RGBA8888, None, 7, 5)
    np.testing.assert_array_equal(out, tex)
    out = ipu_ops.ipu_render(tex, 0, None, 7, 5, bilinear=True)
    np.testing.assert_array_equal(out, tex)


def test_ipu_swizzle():
    rng = np.random.default_rng(1)
    tex = _rgba(rng, 3, 4)
    out = ipu_ops.ipu_render(tex, 0, None, 4, 3, swizzle=(2, 1, 0, 3))
    np.testing.assert_array_equal(out, tex[:, :, [2, 1, 0, 3]])
    out = ipu_ops.ipu_render(tex, 0, None, 4, 3, swizzle=(3, 0, 1, 2))
    np.testing.assert_array_equal(out, tex[:, :, [3, 0, 1, 2]])
    bgr = tex[:, :, :3].copy()
    out = ipu_ops.ipu_render(bgr, ipu_ops.FMT_RGB888, None, 4, 3, swizzle=(2, 1, 0, -1),
                             fmt_wr=ipu_ops.FMT_RGB888)
    np.testing.assert_array_equal(out, bgr[:, :, ::-1])
    out = ipu_ops.ipu_render(bgr, 1, None, 4, 3, swizzle=(2, 1, 0, -1))
    assert (out[:, :, 3] == 255).all()  # RGB888 is opaque
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(tex, 0, None, 4, 3, swizzle=(0, 0, 1, 2))
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(bgr, 1, None, 4, 3, swizzle=(3, 1, 0, -1))


def test_ipu_nearest_resize_and_transpose():
    rng = np.random.default_rng(2)
    tex = _rgba(rng, 3, 4)
    up = ipu_ops.ipu_render(tex, 0, None, 8, 6)
    np.testing.assert_array_equal(up, np.repeat(np.repeat(tex, 2, 0), 2, 1))
    big = _rgba(rng, 6, 8)
    down = ipu_ops.ipu_render(big, 0, None, 4, 3)
    np.testing.assert_array_equal(down, big[1::2, 1::2])  # pixel centres
    tr = ipu_ops.ipu_render(tex, 0, None, 3, 4, transpose=True)
    np.testing.assert_array_equal(tr, tex.transpose(1, 0, 2))


def test_ipu_bilinear():
    tex = np.zeros((1, 2, 4), np.uint8)
    tex[0, 1] = 200
    out = ipu_ops.ipu_render(tex, 0, None, 4, 1, bilinear=True)
    # sample x = (X+.5)/2 - .5 -> -0.25, 0.25, 0.75, 1.25 (clamped)
    assert out[0, :, 0].tolist() == [0, 50, 150, 200]
    const = np.full((3, 3, 4), 77, np.uint8)
    assert (ipu_ops.ipu_render(const, 0, None, 7, 5, bilinear=True) == 77).all()


def test_ipu_lut():
    lut = [0x11223344, 0xAABBCCDD, 0x01020304]
    idx = np.array([[0, 1], [2, 1]], np.uint8)
    out = ipu_ops.ipu_render(idx, ipu_ops.FMT_LUT, lut, 2, 2)
    assert out[0, 0].tolist() == [0x44, 0x33, 0x22, 0x11]
    assert out[1, 0].tolist() == [0x04, 0x03, 0x02, 0x01]
    out = ipu_ops.ipu_render(idx, 7, lut, 2, 2, swizzle=(3, 2, 1, 0))
    assert out[0, 1].tolist() == [0xAA, 0xBB, 0xCC, 0xDD]
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(idx, 7, None, 2, 2)


def test_ipu_fp16_conversion():
    tex = np.array([[[0, 128, 255, 9]]], np.uint8)
    out = ipu_ops.ipu_render(tex, 0, None, 1, 1, fmt_wr=ipu_ops.FMT_RGBFP16,
                             cnv_type=ipu_ops.CNV_DIV_255)
    assert out.dtype == np.float16 and out.shape == (1, 1, 3)
    np.testing.assert_array_equal(out[0, 0], np.float16([0, 128 / 255, 1.0]))
    out = ipu_ops.ipu_render(tex, 0, None, 1, 1, fmt_wr=2, cnv_type=ipu_ops.CNV_SUB,
                             cnv_param=(10, 100, 255))
    np.testing.assert_array_equal(out[0, 0], np.float16([-10, 28, 0]))
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(tex, 0, None, 1, 1, fmt_wr=2, cnv_type=3)


def test_ipu_blend():
    rng = np.random.default_rng(3)
    tex = _rgba(rng, 2, 3)
    rd = _rgba(rng, 2, 3)
    kw = dict(rd=rd, fmt_rd=ipu_ops.FMT_RGBA8888)
    np.testing.assert_array_equal(
        ipu_ops.ipu_render(tex, 0, None, 3, 2, alpha=255, use_const_alpha=True, **kw), tex)
    np.testing.assert_array_equal(
        ipu_ops.ipu_render(tex, 0, None, 3, 2, alpha=0, use_const_alpha=True, **kw), rd)
    got = ipu_ops.ipu_render(tex, 0, None, 3, 2, **kw)  # texture alpha
    for y in range(2):
        for x in range(3):
            a = int(tex[y, x, 3])
            for ch in range(4):
                t = (int(tex[y, x, ch]) * a + int(rd[y, x, ch]) * (255 - a) + 127) // 255
                assert got[y, x, ch] == t
    only_rd = ipu_ops.ipu_render(None, 0, None, 3, 2, rd=rd[:, :, :3], fmt_rd=1, fmt_wr=1)
    np.testing.assert_array_equal(only_rd, rd[:, :, :3])
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(None, 0, None, 3, 2)
    with pytest.raises(InvalidArgument):
        ipu_ops.ipu_render(tex, 0, None, 3, 3, **kw)  # rd size mismatch
