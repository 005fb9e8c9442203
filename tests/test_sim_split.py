"""The simulator's split loops (dvsdk/sim/split.py, dvsdk/_native_team.c) change no bit.

With the work threshold at zero every depthwise loop, im2col, epilogue and matrix product
the compiled path runs is given ``parts=2`` (eight chunks the caller and the worker thread
claim); the outputs of test_sim_fastpath's conv, element-wise add and multi-run cases must
hash the same as the numpy reference path's (``DVSDK_NATIVE=0``), both when the worker takes
chunks and when it is held back so long that the caller runs them all.  Each compiled loop
split is compared with itself in one part, bit for bit, over many shapes; the fixed-order product
(firmware_spec/arithmetic.md) split by rows or by 16-column panels at every point gives the
whole product's bits.  No verdict here depends on how fast this machine is: who ran a part
is read from the worker's counters, not from clocks.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from dvsdk import native
from dvsdk.compiler.build import compile as compile_model
from dvsdk.hw import arith
from dvsdk.runtime.net import Net
from dvsdk.sim import split
from dvsdk.sim.device import SimDevice

from .onnx_models import NetBuilder
from .test_ops_multirun import chain_cases
from .test_ops_pool import add_cases
from .test_sim_fastpath import _outputs, conv_cases, needs_native

pytestmark = pytest.mark.filterwarnings("ignore::dvsdk.native.NativeFallbackWarning")
NATIVE = native.NATIVE


@pytest.fixture
def always_split(monkeypatch):
    """Every compiled loop gets two parts; returns the worker's counters before."""
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    return NATIVE.team_stats()


@pytest.fixture(params=["worker", "caller", "both"])
def who(request):
    """Who runs the chunks of a split loop after its first: the worker (the caller leaves
    them all to it), the caller (the worker waits 2 s before it claims any, so the caller
    has claimed and run them all by then: the path a busy or sleeping second core takes),
    or both at once, as in production (which chunks each takes is up to the machine; the
    bits must not be)."""
    if NATIVE is None:
        pytest.skip("dvsdk._native not built")
    if request.param == "worker":
        NATIVE.team_stats(0, 1)
    elif request.param == "caller":
        NATIVE.team_stats(2_000_000_000, 0)
    else:
        NATIVE.team_stats(0, 0)
    yield request.param
    NATIVE.team_stats(0, 0)


def _ran(before: tuple, who: str) -> None:
    jobs, by_worker, by_caller = (a - b for a, b in zip(NATIVE.team_stats(), before))
    assert jobs > 0
    if who == "caller":
        assert by_worker == 0 and by_caller >= jobs
    elif who == "worker":
        assert by_worker > 0


@needs_native
@pytest.mark.parametrize("which", ["conv", "add", "multirun"])
def test_split_loops_give_the_reference_bits(which, who, always_split, monkeypatch):
    cases = {"conv": conv_cases, "add": lambda: list(add_cases()),
             "multirun": lambda: list(chain_cases())}[which]()
    shas = {}
    for compiled in (True, False):
        sim = SimDevice()
        try:
            shas[compiled] = _outputs(sim, cases, monkeypatch, compiled, True).sha
        finally:
            sim.close()
    assert shas[True] == shas[False]
    _ran(always_split, who)


def assert_reference_bits(netfile, x: np.ndarray, monkeypatch) -> None:
    """The net's output on sim:// with the compiled loops (and their splits) is the numpy
    reference path's, bit for bit."""
    outs = {}
    for compiled in (True, False):
        monkeypatch.setattr(native, "NATIVE", NATIVE if compiled else None)
        with Net(netfile, "sim://") as net:
            outs[compiled] = next(iter(net.run(x).values()))
    assert np.array_equal(outs[True].view(np.uint32), outs[False].view(np.uint32))


@needs_native
def test_a_network_whose_loops_split_gives_the_reference_bits(who, always_split,
                                                              monkeypatch):
    """Convs whose products split by rows (3x3 im2col and 1x1) and by panels (a 6x6 layer
    of 36 rows), a depthwise conv and a residual add, on sim:// with two parts everywhere,
    against the numpy reference path, bit for bit."""
    b = NetBuilder(21)
    h = b.node("Relu", [b.conv("x", 32, 64, k=3)])
    h = b.node("Relu", [b.conv(h, 64, 64, k=1)])
    d = b.conv(h, 64, 64, k=3, group=64)
    y = b.node("Add", [b.conv(d, 64, 64, k=1), h])
    y = b.conv(b.conv(y, 64, 960, k=3, s=8), 960, 256, k=1)  # 6x6: 36 rows, by panels
    netfile = compile_model(b.model([("x", (1, 32, 48, 48))], [y], "split_net"), golden=False)
    x = np.random.default_rng(2).standard_normal((1, 32, 48, 48)).astype(np.float32)
    assert_reference_bits(netfile, x, monkeypatch)
    _ran(always_split, who)


