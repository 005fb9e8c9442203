"""``sim://``: the simulated DV700 behind the same Device interface as the hardware.

DRAM and the CPU's cached view are kept apart, as on a non-coherent Zynq: a
buffer's ``view`` is the CPU cache, DRAM is only updated by ``sync_for_device``
and only read back by ``sync_for_cpu``.  So a device read of bytes the CPU
wrote without ``sync_for_device``, or a checked CPU read of device output
without ``sync_for_cpu``, is caught and reported with the buffer and byte range.

URL options (``sim://?ub_size=524288&clock_mhz=300``): ``ub_size``, ``mac_num``,
``clock_mhz``, ``dram_mb``, ``units`` (e.g. ``conv,maximizer``), ``kick`` (``r5``, the
default, as a stock board runs DMP's R5 firmware; ``direct`` for a pre-2019 bitstream, with
that bitstream's register map: :mod:`dvsdk.driver.kick`, :mod:`dvsdk.driver.convid`,
:mod:`dvsdk.sim.r5`), ``hw_version`` (``7.2.20190729`` or a date: the simulated hardware
refuses what that version could not run, :mod:`dvsdk.hw.quirks`), ``coherence``
(``error`` | ``warn`` | ``off``), ``fault`` (``hang``, ``lost_irq``,
``dma_error``, ``bitflip``: once, on the next kick).

Threads: one re-entrant lock serializes the simulated hardware (register writes and the
kick that runs in ``write32``, allocation, DMA syncs, checked CPU accesses), as the
single DV700 it models is serial; a register read is one word and needs no lock;
``wait_irq`` waits outside it.  Coherence problems a
kick finds are reported by the next ``wait_irq`` of that kick's unit.
"""

from __future__ import annotations

import threading
import warnings
from bisect import bisect_right, insort

import numpy as np

from .. import native
from ..driver.allocator import RegionAllocator
from ..driver.device import (
    MAX_TIMEOUT,
    UNITS,
    WINDOWS,
    Device,
    DeviceInfo,
    check_timeout,
    parse_url,
)
from ..driver.kick import DEFAULT_KICK, KICK_PROTOCOLS, protocol
from ..driver.regdump import describe_registers
from ..errors import (
    CoherenceError,
    DeviceError,
    DeviceTimeout,
    InvalidArgument,
    InvalidURL,
    OutOfDeviceMemory,
)
from ..hw import arith, quirks
from .buffer import SimDmaBuffer
from .core import IRQ_REGS, Faults, R, SimParams
from .dram import Dram, same_bytes
from .engine import Dv700Core
from .irqline import IrqLine
from .spans import add_span, covered, first_overlap
from .warm import warm_stream

DRAM_BASE = 0x6000_0000
_NOT_U32 = ~0xFFFF_FFFF  # (the bits an int in 0..2^32-1 has clear; a negative has them set)
COHERENCE_MODES = ("error", "warn", "off")


#: per kick protocol: the register whose write acknowledges a unit's interrupt
_ACK = {kick: {**{u: IRQ_REGS[u] for u in UNITS},
               **({"ipi": R["ipi"]["ISR"]} if kick == "r5" else {})}
        for kick in KICK_PROTOCOLS}


def _acks(unit: str, value: int) -> bool:
    """Whether ``value`` written to the unit's acknowledge register clears its interrupt:
    0 for the units (§10.5), the channel bit 0x100 for the IPI (write 1 to clear, §10.4)."""
    return bool(value & 0x100) if unit == "ipi" else not value & 1


def _no_host_memory(nbytes: int, what: str, **kw: object) -> OutOfDeviceMemory:
    """The typed error for host memory the simulator could not get (a MemoryError)."""
    return OutOfDeviceMemory(f"no host memory for {what} ({nbytes} bytes)",
                             requested=nbytes, limit="the host's free memory and "
                             "address-space limit (ulimit -v)",
                             hint="close devices no longer used, or ask for less "
                             "(sim://?dram_mb=...)", **kw)


