"""The simulator's second core: whether a big loop runs in two parts.

The compiled loops (matrix product, depthwise convolution, im2col, epilogue) take a
``parts`` argument: with 2, the loop's output rows (or, for a few-row matrix product, its
16-column output panels) are cut in eight chunks that the caller and a worker thread of
the compiled module (``dvsdk/_native_team.c``) claim one at a time.  The worker spins for
a fraction of a millisecond after each loop, so the next one starts on both cores within
a microsecond; when it is asleep or its core is busy (another process holds it), the
caller takes the remaining chunks, and waits only for the one the worker is in.

A split changes no bit, by construction: every output is a fixed sequence of operations
on its own operands (firmware_spec/arithmetic.md), whichever part computes it.  Nothing
here calls BLAS.

Measured on this project's 2-core machine: a Python thread pool's hand-off took 40-60 us
(sometimes milliseconds), more than EfficientNet-Lite0's typical 100-200 us loops saved by
a split (one thread 12.67 ms per run, two 12.63 ms); the compiled worker's hand-off is a
few atomic operations.  ``DVSDK_SIM_THREADS=1`` turns splitting off; the bits are the
same either way.
"""

from __future__ import annotations

import os

#: work below which a loop runs whole, in depthwise multiply-adds (~20 us of work: below
#: it the two parts' cache misses and the hand-off cost about what the split saves)
MIN_WORK = 200_000
#: the work of one unit of each loop, in depthwise multiply-adds (a product's
#: multiply-add is cheaper, an epilogue's or a copy's element dearer)
DEPTHWISE, MATMUL, EPILOGUE = 1.0, 0.25, 5.0
def _cpus() -> int:
    """The CPUs this process may run on (its affinity mask, as ``taskset`` sets it), not
    the machine's count: two threads on one CPU would only take turns."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # (no affinity call on this platform)
        return os.cpu_count() or 1


#: threads the simulator's loops use: two where there are two CPUs to run on, else one
THREADS = 1 if os.environ.get("DVSDK_SIM_THREADS", "") == "1" else min(2, _cpus())


def parts(work: float) -> int:
    """The ``parts`` to give a compiled loop of ``work`` units: 2 where there are two
    threads to use and the loop is worth splitting, else 1."""
    return 2 if THREADS > 1 and work >= MIN_WORK else 1
