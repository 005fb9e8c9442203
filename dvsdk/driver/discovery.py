"""Find the DV700 register windows (UIO) and the DMA memory (u-dma-buf, dma-heap).

Sources: linux-dma.md §5.1 (UIO sysfs layout), §5.2 (u-dma-buf attributes), §5.3
(dma-heap), §5.6 (pyudev and its gotchas); dv700-interface.md §10.11 (device tree:
``compatible = "dmp,dv700"``, sub-unit ``i`` at ``base + i*0x1000`` in the order
of the ``system`` property).

Enumeration uses pyudev when no sysfs root is given and libudev loads.  pyudev's
context is fixed at ``/sys`` (§5.6), so with an explicit ``sysfs`` root (tests,
chroots) or without libudev we walk ``<root>/class/uio`` and
``<root>/class/u-dma-buf`` ourselves.  Either way every attribute is read with a
plain ``open()`` (libudev caches values; pyudev's ``asint`` cannot parse ``0x..``).

Sub-unit mapping (see udev/README.md, "Sub-units"):

* **per-unit**: one UIO device per sub-unit, each with its own interrupt.  The
  unit comes from the UIO name suffix (``dv700-conv``, ``dv700-ipu``,
  ``dv700-maximizer`` / ``dv700-mx``) or, failing that, from ``maps/map0/name``
  (the DT ``reg-names``).  The unit's window is map 0.
* **combined**: one UIO device (name ``dv700``, or any UIO device whose DT
  ``compatible`` lists ``dmp,dv700``) for the whole DV700.  With a single map the
  units sit at ``idx * 0x1000`` inside map 0 in ``system`` order (default
  ``"CONV"``: conv only, §10.11); with several maps, map names that name a unit
  win, else map ``i`` is the ``i``-th ``system`` entry.  All units share the one
  UIO interrupt.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..errors import DeviceError, DeviceNotFound
from ..hw.spec import SPEC

# -- names shared with udev/99-dmp-dv700.rules (tests/test_udev_rules.py checks them) --
UIO_SUBSYSTEM = "uio"
#: u-dma-buf's class name; "udmabuf" is the class of the driver before its rename (§5.2).
UDMABUF_SUBSYSTEMS = ("u-dma-buf", "udmabuf")
DV700_COMPATIBLE = "dmp,dv700"
#: UIO ``name`` attributes that mark a DV700 node ("dv700" = combined node).
DV700_UIO_NAMES = ("dv700", "dv700-conv", "dv700-ipu", "dv700-maximizer", "dv700-mx")
#: name suffix / map name -> unit
UNIT_ALIASES = {"conv": "conv", "ipu": "ipu", "maximizer": "maximizer", "mx": "maximizer"}
#: tokens of the DT ``system`` property (§10.11); FC occupies a slot but is gone.
SYSTEM_TOKENS: dict[str, str | None] = {"CONV": "conv", "MX": "maximizer", "IPU": "ipu",
                                        "FC": None}
DEFAULT_SYSTEM = ("CONV",)
#: DT compatible as an attribute of the platform parent (the udev ``ATTRS{}`` key) ...
OF_COMPATIBLE_PARENT_ATTR = "of_node/compatible"
#: ... and as seen from the UIO class device.
COMPATIBLE_ATTR = "device/" + OF_COMPATIBLE_PARENT_ATTR
SYSTEM_ATTR = "device/of_node/system"
UBUF_SIZE_ATTR = "device/of_node/ubuf-size"
UIO_ATTRS = ("name", "version", "event")
UIO_MAP_ATTRS = ("addr", "size", "offset", "name")
UDMABUF_ATTRS = ("phys_addr", "size", "dma_coherent", "driver_version", "sync_mode")
UDMABUF_SYNC_ATTRS = ("sync_for_cpu", "sync_for_device")
#: Unix group that owns the device nodes (udev rules) and that users must be in.
DVSDK_GROUP = "dvsdk"
#: Stable /dev symlinks the udev rules create: UIO name -> link, u-dma-buf pattern.
UIO_SYMLINK_FORMAT = "{name}"
UDMABUF_SYMLINK_FORMAT = "dv700-dma{n}"
#: Kernel driver's sysfs (dv700-interface.md §10.9), relative to the sysfs root.
DMP_DV_CLASS = "class/dmp_dv"
#: udev subsystems of DMP's kernel module (dv://) and of the dma-heaps it allocates from
DMP_DV_SUBSYSTEM = "dmp_dv"
DMA_HEAP_SUBSYSTEM = "dma_heap"
#: ION (/dev/ion), what DMP's module takes memory from on the kernels it builds for (its
#: ioremap_nocache went in Linux 5.6, the release that added dma-heaps): a misc device
ION_SUBSYSTEM, ION_KERNEL = "misc", "ion"
CONV_FREQ_ATTR = "class/dmp_dv/dv_conv/conv_freq"
FPGA_MANAGER_CLASS = "class/fpga_manager"
UNIT_WINDOW = 0x1000  # bytes per sub-unit (§10.11)
#: The R5 kick's windows (§10.4, §10.11): the device tree's ``ipi`` and ``shm`` nodes bound
#: to generic-uio (UIO name = node name; ``dv700-`` prefixed or a map of that name also
#: count), or found at the non-DT default addresses; the SHM may also be reserved memory
#: handed to u-dma-buf (``device-name = "dv700-shm"``, or at the default address).
R5_WINDOW_NAMES = {"ipi": ("ipi", "dv700-ipi"), "shm": ("shm", "dv700-shm")}
R5_DEFAULT_PHYS = {w: int(SPEC.unit(w)["default_phys"]) for w in ("ipi", "shm")}


# -- attribute readers --------------------------------------------------------
def read_attr(path: str) -> str | None:
    """A sysfs attribute as stripped text, or None when missing/unreadable."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return raw.split(b"\0", 1)[0].decode("ascii", "replace").strip()


