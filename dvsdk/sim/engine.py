"""The DV700 at register level: register files, controller memory, command processor.

:class:`Dv700Core` is the hardware model.  It owns nothing but state: DRAM is a
uint8 array at a physical base address, and the register files may be views on
someone else's memory (the fake board maps them onto files).  A write to a
unit's start register runs that unit to completion and raises its interrupt:

* conv ``KICK`` (0x408): fetch the command stream at ``CMD_ADDR`` (``CMD_LEN``
  8-byte units) from DRAM and decode it like the hardware (§10.2-10.4): write
  packets, jumps between chunks, the interrupt write;
* IPI ``TRIG`` with kick "r5": the R5 control program (:mod:`.r5`) takes the stream
  address and length from shared memory and kicks the conv block; conv completions
  come back as the IPI;
* conv ``START`` (0x040), reached through the stream: run the configuration
  image at controller address 0x2000 (§10.3) on the conv engine;
* IPU ``START`` / maximizer ``START``: run from their registers (§10.6, §10.7).

Anything the hardware cannot execute (unknown packets, bad or misaligned
addresses, impossible configurations) sets ``SIM_STATUS``/``SIM_FAULT_ADDR``,
records a reason in :attr:`Dv700Core.errors` and raises the interrupt: it never
raises into the host.  The watchdog (:class:`~dvsdk.sim.core.Watchdog`) bounds the
work of one kick: a stream that loops or runs too long stops with ``SIM_STATUS`` =
hang and no interrupt, as a hung DV700 leaves the driver to time out.  Both status
registers describe the last kick: a kick clears them.
"""

from __future__ import annotations

import numpy as np

from ..driver import convid
from ..errors import DvsdkError
from ..hw.timing import (
    COUNTER_SLOT_INPUT,
    COUNTER_SLOT_OUTPUT,
    COUNTER_SLOT_WEIGHTS,
)
from .conv_unit import CFG_ADDR, ConvTotals, run_configuration
from .core import (
    CFG_MEM_BYTES,
    IRQ_REGS,
    START_REGS,
    U8_TABLE_INDEX,
    CoreState,
    R,
)
from .decode import CFG, JUMP, REG, Decoded, decode
from .status import STATUS, Hang, HardwareError
from .units import run_ipu, run_maximizer

_COUNTERS_LO = R["conv"]["BYTE_COUNTERS_LO"] // 4  # word indexes of the 2 x 8 counters
_COUNTERS_HI = R["conv"]["BYTE_COUNTERS_HI"] // 4
_FIRMWARE_SELECT = R["conv"]["FIRMWARE_SELECT"] // 4  # pre-R5: 1 = the ROM firmware
# word indexes of the conv registers a stream writes, and of those start() touches per unit
_CMD_ADDR, _CMD_LEN = R["conv"]["CMD_ADDR"] // 4, R["conv"]["CMD_LEN"] // 4
_CFG_ADDR, _CFG_DATA = R["conv"]["CFG_ADDR"] // 4, R["conv"]["CFG_DATA"] // 4
_START, _IRQ = R["conv"]["START"] // 4, IRQ_REGS["conv"] // 4  # (START: in the stream)
#: the conv word of the byte counters of slots input, weights and output (§10.10: slots
#: 0-7 are BYTE_COUNTERS_LO's words, 8-15 BYTE_COUNTERS_HI's)
_SLOT_IN, _SLOT_W, _SLOT_OUT = (_COUNTERS_LO + s if s < 8 else _COUNTERS_HI + s - 8 for s in
                                (COUNTER_SLOT_INPUT, COUNTER_SLOT_WEIGHTS, COUNTER_SLOT_OUTPUT))
