"""A ``sim://`` DMA buffer: the CPU's cached view and the simulated DRAM kept apart.

As on a non-coherent Zynq (linux-dma.md): the buffer's ``view`` is what the CPU's cache
holds, :class:`~dvsdk.sim.device.SimDevice`'s DRAM is updated only by ``sync_for_device``
(a clean) and read back only by ``sync_for_cpu`` (clean and invalidate).  A device read of
bytes the CPU stored without a clean, or a checked CPU read of device output without an
invalidate, is a coherence problem the device reports with the buffer and byte range.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .. import native
from ..driver.device import DmaBuffer, copy_or_view
from .spans import add_span, first_overlap, remove_span


class SimDmaBuffer(DmaBuffer):
    """A DMA buffer whose CPU view and DRAM content are separate arrays.

    The CPU's pending stores are tracked two ways.  Stores through :meth:`write` record
    their byte spans (``cpu_written``): a clean writes back exactly those, and a device read
    that overlaps one is a coherence problem, found without looking at the data.  The raw
    ``view`` (and :meth:`array`) can be stored to behind our back, so the first time either
    is handed out the buffer keeps a ``snapshot`` of what the CPU held at the last sync and
    from then on also compares against it, as a cache that cannot see stores would have to.
    The runtime and the driver only use the checked accessors, so their buffers never pay
    for the comparison."""

    def __init__(self, device: Any, offset: int, nbytes: int, name: str) -> None:
        # (device: the SimDevice that allocated it; not imported here, which imports this)
        self._raw = False  # the raw view was handed out (class docstring)
        super().__init__(device, device.dram_base + offset, np.zeros(nbytes, np.uint8), name)
        self.sim = device
        self.dram_off = offset
        #: what the CPU view held at the last sync; kept once the raw view was handed out
        self.snapshot: np.ndarray | None = None
        self.device_dirty: list[tuple[int, int]] = []
        self.cpu_written: list[tuple[int, int]] = []  # spans written through write()

    @property
    def view(self) -> np.ndarray:  # type: ignore[override]
        """The raw CPU view: stores through it are found by comparison from now on."""
        if not self._raw:
            with self.sim.lock:
                if not self._raw:
                    self.snapshot = self._mem.copy()  # pending stores are in cpu_written
                    self._raw = True
                    self.sim.cpu_pending[id(self)] = self  # (compared at every device read)
        return self._mem

    @view.setter
    def view(self, value: np.ndarray) -> None:
        self._mem = value

    @property
    def size(self) -> int:
        return int(self._mem.size)

    def _range(self, offset: int, nbytes: int | None) -> tuple[int, int]:
        size = self._mem.size  # (DmaBuffer._range, without the size property per call)
        if nbytes is not None and offset >= 0 and nbytes >= 0 and offset + nbytes <= size \
                and not self.freed:
            return offset, nbytes
        return super()._range(offset, nbytes)

    @property
    def raw(self) -> bool:
        """Whether the raw view was handed out (CPU stores are then also found by
        comparison, see the class docstring)."""
        return self._raw

    def read(self, offset: int = 0, nbytes: int | None = None, copy: bool = True
             ) -> np.ndarray:
        offset, nbytes = self._range(offset, nbytes)
        self._check_cpu_read(offset, nbytes)
        return copy_or_view(self._mem[offset : offset + nbytes], copy)

    def _dram(self, offset: int, nbytes: int) -> np.ndarray:
        return self.sim.dram[self.dram_off + offset : self.dram_off + offset + nbytes]

    def write(self, offset: int, data) -> None:
        """A CPU store: the lines become dirty whatever the value (as in a real cache)."""
        raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), np.uint8)
        offset, n = self._range(offset, raw.size)
        with self.sim.lock:
            self._mem[offset : offset + n] = raw
            if n:
                nat = native.NATIVE
                self.cpu_written = (add_span if nat is None else nat.span_add)(
                    self.cpu_written, offset, offset + n)
                self.sim.cpu_pending[id(self)] = self

    def write_with(self, offset: int, nbytes: int, fill: Callable[[np.ndarray], object]
                   ) -> None:
        """Filled in place in the CPU view; the lines become dirty as with :meth:`write`
        (even if ``fill`` fails part way: what it stored is stored)."""
        offset, n = self._range(offset, nbytes)
        with self.sim.lock:
            if n:
                nat = native.NATIVE
                self.cpu_written = (add_span if nat is None else nat.span_add)(
                    self.cpu_written, offset, offset + n)
                self.sim.cpu_pending[id(self)] = self
            fill(self._mem[offset : offset + n])

    def free(self) -> None:
        with self.sim.lock:
            super().free()

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        with self.sim.lock:
            self._clean(offset, nbytes)

    def _clean(self, offset: int, nbytes: int) -> None:
        """Clean: write back what the CPU stored since the last sync (write() spans, plus
        any byte changed through the raw view)."""
        end = offset + nbytes
        if not self._raw:
            written = self.cpu_written
            if not written:
                return  # nothing stored since the last sync (the common case)
            if len(written) == 1 and offset <= written[0][0] and written[0][1] <= end:
                s, e = written[0]  # one span, all of it in the range (a CPU step's output)
                self.cpu_written = []
                self.sim.cpu_pending.pop(id(self), None)
                self.sim.core.mem.release(self.phys + s, e - s, whole=True)
                self.sim.dram[self.dram_off + s : self.dram_off + e] = self._mem[s:e]
                return
            spans = [(max(s, offset), min(e, end)) for s, e in written
                     if s < end and offset < e]
            if not spans:
                return
            nat = native.NATIVE
            self.cpu_written = (remove_span if nat is None else nat.span_remove)(
                self.cpu_written, offset, end)
            if not self.cpu_written:
                self.sim.cpu_pending.pop(id(self), None)
            dram, mem = self.sim.dram, self.sim.core.mem
            for s, e in spans:
                mem.release(self.phys + s, e - s, whole=True)
                dram[self.dram_off + s : self.dram_off + e] = self._mem[s:e]
            return
        assert self.snapshot is not None
        cpu = self._mem[offset:end]
        snap = self.snapshot[offset:end]
        dirty = cpu != snap
        for s, e in self.cpu_written:
            a, b = max(s, offset), min(e, end)
            if a < b:
                dirty[a - offset : b - offset] = True
        self.cpu_written = remove_span(self.cpu_written, offset, end)
        if dirty.any():
            where = np.flatnonzero(dirty)
            lo, hi = int(where[0]), int(where[-1]) + 1
            self.sim.core.mem.release(self.phys + offset + lo, hi - lo,
                                      whole=hi - lo == where.size)
            self._dram(offset, nbytes)[dirty] = cpu[dirty]
            snap[dirty] = cpu[dirty]

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        """Clean and invalidate: CPU stores go out, then the CPU view reloads from DRAM."""
        with self.sim.lock:
            if self._raw or self.cpu_written:  # (_clean's common case inline: nothing to do)
                self._clean(offset, nbytes)
            self.sim.core.mem.materialize(self.phys + offset, nbytes)
            fresh = self.sim.dram[self.dram_off + offset : self.dram_off + offset + nbytes]
            self._mem[offset : offset + nbytes] = fresh
            if self.snapshot is not None:
                self.snapshot[offset : offset + nbytes] = fresh
            if self.device_dirty:
                nat = native.NATIVE
                self.device_dirty = (remove_span if nat is None else nat.span_remove)(
                    self.device_dirty, offset, offset + nbytes)

    def _check_cpu_read(self, offset: int, nbytes: int) -> None:
        # device_dirty is replaced whole (never mutated), so reading it needs no lock
        dirty = self.device_dirty
        if not dirty:
            return  # (every device output synced: the common case)
        nat = native.NATIVE
        hit = (first_overlap if nat is None else nat.span_overlap)(dirty, offset,
                                                                    offset + nbytes)
        if hit:
            self.sim.coherence_problem(
                f"CPU read of bytes {hit[0]}..{hit[1]} of {self.name}, written by the device "
                "without sync_for_cpu", self.name, *hit)

    def _free(self) -> None:
        self.sim.release(self)
