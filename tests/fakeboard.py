"""A fake DV700 board made of real files, for the ``uio://`` backend.

:func:`make_fake_board` builds under a directory:

* a sysfs tree shaped like the kernel's (linux-dma.md §5.1-5.2): platform devices
  with ``of_node/{compatible,system,ubuf-size}``, UIO class devices
  ``uioN/{name,version,event,maps/map0/{addr,size,offset,name},device}``,
  ``u-dma-buf/udmabuf0/{phys_addr,size,dma_coherent,sync_*,driver_version}``,
  ``class/*`` symlinks, an ``fpga_manager`` in state ``operating``;
* ``dev/uioN`` as regular files holding the register map(s) at offset 0 and the
  interrupt words at :data:`~dvsdk.driver.irqline.IRQ_CTRL_OFFSET` /
  :data:`~dvsdk.driver.irqline.IRQ_COUNT_OFFSET`; ``dev/udmabuf0`` as a sparse file;
* a thread that plays the hardware on shared ``mmap`` s of those files: it polls
  the start registers (``START_REGS``), clears a non-zero one and calls
  ``core.start(unit)`` of the simulator core (``dvsdk.sim.engine.Dv700Core``);
  the core's ``on_irq`` makes the interrupt pending, and it is delivered the way
  ``uio_pdrv_genirq`` does: count it, mask the line until the driver writes 1;
* with ``kick="r5"`` (a board running DMP's R5 firmware, §10.4) two more UIO devices,
  ``ipi`` (the IPI channel at 0xFF340000, with its interrupt) and ``shm`` (the shared
  memory at 0x7ED00000), as a device-tree overlay binding those nodes to generic-uio
  makes them; the simulator core models the R5.  Its IPI registers live in the core:
  the file only shows them.  Each poll the thread hands the write-only words the driver
  wrote (``IDR``, ``IER``, ``TRIG``, in the probe's order) to the core and zeroes them,
  then copies ``ISR``/``IMR``/``OBS`` back.  A file cannot show a write of the value a
  word already holds, so the write-1-to-clear acknowledge of ``ISR`` is taken as done
  when the next trigger comes (the simulator, ``sim://?kick=r5``, models it exactly).

Only the board is fake; the driver under test opens, maps, polls and locks the
files for real.
"""

from __future__ import annotations

import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import numpy as np

from dvsdk.driver.discovery import DV700_COMPATIBLE, UNIT_WINDOW
from dvsdk.driver.irqline import IRQ_COUNT_OFFSET, IRQ_CTRL_OFFSET, IRQ_FILE_SIZE
from dvsdk.driver.mmio import CONV_IRQ, UNIT_IRQ
from dvsdk.hw.spec import SPEC
from dvsdk.sim import core as sim_core

from .abi_facts import FACTS


def _identity(kick: str, ubuf_size: int, mac_groups: int, max_input_size: int,
              hw_version: int) -> list[tuple[int, int]]:
    """Where DMP's kernel reads the conv identity (its register offsets from DMP's facts,
    ``tests/data/dmp_abi_facts.json``, not dvsdk's spec): the R5 kernel (2defa8b) reads the
    UBUF in bytes and MACs in groups of 72; the 2019-02 kernel (2994b64), which kicks the
    conv block directly, the UBUF in KiB at 0x148 and the MAC count itself at 0x14C."""
    if kick == "r5":
        r = FACTS["r5_conv_registers"]
        return [(r["ubuf_size_bytes"], ubuf_size), (r["mac_groups_x72"], mac_groups),
                (r["max_input_size"], max_input_size), (r["hw_version"], hw_version)]
    r = FACTS["pre_r5_conv_registers"]
    return [(r["ubuf_size_kib"], ubuf_size >> 10), (r["mac_num"], mac_groups * 72),
            (r["max_input_size"], max_input_size), (r["hw_version"], hw_version),
            (r["svn_version"], 93)]


DEFAULT_BASE = 0xA000_0000
DEFAULT_DMA_PHYS = 0x7000_0000
#: physical order of the sub-units for system = "CONV,MX,IPU" (dv700-interface.md §10.11)
PHYS_ORDER = ("conv", "maximizer", "ipu")
SYSTEM_TOKEN = {"conv": "CONV", "maximizer": "MX", "ipu": "IPU"}
FALLBACK_START_REGS = {"conv": 0x408, "ipu": 0x2A0, "maximizer": 0x008}
POLL_INTERVAL = 100e-6
#: the R5 kick's UIO devices: (name, physical address, map size) (§10.11 defaults)
R5_NODES = {w: (w, int(SPEC.unit(w)["default_phys"]), int(SPEC.unit(w)["size"]))
            for w in ("ipi", "shm")}
