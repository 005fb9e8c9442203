"""The simulator's second core: a big loop split in two over its output rows (or, for a
few-row matrix product, its output columns).

The compiled loops release the GIL and so do numpy's matrix products, so two threads run
two halves of one conv stage at once.  Each output is computed by exactly the same
operations whichever half it falls in: a depthwise tap loop or an epilogue works element
by element, and a BLAS product's row depends only on that row and the weights (OpenBLAS
keeps the order of its sums along K whatever the number of rows, as long as both halves
stay on its large-matrix kernels: measured bit-equal over 1176 shapes of 128-25088 rows,
K 3-1152, M 8-1280; see :data:`BLAS_HALF_MIN`; pinned by ``tests/test_sim_split.py``).
So a split changes wall time, never a bit.  With another BLAS than OpenBLAS (where that
was not measured) products run whole; depthwise loops and epilogues still split.

Measured on this project's 2-core machine, BLAS pinned to one thread (minimum of 30):
a 12544x16 @ 16x96 product 0.53 -> 0.36 ms, a 112x112x32 3x3 depthwise 0.48 -> 0.28 ms,
a 12544x96 epilogue 0.62 -> 0.33 ms; the whole-network effect is in
``benchmarks/bench_nets.py``.  Small loops stay whole: below :data:`MIN_WORK` the
hand-off (tens of microseconds) costs more than it saves, and the halves of a split
product stay above the sizes where OpenBLAS switches to its small-matrix kernels.

Only the main thread splits, where :func:`.ops.blas_threads` pins BLAS (a simulator driven
from another thread leaves BLAS alone, and two more BLAS thread pools would oversubscribe
the cores).  When the other half keeps lagging (another process holds the second core)
splitting backs off for a while (:data:`BACKOFF`).  ``DVSDK_SIM_THREADS=1`` turns
splitting off.

The split point is not the middle: the worker starts its part some 40-100 us after the
hand-off (measured on this machine: the wake-up of a blocked thread, median 58 us in
EfficientNet-Lite0, while the main thread's half took 212 us), so the main thread takes the
larger part, by what :class:`Balance` learns from the splits before (the worker's start
delay, each thread's time per unit of work); the worker never gets fewer units than its
loop admits (a product's rows: :func:`product_least`), and a product split by columns
stays in the middle (uneven column parts were not measured; below ~1 M multiply-adds they
do differ).  Where the parts meet changes no bit, as above.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from . import ops

#: work below which a loop runs whole, in depthwise multiply-adds: where a split began to
#: pay on this machine (a 28x28x240 3x3 depthwise, 1.7 M, 148 -> 129 us; below ~1 M the
#: hand-off of about 30-50 us costs more than it saves)
MIN_WORK = 1_500_000
#: the work of one unit of each loop, in depthwise multiply-adds (measured break-evens: a
#: BLAS product pays from ~6 M multiply-adds, the epilogue from ~0.3 M elements)
DEPTHWISE, MATMUL, EPILOGUE = 1.0, 0.25, 5.0
#: threads the simulator's loops use: two where there are two cores, else one
THREADS = 1 if os.environ.get("DVSDK_SIM_THREADS", "") == "1" else min(2, os.cpu_count() or 1)

#: a matrix product is split only when each half keeps at least this many multiply-adds
#: and 32 rows: far from the sizes where a BLAS library switches to other kernels with
#: another order of sums (OpenBLAS SkylakeX's small-matrix kernels up to M*N*K = 100^3:
#: measured, halves of 0.55-0.92 M differed from the whole product in 116 of 1260 shapes;
#: numpy's gemv for a single row)
BLAS_HALF_MIN = 1 << 22

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


_OPENBLAS: list[bool] = []  # [whether numpy's BLAS is OpenBLAS], found on first use


def _openblas() -> bool:
    """Whether numpy's BLAS is OpenBLAS, whose row and column independence was measured;
    with another BLAS (MKL, Accelerate) products run whole.  (The libraries are those
    :func:`.ops.blas_threads` pins.)"""
    if not _OPENBLAS:
        apis = {lib.internal_api for lib in ops.blas_threads().libraries()}
        _OPENBLAS.append(apis == {"openblas"})
    return _OPENBLAS[0]


def product_work(n: int, k: int, m: int) -> float:
    """The work of an (n, k) @ (k, m) product for :func:`rows`, or 0 (never split) where
    its halves could take other BLAS kernels than the whole (:data:`BLAS_HALF_MIN`)."""
    if n < 64 or (n // 2) * k * m < BLAS_HALF_MIN or not _openblas():
        return 0
    return MATMUL * n * k * m


def product_least(k: int, m: int) -> int:
    """The fewest rows a part of an (n, k) @ (k, m) product split by :func:`rows` may have:
    32, and :data:`BLAS_HALF_MIN` multiply-adds (what :func:`product_work` asks of a half,
    so its halves always qualify)."""
    return max(32, -(-BLAS_HALF_MIN // max(1, k * m)))


def product_cols_work(n: int, k: int, m: int) -> float:
    """The work of an (n, k) @ (k, m) product split by its columns (outputs) instead, for
    the few-row, weight-heavy products a row split does not admit (a 7x7 layer: 49 rows of
    1152 x 192): 16..63 rows, and each half above :data:`BLAS_HALF_MIN`; else 0.  A column
    of the product, like a row, is summed alike whatever the other columns (measured
    bit-equal over the 49-196-row products of EfficientNet-Lite0; 1 and 7 rows were not,
    numpy's and OpenBLAS's small-product paths)."""
    if not 16 <= n < 64 or n * k * (m // 2) < BLAS_HALF_MIN or not _openblas():
        return 0
    return MATMUL * n * k * m


def rows(n: int, work: float, fn: Callable[[int, int], object], least: int = 1) -> None:
    """``fn(0, n)``, or ``fn(0, h)`` here and ``fn(h, n)`` on the worker thread at once
    when ``work`` is worth it; returns when both are done, raising what either raised.
    ``h`` is at least ``n // 2`` (:class:`Balance`) and leaves the worker ``least``
    units, or is ``n // 2`` where that leaves fewer (then the caller's rule for a split
    in the middle must hold: :func:`product_work` checks the halves)."""
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
        # the split took longer than our thread alone would have taken for the whole loop
        # (at our rate), twice in a row (once is a scheduling hiccup, ~4% of splits on an
        # idle machine): another process holds the other core
        _lagged[0] = _lagged[0] + 1 if done - t0 > (t1 - t0) * n / half else 0
        if _lagged[0] >= 2:
            _busy[0], _lagged[0] = BACKOFF, 0
