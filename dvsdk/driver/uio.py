"""The board backend: DV700 registers through UIO, DMA memory from u-dma-buf.

URL (linux-dma.md §5.1-5.2, dv700-interface.md §10)::

    uio://[?sysfs=/sys&dev=/dev&dma=udmabuf0&board=0&system=CONV,MX,IPU
            &timeout=2.0&lock=/run/lock&clock_mhz=300&cache=1&sync=auto&init=1]

=========== ==================================================================
option      meaning
=========== ==================================================================
sysfs       sysfs root to walk instead of pyudev (tests, chroots); default live
dev         where device nodes live (default ``/dev``)
dma         u-dma-buf name (``udmabuf0``/``dv700-dma0``; default: the first);
            ``heap:<name>`` names a dma-heap and is refused (§5.3)
board       index among the DV700s found (default 0)
system      override the DT ``system`` property of a combined node
timeout     default interrupt timeout in seconds (default 2.0, the kernel's
            ``DRM_WAIT_TIMEOUT``, §10.5)
lock        directory of the lock files (default ``/run/lock``, else ``/tmp``)
clock_mhz   conv clock when the kernel sysfs ``conv_freq`` is absent (§10.9)
cache       1 = cached mapping + explicit syncs (default); 0 = ``O_SYNC``
sync        cache maintenance: ``auto`` (ioctl, then sysfs), ``ioctl``,
            ``sysfs``, ``none``
init        1 = at open write 0x177654 to conv 0x144 and 1 to 0x40C (default)
=========== ==================================================================

Exclusive access: ``flock(LOCK_EX|LOCK_NB)`` on ``<lock>/dvsdk-<uioN>.lock`` per
UIO node, the file holding the holder's pid.  The kernel drops a flock when its
holder dies, so a crash never leaves the board locked.

Interrupts (UIO file protocol, §5.1): writing the 4-byte value 1 unmasks, poll
reports an event, reading 4 bytes returns the u32 event count.  UIO ignores the
file position, so we use ``os.pwrite``/``os.pread`` at fixed offsets beyond the
register maps (:data:`IRQ_CTRL_OFFSET`, :data:`IRQ_COUNT_OFFSET`).  On the real
device that is the same as write/read; on a fake board made of regular files it
keeps the unmask word and the event counter out of the register maps (a plain
``write`` would land on register 0 at the file position).  A regular file is
always "readable", so the wait loop treats an unchanged count as "not yet" and
sleeps 100 us growing to 2 ms before retrying; real UIO blocks in ``poll``.
"""

from __future__ import annotations

import errno
import fcntl
import math
import mmap
import os
import select
import struct
import threading
import time
from dataclasses import dataclass

from ..errors import (
    DeviceBusy,
    DeviceError,
    DeviceLost,
    DeviceNotFound,
    DeviceTimeout,
)
from .device import MAX_TIMEOUT, Device, DeviceInfo, DmaBuffer, check_timeout, parse_url
from .discovery import (
    Dv700Board,
    Inventory,
    UioNode,
    discover,
    open_node,
    parse_int,
    read_attr,
)
from .mmio import (
    CONV_CMDLIST_MODE,
    CONV_HW_VERSION,
    CONV_MAC_GROUPS,
    CONV_MAX_INPUT,
    CONV_PERF_CFG,
    CONV_UBUF_SIZE,
    IRQ_REG,
    PERF_CFG_VALUE,
    SNAPSHOT_REGS,
    MmioWindow,
    mmap_uio_map,
)
from .regdump import describe_registers
from .udmabuf import UdmaBufRegion, open_dma_heap

#: fake-board layout: the unmask word and the event counter, past any register map
IRQ_CTRL_OFFSET = 0x100000
IRQ_COUNT_OFFSET = IRQ_CTRL_OFFSET + 8
IRQ_FILE_SIZE = IRQ_COUNT_OFFSET + 8
DEFAULT_TIMEOUT = 2.0
DEFAULT_LOCK_DIRS = ("/run/lock", "/tmp")
_UNMASK = struct.pack("<I", 1)
_SLEEP_MIN, _SLEEP_MAX = 100e-6, 2e-3
_POLL_BROKEN = select.POLLERR | select.POLLHUP | select.POLLNVAL


