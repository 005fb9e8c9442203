"""The DV700's state at register level: register files, controller memory, DRAM, caches.

:class:`CoreState` is what the units (:mod:`.conv_unit`, :mod:`.units`) read and write;
:class:`dvsdk.sim.engine.Dv700Core` adds what a register write sets in motion.  The
register offsets and packet layout are loaded from ``firmware_spec/`` (§3, §10).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..driver import convid
from ..hw.spec import SPEC
from ..hw.timing import TimingParams
from .dram import Dram
from .r5 import WINDOW_WORDS, R5Firmware

WINDOW = SPEC.window
START_REGS = {u: SPEC.reg(u, SPEC.unit(u)["start"]) for u in ("conv", "ipu", "maximizer")}
IRQ_REGS = {u: SPEC.reg(u, SPEC.unit(u)["irq"]) for u in ("conv", "ipu", "maximizer")}
R = {u: {n: SPEC.reg(u, n) for n in SPEC.unit(u)["registers"]}
     for u in ("conv", "ipu", "maximizer", "ipi", "shm")}
#: the SVN revision a simulated pre-R5 bitstream reports (what DMP's R5 kernel hard-codes)
SVN_VERSION = 93
PACKET = SPEC.packet
WRITE_MAGIC = int(SPEC.stream["write_magic"])
CFG_MEM_BYTES = int(SPEC.stream["controller_memory_bytes"])
U8_TABLE_INDEX = SPEC.stream_reg("u8_table")
_WATCHDOG = SPEC.stream["simulator_watchdog"]


@dataclass(frozen=True)
class Watchdog:
    """The simulator's bounds on one kick (``firmware_spec/stream.yaml``,
    ``simulator_watchdog``): past any of them the kick stops with SIM_STATUS = hang and no
    interrupt, as a hung DV700 would leave the driver waiting; ``work_bytes`` caps the
    host memory of one command (bad_config above it)."""

    stream_words: int = int(_WATCHDOG["max_stream_words"])
    stream_steps: int = int(_WATCHDOG["max_stream_steps"])
    commands: int = int(_WATCHDOG["max_commands"])
    kick_seconds: float = float(_WATCHDOG["max_kick_seconds"])
    work_bytes: int = int(_WATCHDOG["max_work_bytes"])


@dataclass
class SimParams:
    """Simulated hardware with ZIA-C2 defaults (§11)."""

    clock_mhz: float = 300.0
    mac_num: int = 576
    ub_size: int = 524288
    bus_bytes_per_cycle: int = 16
    hw_version: int = 0x0700
    max_input_size: int = 0
    units: tuple[str, ...] = ("conv", "ipu", "maximizer")
    #: how conv streams are kicked: "r5" (IPI + shared memory, DMP's current stack) or
    #: "direct" (conv 0x400-0x40C, bitstreams before March 2019) (§10.4, :mod:`.r5`)
    kick: str = "r5"
    #: the hardware's date (``hw_version`` HWMAJOR.HWMINOR.YYYYMMDD): what it cannot run is
    #: refused (:mod:`dvsdk.hw.quirks`); 0: the newest hardware
    hw_date: int = 0
    watchdog: Watchdog = field(default_factory=Watchdog)
    timing: TimingParams = field(init=False)

    def __post_init__(self) -> None:
        self.timing = TimingParams(clock_mhz=self.clock_mhz, mac_num=self.mac_num,
                                   ub_size=self.ub_size,
                                   bus_bytes_per_cycle=self.bus_bytes_per_cycle)


@dataclass
class Faults:
    """Faults to inject into the next executions (each count is consumed per kick)."""

    lost_irq: int = 0
    hang: int = 0
    dma_error: int = 0
    bitflip: int = 0


class CoreState:
    """Register-level DV700 state over a DRAM array (see :mod:`dvsdk.sim.engine`)."""

    def __init__(self, dram: np.ndarray, dram_base: int,
                 regs: dict[str, np.ndarray] | None = None, params: SimParams | None = None,
                 on_irq: Callable[[str], None] | None = None,
                 memory: Dram | None = None) -> None:
        self.params = params or SimParams()
        self.mem = memory or Dram(dram, dram_base)
        wd = self.params.watchdog
        #: host bytes one command may use (Watchdog.work_bytes, at most 4 x DRAM)
        self.work_limit = min(wd.work_bytes, 4 * self.mem.array.size)
        #: cycles one kick may take before the watchdog stops it
        self.kick_cycle_limit = int(wd.kick_seconds * self.params.clock_mhz * 1e6)
        #: the caches (decoded weights, stored tensors) take a quarter of it each
        self.cache_limit = self.work_limit // 4
        self.mem.tensor_limit = min(self.mem.tensor_limit, self.cache_limit)
        self.regs = regs or {u: np.zeros(WINDOW // 4, np.uint32) for u in START_REGS}
        self.on_irq = on_irq
        #: the R5 control program (kick "r5"): it owns the conv interrupt (.r5)
        self.r5: R5Firmware | None = None
        if self.params.kick == "r5":
            for window, words in WINDOW_WORDS.items():
                self.regs.setdefault(window, np.zeros(words, np.uint32))
            self.r5 = R5Firmware(self, on_irq)
            self.on_irq = self.r5.route
        self.cfg_mem = np.zeros(CFG_MEM_BYTES, np.uint8)
        self.faults = Faults()
        self.errors: list[str] = []
        self.u8_table = 0xDEADBEEF
        self.ipu_lut = np.zeros(0, np.uint32)  # palette loaded by the last LUT command
        self._lut_pending: list[int] = []
        self.stats: dict[str, int] = {"kicks": 0, "commands": 0, "cycles": 0}
        #: decoded weights by (address, layout): reused while the DRAM bytes are unchanged;
        #: at most cache_limit bytes of arrays (emptied when a new entry would pass it)
        self.weight_cache: dict[tuple, tuple] = {}
        self.weight_cache_bytes = 0
        #: configuration images worked out (conv_unit.ConvPlan), by image bytes
        self.conv_plans: dict[tuple, object] = {}
        #: stream chunks decoded (decode.Decoded), by address and content
        self._chunks: dict[tuple, object] = {}
        #: (Decoded.plans, packet address, bytes) of the CFG packet of the running stream
        #: that wrote the controller memory from the image address on, None once anything
        #: else wrote it: run_configuration keeps the image's plan with the chunk
        self.image: tuple | None = None
        #: the running stream's byte and cycle totals (conv_unit.ConvTotals)
        self.totals: Any = None
        self.kick_commands = 0  # conv commands started by the running kick
        self.power_on()

    # -- register file ------------------------------------------------------------------
    def power_on(self) -> None:
        for r in self.regs.values():
            r[:] = 0
        conv = self.regs["conv"]
        p = self.params
        # the identity where the bitstreams of this kick keep it (driver.convid): bytes and
        # groups of 72 at 0x11C/0x120/0x128 (R5), KiB and the count at 0x148/0x14C/0x140
        # with the SVN revision at 0x144 and the clock at 0x424 (pre-R5)
        for off, value in convid.identity_words(
                p.kick, ub_size=p.ub_size, mac_num=p.mac_num, hw_version=p.hw_version,
                max_input_size=p.max_input_size, svn_version=SVN_VERSION):
            conv[off // 4] = value
        if convid.register_map(p.kick) == "pre_r5":
            conv[R["conv"]["CLOCK_MHZ"] // 4] = int(p.clock_mhz) & 0xFF
        conv[R["conv"]["SIM_CLOCK_MHZ"] // 4] = int(self.params.clock_mhz)
        if self.r5 is not None:
            self.r5.power_on()

    def read_reg(self, unit: str, offset: int) -> int:
        return int(self.regs[unit][offset // 4])

    def lut_port(self, value: int) -> None:
        """IPU palette port (0x1F0): each write appends a colour for the next command."""
        self._lut_pending.append(value & 0xFFFFFFFF)

    def raise_irq(self, unit: str) -> None:
        self.regs[unit][IRQ_REGS[unit] // 4] = 1
        if self.on_irq:
            self.on_irq(unit)

    def reset(self) -> None:
        """Abort and clear: status, interrupts, controller memory (sizes and IDs stay)."""
        for unit in START_REGS:
            r = self.regs[unit]
            r[IRQ_REGS[unit] // 4] = 0
            r[R[unit]["SIM_STATUS"] // 4] = 0
            r[R[unit]["SIM_FAULT_ADDR"] // 4] = 0
            r[START_REGS[unit] // 4] = 0
        self.cfg_mem[:] = 0
        self.image = None
        self.faults = Faults()
        if self.r5 is not None:
            self.r5.reset()

    def discard(self) -> None:
        """Let go of DRAM and of every cache over it (the device closed): see
        :meth:`Dram.discard`; the register files stay readable."""
        self.mem.discard()
        self.weight_cache.clear()
        self.weight_cache_bytes = 0
        self.conv_plans.clear()
        self._chunks.clear()
