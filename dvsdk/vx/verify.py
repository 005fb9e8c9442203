"""Graph verification, part 1: the OpenVX core graph formalisms (``formats.md`` §3).

Checked in this order, the first failure raising :class:`VxError` with the status OpenVX
uses and a message naming the node and parameter:

1. every node was created without error (its ``status``);
2. every required parameter is present (``ERROR_NOT_SUFFICIENT``), no reference was
   released, static parameters (weights, biases) hold host data before verification and
   are not written by a node (their content is compiled in);
3. single writer: no two nodes write overlapping parts of one tensor (a view and its
   parent overlap) (``ERROR_MULTIPLE_WRITERS``); no node reads what it writes;
4. the graph is a DAG: reads order after the writes they overlap (containment: writing a
   view orders the graph against readers of its parent), no cycle (``ERROR_INVALID_GRAPH``
   naming the nodes on it);
5. every virtual tensor that is read is written, wholly where it is read;
6. every node's validator, in dependency order: parameter values, data types, and the
   dimensions, which resolves the virtual tensors' undefined dimensions and types.

The result is a :class:`Plan` (order, who reads and writes what, resolved metadata) that
:mod:`dvsdk.vx.toir` turns into the compiler's graph.  Nothing is changed on the objects
until the whole graph verified: the resolved dimensions are committed by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .kernels import REQ
from .node import Node
from .reference import Reference
from .shapes import Meta, ParamError
from .tensor import Tensor
from .types import Direction, Status, Type, VxError

__all__ = ["Use", "Plan", "check", "Box"]

Box = tuple[tuple[int, int], ...] | None    # None: the whole root


@dataclass
class Use:
    node: Node
    index: int
    tensor: Tensor
    box: Box

    @property
    def root(self) -> Tensor:
        return self.tensor.root


@dataclass
class Plan:
    order: list[Node]
    writes: dict[int, list[Use]] = field(default_factory=dict)     # root id -> writers
    reads: dict[int, list[Use]] = field(default_factory=dict)      # root id -> readers
    roots: dict[int, Tensor] = field(default_factory=dict)
    meta: dict[int, Meta] = field(default_factory=dict)            # tensor id -> resolved
    derived: dict[int, dict] = field(default_factory=dict)         # node id -> derived
    resolved: dict[int, tuple[tuple[int, ...], Type]] = field(default_factory=dict)


def _where(node: Node, i: int) -> str:
    return f"node {node.name!r} parameter #{i} {node.kdef.params[i].name}"


def _box(t: Tensor) -> Box:
    if t._parent is None:
        return None
    box = t.box()
    full = tuple((0, n) for n in t.root.dims)
    return None if box == full else box


def overlap(a: Box, b: Box) -> bool:
    if a is None or b is None:
        return True
    return all(a0 < b1 and b0 < a1 for (a0, a1), (b0, b1) in zip(a, b))


def check(graph: Any) -> Plan:
    nodes: list[Node] = [n for n in graph._nodes if n._alive]
    if not nodes:
        raise VxError(Status.ERROR_INVALID_GRAPH, f"graph {graph.name!r} has no nodes",
                      field=graph.name)
    for n in nodes:
        if n.error is not None:
            raise n.error
    plan = Plan(order=[])
    uses_w: list[Use] = []
    uses_r: list[Use] = []
    for n in nodes:
        for i, spec in enumerate(n.kdef.params):
            v = n._values[i]
            if v is None:
                if spec.state == REQ:
                    raise VxError(Status.ERROR_NOT_SUFFICIENT,
                                  f"{_where(n, i)} is required but not set",
                                  field=f"{n.name}.{spec.name}")
                continue
            if isinstance(v, Reference) and not v._alive:
                raise VxError(Status.ERROR_INVALID_REFERENCE,
                              f"{_where(n, i)}: {v.name!r} was released",
                              field=f"{n.name}.{spec.name}")
            if not isinstance(v, Tensor):
                continue
            use = Use(n, i, v, _box(v))
            plan.roots[id(v.root)] = v.root
            if spec.static:
                if v.is_virtual:
                    raise VxError(Status.ERROR_INVALID_PARAMETERS,
                                  f"{_where(n, i)} is static: it cannot be the virtual "
                                  f"tensor {v.name!r}", field=f"{n.name}.{spec.name}")
                if not v.root._written:
                    raise VxError(Status.ERROR_NOT_SUFFICIENT,
                                  f"{_where(n, i)} is static and {v.name!r} holds no data: "
                                  "copy_patch it before verification",
                                  field=f"{n.name}.{spec.name}", value=v.name)
            (uses_w if spec.direction == Direction.OUTPUT else uses_r).append(use)
    for u in uses_w:
        plan.writes.setdefault(id(u.root), []).append(u)
    for u in uses_r:
        plan.reads.setdefault(id(u.root), []).append(u)
    _single_writer(plan)
    plan.order = _topo(nodes, plan)
    _virtual_written(plan)
    _validate(plan)
    return plan


def _single_writer(plan: Plan) -> None:
    for rid, ws in plan.writes.items():
        for i, a in enumerate(ws):
            for b in ws[i + 1:]:
                if overlap(a.box, b.box):
                    raise VxError(Status.ERROR_MULTIPLE_WRITERS,
                                  f"{_where(b.node, b.index)} writes {b.tensor.name!r}, which "
                                  f"{_where(a.node, a.index)} already writes "
                                  f"({a.tensor.name!r}): one writer per object",
                                  field=f"{b.node.name}.{b.node.kdef.params[b.index].name}",
                                  value=b.tensor.name, limit=a.node.name)
        for r in plan.reads.get(rid, []):
            if r.node.kdef.params[r.index].static:
                w = ws[0]
                raise VxError(Status.ERROR_INVALID_PARAMETERS,
                              f"{_where(r.node, r.index)} is static but "
                              f"{_where(w.node, w.index)} writes {r.tensor.name!r}",
                              field=f"{r.node.name}.{r.node.kdef.params[r.index].name}")


def _topo(nodes: list[Node], plan: Plan) -> list[Node]:
    after: dict[int, set[int]] = {id(n): set() for n in nodes}   # reader -> writers first
    for rid, rs in plan.reads.items():
        for r in rs:
            for w in plan.writes.get(rid, []):
                if overlap(r.box, w.box):
                    after[id(r.node)].add(id(w.node))
    by_id = {id(n): n for n in nodes}
    done: list[Node] = []
    placed: set[int] = set()
    waiting = dict(after)
    while waiting:
        ready = [i for i, deps in waiting.items() if deps <= placed]
        if not ready:
            raise VxError(Status.ERROR_INVALID_GRAPH,
                          "the graph has a cycle: " + _cycle(waiting, by_id),
                          field="graph", value=[by_id[i].name for i in waiting])
        ready.sort(key=lambda i: nodes.index(by_id[i]))       # creation order among equals
        for i in ready:
            done.append(by_id[i])
            placed.add(i)
            del waiting[i]
    return done


def _cycle(waiting: dict[int, set[int]], by_id: dict[int, Node]) -> str:
    """One cycle among the nodes that could not be ordered, as ``a -> b -> a``."""
    start = next(iter(waiting))
    path, seen = [start], {start: 0}
    while True:
        nxt = next(i for i in sorted(waiting[path[-1]] & set(waiting),
                                     key=lambda i: by_id[i].name))
        if nxt in seen:
            cyc = path[seen[nxt]:] + [nxt]
            names = [by_id[i].name for i in reversed(cyc)]
            return " -> ".join(names) + " (each node reads what the next one writes)"
        seen[nxt] = len(path)
        path.append(nxt)


def _covered(box: Box, writes: list[Use], dims: tuple[int, ...] | None) -> bool:
    """Is ``box`` inside the union of the written boxes (tiles along one axis)?"""
    if any(w.box is None for w in writes):
        return True
    if box is None:
        if dims is None:
            return False
        box = tuple((0, n) for n in dims)
    inside = [w.box for w in writes if overlap(w.box, box)]
    if not inside:
        return False
    for axis in range(len(box)):
        others_ok = all(all(b0 <= c0 and c1 <= b1 for k, ((b0, b1), (c0, c1))
                            in enumerate(zip(w, box)) if k != axis) for w in inside)
        if not others_ok:
            continue
        spans = sorted((w[axis][0], w[axis][1]) for w in inside)
        pos = box[axis][0]
        for s0, s1 in spans:
            if s0 > pos:
                break
            pos = max(pos, s1)
        if pos >= box[axis][1]:
            return True
    return False


def _virtual_written(plan: Plan) -> None:
    for rid, rs in plan.reads.items():
        root = plan.roots[rid]
        if not root.is_virtual:
            continue
        ws = plan.writes.get(rid, [])
        for r in rs:
            if not ws:
                raise VxError(Status.ERROR_INVALID_GRAPH,
                              f"virtual tensor {root.name!r} is read by "
                              f"{_where(r.node, r.index)} but no node writes it",
                              field=root.name, value=r.node.name)
            if not _covered(r.box, ws, root._dims if root._dims and all(root._dims)
                            else None):
                raise VxError(Status.ERROR_INVALID_GRAPH,
                              f"{_where(r.node, r.index)} reads a part of virtual tensor "
                              f"{root.name!r} that no node writes",
                              field=root.name, value=r.tensor.name)


def _meta(t: Tensor, plan: Plan) -> Meta:
    root = t.root
    dims_t, type_t = plan.resolved.get(id(root), (None, None))
    dims = t._dims if t._parent is not None else (dims_t or t._dims)
    typ = type_t or root._type
    return Meta(dims, typ, root._fpp, t.name)


def _validate(plan: Plan) -> None:
    for node in plan.order:
        metas = []
        for i, spec in enumerate(node.kdef.params):
            v = node._values[i]
            metas.append(_meta(v, plan) if isinstance(v, Tensor) else
                         Meta(None, None, 0, spec.name))
        for i, spec in enumerate(node.kdef.params):
            if spec.direction == Direction.INPUT and isinstance(node._values[i], Tensor):
                m = metas[i]
                if m.dims is None or not all(m.dims) or m.type is None:
                    raise VxError(Status.ERROR_INVALID_DIMENSION,
                                  f"{_where(node, i)}: {m.name!r} has undefined dimensions "
                                  "or type", field=f"{node.name}.{spec.name}", value=m.dims)
        values = [node.value(i) for i in range(len(node.kdef.params))]
        try:
            outs, derived = node.kdef.validate(values, metas)
        except ParamError as e:
            raise VxError(e.status, f"{_where(node, e.index)}: {e.bare}",
                          field=f"{node.name}.{node.kdef.params[e.index].name}",
                          value=e.value, limit=e.limit) from None
        plan.derived[id(node)] = derived
        for i, (dims, typ, _fpp) in outs.items():
            t: Tensor = node._values[i]
            root = t.root
            if t._parent is None:
                plan.resolved[id(root)] = (dims, typ)
            else:
                _, have = plan.resolved.get(id(root), (None, root._type))
                if have is not None and have != typ:
                    raise VxError(Status.ERROR_INVALID_FORMAT,
                                  f"{_where(node, i)}: view {t.name!r} of {root.name!r} "
                                  f"({have.name}) receives {typ.name}",
                                  field=f"{node.name}.{node.kdef.params[i].name}")
                plan.resolved[id(root)] = (root._dims, typ)
        for v in node._values:
            if isinstance(v, Tensor):
                plan.meta[id(v)] = _meta(v, plan)

