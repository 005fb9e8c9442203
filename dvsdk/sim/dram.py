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
  tensors that are overwritten before anyone looks are never packed at all.  They are
  packed straight into DRAM, and the values stay valid until a store over them takes
  them away (a write behind this class's back is outside the contract, and unseen).
  A tensor range once read raw is packed at every later store of it, in the kick that
  stores it as the device's own DRAM write would be, not in the next DMA sync (a
  runtime's CPU step reads the same device output every run).

An injected bit flip always writes the tensor at once, flipped, and keeps no values.

The live ranges of the stored tensors are three parallel sorted lists; cutting a store's
range out of them, putting a range in and finding the tensors not written out in a range
(:func:`live_clip`, :func:`live_insert`, :func:`live_unpacked`) have compiled twins in
``dvsdk/_native_sim.c`` that return the same (``native.NATIVE``; tests/test_sim_live.py).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import native
from ..hw import layout
from ..hw.fp16 import f32_to_f16
from .spans import remove_span
from .status import HardwareError

#: bytes per entry of the write clock behind :meth:`Dram.version` (2**6: the DMA
#: allocators' alignment, so two buffers never share an entry)
LINE_SHIFT = 6
#: bytes per entry of the coarser write clock that lets :meth:`Dram.version` skip the
#: line clocks of a range no store touched since it last looked (2**16)
PAGE_SHIFT = 16
#: bytes per entry of the middle clock :meth:`Dram.version` asks next, for ranges of at
#: most :data:`SUB_MAX` such entries: a small net's weights share their 64 KiB page with
#: its activations, which are stored every run (2**12)
SUB_SHIFT = 12
#: (a bound on the cost of asking the middle clock, not on correctness: a longer range
#: goes from the pages to the lines)
SUB_MAX = 64


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


def _packed(values: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The chunked FP16 bytes of binary16-valued float32 ``values`` (HWC), new or in the
    bytes ``out``: converted and moved in one compiled pass, or with numpy converted by
    ``f32_to_f16`` first (exact for such values, and faster than numpy's cast)."""
    dst = None if out is None else out.view(np.float16)
    nat = native.NATIVE
    if nat is not None and values.ndim == 3 and values.dtype == np.float32:
        # (layout.pack's compiled call with its arguments known good: float32 HWC values
        # of an HWC tensor, ``out`` the tensor's bytes)
        if dst is None:
            dst = np.empty(values.size, np.float16)
        nat.pack(values[None], dst, False)
        return dst.view(np.uint8)
    if nat is not None:
        return layout.pack(values, out=dst).view(np.uint8)
    return layout.pack(f32_to_f16(values), out=dst).view(np.uint8)


def live_clip(starts: list[int], ends: list[int], owners: list, a: int, b: int
              ) -> list | None:
    """``[a, b)`` is about to be overwritten whole: the live ranges (the parallel sorted
    lists ``starts``, ``ends``, ``owners``, changed in place) that overlap it are taken out,
    except the part before ``a`` of the first and the part after ``b`` of the last where
    their owner is not written out yet (``packed`` None); returns the owners of the ranges
    taken (in order, once per range), or None where none overlaps.  The reference and
    fallback of ``native.live_clip``."""
    i = bisect_right(ends, a)  # (the first that ends after a to the last that starts before b)
    j = bisect_left(starts, b, i)
    if i >= j:
        return None
    first, last = owners[i], owners[j - 1]
    keep_s, keep_e, keep_o = [], [], []
    if starts[i] < a and first.packed is None:  # the part of the first before a
        keep_s.append(starts[i])
        keep_e.append(a)
        keep_o.append(first)
    if ends[j - 1] > b and last.packed is None:  # the part of the last after b
        keep_s.append(b)
        keep_e.append(ends[j - 1])
        keep_o.append(last)
    hit = owners[i:j]
    starts[i:j], ends[i:j], owners[i:j] = keep_s, keep_e, keep_o
    return hit


def live_insert(starts: list[int], ends: list[int], owners: list, a: int, b: int,
                owner: object) -> None:
    """The live range ``[a, b)`` of ``owner`` put in its sorted place in the parallel lists
    (clipped free before).  The reference and fallback of ``native.live_insert``."""
    i = bisect_left(starts, a)
    starts.insert(i, a)
    ends.insert(i, b)
    owners.insert(i, owner)


def live_unpacked(starts: list[int], ends: list[int], owners: list, a: int, b: int
                  ) -> list:
    """The owners of the live ranges (the parallel sorted lists) that overlap ``[a, b)``
    and are not written out (``packed`` None), in order, once per range.  The reference
    and fallback of ``native.live_unpacked``."""
    i = bisect_right(ends, a)
    return [t for t in owners[i : bisect_left(starts, b, i)] if t.packed is None]


@dataclass(slots=True, eq=False)  # (identity: the live ranges name their tensor)
class StoredTensor:
    """A tensor the device stored at ``addr``: its shape and float32 values (read-only).

    ``packed`` holds the bytes written to DRAM (lazy mode: a view of DRAM itself), or
    None while they are not written yet (lazy mode).  Then the values are the truth for
    the byte ranges in ``live``: a later store that overlaps the tensor takes its part
    away, and only the rest is ever written out."""

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
        # the live byte ranges of the stored tensors, sorted and disjoint (each store clips
        # the ones before it), in three parallel lists: start, end, tensor (_run)
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._owners: list[StoredTensor] = []
        self._kept_bytes = 0
        self._clock = 0
        # lazy mode: the write clock of each 64-byte line, for version() (np.zeros: pages
        # of it that are never written cost no memory), and of each 64 KiB and 4 KiB page
        # (lists: a few entries are read per version(), where numpy's call costs more)
        nlines = (array.size >> LINE_SHIFT) + 1 if lazy else 0
        self._line_clock = np.zeros(nlines, np.uint64)
        #: stores not yet applied to ``_line_clock``: the latest clock per line range,
        #: applied when :meth:`version` needs the lines (most stores repeat a range run
        #: after run, and most version() calls are answered by the page clocks)
        self._line_stamps: dict[tuple[int, int], int] = {}
        self._page_clock = [0] * ((array.size >> PAGE_SHIFT) + 1) if lazy else []
        self._sub_clock = [0] * ((array.size >> SUB_SHIFT) + 1) if lazy else []
        self._versions: dict[tuple[int, int], tuple] = {}  # version() memo
        #: lazy mode: the (start, end) of the tensors packed for a raw read before; a
        #: store of the same range packs at once from then on (:meth:`write_tensor`)
        self._read_raw: set[tuple[int, int]] = set()

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
        off = addr - self.base
        if n < 0 or off < 0 or off + n > self.array.size:
            self._span(addr, n)  # (its HardwareError)
        if self.on_read:
            self.on_read(addr, n)

    def read(self, addr: int, n: int) -> np.ndarray:
        """The bytes at ``addr`` (a view: valid until the next write)."""
        off = self._span(addr, n)
        if self.on_read:
            self.on_read(addr, n)
        self.materialize(addr, n)
        return self.array[off : off + n]

    def peek(self, addr: int, n: int) -> np.ndarray | None:
        """The bytes at ``addr`` as DRAM holds them now (a view), without a device read: no
        ``on_read`` and nothing written out; None where a stored tensor's bytes are not
        written yet or the range is outside DRAM.  For work done ahead of a kick
        (:mod:`.warm`) that the kick checks again."""
        off = addr - self.base
        if n < 0 or off < 0 or off + n > self.array.size:
            return None
        if any(t.packed is None for t in self._overlapping(addr, addr + n)):
            return None
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
        off = addr - self.base
        if off < 0 or off + n > self.array.size:
            self._span(addr, n)  # (its HardwareError)
        if self.flip_next_write or not self.lazy:
            flip = self.flip_next_write
            packed = _packed(values)
            self.write(addr, packed)
            if not flip:
                self._keep(StoredTensor(addr, addr + n, values, packed, [(addr, addr + n)]))
            return
        end = addr + n
        # (_pack_if_read and _run inline: one call per command)
        t = StoredTensor(addr, end, values, _packed(values, self.array[off : off + n])
                         if (addr, end) in self._read_raw else None, [(addr, end)])
        i = bisect_right(self._ends, addr)
        j = bisect_left(self._starts, end, i)
        old = self._owners[i] if j == i + 1 else None
        if (old is not None and old.whole and old.addr == addr and old.end == end
                and self._kept_bytes - old.values.nbytes + values.nbytes
                <= self.tensor_limit):
            # the common store: over the tensor of the same range and nothing else (the
            # same layer's output, run after run): swapped in place
            values.setflags(write=False)  # (_register inline)
            self.tensors[(addr, end)] = self._owners[i] = t
            self._kept_bytes += values.nbytes - old.values.nbytes
        else:
            self._clip(addr, end)
            self._keep(t)
        if n:  # (_stamp inline: the range is known to lie in DRAM)
            self._clock = clock = self._clock + 1
            nat = native.NATIVE
            if nat is not None:
                nat.dram_stamp(self._line_clock, self._page_clock, self._sub_clock, off, n,
                               clock, LINE_SHIFT, PAGE_SHIFT, SUB_SHIFT)
            else:
                self._stamp_lines(off, n, clock)
        if self.on_write:
            self.on_write(addr, n)

    def read_tensor(self, addr: int, shape: tuple[int, ...]) -> np.ndarray:
        """``layout.unpack(read(addr, nbytes), shape)``, from the stored values when they
        are valid.  The result may be shared and read-only: callers must not modify it."""
        shape = tuple(shape)
        n = 2 * math.prod(shape)
        off = addr - self.base
        if n < 0 or off < 0 or off + n > self.array.size:
            self._span(addr, n)  # (its HardwareError)
        if self.on_read:
            self.on_read(addr, n)
        t = self.tensors.get((addr, addr + n))
        if t is not None and t.values.shape == shape and t.whole:
            if t.packed is None or self.lazy or same_bytes(t.packed,
                                                           self.array[off : off + n]):
                return t.values
        i = bisect_right(self._ends, addr)  # (materialize's test of a live range, inline)
        if i < len(self._starts) and self._starts[i] < addr + n:
            self.materialize(addr, n)
        nat = native.NATIVE
        if nat is not None and len(shape) == 3 and min(shape) > 0:
            # (layout.unpack's compiled call with its arguments known good)
            out = np.empty(shape, np.float32)
            nat.unpack(self.array[off : off + n].view(np.float16), out[None], False)
            return out
        return layout.unpack(self.array[off : off + n], shape)

    def materialize(self, addr: int, n: int, read: bool = True) -> None:
        """Write out the stored tensors whose unwritten bytes overlap ``[addr, addr+n)``
        (lazy mode); the simulated DMA calls it before the CPU reads DRAM.  ``read`` (a raw
        read): each whole tensor written out here is remembered, and its range packed at
        once by later stores (a runtime's CPU step reads the same tensors every run)."""
        nat = native.NATIVE
        todo = (live_unpacked if nat is None else nat.live_unpacked)(
            self._starts, self._ends, self._owners, addr, addr + n)
        if not todo:
            return  # (the common case: nothing there, or all of it written out)
        for t in todo if len(todo) < 2 else list(dict.fromkeys(todo)):
            if t.whole:  # packed in place (lazy mode: eager ones are written at once)
                t.packed = _packed(t.values, self.array[t.addr - self.base : t.end - self.base])
                if read:
                    if len(self._read_raw) > 4096:
                        self._read_raw.clear()
                    self._read_raw.add((t.addr, t.end))
                continue
            packed = _packed(t.values)  # (a part: the rest was stored over)
            for s, e in t.live:
                self.array[s - self.base : e - self.base] = packed[s - t.addr : e - t.addr]
            self._unlink(t)
            self._forget(t)

    def _pack_if_read(self, addr: int, n: int, values: np.ndarray) -> np.ndarray | None:
        """A lazy store's bytes packed into DRAM now (the DRAM view) when a tensor of
        the same range was read raw before, else None (packed when first read)."""
        if (addr, addr + n) not in self._read_raw:
            return None
        off = addr - self.base
        return _packed(values, self.array[off : off + n])

    def release(self, addr: int, n: int, whole: bool = False) -> None:
        """Another writer (the simulated DMA for the CPU) is about to store into
        ``[addr, addr+n)``: every byte of it (``whole``) or some.  Stored tensors there
        lose that part; with some bytes only, they are written out first."""
        if not whole:
            self.materialize(addr, n, read=False)  # (a store, not a read)
        self._clip(addr, addr + n)
        self._stamp(addr, n)

    def version(self, addr: int, n: int) -> int | None:
        """A number that changes whenever a byte of ``[addr, addr+n)`` may have changed,
        or None when that cannot be known (eager mode: others write behind our back)."""
        if not self.lazy:
            return None
        off = addr - self.base
        if n <= 0:
            return 0
        p0, p1 = off >> PAGE_SHIFT, ((off + n - 1) >> PAGE_SHIFT) + 1
        pages = self._page_clock[p0] if p1 - p0 == 1 else max(self._page_clock[p0:p1])
        key = (addr, n)
        seen = self._versions.get(key)
        if seen is not None and seen[0] == pages:  # no store touched those pages since
            return seen[2]
        nat = native.NATIVE
        if nat is not None and off >= 0 and off + n <= self.array.size:
            # (compiled: the largest line clock, what the lines below give)
            if self._line_stamps:
                self._apply_line_stamps()
            fine = nat.dram_version(self._line_clock, off, n, LINE_SHIFT)
            if len(self._versions) > 4096:
                self._versions.clear()
            self._versions[key] = (pages, None, fine)
            return fine
        s0, s1 = off >> SUB_SHIFT, ((off + n - 1) >> SUB_SHIFT) + 1
        sub = None
        if s1 - s0 <= SUB_MAX:
            sub = self._sub_clock[s0] if s1 - s0 == 1 else max(self._sub_clock[s0:s1])
        if sub is not None and seen is not None and seen[1] == sub:
            fine = seen[2]  # the stores were elsewhere in those pages
        else:
            if self._line_stamps:
                self._apply_line_stamps()
            lines = self._line_clock[off >> LINE_SHIFT : ((off + n - 1) >> LINE_SHIFT) + 1]
            fine = int(np.maximum.reduce(lines))  # (no _amax wrapper)
        if len(self._versions) > 4096:
            self._versions.clear()
        self._versions[key] = (pages, sub, fine)
        return fine

    def discard(self) -> None:
        """Let go of the memory and of everything kept over it (its owner closed): the
        array, the stored tensors (lazy ones are views of it), the write clocks and the
        watchers (bound methods of the owner, a reference cycle).  Afterwards the DRAM is
        empty, so any access is out of range; the host memory is returned at once where
        nothing else holds a view of it."""
        self.array = np.zeros(0, np.uint8)
        self.on_read = self.on_write = None
        self.tensors.clear()
        self._starts, self._ends, self._owners = [], [], []
        self._kept_bytes = 0
        self._line_clock = np.zeros(0, np.uint64)
        self._line_stamps.clear()
        self._page_clock, self._sub_clock = [], []
        self._versions.clear()
        self._read_raw.clear()

    # -- bookkeeping --------------------------------------------------------------------
    def _keep(self, t: StoredTensor) -> None:
        """Register ``t`` and its range as live (the range was clipped free before)."""
        if t.end == t.addr:
            return  # (an empty tensor: nothing to keep)
        values = t.values
        if self._kept_bytes + values.nbytes > self.tensor_limit:
            self.materialize(self.base, self.array.size, read=False)
            self.tensors.clear()
            self._starts, self._ends, self._owners = [], [], []
            self._kept_bytes = 0
        values.setflags(write=False)  # (_register inline)
        self.tensors[(t.addr, t.end)] = t
        self._kept_bytes += values.nbytes
        nat = native.NATIVE
        (live_insert if nat is None else nat.live_insert)(self._starts, self._ends,
                                                          self._owners, t.addr, t.end, t)

    def _forget(self, t: StoredTensor) -> None:
        """Drop ``t`` from the register (its live ranges are gone already)."""
        del self.tensors[(t.addr, t.end)]
        self._kept_bytes -= t.values.nbytes

    def _unlink(self, t: StoredTensor) -> None:
        """Take ``t``'s live ranges out of the sorted lists."""
        for s, _ in t.live:
            i = bisect_left(self._starts, s)
            del self._starts[i], self._ends[i], self._owners[i]

    def _run(self, a: int, b: int) -> tuple[int, int]:
        """``(i, j)``: the live ranges ``i..j-1`` are those that overlap ``[a, b)`` (sorted
        and disjoint: the first that ends after ``a`` to the last that starts before
        ``b``)."""
        i = bisect_right(self._ends, a)
        return i, bisect_left(self._starts, b, i)

    def _overlapping(self, a: int, b: int) -> list[StoredTensor]:
        """The stored tensors with live bytes in ``[a, b)``."""
        i, j = self._run(a, b)
        owners = self._owners[i:j]
        return owners if len(owners) < 2 else list(dict.fromkeys(owners))

    def _clip(self, a: int, b: int) -> None:
        """``[a, b)`` is about to be overwritten whole: written tensors there are dropped,
        unwritten ones lose that part (and are dropped when nothing is left)."""
        nat = native.NATIVE
        hit = (live_clip if nat is None else nat.live_clip)(self._starts, self._ends,
                                                            self._owners, a, b)
        if hit is None:
            return
        for t in hit if len(hit) < 2 else dict.fromkeys(hit):
            if t.packed is not None:  # written out and whole: its one range was in i..j-1
                self._forget(t)
                continue
            t.live = (remove_span if nat is None else nat.span_remove)(t.live, a, b)
            t.whole = False
            if not t.live:
                self._forget(t)

    def _apply_line_stamps(self) -> None:
        """The pending stores into the line clocks.  Clocks only grow, so each range takes
        the larger of its clock and the lines' (the order of the pending ranges, which
        may overlap, does not matter)."""
        lines = self._line_clock
        for (l0, l1), clock in self._line_stamps.items():
            part = lines[l0:l1]
            np.maximum(part, clock, out=part)
        self._line_stamps.clear()

    def _stamp(self, addr: int, n: int) -> None:
        if self.lazy and n:
            self._clock = clock = self._clock + 1
            off = addr - self.base
            nat = native.NATIVE
            if nat is not None and off >= 0 and off + n <= self.array.size:
                # (compiled: the line clocks at once, not pending, and the page clocks)
                nat.dram_stamp(self._line_clock, self._page_clock, self._sub_clock, off, n,
                               clock, LINE_SHIFT, PAGE_SHIFT, SUB_SHIFT)
                return
            self._stamp_lines(off, n, clock)

    def _stamp_lines(self, off: int, n: int, clock: int) -> None:
        """The Python twin of ``native.dram_stamp``: the store of ``n`` > 0 bytes at DRAM
        offset ``off`` at ``clock`` pending for the line clocks, and in the page clocks."""
        last = off + n - 1
        stamps = self._line_stamps
        stamps[(off >> LINE_SHIFT, (last >> LINE_SHIFT) + 1)] = clock
        if len(stamps) > 1024:
            self._apply_line_stamps()
        # (the two page clocks unrolled: most stores touch one page of each)
        p0, p1 = off >> PAGE_SHIFT, last >> PAGE_SHIFT
        if p0 == p1:
            self._page_clock[p0] = clock
        else:
            self._page_clock[p0 : p1 + 1] = [clock] * (p1 + 1 - p0)
        p0, p1 = off >> SUB_SHIFT, last >> SUB_SHIFT
        if p0 == p1:
            self._sub_clock[p0] = clock
        else:
            self._sub_clock[p0 : p1 + 1] = [clock] * (p1 + 1 - p0)
