"""The device seam: the only thing that differs between hardware, simulator and link.

A :class:`Device` exposes the DV700 register windows (``conv``, ``ipu``,
``maximizer``; reference §10), DMA memory (:class:`DmaBuffer`), the completion
interrupt and the sysfs-style facts of §10.9 (:class:`DeviceInfo`).  Everything
above it (command lists, the runtime) is written once against this interface.

:func:`open_device` turns a URL into a device, in the spirit of pyserial's
``serial_for_url``: ``sim://`` (the default), ``uio://``, ``dv://``, ``serial://``,
``socket://``, ``rfc2217://`` and ``loop://``.
"""

from __future__ import annotations

import importlib
import math
import numbers
import os
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from ..errors import DeviceError, InvalidArgument, InvalidURL
from .unitgate import UnitGate

UNITS = ("conv", "ipu", "maximizer")
#: register windows: the units, plus the R5 kick's IPI channel and shared memory (§10.4)
#: on devices that have them (``Device.windows``)
WINDOWS = UNITS + ("ipi", "shm")

#: the longest wait (seconds) any timeout of the driver or the runtime accepts.  A DV700
#: command takes milliseconds and the kernel driver gives up after 10 x 2 s (§10.5); an
#: hour leaves room for slow links and debuggers and keeps every deadline computable.
MAX_TIMEOUT = 3600.0


def check_timeout(timeout: object, field: str = "timeout") -> float:
    """``timeout`` as a float of seconds, or InvalidArgument: a real number (not a bool),
    finite, ``0 <= timeout <=`` :data:`MAX_TIMEOUT`.  Every wait of the driver and the
    runtime (``wait_irq``, ``CommandList.exec/wait/run``, ``Net.run``...) goes through it,
    so ``inf``, NaN, negative or absurd values fail before any deadline arithmetic."""
    if type(timeout) in (float, int) and 0 <= timeout <= MAX_TIMEOUT:  # the usual case
        return float(timeout)
    limit = f"0..{MAX_TIMEOUT:g} s, finite"
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise InvalidArgument("timeout must be a number of seconds", field=field,
                              value=timeout, limit=limit)
    value = float(timeout)
    if not math.isfinite(value) or not 0.0 <= value <= MAX_TIMEOUT:
        raise InvalidArgument("timeout out of range", field=field, value=timeout, limit=limit)
    return value


_GATE_LOCK = threading.Lock()

#: scheme -> "module:callable"; the callable takes the URL string.
BACKENDS: dict[str, str] = {
    "sim": "dvsdk.sim.device:SimDevice.from_url",
    "uio": "dvsdk.driver.uio:UioDevice.from_url",
    "dv": "dvsdk.driver.kmod:KmodDevice.from_url",
    "serial": "dvsdk.link.client:LinkDevice.from_url",
    "socket": "dvsdk.link.client:LinkDevice.from_url",
    "rfc2217": "dvsdk.link.client:LinkDevice.from_url",
    "loop": "dvsdk.link.client:LinkDevice.from_url",
}


@dataclass
class DeviceInfo:
    """What the kernel driver exports under ``/sys/class/dmp_dv/dv_conv`` (§10.9).

    ``conv_freq`` is in MHz; ``hw_version`` is ``reg 0x128 & 0xFFFF``; ``mac_num``
    is ``reg 0x120 * 72``.  ``backend`` and ``units`` say what we are talking to.
    """

    ub_size: int = 0
    mac_num: int = 0
    max_kernel_size: int = 7
    conv_freq: int = 0
    hw_version: int = 0
    svn_version: int = 93
    max_input_size: int = 0
    backend: str = ""
    units: tuple[str, ...] = UNITS
    simulated: bool = False
    dma_size: int = 0
    #: how conv streams start: "r5" (IPI + shared memory), "direct" (conv 0x400-0x40C), or
    #: "kernel" (DMP's kernel module does it, dv://) (§10.4)
    kick: str = ""
    #: the alignment (bytes) conv input / output / eltwise offsets need: 2, or 16 with DMP's
    #: kernel modules before 107f6a2 (2019-07-23, dvsdk.driver.kmodver)
    io_align: int = 2
    #: the hardware's date (YYYYMMDD of HWMAJOR.HWMINOR.YYYYMMDD), which decides its quirks
    #: (:mod:`dvsdk.hw.quirks`); 0: unknown, taken as the newest hardware
    hw_date: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def copy_or_view(view: np.ndarray, copy: bool) -> np.ndarray:
    """``view`` copied, or as a read-only view of itself."""
    if copy:
        return view.copy()
    out = view.view()
    out.setflags(write=False)
    return out


