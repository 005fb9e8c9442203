"""A remote DMA buffer of a :class:`~dvsdk.link.client.LinkDevice`: a local shadow of the
agent's CPU mapping (``firmware_spec/link.md`` §7).

``view`` is the shadow.  The buffer remembers what the agent's mapping is known to hold,
so a push sends only the bytes the CPU changed (runs closer than 64 bytes merged), and a
store racing with a push is seen as a change next time.  ``sync_for_device`` pushes the
range and syncs it there; ``sync_for_cpu`` pushes what the CPU changed, syncs there and
pulls the range back: the non-coherent model of the device seam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..driver.device import DmaBuffer
from . import protocol as lp

#: changed byte runs closer than this are pushed as one
_GAP = 64


class LinkDmaBuffer(DmaBuffer):
    """A remote DMA buffer; ``view`` is the local shadow of the CPU mapping.

    ``_snap`` holds what the agent's CPU mapping is known to contain where
    ``_known`` is set, so a push sends only the bytes the CPU changed (plus,
    for :meth:`sync_for_device`, bytes never exchanged yet).
    """

    def __init__(self, device: Any, handle: int, phys: int, size: int, name: str,
                 flags: int) -> None:
        super().__init__(device, phys, np.zeros(size, np.uint8), name)
        self.handle = handle
        self.remote_flags = flags
        self._snap = np.zeros(size, np.uint8)
        self._known = np.full(size, bool(flags & lp.BUF_ZEROED))  # a zeroed buffer is known
        self._written = np.zeros(size, bool)  # stored by write() since the last push

    @property
    def _link(self) -> Any:
        """The :class:`~dvsdk.link.client.LinkDevice` that made this buffer (not imported
        here: it imports this module)."""
        return self.device

    def _runs(self, offset: int, nbytes: int, unknown_too: bool) -> list[tuple[int, int]]:
        """Byte ranges of ``[offset, offset+nbytes)`` the agent does not hold yet."""
        sl = slice(offset, offset + nbytes)
        need = (self.view[sl] != self._snap[sl]) | self._written[sl]
        if unknown_too:
            need |= ~self._known[sl]
        if need.all():
            return [(offset, offset + nbytes)]
        if not need.any():
            return []
        change = np.flatnonzero(need[1:] != need[:-1]) + 1
        edges = np.concatenate(([0] if need[0] else [], change, [need.size] if need[-1] else []))
        starts, ends = edges[0::2].astype(np.int64), edges[1::2].astype(np.int64)
        if starts.size > 1:  # a gap shorter than a frame header is cheaper to resend
            keep = (starts[1:] - ends[:-1]) >= _GAP
            starts = np.concatenate((starts[:1], starts[1:][keep]))
            ends = np.concatenate((ends[:-1][keep], ends[-1:]))
        return [(offset + int(a), offset + int(b)) for a, b in zip(starts, ends, strict=True)]

    def _push(self, offset: int, nbytes: int, unknown_too: bool = True) -> None:
        """Send what the agent lacks.  The bytes are copied first and the snapshot records
        the copy, so a store racing with the send is seen as a change next time."""
        with self._link.lock:
            runs = self._runs(offset, nbytes, unknown_too)
            if not runs:
                return
            copies = [(a, self.view[a:b].copy()) for a, b in runs]
            self._link._mem_write(self.handle, copies)
            for a, data in copies:
                b = a + data.size
                self._snap[a:b] = data
                self._known[a:b] = True
                self._written[a:b] = False

    def write(self, offset: int, data: Any) -> None:
        """Copy into the shadow and remember the span as stored: it reaches the agent, in
        coalesced runs, at the next sync or before the next kick (a store dirties its
        bytes whatever the value, as in a cache, so rewriting a stale value counts)."""
        with self._link.lock:
            super().write(offset, data)
            if self.remote_flags & lp.BUF_TRACKS_WRITES:
                n = memoryview(np.ascontiguousarray(data)).nbytes
                self._written[offset : offset + n] = True

    def write_with(self, offset: int, nbytes: int, fill: Callable[[np.ndarray], object]
                   ) -> None:
        """Filled in a staging array, then :meth:`write` (the shadow tracks what it
        stores)."""
        offset, nbytes = self._range(offset, nbytes)
        staged = np.empty(nbytes, np.uint8)
        fill(staged)
        self.write(offset, staged)

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        with self._link.lock:
            self._push(offset, nbytes)
            self._link._sync(self.handle, lp.SYNC_FOR_DEVICE, offset, nbytes)

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        # CPU writes the agent has not seen go out first (what a dirty line would do),
        # then the agent invalidates and we reload the range.
        with self._link.lock:
            self._push(offset, nbytes, unknown_too=False)
            self._link._sync(self.handle, lp.SYNC_FOR_CPU, offset, nbytes)
            sl = slice(offset, offset + nbytes)
            self._link._mem_read(self.handle, offset, self.view[sl])
            self._snap[sl] = self.view[sl]
            self._known[sl] = True

    def _check_cpu_read(self, offset: int, nbytes: int) -> None:
        if self.remote_flags & lp.BUF_CHECKS_READS and nbytes:
            self._link._call("CHECK_READ", handle=self.handle, offset=offset, nbytes=nbytes)

    def _free(self) -> None:
        self._link._free_handle(self.handle)
