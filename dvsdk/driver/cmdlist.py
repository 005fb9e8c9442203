"""Command lists: add, commit, exec, wait (reference §2.2, §2.4, §10).

A list holds commands for one unit.  ``add`` validates at once (as
``dmp_dv_cmdlist_add_raw`` does); ``commit`` re-validates, lowers FC commands to
1×1 convs (§6.4), encodes conv commands into a chained stream in DMA memory and
keeps it, so a committed list runs any number of times.  ``exec`` programs the
stream address, its length in 8-byte units and the kick (conv), or replays the
register writes of §10.6/§10.7 (IPU, maximizer).  ``wait`` takes the interrupt,
acknowledges it and reports the execution time.

Threads: a list may be used from several threads (its methods take its lock; ``run`` is
one exec + wait).  ``exec`` takes the device's unit (:class:`~dvsdk.driver.device.UnitGate`)
and ``wait`` gives it back, so lists sharing a device run one at a time per unit, as the
hardware does: an ``exec`` waits up to its ``timeout`` for the unit (DeviceBusy after),
and fails at once with InvalidCommand if this thread's own exec of another list still
holds it.  Timeouts must be finite, ``0..MAX_TIMEOUT`` s (InvalidArgument otherwise).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from ..errors import DeviceFault, InvalidArgument, InvalidCommand
from ..hw.spec import SPEC
from ..hw.weights import pack_conv_weights, unpack_fc_weights
from .commands import (
    WEIGHT_FMT,
    BufferRef,
    Command,
    ConvCommand,
    ConvRun,
    FcCommand,
)
from .device import Device, check_timeout
from .regdump import describe_registers
from .stream import CHUNK_BYTES, Stream, build_stream, conv_words
from .unitregs import ipu_writes, maximizer_writes
from .validate import validate

REG = {unit: {name: SPEC.reg(unit, name) for name in SPEC.unit(unit)["registers"]}
       for unit in ("conv", "ipu", "maximizer")}
STATUS = SPEC.status
#: what a DeviceFault shows (the simulator's status registers, the kick, the interrupt)
_FAULT_REGS = ("SIM_STATUS", "SIM_FAULT_ADDR", "CMD_ADDR", "CMD_LEN", "IRQ")
_FC_TO_CONV_ACT = {int(k): int(v) for k, v in SPEC.commands["fc_to_conv_actfunc"].items()}


@dataclass
class ExecStats:
    """What the last completed run cost: time, and on the simulator cycles and bytes."""

    exec_time_us: float = 0.0
    cycles: int | None = None
    input_bytes: int = 0
    weight_bytes: int = 0
    output_bytes: int = 0


class CommandList:
    """An ordered list of commands for one unit of one device."""

    def __init__(self, device: Device, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.device = device
        self.info = device.info()
        self.chunk_bytes = chunk_bytes
        self.commands: list[Command] = []
        self.unit: str | None = None
        self.committed = False
        self._stream: Stream | None = None
        self._owned: list = []  # buffers the list allocated (FC weights)
        self._reg_writes: list[list[tuple[int, int]]] = []
        self._exec_id = 0
        self._started_at = 0.0
        self._pending: int | None = None
        self._lock = threading.RLock()
        self.last = ExecStats()

    # -- building -------------------------------------------------------------------
    def add(self, cmd: Command) -> None:
        with self._lock:
            self._add(cmd)

    def _add(self, cmd: Command) -> None:
        if self.committed:
            raise InvalidCommand("the list is already committed", field="state",
                                 value="committed", limit="add before commit")
        unit = getattr(cmd, "device_type", None)
        if unit is None:
            raise InvalidArgument("not a DV700 command", field="cmd", value=type(cmd).__name__)
        if unit not in self.info.units:
            raise InvalidCommand(f"this device has no {unit} unit", field="device_type",
                                 value=unit, limit=self.info.units)
        if self.unit not in (None, unit):
            raise InvalidCommand("a command list holds commands for one unit only",
                                 field="device_type", value=unit, limit=self.unit)
        validate(cmd, self.info)
        self.unit = unit
        self.commands.append(cmd)

    def commit(self) -> None:
        with self._lock:
            self._commit()

    def _commit(self) -> None:
        if self.committed:
            raise InvalidCommand("the list is already committed", field="state",
                                 value="committed", limit="commit once")
        if not self.commands:
            raise InvalidCommand("nothing to commit", field="commands", value=0, limit=">= 1")
        if self.unit == "conv":
            words = []
            for cmd in self.commands:
                conv = self._lower_fc(cmd) if isinstance(cmd, FcCommand) else cmd
                plan = validate(conv, self.info)
                words.append(conv_words(conv, plan.tiles))
            self._stream = build_stream(self.device, words, self.chunk_bytes)
        elif self.unit == "ipu":
            self._reg_writes = [ipu_writes(c) for c in self.commands]
        else:
            self._reg_writes = [maximizer_writes(c) for c in self.commands]
        self.committed = True

    def _lower_fc(self, fc: FcCommand) -> ConvCommand:
        """§6.4: an FC becomes a 1×1 conv on a 1×1×N input; weights are re-packed."""
        n_in, n_out, q = fc.input_size, fc.output_size, bool(fc.weight_fmt)
        buf = fc.weight_buf
        blob = buf.buffer.read(buf.offset, buf.available)
        if q:
            table = blob[:512].view(np.float16)
            idx = blob[512 : 512 + n_in * n_out].reshape(n_out, n_in, 1, 1)
            bstart = 512 + -(-n_in * n_out // 16) * 16
            bias = blob[bstart : bstart + 2 * n_out].view(np.float16)
            packed = pack_conv_weights(idx, bias, table=table)
        else:
            w, bias = unpack_fc_weights(blob, (n_in, 1, 1), (n_out, 1, 1), False)
            packed = pack_conv_weights(w.reshape(n_out, n_in, 1, 1), bias)
        wbuf = self.device.alloc(len(packed), align=64, name="fc-weights")
        self._owned.append(wbuf)
        wbuf.write(0, packed)
        wbuf.sync_for_device()
        fmt = WEIGHT_FMT.q8 if q else WEIGHT_FMT.fp16
        run = ConvRun(m=n_out, conv_enable=1, p=0x0101, pz=1, conv_stride=0x0101,
                      weight_buf=BufferRef(wbuf), weight_fmt=fmt,
                      actfunc=_FC_TO_CONV_ACT[fc.actfunc], actfunc_param=fc.actfunc_param)
        return ConvCommand(input_buf=fc.input_buf, output_buf=fc.output_buf, w=1, h=1, c=n_in,
                           runs=[run], topo=1)

    # -- running ------------------------------------------------------------------------
    def exec(self, timeout: float = 2.0) -> int:
        """Start the list; returns its exec id for :meth:`wait`.  Waits up to ``timeout``
        s for the unit while another list's exec holds it (see the module docstring)."""
        timeout = check_timeout(timeout)
        with self._lock:
            exec_id = self._exec(timeout, block=True)
        assert exec_id is not None
        return exec_id

    def try_exec(self) -> int | None:
        """:meth:`exec` if the unit is free now, else None (nothing started)."""
        with self._lock:
            return self._exec(0.0, block=False)

    def _exec(self, timeout: float, block: bool) -> int | None:
        if not self.committed:
            raise InvalidCommand("commit the list before exec", field="state",
                                 value="not committed", limit="committed")
        if self._pending is not None:
            raise InvalidCommand("the previous exec has not been waited for", field="exec_id",
                                 value=self._pending, limit="wait() first")
        dev, unit = self.device, self.unit
        if not dev.gate.acquire(unit, self, timeout, block):
            return None
        recorder = dev.recorder
        try:
            self._exec_id += 1
            if recorder is not None:  # dvsdk-run --record: what this kick will consume
                recorder.before_exec(self)
            self._started_at = time.perf_counter()
            if unit == "conv":
                regs = REG["conv"]
                dev.write32("conv", regs["IRQ"], 0)
                dev.write32("conv", regs["CMD_ADDR"], self._stream.address)
                dev.write32("conv", regs["CMD_LEN"], self._stream.length8)
                dev.write32("conv", regs["KICK"], 1)
            else:
                self._start_unit(0)
        except BaseException:
            if recorder is not None:
                recorder.abandon(self)
            dev.gate.release(unit, self)
            raise
        self._pending = self._exec_id
        return self._exec_id

    def _start_unit(self, index: int) -> None:
        regs = REG[self.unit]
        self.device.write32(self.unit, regs["IRQ"], 0)
        for offset, value in self._reg_writes[index]:
            self.device.write32(self.unit, offset, value)
        self.device.write32(self.unit, regs["START"], 1)

    def wait(self, exec_id: int, timeout: float = 2.0) -> float:
        """Wait for ``exec_id``; returns the execution time in µs (simulator: from cycles).
        ``timeout`` applies to each interrupt (IPU / maximizer lists wait one per command).
        DeviceTimeout and DeviceFault carry the unit's key registers in their message."""
        timeout = check_timeout(timeout)
        with self._lock:
            return self._wait(exec_id, timeout)

    def _wait(self, exec_id: int, timeout: float) -> float:
        if exec_id != self._pending:
            raise InvalidArgument("no such pending exec", field="exec_id", value=exec_id,
                                  limit=self._pending)
        unit = self.unit
        cycles = 0
        n = len(self._reg_writes) if unit != "conv" else 1
        recorder = self.device.recorder
        try:
            for i in range(n):
                if i:
                    self._start_unit(i)
                self._wait_one(unit, timeout)
                cycles += self._sim_cycles(unit) or 0
        except BaseException:
            if recorder is not None:
                recorder.abandon(self)
            raise
        finally:
            self._pending = None
            self.device.gate.release(unit, self)
        elapsed = (time.perf_counter() - self._started_at) * 1e6
        self.last = ExecStats(exec_time_us=elapsed)
        if self.info.simulated:
            clock = self.info.conv_freq or 300
            self.last.cycles = cycles
            self.last.exec_time_us = cycles / clock
        if unit == "conv":
            self._read_counters()
        if recorder is not None:
            recorder.after_wait(self, self.last)
        return self.last.exec_time_us

    def run(self, timeout: float = 2.0) -> float:
        """``wait(exec(timeout), timeout)`` as one step: no other thread's use of this list
        comes in between."""
        timeout = check_timeout(timeout)
        with self._lock:
            exec_id = self._exec(timeout, block=True)
            return self._wait(exec_id, timeout)

    def _wait_one(self, unit: str, timeout: float) -> None:
        dev, regs = self.device, REG[unit]
        dev.wait_irq(unit, timeout)
        snap = None
        if self.info.simulated and dev.read32(unit, regs["SIM_STATUS"]):
            snap = {name: dev.read32(unit, regs[name]) for name in _FAULT_REGS if name in regs}
        dev.write32(unit, regs["IRQ"], 0)
        if snap is not None:
            status = snap["SIM_STATUS"]
            dev.write32(unit, regs["SIM_STATUS"], 0)
            reason = STATUS.name_of(status)
            raise DeviceFault(f"{unit} reported {reason} at {snap['SIM_FAULT_ADDR']:#x}: "
                              f"{describe_registers(unit, snap)}", status=status,
                              reason=reason, registers=snap, field="SIM_STATUS", value=status)

    def _sim_cycles(self, unit: str) -> int | None:
        if not self.info.simulated:
            return None
        regs = REG[unit]
        lo = self.device.read32(unit, regs["SIM_CYCLES_LO"])
        hi = self.device.read32(unit, regs["SIM_CYCLES_HI"]) if "SIM_CYCLES_HI" in regs else 0
        return hi << 32 | lo

    def _read_counters(self) -> None:
        """§10.10: 16 counters in 16-byte beats, classified by index bits (classes overlap)."""
        regs = REG["conv"]
        counts = [self.device.read32("conv", regs["BYTE_COUNTERS_LO"] + 4 * i) for i in range(8)]
        counts += [self.device.read32("conv", regs["BYTE_COUNTERS_HI"] + 4 * i) for i in range(8)]
        self.last.output_bytes = 16 * sum(v for i, v in enumerate(counts) if i & 3 == 3)
        self.last.weight_bytes = 16 * sum(v for i, v in enumerate(counts) if i & 4)
        self.last.input_bytes = 16 * sum(v for i, v in enumerate(counts) if i & 8)

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._pending is not None:  # an exec never waited for: give the unit back
            self._pending = None
            self.device.gate.release(self.unit, self)
        if self._stream is not None:
            self._stream.free()
            self._stream = None
        for b in self._owned:
            b.free()
        self._owned.clear()

    def __enter__(self) -> CommandList:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
