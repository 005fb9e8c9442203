"""The simulator's two-thread splits (dvsdk/sim/split.py) change no bit.

With the work threshold at zero every depthwise loop, epilogue and matrix product the
compiled path runs is split over two threads; the outputs of test_sim_fastpath's conv,
element-wise add and multi-run cases must hash the same as the numpy reference path's
(``DVSDK_NATIVE=0``).  The matrix-product claim the module rests on (a row's sums do not
depend on the other rows) is checked on its own over shapes of real networks, odd row
counts included, against a product computed by the test in one call.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dvsdk import native
from dvsdk.compiler.build import compile as compile_model
from dvsdk.runtime.net import Net
from dvsdk.sim import ops, split
from dvsdk.sim.device import SimDevice

from .onnx_models import NetBuilder
from .test_ops_multirun import chain_cases
from .test_ops_pool import add_cases
from .test_sim_fastpath import _outputs, conv_cases, needs_native

pytestmark = pytest.mark.filterwarnings("ignore::dvsdk.native.NativeFallbackWarning")
NATIVE = native.NATIVE


@pytest.fixture(autouse=True)
def _other_core_free(monkeypatch):
    """No back-off from another test, and none from timing here (a tiny test loop's halves
    are too short to time; the back-off has its own test); splits in the middle unless a
    test asks for the main thread's larger part (``uneven``)."""
    monkeypatch.setattr(split, "_busy", [0])
    monkeypatch.setattr(split, "_lagged", [0])
    monkeypatch.setattr(split, "BACKOFF", 0)
    monkeypatch.setattr(split, "_balance", split.Balance())
    monkeypatch.setattr(split, "MAX_SHARE", 0.5)


def uneven(monkeypatch, share: float = 0.8) -> None:
    """Every split gives the main thread ``share`` of the loop, as far as the loop admits
    (the worker keeps its ``least``): the most uneven split the balance can choose."""
    monkeypatch.setattr(split, "MAX_SHARE", share)
    monkeypatch.setattr(split.Balance, "share", lambda self, work: share)