def _host_memory(nbytes: int, what: str, **kw: object) -> np.ndarray:
    """``nbytes`` zeroed bytes of host memory, or OutOfDeviceMemory naming ``what``."""
    try:
        return np.zeros(nbytes, np.uint8)
    except MemoryError:
        raise _no_host_memory(nbytes, what, **kw) from None


def _hw_date(text: str) -> int:
    """``hw_version=7.2.20190729`` (or a date) as the URL gives it; InvalidURL if malformed."""
    try:
        return quirks.parse_hw_version(text)
    except InvalidArgument as e:
        raise InvalidURL(e.message, field="hw_version", value=text, limit=e.limit) from None

class SimDevice(Device):
    """A DV700 in software: registers, DRAM, interrupts, timing, fault injection."""

    def __init__(self, params: SimParams | None = None, dram_mb: int = 256,
                 coherence: str = "error", url: str = "sim://") -> None:
        if coherence not in COHERENCE_MODES:
            raise InvalidArgument("unknown coherence mode", field="coherence", value=coherence,
                                  limit=COHERENCE_MODES)
        native.note_fallback()
        arith.check_fp_environment()
        self.url = url
        self.params = params or SimParams()
        self.dram_base = DRAM_BASE
        self.closed = True  # (until the memory is there: close() has nothing to do)
        #: the simulated DRAM's bytes; written only through ``core.mem`` (the Dram) or
        #: after ``core.mem.release`` of the range, which the Dram's lazy mode relies on.
        #: close() lets go of it (and of every cache over it) at once.
        self.dram = _host_memory(dram_mb << 20, f"the simulator's {dram_mb} MiB of DRAM",
                                 field="dram_mb", value=dram_mb)
        self.dram_size = int(self.dram.size)
        self.allocator = RegionAllocator(self.dram.size, base=self.dram_base)
        self.buffers: dict[int, SimDmaBuffer] = {}
        self._starts: list[int] = []  # the buffers' offsets, sorted (for _buffers_in)
        self._in_cache: dict[tuple[int, int], tuple] = {}  # _buffers_in by range
        self._checked: set[tuple] = set()  # accesses and word blocks found valid (close empties)
        self.coherence = coherence
        #: serializes the simulated hardware (module docstring)
        self.lock = threading.RLock()
        #: coherence problems found by a kick, by unit, reported by its next wait_irq
        self.coherence_errors: dict[str, list[CoherenceError]] = {u: [] for u in WINDOWS}
        self._running: str | None = None  # the unit whose kick runs now
        self._clean_in_kick: set[int] = set()  # buffers found clean since the last kick
        #: by id, the buffers with CPU stores not synced or a raw view (:meth:`_device_read`)
        self.cpu_pending: dict[int, SimDmaBuffer] = {}
        self._irq = {u: IrqLine() for u in WINDOWS}
        try:
            mem = Dram(self.dram, self.dram_base, on_read=self._device_read,
                       on_write=self._device_write, lazy=True)
            self.core = Dv700Core(self.dram, self.dram_base, params=self.params,
                                  on_irq=self._on_irq, memory=mem)
        except MemoryError:
            self.dram = np.zeros(0, np.uint8)
            raise _no_host_memory(self.dram_size, "the simulator's DRAM bookkeeping",
                                  field="dram_mb", value=dram_mb) from None
        #: the (unit, offset) of each acknowledge register of this kick protocol
        self._ack = frozenset(_ACK[self.params.kick].items())
        self.closed = False
        protocol(self.params.kick).on_open(self)  # the driver's probe-time writes

    @classmethod
    def from_url(cls, url: str) -> SimDevice:
        u = parse_url(url)
        if u.netloc or u.path not in ("", "/"):
            raise InvalidURL("sim:// takes options only, as sim://?ub_size=...", field="url",
                             value=url)
        units = tuple(u.pop_str("units", ",".join(UNITS)).split(","))
        for unit in units:
            if unit not in UNITS:
                raise InvalidURL("unknown unit", field="units", value=unit, limit=UNITS)
        if "conv" not in units:
            raise InvalidURL("the conv unit cannot be removed", field="units", value=units)
        mac_num = u.pop_int("mac_num", 576, lo=72, hi=72 * 1024)
        if mac_num % 72:
            raise InvalidURL("mac_num must be a multiple of 72", field="mac_num",
                             value=mac_num, limit="72*n")
        params = SimParams(
            clock_mhz=u.pop_float("clock_mhz", 300.0, lo=1.0),
            mac_num=mac_num,
            ub_size=u.pop_int("ub_size", 524288, lo=0, hi=1 << 26),
            units=units,
            kick=u.pop_str("kick", DEFAULT_KICK, KICK_PROTOCOLS),
            hw_date=_hw_date(u.pop_str("hw_version", "")),
        )
        dram_mb = u.pop_int("dram_mb", 256, lo=1, hi=3072)
        coherence = u.pop_str("coherence", "error", COHERENCE_MODES)
        fault = u.pop_str("fault", "", ("", "hang", "lost_irq", "dma_error", "bitflip"))
        u.reject_unknown()
        dev = cls(params, dram_mb=dram_mb, coherence=coherence, url=url)
        if fault:
            dev.inject(fault)
        return dev

    # -- Device interface ---------------------------------------------------------------
    @property
    def kick(self) -> str:
        return self.params.kick

    def _unit(self, unit: str, offset: int) -> None:
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        try:
            if offset.__class__ is int and (unit, offset) in self._checked:  # (checked once:
                return  # the rule never changes; a float equal to a checked offset is not one)
        except TypeError:  # an unhashable unit (a list): check_reg refuses it
            pass
        self.check_reg(unit, offset)
        if unit not in self.params.units and unit not in self.windows[len(UNITS):]:
            raise InvalidArgument("this simulated device has no such unit", field="unit",
                                  value=unit, limit=self.params.units)
        self._checked.add((unit, offset))

    def read32(self, unit: str, offset: int) -> int:
        # one word of the register file: atomic without the lock (a read while another
        # thread's kick runs sees the register as it is, as on hardware)
        try:
            hit = offset.__class__ is int and (unit, offset) in self._checked
        except TypeError:  # (an unhashable unit: _unit refuses it)
            hit = False
        if not hit:
            self._unit(unit, offset)  # (its fast path inline; the set is empty once closed)
        return int(self.core.regs[unit][offset >> 2])  # (core.read_reg inline)

    def read_words(self, unit: str, offset: int, count: int) -> list[int]:
        block = (unit, offset, count)
        try:
            if offset.__class__ is int and count.__class__ is int and block in self._checked:
                # (found valid before; the set is empty once closed)
                return self.core.regs[unit][offset >> 2 : (offset >> 2) + count].tolist()
            regs = self.core.regs.get(unit)
        except TypeError:  # an unhashable unit: refused as an unknown one
            self._unit(unit, offset)
            raise
        if regs is None or count.__class__ is not int or count < 1:
            return super().read_words(unit, offset, count)  # (checks each word, and count)
        self._unit(unit, offset)
        self._unit(unit, offset + 4 * (count - 1))
        self._checked.add(block)
        return regs[offset // 4 : offset // 4 + count].tolist()

    def write32(self, unit: str, offset: int, value: int) -> None:
        if type(value) is not int or value & _NOT_U32:  # (negative, or wider than 32 bits)
            value = self.check_value(value)  # refused, not truncated (32-bit registers)
        key = (unit, offset)
        with self.lock:
            try:
                hit = offset.__class__ is int and key in self._checked
            except TypeError:  # (an unhashable unit: _unit refuses it)
                hit = False
            if not hit:
                self._unit(unit, offset)  # (its fast path inline; empty once closed)
            if key in self._ack and _acks(unit, value):
                self._irq[unit].clear()
            if self._clean_in_kick:  # any register write may start a unit: check afresh
                self._clean_in_kick.clear()
            self._running = unit  # whose kick a coherence problem belongs to
            self.core.write_reg(unit, offset, value)

    def stream_committed(self, address: int, length8: int) -> None:
        with self.lock:
            if not self.closed:
                warm_stream(self.core, address, length8)

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> SimDmaBuffer:
        with self.lock:
            if self.closed:
                raise DeviceError("device is closed", field="device", value=self.url)
            off = self.allocator.alloc(int(nbytes), align)
            try:
                buf = SimDmaBuffer(self, off, int(nbytes), name or f"buf{len(self.buffers)}")
            except MemoryError:
                self.allocator.free(off)
                raise _no_host_memory(int(nbytes), f"the CPU view of a {int(nbytes)}-byte "
                                      "DMA buffer", field="nbytes", value=int(nbytes)) from None
            # every byte is zeroed: what was stored there goes, unwritten
            self.core.mem.release(self.dram_base + off, int(nbytes), whole=True)
            self.dram[off : off + nbytes] = 0
            self.buffers[off] = buf
            insort(self._starts, off)
            self._in_cache.clear()
            return buf

    def release(self, buf: SimDmaBuffer) -> None:
        with self.lock:
            if self.buffers.pop(buf.dram_off, None) is not None:
                self._starts.remove(buf.dram_off)
            self.cpu_pending.pop(id(buf), None)
            self._in_cache.clear()
            self.allocator.free(buf.dram_off)

    def wait_irq(self, unit: str, timeout: float) -> None:
        try:
            hit = (unit, 0) in self._checked  # (_unit's fast path; empty once closed)
        except TypeError:  # (an unhashable unit: _unit refuses it)
            hit = False
        if not hit:
            self._unit(unit, 0)
        if type(timeout) is not float or not 0.0 <= timeout <= MAX_TIMEOUT:
            timeout = check_timeout(timeout)
        if not self._irq[unit].wait(timeout):  # (.irqline: no lock when it is there)
            regs = self.snapshot(unit)
            raise DeviceTimeout(f"{unit} interrupt did not arrive within {timeout:g} s: "
                                f"{describe_registers(unit, regs)}", registers=regs,
                                field="timeout", value=timeout)
        if not self.coherence_errors[unit]:
            return  # (the kick appended its errors before it raised the line: no lock)
        with self.lock:
            errors = self.coherence_errors[unit]
            if errors and self.coherence == "error":
                err = errors[0]
                errors.clear()
                raise err

    def info(self) -> DeviceInfo:
        p = self.params
        return DeviceInfo(ub_size=p.ub_size, mac_num=p.mac_num, max_kernel_size=7,
                          conv_freq=int(p.clock_mhz), hw_version=p.hw_version, svn_version=93,
                          max_input_size=p.max_input_size, backend="sim", units=p.units,
                          simulated=True, dma_size=self.dram_size, kick=p.kick,
                          hw_date=p.hw_date,
                          extra={"clock_mhz": p.clock_mhz, "dram_base": self.dram_base})

    def reset(self) -> None:
        with self.lock:
            self.core.reset()
            for ev in self._irq.values():
                ev.clear()
            for errors in self.coherence_errors.values():
                errors.clear()

    def close(self) -> None:
        """Free every buffer and return the simulated DRAM's host memory at once (not when
        the garbage collector gets to it): the DRAM array and every cache over it are
        dropped, and the reference cycles through the DRAM's watchers are cut."""
        with self.lock:
            if self.closed:
                return
            for buf in list(self.buffers.values()):
                buf.free()
            self.closed = True
            self._checked.clear()  # (every access checks afresh, and is refused)
            self.core.discard()
            self.dram = np.zeros(0, np.uint8)
            self._in_cache.clear()
            self._clean_in_kick.clear()

    # -- simulator extras -------------------------------------------------------------
    def inject(self, fault: str, times: int = 1) -> None:
        """Make the next ``times`` kicks ``hang``, lose their irq, fail with a DMA error or
        flip a bit in their output."""
        if fault not in Faults.__dataclass_fields__:
            raise InvalidArgument("unknown fault", field="fault", value=fault,
                                  limit=sorted(Faults.__dataclass_fields__))
        with self.lock:
            setattr(self.core.faults, fault, getattr(self.core.faults, fault) + times)

    @property
    def errors(self) -> list[str]:
        """Reasons the simulated hardware reported (SIM_STATUS), oldest first."""
        return self.core.errors

    def snapshot(self, unit: str) -> dict[str, int]:
        """The unit's registers by name; for the R5's IPI also the conv block's and the
        shared memory's (what a hung R5 kick is diagnosed from)."""
        units = ("conv", "shm", "ipi") if unit == "ipi" else (unit,)
        with self.lock:
            return {name: self.core.read_reg(u, off) for u in units
                    for name, off in R[u].items() if not name.startswith("BYTE_COUNTERS")}

    def coherence_problem(self, message: str, buffer: str, start: int, end: int) -> None:
        err = CoherenceError(message, buffer=buffer, start=start, end=end)
        if self.coherence == "error":
            raise err
        if self.coherence == "warn":
            warnings.warn(message, stacklevel=3)

    def _on_irq(self, unit: str) -> None:
        self._irq[unit].set()

    def _buffers_in(self, addr: int, n: int) -> tuple:
        """The buffers ``[addr, addr+n)`` touches, as (buffer, start, end) in each; kept
        per range until a buffer is allocated or freed (the same tensors every run)."""
        key = (addr, n)
        hit = self._in_cache.get(key)
        if hit is not None:
            return hit
        lo, hi = addr - self.dram_base, addr - self.dram_base + n
        starts, buffers, out = self._starts, self.buffers, []
        i = max(bisect_right(starts, lo) - 1, 0)
        while i < len(starts) and starts[i] < hi:
            off = starts[i]
            buf = buffers[off]
            end = off + buf._mem.size
            if lo < end:
                out.append((buf, max(lo, off) - off, min(hi, end) - off))
            i += 1
        if len(self._in_cache) > 4096:
            self._in_cache.clear()
        self._in_cache[key] = hit = tuple(out)
        return hit

    def _device_read(self, addr: int, n: int) -> None:
        if not self.cpu_pending or self.coherence == "off":
            return  # (no buffer has a CPU store pending or a raw view: nothing to find)
        cached = self._in_cache.get((addr, n))  # (_buffers_in's cache, looked up inline)
        for buf, a, b in self._buffers_in(addr, n) if cached is None else cached:
            if not buf._raw:
                # only write() can have stored: its spans say exactly what is pending
                hit = buf.cpu_written and (covered if native.NATIVE is None
                                           else native.NATIVE.span_cover)(buf.cpu_written, a, b)
                if hit:
                    self._report_read(buf, *hit)
                continue
            if id(buf) in self._clean_in_kick:
                continue
            if not buf.cpu_written and same_bytes(buf.view, buf.snapshot):
                # nothing the CPU wrote is pending in the whole buffer (the common case);
                # the CPU cannot store while a kick runs, so it stays so until the next
                self._clean_in_kick.add(id(buf))
                continue
            if not first_overlap(buf.cpu_written, a, b) and same_bytes(buf.view[a:b],
                                                                          buf.snapshot[a:b]):
                continue
            dirty = buf.view[a:b] != buf.snapshot[a:b]
            for s, e in buf.cpu_written:
                lo, hi = max(s, a), min(e, b)
                if lo < hi:
                    dirty[lo - a : hi - a] = True
            diff = np.flatnonzero(dirty)
            if diff.size:
                self._report_read(buf, int(a + diff[0]), int(a + diff[-1] + 1))

    def _report_read(self, buf: SimDmaBuffer, start: int, end: int) -> None:
        msg = (f"device read of bytes {start}..{end} of {buf.name}, "
               "written by the CPU without sync_for_device")
        err = CoherenceError(msg, buffer=buf.name, start=start, end=end)
        if self.coherence == "error":
            self.coherence_errors[self._running or "conv"].append(err)
        else:
            warnings.warn(msg, stacklevel=3)

    def _device_write(self, addr: int, n: int) -> None:
        cached = self._in_cache.get((addr, n))
        nat = native.NATIVE
        add = add_span if nat is None else nat.span_add
        for buf, a, b in self._buffers_in(addr, n) if cached is None else cached:
            buf.device_dirty = add(buf.device_dirty, a, b)

    def __repr__(self) -> str:
        p = self.params
        return (f"<SimDevice ub={p.ub_size} macs={p.mac_num} clock={p.clock_mhz:g}MHz "
                f"dram={self.dram_size >> 20}MiB>")

