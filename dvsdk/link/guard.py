"""What one dvlink session may make the device touch: its own DMA buffers, nothing else.

``firmware_spec/link.md`` §10.  The agent keeps, per session, the register
values the client wrote and a model of the conv controller memory.  Before a
write that may start a unit (conv ``KICK``, the conv ``START`` a stream also
reaches, IPU and maximizer ``START``, the R5 kick's IPI ``TRIG``, which starts the
stream named in shared memory) it works out every DRAM range the unit
will read or write (:mod:`dvsdk.driver.streamwalk`) and refuses the write with
:class:`~dvsdk.errors.AccessViolation` unless each range lies inside the
session's buffers.  A unit may not write over the command stream it is
executing, and the stream chunks the walk vetted are synced for the device
before the kick, so what was checked is what runs.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable

import numpy as np

from ..driver import streamwalk as sw
from ..driver.device import UNITS, WINDOWS, DmaBuffer
from ..errors import AccessViolation, InvalidCommand
from ..hw.spec import SPEC

_U32 = 0xFFFFFFFF
START = {u: SPEC.reg(u, SPEC.unit(u)["start"]) for u in UNITS + ("ipi",)}
#: the R5's channel bit: an IPI trigger carrying it starts the stream in shared memory
R5_CHANNEL = int(SPEC.registers["kick"]["r5"]["pending"][2])
_CONTROLLER_REGS = (sw.CONV_CFG_ADDR, sw.CONV_CFG_DATA, sw.CONV_START)
#: the unit gate (dvsdk.driver.unitgate) a register window belongs to: the R5 kick's
#: windows start and finish conv streams
GATE_UNIT = {"conv": "conv", "ipu": "ipu", "maximizer": "maximizer", "ipi": "conv",
             "shm": "conv"}
GATE_WINDOWS = {u: tuple(w for w, g in GATE_UNIT.items() if g == u) for u in UNITS}


def started_unit(window: str, offset: int, value: int) -> str | None:
    """The gate unit a register write starts, if it starts one (link.md §10): conv ``KICK``
    or ``START``, IPU or maximizer ``START`` with a nonzero value, an IPI ``TRIG`` with
    the R5's channel bit."""
    if window == "ipi":
        return "conv" if offset == START["ipi"] and value & R5_CHANNEL else None
    if window in UNITS and value and (offset == START[window] or
                                      (window == "conv" and offset == sw.CONV_START)):
        return window
    return None


class Coverage:
    """The session's live buffers as sorted, merged address ranges."""

    def __init__(self, buffers: Iterable[DmaBuffer]) -> None:
        self.bufs = sorted((b for b in buffers if not b.freed), key=lambda b: b.phys)
        merged: list[list[int]] = []
        for b in self.bufs:
            if merged and b.phys <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b.phys + b.size)
            else:
                merged.append([b.phys, b.phys + b.size])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]

    def covers(self, addr: int, nbytes: int) -> bool:
        i = bisect.bisect_right(self.starts, addr) - 1
        return i >= 0 and addr >= self.starts[i] and addr + nbytes <= self.ends[i]

    def check(self, a: sw.Access) -> None:
        if not self.covers(a.address, a.nbytes):
            raise AccessViolation(
                f"{a.what} {a.kind} of {a.nbytes} bytes at {a.address:#x} lies outside this "
                "session's DMA buffers: the kick is refused", address=a.address,
                nbytes=a.nbytes, access=a.kind, what=a.what, field="address",
                value=f"{a.address:#x}")

    def _pieces(self, addr: int, nbytes: int) -> list[tuple[DmaBuffer, int, int]]:
        out = []
        for b in self.bufs:
            lo, hi = max(addr, b.phys), min(addr + nbytes, b.phys + b.size)
            if lo < hi:
                out.append((b, lo - b.phys, hi - lo))
        return out

    def fetch(self, addr: int, nbytes: int) -> np.ndarray:
        """The CPU view's bytes of a stream chunk (refused unless the session owns it)."""
        self.check(sw.Access(addr, nbytes, False, "command stream"))
        parts = [b.view[off:off + n] for b, off, n in self._pieces(addr, nbytes)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def sync_for_device(self, addr: int, nbytes: int) -> None:
        for b, off, n in self._pieces(addr, nbytes):
            b.sync_for_device(off, n)


class KickGuard:
    """Per-session register shadow and controller model; vets every start."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """A new session: nothing written, controller memory unknown."""
        self.regs: dict[str, dict[int, int]] = {u: {} for u in WINDOWS}
        self.ctrl = sw.Controller()

    def device_reset(self) -> None:
        """The device was reset: its controller memory is unknown again."""
        self.ctrl.forget()

    def forget_unit(self, unit: str) -> None:
        """Someone else used ``unit`` (a gate unit: conv with the R5's ipi and shm windows,
        ipu, maximizer) since this session wrote its registers: they are unknown again, so
        a start that needs one this session has not written since is refused."""
        for window in GATE_WINDOWS[unit]:
            self.regs[window] = {}
        if unit == "conv":
            self.ctrl = sw.Controller()

    def prepare(self, unit: str, offset: int, value: int,
                buffers: Iterable[DmaBuffer]) -> Callable[[], None]:
        """Vet a register write before it reaches the device; returns what to record once
        the device accepted it.  Raises AccessViolation or InvalidCommand to refuse it."""
        value &= _U32
        regs = self.regs[unit]

        def store() -> None:
            regs[offset] = value

        r5 = unit == "ipi" and offset == START["ipi"] and value & R5_CHANNEL
        if r5 or (unit == "conv" and offset == START["conv"] and value):
            cov = Coverage(buffers)
            regs_of, addr_reg, len_reg = (("shm", "STREAM_ADDR", "STREAM_LEN8") if r5
                                          else ("conv", "CMD_ADDR", "CMD_LEN"))
            addr = self._needed(regs_of, addr_reg)
            accesses, after = sw.conv_kick_accesses(cov.fetch, addr,
                                                    self._needed(regs_of, len_reg), self.ctrl)
            self._check(accesses, cov)
            for a in accesses:
                if a.what == "command stream":
                    cov.sync_for_device(a.address, a.nbytes)
            return lambda: (store(), setattr(self, "ctrl", after))
        if unit == "conv" and offset in _CONTROLLER_REGS:
            accesses, after = sw.conv_register_accesses(self.ctrl, offset, value)
            if accesses:
                self._check(accesses, Coverage(buffers))
            return lambda: (store(), setattr(self, "ctrl", after))
        if unit in ("ipu", "maximizer") and offset == START[unit] and value:
            walk = sw.ipu_accesses if unit == "ipu" else sw.maximizer_accesses
            self._check(walk(regs), Coverage(buffers))
        return store

    def _needed(self, unit: str, name: str) -> int:
        off = SPEC.reg(unit, name)
        if off not in self.regs[unit]:
            raise InvalidCommand(f"{unit} register {name} was not written in this session",
                                 field=name, value=None)
        return self.regs[unit][off]

    @staticmethod
    def _check(accesses: list[sw.Access], cov: Coverage) -> None:
        for a in accesses:
            cov.check(a)
        chunks = [a for a in accesses if a.what == "command stream"]
        for w in (a for a in accesses if a.write):
            for c in chunks:
                if w.address < c.end and c.address < w.end:
                    raise AccessViolation(
                        f"{w.what} at {w.address:#x} would overwrite the command stream at "
                        f"{c.address:#x}: the kick is refused", address=w.address,
                        nbytes=w.nbytes, access="write", what=w.what, field="address",
                        value=f"{w.address:#x}")
