"""32-bit register windows over an ``mmap`` of a UIO map, and the DV700 register map.

Every access is one aligned 32-bit load or store through a numpy ``uint32`` view
(linux-dma.md §5.1: AXI-Lite slaves may reject the byte or wide accesses a
``memcpy`` of a byte slice can issue).  For an aligned native-endian array numpy's
scalar get/set is a single ``uint32`` load/store.

Register offsets are byte offsets inside a unit's 0x1000-byte window
(dv700-interface.md §10.2-10.10).
"""

from __future__ import annotations

import mmap
from collections.abc import Iterable

import numpy as np

from ..errors import InvalidArgument
from ..hw.spec import SPEC

PAGE_SIZE = mmap.PAGESIZE

# -- conv window (dv700-interface.md §10.2, §10.4 history, §10.9, §10.10) -----------
_R = SPEC.reg
CONV_START = _R("conv", "START")             # run the configuration (sent inside the stream)
CONV_CFG_PTR = _R("conv", "CFG_ADDR")        # controller memory pointer (0x2000 for the image)
CONV_CFG_DATA = _R("conv", "CFG_DATA")       # controller memory data port
CONV_UBUF_SIZE = _R("conv", "UBUF_SIZE")     # UBUF bytes (§7.6)
CONV_MAC_GROUPS = _R("conv", "MAC_GROUPS")   # x 72 = mac_num
CONV_MAX_INPUT = _R("conv", "MAX_INPUT_SIZE")
CONV_HW_VERSION = _R("conv", "HW_VERSION")   # & 0xFFFF
CONV_PERF_CFG = _R("conv", "PERF_CONFIG")    # performance-counter configuration
PERF_CFG_VALUE = int(SPEC.reg_info("conv", "PERF_CONFIG")["init"])  # written at open (§10.10)
CONV_COUNTERS = tuple(range(_R("conv", "BYTE_COUNTERS_LO"), _R("conv", "BYTE_COUNTERS_HI")
                            + 4 * int(SPEC.reg_info("conv", "BYTE_COUNTERS_HI")["count"]), 4))
CONV_CMD_ADDR = _R("conv", "CMD_ADDR")       # command-stream physical address
CONV_CMD_LEN = _R("conv", "CMD_LEN")         # command-stream length in 8-byte units
CONV_KICK = _R("conv", "KICK")               # write 1: fetch and execute the stream
CONV_CMDLIST_MODE = _R("conv", "CMDLIST_MODE")  # write 1 at open: command-list mode
CONV_IRQ = _R("conv", "IRQ")                 # the stream's last packet writes 1; ack with 0

IPU_START = _R("ipu", "START")
MAXIMIZER_START = _R("maximizer", "START")
UNIT_IRQ = _R("ipu", "IRQ")                  # IPU / maximizer interrupt, acked by writing 0

# -- the R5 kick's windows (registers.yaml ipi, shm; §10.4) ---------------------------
IPI_REGS = {n: _R("ipi", n) for n in SPEC.unit("ipi")["registers"]}
SHM_REGS = {n: _R("shm", n) for n in SPEC.unit("shm")["registers"]}
SHM_MAP_BYTES = int(SPEC.unit("shm")["map_bytes"])
R5_CHANNEL = int(SPEC.registers["kick"]["r5"]["pending"][2])  # 0x100

START_REG = {"conv": CONV_KICK, "ipu": IPU_START, "maximizer": MAXIMIZER_START}
IRQ_REG = {"conv": CONV_IRQ, "ipu": UNIT_IRQ, "maximizer": UNIT_IRQ, "ipi": IPI_REGS["ISR"]}
#: what a pending interrupt reads as in IRQ_REG, and what acknowledges it (§10.4, §10.5)
IRQ_PENDING_MASK = {"conv": 0xFFFFFFFF, "ipu": 0xFFFFFFFF, "maximizer": 0xFFFFFFFF,
                    "ipi": R5_CHANNEL}
IRQ_ACK_VALUE = {"conv": 0, "ipu": 0, "maximizer": 0, "ipi": R5_CHANNEL}
#: what a timeout snapshot holds per unit
SNAPSHOT_REGS: dict[str, tuple[int, ...]] = {
    "conv": (CONV_CMD_ADDR, CONV_CMD_LEN, CONV_KICK, CONV_CMDLIST_MODE, CONV_IRQ)
    + CONV_COUNTERS,
    "ipu": (IPU_START, UNIT_IRQ),
    "maximizer": (MAXIMIZER_START, UNIT_IRQ),
    "ipi": tuple(IPI_REGS[n] for n in ("OBS", "ISR", "IMR")),
    "shm": tuple(SHM_REGS.values()),
}


class MmioWindow:
    """``size`` bytes of registers at byte ``offset`` of ``buffer`` (an mmap).

    Offsets must be multiples of 4 inside the window, values 32-bit unsigned;
    anything else raises :class:`~dvsdk.errors.InvalidArgument` before touching
    the bus.
    """

    def __init__(self, buffer: object, offset: int, size: int, name: str = "") -> None:
        if offset % 4 or size % 4 or size <= 0:
            raise InvalidArgument("register window must be word aligned", field="window",
                                  value=(offset, size))
        self.name = name
        self.size = size
        self.words: np.ndarray = np.frombuffer(buffer, dtype=np.uint32, count=size // 4,
                                               offset=offset)

    def _index(self, offset: int) -> int:
        if not isinstance(offset, (int, np.integer)) or offset % 4 or not 0 <= offset < self.size:
            raise InvalidArgument(
                f"register offset must be 32-bit aligned inside the {self.name or 'unit'} window",
                field="offset",
                value=hex(offset) if isinstance(offset, (int, np.integer)) else offset,
                limit=f"0x0..{self.size - 4:#x}, multiple of 4",
            )
        return int(offset) >> 2

    def read32(self, offset: int) -> int:
        return int(self.words[self._index(offset)])

    def write32(self, offset: int, value: int) -> None:
        i = self._index(offset)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool) \
                or not 0 <= value <= 0xFFFFFFFF:  # (Device.check_value's rule)
            raise InvalidArgument("register value must be a 32-bit unsigned integer",
                                  field="value", value=value, limit="0..0xFFFFFFFF")
        self.words[i] = int(value)

    def snapshot(self, offsets: Iterable[int]) -> dict[int, int]:
        """Read each register once (one 32-bit load each)."""
        return {off: self.read32(off) for off in offsets if 0 <= off < self.size}

    def release(self) -> None:
        """Drop the numpy view so the underlying mmap can be closed."""
        self.words = np.zeros(0, np.uint32)
        self.size = 0


def map_length(offset_in_page: int, size: int, page: int = PAGE_SIZE) -> int:
    """Bytes to mmap for a UIO map: whole pages covering ``offset + size`` (§5.1)."""
    return -(-(offset_in_page + size) // page) * page


def mmap_uio_map(fd: int, index: int, offset_in_page: int, size: int,
                 page: int = PAGE_SIZE) -> mmap.mmap:
    """Map UIO map ``index``: the kernel selects it by ``mmap(offset=index*PAGE_SIZE)``."""
    return mmap.mmap(fd, map_length(offset_in_page, size, page), mmap.MAP_SHARED,
                     mmap.PROT_READ | mmap.PROT_WRITE, offset=index * page)
