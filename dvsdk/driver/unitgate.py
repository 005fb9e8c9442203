"""One exec at a time per unit of one device, and who holds a unit when another must wait.

The DV700 takes one command stream (or one IPU / maximizer register program) per unit and
the kernel runs them strictly in order (reference §10.5).  A
:class:`~dvsdk.driver.cmdlist.CommandList` takes its unit at ``exec`` and gives it back
when ``wait`` ends (completed, faulted or timed out), so lists used from several threads,
several networks sharing one device, and ``dvsdk-agent`` sessions serving it
(``firmware_spec/link.md`` §10) take turns instead of overwriting each other's stream
address or stealing each other's interrupt.

An owner may describe itself for the messages others get (``gate_label``), and may say
that nobody will ever wait for its exec (``gate_abandoned``: a ``run_async`` handle that
was dropped): whoever needs the unit next then finishes that exec
(``gate_reclaim(timeout)``: waits for its interrupt, keeps the outcome for a late
``wait``) and takes the unit, instead of waiting for a ``wait`` that never comes.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

from ..errors import DeviceBusy, InvalidCommand


class Hold(NamedTuple):
    """Who holds a unit: the owner, the thread that took it, and since when (monotonic).
    (A tuple: two are made per kick, and a frozen dataclass's ``__init__`` cost ~2 us.)"""

    owner: object
    thread: int
    thread_name: str
    since: float


def describe(owner: object) -> str:
    """The owner as a message names it: its ``gate_label``, else its type and identity."""
    label = getattr(owner, "gate_label", None)
    if isinstance(label, str) and label:
        return label
    return f"{type(owner).__name__} at {id(owner):#x}"


def _abandoned(owner: object) -> bool:
    return bool(getattr(owner, "gate_abandoned", False)) and hasattr(owner, "gate_reclaim")


class UnitGate:
    """Per-unit ownership of one device (module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: (``with self._lock`` enters the same lock as ``with self._cond``, without
        #: the Condition's Python-level wrapper: two kicks per segment take it)
        self._cond = threading.Condition(self._lock)
        self._holds: dict[str, Hold] = {}
        self._generation: dict[str, int] = {}  # acquisitions so far, per unit
        self._waiting = 0  # threads blocked in acquire

    def acquire(self, unit: str, owner: object, timeout: float, block: bool = True) -> bool:
        """Take ``unit`` for ``owner``; False if busy and not ``block``.  Blocks up to
        ``timeout`` s, then DeviceBusy naming the holder; InvalidCommand at once if this
        thread itself holds the unit for another owner (it would wait for itself).  A
        holder whose exec nobody will wait for is finished first (module docstring)."""
        me = threading.get_ident()
        with self._lock:
            if unit not in self._holds:  # (free: the common case, without the loop below)
                self._holds[unit] = Hold(owner, me, threading.current_thread().name,
                                         time.monotonic())
                self._generation[unit] = self._generation.get(unit, 0) + 1
                return True
        reclaimed: set[int] = set()
        with self._lock:
            deadline = None
            while unit in self._holds:
                hold = self._holds[unit]
                holder = hold.owner
                if id(holder) not in reclaimed and _abandoned(holder):
                    reclaimed.add(id(holder))
                    self._cond.release()  # it takes its own lock and releases the unit
                    try:
                        holder.gate_reclaim(timeout if block else 0.0)  # type: ignore[attr-defined]
                    finally:
                        self._cond.acquire()
                    continue
                if not block:
                    return False
                if hold.thread == me and holder is not owner:
                    raise InvalidCommand(
                        f"the {unit} unit is still held by {describe(holder)}, started by "
                        "this thread", field="unit", value=unit,
                        limit="one exec per unit at a time: wait() for it first")
                now = time.monotonic()
                deadline = now + timeout if deadline is None else deadline
                if now >= deadline:
                    text = self._text(hold, now)
                    exc = DeviceBusy(f"the {unit} unit stayed busy for {timeout:g} s: held by "
                                     f"{text}", field="unit", value=unit,
                                     hint="that exec was never waited for, or runs longer "
                                     "than this timeout")
                    exc.holder = text  # type: ignore[attr-defined]
                    raise exc
                self._waiting += 1
                try:
                    self._cond.wait(deadline - now)
                finally:
                    self._waiting -= 1
            self._holds[unit] = Hold(owner, me, threading.current_thread().name,
                                     time.monotonic())
            self._generation[unit] = self._generation.get(unit, 0) + 1
            return True

    def release(self, unit: str, owner: object) -> None:
        """Give ``unit`` back if ``owner`` holds it (a no-op otherwise)."""
        with self._lock:
            hold = self._holds.get(unit)
            if hold is not None and hold.owner is owner:
                del self._holds[unit]
                if self._waiting:
                    self._cond.notify_all()

    def holder(self, unit: str) -> object | None:
        """Who holds ``unit`` now (None: free)."""
        with self._lock:
            hold = self._holds.get(unit)
            return None if hold is None else hold.owner

    def describe_holder(self, unit: str) -> str | None:
        """``unit``'s holder as messages name it, with its thread and how long it has held
        the unit (None: free)."""
        with self._lock:
            hold = self._holds.get(unit)
            return None if hold is None else self._text(hold, time.monotonic())

    def generation(self, unit: str) -> int:
        """How many times ``unit`` has been taken: an owner that remembers the number at
        its release knows at its next take whether anyone held the unit in between."""
        with self._lock:
            return self._generation.get(unit, 0)

    @staticmethod
    def _text(hold: Hold, now: float) -> str:
        return (f"{describe(hold.owner)}, taken by thread {hold.thread_name!r} "
                f"{now - hold.since:.1f} s ago")