@needs_native
@pytest.mark.parametrize("n,k,m", [(12544, 16, 96), (3137, 24, 144), (785, 288, 40),
                                   (197, 480, 112), (49, 1152, 192), (36, 960, 256),
                                   (1, 1280, 1000), (7, 513, 47), (2, 3, 17)])
def test_the_compiled_product_in_two_parts_is_the_product_in_one(n, k, m, who):
    """Rows (64 and more) or panels in two parts, epilogue included, against one part."""
    rng = np.random.default_rng(n + k + m)
    a = rng.standard_normal((n, k)).astype(np.float16).astype(np.float32)
    bp = arith.pack_b(rng.standard_normal((k, m)).astype(np.float16).astype(np.float32))
    bias = rng.standard_normal(m).astype(np.float32)
    add = rng.standard_normal((n, m)).astype(np.float32)
    before = NATIVE.team_stats()
    outs = []
    for parts in (1, 2):
        out = np.full((n, m), np.nan, np.float32)
        NATIVE.gemm(a, bp, out, True, 0, -1, 0, -1, bias, add, 6, 0.0, None, parts)
        outs.append(out)
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    if n > 1 or bp.shape[0] > 1:
        _ran(before, who)


@pytest.mark.parametrize("n,k,m", [(12544, 16, 96), (3137, 24, 144), (785, 288, 40),
                                   (197, 480, 112), (49, 1152, 192), (1, 1280, 1000),
                                   (7, 513, 47)])