class Calls(list):
    """The (rows, work) of each ``split.rows`` call; ``parts``: the (rows, work, end of the
    main thread's part) of each that split."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[tuple[int, float, int]] = []


@pytest.fixture
def always_split(monkeypatch):
    """Every loop worth a split at all is split; returns the (rows, work) of each call, and
    in ``always_split.parts`` the (rows, work, first part's end) of each that split."""
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    calls = Calls()
    real = split.rows

    def counting(n, work, fn, least=1):
        calls.append((n, work))
        ends = []

        def part(r0, r1):
            ends.append(r1 if r0 == 0 else None)
            return fn(r0, r1)

        real(n, work, part, least)
        if len(ends) == 2:
            calls.parts.append((n, work, max(e for e in ends if e is not None)))

    monkeypatch.setattr(split, "rows", counting)
    return calls


@needs_native
@pytest.mark.parametrize("share", [0.5, 0.8])
@pytest.mark.parametrize("which", ["conv", "add", "multirun"])
def test_split_loops_give_the_reference_bits(which, share, monkeypatch, always_split):
    uneven(monkeypatch, share)
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
    assert any(n >= 2 and work > 0 for n, work in always_split)  # the compiled path split


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
@pytest.mark.parametrize("share", [0.5, 0.8])
def test_a_network_whose_products_split_gives_the_reference_bits(share, monkeypatch,
                                                                  always_split):
    """Convs big enough that their BLAS products split (3x3 im2col and 1x1), a depthwise
    conv and a residual add, on sim:// compiled and split (in the middle, and as unevenly
    as each loop admits), against the numpy reference path, bit for bit; and each product
    that split was one the rule admits."""
    uneven(monkeypatch, share)
    b = NetBuilder(21)
    h = b.node("Relu", [b.conv("x", 32, 64, k=3)])
    h = b.node("Relu", [b.conv(h, 64, 64, k=1)])
    d = b.conv(h, 64, 64, k=3, group=64)
    y = b.node("Add", [b.conv(d, 64, 64, k=1), h])
    y = b.conv(b.conv(y, 64, 960, k=3, s=8), 960, 256, k=1)  # 6x6: 36 rows, by columns
    netfile = compile_model(b.model([("x", (1, 32, 48, 48))], [y], "split_net"), golden=False)
    x = np.random.default_rng(2).standard_normal((1, 32, 48, 48)).astype(np.float32)
    assert_reference_bits(netfile, x, monkeypatch)
    big = [(n, work) for n, work in always_split if work >= split.MATMUL * 48 * 48 * 64 * 64]
    if share > 0.5:  # the 1x1 products' split leaves the worker just the rows it must
        one_by_one = [h for n, work, h in always_split.parts
                      if (n, work) == (48 * 48, split.product_work(48 * 48, 64, 64))]
        assert one_by_one and set(one_by_one) == {48 * 48 - split.product_least(64, 64)}
    assert big  # 2304 x 288 @ 288 x 64 and 2304 x 64 @ 64 x 64 split
    assert (256, split.product_cols_work(36, 960, 256)) in always_split  # by columns
    # and a split by columns stays in the middle whatever the share
    assert (256, split.product_cols_work(36, 960, 256), 128) in always_split.parts


@needs_native
def test_a_3x3_conv_leaves_the_worker_the_output_rows_its_product_needs(monkeypatch,
                                                                         always_split):
    """A 32x32 3x3 conv, 32 -> 32 channels, is one im2col product of 32 rows of 288 per
    output row; a part needs product_least(288, 32) = 456 product rows, so 15 output rows:
    the most uneven split gives the worker those 15 (the share alone would leave it 7),
    and the result is the reference's, bit for bit."""
    uneven(monkeypatch, 0.8)
    b = NetBuilder(8)
    y = b.conv("x", 32, 32, k=3)
    netfile = compile_model(b.model([("x", (1, 32, 32, 32))], [y], "conv3x3"), golden=False)
    x = np.random.default_rng(3).standard_normal((1, 32, 32, 32)).astype(np.float32)
    assert_reference_bits(netfile, x, monkeypatch)
    least = -(-split.product_least(288, 32) // 32)
    assert least == 15
    assert [h for n, work, h in always_split.parts if n == 32] == [32 - least]


@pytest.mark.parametrize("n,k,m", [(12544, 16, 96), (3137, 24, 144), (785, 288, 40),
                                   (197, 480, 112), (12544, 27, 32), (401, 1152, 192)])
def test_a_products_rows_do_not_depend_on_the_other_rows(n, k, m, monkeypatch):
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    assert split.product_work(n, k, m) > 0  # shapes the rule admits
    rng = np.random.default_rng(n + k + m)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    least = split.product_least(k, m)
    assert least <= n // 2  # (so the middle is admitted too)
    with ops.blas_threads():
        whole = np.matmul(a, b)
        out = np.empty_like(whole)
        split.rows(n, 1, lambda r0, r1: np.matmul(a[r0:r1], b, out=out[r0:r1]))
        # the most uneven split admitted: the worker's part has just ``least`` rows
        lop = np.empty_like(whole)
        for r0, r1 in ((0, n - least), (n - least, n)):
            np.matmul(a[r0:r1], b, out=lop[r0:r1])
    assert np.array_equal(whole.view(np.uint32), out.view(np.uint32))
    assert np.array_equal(whole.view(np.uint32), lop.view(np.uint32))


@pytest.mark.parametrize("n,k,m", [(49, 192, 1152), (49, 1152, 192), (49, 320, 1280),
                                   (49, 1152, 320), (16, 960, 1280), (63, 672, 200)])
def test_a_products_columns_do_not_depend_on_the_other_columns(n, k, m, monkeypatch):
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    assert split.product_cols_work(n, k, m) > 0 and split.product_work(n, k, m) == 0
    rng = np.random.default_rng(n * k + m)
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    with ops.blas_threads():
        whole = np.matmul(a, b)
        out = np.empty_like(whole)
        split.rows(m, 1, lambda c0, c1: np.matmul(a, b[:, c0:c1], out=out[:, c0:c1]))
    assert np.array_equal(whole.view(np.uint32), out.view(np.uint32))


def test_rows_covers_every_row_once_and_raises_what_a_half_raised(monkeypatch):
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    seen = []
    split.rows(7, 1, lambda r0, r1: seen.append((r0, r1)))
    assert sorted(seen) == [(0, 3), (3, 7)]

    def bad(r0, r1):
        if r0:
            raise ValueError("second half")

    with pytest.raises(ValueError, match="second half"):
        split.rows(8, 1, bad)


def test_the_main_thread_takes_the_larger_part_but_leaves_the_worker_its_least(
        monkeypatch):
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    uneven(monkeypatch, 0.8)
    for n, least, main in [(100, 1, 80), (100, 30, 70), (100, 60, 50), (7, 1, 5), (2, 1, 1)]:
        seen: list[tuple[int, int]] = []
        split.rows(n, 1, lambda r0, r1, seen=seen: seen.append((r0, r1)), least=least)
        assert sorted(seen) == [(0, main), (main, n)], (n, least)


def test_the_balance_gives_the_main_thread_the_worker_s_start_delay(monkeypatch):
    """Both threads end together: the main thread's part s of a loop of W units at r s per
    unit takes s W r; the worker's, started d late, d + (1 - s) W r q (q: its time per unit
    against the main thread's)."""
    monkeypatch.setattr(split, "MAX_SHARE", 0.8)
    b = split.Balance()
    assert b.share(1e6) == 0.5  # nothing learnt yet: the middle
    for _ in range(200):  # main: 100 us per half of 1e6 units; worker: 50 us late, as fast
        b.learn(1e6, 0.5, 50e-6, 100e-6, 100e-6)
    assert b.delay == pytest.approx(50e-6) and b.rate == pytest.approx(200e-6 / 1e6)
    assert b.ratio == pytest.approx(1.0)
    assert b.share(1e6) == pytest.approx((50 / 200 + 1) / 2)  # 0.625: both end at 125 us
    assert b.share(1e9) == pytest.approx(0.5, abs=1e-3)  # a long loop: about the middle
    assert b.share(1e4) == split.MAX_SHARE  # a short one: as much as allowed
    for _ in range(200):  # a worker twice as slow per unit (the other core is shared)
        b.learn(1e6, 0.5, 0.0, 100e-6, 200e-6)
    assert b.ratio == pytest.approx(2.0) and b.share(1e9) == pytest.approx(2 / 3, abs=1e-3)


def test_small_loops_other_threads_and_one_thread_run_whole(monkeypatch):
    seen = []
    split.rows(100, split.MIN_WORK - 1, lambda r0, r1: seen.append((r0, r1)))
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 1)
    split.rows(100, 10, lambda r0, r1: seen.append((r0, r1)))
    monkeypatch.setattr(split, "THREADS", 2)
    t = threading.Thread(target=split.rows, args=(100, 10, lambda r0, r1: seen.append(
        (r0, r1))))
    t.start()
    t.join()
    assert seen == [(0, 100)] * 3


@needs_native
def test_depthwise_rows_write_only_their_rows():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((9, 7, 16)).astype(np.float32)
    taps = rng.standard_normal((3, 3, 16)).astype(np.float32)
    bias = rng.standard_normal(16).astype(np.float32)
    whole = np.empty((5, 4, 16), np.float32)
    native.NATIVE.depthwise(x, taps, bias, whole, 2, 2, 1, 1, 1, 1)
    part = np.full_like(whole, 7.0)
    native.NATIVE.depthwise(x, taps, bias, part, 2, 2, 1, 1, 1, 1, -1, 0.0, None, 2, 4)
    assert np.array_equal(part[2:4], whole[2:4])
    assert (part[:2] == 7).all() and (part[4:] == 7).all()
    with pytest.raises(ValueError, match="row0"):
        native.NATIVE.depthwise(x, taps, bias, part, 2, 2, 1, 1, 1, 1, -1, 0.0, None, 4, 2)


def test_the_other_half_runs_under_the_callers_numpy_error_state(monkeypatch):
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    seen = {}

    def fn(r0, r1):
        seen[r0] = np.geterr()["invalid"]

    with np.errstate(invalid="ignore"):
        split.rows(4, 1, fn)
    assert seen == {0: "ignore", 2: "ignore"}


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="no fork here")
def test_a_forked_child_splits_with_its_own_worker(monkeypatch):
    """The parent's pool thread does not exist in a child made by fork (multiprocessing's
    default on Linux): the child must not wait for it forever."""
    import multiprocessing

    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    split.rows(4, 1, lambda r0, r1: None)  # the parent's worker exists now
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        got = pool.apply_async(_split_in_child).get(timeout=20)
    assert got == [(0, 2), (2, 4)]


