"""Grouped (and depthwise) convolution, the OpenVX way, as one compiler ``Conv``.

The NN extension has no group parameter: a grouped convolution is G convolution nodes,
node g reading the g-th of G equal channel views of one tensor X and writing the g-th of
G equal channel views of one tensor Y (OpenVX's split and concatenation by views,
``formats.md`` §2.1).  Recognized here, the G nodes become a single ``Conv`` with
``group = G`` (weights stacked along the output maps), which the DV700 runs as one
depthwise run when every group has one input and one output map, instead of G tiny
convolutions and a copy of every slice.
"""

from __future__ import annotations

from .node import Node
from .tensor import Tensor
from .types import KernelEnum
from .verify import Plan

__all__ = ["find_groups"]


def _chunk(t: Tensor) -> tuple[int, int] | None:
    """The channel range of a view that is whole in every other dimension."""
    if t._parent is None:
        return None
    root = t.root
    box = t.box()
    if len(box) < 3 or any(box[d] != (0, n) for d, n in enumerate(root.dims) if d != 2):
        return None
    return box[2]


def _signature(plan: Plan, node: Node) -> tuple:
    w = node._values[1]
    b = node._values[2]
    p = node.value(3)
    return (w.dims, None if b is None else b.dims, tuple(vars(p).values()), node.target,
            plan.derived[id(node)]["skip"])


def find_groups(plan: Plan) -> dict[int, list[Node]]:
    """Last node id (in the plan's order, where the group is emitted: every member's
    input is ready there) -> the nodes of one grouped convolution, in channel order.
    A group whose output another node reads before its last member is not formed."""
    pos = {id(n): i for i, n in enumerate(plan.order)}
    buckets: dict[tuple[int, int], list[Node]] = {}
    for node in plan.order:
        if node.kdef.enum != KernelEnum.CONVOLUTION_LAYER:
            continue
        x, y = node._values[0], node._values[4]
        if _chunk(x) is None or _chunk(y) is None:
            continue
        buckets.setdefault((id(x.root), id(y.root)), []).append(node)
    groups: dict[int, list[Node]] = {}
    for (_, yid), nodes in buckets.items():
        if len(nodes) < 2 or len(plan.writes.get(yid, [])) != len(nodes):
            continue
        nodes = sorted(nodes, key=lambda n: _chunk(n._values[0])[0])
        ins = [_chunk(n._values[0]) for n in nodes]
        outs = [_chunk(n._values[4]) for n in nodes]
        g = len(nodes)
        cin, cout = nodes[0]._values[0].root.dims[2], nodes[0]._values[4].root.dims[2]
        if cin % g or cout % g or len({_signature(plan, n) for n in nodes}) != 1:
            continue
        if ins != [(i * cin // g, (i + 1) * cin // g) for i in range(g)]:
            continue
        if outs != [(i * cout // g, (i + 1) * cout // g) for i in range(g)]:
            continue
        first, last = min(pos[id(n)] for n in nodes), max(pos[id(n)] for n in nodes)
        members = {id(n) for n in nodes}
        if any(id(v.root) == yid for n in plan.order[first:last] if id(n) not in members
               for v in n._values if isinstance(v, Tensor)):
            continue
        groups[id(plan.order[last])] = nodes
    return groups