def read_strings(path: str) -> tuple[str, ...]:
    """A DT string-list property (NUL-separated), e.g. ``of_node/compatible``."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        return ()
    return tuple(s.decode("ascii", "replace").strip() for s in raw.split(b"\0") if s.strip())


def read_be32(path: str) -> int | None:
    """A DT u32 cell property (big-endian), e.g. ``ubuf-size``."""
    try:
        with open(path, "rb") as f:
            raw = f.read(4)
    except OSError:
        return None
    return int.from_bytes(raw, "big") if len(raw) == 4 else None


def parse_int(text: str | None, base: int = 10) -> int | None:
    """``int(text, base)`` or None.  Base 16 accepts the ``0x`` of ``%pad`` values."""
    if text is None or text == "":
        return None
    try:
        return int(text, base)
    except ValueError:
        return None


# -- records ------------------------------------------------------------------
@dataclass(frozen=True)
class UioMap:
    """``maps/mapN`` of a UIO device (§5.1); select it with ``mmap(offset=N*PAGE_SIZE)``."""

    index: int
    addr: int
    size: int
    offset: int = 0
    name: str = ""


@dataclass
class UioNode:
    """One ``/sys/class/uio/uioN`` device."""

    sys_name: str
    sys_path: str
    dev_path: str
    name: str
    version: str = ""
    maps: tuple[UioMap, ...] = ()
    compatible: tuple[str, ...] = ()
    system: tuple[str, ...] = ()
    ubuf_size: int | None = None

    @property
    def is_dv700(self) -> bool:
        return self.name in DV700_UIO_NAMES or DV700_COMPATIBLE in self.compatible

    def r5_window(self) -> tuple[str, str] | None:
        """``(window, why)`` if this node is the R5 kick's ``ipi`` or ``shm`` window: by
        its name, its map's name, or its map at the §10.11 default address."""
        for window, names in R5_WINDOW_NAMES.items():
            if self.name in names:
                return window, f"UIO {self.sys_name} named {self.name!r}"
            if self.maps and _map_unit_key(self.maps[0].name).split("@")[0] == window:
                return window, f"UIO {self.sys_name} map named {self.maps[0].name!r}"
            if self.maps and self.maps[0].addr == R5_DEFAULT_PHYS[window]:
                return window, (f"UIO {self.sys_name} at the default address "
                                f"{R5_DEFAULT_PHYS[window]:#x}")
        return None

    @property
    def unit(self) -> str | None:
        """The unit of a per-unit node (name suffix, else map 0's name); None = combined."""
        prefix = "dv700-"
        if self.name.startswith(prefix) and self.name[len(prefix):] in UNIT_ALIASES:
            return UNIT_ALIASES[self.name[len(prefix):]]
        if self.name != "dv700" and len(self.maps) == 1:
            return UNIT_ALIASES.get(_map_unit_key(self.maps[0].name))
        return None

    def event_count(self) -> int | None:
        """The interrupt count from sysfs ``event`` (read fresh every time)."""
        return parse_int(read_attr(os.path.join(self.sys_path, "event")))