class DmaBuffer:
    """A physically contiguous DMA region, as the CPU sees it.

    ``phys`` is the 32-bit bus address to program into the device, ``view`` a
    ``uint8`` numpy view of the CPU's (cached) mapping.  The CPU and the device
    do not see each other's writes until synced: call :meth:`sync_for_device`
    after the CPU writes and before a kick, :meth:`sync_for_cpu` after the
    device writes and before the CPU reads (linux-dma.md §5.2).

    :meth:`write` and :meth:`read` are the checked accessors: a backend that
    tracks coherence (the simulator) reports a read of device output that was
    never synced.  ``view`` is raw and unchecked.
    """

    def __init__(self, device: Device | None, phys: int, view: np.ndarray, name: str = "") -> None:
        if view.dtype != np.uint8 or view.ndim != 1:
            raise InvalidArgument("DMA view must be a 1-D uint8 array", field="view")
        self.device = device
        self.phys = int(phys)
        self.view = view
        self.name = name or f"buf@{self.phys:#x}"
        self.freed = False

    @property
    def size(self) -> int:
        return int(self.view.size)

    @property
    def nbytes(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"<DmaBuffer {self.name} phys={self.phys:#010x} size={self.size}>"

    # -- range helpers ---------------------------------------------------------------
    def _range(self, offset: int, nbytes: int | None) -> tuple[int, int]:
        if nbytes is None:
            nbytes = self.size - offset
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise InvalidArgument(
                f"range outside DMA buffer {self.name}",
                field="offset+nbytes",
                value=(offset, nbytes),
                limit=f"0..{self.size}",
            )
        if self.freed:
            raise InvalidArgument(f"DMA buffer {self.name} was freed", field="buffer")
        return offset, nbytes

    # -- CPU access ----------------------------------------------------------------------
    def array(self, dtype: Any = np.uint8, count: int = -1, offset: int = 0) -> np.ndarray:
        """A typed, unchecked numpy view of the CPU mapping."""
        dt = np.dtype(dtype)
        if count < 0:
            count = (self.size - offset) // dt.itemsize
        self._range(offset, count * dt.itemsize)
        return self.view[offset : offset + count * dt.itemsize].view(dt)

    def write(self, offset: int, data: Any) -> None:
        """Copy ``data`` (bytes or an ndarray, taken as raw bytes) into the CPU view."""
        raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), np.uint8)
        offset, n = self._range(offset, raw.size)
        self.view[offset : offset + n] = raw

    def write_with(self, offset: int, nbytes: int, fill: Callable[[np.ndarray], object]
                   ) -> None:
        """A CPU store of ``nbytes`` bytes at ``offset`` made by ``fill(view)``, which writes
        all of the writable uint8 ``view`` it is given (a producer that can write its
        result in place, like a compiled loop): what :meth:`write` of that result would
        do, without the copy where the backend maps the memory.  (Here the view is the
        mapping itself.)"""
        offset, nbytes = self._range(offset, nbytes)
        fill(self.view[offset : offset + nbytes])

    def read(self, offset: int = 0, nbytes: int | None = None, copy: bool = True
             ) -> np.ndarray:
        """CPU-visible bytes, coherence-checked where the backend can: a copy, or with
        ``copy=False`` a read-only view, valid until the next write or sync of the range
        (for a caller that converts the bytes at once and keeps only the result)."""
        offset, nbytes = self._range(offset, nbytes)
        self._check_cpu_read(offset, nbytes)
        return copy_or_view(self.view[offset : offset + nbytes], copy)

    # -- cache maintenance -----------------------------------------------------------
    def sync_for_device(self, offset: int = 0, nbytes: int | None = None) -> None:
        offset, nbytes = self._range(offset, nbytes)
        if nbytes:
            self._sync_for_device(offset, nbytes)

    def sync_for_cpu(self, offset: int = 0, nbytes: int | None = None) -> None:
        offset, nbytes = self._range(offset, nbytes)
        if nbytes:
            self._sync_for_cpu(offset, nbytes)

    def free(self) -> None:
        if not self.freed:
            self._free()
            self.freed = True

    def __enter__(self) -> DmaBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.free()

    # -- backend hooks ------------------------------------------------------------
    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        """Clean CPU caches over the range (no-op for coherent memory)."""

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        """Invalidate CPU caches over the range (no-op for coherent memory)."""

    def _check_cpu_read(self, offset: int, nbytes: int) -> None:
        """Raise CoherenceError if the range holds unsynced device output."""

    def _free(self) -> None:
        """Return the region to the device's allocator."""


