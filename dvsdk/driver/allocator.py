"""First-fit sub-allocation of one contiguous DMA region.

Both the on-board backend (one u-dma-buf mapped once) and the simulator (one
simulated DRAM) hand out :class:`~dvsdk.driver.device.DmaBuffer` slices of a
single region through this allocator: first fit, power-of-two alignment,
coalescing on free, leak accounting.  ``alloc`` and ``free`` may be called from
several threads.
"""

from __future__ import annotations

import bisect
import threading

from ..errors import InvalidArgument, OutOfDeviceMemory


class RegionAllocator:
    """Offsets within ``[0, size)``; the caller adds the region's base address."""

    def __init__(self, size: int, base: int = 0) -> None:
        self.size = int(size)
        self.base = int(base)
        self._free: list[tuple[int, int]] = [(0, self.size)] if size > 0 else []  # (start, end)
        self._used: dict[int, int] = {}  # start -> end
        self._lock = threading.Lock()

    def alloc(self, nbytes: int, align: int = 64) -> int:
        """Return the offset of a free block of ``nbytes``; alignment is of base+offset."""
        with self._lock:
            return self._alloc(nbytes, align)

    def _alloc(self, nbytes: int, align: int) -> int:
        if nbytes <= 0:
            raise InvalidArgument("allocation size must be positive", field="nbytes", value=nbytes,
                                  limit=">= 1")
        if align <= 0 or align & (align - 1):
            raise InvalidArgument("alignment must be a power of two", field="align", value=align)
        for i, (start, end) in enumerate(self._free):
            addr = -(-(self.base + start) // align) * align - self.base
            if addr + nbytes <= end:
                pieces = []
                if addr > start:
                    pieces.append((start, addr))
                if addr + nbytes < end:
                    pieces.append((addr + nbytes, end))
                self._free[i : i + 1] = pieces
                self._used[addr] = addr + nbytes
                return addr
        raise OutOfDeviceMemory(
            f"cannot allocate {nbytes} bytes of DMA memory "
            f"({self.free_bytes} free, largest block {self.largest_free}, total {self.size})",
            requested=nbytes,
            largest_free=self.largest_free,
            total=self.size,
            field="nbytes",
            value=nbytes,
            limit=self.largest_free,
        )

    def free(self, offset: int) -> None:
        with self._lock:
            self._free_block(offset)

    def _free_block(self, offset: int) -> None:
        end = self._used.pop(offset, None)
        if end is None:
            raise InvalidArgument("double free or foreign pointer", field="offset", value=offset)
        starts = [s for s, _ in self._free]
        i = bisect.bisect_left(starts, offset)
        start = offset
        if i > 0 and self._free[i - 1][1] == offset:
            i -= 1
            start = self._free[i][0]
            del self._free[i]
        if i < len(self._free) and self._free[i][0] == end:
            end = self._free[i][1]
            del self._free[i]
        self._free.insert(i, (start, end))

    @property
    def used_bytes(self) -> int:
        return sum(e - s for s, e in list(self._used.items()))

    @property
    def free_bytes(self) -> int:
        return sum(e - s for s, e in list(self._free))

    @property
    def largest_free(self) -> int:
        return max((e - s for s, e in list(self._free)), default=0)

    @property
    def live(self) -> dict[int, int]:
        """Offset -> size of every block not yet freed (leak accounting)."""
        return {s: e - s for s, e in list(self._used.items())}
