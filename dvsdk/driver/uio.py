"""The board backend: DV700 registers through UIO, DMA memory from u-dma-buf.

URL (linux-dma.md §5.1-5.2, dv700-interface.md §10)::

    uio://[?sysfs=/sys&dev=/dev&dma=udmabuf0&board=0&system=CONV,MX,IPU
            &timeout=2.0&lock=/run/lock&clock_mhz=300&cache=1&sync=auto&init=1&kick=auto]

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
init        1 = at open do the kick protocol's probe writes (default): 0x177654 to
            conv 0x144, then 1 to 0x40C (direct) or the IPI's IDR, ISR, IER, IER
            = 0x100 (r5)
kick        ``auto`` (default): ``r5`` when the board exposes the R5 kick's
            ``ipi`` and ``shm`` windows (discovery.py), else ``direct``;
            ``r5`` / ``direct`` force one (:mod:`dvsdk.driver.kick`, §10.4)
=========== ==================================================================

Exclusive access: an flock per UIO node (:mod:`.devlock`).  Interrupts: the UIO file
protocol (:mod:`.irqline`).
"""

from __future__ import annotations

import mmap
import os
import time
from dataclasses import dataclass

from ..errors import DeviceError, DeviceNotFound, DeviceTimeout, DvsdkError, InvalidURL
from ..hw import quirks
from . import convid
from .device import (
    MAX_TIMEOUT,
    UNITS,
    Device,
    DeviceInfo,
    DmaBuffer,
    check_timeout,
    parse_url,
)
from .devlock import DeviceLock, default_lock_dir
from .discovery import (
    CONV_FREQ_ATTR,
    R5_DEFAULT_PHYS,
    Dv700Board,
    Inventory,
    UdmabufNode,
    UioNode,
    discover,
    open_node,
)
from .irqline import IrqLine
from .kick import KICK_PROTOCOLS, protocol
from .mmio import (
    IRQ_ACK_VALUE,
    IRQ_PENDING_MASK,
    IRQ_REG,
    SHM_MAP_BYTES,
    SNAPSHOT_REGS,
    MmioWindow,
    mmap_uio_map,
)
from .regdump import describe_registers
from .udmabuf import UdmaBufRegion, open_dma_heap

DEFAULT_TIMEOUT = 2.0


# -- the kick protocol ------------------------------------------------------------------
R5Windows = dict[str, tuple[UioNode | UdmabufNode, str]]