class Device(ABC):
    """One DV700: register windows, DMA memory, interrupts, facts.

    Threads: every backend's register accesses, allocations, syncs and ``wait_irq`` may
    be called from several threads.  A unit runs one exec at a time; :attr:`gate`
    serializes command lists per unit (``CommandList`` uses it, so code above it needs
    nothing more).  Raw ``write32`` kicks from several threads must take the gate too.
    """

    url: str = ""
    #: a :class:`dvsdk.qa.record.Recorder` that command lists tell about every exec
    #: (``dvsdk-run --record``), or None
    recorder: Any = None
    #: False for a backend without register access (``dv://``: DMP's kernel module owns the
    #: registers and takes whole command lists, :meth:`prepare`)
    has_registers: bool = True

    @property
    def kick(self) -> str:
        """The conv kick protocol of this device's registers: ``"r5"`` or ``"direct"``
        (:mod:`dvsdk.driver.kick`)."""
        return "direct"

    @property
    def windows(self) -> tuple[str, ...]:
        """Register windows :meth:`read32`/:meth:`write32` accept on this device."""
        return UNITS if self.kick != "r5" else WINDOWS

    def prepare(self, unit: str, commands: list, info: DeviceInfo) -> Any:
        """The seam above register access: take a committed command list's commands
        (validated; FC already lowered to conv) and return a submission with ``start()``,
        ``wait(timeout) -> ExecStats`` and ``free()``.  ``None`` (the default) means
        "register level": :class:`~dvsdk.driver.cmdlist.CommandList` builds the stream
        and kicks through :meth:`write32` with the device's :attr:`kick` protocol.  A
        backend that hands commands to a kernel module (``dv://``) overrides this."""
        return None

    def stream_committed(self, address: int, length8: int) -> None:
        """A committed conv stream now lies at ``address`` (``length8`` 8-byte units of its
        first chunk), synced: the simulator works out ahead what its kick will run (wall
        time only, :mod:`dvsdk.sim.warm`); nothing to do for hardware (the default)."""
        return None

    def set_clock(self, mhz: int) -> int:
        """Set the conv clock (MHz) where the board allows it (DMP's kernel module's
        writable ``conv_freq``, §10.9); returns the clock read back."""
        raise DeviceError("this device's conv clock cannot be set", field="clock",
                          value=mhz, hint=f"{self.url or 'this backend'} has no writable "
                          "conv_freq (DMP's kernel module provides one)")

    @property
    def gate(self) -> UnitGate:
        """This device's :class:`UnitGate` (created on first use)."""
        gate = self.__dict__.get("_unit_gate")
        if gate is None:
            with _GATE_LOCK:
                gate = self.__dict__.setdefault("_unit_gate", UnitGate())
        return gate

    @abstractmethod
    def read32(self, unit: str, offset: int) -> int:
        """Aligned 32-bit register read from a unit's window."""

    @abstractmethod
    def write32(self, unit: str, offset: int, value: int) -> None:
        """Aligned 32-bit register write to a unit's window."""

    def read_words(self, unit: str, offset: int, count: int) -> list[int]:
        """``count`` consecutive registers from ``offset``: one aligned 32-bit read each
        (what MMIO needs); a backend whose registers are plain memory reads them at once."""
        if not isinstance(count, (int, np.integer)) or isinstance(count, (bool, np.bool_)) \
                or count < 0:
            raise InvalidArgument("register count must be a non-negative integer",
                                  field="count", value=count, limit=">= 0")
        self.check_reg(unit, offset)  # (the first word's rule, before adding to it)
        return [self.read32(unit, offset + 4 * i) for i in range(count)]

    @abstractmethod
    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        """Physically contiguous DMA memory below 4 GiB."""

    @abstractmethod
    def wait_irq(self, unit: str, timeout: float) -> None:
        """Block until ``unit`` raises its interrupt; DeviceTimeout after ``timeout`` s
        (validated by :func:`check_timeout`: InvalidArgument unless finite and within
        ``0..MAX_TIMEOUT``)."""

    @abstractmethod
    def info(self) -> DeviceInfo:
        """The sysfs facts of §10.9 plus what backend this is."""

    @abstractmethod
    def reset(self) -> None:
        """Recover from a hang or fault: abort work, clear interrupts and status."""

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release every resource; the device is unusable afterwards."""

    def __enter__(self) -> Device:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def check_reg(unit: str, offset: int, limit: int = 0x1000) -> None:
        """Every backend's register access rule: a known unit, aligned, in the window."""
        if unit not in WINDOWS:
            raise InvalidArgument("unknown register unit", field="unit", value=unit,
                                  limit=WINDOWS)
        if not isinstance(offset, (int, np.integer)) or isinstance(offset, (bool, np.bool_)) \
                or offset % 4 or not 0 <= offset < limit:
            raise InvalidArgument(
                "register offset must be 32-bit aligned inside the unit window",
                field="offset",
                value=hex(offset) if isinstance(offset, (int, np.integer)) else offset,
                limit=f"0x0..{limit - 4:#x}, multiple of 4",
            )

    @staticmethod
    def check_value(value: object) -> int:
        """Every backend's register value rule: an integer (not a bool) in 0..2^32-1, as a
        32-bit register holds it (the board's mmio, ``registers.yaml``); a wider or negative
        value is refused, never truncated.  Returns it as an int."""
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)) \
                and 0 <= value <= 0xFFFFFFFF:
            return int(value)
        raise InvalidArgument("register value must be a 32-bit unsigned integer",
                              field="value", value=value, limit="0..0xFFFFFFFF")


