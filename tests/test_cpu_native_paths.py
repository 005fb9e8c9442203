"""The runtime's CPU steps on compiled loops.

MaxPool on the compiled pool (``dvsdk.cpu.nn.max_pool`` through
``native.maxpool`` and ``native.hwc_to_chw``) against a reference written here from
firmware_spec/arithmetic.md ("The runtime's CPU steps": MaxPool gives +0 when the extremum
is a zero of both signs, NaN propagates; padded positions -inf; ONNX's output size with
ceil_mode), on device-tensor layouts ((N, H, W, C) memory seen as NCHW) and C-ordered
NCHW; and the swap of the last two axes against numpy's transpose.

Softmax with its exponentials in place (``native.elem`` with ``y`` the input itself) and
its division in place, against the formula written here on the numpy elementary functions
(``dvsdk.hw.elementary`` without the module: float64 exp, rounded to the input type, numpy's
sum, the division), for float16/32/64 inputs with -inf entries.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dvsdk import native
from dvsdk.cpu import nn
from dvsdk.hw import arith, elementary

from .test_native import NATIVE, needs_native

pytestmark = [needs_native, pytest.mark.filterwarnings("ignore::RuntimeWarning")]


def _ref_max_pool(x, k, s, pads, ceil):
    """Window by window: the maximum; a zero result +0 if a tap holds +0; NaN if a tap is."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = k, s, pads
    dims = []
    for size, kk, st, b, e in ((h, kh, sh, pt, pb), (w, kw, sw, pl, pr)):
        span = size + b + e - kk
        o = -(-span // st) + 1 if ceil else span // st + 1
        if ceil and (o - 1) * st >= size + b:
            o -= 1
        dims.append(o)
    oh, ow = dims
    xp = np.full((n, c, max((oh - 1) * sh + kh, pt + h), max((ow - 1) * sw + kw, pl + w)),
                 -np.inf, np.float32)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    out = np.empty((n, c, oh, ow), np.float32)
    for i, j in itertools.product(range(oh), range(ow)):
        win = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw].reshape(n, c, -1)
        m = win.max(axis=2)
        plus = (win.view(np.uint32) == 0).any(axis=2)
        m = np.where(m == 0, np.where(plus, np.float32(0.0), np.float32(-0.0)), m)
        out[:, :, i, j] = np.where(np.isnan(win).any(axis=2), np.float32(np.nan), m)
    return out


def _data(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x[x < 0.2] = 0.0
    x[rng.random(shape) < 0.3] *= -1          # zeros of both signs
    x[rng.random(shape) < 0.02] = -np.inf
    return x


@pytest.mark.parametrize("shape", [(1, 64, 12, 80), (2, 5, 7, 9), (1, 3, 1, 1), (1, 17, 13, 6)])
def test_max_pool_is_the_windows_maximum(shape):
    rng = np.random.default_rng(sum(shape))
    n, c, h, w = shape
    for k, s, pads, ceil in itertools.product([(2, 1), (3, 3), (2, 2), (1, 1)],
                                              [(2, 1), (1, 1), (2, 2), (3, 2)],
                                              [(0, 0, 0, 0), (1, 1, 1, 1), (0, 1, 1, 0)],
                                              [0, 1]):
        if max(pads[0], pads[2]) >= k[0] or max(pads[1], pads[3]) >= k[1] \
                or h + pads[0] + pads[2] < k[0] or w + pads[1] + pads[3] < k[1]:
            continue
        hwc = _data(rng, (n, h, w, c))
        want = _ref_max_pool(hwc.transpose(0, 3, 1, 2), k, s, pads, ceil)
        attrs = {"kernel_shape": list(k), "strides": list(s), "pads": list(pads),
                 "ceil_mode": ceil}
        for x in (hwc.transpose(0, 3, 1, 2), np.ascontiguousarray(hwc.transpose(0, 3, 1, 2))):
            got = nn.max_pool([x], attrs)[0]
            assert got.flags.c_contiguous and got.dtype == np.float32
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (k, s, pads)


def test_a_nan_result_and_the_numpy_path_agree(monkeypatch):
    """A window holding a NaN gives a NaN (the caller's reduction picks its payload), and
    without the module the numpy path gives the same values."""
    rng = np.random.default_rng(4)
    hwc = _data(rng, (1, 10, 8, 16))
    hwc[0, 3, 2, 5] = np.nan
    x = hwc.transpose(0, 3, 1, 2)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [0, 0, 0, 0]}
    got = nn.max_pool([x], attrs)[0]
    want = _ref_max_pool(x, (2, 2), (2, 2), (0, 0, 0, 0), 0)
    assert np.array_equal(np.isnan(got), np.isnan(want)) and np.isnan(got).sum() == 1
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
    clean = _data(rng, (1, 10, 8, 16)).transpose(0, 3, 1, 2)
    fast = nn.max_pool([clean], attrs)[0]
    monkeypatch.setattr(native, "NATIVE", None)
    assert np.array_equal(nn.max_pool([clean], attrs)[0].view(np.uint32), fast.view(np.uint32))


