"""``vx_perf_t``: how long a node or a graph took, over all its executions.

Times are in nanoseconds, as OpenVX reports them.  Where they come from (``Graph``
fills them after every completed execution):

* a node compiled into DV700 commands: the device's own time of the hardware segment that
  holds them (the simulator's cycle model at its clock, a board's kick-to-interrupt time),
  shared among the segment's nodes in proportion to their commands' times, which
  ``Net.profile()`` measures once, command by command, at the first execution;
* a node run as a CPU step: the host time of that step;
* a node the compiler folded into another one (e.g. a linear activation into a
  convolution's weights): 0;
* the graph: its nodes' times plus the host's packing, cache syncs and unpacking of
  the tensors that cross between host and device.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Perf"]


@dataclass
class Perf:
    """``num`` executions; ``tmp`` the last; ``sum``, ``avg``, ``min``, ``max``; ``beg``
    and ``end`` of the last execution on the host clock (``time.perf_counter_ns``)."""

    num: int = 0
    tmp: int = 0
    beg: int = 0
    end: int = 0
    sum: int = 0
    avg: int = 0
    min: int = 0
    max: int = 0

    def add(self, ns: float, beg: int = 0, end: int = 0) -> None:
        t = int(round(ns))
        self.num += 1
        self.tmp = t
        self.beg, self.end = beg, end
        self.sum += t
        self.avg = self.sum // self.num
        self.min = t if self.num == 1 else min(self.min, t)
        self.max = max(self.max, t)

    def __str__(self) -> str:
        if not self.num:
            return "no executions"
        return (f"{self.num} runs: last {self.tmp / 1e3:.1f} us, avg {self.avg / 1e3:.1f} us, "
                f"min {self.min / 1e3:.1f} us, max {self.max / 1e3:.1f} us")
