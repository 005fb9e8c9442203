"""The simulator's two-thread splits (dvsdk/sim/split.py) change no bit.

With the work threshold at zero every depthwise loop, epilogue and matrix product the
compiled path runs is split over two threads; the outputs of test_sim_fastpath's conv,
element-wise add and multi-run cases must hash the same as the numpy reference path's
(``DVSDK_NATIVE=0``), split in the middle and as unevenly as the balance may choose.  The
fixed-order product (firmware_spec/arithmetic.md) is split by rows or by 16-column panels
at every point, and each part must fill its outputs with the whole product's bits.  The
balance and the back-off are checked as arithmetic on given times: no verdict here
depends on how fast this machine is.
"""

from __future__ import annotations

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
    """Convs big enough that their products split (3x3 im2col and 1x1 by rows; a 6x6
    layer of 36 rows by 16-column panels), a depthwise conv and a residual add, on sim://
    compiled and split (in the middle, and as unevenly as each loop admits), against the
    numpy reference path, bit for bit."""
    uneven(monkeypatch, share)
    b = NetBuilder(21)
    h = b.node("Relu", [b.conv("x", 32, 64, k=3)])
    h = b.node("Relu", [b.conv(h, 64, 64, k=1)])
    d = b.conv(h, 64, 64, k=3, group=64)
    y = b.node("Add", [b.conv(d, 64, 64, k=1), h])
    y = b.conv(b.conv(y, 64, 960, k=3, s=8), 960, 256, k=1)  # 6x6: 36 rows, by panels
    netfile = compile_model(b.model([("x", (1, 32, 48, 48))], [y], "split_net"), golden=False)
    x = np.random.default_rng(2).standard_normal((1, 32, 48, 48)).astype(np.float32)
    assert_reference_bits(netfile, x, monkeypatch)
    products = {n for n, work, _ in always_split.parts if work >= split.MATMUL * 36 * 64 * 64}
    assert 48 * 48 in products          # 2304-row products split by rows
    assert 256 // arith.PANEL in products  # the 36-row one by its 16 panels


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
    whole loop (at its rate), twice in a row (another process holds the other core), the
    next BACKOFF splits run whole; then splitting is tried again.  One lagging split alone
    (a hiccup) changes nothing.  The times are given to ``note_split``, as ``rows`` reports
    them: no sleeping, no clock."""
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    monkeypatch.setattr(split, "BACKOFF", 3)
    split.note_split(0.030, 0.010, 0.5)   # 30 ms against our 20 ms for the whole: lagged
    assert split._busy == [0] and split._lagged == [1]  # once: a hiccup
    split.note_split(0.015, 0.010, 0.5)   # in time: the count starts again
    assert split._lagged == [0]
    split.note_split(0.030, 0.010, 0.5)
    split.note_split(0.030, 0.010, 0.5)   # twice in a row
    assert split._busy == [3] and split._lagged == [0]
    seen = []
    for _ in range(3):
        split.rows(4, 1, lambda r0, r1: seen.append((r0, r1)))
    assert seen == [(0, 4)] * 3 and split._busy == [0]
    seen.clear()
    split.rows(4, 1, lambda r0, r1: seen.append((r0, r1)))
    assert sorted(seen) == [(0, 2), (2, 4)]
    # with the main thread's larger part: our 80% takes 20 ms, so the whole loop 25 ms; a
    # split of 30 ms loses to that though the worker lagged less than our part took
    split._lagged[0] = 0
    for _ in range(2):
        split.note_split(0.030, 0.020, 0.8)
    assert split._busy == [3]


def test_rows_reports_its_parts_times_to_the_back_off(monkeypatch):
    """``rows`` hands ``note_split`` the split's time, the main part's and its share."""
    monkeypatch.setattr(split, "MIN_WORK", 0)
    monkeypatch.setattr(split, "THREADS", 2)
    got = []
    monkeypatch.setattr(split, "note_split", lambda *a: got.append(a))
    split.rows(10, 1, lambda r0, r1: None)
    (total, main, share), = got
    assert share == 0.5 and total >= main >= 0