@pytest.mark.parametrize("shape", [(1, 480, 64), (2, 7, 9), (1, 1, 5), (3, 17, 1),
                                   (1, 33, 65)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_hwc_to_chw_swaps_the_last_two_axes(shape, dtype):
    src = np.random.default_rng(1).integers(-2**30, 2**30, shape).astype(dtype)
    dst = np.empty((shape[0], shape[2], shape[1]), dtype)
    NATIVE.hwc_to_chw(src, dst)
    assert np.array_equal(dst, src.transpose(0, 2, 1))


def test_hwc_to_chw_refuses_bad_arguments():
    a = np.zeros((1, 4, 3), np.float32)
    for src, dst in [(a, np.zeros((1, 4, 3), np.float32)), (a, np.zeros((1, 3, 4), np.int32)),
                     (a, np.zeros((1, 3, 4), np.float64)), (a[0], np.zeros((3, 4), np.float32))]:
        with pytest.raises((ValueError, TypeError)):
            NATIVE.hwc_to_chw(src, dst)
    square = np.zeros((1, 4, 4), np.float32)
    with pytest.raises(ValueError):
        NATIVE.hwc_to_chw(square, square)


@pytest.mark.parametrize("shape,axis", [((1, 40, 6625), 2), ((1, 8, 40, 40), 3), ((3, 7), 0),
                                        ((2, 5, 4), 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_softmax_in_place_is_the_formula(shape, axis, dtype, monkeypatch):
    rng = np.random.default_rng(len(shape) + axis)
    x = (rng.standard_normal(shape) * 5).astype(dtype)
    x.flat[::37] = -np.inf
    got = nn.softmax([x], {"axis": axis, "opset": 17})[0]
    monkeypatch.setattr(native, "NATIVE", None)
    z = x - arith.reduce_max(x, axis=(axis,), keepdims=True)
    e = elementary.exp(z).astype(x.dtype)
    want = (e / e.sum(axis=(axis,), keepdims=True)).astype(x.dtype)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("fn", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elem_in_place_equals_elem_into_another_array(fn, dtype):
    x = (np.random.default_rng(fn).standard_normal(1000) * 30).astype(dtype)
    x[::50] = np.nan
    want = np.empty_like(x)
    NATIVE.elem(fn, x, want)
    NATIVE.elem(fn, x, x)
    assert np.array_equal(x.view(np.uint8), want.view(np.uint8))


@pytest.mark.parametrize("base,perm,axis", [((6625, 1, 40), (1, 2, 0), 2),
                                            ((1, 40, 40, 8), (0, 3, 1, 2), 3),
                                            ((5, 9, 3), (2, 0, 1), 1)])
@pytest.mark.parametrize("compiled", [True, False])
def test_softmax_of_a_transposed_view_is_the_formula_in_c_order(base, perm, axis, compiled,
                                                                monkeypatch):
    """A Softmax input the runtime holds as a transposed view (a device tensor seen as
    NCHW, a Transpose's result): the exponentials and the sums are those of the formula
    on the C-ordered values, so the bits do not depend on the input's strides, with the
    compiled loops or without."""
    rng = np.random.default_rng(len(base) + axis)
    x = (rng.standard_normal(base) * 5).astype(np.float32).transpose(perm)
    x[(0,) * (x.ndim - 1)] = -np.inf
    assert not x.flags.c_contiguous
    if not compiled:
        monkeypatch.setattr(native, "NATIVE", None)
    got = nn.softmax([x], {"axis": axis, "opset": 17})[0]
    monkeypatch.setattr(native, "NATIVE", None)
    xc = np.ascontiguousarray(x)
    z = xc - arith.reduce_max(xc, axis=(axis,), keepdims=True)
    e = elementary.exp(z).astype(np.float32)
    want = e / e.sum(axis=(axis,), keepdims=True)
    assert got.shape == x.shape and np.array_equal(got.view(np.uint8), want.view(np.uint8))