#: per unit: (start, SIM_STATUS, SIM_FAULT_ADDR, SIM_CYCLES_LO, SIM_CYCLES_HI or None)
_UNIT_WORDS = {u: (START_REGS[u] // 4, R[u]["SIM_STATUS"] // 4, R[u]["SIM_FAULT_ADDR"] // 4,
                   R[u]["SIM_CYCLES_LO"] // 4,
                   R[u]["SIM_CYCLES_HI"] // 4 if "SIM_CYCLES_HI" in R[u] else None)
               for u in START_REGS}


_PLAIN: dict[str, dict[str, int] | None] = {}

try:  # numpy's error state as ``np.errstate(all="ignore")`` sets it (below)
    from numpy._core._ufunc_config import _extobj_contextvar, _make_extobj
except ImportError:  # (another numpy: its public context manager per kick)
    _extobj_contextvar = None
#: (the error state it was made from, that state with every error ignored)
_IGNORING: tuple = (None, None)


def _ignore_fp_errors() -> object:
    """What ``np.errstate(all="ignore").__enter__`` does, returning the token that
    :func:`_restore_fp_errors` takes: the ignoring state is made once per state it
    derives from (buffer size, error callback), not per kick (entering the context
    manager took ~2 us of each kick)."""
    global _IGNORING
    if _extobj_contextvar is None:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state
    current = _extobj_contextvar.get()
    made = _IGNORING
    if made[0] is not current:
        _IGNORING = made = (current, _make_extobj(all="ignore"))
    return _extobj_contextvar.set(made[1])


def _restore_fp_errors(token: object) -> None:
    if _extobj_contextvar is None:
        token.__exit__(None, None, None)  # type: ignore[attr-defined]
    else:
        _extobj_contextvar.reset(token)  # type: ignore[arg-type]


def _plain_counters(kick: str) -> dict[str, int] | None:
    """``convid.counter_registers(kick)``, looked up once per kick protocol (every kick
    asks)."""
    if kick not in _PLAIN:
        _PLAIN[kick] = convid.counter_registers(kick)
    return _PLAIN[kick]


class Dv700Core(CoreState):
    """The DV700 model: :class:`~dvsdk.sim.core.CoreState` plus what register writes start."""

    def write_reg(self, unit: str, offset: int, value: int) -> None:
        """A CPU write: store, then do what the register triggers."""
        value &= 0xFFFFFFFF
        if unit == "ipi" and self.r5 is not None:  # the R5 kick's IPI channel (.r5)
            self.r5.write(offset, value)
            return
        if unit == "shm":  # shared memory: plain storage, read by the R5 on a trigger
            self.regs[unit][offset // 4] = value
            return
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

    # -- execution ----------------------------------------------------------------------
    def start(self, unit: str) -> None:
        """The start register of ``unit`` was written with 1."""
        regs = self.regs[unit]
        start_reg, status_reg, fault_reg, lo_reg, hi_reg = _UNIT_WORDS[unit]
        regs[start_reg] = 0
        self.stats["kicks"] += 1
        regs[status_reg] = regs[fault_reg] = 0
        if self.faults.hang:
            self.faults.hang -= 1
            return
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
                # once per kick, not per command: inf and NaN are values to the
                # hardware, not errors
                token = _ignore_fp_errors()
                try:
                    cycles = self._run_stream()
                finally:
                    _restore_fp_errors(token)
            else:
                cycles = self._run_unit(unit)
        except HardwareError as e:
            regs[status_reg] = e.status
            regs[fault_reg] = e.address & 0xFFFFFFFF
            self.errors.append(f"{unit}: {STATUS.name_of(e.status)}: {e.reason}")
            if len(self.errors) > 1000:
                del self.errors[:-100]
            self.mem.flip_next_write = False
            if not isinstance(e, Hang):  # a hung unit never interrupts
                self.raise_irq(unit)
            return
        self.stats["cycles"] += cycles
        regs[lo_reg] = cycles & 0xFFFFFFFF
        if hi_reg is not None:
            regs[hi_reg] = cycles >> 32
        if unit == "conv" and regs[_IRQ]:
            # the stream raised it already; the callback fires once the run completed
            if self.faults.lost_irq:
                self.faults.lost_irq -= 1
                regs[_IRQ] = 0
            elif self.on_irq:
                self.on_irq("conv")
        elif unit != "conv":
            if self.faults.lost_irq:
                self.faults.lost_irq -= 1
            else:
                self.raise_irq(unit)

    def _run_unit(self, unit: str) -> int:
        """The maximizer or the IPU from its registers; anything they cannot run that their
        checks missed is still a status, never a host exception."""
        try:
            if unit == "maximizer":
                return run_maximizer(self)
            if self._lut_pending:  # ncolor_lut == 0 reuses the last palette (§3.5)
                self.ipu_lut = np.array(self._lut_pending, np.uint32)
                self._lut_pending = []
            return run_ipu(self)
        except HardwareError:
            raise
        except (DvsdkError, ValueError, IndexError, ZeroDivisionError, OverflowError) as e:
            base = R[unit]["IN_ADDR" if unit == "maximizer" else "WR_ADDR"]
            raise HardwareError("bad_config", self.read_reg(unit, base),
                                f"{unit} program cannot run: {e}") from None

    def _run_stream(self) -> int:
        """Fetch and decode the command stream (§10.2-10.4) under the watchdog; returns
        cycles."""
        conv = self.regs["conv"]
        addr = int(conv[_CMD_ADDR])
        length = int(conv[_CMD_LEN]) * 8
        conv[_COUNTERS_LO : _COUNTERS_LO + 8] = 0  # counters reset per run ([INFER] §10.10)
        conv[_COUNTERS_HI : _COUNTERS_HI + 8] = 0
        kick = self.params.kick
        plain = _PLAIN[kick] if kick in _PLAIN else _plain_counters(kick)
        if plain is not None:
            # a pre-R5 controller runs the ROM firmware only once the driver selected it
            # (DMP's 2019-02 kernel writes 1 at probe); the RAM holds none ([INFER])
            if conv[_FIRMWARE_SELECT] != 1:
                raise HardwareError("bad_config", addr, "the conv controller has no firmware: "
                                    "FIRMWARE_SELECT (0x44) is not 1 (ROM)")
            for off in plain.values():
                conv[off // 4] = 0
        self.totals = ConvTotals()
        self.kick_commands = 0
        self.image = None
        if addr % 8:
            raise HardwareError("misaligned", addr, "command stream address not 8-byte aligned")
        if length == 0:
            raise HardwareError("stream_overrun", addr, "command stream length is 0")
        wd = self.params.watchdog
        fetched = steps = 0
        irq_seen = False
        here, nbytes = addr, length
        while True:  # chunk by chunk, each decoded once per content (decode.py)
            raw = self._fetch(here, nbytes, fetched)
            dec = self._decoded(raw, here)
            fetched += nbytes
            if steps + dec.steps > wd.stream_steps:  # the watchdog stops it in this chunk
                dec = decode(raw.view("<u4").copy(), here, wd.stream_steps - steps,
                             f"watchdog: {wd.stream_steps} packets decoded and no interrupt "
                             "write (the stream loops or does not end)")
            steps += dec.steps
            jump = None
            for op in dec.ops:
                kind = op[0]
                if kind == REG:
                    reg = op[1]
                    if reg == _CFG_ADDR:  # (_stream_write's two most common cases, inline)
                        conv[_CFG_ADDR] = op[2]
                    elif reg == _START and op[2] & 1:
                        self._command(op[3])
                    else:
                        irq_seen |= self._stream_write(reg, op[2], op[3])
                elif kind == CFG:  # a configuration image (kept with the chunk: core.image)
                    self.image = ((dec.plans, op[2], op[1].size) if conv[_CFG_ADDR] == CFG_ADDR
                                  else None)
                    self._cfg_data(op[1], op[2])
                elif kind == JUMP:
                    jump = op
                elif op[1] == "hang":
                    raise Hang(op[2], op[3])
                else:
                    raise HardwareError(op[1], op[2], op[3])
            if jump is None:
                break
            here, nbytes = jump[1], jump[2]
        if not irq_seen:  # (at the last chunk's address)
            raise HardwareError("stream_overrun", here, "stream ended without interrupt write")
        t = self.totals
        # (timing.byte_counter_values, its sums known non-negative)
        beats_in = -(-(t.in_bytes + fetched) // 16) & 0xFFFFFFFF
        beats_w = -(-t.weight_bytes // 16) & 0xFFFFFFFF
        beats_out = -(-t.out_bytes // 16) & 0xFFFFFFFF
        if plain is not None:  # pre-R5: three beat registers (driver.convid)
            conv[plain["input"] // 4] = beats_in
            conv[plain["weights"] // 4] = beats_w
            conv[plain["output"] // 4] = beats_out
        else:  # (the other counters were zeroed above, and a stream cannot write them)
            conv[_SLOT_IN] = beats_in
            conv[_SLOT_W] = beats_w
            conv[_SLOT_OUT] = beats_out
        return t.cycles - (-fetched // self.params.bus_bytes_per_cycle)  # (_stream_cycles)

    def _decoded(self, raw: np.ndarray, addr: int) -> Decoded:
        """``decode`` of the chunk whose bytes are ``raw``, kept per address and content
        (the same command list kicked again decodes nothing)."""
        key = (addr, raw.tobytes())
        dec = self._chunks.get(key)
        if dec is None:
            if len(self._chunks) >= 256:
                self._chunks.clear()
            dec = self._chunks[key] = decode(raw.view("<u4").copy(), addr)
        return dec

    def _stream_cycles(self, fetched: int) -> int:
        return -(-fetched // self.params.bus_bytes_per_cycle)

    def _fetch(self, addr: int, nbytes: int, fetched: int) -> np.ndarray:
        """A chunk of the stream's bytes (a view: decoded or copied at once): DRAM range
        first, then the watchdog's word and cycle budgets, then the read (its size is
        bounded by then)."""
        mem = self.mem
        if addr < mem.base or addr - mem.base + nbytes > mem.array.size or nbytes < 0:
            mem.check_range(addr, nbytes)  # (its HardwareError)
        wd = self.params.watchdog
        if (fetched + nbytes) // 4 > wd.stream_words:
            raise Hang(addr, f"watchdog: more than {wd.stream_words} stream words fetched")
        if self.totals.cycles - (-(fetched + nbytes) // self.params.bus_bytes_per_cycle) \
                > self.kick_cycle_limit:  # (_stream_cycles)
            raise Hang(addr, f"watchdog: the kick passed {self.kick_cycle_limit} cycles")
        return mem.read(addr, nbytes)

    def _cfg_data(self, data: np.ndarray, where: int) -> None:
        """CFG_DATA writes of ``data`` (words as little-endian bytes): each stores a word at
        the controller address CFG_ADDR, which then advances by 4 (§10.3); an address
        outside controller memory stops it."""
        conv = self.regs["conv"]
        ptr = int(conv[_CFG_ADDR])
        nwords = data.size >> 2
        if not ptr & 3 and not data.size & 3 and ptr + 4 * nwords <= CFG_MEM_BYTES:  # (fits)
            self.cfg_mem[ptr : ptr + 4 * nwords] = data
            conv[_CFG_ADDR] = ptr + 4 * nwords
            return
        fit = 0 if ptr % 4 else max(0, min(nwords, (CFG_MEM_BYTES - ptr) // 4))
        self.cfg_mem[ptr : ptr + 4 * fit] = data[: 4 * fit]
        conv[_CFG_ADDR] = ptr + 4 * fit
        if fit < nwords:
            raise HardwareError("bad_config", where,
                                f"controller address {ptr + 4 * fit:#x} invalid")

    def _command(self, where: int) -> None:
        """START written with 1 by the stream packet at ``where``: run the configuration
        image as one command, under the watchdog's command count."""
        self.kick_commands += 1
        if self.kick_commands > self.params.watchdog.commands:
            raise Hang(where, f"watchdog: more than {self.params.watchdog.commands} "
                       "conv commands in one kick")
        self.stats["commands"] += 1
        try:
            run_configuration(self)
        except Hang as e:
            raise Hang(where, e.reason) from None

    def _stream_write(self, reg: int, value: int, where: int) -> bool:
        """A register write issued by the stream; returns True for the interrupt write."""
        if reg == U8_TABLE_INDEX:
            self.u8_table = value
            return False
        if reg == _CFG_ADDR:
            self.regs["conv"][reg] = value
        elif reg == _CFG_DATA:
            self.image = None
            self._cfg_data(np.array([value], "<u4").view(np.uint8), where)
        elif reg == _START:
            if value & 1:
                self._command(where)
        elif reg == _IRQ:
            if value & 1:
                self.regs["conv"][reg] = 1
                return True
        else:
            raise HardwareError("unknown_packet", where,
                                f"stream writes unknown register word {reg:#x}")
        return False
