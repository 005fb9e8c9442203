"""The simulator's DRAM: bounds-checked device reads and writes, and its tensor store.

Physical memory is a uint8 array at a physical base address.  The conv engine moves
whole FP16 tensors in the chunked layout (dv700-interface.md §1); packing them on every
store and unpacking them on every load would cost the simulator more than the
arithmetic, so :class:`Dram` also keeps, per address, the float32 values of the tensors
the device stored there.  This changes wall time only, never results:

* **eager** (the default, for memory that others may write behind our back, like the
  fake board's shared mapping): a stored tensor's bytes are written at once and its
  values are used by a later :meth:`Dram.read_tensor` of the same address and shape only
  while the DRAM bytes still equal the written ones (compared on every read);
* **lazy** (``sim://``, where every access to DRAM goes through this class or the
  simulated DMA syncs, which call :meth:`Dram.materialize` and :meth:`Dram.release`):
  a stored tensor's bytes are written only when something reads them raw (a DMA sync for
  the CPU, another unit, a partially overlapping access), so the device's intermediate
  tensors that are overwritten before anyone looks are never packed at all.

An injected bit flip always writes the tensor at once, flipped, and keeps no values.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import native
from ..hw import layout
from ..hw.fp16 import f32_to_f16
from .status import HardwareError

#: bytes per entry of the write clock behind :meth:`Dram.version` (2**6: the DMA
#: allocators' alignment, so two buffers never share an entry)
LINE_SHIFT = 6


#: bytes compared at a time by :func:`same_bytes` (its temporary is an eighth of this)
_COMPARE_BLOCK = 8 << 20


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    """Byte equality of two uint8 vectors of the same size: 8 bytes at a time where the
    length allows, in blocks, so the comparison's temporaries stay small."""
    n = a.size
    if n <= _COMPARE_BLOCK and n % 8 == 0:
        return np.array_equal(a.view(np.uint64), b.view(np.uint64))
    for i in range(0, n, _COMPARE_BLOCK):
        x, y = a[i : i + _COMPARE_BLOCK], b[i : i + _COMPARE_BLOCK]
        k = x.size & ~7
        if k and not np.array_equal(x[:k].view(np.uint64), y[:k].view(np.uint64)):
            return False
        if k < x.size and not np.array_equal(x[k:], y[k:]):
            return False
    return True


