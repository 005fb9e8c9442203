"""The simulator's second core: a big loop split in two over its output rows (or, for a
few-row matrix product, its 16-column output panels).

The compiled loops release the GIL, so two threads run two parts of one conv stage at
once.  A split changes no bit, by construction: every output is a fixed sequence of
operations on its own operands (firmware_spec/arithmetic.md): a depthwise tap loop or an
epilogue works element by element, and the matrix product (``dvsdk._native.gemm``) sums
each output in the order k = 0..K-1 whichever rows or columns share its call.  Nothing here
calls BLAS.

Measured on this project's 2-core machine (minimum of 30): a 12544x16 @ 16x96 product
0.49 -> 0.30 ms, a 112x112x32 3x3 depthwise 0.48 -> 0.28 ms, a 12544x96 epilogue 0.62 ->
0.33 ms; the whole-network effect is in ``benchmarks/bench_nets.py``.  Small loops stay
whole: below :data:`MIN_WORK` the hand-off (tens of microseconds) costs more than it
saves.

Only the main thread splits (a simulator driven from other threads leaves the cores to
them).  When the other half keeps lagging (another process holds the second core)
splitting backs off for a while (:data:`BACKOFF`).  ``DVSDK_SIM_THREADS=1`` turns
splitting off; the bits are the same either way.

The split point is not the middle: the worker starts its part some 40-100 us after the
hand-off (measured on this machine: the wake-up of a blocked thread, median 58 us in
EfficientNet-Lite0, while the main thread's half took 212 us), so the main thread takes the
larger part, by what :class:`Balance` learns from the splits before (the worker's start
delay, each thread's time per unit of work).
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

#: work below which a loop runs whole, in depthwise multiply-adds: where a split began to
#: pay on this machine (a 28x28x240 3x3 depthwise, 1.7 M, 148 -> 129 us; below ~1 M the
#: hand-off of about 30-50 us costs more than it saves)
MIN_WORK = 1_500_000
#: the work of one unit of each loop, in depthwise multiply-adds (measured break-evens: a
#: BLAS product pays from ~6 M multiply-adds, the epilogue from ~0.3 M elements)
DEPTHWISE, MATMUL, EPILOGUE = 1.0, 0.25, 5.0
#: threads the simulator's loops use: two where there are two cores, else one
THREADS = 1 if os.environ.get("DVSDK_SIM_THREADS", "") == "1" else min(2, os.cpu_count() or 1)

#: a matrix product with at least this many rows is split by rows, one with fewer by its
#: 16-column panels (a 7x7 layer: 49 rows of 1152 x 192)
PRODUCT_ROWS = 64

#: splits skipped after two in a row whose other half lagged (the other core is taken by
#: another process: measured on a loaded 2-core machine, splitting then made a network
#: slower than running whole); the next split after them tries again
BACKOFF = 64

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_busy = [0]  # splits still to skip (main thread only)
_lagged = [0]  # splits in a row whose other half lagged

#: the largest share of a loop the main thread takes, the rest being the worker's (a bound
#: on what a wrong estimate can cost; a split slower than no split is the back-off's case)
MAX_SHARE = 0.8


class Balance:
    """Where to split a loop so both threads end together, learnt from the splits so far
    (main thread only): running means of the worker's start delay after the hand-off, of
    the main thread's seconds per unit of work, and of the worker's time per unit against
    the main thread's."""

    WEIGHT = 0.2  # of the newest split in each mean
    # (one rate for every kind of loop: their units are calibrated to break-even points,
    # not to equal times, so a kind's share may be off; bounded by MAX_SHARE, never bits)

    def __init__(self) -> None:
        self.delay = 0.0  # s
        self.rate = 0.0   # s per unit of work, main thread (0: not measured yet)
        self.ratio = 1.0  # worker's time per unit / main's

    def share(self, work: float) -> float:
        """The main thread's part of a loop of ``work`` units: its time ``s W r`` equals
        the worker's ``delay + (1 - s) W r ratio``."""
        whole = work * self.rate
        if whole <= 0:
            return 0.5
        s = (self.delay / whole + self.ratio) / (1.0 + self.ratio)
        return min(max(s, 0.5), MAX_SHARE)

    def learn(self, work: float, main_share: float, delay: float, main_s: float,
              worker_s: float) -> None:
        w = self.WEIGHT
        self.delay += w * (delay - self.delay)
        if main_share > 0 and main_s > 0:
            rate = main_s / (work * main_share)
            self.rate = rate if self.rate <= 0 else self.rate + w * (rate - self.rate)
            if main_share < 1 and worker_s > 0:
                ratio = worker_s / (work * (1 - main_share)) / rate
                # (one split's hiccup moves the mean by a bounded step)
                self.ratio += w * (min(ratio, 4.0) - self.ratio)


_balance = Balance()


def _worker() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(1, thread_name_prefix="dvsdk-sim")
        return _pool


def _forget_pool() -> None:
    """In a forked child: the parent's worker thread does not exist there (a pool that
    believes it has one would never run the other half); the child makes its own."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def rows(n: int, work: float, fn: Callable[[int, int], object], least: int = 1) -> None:
    """``fn(0, n)``, or ``fn(0, h)`` here and ``fn(h, n)`` on the worker thread at once
    when ``work`` is worth it; returns when both are done, raising what either raised.
    ``h`` is at least ``n // 2`` (:class:`Balance`) and leaves the worker ``least``
    units, or is ``n // 2`` where that leaves fewer."""
    if (THREADS < 2 or n < 2 or work <= 0 or work < MIN_WORK
            or threading.get_ident() != threading.main_thread().ident):
        fn(0, n)
        return
    if _busy[0]:  # the other core was found busy: run whole for a while
        _busy[0] -= 1
        fn(0, n)
        return
    half = max(n // 2, min(int(_balance.share(work) * n), n - least))
    worker: list[float] = []

    def other(r0: int, r1: int) -> None:  # (its start and end, for the balance)
        worker.append(time.perf_counter())
        try:
            fn(r0, r1)
        finally:
            worker.append(time.perf_counter())

    # in the caller's context: numpy's error state (np.errstate) lives in a context var
    handed = time.perf_counter()
    later = _worker().submit(contextvars.copy_context().run, other, half, n)
    t0 = time.perf_counter()
    ran = False
    try:
        fn(0, half)
        ran = True
    finally:
        t1 = time.perf_counter()
        later.result()
        done = time.perf_counter()
        if ran and len(worker) == 2:  # (a part that raised times nothing)
            _balance.learn(work, half / n, worker[0] - handed, t1 - t0,
                           worker[1] - worker[0])
        note_split(done - t0, t1 - t0, half / n)


def note_split(split_s: float, main_s: float, main_share: float) -> None:
    """After a split whose two parts took ``split_s`` together and the main thread's part
    (``main_share`` of the loop) ``main_s``: when the split took longer than the main
    thread alone would have taken for the whole loop (at its rate), twice in a row (once
    is a scheduling hiccup, ~4% of splits on an idle machine), another process holds the
    other core: the next :data:`BACKOFF` splits run whole."""
    _lagged[0] = _lagged[0] + 1 if split_s > main_s / main_share else 0
    if _lagged[0] >= 2:
        _busy[0], _lagged[0] = BACKOFF, 0
