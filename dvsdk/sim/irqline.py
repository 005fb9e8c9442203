"""The simulated device's interrupt lines: :class:`threading.Event`'s semantics, cheaper.

On ``sim://`` a kick runs to completion inside the register write that starts it, so the
line is raised before the driver waits for it, and acknowledged by a register write of the
same thread: raising, lowering and testing a line then take no lock (a flag), and only a
thread that really has to block (a wait on another thread's kick) takes the condition.
Ordering (under the GIL): :meth:`IrqLine.set` stores the flag before it looks for
waiters, and a waiter counts itself before it tests the flag under the condition, so a
raise is never missed.
"""

from __future__ import annotations

import threading


class IrqLine:
    """One interrupt line (module docstring): ``set``/``clear``/``is_set``/``wait`` as a
    :class:`threading.Event`'s."""

    __slots__ = ("_flag", "_cond", "_waiters")

    def __init__(self) -> None:
        self._flag = False
        self._cond = threading.Condition(threading.Lock())
        self._waiters = 0

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        self._flag = True
        if self._waiters:
            with self._cond:
                self._cond.notify_all()

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        """True once the line is raised; False after ``timeout`` s without it."""
        if self._flag:
            return True
        with self._cond:
            self._waiters += 1
            try:
                return self._cond.wait_for(lambda: self._flag, timeout)
            finally:
                self._waiters -= 1
