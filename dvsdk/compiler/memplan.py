"""The activation arena: live ranges and first-fit placement (dmp-convertor §5.3, done better).

Every tensor the device reads or writes gets a slot in one DMA arena, in the
8-channel-chunked FP16 layout, its N samples back to back (§1, §4.10).  Views (a
reshape of a 1x1xC tensor) and concat members share their root's slot at a byte
offset, which also makes the root live as long as any of them.  Roots are placed
largest first at the lowest 64-byte aligned offset that does not overlap a root alive
at the same time.  Unlike DMP's planner, the input's slot is only reused once nothing
reads it any more, and concat members stay aligned because every non-last member has
C % 8 == 0.

A command's output never shares its input's slot, even for a per-element run
whose input dies there: nothing in the reference says the DV700 reads a run's
whole input before it stores output, and "one tile" does not mean "the input is
in the unified buffer" for pool and depthwise runs (§7.2: ``calc_num_tiles_pool``
counts against a fixed 64 Mi-element budget, not the real UBUF).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program import HwStep, Program, unit_io

ALIGN = 64


@dataclass
class Plan:
    size: int
    offsets: dict[str, int]                        # every device tensor -> arena byte offset
    ranges: dict[str, tuple[int, int]] = field(default_factory=dict)  # root -> (first, last)
    roots: dict[str, str] = field(default_factory=dict)


def resolve(name: str, aliases: dict[str, tuple[str, int]]) -> tuple[str, int]:
    """Follow aliases to the root tensor and the accumulated byte offset."""
    off = 0
    seen = set()
    while name in aliases:
        if name in seen:
            raise ValueError(f"alias cycle at {name}")
        seen.add(name)
        name, o = aliases[name]
        off += o
    return name, off


def plan(program: Program) -> Plan:
    graph = program.graph
    units: list[tuple[set[str], set[str]]] = []  # (reads, writes) per command / CPU op
    for step in program.steps:
        for unit in step.commands if isinstance(step, HwStep) else [step]:
            reads, writes = unit_io(unit)
            units.append((set(reads), set(writes)))
    end = len(units)
    aliases = dict(program.aliases)
    roots: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for name in program.device:
        root, off = resolve(name, aliases)
        roots[name] = root
        need = off + program.nbytes(name)
        if root in program.device:
            need = max(need, program.nbytes(root))
        sizes[root] = max(sizes.get(root, 0), need)
    first: dict[str, int] = {}
    last: dict[str, int] = {}

    def touch(name: str, i: int) -> None:
        root = roots.get(name)
        if root is None:
            return
        first[root] = min(first.get(root, i), i)
        last[root] = max(last.get(root, i), i)

    for name in graph.inputs:
        touch(name, -1)
    for i, (reads, writes) in enumerate(units):
        for n in reads | writes:
            touch(n, i)
    for name in graph.outputs:
        touch(name, end)
    for root in sizes:
        first.setdefault(root, -1)
        last.setdefault(root, end)
    placed: list[tuple[int, int, int, int]] = []   # (start, end, first, last)
    offsets_root: dict[str, int] = {}
    for root in sorted(sizes, key=lambda r: (-sizes[r], first[r], r)):
        size = -(-sizes[root] // ALIGN) * ALIGN
        lo, hi = first[root], last[root]
        busy = sorted((s, e) for s, e, f, l in placed if not (l < lo or f > hi))
        cursor = 0
        for s, e in busy:
            if cursor + size <= s:
                break
            cursor = max(cursor, -(-e // ALIGN) * ALIGN)
        offsets_root[root] = cursor
        placed.append((cursor, cursor + size, lo, hi))
    offsets = {}
    for name in program.device:
        root, off = resolve(name, aliases)
        offsets[name] = offsets_root[root] + off
    total = max((e for _, e, _, _ in placed), default=0)
    return Plan(total, offsets, {r: (first[r], last[r]) for r in sizes}, roots)
