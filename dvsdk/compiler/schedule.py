"""Step order: as few device <-> CPU hand-overs as the dependencies allow.

Lowering emits commands and CPU steps in the graph's topological order, which interleaves
independent branches: YOLO's box and class heads alternate conv (DV700) and SiLU's Mul
(CPU), so every Mul is a CPU segment of its own, with a sync and an unpack before it and
a pack and a sync after.  Any topological order computes the same tensors, so this pass
reorders the program's units (one hardware command or one CPU step each) by list
scheduling: among the units whose inputs are ready, keep taking ones of the current kind
(lowest original position first), and switch kind only when none is left.  Consecutive
commands then share one hardware segment (one command list, one kick).

Dependencies are by arena bytes, not only by name: a view or a concat member lives in its
root's slot (``Program.aliases``), so reading a tensor waits for every unit that writes
bytes of it (a concat's output: all its members; a split's part: the split tensor).
The memory plan runs after this pass, on the final order.  The greedy order is kept only
when it has fewer transitions than the original.
"""

from __future__ import annotations

import heapq

from .memplan import resolve
from .program import CpuStep, HwCmd, HwStep, Program, as_steps, unit_io

Unit = HwCmd | CpuStep


def transitions(kinds: list[bool]) -> int:
    """Changes between hardware and CPU along a sequence of units (True: hardware)."""
    return sum(1 for a, b in zip(kinds, kinds[1:]) if a != b)


def schedule(program: Program) -> Program:
    """``program`` with its units reordered for fewer device <-> CPU transitions."""
    units: list[Unit] = []
    for step in program.steps:
        units.extend(step.commands if isinstance(step, HwStep) else [step])
    hw = [isinstance(u, HwCmd) for u in units]
    if transitions(hw) < 2:
        return program

    def region(name: str) -> tuple[str, int, int]:
        """(root, first byte, end byte) of a tensor's arena slot; host-only: its name."""
        if name not in program.device:
            return name, 0, 1
        root, off = resolve(name, program.aliases)
        return root, off, off + program.nbytes(name)

    writers: dict[str, list[tuple[int, int, int]]] = {}  # root -> (start, end, unit)
    for i, u in enumerate(units):
        for name in unit_io(u)[1]:
            root, a, b = region(name)
            writers.setdefault(root, []).append((a, b, i))
    succ: list[set[int]] = [set() for _ in units]
    indeg = [0] * len(units)
    for i, u in enumerate(units):
        for name in unit_io(u)[0]:
            root, a, b = region(name)
            for wa, wb, j in writers.get(root, []):
                if wa < b and a < wb and j != i and i not in succ[j]:
                    succ[j].add(i)
                    indeg[i] += 1
    ready: dict[bool, list[int]] = {True: [], False: []}
    for i in range(len(units)):
        if indeg[i] == 0:
            heapq.heappush(ready[hw[i]], i)
    order: list[int] = []
    kind = hw[0]
    while ready[True] or ready[False]:
        if not ready[kind]:
            kind = not kind
        i = heapq.heappop(ready[kind])
        order.append(i)
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                heapq.heappush(ready[hw[j]], j)
    if len(order) != len(units):  # a dependency cycle: only from an aliasing bug
        raise AssertionError("schedule: dependency cycle among the program's units")
    if transitions([hw[i] for i in order]) >= transitions(hw):
        return program
    return Program(program.graph, as_steps(units[i] for i in order), program.device,
                   program.aliases, program.report, program.samples)
