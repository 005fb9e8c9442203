"""References and their counts (OpenVX core, "Objects": ``formats.md`` §3).

Every object a context creates is a :class:`Reference`: it has a name, a type, a count of
the references held on it, and it belongs to its context.  The creator holds one
reference; a node holds one on every object it was given, a graph one on its nodes, a view
one on its parent.  ``release()`` drops the caller's reference (``vxRelease*``); an object
whose count reaches zero is destroyed and leaves its context.  Using a released reference
raises :class:`VxError` ``ERROR_INVALID_REFERENCE``.  Objects are context managers:
``with ctx.tensor(...) as t:`` releases ``t`` at the end.
"""

from __future__ import annotations

from typing import Any

from .types import Status, Type, VxError

__all__ = ["Reference"]


class Reference:
    """Base of every OpenVX object: name, type, count and owning context."""

    vx_type: Type = Type.REFERENCE

    def __init__(self, context: Any, name: str = "") -> None:
        self._context = context
        self._count = 1           # the creator's reference
        self._internal = 0        # references held by other objects (nodes, views, graphs)
        self._alive = True
        self.name = name or (context._next_name(self._prefix()) if context else "context")
        if context is not None:
            context._adopt(self)

    def _prefix(self) -> str:
        return self.vx_type.name.lower()

    # -- OpenVX attributes -----------------------------------------------------------------
    @property
    def context(self) -> Any:
        self._check()
        return self._context  # type: ignore[return-value]

    @property
    def ref_count(self) -> int:
        """``VX_REFERENCE_COUNT``: the external plus internal references held."""
        return self._count + self._internal

    @property
    def alive(self) -> bool:
        return self._alive

    def _check(self) -> None:
        if not self._alive:
            raise VxError(Status.ERROR_INVALID_REFERENCE,
                          f"{self.vx_type.name.lower()} {self.name!r} was released",
                          field=self.name)

    # -- counting --------------------------------------------------------------------------
    def retain(self) -> Reference:
        """``vxRetainReference``: one more external reference."""
        self._check()
        self._count += 1
        return self

    def release(self) -> Status:
        """``vxRelease*``: drop one external reference; destroy at zero."""
        self._check()
        if self._count <= 0:
            raise VxError(Status.ERROR_INVALID_REFERENCE,
                          f"{self.name!r} has no external reference left to release",
                          field=self.name, value=self._count)
        self._count -= 1
        self._maybe_destroy()
        return Status.SUCCESS

    def _hold(self) -> None:
        self._internal += 1

    def _unhold(self) -> None:
        self._internal = max(0, self._internal - 1)
        self._maybe_destroy()

    def _maybe_destroy(self) -> None:
        if self._alive and self._count + self._internal == 0:
            self._destroy()

    def _destroy(self) -> None:
        """Free what the object owns and leave the context (subclasses extend)."""
        self._alive = False
        if self._context is not None:
            self._context._forget(self)

    def __enter__(self) -> Any:
        self._check()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._alive and self._count > 0:
            self.release()

    def __repr__(self) -> str:
        state = "" if self._alive else " released"
        return f"<vx {self.vx_type.name.lower()} {self.name!r}{state}>"
