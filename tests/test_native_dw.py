"""The compiled depthwise correlation (``dvsdk._native.depthwise``: the column sweep of
_native_dw.h for kernels 3 or 5 wide at stride 1 or 2, the per-pixel loop for the rest)
against a plain numpy reference of firmware_spec/arithmetic.md written here: the input
zero-padded, each output ``acc = +0``, then for every tap in row-major order ``acc = acc +
x * w`` (a float32 product rounded, then a float32 add: numpy's element-wise operations,
vectorised across outputs and channels, never across taps), then ``+ bias``; with an
activation, the activation and numpy's cast to binary16 and back.

Edge sizes (widths around the 8-pixel groups, channel counts around the 16- and 8-lane
blocks), paddings wider than the kernel's reach, inf weights (a padded position's 0 * inf
is a NaN: it must take its turn), NaN inputs, row ranges and two parts, and the 8-lane
build in a child (``DVSDK_NATIVE_ISA=avx2``).
"""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .test_native import NATIVE, needs_native
from .test_native_gemm import _ref_epilogue

pytestmark = [needs_native, pytest.mark.filterwarnings("ignore::RuntimeWarning")]
ROOT = Path(__file__).resolve().parent.parent


def _ref(x, taps, bias, s, d, pads, out_hw, act=-1, slope=0.0, prelu=None):
    """The documented order on a zero-padded copy."""
    (sx, sy), (dx, dy), (pl, pt) = s, d, pads
    ky, kx, c = taps.shape
    oh, ow = out_hw
    h_need = (oh - 1) * sy + (ky - 1) * dy + 1
    w_need = (ow - 1) * sx + (kx - 1) * dx + 1
    xp = np.zeros((max(h_need, pt + x.shape[0]), max(w_need, pl + x.shape[1]), c), np.float32)
    xp[pt:pt + x.shape[0], pl:pl + x.shape[1]] = x
    acc = np.zeros((oh, ow, c), np.float32)
    for i in range(ky):
        for j in range(kx):
            win = xp[i * dy:i * dy + (oh - 1) * sy + 1:sy, j * dx:j * dx + (ow - 1) * sx + 1:sx]
            acc = np.add(acc, np.multiply(win, taps[i, j], dtype=np.float32), dtype=np.float32)
    return _ref_epilogue(acc, bias, None, act, slope, prelu)  # (per channel: the last axis)


def _same(got, want) -> bool:
    """Bit for bit, a NaN matching any NaN (which of two NaN operands survives a product is
    the machine's choice; stored results are canonical anyway)."""
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan)
                and np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)))