def choose_kick(requested: str, windows: R5Windows) -> tuple[str, str]:
    """The kick protocol for a board exposing ``windows`` (``Inventory.r5_windows``) and
    why: ``r5`` when both the IPI and the shared memory are there, else ``direct`` (a
    bitstream without the R5 firmware, §10.4); ``requested`` ``r5``/``direct`` forces it
    (``r5`` without its windows is DeviceNotFound)."""
    found = {w: why for w, (_, why) in windows.items()}
    if requested == "direct":
        return "direct", "kick=direct was asked for"
    if "ipi" in found and "shm" in found:
        return "r5", (f"the R5 kick's windows are there: ipi = {found['ipi']}, shm = "
                      f"{found['shm']}" + (" (kick=r5 asked for)" if requested == "r5" else ""))
    missing = [w for w in ("ipi", "shm") if w not in found]
    if requested == "r5":
        raise DeviceNotFound(
            f"kick=r5 but the board exposes no {' and no '.join(missing)} window",
            field="kick", value="r5", limit="UIO nodes named ipi and shm (or reserved "
            f"memory for shm), or at {R5_DEFAULT_PHYS['ipi']:#x} / "
            f"{R5_DEFAULT_PHYS['shm']:#x}", hint="add the device tree's ipi and shm nodes "
            "as generic-uio (README 'Using a real board'), or use kick=direct")
    return "direct", (f"no {' or '.join(missing)} window: the board has no R5 kick, so the "
                      "direct kick of bitstreams before March 2019")


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
                 init: bool = True, url: str = "uio://", kick: str = "auto",
                 hw_date: int = 0) -> None:
        self.url = url
        self.hw_date = hw_date
        self.r5_windows = inventory.r5_windows()
        self._kick, self.kick_reason = choose_kick(kick, self.r5_windows)
        self.board = board
        self.inventory = inventory
        self.timeout = timeout
        self.clock_mhz = clock_mhz
        self._locks: list[DeviceLock] = []
        self._mapped: dict[str, _Mapped] = {}
        self._windows: dict[str, MmioWindow] = {}
        #: (unit, offset) and (unit, offset, count) found valid: their accesses go straight
        #: to the window's words (emptied first thing at close)
        self._checked: set[tuple] = set()
        self._irq: dict[str, IrqLine] = {}
        self._pending: set[str] = set()
        self._shm_buf: tuple[int, mmap.mmap] | None = None  # SHM as reserved memory
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
        kick = u.pop_str("kick", "auto", choices=("auto",) + KICK_PROTOCOLS)
        try:  # no register tells a bitstream's date: the URL may (dvsdk.hw.quirks)
            hw_date = quirks.parse_hw_version(u.pop_str("hw_version", ""))
        except DvsdkError as e:
            raise InvalidURL(e.message, field="hw_version", value=e.value,
                             limit=e.limit) from None
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
                   clock_mhz=clock, cache=cache, sync=sync, init=init, url=url, kick=kick,
                   hw_date=hw_date)

    @property
    def kick(self) -> str:
        return self._kick

    def _open(self, dma: str, lock_dir: str, cache: bool, sync: str) -> None:
        extra = [self.r5_windows[w][0] for w in ("ipi", "shm") if self._kick == "r5"]
        nodes = self.board.nodes + [n for n in extra if isinstance(n, UioNode)]
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
        if self._kick == "r5":
            self._open_r5()
        self.dma = UdmaBufRegion(self.inventory.find_udmabuf(dma), cached=cache, sync=sync)

    def _open_r5(self) -> None:
        """Map the IPI channel (its UIO interrupt is the completion) and the first
        ``map_bytes`` of the shared memory (a UIO map, or reserved memory behind a
        u-dma-buf opened uncached so the R5 sees the words at once)."""
        for window in ("ipi", "shm"):
            node = self.r5_windows[window][0]
            size = 0x1000 if window == "ipi" else SHM_MAP_BYTES
            if isinstance(node, UioNode):
                m = self._mapped[node.sys_name]
                umap = node.maps[0]
                size = min(size, umap.size)
                try:
                    m.maps[umap.index] = mmap_uio_map(m.fd, umap.index, umap.offset, size)
                except (OSError, ValueError) as e:
                    raise DeviceError(f"cannot mmap the {window} window {node.dev_path}: {e}",
                                      field="map", value=umap.index) from None
                self._windows[window] = MmioWindow(m.maps[umap.index], umap.offset, size,
                                                   window)
                if window == "ipi":
                    self._irq["ipi"] = IrqLine(node, m.fd)
            else:  # the SHM as a u-dma-buf of reserved memory
                fd = open_node(node.dev_path, os.O_RDWR | os.O_SYNC | os.O_CLOEXEC)
                try:
                    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                except (OSError, ValueError) as e:
                    os.close(fd)
                    raise DeviceError(f"cannot mmap the shm window {node.dev_path}: {e}",
                                      field="dev", value=node.dev_path) from None
                self._shm_buf = (fd, mm)
                self._windows[window] = MmioWindow(mm, 0, size, window)

    def _line(self, node: UioNode) -> IrqLine:
        for line in self._irq.values():
            if line.node.sys_name == node.sys_name:
                return line  # combined node: one line shared by its units
        return IrqLine(node, self._mapped[node.sys_name].fd)

    def _init_registers(self) -> None:
        """What the kernel driver does at probe/open (§10.4, §10.10): the kick protocol's
        probe writes, then every unit's interrupt acknowledged."""
        if "conv" in self._windows:
            protocol(self._kick).on_open(self)
        self._ack_all()

    def _ack_all(self) -> None:
        lines = list({id(v): v for v in self._irq.values()}.values())
        for line in lines:  # let running waiters finish (they are bounded by their timeout)
            line.lock.acquire()
        try:
            for unit in self._windows:  # (the R5 owns conv's 0x420; on_open cleared the IPI)
                if unit in ("ipu", "maximizer") or (unit == "conv" and self._kick == "direct"):
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
        return tuple(u for u in self._windows if u in UNITS)

    def _window(self, unit: str, offset: int) -> MmioWindow:
        self.check_reg(unit, offset)
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        win = self._windows.get(unit)
        if win is None:
            raise DeviceNotFound(f"this DV700 has no {unit} unit", field="unit", value=unit,
                                 limit=self.units)
        return win

    # Each access is checked the first time its (unit, offset) comes by; the driver uses a
    # few dozen registers, so after the first kick an access is a set lookup and one
    # aligned 32-bit load or store (a kick makes ~25: on a board's CPU the checks were
    # two thirds of a segment's Python, benchmarks/bench_bytecodes.py).
    # (The cache holds plain ints only: a float or an np.integer equal to a checked offset
    # would match its key; those always take the checked path.)
    # (An unhashable unit, a list say, makes the lookup raise TypeError: the checked path
    # then refuses it with InvalidArgument as on a first access.)
    def read32(self, unit: str, offset: int) -> int:
        try:
            if offset.__class__ is int and (unit, offset) in self._checked:
                return int(self._windows[unit].words[offset >> 2])
        except TypeError:
            pass
        value = self._window(unit, offset).read32(offset)
        if offset.__class__ is int:
            self._checked.add((unit, offset))
        return value

    def write32(self, unit: str, offset: int, value: int) -> None:
        try:
            if offset.__class__ is int and (unit, offset) in self._checked \
                    and value.__class__ is int and 0 <= value <= 0xFFFFFFFF:
                self._windows[unit].words[offset >> 2] = value
                return
        except TypeError:
            pass
        self._window(unit, offset).write32(offset, value)
        if offset.__class__ is int:
            self._checked.add((unit, offset))

    def read_words(self, unit: str, offset: int, count: int) -> list[int]:
        """``count`` registers from ``offset``, each an aligned 32-bit load (``tolist`` of
        a ``uint32`` view loads element by element, as :mod:`.mmio` says of scalars)."""
        plain = offset.__class__ is int and count.__class__ is int
        try:
            if plain and (unit, offset, count) in self._checked:
                return self._windows[unit].words[offset >> 2:(offset >> 2) + count].tolist()
        except TypeError:
            pass
        words = super().read_words(unit, offset, count)
        if plain:
            self._checked.add((unit, offset, count))
        return words

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
        try:
            checked = (unit, 0) in self._checked  # (an open device with that unit)
        except TypeError:  # an unhashable unit: refused by the check
            checked = False
        if not checked:
            self._window(unit, 0)
            self._checked.add((unit, 0))
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
                flagged = [u for u in shared
                           if self._windows[u].read32(IRQ_REG[u]) & IRQ_PENDING_MASK[u]]
                if flagged:
                    line.flags_read_back = True
                    self._pending.update(flagged)
                elif not line.flags_read_back:
                    self._pending.add(unit)  # flags unreadable here: the event is ours
                # else: an event whose flags were all acknowledged already (two raises
                # while the line was masked, both attributed by the first): not ours
            self._pending.discard(unit)
            self._ack(unit)
            for other in list(self._pending):  # ack flags of units that stay pending
                if self._irq[other] is line:
                    self._ack(other)
        finally:
            line.lock.release()

    def _ack(self, unit: str) -> None:
        """Acknowledge ``unit``'s interrupt: write 0 (units, §10.5), or the channel bit
        to the IPI's ISR when it is set (write-1-to-clear, §10.4)."""
        if unit == "ipi" and not self.read32(unit, IRQ_REG[unit]) & IRQ_PENDING_MASK[unit]:
            return
        self.write32(unit, IRQ_REG[unit], IRQ_ACK_VALUE[unit])

    def _timeout(self, unit: str, timeout: float, hint: str) -> DeviceTimeout:
        regs = self.snapshot(unit)
        return DeviceTimeout(f"no {unit} interrupt within {timeout:g} s: "
                             f"{describe_registers(unit, regs)}", registers=regs,
                             field="timeout", value=timeout, hint=hint)

    def snapshot(self, unit: str | None = None) -> dict[str, int]:
        """Registers worth seeing after a hang: conv stream/kick/irq + counters, the unit's."""
        out: dict[str, int] = {}
        related = ["shm", "ipi"] if unit == "ipi" else ([unit] if unit else [])
        for u in dict.fromkeys(["conv"] + related):
            if u in self._windows:
                for off, val in self._windows[u].snapshot(SNAPSHOT_REGS[u]).items():
                    out[f"{u}:{off:#05x}"] = val
        if unit in self._irq:
            line = self._irq[unit]
            out["irq_seen"] = line.seen
            out["irq_events"] = line.node.event_count() or 0
        return out

    def info(self) -> DeviceInfo:
        """The conv identity from the register map of this board's kick (pre-R5 bitstreams
        keep it elsewhere than R5 ones: :mod:`dvsdk.driver.convid`)."""
        conv = self._windows.get("conv")
        ident = convid.read_identity(conv.read32, self._kick) if conv is not None else {}
        ub = ident.get("ub_size", 0)
        dt_ub = self.board.units["conv"].node.ubuf_size if conv is not None else None
        freq, clock_src = self.clock()
        return DeviceInfo(
            ub_size=ub or (dt_ub or 0),
            mac_num=ident.get("mac_num", 0),
            conv_freq=freq,
            hw_version=ident.get("hw_version", 0),
            max_input_size=ident.get("max_input_size", 0),
            svn_version=ident.get("svn_version", 93),
            hw_date=self.hw_date,
            backend="uio",
            units=self.units,
            simulated=False,
            dma_size=self.dma.size if self.dma else 0,
            kick=self._kick,
            extra={
                "kick_reason": self.kick_reason,
                "register_map": convid.register_map(self._kick),
                "r5_windows": {w: why for w, (_, why) in self.r5_windows.items()},
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

    def set_clock(self, mhz: int) -> int:
        """Write the kernel module's ``conv_freq`` where the board has one (§10.9)."""
        from .kmod import write_conv_freq

        return write_conv_freq(os.path.dirname(os.path.join(self.inventory.sysfs,
                                                            CONV_FREQ_ATTR)), mhz)

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
        self._checked.clear()
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
        if self._shm_buf is not None:
            fd, mm = self._shm_buf
            try:
                mm.close()
            except BufferError:
                pass
            os.close(fd)
            self._shm_buf = None
        for lock in reversed(self._locks):
            lock.release()
        self._locks.clear()

    def __repr__(self) -> str:
        return f"<UioDevice {self.board.describe()} dma={self.dma.name if self.dma else None}>"


