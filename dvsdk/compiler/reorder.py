"""``fuse_adds``: a convolution scheduled just before the Add it feeds (issue 27).

The conv unit adds a second tensor to a convolution's float32 sums before it rounds them
(``conv -> add``, reference §4.1), so ``Add(Conv(x), t)`` is one command reading ``t``
instead of two commands and a round trip of the conv's result through DRAM.  The lowering
(:meth:`.lower.Lowering.fuse_tail`) fuses it when ``t`` exists by the time the conv runs,
which depends on the order the model lists its ops in: a feature pyramid's lateral 1x1
convs are usually all listed before the top-down path whose upsampled tensors they are
added to, so none of those Adds fuse.

This pass moves each such conv to just before its Add, so that ``t`` is made first.  It
changes results: the fused command rounds ``conv + t`` to binary16 once where the two
commands rounded the conv's sum, then the add (firmware_spec/arithmetic.md).  The
difference is within the FP16 tolerance (the one rounding is the more accurate), but the
bits are not the default compile's, so the pass runs only when asked
(``dvsdk.compile(..., fuse_adds=True)``, ``dvsdk-compile --fuse-adds``).

A conv moves when its output is read by the Add alone (not a network output) and the
Add's other operand is made by an op listed after the conv (else the Add fuses already);
the conv's inputs are made before its old place, so the order stays topological.
"""

from __future__ import annotations

from .ir import Graph, Op


def convs_before_their_adds(graph: Graph) -> Graph:
    """``graph`` with each conv that feeds only an Add moved to just before that Add (the
    module docstring); a new graph, ``graph`` is left as it is."""
    readers: dict[str, int] = {}
    for op in graph.ops:
        for name in op.inputs:
            if name:
                readers[name] = readers.get(name, 0) + 1
    for name in graph.outputs:
        readers[name] = readers.get(name, 0) + 1
    made = {out: op for op in graph.ops for out in op.outputs}
    index = {op.name: i for i, op in enumerate(graph.ops)}
    moves: dict[str, Op] = {}  # Add's name -> the conv to place just before it
    for add in graph.ops:
        if add.type != "Add" or len(add.inputs) != 2 or any(
                graph.is_const(i) for i in add.inputs):
            continue
        for mine, other in (add.inputs, add.inputs[::-1]):
            conv, late = made.get(mine), made.get(other)
            if conv is not None and conv.type == "Conv" and readers.get(mine) == 1 \
                    and late is not None and index[late.name] > index[conv.name]:
                moves[add.name] = conv
                break
    if not moves:
        return graph
    moved = {c.name for c in moves.values()}
    out = graph.copy()
    by_name = {op.name: op for op in out.ops}
    order: list[Op] = []
    for op in out.ops:
        if op.name in moved:
            continue
        if op.name in moves:
            order.append(by_name[moves[op.name].name])
        order.append(op)
    out.ops = order
    return out