def _split_in_child():
    split.MIN_WORK, split.THREADS = 0, 2
    seen = []
    split.rows(4, 1, lambda r0, r1: seen.append((r0, r1)))
    return sorted(seen)


def test_a_lagging_other_half_stops_splitting_for_a_while(monkeypatch):
    """When a split takes longer than the caller's thread alone would have taken for the
    whole loop (at its rate: with halves, the worker's over twice the caller's), twice in
    a row (another process holds the other core), the next BACKOFF splits run whole; then
    splitting is tried again.  One lagging split alone (a hiccup) changes nothing."""
    import time

    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    monkeypatch.setattr(split, "BACKOFF", 3)
    seen = []

    def slow_second_half(r0, r1):
        seen.append((r0, r1))
        if r0:
            time.sleep(0.02)

    split.rows(4, 1, slow_second_half)
    assert sorted(seen) == [(0, 2), (2, 4)] and split._busy == [0]  # once: a hiccup
    split.rows(4, 1, lambda r0, r1: time.sleep(0.02 if r0 == 0 else 0))  # ours is slower
    split.rows(4, 1, slow_second_half)
    assert split._busy == [0]
    split.rows(4, 1, slow_second_half)                                  # twice in a row
    assert split._busy == [3]
    seen.clear()
    for _ in range(3):
        split.rows(4, 1, lambda r0, r1: seen.append((r0, r1)))
    assert seen == [(0, 4)] * 3 and split._busy == [0]
    seen.clear()
    split.rows(4, 1, lambda r0, r1: seen.append((r0, r1)))
    assert sorted(seen) == [(0, 2), (2, 4)]
    # with the main thread's larger part: our 8 rows take 20 ms, the worker's 2 rows 30 ms;
    # the split (30 ms) loses to our thread alone (25 ms) though the worker lagged less
    # than our part took
    uneven(monkeypatch, 0.8)
    split._lagged[0] = 0  # (the instant split above lagged its worker's start)
    for _ in range(2):
        split.rows(10, 1, lambda r0, r1: time.sleep(0.02 if r0 == 0 else 0.03))
    assert split._busy == [3]


def test_products_split_only_on_the_blas_whose_independence_was_measured(monkeypatch):
    monkeypatch.setattr(split, "_OPENBLAS", [False])
    assert split.product_work(12544, 16, 96) == 0 and split.product_cols_work(49, 192, 1152) == 0
    monkeypatch.setattr(split, "_OPENBLAS", [True])
    assert split.product_work(12544, 16, 96) > 0 and split.product_cols_work(49, 192, 1152) > 0