def _map_unit_key(name: str) -> str:
    return name.strip().lower().removeprefix("dv700-").removeprefix("dv700_")


@dataclass(frozen=True)
class UnitWindow:
    """Where one sub-unit's 0x1000-byte register window lives."""

    unit: str
    node: UioNode
    map_index: int
    offset: int  # bytes from the start of the map
    size: int = UNIT_WINDOW

    @property
    def phys(self) -> int:
        return self.node.maps[self.map_index].addr + self.offset


@dataclass
class Dv700Board:
    """One DV700: its unit windows and the UIO nodes that carry them."""

    units: dict[str, UnitWindow]
    mode: str  # "per-unit" | "combined"

    @property
    def nodes(self) -> list[UioNode]:
        seen: dict[str, UioNode] = {}
        for w in self.units.values():
            seen.setdefault(w.node.sys_name, w.node)
        return sorted(seen.values(), key=lambda n: _natural(n.sys_name))

    def describe(self) -> str:
        parts = [f"{u}={w.node.sys_name}+{w.offset:#x}@{w.phys:#x}" for u, w in self.units.items()]
        return f"{self.mode}: " + ", ".join(parts)


@dataclass
class UdmabufNode:
    """One ``/sys/class/u-dma-buf/udmabufN`` buffer (§5.2)."""

    sys_name: str
    sys_path: str
    dev_path: str
    subsystem: str
    phys_addr: int | None
    size: int | None
    dma_coherent: bool | None
    driver_version: str = ""
    sync_mode: int | None = None

    def attr_path(self, attr: str) -> str:
        return os.path.join(self.sys_path, attr)

    @property
    def version_tuple(self) -> tuple[int, ...]:
        out = []
        for part in self.driver_version.split("."):
            digits = "".join(ch for ch in part if ch.isdigit())
            out.append(int(digits) if digits else 0)
        return tuple(out)


@dataclass
class DmaHeapNode:
    """A ``/dev/dma_heap/<name>`` allocator (§5.3).  No physical addresses."""

    name: str
    dev_path: str

    @property
    def contiguous(self) -> bool:
        """Only CMA / carveout heaps are physically contiguous (§5.3)."""
        return self.name != "system" and not self.name.startswith("system")


