"""The compiled fixed-order matrix product (``dvsdk._native.gemm``) and its fused epilogue
against a plain numpy reference of firmware_spec/arithmetic.md written here: each output
``acc = +0``, then ``acc = acc + a[i, k] * b[k, j]`` for k = 0, 1, ... one float32 multiply and
one float32 add at a time (numpy's element-wise float32 operations, vectorised across the
outputs only, never across k); then ``+ bias``, ``+ addend``, the activation and numpy's cast
to binary16 and back.

Edge sizes on every axis (1, 7, 8, 9, 63, 64, 65: a tile's rows, a 16-column panel, a
256-step block of k), both loop orders of the kernel (a small b goes row tile by row tile
in its last block, a large one panel group by panel group), row and panel ranges, one part
and two, and the lower x86 builds in children (``DVSDK_NATIVE_ISA``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dvsdk.hw import arith

from .test_native import NATIVE, needs_native

pytestmark = [needs_native, pytest.mark.filterwarnings("ignore::RuntimeWarning")]
ROOT = Path(__file__).resolve().parent.parent
EDGES = (1, 7, 8, 9, 63, 64, 65)


def _ref_product(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """acc = +0; acc = acc + a[:, k] * b[k, :] for k in order, float32 operations."""
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for kk in range(a.shape[1]):
        prod = np.multiply(a[:, kk:kk + 1], b[kk:kk + 1, :], dtype=np.float32)
        acc = np.add(acc, prod, dtype=np.float32)
    return acc


def _ref_epilogue(t: np.ndarray, bias, addend, act: int, slope: float, prelu) -> np.ndarray:
    """+ bias, + addend, then (act >= 0) the activation and the rounding to binary16."""
    t = t.copy()
    if bias is not None:
        t = np.add(t, bias[None, :], dtype=np.float32)
    if addend is not None:
        t = np.add(t, addend, dtype=np.float32)
    if act < 0:
        return t
    if act == 2:
        t = np.where(t > 0, t, t * np.float32(slope)).astype(np.float32)
    elif act == 4:
        t = np.where(t > 0, t, t * prelu[None, :]).astype(np.float32)
    elif act == 6:
        t = np.where(np.isnan(t), t, np.where(t <= 0, np.float32(0), np.minimum(t, 6)))
        t = t.astype(np.float32)
    return t.astype(np.float16).astype(np.float32)


def _f16(rng, shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float32)


def _same(got: np.ndarray, want: np.ndarray) -> bool:
    """Bit for bit, a NaN matching any NaN (numpy's cast keeps payloads, the kernel stores
    the canonical one)."""
    nan = np.isnan(want)
    return bool(np.array_equal(np.isnan(got), nan)
                and np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32)))


def _gemm(a, b, fused=True, **kw) -> np.ndarray:
    out = np.full((a.shape[0], b.shape[1]), np.float32(7.0))
    args = [a, arith.pack_b(b), out, fused, kw.get("r0", 0), kw.get("r1", -1),
            kw.get("p0", 0), kw.get("p1", -1)]
    if "act" in kw or kw.get("parts", 1) != 1:
        args += [kw.get("bias"), kw.get("addend"), kw.get("act", -1), kw.get("slope", 0.0),
                 kw.get("prelu"), kw.get("parts", 1)]
    NATIVE.gemm(*args)
    return out


def test_every_edge_size_is_the_ordered_sum():
    """n x k x m over the edge sizes (and k across the 256-step block), fused and not: every
    output the documented sum, bit for bit."""
    rng = np.random.default_rng(0)
    for n in EDGES:
        for k in (*EDGES, 255, 256, 257):
            for m in (*EDGES, 16, 17, 47, 48, 49, 97):
                a, b = _f16(rng, (n, k)), _f16(rng, (k, m))
                want = _ref_product(a, b)
                for fused in (True, False):
                    assert _same(_gemm(a, b, fused), want), (n, k, m, fused)


@pytest.mark.parametrize("act,slope", [(-1, 0.0), (0, 0.0), (2, 0.0), (2, 0.125), (4, 0.0),
                                       (6, 0.0)])
@pytest.mark.parametrize("n,k,m", [(3136, 16, 72), (784, 24, 88), (65, 9, 1000), (9, 300, 65),
                                   (64, 513, 17), (1, 1024, 63), (203, 27, 16), (7, 8, 64)])
@pytest.mark.parametrize("parts", [1, 2])
def test_the_epilogue_on_every_loop_order(act, slope, n, k, m, parts):
    """Bias, addend, activation and rounding after the ordered sum: small b's (row tile by
    row tile), large ones (panel groups), narrow outputs (a tile of every column), in one
    part and two; values large enough that some round to infinity."""
    rng = np.random.default_rng(n + k + m + act)
    a, b = _f16(rng, (n, k), 4.0), _f16(rng, (k, m), 4.0)
    bias = _f16(rng, (m,))
    prelu = _f16(rng, (m,)) if act == 4 else None
    acc = _ref_product(a, b)
    big = _f16(rng, (n, m), 8.0)
    big.flat[::97] = 65504.0  # (the largest binary16: with a positive sum, infinity)
    for addend in (None, big):
        want = _ref_epilogue(acc, bias, addend, act, slope, prelu)
        got = _gemm(a, b, bias=bias, addend=addend, act=act, slope=slope, prelu=prelu,
                    parts=parts)
        assert _same(got, want)
        assert addend is None or act in (-1, 6) or n * m < 512 or np.isinf(want).any()


@pytest.mark.parametrize("n,k,m", [(100, 16, 72), (70, 300, 100)])
def test_row_and_panel_ranges_write_only_their_part(n, k, m):
    """A call for rows r0..r1 and panels p0..p1 (as the two threads split a product) writes
    those outputs, the ordered sums with their epilogue, and leaves every other one."""
    rng = np.random.default_rng(k)
    a, b, bias = _f16(rng, (n, k)), _f16(rng, (k, m)), _f16(rng, (m,))
    want = _ref_epilogue(_ref_product(a, b), bias, None, 2, 0.25, None)
    panels = (m + 15) // 16
    for r0, r1, p0, p1 in [(0, n, 0, panels), (3, 61, 0, panels), (0, n, 1, panels - 1),
                           (9, 17, 2, 3), (5, 5, 0, panels), (0, n, 2, 2)]:
        got = _gemm(a, b, r0=r0, r1=r1, p0=p0, p1=p1, bias=bias, act=2, slope=0.25)
        mask = np.zeros((n, m), bool)
        mask[r0:r1, p0 * 16:p1 * 16] = True
        assert _same(got[mask], want[mask]), (r0, r1, p0, p1)
        assert (got[~mask] == 7.0).all(), (r0, r1, p0, p1)


def test_the_lower_builds_write_the_same_bits():
    """The SSE2 and AVX2 builds (children asking for them) write what the reference does on
    the epilogue shapes of both loop orders."""
    code = ("import hashlib, numpy as np\n"
            "from tests.test_native_gemm import _gemm, _f16\nfrom dvsdk import native\n"
            "rng = np.random.default_rng(5)\nh = hashlib.sha256()\n"
            "for n, k, m in [(3136, 16, 72), (300, 27, 16), (65, 300, 130), (1, 700, 33)]:\n"
            "    a, b = _f16(rng, (n, k), 4.0), _f16(rng, (k, m), 4.0)\n"
            "    bias, ad = _f16(rng, (m,)), _f16(rng, (n, m))\n"
            "    for act in (-1, 2, 6):\n"
            "        h.update(_gemm(a, b, bias=bias, addend=ad, act=act, slope=0.5,"
            " parts=2).tobytes())\n"
            "print(native.NATIVE.gemm_isa(), h.hexdigest())\n")
    got = {}
    for isa in ("avx512", "avx2", "sse2"):
        env = dict(os.environ, DVSDK_NATIVE_ISA=isa, PYTHONPATH=str(ROOT))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300, check=True).stdout.split()
        got[out[0]] = out[1]
    assert len(set(got.values())) == 1, got
    rng = np.random.default_rng(5)
    n, k, m = 3136, 16, 72
    a, b = _f16(rng, (n, k), 4.0), _f16(rng, (k, m), 4.0)
    bias, ad = _f16(rng, (m,)), _f16(rng, (n, m))
    assert _same(_gemm(a, b, bias=bias, addend=ad, act=2, slope=0.5),
                 _ref_epilogue(_ref_product(a, b), bias, ad, 2, 0.5, None))
