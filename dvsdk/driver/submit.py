"""A committed command list on a register-level device: the stream, the kick, the wait.

:class:`~dvsdk.driver.cmdlist.CommandList` hands its validated commands to the device
(:meth:`~dvsdk.driver.device.Device.prepare`).  A backend without register access
(``dv://``) returns its own submission; for every register-level backend (``sim://``,
``uio://``, the link) :class:`RegisterSubmission` does the work:

* conv: the commands become one chained stream in DMA memory (§10.2-10.4), started and
  waited for with the device's kick protocol (:mod:`dvsdk.driver.kick`: ``r5`` or
  ``direct``);
* IPU / maximizer: the register programs of §10.6 / §10.7, replayed from the CPU one
  command at a time (the unit's start register, then its interrupt, acknowledged by
  writing 0 to 0x020, §10.5).

On the simulator (``DeviceInfo.simulated``) the exec time comes from the cycle registers
and a status register reports what the hardware could not run (``DeviceFault``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter

from ..errors import DeviceFault
from ..hw.spec import SPEC
from . import convid
from .device import Device, DeviceInfo
from .kick import protocol
from .regdump import describe_registers
from .stream import CHUNK_BYTES, Stream, build_stream, conv_words
from .unitregs import ipu_writes, maximizer_writes

REG = {unit: {name: SPEC.reg(unit, name) for name in SPEC.unit(unit)["registers"]}
       for unit in ("conv", "ipu", "maximizer")}
STATUS = SPEC.status
#: what a DeviceFault shows (the simulator's status registers, the kick, the interrupt)
_FAULT_REGS = ("SIM_STATUS", "SIM_FAULT_ADDR", "CMD_ADDR", "CMD_LEN", "IRQ")
#: §10.10: which of the 16 byte counters count each class (the classes overlap)
_OUTPUT_SLOTS = tuple(i for i in range(16) if i & 3 == 3)
_WEIGHT_SLOTS = tuple(i for i in range(16) if i & 4)
_INPUT_SLOTS = tuple(i for i in range(16) if i & 8)
_INPUT_OF, _WEIGHT_OF, _OUTPUT_OF = (itemgetter(*s) for s in (_INPUT_SLOTS, _WEIGHT_SLOTS,
                                                               _OUTPUT_SLOTS))


def counter_beats(counts: list[int]) -> tuple[int, int, int]:
    """(input, weights, output) 16-byte beats of the 16 byte counters (§10.10): output
    slots have ``i & 3 == 3``, weights ``i & 4``, input ``i & 8`` (a slot may count in
    several classes, as the kernel sums them)."""
    return (sum(_INPUT_OF(counts)), sum(_WEIGHT_OF(counts)), sum(_OUTPUT_OF(counts)))


@dataclass
class ExecStats:
    """What the last completed run cost: time, and on the simulator cycles and bytes."""

    exec_time_us: float = 0.0
    cycles: int | None = None
    input_bytes: int = 0
    weight_bytes: int = 0
    output_bytes: int = 0


class RegisterSubmission:
    """Commands of one unit made ready for a register-level device (module docstring)."""

    def __init__(self, device: Device, unit: str, commands: Sequence, plans: Sequence,
                 info: DeviceInfo, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.device, self.unit, self.info = device, unit, info
        self.stream: Stream | None = None
        self.reg_writes: list[list[tuple[int, int]]] = []
        self.kick = protocol(device.kick) if unit == "conv" else None
        if unit == "conv":
            words = [conv_words(cmd, plan.tiles) for cmd, plan in zip(commands, plans)]
            self.stream = build_stream(device, words, chunk_bytes)
            device.stream_committed(self.stream.address, self.stream.length8)
        elif unit == "ipu":
            self.reg_writes = [ipu_writes(c) for c in commands]
        else:
            self.reg_writes = [maximizer_writes(c) for c in commands]
        self._started_at = 0.0
        self._prepare_run(device, unit, info)

    def _prepare_run(self, device: Device, unit: str, info: DeviceInfo) -> None:
        """What every exec of this list does, worked out once: the kick's register writes
        (the stream never moves), the interrupt line, where the simulator's status and
        cycle registers are (one block read where they are adjacent words) and which
        byte counters the bitstream has."""
        self._kick_writes = (() if self.kick is None or self.stream is None else
                             self.kick.start_plan(self.stream.address, self.stream.length8))
        self._irq_line = self.kick.irq_line if self.kick is not None else unit
        self._plain_counters = convid.counter_registers(device.kick) if unit == "conv" \
            else None
        regs = REG[unit]
        self._sim_block: tuple[int, int, int, int, int | None] | None = None
        if info.simulated:
            names = ["SIM_CYCLES_LO", "SIM_STATUS"] + (["SIM_CYCLES_HI"]
                                                       if "SIM_CYCLES_HI" in regs else [])
            offs = [regs[n] for n in names]
            lo, hi = min(offs), max(offs)
            if hi - lo == 4 * (len(offs) - 1):  # adjacent words: read in one go
                self._sim_block = (lo, len(offs), (regs["SIM_CYCLES_LO"] - lo) // 4,
                                   (regs["SIM_STATUS"] - lo) // 4,
                                   None if len(offs) == 2 else (regs["SIM_CYCLES_HI"] - lo) // 4)

    def start(self) -> None:
        """Kick the stream (conv) or start the first register program."""
        self._started_at = time.perf_counter()
        if self.unit == "conv":
            assert self.kick is not None and self.stream is not None
            dev = self.device
            # (KickProtocol.start with its writes resolved at commit)
            self.kick.acknowledge(dev)
            for window, offset, value in self._kick_writes:
                dev.write32(window, offset, value)
        else:
            self._start_unit(0)

    def _start_unit(self, index: int) -> None:
        regs, dev = REG[self.unit], self.device
        dev.write32(self.unit, regs["IRQ"], 0)
        for offset, value in self.reg_writes[index]:
            dev.write32(self.unit, offset, value)
        dev.write32(self.unit, regs["START"], 1)

    def wait(self, timeout: float) -> ExecStats:
        """Wait for the completion (``timeout`` per interrupt; an IPU / maximizer list
        waits one per command, starting the next after each)."""
        unit = self.unit
        if unit == "conv":  # (one interrupt)
            cycles = self._wait_one(timeout)
        else:
            cycles = 0
            for i in range(len(self.reg_writes)):
                if i:
                    self._start_unit(i)
                cycles += self._wait_one(timeout)
        info = self.info
        if info.simulated:
            stats = ExecStats(cycles / (info.conv_freq or 300), cycles)
        else:
            stats = ExecStats((time.perf_counter() - self._started_at) * 1e6)
        if unit == "conv":
            self._read_counters(stats)
        return stats

    def _wait_one(self, timeout: float) -> int:
        """One interrupt, acknowledged; returns the simulator's cycles (0 on hardware)."""
        dev, unit, regs = self.device, self.unit, REG[self.unit]
        dev.wait_irq(self._irq_line, timeout)
        snap = None  # (taken before the acknowledge: it shows the interrupt as it was)
        cycles = 0
        block = self._sim_block
        if block is not None:
            words = dev.read_words(unit, block[0], block[1])
            cycles = words[block[2]] | (0 if block[4] is None else words[block[4]] << 32)
            status = words[block[3]]
        elif self.info.simulated:
            status = dev.read32(unit, regs["SIM_STATUS"])
            cycles = self._sim_cycles() or 0
        else:
            status = 0
        if status:
            snap = {name: dev.read32(unit, regs[name]) for name in _FAULT_REGS if name in regs}
        if self.kick is not None:
            self.kick.acknowledge(dev)
        else:
            dev.write32(unit, regs["IRQ"], 0)
        if snap is not None:
            status = snap["SIM_STATUS"]
            dev.write32(unit, regs["SIM_STATUS"], 0)
            reason = STATUS.name_of(status)
            raise DeviceFault(f"{unit} reported {reason} at {snap['SIM_FAULT_ADDR']:#x}: "
                              f"{describe_registers(unit, snap)}", status=status,
                              reason=reason, registers=snap, field="SIM_STATUS", value=status)
        return cycles

    def _sim_cycles(self) -> int | None:
        if not self.info.simulated:
            return None
        regs, unit = REG[self.unit], self.unit
        lo = self.device.read32(unit, regs["SIM_CYCLES_LO"])
        hi = self.device.read32(unit, regs["SIM_CYCLES_HI"]) if "SIM_CYCLES_HI" in regs else 0
        return hi << 32 | lo

    def _read_counters(self, stats: ExecStats) -> None:
        """§10.10: 16 counters in 16-byte beats, classified by index bits (classes overlap);
        on a pre-R5 bitstream three beat registers (:func:`convid.counter_registers`)."""
        regs, dev = REG["conv"], self.device
        plain = self._plain_counters
        if plain is not None:
            stats.input_bytes, stats.weight_bytes, stats.output_bytes = (
                16 * dev.read32("conv", plain[k]) for k in ("input", "weights", "output"))
            return
        c = dev.read_words("conv", regs["BYTE_COUNTERS_LO"], 8)
        c += dev.read_words("conv", regs["BYTE_COUNTERS_HI"], 8)
        beats = counter_beats(c)
        stats.input_bytes, stats.weight_bytes, stats.output_bytes = (
            16 * beats[0], 16 * beats[1], 16 * beats[2])

    def free(self) -> None:
        if self.stream is not None:
            self.stream.free()
            self.stream = None