# -- exclusive access -----------------------------------------------------------------
def default_lock_dir() -> str:
    for d in DEFAULT_LOCK_DIRS:
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return DEFAULT_LOCK_DIRS[-1]


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class DeviceLock:
    """An flock on ``path`` recording the holder's pid (released by the kernel on exit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def _open(self) -> int:
        # No O_CREAT on an existing file: fs.protected_regular refuses O_CREAT on
        # another user's file in a sticky world-writable directory such as /run/lock.
        for _ in range(5):
            try:
                return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                pass
            except PermissionError:
                return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # lock works read-only
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                try:
                    os.fchmod(fd, 0o666)  # let the next user record their pid despite umask
                except OSError:
                    pass
                return fd
            except FileExistsError:
                continue
        raise DeviceError("cannot create lock file", field="lock", value=self.path)

    def holder(self) -> int | None:
        text = read_attr(self.path)
        return parse_int(text) if text else None

    def acquire(self) -> None:
        try:
            fd = self._open()
        except OSError as e:
            raise DeviceError(f"cannot open lock file {self.path}: {e}", field="lock",
                              value=self.path, hint="set lock=<writable dir> in the URL") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DeviceError(f"flock failed on {self.path}: {e}", field="lock") from None
            pid = None
            for _ in range(20):  # the holder may not have written its pid yet
                pid = self.holder()
                if pid:
                    break
                time.sleep(0.005)
            who = f"pid {pid}" if pid else "another process"
            name = _process_name(pid) if pid else ""
            if pid == os.getpid():
                who += " (this process)"
            elif name:
                who += f" ({name})"
            raise DeviceBusy(f"DV700 is in use by {who}", pid=pid, field="lock",
                             value=self.path,
                             hint="wait for it or stop it; a crashed holder releases the lock"
                             ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # read-only lock file: exclusion still holds, only the pid is missing
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


# -- interrupts ---------------------------------------------------------------------
class IrqLine:
    """The interrupt of one UIO node: unmask, wait for the count to move, remember it."""

    def __init__(self, node: UioNode, fd: int) -> None:
        self.node = node
        self.fd = fd
        self.positional = True  # pread/pwrite; plain read/write if the file refuses offsets
        self.can_unmask = True
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN | select.POLLPRI)
        #: one waiter at a time: poll objects refuse concurrent use, and the count seen
        #: and the device's pending set change together
        self.lock = threading.Lock()
        #: a unit's interrupt register was seen non-zero on this (shared) line
        self.flags_read_back = False
        count = self.read_count()
        if count is None:
            count = node.event_count() or 0
        self.seen = count

    def read_count(self) -> int | None:
        """The u32 event count, or None if nothing new (real UIO, non-blocking)."""
        try:
            if self.positional:
                data = os.pread(self.fd, 4, IRQ_COUNT_OFFSET)
            else:
                data = os.read(self.fd, 4)
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno == errno.ESPIPE and self.positional:
                self.positional = False
                return self.read_count()
            raise DeviceError(f"reading interrupt count of {self.node.dev_path}: {e}",
                              field="irq", value=self.node.dev_path) from None
        return struct.unpack("<I", data)[0] if len(data) == 4 else None

    def unmask(self) -> None:
        if not self.can_unmask:
            return
        try:
            if self.positional:
                os.pwrite(self.fd, _UNMASK, IRQ_CTRL_OFFSET)
            else:
                os.write(self.fd, _UNMASK)
        except OSError as e:
            if e.errno == errno.ESPIPE and self.positional:
                self.positional = False
                self.unmask()
            elif e.errno == errno.ENOSYS:  # driver without irqcontrol: the line stays enabled
                self.can_unmask = False
            elif e.errno == errno.EIO:
                raise DeviceError(f"{self.node.dev_path} has no interrupt", field="irq",
                                  value=self.node.name,
                                  hint="give the DT node an 'interrupts' property") from None
            else:
                raise DeviceError(f"unmasking {self.node.dev_path}: {e}", field="irq") from None

    def consume(self) -> bool:
        """True (and remember it) if the count moved since last seen."""
        count = self.read_count()
        if count is not None and count != self.seen:
            self.seen = count
            return True
        return False

    def wait(self, deadline: float) -> bool:
        """Unmask, then wait until the count moves or ``deadline`` (monotonic) passes."""
        self.unmask()
        if self.consume():
            return True
        delay = _SLEEP_MIN
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready = self.poller.poll(max(1, math.ceil(remaining * 1000)))
            if any(ev & _POLL_BROKEN for _, ev in ready):
                raise DeviceLost(f"{self.node.dev_path} went away while waiting",
                                 field="irq", value=self.node.dev_path)
            if ready and self.consume():
                return True
            if ready:  # regular file (fake board) or spurious wake-up: back off briefly
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, _SLEEP_MAX)


# -- the device -----------------------------------------------------------------------
@dataclass
class _Mapped:
    node: UioNode
    fd: int
    maps: dict[int, mmap.mmap]


class UioDevice(Device):
    """A DV700 on the board: UIO register windows + u-dma-buf memory (module docstring)."""

    def __init__(self, board: Dv700Board, inventory: Inventory, *, dma: str = "",
                 timeout: float = DEFAULT_TIMEOUT, lock_dir: str | None = None,
                 clock_mhz: int = 0, cache: bool = True, sync: str = "auto",
                 init: bool = True, url: str = "uio://") -> None:
        self.url = url
        self.board = board
        self.inventory = inventory
        self.timeout = timeout
        self.clock_mhz = clock_mhz
        self._locks: list[DeviceLock] = []
        self._mapped: dict[str, _Mapped] = {}
        self._windows: dict[str, MmioWindow] = {}
        self._irq: dict[str, IrqLine] = {}
        self._pending: set[str] = set()
        self.dma: UdmaBufRegion | None = None
        self.closed = False
        try:
            self._open(dma, lock_dir or default_lock_dir(), cache, sync)
            if init:
                self._init_registers()
        except BaseException:
            self.close()
            raise

    # -- construction ---------------------------------------------------------
    @classmethod
    def from_url(cls, url: str) -> UioDevice:
        u = parse_url(url)
        sysfs = u.pop_str("sysfs", "") or None
        dev = u.pop_str("dev", "/dev")
        dma = u.pop_str("dma", "")
        index = u.pop_int("board", 0, lo=0)
        system_text = u.pop_str("system", "")
        timeout = u.pop_float("timeout", DEFAULT_TIMEOUT, lo=0.0, hi=MAX_TIMEOUT)
        lock_dir = u.pop_str("lock", "") or None
        clock = u.pop_int("clock_mhz", 0, lo=0, hi=10000)
        cache = bool(u.pop_int("cache", 1, lo=0, hi=1))
        sync = u.pop_str("sync", "auto", choices=("auto", "ioctl", "sysfs", "none"))
        init = bool(u.pop_int("init", 1, lo=0, hi=1))
        u.reject_unknown()
        system = tuple(t.strip().upper() for t in system_text.split(",") if t.strip()) or None
        inv = discover(sysfs, dev)
        boards = inv.boards(system)
        if not boards:
            others = ", ".join(f"{n.sys_name}={n.name!r}" for n in inv.other_uio) or "none"
            raise DeviceNotFound(
                "no DV700 UIO device found",
                field="sysfs", value=f"{inv.sysfs}/class/uio",
                limit=f"UIO name dv700[-unit] or DT compatible dmp,dv700 (other UIO: {others})",
                hint="run 'dvsdk doctor' for a diagnosis")
        if index >= len(boards):
            raise DeviceNotFound("no such DV700 board", field="board", value=index,
                                 limit=f"0..{len(boards) - 1}")
        if dma.startswith("heap:"):
            name = dma[5:]
            heap = next((h for h in inv.heaps if h.name == name), None)
            if heap is None:
                raise DeviceNotFound("no such dma-heap", field="dma", value=dma,
                                     limit=[h.name for h in inv.heaps])
            open_dma_heap(heap)
        return cls(boards[index], inv, dma=dma, timeout=timeout, lock_dir=lock_dir,
                   clock_mhz=clock, cache=cache, sync=sync, init=init, url=url)

    def _open(self, dma: str, lock_dir: str, cache: bool, sync: str) -> None:
        nodes = self.board.nodes
        for node in nodes:  # sorted by name: a stable order, no lock-order inversion
            lock = DeviceLock(os.path.join(lock_dir, f"dvsdk-{node.sys_name}.lock"))
            lock.acquire()
            self._locks.append(lock)
        for node in nodes:
            fd = open_node(node.dev_path, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            self._mapped[node.sys_name] = _Mapped(node, fd, {})
        for unit, win in self.board.units.items():
            m = self._mapped[win.node.sys_name]
            umap = win.node.maps[[x.index for x in win.node.maps].index(win.map_index)]
            if win.map_index not in m.maps:
                try:
                    m.maps[win.map_index] = mmap_uio_map(m.fd, umap.index, umap.offset, umap.size)
                except (OSError, ValueError) as e:
                    raise DeviceError(f"cannot mmap map{umap.index} of {win.node.dev_path}: {e}",
                                      field="map", value=umap.index) from None
            self._windows[unit] = MmioWindow(m.maps[win.map_index], umap.offset + win.offset,
                                             win.size, unit)
            self._irq[unit] = self._line(win.node)
        self.dma = UdmaBufRegion(self.inventory.find_udmabuf(dma), cached=cache, sync=sync)

    def _line(self, node: UioNode) -> IrqLine:
        for line in self._irq.values():
            if line.node.sys_name == node.sys_name:
                return line  # combined node: one line shared by its units
        return IrqLine(node, self._mapped[node.sys_name].fd)

    def _init_registers(self) -> None:
        """What the kernel driver does at probe/open (§10.4 history, §10.10)."""
        if "conv" in self._windows:
            self.write32("conv", CONV_PERF_CFG, PERF_CFG_VALUE)
            self.write32("conv", CONV_CMDLIST_MODE, 1)
        self._ack_all()

    def _ack_all(self) -> None:
        lines = list({id(v): v for v in self._irq.values()}.values())
        for line in lines:  # let running waiters finish (they are bounded by their timeout)
            line.lock.acquire()
        try:
            for unit in self._windows:
                self._windows[unit].write32(IRQ_REG[unit], 0)
            for line in lines:
                line.consume()  # forget events from before we owned the board
                line.unmask()
            self._pending.clear()
        finally:
            for line in lines:
                line.lock.release()

    # -- Device API ---------------------------------------------------------------
    @property
    def units(self) -> tuple[str, ...]:
        return tuple(self._windows)

    def _window(self, unit: str, offset: int) -> MmioWindow:
        self.check_reg(unit, offset)
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        win = self._windows.get(unit)
        if win is None:
            raise DeviceNotFound(f"this DV700 has no {unit} unit", field="unit", value=unit,
                                 limit=self.units)
        return win

    def read32(self, unit: str, offset: int) -> int:
        return self._window(unit, offset).read32(offset)

    def write32(self, unit: str, offset: int, value: int) -> None:
        self._window(unit, offset).write32(offset, value)

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        if self.dma is None or self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        return self.dma.alloc(nbytes, align, name, device=self)

    def leaks(self) -> list[DmaBuffer]:
        """DMA buffers allocated and not yet freed."""
        return list(self.dma.live()) if self.dma is not None else []

    def wait_irq(self, unit: str, timeout: float | None = None) -> None:
        """Wait for ``unit``'s completion interrupt, then ack it in the unit (§10.5).

        On a combined node the units share one line; after an event the units'
        interrupt registers (0x420 / 0x020) say whose it was [INFER: they read back
        non-zero while pending]; if none does, the event goes to the waiter, unless
        flags were seen before on this line: then it is a leftover of raises already
        attributed, and the wait goes on.

        Thread-safe: waiters on one line take turns (the time spent waiting for the line
        counts against ``timeout``); an event seen by one waiter for another unit of the
        line stays pending for that unit.
        """
        self._window(unit, 0)
        timeout = check_timeout(self.timeout if timeout is None else timeout)
        line = self._irq[unit]
        deadline = time.monotonic() + timeout
        if not line.lock.acquire(timeout=timeout):
            raise self._timeout(unit, timeout, "another thread kept the line busy")
        try:
            shared = [u for u, ln in self._irq.items() if ln is line]
            while unit not in self._pending:
                if not line.wait(deadline):
                    raise self._timeout(unit, timeout, "the engine may be hung; check the "
                                        "snapshot, then reset()")
                if len(shared) == 1:
                    self._pending.add(unit)
                    continue
                flagged = [u for u in shared if self._windows[u].read32(IRQ_REG[u])]
                if flagged:
                    line.flags_read_back = True
                    self._pending.update(flagged)
                elif not line.flags_read_back:
                    self._pending.add(unit)  # flags unreadable here: the event is ours
                # else: an event whose flags were all acknowledged already (two raises
                # while the line was masked, both attributed by the first): not ours
            self._pending.discard(unit)
            self._windows[unit].write32(IRQ_REG[unit], 0)
            for other in list(self._pending):  # ack flags of units that stay pending
                if self._irq[other] is line:
                    self._windows[other].write32(IRQ_REG[other], 0)
        finally:
            line.lock.release()

    def _timeout(self, unit: str, timeout: float, hint: str) -> DeviceTimeout:
        regs = self.snapshot(unit)
        return DeviceTimeout(f"no {unit} interrupt within {timeout:g} s: "
                             f"{describe_registers(unit, regs)}", registers=regs,
                             field="timeout", value=timeout, hint=hint)

    def snapshot(self, unit: str | None = None) -> dict[str, int]:
        """Registers worth seeing after a hang: conv stream/kick/irq + counters, the unit's."""
        out: dict[str, int] = {}
        for u in dict.fromkeys(["conv"] + ([unit] if unit else [])):
            if u in self._windows:
                for off, val in self._windows[u].snapshot(SNAPSHOT_REGS[u]).items():
                    out[f"{u}:{off:#05x}"] = val
        if unit in self._irq:
            line = self._irq[unit]
            out["irq_seen"] = line.seen
            out["irq_events"] = line.node.event_count() or 0
        return out

    def info(self) -> DeviceInfo:
        conv = self._windows.get("conv")
        regs = conv.snapshot((CONV_UBUF_SIZE, CONV_MAC_GROUPS, CONV_MAX_INPUT, CONV_HW_VERSION)) \
            if conv is not None else {}
        ub = regs.get(CONV_UBUF_SIZE, 0)
        dt_ub = self.board.units["conv"].node.ubuf_size if conv is not None else None
        freq, clock_src = self.clock()
        return DeviceInfo(
            ub_size=ub or (dt_ub or 0),
            mac_num=regs.get(CONV_MAC_GROUPS, 0) * 72,
            conv_freq=freq,
            hw_version=regs.get(CONV_HW_VERSION, 0) & 0xFFFF,
            max_input_size=regs.get(CONV_MAX_INPUT, 0),
            backend="uio",
            units=self.units,
            simulated=False,
            dma_size=self.dma.size if self.dma else 0,
            extra={
                "mode": self.board.mode,
                "windows": self.board.describe(),
                "uio": [n.dev_path for n in self.board.nodes],
                "dma": self.dma.name if self.dma else "",
                "dma_phys": self.dma.phys if self.dma else 0,
                "dma_coherent": self.dma.coherent if self.dma else False,
                "sync_method": self.dma.sync_method if self.dma else "",
                "ub_size_source": "register" if ub else ("device-tree" if dt_ub else "none"),
                "clock_source": clock_src,
                "discovery": self.inventory.source,
            },
        )

    def clock(self) -> tuple[int, str]:
        """conv clock in MHz and where it came from: kernel sysfs, URL, or unknown (0)."""
        freq = self.inventory.conv_freq()
        if freq:
            return freq, "sysfs"
        if self.clock_mhz:
            return self.clock_mhz, "url"
        return 0, "unknown"

    def reset(self) -> None:
        """Ack every interrupt, forget pending events, re-apply the open-time setup.

        The DV700 has no documented abort register (§10): a truly hung engine
        needs the PL reset / bitstream reload, which is outside this driver.
        """
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        self._init_registers()

    def close(self) -> None:
        if self.closed and not self._mapped and not self._locks:
            return
        self.closed = True
        if self.dma is not None:
            self.dma.close()
            self.dma = None
        for win in self._windows.values():
            win.release()
        self._windows.clear()
        for line in {id(v): v for v in self._irq.values()}.values():
            try:
                line.poller.unregister(line.fd)
            except (KeyError, ValueError):
                pass
        self._irq.clear()
        for m in self._mapped.values():
            for mm in m.maps.values():
                try:
                    mm.close()
                except BufferError:
                    pass  # a caller still holds a register view
            os.close(m.fd)
        self._mapped.clear()
        for lock in reversed(self._locks):
            lock.release()
        self._locks.clear()

    def __repr__(self) -> str:
        return f"<UioDevice {self.board.describe()} dma={self.dma.name if self.dma else None}>"