@dataclass
class Inventory:
    """Everything discovery found; ``source`` says whether pyudev or the walk enumerated."""

    sysfs: str
    dev: str
    source: str
    uio: list[UioNode] = field(default_factory=list)
    udmabufs: list[UdmabufNode] = field(default_factory=list)
    heaps: list[DmaHeapNode] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def dv700_nodes(self) -> list[UioNode]:
        return [n for n in self.uio if n.is_dv700]

    @property
    def other_uio(self) -> list[UioNode]:
        return [n for n in self.uio if not n.is_dv700 and n.r5_window() is None]

    def r5_windows(self) -> dict[str, tuple[UioNode | UdmabufNode, str]]:
        """The R5 kick's ``ipi`` and ``shm`` windows found, each with how it was found."""
        out: dict[str, tuple[UioNode | UdmabufNode, str]] = {}
        for node in self.uio:
            hit = None if node.is_dv700 else node.r5_window()
            if hit and hit[0] not in out:
                out[hit[0]] = (node, hit[1])
        if "shm" not in out:
            for buf in self.udmabufs:
                if _is_shm_buffer(buf):
                    out["shm"] = (buf, f"u-dma-buf {buf.sys_name} (reserved memory at "
                                       f"{buf.phys_addr or 0:#x})")
                    break
        return out

    @property
    def has_uio_class(self) -> bool:
        return os.path.isdir(os.path.join(self.sysfs, "class", UIO_SUBSYSTEM)) or bool(self.uio)

    @property
    def dmp_dv_loaded(self) -> bool:
        """The DMP kernel driver (§10.9) is bound; it and UIO cannot share the device."""
        return os.path.isdir(os.path.join(self.sysfs, DMP_DV_CLASS))

    def conv_freq(self) -> int | None:
        """``conv_freq`` (MHz) from the kernel driver's sysfs (§10.9), if present."""
        return parse_int(read_attr(os.path.join(self.sysfs, CONV_FREQ_ATTR)))

    def fpga_states(self) -> dict[str, str]:
        """``fpga_manager`` state per manager ("operating" once a bitstream is loaded)."""
        out = {}
        for path in sorted(glob.glob(os.path.join(self.sysfs, FPGA_MANAGER_CLASS, "*"))):
            state = read_attr(os.path.join(path, "state"))
            if state is not None:
                out[os.path.basename(path)] = state
        return out

    def boards(self, system: tuple[str, ...] | None = None) -> list[Dv700Board]:
        return build_boards(self.dv700_nodes, system)

    def find_udmabuf(self, name: str = "") -> UdmabufNode:
        """The u-dma-buf called ``name`` (``udmabuf0``, or a ``dv700-dma0`` alias), or the first."""
        if not self.udmabufs:
            raise DeviceNotFound(
                "no u-dma-buf DMA buffer found",
                field="dma",
                value=name or None,
                limit=f"{self.sysfs}/class/{{{','.join(UDMABUF_SUBSYSTEMS)}}}/udmabufN",
                hint="load it: modprobe u-dma-buf udmabuf0=<bytes> (see udev/README.md)",
            )
        if not name:
            dma = [b for b in self.udmabufs if not _is_shm_buffer(b)]
            if not dma:
                raise DeviceNotFound("the only u-dma-buf is the R5's shared memory",
                                     field="dma", value=self.udmabufs[0].sys_name,
                                     hint="add a u-dma-buf for DMA memory")
            return dma[0]
        alias = name.removeprefix("dv700-dma")
        for b in self.udmabufs:
            if b.sys_name == name or (alias.isdigit() and b.sys_name == f"udmabuf{alias}"):
                return b
        raise DeviceNotFound(
            "no such u-dma-buf buffer",
            field="dma",
            value=name,
            limit=[b.sys_name for b in self.udmabufs],
        )


def _is_shm_buffer(buf: UdmabufNode) -> bool:
    """A u-dma-buf that is the R5's shared-memory window, not DMA memory for the DV700."""
    return buf.sys_name in R5_WINDOW_NAMES["shm"] or buf.phys_addr == R5_DEFAULT_PHYS["shm"]


# -- reading one device -------------------------------------------------------
def read_uio_node(sys_path: str, dev_root: str = "/dev", dev_path: str | None = None) -> UioNode:
    """Parse one UIO class directory (§5.1; ``addr``/``size``/``offset`` are ``0x`` hex)."""
    sys_name = os.path.basename(os.path.normpath(sys_path))
    maps = []
    for mpath in sorted(glob.glob(os.path.join(sys_path, "maps", "map*")),
                        key=lambda p: _natural(os.path.basename(p))):
        idx = parse_int(os.path.basename(mpath)[3:])
        addr = parse_int(read_attr(os.path.join(mpath, "addr")), 16)
        size = parse_int(read_attr(os.path.join(mpath, "size")), 16)
        if idx is None or addr is None or not size:
            continue
        offset = parse_int(read_attr(os.path.join(mpath, "offset")), 16) or 0
        maps.append(UioMap(idx, addr, size, offset, read_attr(os.path.join(mpath, "name")) or ""))
    system_raw = read_attr(os.path.join(sys_path, SYSTEM_ATTR))
    system = tuple(t.strip().upper() for t in system_raw.split(",") if t.strip()) if system_raw \
        else ()
    return UioNode(
        sys_name=sys_name,
        sys_path=sys_path,
        dev_path=dev_path or os.path.join(dev_root, sys_name),
        name=read_attr(os.path.join(sys_path, "name")) or "",
        version=read_attr(os.path.join(sys_path, "version")) or "",
        maps=tuple(maps),
        compatible=read_strings(os.path.join(sys_path, COMPATIBLE_ATTR)),
        system=system,
        ubuf_size=read_be32(os.path.join(sys_path, UBUF_SIZE_ATTR)),
    )


