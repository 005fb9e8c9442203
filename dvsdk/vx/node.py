"""Nodes and parameters: ``vxCreateGenericNode``, ``vxSetParameterByIndex``,
``vxGetParameterByIndex``, ``vxAssignNodeCallback``, ``vxSetNodeTarget``.

Creating a node never raises for a bad argument: as OpenVX specifies for node creation
(``formats.md`` §2.2), the node is returned with an error ``status`` and ``error`` (a
:class:`VxError` naming the node and the parameter), and the graph's verification fails
with that message.  A node holds a reference on every object it was given.

After verification ``placement`` says where each of the node's compiled ops runs
(``"DV700"`` or ``"CPU"``) and why, and ``target`` what the node asked for
(``Target.ANY`` unless :meth:`set_target`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields, is_dataclass
from enum import IntEnum
from typing import Any

from .kernels import KernelDef, Param
from .perf import Perf
from .reference import Reference
from .scalar import Scalar
from .tensor import Tensor
from .types import (
    Direction,
    ParameterState,
    Status,
    Target,
    Type,
    VxError,
    enum_value,
)

__all__ = ["Node", "Parameter"]


class Parameter(Reference):
    """``vx_parameter``: parameter ``index`` of ``node`` (for ``graph.add_parameter``)."""

    vx_type = Type.PARAMETER

    def __init__(self, node: Node, index: int) -> None:
        self.node, self.index = node, index
        self.spec: Param = node.kdef.params[index]
        super().__init__(node.context, f"{node.name}.{self.spec.name}")

    @property
    def direction(self) -> Direction:
        return self.spec.direction

    @property
    def type(self) -> Type:
        return self.spec.type

    @property
    def state(self) -> ParameterState:
        return self.spec.state

    @property
    def ref(self) -> Any:
        return self.node._values[self.index]


class Node(Reference):
    """``vx_node``: one kernel instance in one graph."""

    vx_type = Type.NODE

    def __init__(self, graph: Any, kdef: KernelDef, name: str = "") -> None:
        self.graph = graph
        self.kdef = kdef
        self._values: list[Any] = [None] * len(kdef.params)
        self._errors: dict[int, VxError] = {}
        self._callback: Callable[[Node], Any] | None = None
        self.target: str = Target.ANY
        self._perf = Perf()
        self.placement: list[dict] = []
        self.derived: dict[str, Any] = {}
        super().__init__(graph.context, name or graph.context._next_name(kdef.short))

    # -- attributes ------------------------------------------------------------------------
    @property
    def kernel_name(self) -> str:
        return self.kdef.name

    @property
    def kernel_enum(self) -> int:
        return self.kdef.enum

    @property
    def num_parameters(self) -> int:
        return len(self.kdef.params)

    @property
    def status(self) -> Status:
        """``VX_NODE_STATUS``: SUCCESS, or the first parameter error."""
        if not self._errors:
            return Status.SUCCESS
        return self._errors[min(self._errors)].status

    @property
    def error(self) -> VxError | None:
        return self._errors[min(self._errors)] if self._errors else None

    @property
    def perf(self) -> Perf:
        """``VX_NODE_PERFORMANCE`` (see :mod:`dvsdk.vx.perf`)."""
        self.graph._account()
        return self._perf

    @property
    def where(self) -> str:
        """After verification: ``"DV700"``, ``"CPU"``, ``"DV700+CPU"``, or ``"folded"``
        (the compiler merged the node into another one)."""
        kinds = {p["where"] for p in self.placement}
        if not kinds:
            return "folded" if self.graph.verified else ""
        return "+".join(k for k in ("DV700", "CPU") if k in kinds)

    # -- parameters ------------------------------------------------------------------------
    def parameter(self, index: int) -> Parameter:
        """``vxGetParameterByIndex``."""
        self._check()
        if not 0 <= int(index) < len(self.kdef.params):
            raise VxError(Status.ERROR_INVALID_PARAMETERS, f"node {self.name!r} has no "
                          f"parameter #{index}", field="index", value=index,
                          limit=f"0..{len(self.kdef.params) - 1}")
        return Parameter(self, int(index))

    def set_parameter_by_index(self, index: int, value: Any) -> Status:
        """``vxSetParameterByIndex``: returns the status; a failure leaves the node's
        ``status``/``error`` naming the parameter (and verification fails on it)."""
        self._check()
        if self.graph.busy:
            return Status.ERROR_GRAPH_SCHEDULED
        if not 0 <= int(index) < len(self.kdef.params):
            err = VxError(Status.ERROR_INVALID_PARAMETERS,
                          f"node {self.name!r} has no parameter #{index}", field="index",
                          value=index, limit=f"0..{len(self.kdef.params) - 1}")
            self._errors[-1] = err
            return err.status
        index = int(index)
        spec = self.kdef.params[index]
        try:
            value = self._coerce(spec, value)
        except VxError as e:
            why = e.message.split(": ", 1)[1]
            why = why[len(spec.name) + 2:] if why.startswith(spec.name + ": ") else why
            err = VxError(e.status, f"node {self.name!r} parameter #{index} {spec.name}: "
                          f"{why}", field=f"{self.name}.{spec.name}", value=e.value,
                          limit=e.limit)
            self._errors[index] = err
            self.graph._unverify(f"node {self.name!r} changed")
            return err.status
        self._errors.pop(index, None)
        self._errors.pop(-1, None)
        old = self._values[index]
        if isinstance(value, Reference):
            value._hold()
        self._values[index] = value
        if isinstance(old, Reference) and old._alive:
            old._unhold()
        self.graph._unverify(f"node {self.name!r} changed")
        return Status.SUCCESS

    def _coerce(self, spec: Param, value: Any) -> Any:
        if value is None:
            return None
        if isinstance(value, Reference):
            if not value._alive:
                raise VxError(Status.ERROR_INVALID_REFERENCE, f"{value.name!r} was released")
            self.context._same(value, spec.name)
        if spec.kind == "tensor":
            if not isinstance(value, Tensor):
                raise VxError(Status.ERROR_INVALID_TYPE, f"expects a tensor, got "
                              f"{type(value).__name__}", value=type(value).__name__,
                              limit="Tensor")
            owner = value.root._graph
            if owner is not None and owner is not self.graph:
                raise VxError(Status.ERROR_INVALID_SCOPE, f"virtual tensor {value.name!r} "
                              f"belongs to graph {owner.name!r}", value=value.name)
            return value
        if isinstance(value, Tensor):
            raise VxError(Status.ERROR_INVALID_TYPE, "expects a value, got a tensor",
                          value=value.name)
        if is_dataclass(spec.kind):
            if isinstance(value, dict):
                names = {f.name for f in fields(spec.kind)}
                unknown = sorted(set(value) - names)
                if unknown:
                    raise VxError(Status.ERROR_INVALID_PARAMETERS, f"unknown field "
                                  f"{unknown[0]}", value=unknown[0], limit=sorted(names))
                return spec.kind(**value)
            if not isinstance(value, spec.kind):
                raise VxError(Status.ERROR_INVALID_TYPE, f"expects {spec.kind.__name__}, "
                              f"got {type(value).__name__}", value=type(value).__name__,
                              limit=spec.kind.__name__)
            return value
        raw = value.value if isinstance(value, Scalar) else value
        if isinstance(spec.kind, type) and issubclass(spec.kind, IntEnum):
            enum_value(spec.kind, raw, spec.name)        # bad enum: error now, named
        elif not isinstance(raw, (int, float)) or isinstance(raw, bool):
            raise VxError(Status.ERROR_INVALID_TYPE, f"expects a number, got "
                          f"{type(raw).__name__}", value=raw)
        return value

    def value(self, index: int) -> Any:
        """Parameter ``index`` as a plain value (a scalar's value, a tensor as is)."""
        v = self._values[index]
        return v.value if isinstance(v, Scalar) else v

    def tensors(self, direction: Direction) -> list[tuple[int, Tensor]]:
        return [(i, v) for i, (p, v) in enumerate(zip(self.kdef.params, self._values))
                if isinstance(v, Tensor) and p.direction == direction]

    # -- callbacks and targets -----------------------------------------------------------
    def assign_callback(self, callback: Callable[[Node], Any] | None) -> Status:
        """``vxAssignNodeCallback``: ``callback(node)`` runs after the node completes, in
        dependency order; returning ``Action.ABANDON`` abandons the rest of the graph."""
        self._check()
        if callback is not None and self._callback is not None:
            return Status.ERROR_NOT_SUPPORTED          # OpenVX: remove the old one first
        self._callback = callback
        return Status.SUCCESS

    def set_target(self, target: str) -> Status:
        """``vxSetNodeTarget(VX_TARGET_STRING, ...)``: ``"ANY"``, ``"CPU"`` or ``"DV700"``.

        ``CPU`` keeps the node's ops out of DV700 runs; ``DV700`` asks for the hardware
        where a mapping exists even when it approximates (the normalization layer's LRN
        unit beyond its documented error bound, ``firmware_spec/lrn.md``; a fixed-point
        layer's FP16 sum beyond its exactness bound, ``firmware_spec/fixed_point.md``)."""
        self._check()
        t = str(target).upper()
        if t not in Target.ALL:
            return Status.ERROR_NOT_SUPPORTED
        if t != self.target:
            self.target = t
            self.graph._unverify(f"node {self.name!r} target changed")
        return Status.SUCCESS

    def _destroy(self) -> None:
        for v in self._values:
            if isinstance(v, Reference) and v._alive:
                v._unhold()
        self._values = [None] * len(self._values)
        super()._destroy()