def _out_hw(h, w, k, s, d, pads_all):
    (kx, ky), (sx, sy), (dx, dy) = k, s, d
    pl, pr, pt, pb = pads_all
    return ((h + pt + pb - (ky - 1) * dy - 1) // sy + 1,
            (w + pl + pr - (kx - 1) * dx - 1) // sx + 1)


def _case(rng, h, w, c, k, s, d, pads_all, special=False):
    (kx, ky) = k
    x = (rng.standard_normal((h, w, c)) * 4).astype(np.float16).astype(np.float32)
    taps = rng.standard_normal((ky, kx, c)).astype(np.float16).astype(np.float32)
    bias = rng.standard_normal(c).astype(np.float16).astype(np.float32)
    if special:
        x.reshape(-1)[rng.integers(0, x.size, 3)] = np.nan
        taps.reshape(-1)[rng.integers(0, taps.size)] = np.inf
    return x, taps, bias, _out_hw(h, w, k, s, d, pads_all)


def _run(x, taps, bias, out_hw, s, d, pads, act=-1, slope=0.0, prelu=None, rows=(0, -1),
         parts=1):
    out = np.full((*out_hw, x.shape[2]), np.float32(7.0))
    NATIVE.depthwise(x, taps, bias, out, s[0], s[1], d[0], d[1], pads[0], pads[1], act, slope,
                     prelu, rows[0], rows[1], parts)
    return out


@pytest.mark.parametrize("k", [(3, 3), (5, 5), (3, 5), (5, 3), (3, 1), (5, 1)])
@pytest.mark.parametrize("s", [(1, 1), (2, 2), (2, 1), (1, 2)])
def test_every_edge_size_is_the_ordered_sum(k, s):
    """Widths around the 8-pixel groups, channels around the vector blocks, paddings of
    0 to the kernel's reach and beyond (a whole row of zeros)."""
    rng = np.random.default_rng(k[0] * 10 + k[1] + s[0] * 100)
    for w, c, (pl, pt) in itertools.product((1, 7, 8, 9, 17), (1, 7, 8, 9, 16, 17, 24, 33),
                                            ((0, 0), (1, 1), (2, 2), (3, 0))):
        h = 4
        pads_all = (pl, pl, pt, pt)
        if w + 2 * pl < k[0] or h + 2 * pt < k[1]:
            continue
        x, taps, bias, ohw = _case(rng, h, w, c, k, s, (1, 1), pads_all)
        want = _ref(x, taps, bias, s, (1, 1), (pl, pt), ohw)
        assert _same(_run(x, taps, bias, ohw, s, (1, 1), (pl, pt)), want), (w, c, pl, pt)


@pytest.mark.parametrize("act,slope", [(-1, 0.0), (0, 0.0), (2, 0.0), (2, 0.125), (4, 0.0),
                                       (6, 0.0)])
@pytest.mark.parametrize("shape", [(14, 14, 240, (5, 5), (1, 1), (2, 2)),
                                   (3, 80, 72, (5, 5), (1, 1), (2, 2)),
                                   (28, 28, 88, (3, 3), (1, 1), (1, 1)),
                                   (23, 21, 40, (3, 3), (2, 2), (1, 1)),
                                   (9, 11, 24, (5, 5), (2, 2), (2, 2))])
def test_activations_specials_and_two_parts(act, slope, shape):
    """The network shapes with the epilogue, NaN inputs and an inf weight, whole and in two
    parts; and a range of rows writes those rows only."""
    h, w, c, k, s, p = shape
    rng = np.random.default_rng(h * w + c + act)
    x, taps, bias, ohw = _case(rng, h, w, c, k, s, (1, 1), (p[0], p[0], p[1], p[1]),
                               special=True)
    prelu = rng.standard_normal(c).astype(np.float32) if act == 4 else None
    want = _ref(x, taps, bias, s, (1, 1), p, ohw, act, slope, prelu)
    for parts in (1, 2):
        assert _same(_run(x, taps, bias, ohw, s, (1, 1), p, act, slope, prelu, parts=parts),
                     want)
    r0, r1 = 1, max(2, ohw[0] - 1)
    got = _run(x, taps, bias, ohw, s, (1, 1), p, act, slope, prelu, rows=(r0, r1))
    assert _same(got[r0:r1], want[r0:r1])
    assert (got[:r0] == 7.0).all() and (got[r1:] == 7.0).all()


def test_dilated_rows_and_other_kernels_keep_the_order():
    """Vertical dilation (the sweep's rows), horizontal dilation and a 7-wide kernel (the
    per-pixel loop)."""
    rng = np.random.default_rng(3)
    for k, s, d in [((3, 3), (1, 1), (1, 2)), ((5, 5), (1, 1), (1, 3)), ((3, 3), (1, 1), (2, 2)),
                    ((7, 7), (1, 1), (1, 1)), ((5, 5), (2, 2), (2, 1))]:
        pads = (3, 3, 3, 3)
        x, taps, bias, ohw = _case(rng, 13, 19, 20, k, s, d, pads, special=True)
        want = _ref(x, taps, bias, s, d, (3, 3), ohw)
        assert _same(_run(x, taps, bias, ohw, s, d, (3, 3)), want), (k, s, d)


def _digest() -> str:
    rng = np.random.default_rng(11)
    h = hashlib.sha256()
    for w, c, k, s in itertools.product((7, 9, 17), (8, 17, 40), ((3, 3), (5, 5)),
                                        ((1, 1), (2, 2))):
        x, taps, bias, ohw = _case(rng, 6, w, c, k, s, (1, 1), (2, 2, 2, 2))
        h.update(_run(x, taps, bias, ohw, s, (1, 1), (2, 2), 2, 0.5).tobytes())
    return h.hexdigest()


def test_the_8_lane_sweep_writes_the_same_bits():
    """A child asking for the lower builds (``DVSDK_NATIVE_ISA=avx2``: 8-lane blocks in the
    sweep) computes what this process does."""
    code = "from tests.test_native_dw import _digest\nprint(_digest())\n"
    env = dict(os.environ, DVSDK_NATIVE_ISA="avx2", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=300, check=True, cwd=ROOT).stdout.split()
    assert out[-1] == _digest()