def read_udmabuf(sys_path: str, subsystem: str, dev_root: str = "/dev",
                 dev_path: str | None = None) -> UdmabufNode:
    """Parse one u-dma-buf class directory (§5.2: ``phys_addr`` hex, ``size`` decimal)."""
    sys_name = os.path.basename(os.path.normpath(sys_path))
    coherent = read_attr(os.path.join(sys_path, "dma_coherent"))
    return UdmabufNode(
        sys_name=sys_name,
        sys_path=sys_path,
        dev_path=dev_path or os.path.join(dev_root, sys_name),
        subsystem=subsystem,
        phys_addr=parse_int(read_attr(os.path.join(sys_path, "phys_addr")), 16),
        size=parse_int(read_attr(os.path.join(sys_path, "size"))),
        dma_coherent=None if coherent is None else coherent == "1",
        driver_version=read_attr(os.path.join(sys_path, "driver_version")) or "",
        sync_mode=parse_int(read_attr(os.path.join(sys_path, "sync_mode"))),
    )


# -- enumeration ---------------------------------------------------------------
def _natural(name: str) -> tuple[str, int]:
    head = name.rstrip("0123456789")
    tail = name[len(head):]
    return head, int(tail) if tail else -1


def walk_class(sysfs: str, subsystem: str) -> list[tuple[str, str | None]]:
    """``(sys_path, None)`` for every entry of ``<sysfs>/class/<subsystem>`` (no libudev)."""
    base = os.path.join(sysfs, "class", subsystem)
    try:
        names = os.listdir(base)
    except OSError:
        return []
    return [(os.path.join(base, n), None) for n in sorted(names, key=_natural)]


def pyudev_class(subsystem: str, context: object | None = None) -> list[tuple[str, str | None]]:
    """``(sys_path, device_node)`` via pyudev.  Raises ImportError/OSError without libudev."""
    import pyudev  # optional at run time: ImportError is handled by the caller

    ctx = context if context is not None else pyudev.Context()
    devices = ctx.list_devices(subsystem=subsystem)  # type: ignore[attr-defined]
    found = [(d.sys_path, d.device_node) for d in devices]
    return sorted(found, key=lambda t: _natural(os.path.basename(t[0])))


def discover(sysfs: str | None = None, dev: str = "/dev") -> Inventory:
    """Enumerate UIO devices, u-dma-bufs and dma-heaps.

    ``sysfs=None`` means the live system: pyudev enumerates (§5.6) and, if libudev
    cannot be loaded, the walk of ``/sys`` takes over.  An explicit ``sysfs`` root
    is always walked (pyudev cannot be pointed elsewhere).
    """
    root = sysfs or "/sys"
    inv = Inventory(sysfs=root, dev=dev, source="sysfs")
    lister = None
    if sysfs is None:
        try:
            import pyudev

            context = pyudev.Context()
            lister = lambda sub: pyudev_class(sub, context)  # noqa: E731
            inv.source = "pyudev"
        except (ImportError, OSError) as e:
            inv.notes.append(f"pyudev/libudev unavailable ({e}); walked {root}/class instead")
    if lister is None:
        lister = lambda sub: walk_class(root, sub)  # noqa: E731

    use_node = dev == "/dev"  # udev's device_node is only meaningful for the real /dev
    for sys_path, node in lister(UIO_SUBSYSTEM):
        inv.uio.append(read_uio_node(sys_path, dev, node if use_node else None))
    for subsystem in UDMABUF_SUBSYSTEMS:
        for sys_path, node in lister(subsystem):
            inv.udmabufs.append(read_udmabuf(sys_path, subsystem, dev, node if use_node else None))
    for path in sorted(glob.glob(os.path.join(dev, "dma_heap", "*"))):
        inv.heaps.append(DmaHeapNode(os.path.basename(path), path))
    return inv