IPI = {n: SPEC.reg("ipi", n) // 4 for n in SPEC.unit("ipi")["registers"]}


class StubCore:
    """Stand-in for ``dvsdk.sim.engine.Dv700Core`` while the simulator does not exist.

    It computes nothing: a start raises the unit's interrupt as if the work were
    done (conv: as if the stream's last packet wrote 1 to 0x420).
    Used with ``core="stub"`` (interrupt plumbing tests) or if the simulator is absent.
    """

    def __init__(self, dram: np.ndarray, dram_base: int,
                 regs: dict[str, np.ndarray] | None = None, params: Any = None,
                 on_irq: Callable[[str], None] | None = None) -> None:
        self.dram = dram
        self.dram_base = dram_base
        self.regs = regs if regs is not None else {
            u: np.zeros(1024, np.uint32) for u in FALLBACK_START_REGS}
        self.on_irq = on_irq
        self.starts: list[str] = []

    def read_reg(self, unit: str, off: int) -> int:
        return int(self.regs[unit][off >> 2])

    def write_reg(self, unit: str, off: int, value: int) -> None:
        self.regs[unit][off >> 2] = value

    def start(self, unit: str) -> None:
        self.starts.append(unit)
        self.write_reg(unit, CONV_IRQ if unit == "conv" else UNIT_IRQ, 1)
        if self.on_irq is not None:
            self.on_irq(unit)


def load_engine() -> Any:
    """The simulator's ``dvsdk.sim.engine`` module, or None if it is not there."""
    try:
        from dvsdk.sim import engine
    except ImportError:
        return None
    return engine


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data)