@dataclass
class DeviceURL:
    """A parsed device URL: ``scheme://netloc/path?key=value``."""

    raw: str
    scheme: str
    netloc: str
    path: str
    options: dict[str, str]

    def pop_int(self, key: str, default: int, lo: int | None = None, hi: int | None = None) -> int:
        if key not in self.options:
            return default
        text = self.options.pop(key)
        try:
            value = int(text, 0)
        except ValueError:
            raise InvalidURL(
                "option is not an integer", field=key, value=text, limit="integer"
            ) from None
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise InvalidURL("option out of range", field=key, value=value, limit=f"{lo}..{hi}")
        return value

    def pop_float(self, key: str, default: float, lo: float | None = None,
                  hi: float | None = None) -> float:
        if key not in self.options:
            return default
        text = self.options.pop(key)
        try:
            value = float(text)
        except ValueError:
            raise InvalidURL(
                "option is not a number", field=key, value=text, limit="number"
            ) from None
        if not math.isfinite(value) or (lo is not None and value < lo) or (
                hi is not None and value > hi):
            raise InvalidURL("option out of range", field=key, value=value,
                             limit=f"{lo if lo is not None else '-inf'}.."
                                   f"{hi if hi is not None else 'inf'}, finite")
        return value

    def pop_str(self, key: str, default: str, choices: tuple[str, ...] | None = None) -> str:
        value = self.options.pop(key, default)
        if choices is not None and value not in choices:
            raise InvalidURL("option has an unknown value", field=key, value=value, limit=choices)
        return value

    def reject_unknown(self) -> None:
        if self.options:
            key = sorted(self.options)[0]
            raise InvalidURL(
                f"unknown option for {self.scheme}://", field=key, value=self.options[key]
            )


def parse_url(url: str) -> DeviceURL:
    if not isinstance(url, str) or "://" not in url:
        raise InvalidURL(
            "device URL must look like scheme://...", field="url", value=url, limit=sorted(BACKENDS)
        )
    try:
        parts = urlsplit(url)
    except ValueError as e:   # an unclosed IPv6 bracket, a port out of range
        raise InvalidURL(f"malformed device URL: {e}", field="url", value=url) from None
    scheme = parts.scheme.lower()
    if scheme not in BACKENDS:
        raise InvalidURL("unknown device URL scheme", field="scheme", value=scheme,
                         limit=sorted(BACKENDS))
    try:
        query = parts.query
        options = dict(parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)))
    except ValueError:
        raise InvalidURL("malformed query string", field="url", value=url) from None
    return DeviceURL(url, scheme, parts.netloc, parts.path, options)


def default_url() -> str:
    return os.environ.get("DVSDK_DEVICE") or "sim://"


def open_device(url: str | None = None) -> Device:
    """Open the device named by ``url`` (default ``$DVSDK_DEVICE``, else ``sim://``)."""
    url = url or default_url()
    parsed = parse_url(url)
    module_name, _, attr = BACKENDS[parsed.scheme].partition(":")
    module = importlib.import_module(module_name)
    factory: Any = module
    for name in attr.split("."):
        factory = getattr(factory, name)
    return factory(url)