# -- sub-unit mapping -------------------------------------------------------------------
def system_units(tokens: Iterable[str]) -> list[tuple[int, str]]:
    """``(phys_idx, unit)`` for a ``system`` property such as ``CONV,MX,IPU`` (§10.11)."""
    out = []
    for idx, tok in enumerate(tokens):
        unit = SYSTEM_TOKENS.get(tok.strip().upper())
        if unit is not None:
            out.append((idx, unit))
    return out


def combined_units(node: UioNode, system: tuple[str, ...] | None = None) -> dict[str, UnitWindow]:
    """The unit windows inside one combined DV700 UIO node (module docstring)."""
    tokens = system or node.system or DEFAULT_SYSTEM
    units: dict[str, UnitWindow] = {}
    named = {UNIT_ALIASES.get(_map_unit_key(m.name)): m for m in node.maps}
    named.pop(None, None)
    if named:
        for unit, m in named.items():
            if unit is not None:
                units[unit] = UnitWindow(unit, node, m.index, 0, min(m.size, UNIT_WINDOW))
    elif len(node.maps) > 1:
        for idx, unit in system_units(tokens):
            if idx < len(node.maps):
                m = node.maps[idx]
                units[unit] = UnitWindow(unit, node, m.index, 0, min(m.size, UNIT_WINDOW))
    elif node.maps:
        m = node.maps[0]
        for idx, unit in system_units(tokens):
            if (idx + 1) * UNIT_WINDOW <= m.size:
                units[unit] = UnitWindow(unit, node, m.index, idx * UNIT_WINDOW)
    return units


def build_boards(nodes: list[UioNode], system: tuple[str, ...] | None = None) -> list[Dv700Board]:
    """Group DV700 UIO nodes into boards.

    Every combined node is a board.  Per-unit nodes are grouped by rank: the
    ``k``-th conv, ``k``-th IPU and ``k``-th maximizer (by physical address) form
    board ``k``; combined boards come first.
    """
    boards = []
    per_unit: dict[str, list[UioNode]] = {}
    for node in nodes:
        unit = node.unit
        if unit is None:
            units = combined_units(node, system)
            if units:
                boards.append(Dv700Board(units, "combined"))
        elif node.maps:
            per_unit.setdefault(unit, []).append(node)
    for unit_nodes in per_unit.values():
        unit_nodes.sort(key=lambda n: n.maps[0].addr)
    for k in range(max((len(v) for v in per_unit.values()), default=0)):
        units = {}
        for unit, unit_nodes in per_unit.items():
            if k < len(unit_nodes):
                n = unit_nodes[k]
                units[unit] = UnitWindow(unit, n, n.maps[0].index, 0,
                                         min(n.maps[0].size, UNIT_WINDOW))
        order = ("conv", "ipu", "maximizer")
        boards.append(Dv700Board({u: units[u] for u in order if u in units}, "per-unit"))
    return boards


def open_node(path: str, flags: int) -> int:
    """``os.open`` a device node; a missing node or permission becomes a typed error with
    the fix (udev rules, group dvsdk)."""
    try:
        return os.open(path, flags)
    except PermissionError:
        raise DeviceError(f"no permission to open {path}", field="dev", value=path,
                          hint="install udev/99-dmp-dv700.rules and join group dvsdk "
                               "(run: dvsdk doctor)") from None
    except FileNotFoundError:
        raise DeviceNotFound(f"{path} does not exist", field="dev", value=path) from None
