"""Command lists: add, commit, exec, wait (reference §2.2, §2.4, §10).

A list holds commands for one unit.  ``add`` validates at once (as
``dmp_dv_cmdlist_add_raw`` does); ``commit`` re-validates, lowers FC commands to
1×1 convs (§6.4), encodes conv commands into a chained stream in DMA memory and
keeps it, so a committed list runs any number of times.  ``exec`` kicks the stream
with the device's protocol (the R5 through shared memory and an IPI, or the conv
registers directly, :mod:`~dvsdk.driver.kick`), or replays the register writes of
§10.6/§10.7 (IPU, maximizer).  ``wait`` takes the interrupt, acknowledges it and
reports the execution time.  A device that takes whole command lists (``dv://``,
DMP's kernel module) gets them through :meth:`Device.prepare
<dvsdk.driver.device.Device.prepare>` instead (:mod:`~dvsdk.driver.submit`).

Threads: a list may be used from several threads (its methods take its lock; ``run`` is
one exec + wait).  ``exec`` takes the device's unit (:class:`~dvsdk.driver.device.UnitGate`)
and ``wait`` gives it back, so lists sharing a device run one at a time per unit, as the
hardware does: an ``exec`` waits up to its ``timeout`` for the unit (DeviceBusy after,
naming the holder), and fails at once with InvalidCommand if this thread's own exec of
another list still holds it.  An exec nobody will wait for (:meth:`~CommandList.abandon`:
a dropped ``run_async`` handle) is finished by whoever needs the unit next, and a late
``wait`` gets its outcome.  Timeouts must be finite, ``0..MAX_TIMEOUT`` s
(InvalidArgument otherwise).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..errors import DeviceTimeout, DvsdkError, InvalidArgument, InvalidCommand
from ..hw.spec import SPEC
from ..hw.weights import fc_weight_size, pack_conv_weights, unpack_fc_weights
from .commands import (
    WEIGHT_FMT,
    BufferRef,
    Command,
    ConvCommand,
    ConvRun,
    FcCommand,
)
from .device import MAX_TIMEOUT, Device, check_timeout
from .stream import CHUNK_BYTES
from .submit import ExecStats, RegisterSubmission
from .validate import validate

__all__ = ["CommandList", "ExecStats"]

_FC_TO_CONV_ACT = {int(k): int(v) for k, v in SPEC.commands["fc_to_conv_actfunc"].items()}


class CommandList:
    """An ordered list of commands for one unit of one device."""

    def __init__(self, device: Device, *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.device = device
        self.info = device.info()
        self.chunk_bytes = chunk_bytes
        self.commands: list[Command] = []
        #: the commands as the device runs them, from commit on: an FC lowered to a
        #: 1x1 conv (§6.4) whose weights the list re-packed into a buffer of its own
        self.device_commands: list[Command] = []
        #: each FC's packed weights as commit read them to re-pack them (what a recording
        #: stores: the device never reads these bytes, and the buffer may change or go
        #: after commit)
        self.fc_weights: list[tuple[FcCommand, np.ndarray]] = []
        self.unit: str | None = None
        self.committed = False
        self._submission: Any = None  # what the device made of the committed commands
        self._owned: list = []  # buffers the list allocated (FC weights)
        self._exec_id = 0
        self._pending: int | None = None
        self._abandoned: int | None = None  # the pending exec nobody will wait for
        self._reaped: tuple[int, ExecStats | BaseException] | None = None  # finished for it
        self._lock = threading.RLock()
        self.last = ExecStats()
        #: what DeviceBusy and InvalidCommand call this list when it holds its unit
        self.label = ""

    @property
    def stream(self) -> Any:
        """The committed conv stream (:class:`~dvsdk.driver.stream.Stream`) on a
        register-level device; None before commit, for IPU / maximizer lists, and where
        the kernel module builds the stream (``dv://``)."""
        return getattr(self._submission, "stream", None)

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
        cmds = [self._lower_fc(c) if isinstance(c, FcCommand) else c for c in self.commands]
        plans = [validate(c, self.info) for c in cmds]
        self.device_commands = cmds
        sub = self.device.prepare(self.unit, cmds, self.info)
        if sub is None:  # a register-level device: build the stream / register programs
            sub = RegisterSubmission(self.device, self.unit, cmds, plans, self.info,
                                     self.chunk_bytes)
        self._submission = sub
        self.committed = True

    def _lower_fc(self, fc: FcCommand) -> ConvCommand:
        """§6.4: an FC becomes a 1×1 conv on a 1×1×N input; weights are re-packed."""
        n_in, n_out, q = fc.input_size, fc.output_size, bool(fc.weight_fmt)
        buf = fc.weight_buf
        blob = buf.buffer.read(buf.offset, buf.available)
        self.fc_weights.append((fc, blob[: fc_weight_size(n_in, n_out, q)].copy()))
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
        if type(timeout) is not float or not 0.0 <= timeout <= MAX_TIMEOUT:
            timeout = check_timeout(timeout)  # (its fast path inline: two calls per kick)
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
        if self._pending is not None and self._pending == self._abandoned:
            self.gate_reclaim(timeout)  # its handle was dropped: finish it first
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
            self._submission.start()
        except BaseException:
            if recorder is not None:
                recorder.abandon(self)
            dev.gate.release(unit, self)
            raise
        self._pending = self._exec_id
        self._abandoned = self._reaped = None
        return self._exec_id

    def wait(self, exec_id: int, timeout: float = 2.0) -> float:
        """Wait for ``exec_id``; returns the execution time in µs (simulator: from cycles).
        ``timeout`` applies to each interrupt (IPU / maximizer lists wait one per command).
        DeviceTimeout and DeviceFault carry the unit's key registers in their message."""
        if type(timeout) is not float or not 0.0 <= timeout <= MAX_TIMEOUT:
            timeout = check_timeout(timeout)
        with self._lock:
            return self._wait(exec_id, timeout)

    def _wait(self, exec_id: int, timeout: float) -> float:
        if self._reaped is not None and self._reaped[0] == exec_id:  # finished for us
            outcome, self._reaped = self._reaped[1], None
            if isinstance(outcome, BaseException):
                raise outcome
            return outcome.exec_time_us
        if exec_id != self._pending:
            raise InvalidArgument("no such pending exec", field="exec_id", value=exec_id,
                                  limit=self._pending)
        recorder = self.device.recorder
        try:
            self.last = self._submission.wait(timeout)
        except BaseException:
            if recorder is not None:
                recorder.abandon(self)
            raise
        finally:
            self._pending = None
            self.device.gate.release(self.unit, self)
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

    # -- an exec nobody waits for ------------------------------------------------------
    def abandon(self, exec_id: int) -> None:
        """Nobody will wait for ``exec_id`` (its run's handle was dropped): whoever needs
        this unit next finishes it (:meth:`gate_reclaim`).  Takes no lock: it may run in a
        finalizer, on any thread."""
        if self._pending == exec_id:
            self._abandoned = exec_id

    @property
    def gate_abandoned(self) -> bool:
        """The unit gate's question: is the exec holding the unit one nobody waits for?"""
        return self._pending is not None and self._pending == self._abandoned

    @property
    def gate_label(self) -> str:
        """How a DeviceBusy or InvalidCommand of the unit gate names this list."""
        what = self.label or f"a {self.unit} command list"
        note = ", whose handle was dropped" if self.gate_abandoned else ", not waited for yet"
        return f"{what} (exec {self._pending}{note})"

    def gate_reclaim(self, timeout: float) -> None:
        """Finish the abandoned exec so the unit can go to another list: wait up to
        ``timeout`` for its interrupt, keep the outcome for a late :meth:`wait`, give the
        unit back.  If it has not finished by then, the unit stays held: the device may
        still be running it."""
        with self._lock:
            exec_id = self._pending
            if exec_id is None or exec_id != self._abandoned:
                return
            recorder = self.device.recorder
            outcome: ExecStats | BaseException
            try:
                self.last = outcome = self._submission.wait(timeout)
            except DeviceTimeout:
                return
            except DvsdkError as exc:
                outcome = exc
                if recorder is not None:
                    recorder.abandon(self)
            else:
                if recorder is not None:
                    recorder.after_wait(self, self.last)
            self._pending = self._abandoned = None
            self._reaped = (exec_id, outcome)
            self.device.gate.release(self.unit, self)

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._pending is not None:  # an exec never waited for: give the unit back
            self._pending = self._abandoned = None
            self.device.gate.release(self.unit, self)
        if self._submission is not None:
            self._submission.free()
            self._submission = None
        for b in self._owned:
            b.free()
        self._owned.clear()

    def __enter__(self) -> CommandList:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
