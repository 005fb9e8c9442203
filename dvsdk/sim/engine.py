"""The DV700 at register level: register files, controller memory, command processor.

:class:`Dv700Core` is the hardware model.  It owns nothing but state: DRAM is a
uint8 array at a physical base address, and the register files may be views on
someone else's memory (the fake board maps them onto files).  A write to a
unit's start register runs that unit to completion and raises its interrupt:

* conv ``KICK`` (0x408): fetch the command stream at ``CMD_ADDR`` (``CMD_LEN``
  8-byte units) from DRAM and decode it like the hardware (§10.2-10.4): write
  packets, jumps between chunks, the interrupt write;
* conv ``START`` (0x040), reached through the stream: run the configuration
  image at controller address 0x2000 (§10.3) on the conv engine;
* IPU ``START`` / maximizer ``START``: run from their registers (§10.6, §10.7).

Anything the hardware cannot execute (unknown packets, bad or misaligned
addresses, impossible configurations) sets ``SIM_STATUS``/``SIM_FAULT_ADDR``,
records a reason in :attr:`Dv700Core.errors` and raises the interrupt: it never
raises into the host.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..spec import SPEC
from .dram import Dram
from .status import STATUS, HardwareError
from .timing import TimingParams, byte_counter_values

WINDOW = SPEC.window
START_REGS = {u: SPEC.reg(u, SPEC.unit(u)["start"]) for u in ("conv", "ipu", "maximizer")}
IRQ_REGS = {u: SPEC.reg(u, SPEC.unit(u)["irq"]) for u in ("conv", "ipu", "maximizer")}
R = {u: {n: SPEC.reg(u, n) for n in SPEC.unit(u)["registers"]}
     for u in ("conv", "ipu", "maximizer")}
PACKET = SPEC.packet
WRITE_MAGIC = int(SPEC.stream["write_magic"])
CFG_MEM_BYTES = int(SPEC.stream["controller_memory_bytes"])
U8_TABLE_INDEX = SPEC.stream_reg("u8_table")
MAX_STREAM_WORDS = 1 << 24


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


class Dv700Core:
    """Register-level DV700 model over a DRAM array (see module docstring)."""

    def __init__(self, dram: np.ndarray, dram_base: int,
                 regs: dict[str, np.ndarray] | None = None, params: SimParams | None = None,
                 on_irq: Callable[[str], None] | None = None,
                 memory: Dram | None = None) -> None:
        self.params = params or SimParams()
        self.mem = memory or Dram(dram, dram_base)
        self.regs = regs or {u: np.zeros(WINDOW // 4, np.uint32) for u in START_REGS}
        self.on_irq = on_irq
        self.cfg_mem = np.zeros(CFG_MEM_BYTES, np.uint8)
        self.faults = Faults()
        self.errors: list[str] = []
        self.u8_table = 0xDEADBEEF
        self.ipu_lut = np.zeros(0, np.uint32)  # palette loaded by the last LUT command
        self._lut_pending: list[int] = []
        self.stats: dict[str, int] = {"kicks": 0, "commands": 0, "cycles": 0}
        #: decoded weights by (address, layout): reused while the DRAM bytes are unchanged
        self.weight_cache: dict[tuple, tuple] = {}
        #: configuration images worked out (conv_unit.ConvPlan), by image bytes
        self.conv_plans: dict[tuple, object] = {}
        self.power_on()

    # -- register file ------------------------------------------------------------------
    def power_on(self) -> None:
        for r in self.regs.values():
            r[:] = 0
        conv = self.regs["conv"]
        conv[R["conv"]["UBUF_SIZE"] // 4] = self.params.ub_size
        conv[R["conv"]["MAC_GROUPS"] // 4] = self.params.mac_num // 72
        conv[R["conv"]["HW_VERSION"] // 4] = self.params.hw_version
        conv[R["conv"]["MAX_INPUT_SIZE"] // 4] = self.params.max_input_size
        conv[R["conv"]["SIM_CLOCK_MHZ"] // 4] = int(self.params.clock_mhz)

    def read_reg(self, unit: str, offset: int) -> int:
        return int(self.regs[unit][offset // 4])

    def write_reg(self, unit: str, offset: int, value: int) -> None:
        """A CPU write: store, then do what the register triggers."""
        value &= 0xFFFFFFFF
        if unit == "ipu" and offset == R["ipu"]["LUT"]:
            self.lut_port(value)
            return
        if offset == START_REGS[unit] and value & 1:
            self.start(unit)
            return
        if unit == "conv" and offset == R["conv"]["SIM_STATUS"]:
            self.regs["conv"][offset // 4] = value
            return
        self.regs[unit][offset // 4] = value

    def lut_port(self, value: int) -> None:
        """IPU palette port (0x1F0): each write appends a colour for the next command."""
        self._lut_pending.append(value & 0xFFFFFFFF)

    def raise_irq(self, unit: str) -> None:
        self.regs[unit][IRQ_REGS[unit] // 4] = 1
        if self.on_irq:
            self.on_irq(unit)

    def reset(self) -> None:
        """Abort and clear: status, interrupts, controller memory (sizes and IDs stay)."""
        for unit, r in self.regs.items():
            r[IRQ_REGS[unit] // 4] = 0
            r[R[unit]["SIM_STATUS"] // 4] = 0
            r[START_REGS[unit] // 4] = 0
        self.cfg_mem[:] = 0
        self.faults = Faults()

    # -- execution ----------------------------------------------------------------------
    def start(self, unit: str) -> None:
        """The start register of ``unit`` was written with 1."""
        regs = self.regs[unit]
        regs[START_REGS[unit] // 4] = 0
        self.stats["kicks"] += 1
        if self.faults.hang:
            self.faults.hang -= 1
            return
        status_reg = R[unit]["SIM_STATUS"] // 4
        cycles = 0
        try:
            if self.faults.dma_error:
                self.faults.dma_error -= 1
                raise HardwareError("dma_error", self.read_reg(unit, 0x400 if unit == "conv"
                                                                else 0x28),
                                    "injected DMA error")
            if self.faults.bitflip:
                self.faults.bitflip -= 1
                self.mem.flip_next_write = True
            if unit == "conv":
                cycles = self._run_stream()
            elif unit == "maximizer":
                from .units import run_maximizer
                cycles = run_maximizer(self)
            else:
                from .units import run_ipu
                if self._lut_pending:  # ncolor_lut == 0 reuses the last palette (§3.5)
                    self.ipu_lut = np.array(self._lut_pending, np.uint32)
                    self._lut_pending = []
                cycles = run_ipu(self)
        except HardwareError as e:
            regs[status_reg] = e.status
            if unit == "conv":
                regs[R["conv"]["SIM_FAULT_ADDR"] // 4] = e.address & 0xFFFFFFFF
            self.errors.append(f"{unit}: {STATUS.name_of(e.status)}: {e.reason}")
            self.mem.flip_next_write = False
            self.raise_irq(unit)
            return
        self.stats["cycles"] += cycles
        regs[R[unit]["SIM_CYCLES_LO"] // 4] = cycles & 0xFFFFFFFF
        if "SIM_CYCLES_HI" in R[unit]:
            regs[R[unit]["SIM_CYCLES_HI"] // 4] = cycles >> 32
        if unit == "conv" and self.regs["conv"][IRQ_REGS["conv"] // 4]:
            # the stream raised it already; the callback fires once the run completed
            if self.faults.lost_irq:
                self.faults.lost_irq -= 1
                self.regs["conv"][IRQ_REGS["conv"] // 4] = 0
            elif self.on_irq:
                self.on_irq("conv")
        elif unit != "conv":
            if self.faults.lost_irq:
                self.faults.lost_irq -= 1
            else:
                self.raise_irq(unit)

    def _run_stream(self) -> int:
        """Fetch and decode the command stream (§10.2-10.4); returns cycles."""
        from .conv_unit import ConvTotals

        conv = self.regs["conv"]
        addr = int(conv[R["conv"]["CMD_ADDR"] // 4])
        length = int(conv[R["conv"]["CMD_LEN"] // 4]) * 8
        for i in range(16):  # counters reset per run ([INFER] §10.10)
            conv[(R["conv"]["BYTE_COUNTERS_LO"] if i < 8 else R["conv"]["BYTE_COUNTERS_HI"]) // 4
                 + i % 8] = 0
        self.totals = ConvTotals()
        if addr % 8:
            raise HardwareError("misaligned", addr, "command stream address not 8-byte aligned")
        if length == 0:
            raise HardwareError("stream_overrun", addr, "command stream length is 0")
        words_done = 0
        fetched = length
        chunk = self.mem.read(addr, length).view("<u4").copy()
        pos = 0
        irq_seen = False
        while pos < chunk.size:
            word = int(chunk[pos])
            here = addr + 4 * pos
            words_done += 1
            if words_done > MAX_STREAM_WORDS:
                raise HardwareError("stream_overrun", here, "command stream does not end")
            if word == 0:  # pad word
                pos += 1
                continue
            if word & 1:  # jump
                if pos + 1 >= chunk.size:
                    raise HardwareError("stream_overrun", here, "jump packet cut by chunk end")
                nlen, naddr = word & ~1, int(chunk[pos + 1])
                if nlen % 8 or nlen == 0:
                    raise HardwareError("misaligned", here, f"jump length {nlen} not 8k")
                if naddr % 8:
                    raise HardwareError("misaligned", naddr, "jump target not 8-byte aligned")
                addr, chunk, pos = naddr, self.mem.read(naddr, nlen).view("<u4").copy(), 0
                fetched += nlen
                continue
            hdr = PACKET.unpack(word)
            if not hdr["write"] or hdr["magic"] != WRITE_MAGIC:
                raise HardwareError("unknown_packet", here, f"unknown packet word {word:#010x}")
            n = hdr["count_minus_1"] + 1
            if pos + 1 + n > chunk.size:
                raise HardwareError("stream_overrun", here, "write packet cut by chunk end")
            index = hdr["reg_index"]
            if not hdr["increment"] and index * 4 == R["conv"]["CFG_DATA"]:
                self._cfg_data(chunk[pos + 1 : pos + 1 + n], here)  # a configuration image
            else:
                for k in range(n):
                    reg = index + k if hdr["increment"] else index
                    irq_seen |= self._stream_write(reg, int(chunk[pos + 1 + k]), here)
            pos += 1 + n
        if not irq_seen:
            raise HardwareError("stream_overrun", addr, "stream ended without interrupt write")
        t = self.totals
        counters = byte_counter_values(t.in_bytes + fetched, t.weight_bytes, t.out_bytes)
        for i, v in enumerate(counters):
            base = R["conv"]["BYTE_COUNTERS_LO"] if i < 8 else R["conv"]["BYTE_COUNTERS_HI"]
            conv[base // 4 + i % 8] = v & 0xFFFFFFFF
        stream_cycles = -(-fetched // self.params.bus_bytes_per_cycle)
        return t.cycles + stream_cycles

    def _cfg_data(self, words: np.ndarray, where: int) -> None:
        """CFG_DATA writes: each stores a word at the controller address CFG_ADDR, which
        then advances by 4 (§10.3); an address outside controller memory stops it."""
        addr_reg = R["conv"]["CFG_ADDR"] // 4
        ptr = int(self.regs["conv"][addr_reg])
        fit = 0 if ptr % 4 else max(0, min(words.size, (CFG_MEM_BYTES - ptr) // 4))
        self.cfg_mem[ptr : ptr + 4 * fit] = words[:fit].astype("<u4").view(np.uint8)
        self.regs["conv"][addr_reg] = ptr + 4 * fit
        if fit < words.size:
            raise HardwareError("bad_config", where,
                                f"controller address {ptr + 4 * fit:#x} invalid")

    def _stream_write(self, reg: int, value: int, where: int) -> bool:
        """A register write issued by the stream; returns True for the interrupt write."""
        conv_regs = R["conv"]
        if reg == U8_TABLE_INDEX:
            self.u8_table = value
            return False
        offset = reg * 4
        if offset == conv_regs["CFG_ADDR"]:
            self.regs["conv"][offset // 4] = value
        elif offset == conv_regs["CFG_DATA"]:
            self._cfg_data(np.array([value], "<u4"), where)
        elif offset == conv_regs["START"]:
            if value & 1:
                from .conv_unit import run_configuration
                self.stats["commands"] += 1
                run_configuration(self)
        elif offset == IRQ_REGS["conv"]:
            if value & 1:
                self.regs["conv"][offset // 4] = 1
                return True
        else:
            raise HardwareError("unknown_packet", where,
                                f"stream writes unknown register word {reg:#x}")
        return False