def _link(link: Path, target: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


class _Node:
    """One fake UIO device: its file, mapping, unmask word and counter."""

    def __init__(self, sys_name: str, dev_path: Path, sys_dir: Path, units: list[str],
                 unit_offset: dict[str, int], map_size: int) -> None:
        self.sys_name = sys_name
        self.dev_path = dev_path
        self.sys_dir = sys_dir
        self.units = units
        self.unit_offset = unit_offset
        self.map_size = map_size
        self.pending = 0
        with open(dev_path, "wb") as f:
            f.truncate(IRQ_FILE_SIZE)
        self.fd = os.open(dev_path, os.O_RDWR)
        self.regs_mm = mmap.mmap(self.fd, map_size, mmap.MAP_SHARED)
        self.irq_mm = mmap.mmap(self.fd, IRQ_FILE_SIZE - IRQ_CTRL_OFFSET, mmap.MAP_SHARED,
                                offset=IRQ_CTRL_OFFSET)
        self.ctrl = np.frombuffer(self.irq_mm, np.uint32, 1, 0)
        self.count = np.frombuffer(self.irq_mm, np.uint32, 1, IRQ_COUNT_OFFSET - IRQ_CTRL_OFFSET)
        self.ctrl[0] = 1  # enabled after probe, as uio_pdrv_genirq leaves it

    def regs(self, unit: str) -> np.ndarray:
        return np.frombuffer(self.regs_mm, np.uint32, UNIT_WINDOW // 4, self.unit_offset[unit])

    def close(self) -> None:
        self.ctrl = self.count = np.zeros(1, np.uint32)
        for mm in (self.regs_mm, self.irq_mm):
            try:
                mm.close()
            except BufferError:
                pass
        os.close(self.fd)


class FakeBoard:
    """The fake board; build it with :func:`make_fake_board`."""

    def __init__(self, root: Path, *, dma_size: int, units: tuple[str, ...], mode: str,
                 dma_coherent: bool, base: int, dma_phys: int, ubuf_size: int,
                 mac_groups: int, hw_version: int, max_input_size: int,
                 conv_freq: int | None, decoy: bool, heaps: tuple[str, ...],
                 udmabuf_class: str, start: bool, core: str, kick: str) -> None:
        if mode not in ("per-unit", "combined"):
            raise ValueError(f"mode must be per-unit or combined, not {mode!r}")
        self.root = Path(root)
        self.sysfs = self.root / "sys"
        self.dev = self.root / "dev"
        self.run = self.root / "run"
        self.units = tuple(u for u in PHYS_ORDER if u in units)
        self.mode = mode
        self.dma_phys = dma_phys
        self.dma_size = dma_size
        self.errors: list[BaseException] = []
        self.irqs: dict[str, int] = dict.fromkeys(self.units, 0)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for d in (self.sysfs, self.dev, self.run):
            d.mkdir(parents=True, exist_ok=True)
        self.nodes: list[_Node] = []
        self._node_of: dict[str, _Node] = {}
        self.kick = kick
        self._build_uio(base, decoy)
        self._build_udmabuf(dma_coherent, udmabuf_class)
        for heap in heaps:
            _write(self.dev / "dma_heap" / heap, b"")
        _write(self.sysfs / "class" / "fpga_manager" / "fpga0" / "state", "operating\n")
        if conv_freq is not None:
            _write(self.sysfs / "class" / "dmp_dv" / "dv_conv" / "conv_freq", f"{conv_freq}\n")
        self.regs = {u: self._node_of[u].regs(u) for u in self.units}
        self._dma_fd = os.open(self.dev / "udmabuf0", os.O_RDWR)
        self._dma_mm = mmap.mmap(self._dma_fd, dma_size, mmap.MAP_SHARED)
        self.dram = np.frombuffer(self._dma_mm, np.uint8)
        engine = load_engine() if core != "stub" else None
        self.stub = engine is None
        self.core: Any
        if engine is not None:
            try:
                params = sim_core.SimParams(clock_mhz=conv_freq or 300, mac_num=mac_groups * 72,
                                          ub_size=ubuf_size, hw_version=hw_version,
                                          max_input_size=max_input_size, units=self.units,
                                          kick=kick)
            except (AttributeError, TypeError):
                params = None
            regs = dict(self.regs)
            if kick == "r5":  # the IPI's registers live in the core; shm is plain memory
                regs["shm"] = self._node_of["shm"].regs("shm")
            self.core = engine.Dv700Core(self.dram, dma_phys, regs=regs, params=params,
                                         on_irq=self._on_irq)
            if kick == "r5":
                self._mirror_ipi()
            self.start_regs = dict(sim_core.START_REGS)
        else:
            self.core = StubCore(self.dram, dma_phys, regs=self.regs, on_irq=self._on_irq)
            self.start_regs = dict(FALLBACK_START_REGS)
        if "conv" in self.regs:  # the identity, where DMP's kernel of this kick reads it
            for off, val in _identity(kick, ubuf_size, mac_groups, max_input_size,
                                      hw_version):
                if not self.regs["conv"][off >> 2]:
                    self.regs["conv"][off >> 2] = val
        query = {"sysfs": str(self.sysfs), "dev": str(self.dev), "lock": str(self.run),
                 "dma": "udmabuf0"}
        self.url = "uio://?" + urlencode(query, safe="/,")
        if start:
            self.start()

    # -- building -----------------------------------------------------------------
    def _platform(self, name: str, addr: int, system: str | None, ubuf: bool) -> Path:
        pdev = self.sysfs / "devices" / "platform" / "amba_pl@0" / f"{addr:x}.{name}"
        of = pdev / "of_node"
        _write(of / "compatible", DV700_COMPATIBLE.encode() + b"\0generic-uio\0")
        _write(of / "name", name.encode() + b"\0")
        if system:
            _write(of / "system", system.encode() + b"\0")
        if ubuf:
            _write(of / "ubuf-size", (640 * 1024).to_bytes(4, "big"))
        return pdev

    def _uio(self, index: int, pdev: Path, name: str, addr: int, size: int,
             map_name: str) -> Path:
        sys_dir = pdev / "uio" / f"uio{index}"
        _write(sys_dir / "name", f"{name}\n")
        _write(sys_dir / "version", "devicetree\n")
        _write(sys_dir / "event", "0\n")
        m = sys_dir / "maps" / "map0"
        _write(m / "addr", f"0x{addr:016x}\n")
        _write(m / "size", f"0x{size:016x}\n")
        _write(m / "offset", "0x0\n")
        _write(m / "name", f"{map_name}\n")
        _link(sys_dir / "device", pdev)
        _link(self.sysfs / "class" / "uio" / f"uio{index}", sys_dir)
        return sys_dir

    def _build_uio(self, base: int, decoy: bool) -> None:
        if self.mode == "combined":
            system = ",".join(SYSTEM_TOKEN[u] for u in self.units)
            size = UNIT_WINDOW * len(self.units)
            pdev = self._platform("dv700", base, system, ubuf=True)
            sys_dir = self._uio(0, pdev, "dv700", base, size, f"dv700@{base:x}")
            offsets = {u: i * UNIT_WINDOW for i, u in enumerate(self.units)}
            node = _Node("uio0", self.dev / "uio0", sys_dir, list(self.units), offsets, size)
            self.nodes.append(node)
            self._node_of = dict.fromkeys(self.units, node)
        else:
            for i, unit in enumerate(self.units):
                addr = base + PHYS_ORDER.index(unit) * UNIT_WINDOW
                name = f"dv700-{unit}"
                pdev = self._platform(name, addr, None, ubuf=unit == "conv")
                sys_dir = self._uio(i, pdev, name, addr, UNIT_WINDOW, f"{name}@{addr:x}")
                node = _Node(f"uio{i}", self.dev / f"uio{i}", sys_dir, [unit], {unit: 0},
                             UNIT_WINDOW)
                self.nodes.append(node)
                self._node_of[unit] = node
        if self.kick == "r5":
            for window, (name, addr, size) in R5_NODES.items():
                i = len(self.nodes)
                pdev = self.sysfs / "devices" / "platform" / "amba_pl@0" / f"{addr:x}.{name}"
                _write(pdev / "of_node" / "compatible", b"generic-uio\0")
                _write(pdev / "of_node" / "name", name.encode() + b"\0")
                sys_dir = self._uio(i, pdev, name, addr, size, f"{name}@{addr:x}")
                node = _Node(f"uio{i}", self.dev / f"uio{i}", sys_dir, [window], {window: 0},
                             UNIT_WINDOW)
                self.nodes.append(node)
                self._node_of[window] = node
        if decoy:  # an unrelated UIO device the discovery must ignore
            i = len(self.nodes)
            pdev = self.sysfs / "devices" / "platform" / "amba_pl@0" / "80010000.gpio"
            _write(pdev / "of_node" / "compatible", b"xlnx,xps-gpio-1.00.a\0generic-uio\0")
            self._uio(i, pdev, "gpio", 0x80010000, 0x1000, "gpio@80010000")
            with open(self.dev / f"uio{i}", "wb") as f:
                f.truncate(IRQ_FILE_SIZE)

    def _build_udmabuf(self, coherent: bool, cls: str) -> None:
        d = self.sysfs / "devices" / "virtual" / cls / "udmabuf0"
        for attr, value in (("phys_addr", f"0x{self.dma_phys:016x}"), ("size", str(self.dma_size)),
                            ("dma_coherent", "1" if coherent else "0"),
                            ("driver_version", "5.5.0"), ("sync_mode", "1"),
                            ("sync_offset", "0x0"), ("sync_size", str(self.dma_size)),
                            ("sync_direction", "0"), ("sync_owner", "0"),
                            ("sync_for_cpu", "0"), ("sync_for_device", "0")):
            _write(d / attr, value + "\n")
        _link(self.sysfs / "class" / cls / "udmabuf0", d)
        with open(self.dev / "udmabuf0", "wb") as f:
            f.truncate(self.dma_size)

    # -- playing the hardware -------------------------------------------------------------
    def _on_irq(self, unit: str) -> None:
        with self._lock:
            self.irqs[unit] = self.irqs.get(unit, 0) + 1
            self._node_of[unit].pending += 1
            self._deliver()

    def raise_irq(self, unit: str) -> None:
        """Raise ``unit``'s interrupt now, as the hardware would."""
        self._on_irq(unit)

    def _deliver(self) -> None:
        """uio_pdrv_genirq: count the event, disable the line until the driver unmasks."""
        for node in self.nodes:
            if node.pending and node.ctrl[0]:
                node.ctrl[0] = 0
                node.pending = 0
                count = (int(node.count[0]) + 1) & 0xFFFFFFFF
                # sysfs first, atomically (a real sysfs read never sees a half-written
                # file), then the count the driver polls: whoever sees the new count also
                # sees the matching event file
                tmp = node.sys_dir / ".event.tmp"
                _write(tmp, f"{count}\n")
                os.replace(tmp, node.sys_dir / "event")
                node.count[0] = count

    def events(self, unit: str) -> int:
        """The UIO event count of ``unit``'s node."""
        return int(self._node_of[unit].count[0])

    def unmasked(self, unit: str) -> bool:
        return bool(self._node_of[unit].ctrl[0])

    def _mirror_ipi(self) -> None:
        shown, model = self._node_of["ipi"].regs("ipi"), self.core.regs["ipi"]
        for name in ("ISR", "IMR", "OBS"):
            shown[IPI[name]] = model[IPI[name]]

    def _step_ipi(self) -> None:
        """Hand the IPI words the driver wrote to the core (module docstring)."""
        shown = self._node_of["ipi"].regs("ipi")
        model = self.core.regs["ipi"]
        for name in ("IDR", "IER", "TRIG"):
            value = int(shown[IPI[name]])
            if value:
                shown[IPI[name]] = 0
                if name == "TRIG":
                    model[IPI["ISR"]] = 0  # the last completion was acknowledged by now
                try:
                    self.core.write_reg("ipi", 4 * IPI[name], value)
                except Exception as e:  # a faulty command hangs the unit, like hardware
                    self.errors.append(e)
        self._mirror_ipi()

    def step(self) -> None:
        """One poll of the start registers (what the thread does every ~100 us)."""
        if self.kick == "r5" and not self.stub:
            self._step_ipi()
        for unit, off in self.start_regs.items():
            regs = self.regs.get(unit)
            if regs is not None and regs[off >> 2]:
                regs[off >> 2] = 0
                try:
                    self.core.start(unit)
                except Exception as e:  # a faulty command hangs the unit, like hardware
                    self.errors.append(e)
        with self._lock:
            self._deliver()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.step()
            time.sleep(POLL_INTERVAL)

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="fake-dv700", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None

    def close(self) -> None:
        self.stop()
        self.core = None
        self.regs = {}
        self.dram = np.zeros(0, np.uint8)
        for node in self.nodes:
            node.close()
        try:
            self._dma_mm.close()
        except BufferError:
            pass
        os.close(self._dma_fd)

    def __enter__(self) -> FakeBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_fake_board(tmp_path: Path | str, dma_size: int = 64 << 20,
                    units: tuple[str, ...] = ("conv", "maximizer", "ipu"), *,
                    mode: str = "per-unit", dma_coherent: bool = False,
                    base: int = DEFAULT_BASE, dma_phys: int = DEFAULT_DMA_PHYS,
                    ubuf_size: int = 512 * 1024, mac_groups: int = 8,
                    hw_version: int = 0x0700, max_input_size: int = 0x4000,
                    conv_freq: int | None = None, decoy: bool = True,
                    heaps: tuple[str, ...] = (), udmabuf_class: str = "u-dma-buf",
                    start: bool = True, core: str = "auto",
                    kick: str = "direct") -> FakeBoard:
    """Build a fake DV700 under ``tmp_path``; ``.url`` opens it, ``.close()`` tears down.

    ``mode``: ``per-unit`` (one UIO device per sub-unit, names ``dv700-<unit>``)
    or ``combined`` (one ``dv700`` node, units at 0x1000 steps in ``system``
    order).  ``core``: ``auto`` (the simulator if present, else :class:`StubCore`)
    or ``stub``.  ``start=False`` leaves the hardware thread off (call ``step()``).
    """
    return FakeBoard(Path(tmp_path), dma_size=dma_size, units=units, mode=mode,
                     dma_coherent=dma_coherent, base=base, dma_phys=dma_phys,
                     ubuf_size=ubuf_size, mac_groups=mac_groups, hw_version=hw_version,
                     max_input_size=max_input_size, conv_freq=conv_freq, decoy=decoy,
                     heaps=heaps, udmabuf_class=udmabuf_class, start=start, core=core,
                     kick=kick)


def open_fake_device(tmp_dir: str | Path | None = None, **kw: Any) -> Any:
    """A :class:`~dvsdk.driver.uio.UioDevice` on a fresh fake board; ``close()`` tears
    both down (and removes the temporary directory it created).  ``dev.fake_board``
    is the board.  Suited to ``tests/conftest.py``'s ``BACKENDS`` factories.
    """
    import shutil
    import tempfile

    from dvsdk.driver.uio import UioDevice

    own = tmp_dir is None
    root = Path(tempfile.mkdtemp(prefix="dvsdk-fakeboard-")) if own else Path(tmp_dir)
    board = make_fake_board(root, **kw)
    try:
        dev = UioDevice.from_url(board.url)
    except BaseException:
        board.close()
        raise
    device_close = dev.close

    def close() -> None:
        try:
            device_close()
        finally:
            board.close()
            if own:
                shutil.rmtree(root, ignore_errors=True)

    dev.close = close  # type: ignore[method-assign]
    dev.fake_board = board  # type: ignore[attr-defined]
    return dev