def remove_span(spans: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """``spans`` (half-open byte ranges) minus ``[a, b)``."""
    out = []
    for s, e in spans:
        if e <= a or s >= b:
            out.append((s, e))
            continue
        if s < a:
            out.append((s, a))
        if e > b:
            out.append((b, e))
    return out


def _packed(values: np.ndarray) -> np.ndarray:
    """The chunked FP16 bytes of binary16-valued float32 ``values`` (HWC): converted and
    moved in one compiled pass, or with numpy converted by ``f32_to_f16`` first (exact for
    such values, and faster than numpy's cast)."""
    if native.NATIVE is not None:
        return layout.pack(values).view(np.uint8)
    return layout.pack(f32_to_f16(values)).view(np.uint8)


@dataclass(slots=True)
class StoredTensor:
    """A tensor the device stored at ``addr``: its shape and float32 values (read-only).

    ``packed`` holds the bytes written to DRAM, or None while they are not written yet
    (lazy mode).  Then the values are the truth for the byte ranges in ``live``: a later
    store that overlaps the tensor takes its part away, and only the rest is ever
    written out."""

    addr: int
    end: int
    values: np.ndarray
    packed: np.ndarray | None
    live: list[tuple[int, int]]
    #: ``live`` is still the whole range (no later store overlapped it)
    whole: bool = True


class Dram:
    """Physical memory seen by the device (see the module docstring).

    ``on_read``/``on_write`` let the owner watch device traffic (the simulator checks
    DMA coherence there).  ``flip_next_write`` injects one bit error into the next write.
    """

    #: stored tensors are written out and forgotten past this many bytes of kept arrays
    #: (``tensor_limit`` per instance; the simulator lowers it to its host memory budget)
    TENSOR_LIMIT = 256 << 20

    def __init__(self, array: np.ndarray, base: int,
                 on_read: Callable[[int, int], None] | None = None,
                 on_write: Callable[[int, int], None] | None = None,
                 lazy: bool = False) -> None:
        self.array = array
        self.base = int(base)
        self.on_read = on_read
        self.on_write = on_write
        self.lazy = lazy
        self.flip_next_write = False
        self.tensor_limit = self.TENSOR_LIMIT
        self.tensors: dict[tuple[int, int], StoredTensor] = {}  # by (start, end) address
        #: the keys of ``tensors``, sorted, and the longest one's length (_overlapping)
        self._keys: list[tuple[int, int]] = []
        self._maxlen = 0
        self._kept_bytes = 0
        self._clock = 0
        # lazy mode: the write clock of each 64-byte line, for version() (np.zeros: pages
        # of it that are never written cost no memory)
        nlines = (array.size >> LINE_SHIFT) + 1 if lazy else 0
        self._line_clock = np.zeros(nlines, np.uint64)

    # -- raw access ---------------------------------------------------------------------
    def _span(self, addr: int, n: int) -> int:
        off = addr - self.base
        if n < 0 or off < 0 or off + n > self.array.size:
            raise HardwareError("bad_address", addr,
                                f"access of {n} bytes at {addr:#x} is outside DRAM "
                                f"[{self.base:#x}, {self.base + self.array.size:#x})")
        return off

    def check_range(self, addr: int, n: int) -> None:
        """HardwareError unless ``[addr, addr+n)`` lies in DRAM."""
        self._span(addr, n)

    def check_read(self, addr: int, n: int) -> None:
        """What a read of ``[addr, addr+n)`` checks (range, coherence), without the bytes:
        for a reader that knows they did not change since it last read them."""
        self._span(addr, n)
        if self.on_read:
            self.on_read(addr, n)

    def read(self, addr: int, n: int) -> np.ndarray:
        """The bytes at ``addr`` (a view: valid until the next write)."""
        off = self._span(addr, n)
        if self.on_read:
            self.on_read(addr, n)
        self.materialize(addr, n)
        return self.array[off : off + n]

    def write(self, addr: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        off = self._span(addr, raw.size)
        self._clip(addr, addr + raw.size)
        self.array[off : off + raw.size] = raw
        if self.flip_next_write and raw.size:
            self.array[off + raw.size // 2] ^= 0x10
            self.flip_next_write = False
        self._stamp(addr, raw.size)
        if self.on_write:
            self.on_write(addr, raw.size)

    def read32(self, addr: int) -> int:
        if addr % 4:
            raise HardwareError("misaligned", addr, f"word fetch at {addr:#x}")
        return int(self.read(addr, 4).view("<u4")[0])

    # -- tensors ------------------------------------------------------------------------
    def write_tensor(self, addr: int, values: np.ndarray) -> None:
        """Store an HWC float32 tensor of binary16 values (``fp16.round_f16`` output) in
        the chunked layout at ``addr``; ``values`` must not be modified afterwards."""
        n = 2 * values.size
        self._span(addr, n)
        if self.flip_next_write or not self.lazy:
            flip = self.flip_next_write
            packed = _packed(values)
            self.write(addr, packed)
            if not flip:
                self._keep(StoredTensor(addr, addr + n, values, packed, [(addr, addr + n)]))
            return
        key = (addr, addr + n)
        old = self.tensors.get(key)
        there = self._overlapping(addr, addr + n) if old is not None else None
        if (there is not None and len(there) == 1 and there[0] is old
                and self._kept_bytes - old.values.nbytes + values.nbytes <= self.tensor_limit):
            # the common store: the same range as the tensor it replaces, nothing else
            # there (the same layer's output, run after run): swapped in place
            values.flags.writeable = False
            self.tensors[key] = StoredTensor(addr, addr + n, values, None, [key])
            self._kept_bytes += values.nbytes - old.values.nbytes
        else:
            self._clip(addr, addr + n)
            self._keep(StoredTensor(addr, addr + n, values, None, [key]))
        self._stamp(addr, n)
        if self.on_write:
            self.on_write(addr, n)

    def read_tensor(self, addr: int, shape: tuple[int, ...]) -> np.ndarray:
        """``layout.unpack(read(addr, nbytes), shape)``, from the stored values when they
        are valid.  The result may be shared and read-only: callers must not modify it."""
        shape = tuple(shape)
        n = 2 * math.prod(shape)
        off = self._span(addr, n)
        if self.on_read:
            self.on_read(addr, n)
        t = self.tensors.get((addr, addr + n))
        if t is not None and t.values.shape == shape and t.whole:
            if t.packed is None or same_bytes(t.packed, self.array[off : off + n]):
                return t.values
        self.materialize(addr, n)
        return layout.unpack(self.array[off : off + n], shape)

    def materialize(self, addr: int, n: int) -> None:
        """Write out the stored tensors whose unwritten bytes overlap ``[addr, addr+n)``
        (lazy mode); the simulated DMA calls it before the CPU reads DRAM."""
        end = addr + n
        for t in [t for t in self._overlapping(addr, end) if t.packed is None
                  and any(s < end and addr < e for s, e in t.live)]:
            packed = _packed(t.values)
            for s, e in t.live:
                self.array[s - self.base : e - self.base] = packed[s - t.addr : e - t.addr]
            if t.whole:
                t.packed = packed
            else:
                self._drop(t)

    def release(self, addr: int, n: int, whole: bool = False) -> None:
        """Another writer (the simulated DMA for the CPU) is about to store into
        ``[addr, addr+n)``: every byte of it (``whole``) or some.  Stored tensors there
        lose that part; with some bytes only, they are written out first."""
        if not whole:
            self.materialize(addr, n)
        self._clip(addr, addr + n)
        self._stamp(addr, n)

    def version(self, addr: int, n: int) -> int | None:
        """A number that changes whenever a byte of ``[addr, addr+n)`` may have changed,
        or None when that cannot be known (eager mode: others write behind our back)."""
        if not self.lazy:
            return None
        off = addr - self.base
        lo, hi = off >> LINE_SHIFT, ((off + n - 1) >> LINE_SHIFT) + 1
        if hi <= lo:
            return 0
        return int(np.maximum.reduce(self._line_clock[lo:hi]))  # (no _amax wrapper)

    # -- bookkeeping --------------------------------------------------------------------
    def _keep(self, t: StoredTensor) -> None:
        if self._kept_bytes + t.values.nbytes > self.tensor_limit:
            self.materialize(self.base, self.array.size)
            for old in list(self.tensors.values()):
                self._drop(old)
        t.values.flags.writeable = False
        key = (t.addr, t.end)
        self.tensors[key] = t
        insort(self._keys, key)
        self._maxlen = max(self._maxlen, t.end - t.addr)
        self._kept_bytes += t.values.nbytes

    def _drop(self, t: StoredTensor) -> None:
        key = (t.addr, t.end)
        del self.tensors[key]
        del self._keys[bisect_left(self._keys, key)]
        if not self._keys:
            self._maxlen = 0
        self._kept_bytes -= t.values.nbytes

    def _overlapping(self, a: int, b: int) -> list[StoredTensor]:
        """The stored tensors whose address range overlaps ``[a, b)``, found by bisection
        in the sorted keys: those starting before ``b`` and less than the longest
        tensor's length before ``a`` (a batch of N samples stores N tensors)."""
        keys, out = self._keys, []
        j = bisect_left(keys, (b, -1)) - 1
        floor = a - self._maxlen
        while j >= 0 and keys[j][0] > floor:
            if keys[j][1] > a:
                out.append(self.tensors[keys[j]])
            j -= 1
        return out

    def _clip(self, a: int, b: int) -> None:
        """``[a, b)`` is about to be overwritten whole: written tensors there are dropped,
        unwritten ones lose that part (and are dropped when nothing is left)."""
        for t in self._overlapping(a, b):
            if t.packed is not None:
                self._drop(t)
                continue
            t.live = remove_span(t.live, a, b)
            t.whole = False
            if not t.live:
                self._drop(t)

    def _stamp(self, addr: int, n: int) -> None:
        if self.lazy and n:
            self._clock += 1
            off = addr - self.base
            self._line_clock[off >> LINE_SHIFT : ((off + n - 1) >> LINE_SHIFT) + 1] = \
                self._clock