def test_a_products_parts_give_the_whole_products_bits(n, k, m, monkeypatch):
    """Any rows and any 16-column panels of the fixed-order product, computed alone, are
    the whole product's bits: split in two by rows and by panels at several points (the
    ends of tiles and between them), with the compiled build and with numpy."""
    rng = np.random.default_rng(n + k + m)
    a = rng.standard_normal((n, k)).astype(np.float16).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float16).astype(np.float32)
    packed = arith.pack_b(b)
    panels = packed.shape[0]
    for compiled in (True, False) if NATIVE is not None else (False,):
        monkeypatch.setattr(native, "NATIVE", NATIVE if compiled else None)
        whole = arith.matmul(a[:64] if not compiled else a, b, exact_products=True)
        rows = whole.shape[0]
        for cut in sorted({1, rows // 2, rows - 1, 8, 13} & set(range(1, rows))):
            out = np.full_like(whole, np.nan)
            for r in ((0, cut), (cut, rows)):
                arith.matmul(a[:rows], b, out, packed=packed, exact_products=True, rows=r)
            assert np.array_equal(out.view(np.uint32), whole.view(np.uint32)), (compiled, cut)
        for cut in range(1, panels):
            out = np.full_like(whole, np.nan)
            for p in ((0, cut), (cut, panels)):
                arith.matmul(a[:rows], b, out, packed=packed, exact_products=True, panels=p)
            assert np.array_equal(out.view(np.uint32), whole.view(np.uint32)), (compiled, cut)


@needs_native
def test_depthwise_epilogue_and_im2col_in_two_parts_are_them_in_one(who):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((37, 23, 40)).astype(np.float16).astype(np.float32)
    taps = rng.standard_normal((5, 5, 40)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    before = NATIVE.team_stats()
    dw, ep, cols = [], [], []
    for parts in (1,) + (2,) * 30:  # (often: chunks of both threads at once, scratch apart)
        out = np.full((19, 12, 40), np.nan, np.float32)
        NATIVE.depthwise(x, taps, bias, out, 2, 2, 1, 1, 2, 2, 6, 0.0, None, 0, -1, parts)
        dw.append(out)
        y = x.reshape(-1, 40).copy()
        NATIVE.epilogue(y, bias, None, 2, 0.125, None, parts)
        ep.append(y)
        c = np.full((35, 21, 3 * 3 * 40), np.nan, np.float32)
        NATIVE.im2col(x, c, 0, 3, 3, 1, 1, 1, 1, 0, 0, 1, 1, parts)
        cols.append(c)
    for one, *two in (dw, ep, cols):
        for other in two:
            assert np.array_equal(one.view(np.uint32), other.view(np.uint32))
    _ran(before, who)


@needs_native
def test_depthwise_chunks_of_both_threads_keep_their_own_border_tables():
    """Every output row of a padded depthwise conv has border pixels, whose taps the loop
    looks up in a scratch table: chunks running on both threads at once must each use
    their thread's table (one shared by chunk position corrupted outputs under load)."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((240, 21, 24)).astype(np.float16).astype(np.float32)
    taps = rng.standard_normal((3, 3, 24)).astype(np.float32)
    bias = rng.standard_normal(24).astype(np.float32)
    NATIVE.team_stats(0, 0)
    ref = np.empty((240, 21, 24), np.float32)
    NATIVE.depthwise(x, taps, bias, ref, 1, 1, 1, 1, 1, 1)
    for _ in range(200):
        out = np.full_like(ref, np.nan)
        NATIVE.depthwise(x, taps, bias, out, 1, 1, 1, 1, 1, 1, -1, 0.0, None, 0, -1, 2)
        assert np.array_equal(out.view(np.uint32), ref.view(np.uint32))


@needs_native
def test_depthwise_rows_write_only_their_rows():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 7, 16)).astype(np.float32)
    taps = rng.standard_normal((3, 3, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    whole = np.empty((5, 4, 16), np.float32)
    native.NATIVE.depthwise(x, taps, bias, whole, 2, 2, 1, 1, 1, 1)
    for parts in (1, 2):
        part = np.full_like(whole, 7.0)
        native.NATIVE.depthwise(x, taps, bias, part, 2, 2, 1, 1, 1, 1, -1, 0.0, None, 2, 4,
                                parts)
        assert np.array_equal(part[2:4], whole[2:4])
        assert (part[:2] == 7).all() and (part[4:] == 7).all()
    with pytest.raises(ValueError, match="row0"):
        native.NATIVE.depthwise(x, taps, bias, part, 2, 2, 1, 1, 1, 1, -1, 0.0, None, 4, 2)


def test_parts_follow_the_work_and_the_thread_setting(monkeypatch):
    monkeypatch.setattr(split, "THREADS", 2)
    assert split.parts(split.MIN_WORK) == 2 and split.parts(split.MIN_WORK - 1) == 1
    monkeypatch.setattr(split, "THREADS", 1)
    assert split.parts(10 * split.MIN_WORK) == 1


@needs_native
def test_two_threads_splitting_at_once_both_get_their_bits():
    """Two Python threads each run split products at the same time: one uses the worker,
    the other's split runs whole meanwhile; every result is the one-part result."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((3000, 64)).astype(np.float16).astype(np.float32)
    bp = arith.pack_b(rng.standard_normal((64, 80)).astype(np.float16).astype(np.float32))
    ref = np.empty((3000, 80), np.float32)
    NATIVE.gemm(a, bp, ref, True)
    bad = []

    def run():
        for _ in range(30):
            out = np.empty_like(ref)
            NATIVE.gemm(a, bp, out, True, 0, -1, 0, -1, None, None, -1, 0.0, None, 2)
            if not np.array_equal(out, ref):
                bad.append(1)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


@needs_native
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_splits_with_its_own_worker():
    """The parent's worker thread does not exist in a child made by fork (multiprocessing's
    default on Linux): the child starts its own, and its split loops finish."""
    import multiprocessing

    rng = np.random.default_rng(4)
    a = rng.standard_normal((500, 32)).astype(np.float32)
    bp = arith.pack_b(rng.standard_normal((32, 48)).astype(np.float32))
    out = np.empty((500, 48), np.float32)
    NATIVE.gemm(a, bp, out, True, 0, -1, 0, -1, None, None, -1, 0.0, None, 2)  # worker up
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_split_in_child, (a, bp)).get(timeout=60)
    assert np.array_equal(got, out)


def _split_in_child(a, bp):
    out = np.empty((a.shape[0], bp.shape[0] * 16 if bp.shape[0] * 16 <= 48 else 48),
                   np.float32)
    before = NATIVE.team_stats()
    NATIVE.gemm(a, bp, out, True, 0, -1, 0, -1, None, None, -1, 0.0, None, 2)
    assert NATIVE.team_stats()[0] == before[0] + 1  # it was split, and it finished
    return out
