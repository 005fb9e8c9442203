"""What one agent session holds of the served device's units (``firmware_spec/link.md`` §10).

The agent's raw register accesses take part in the device's unit gate
(:mod:`dvsdk.driver.unitgate`), as a command list's exec does: a write that starts a
unit takes it (refused with :class:`~dvsdk.errors.DeviceBusy` naming the holder if
another session, net or list holds it) and the session keeps it until its ``WAIT_IRQ``
for that unit ends, or the session does; a ``WAIT_IRQ`` takes it for its own duration.
Any other register read or write of a unit someone else holds is refused the same way,
so nobody writes a unit's registers in the middle of another's run or takes its
interrupt.

The kick guard vets a start against the registers the session wrote; if anyone else
took the unit since the session began writing them, they are forgotten
(:meth:`~dvsdk.link.guard.KickGuard.forget_unit`), so the start needs them written
again rather than running registers the guard never saw.
"""

from __future__ import annotations

from typing import Any

from ..driver.unitgate import UnitGate
from ..errors import DeviceBusy
from .guard import GATE_UNIT, KickGuard


class SessionOwner:
    """The unit gate's owner for one agent's sessions; named in others' DeviceBusy."""

    def __init__(self, server: Any) -> None:
        self.server = server

    @property
    def gate_label(self) -> str:
        s = self.server
        who = s.peer or getattr(s, "transport_name", "") or "a client"
        nonce = f" (session {s.session:#x})" if s.session is not None else ""
        return f"dvsdk-agent client {who}{nonce}"


class UnitClaims:
    """The units one session holds, and what it knows of the others' use of them."""

    def __init__(self, gate: UnitGate, owner: SessionOwner, guard: KickGuard) -> None:
        self.gate, self.owner, self.guard = gate, owner, guard
        self.held: set[str] = set()
        #: per gate unit: its generation when this session's register shadow of it was
        #: last known to be the device's (at a release, or at a write while free)
        self._mark: dict[str, int] = {}

    def busy(self, window: str, unit: str, what: str) -> DeviceBusy:
        text = self.gate.describe_holder(unit) or "someone"
        exc = DeviceBusy(f"the {unit} unit is held by {text}: {what} refused", field="unit",
                         value=window, hint="it is free again when that run's wait ends")
        exc.holder = text  # type: ignore[attr-defined]
        return exc

    def check(self, window: str, what: str) -> None:
        """Refuse access to ``window``'s unit while someone else holds it."""
        unit = GATE_UNIT[window]
        holder = self.gate.holder(unit)
        if holder is not None and holder is not self.owner:
            raise self.busy(window, unit, what)

    def wrote(self, window: str) -> None:
        """A register of ``window`` was written (allowed by :meth:`check`) while free."""
        unit = GATE_UNIT[window]
        if unit not in self.held:
            self._mark.setdefault(unit, self.gate.generation(unit))

    def take(self, window: str, what: str) -> bool:
        """Take ``window``'s unit for this session (DeviceBusy if someone else holds it);
        True if it was taken now, False if the session held it already."""
        unit = GATE_UNIT[window]
        if unit in self.held:
            return False
        if not self.gate.acquire(unit, self.owner, 0.0, block=False):
            raise self.busy(window, unit, what)
        mark = self._mark.pop(unit, None)
        if mark is not None and self.gate.generation(unit) != mark + 1:
            self.guard.forget_unit(unit)  # someone else held it since: registers unknown
        self.held.add(unit)
        return True

    def give(self, window: str) -> None:
        """Give ``window``'s unit back (a no-op if the session does not hold it)."""
        unit = GATE_UNIT[window]
        if unit in self.held:
            self.held.discard(unit)
            self._mark[unit] = self.gate.generation(unit)
            self.gate.release(unit, self.owner)

    def others_hold_any(self) -> str | None:
        """A unit someone else holds, if any."""
        for unit in ("conv", "ipu", "maximizer"):
            holder = self.gate.holder(unit)
            if holder is not None and holder is not self.owner:
                return unit
        return None

    def end(self) -> None:
        """The session ended: give every unit back, forget what was known."""
        for unit in list(self.held):
            self.held.discard(unit)
            self.gate.release(unit, self.owner)
        self._mark.clear()
