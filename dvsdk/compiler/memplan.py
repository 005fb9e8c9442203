"""The activation arena: live ranges and first-fit placement (dmp-convertor §5.3, done better).

Every tensor the device reads or writes gets a slot in one DMA arena, in the
8-channel-chunked FP16 layout.  Views (a reshape of a 1x1xC tensor) and concat
members share their root's slot at a byte offset, which also makes the root live
as long as any of them.  Roots are placed largest first at the lowest 64-byte
aligned offset that does not overlap a root alive at the same time.  Unlike
DMP's planner, the input's slot is only reused once nothing reads it any more,
and concat members stay aligned because every non-last member has C % 8 == 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .program import CpuStep, HwStep, Program

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


def nbytes(hwc: tuple[int, int, int]) -> int:
    h, w, c = hwc
    return h * w * c * 2


def _in_place(program: Program, units: list[tuple[set[str], set[str]]]
              ) -> dict[str, tuple[str, int]]:
    """Aliases plus in-place outputs: a per-element, single-tile run (activation-only, or a
    per-channel affine as a depthwise 1x1) may write over its input when that input's
    whole slot dies there.  Single tile: the input is entirely in the unified buffer before
    any output is stored (§7.2: such runs are not 2-D convs) [INFER]."""
    aliases = dict(program.aliases)
    graph = program.graph
    last: dict[str, int] = {}
    for i, (reads, writes) in enumerate(units):
        for n in reads | writes:
            last[resolve(n, aliases)[0]] = i
    for n in graph.outputs:
        last[resolve(n, aliases)[0]] = len(units)
    i = 0
    for step in program.steps:
        cmds = step.commands if isinstance(step, HwStep) else [None]
        for cmd in cmds:
            if cmd is not None and cmd.inplace and cmd.output not in aliases \
                    and cmd.input not in graph.inputs \
                    and program.device.get(cmd.input) == program.device.get(cmd.output):
                root, off = resolve(cmd.input, aliases)
                if last.get(root) == i and root not in graph.inputs:
                    aliases[cmd.output] = (cmd.input, 0)
                    last[root] = max(last.get(root, i), last.get(cmd.output, i))
            i += 1
    return aliases


def plan(program: Program) -> Plan:
    graph = program.graph
    units: list[tuple[set[str], set[str]]] = []  # (reads, writes) per command / CPU op
    for step in program.steps:
        if isinstance(step, HwStep):
            for cmd in step.commands:
                reads = {cmd.input} | ({cmd.eltwise} if cmd.eltwise else set())
                units.append((reads, {cmd.output}))
        elif isinstance(step, CpuStep):
            units.append(({i for i in step.op.inputs if i}, set(step.op.outputs)))
    end = len(units)
    aliases = _in_place(program, units)
    roots: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for name, shape in program.device.items():
        root, off = resolve(name, aliases)
        roots[name] = root
        need = off + nbytes(shape)
        if root in program.device:
            need = max(need, nbytes(program.device[root]))
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
