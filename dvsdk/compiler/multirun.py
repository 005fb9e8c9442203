"""Branches that meet at a channel Concat as one multi-run command (reference §4.1, §7.3).

Inception and fire modules read one tensor X with several short branches (a conv or a
pool, optionally followed by a second one, each with its fused activation and
max-pool) whose outputs are concatenated along channels.  The DV700 runs such a module
as one command: one run per branch stage, ``topo`` bit 1 on each branch's last run
(written to DRAM, appended in branch order = the channel concat when every branch but
the last has C % 8 == 0) and bit 0 on a first stage (kept in the unified buffer and read
by the next run).  The command must satisfy the multi-run rules (single tile per run,
§7.3 UBUF peak); otherwise the branches stay separate commands and the concat a
zero-copy placement.  DMP's converter does the same for depth 1-2 branches
(dmp-convertor §2.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import dims
from .hwmap import ACTIVATIONS, NoMapping, hwc
from .ir import Op

if TYPE_CHECKING:
    from .lower import HwCmd, Lowering

#: ops a branch may consist of (conv-like stages and what fuses into them)
_STAGES = {"Conv", "MaxPool", "AveragePool"}
_FUSED = set(ACTIVATIONS) | {"Abs"}


@dataclass
class BranchGroup:
    source: str              # the tensor every branch reads
    concat: Op
    branches: list[list[Op]]  # per concat input, its ops in order

    @property
    def ops(self) -> list[Op]:
        return [op for b in self.branches for op in b]


def find_groups(lw: Lowering) -> dict[str, BranchGroup]:
    """Concat ops whose inputs are short single-consumer branches from one tensor, keyed
    by the name of the group's first op in program order."""
    groups: dict[str, BranchGroup] = {}
    for op in lw.g.ops:
        if op.type != "Concat" or int(op.attrs.get("axis", 1)) != 1:
            continue
        if len(op.inputs) < 2 or len(set(op.inputs)) != len(op.inputs):
            continue
        branches, sources = [], set()
        for member in op.inputs:
            chain = _branch(lw, member)
            if chain is None:
                break
            branches.append(chain)
            sources.add(chain[0].inputs[0])
        if len(branches) != len(op.inputs) or len(sources) != 1:
            continue
        source = sources.pop()
        if hwc(lw.g.shape(source)) is None or lw.g.is_const(source):
            continue
        group = BranchGroup(source, op, branches)
        first = min(group.ops, key=lambda o: lw.order[o.name])
        groups[first.name] = group
    return groups


def _branch(lw: Lowering, member: str) -> list[Op] | None:
    """The ops from the split point to ``member`` (at most two conv/pool stages)."""
    chain: list[Op] = []
    name = member
    while True:
        p = lw.prod.get(name)
        if p is None or p.type not in _STAGES | _FUSED:
            return None
        chain.insert(0, p)
        if sum(o.type in _STAGES for o in chain) > 2:
            return None
        src = p.inputs[0]
        users = lw.cons.get(src, [])
        if len(users) > 1 or src in lw.g.inputs or lw.prod.get(src) is None:
            break  # the split point: the tensor all branches read
        if src in lw.g.outputs:
            return None
        name = src
    if chain[0].type not in _STAGES or any(len(lw.cons.get(o.outputs[0], [])) != 1
                                           for o in chain):
        return None
    return chain


def lower_group(lw: Lowering, group: BranchGroup) -> bool:
    """Try the whole group as one command; nothing is emitted unless it succeeds."""
    collected: list[HwCmd] = []
    lw.emit_sink = collected
    try:
        per_branch = []
        for branch in group.branches:
            start = len(collected)
            for op in branch:
                if any(op.name in c.sources for c in collected[start:]):
                    continue
                if not lw.lower_op(op):
                    return False
            per_branch.append(collected[start:])
    except NoMapping:
        return False
    finally:
        lw.emit_sink = None
    cmd = merge(lw, group, per_branch)
    if cmd is None:
        return False
    try:
        lw.check(cmd)
    except NoMapping:
        return False
    lw.emit(cmd)
    return True


def merge(lw: Lowering, group: BranchGroup, per_branch: list[list[HwCmd]]) -> HwCmd | None:
    runs, blobs, sources, kinds, topo, bit = [], [], [], [], 0, 0
    h, w, c = lw.dev_shape(group.source)
    out_h = out_w = None
    members = group.concat.inputs
    for i, (cmds, member) in enumerate(zip(per_branch, members)):
        if not 1 <= len(cmds) <= 2 or cmds[0].input != group.source or \
                cmds[-1].output != member or any(k.eltwise or len(k.runs) != 1 for k in cmds):
            return None
        if len(cmds) == 2 and cmds[0].output != cmds[1].input:
            return None
        mh, mw, mc = lw.dev_shape(member)
        if i < len(members) - 1 and mc % 8:
            return None  # appending bytes is a channel concat only for C % 8 == 0 (§1)
        if out_h is None:
            out_h, out_w = mh, mw
        elif (mh, mw) != (out_h, out_w):
            return None
        for j, k in enumerate(cmds):
            runs.append(k.runs[0])
            blobs.append(k.blobs[0])
            sources.extend(k.sources)
            kinds.append(k.kind)
            if j == len(cmds) - 1:
                topo |= 1 << bit
            bit += 1
    sources.append(group.concat.name)
    if len(runs) > 32:
        return None
    return lw.HwCmd(group.source, group.concat.outputs[0], w, h, c, runs, blobs, None, topo,
                    sources, f"multi-run topo {topo:#x} [" + " | ".join(kinds) + "]")


def command_out_hwc(cmd: HwCmd) -> tuple[int, int, int]:
    """(H, W, C) of a command's output: runs with topo bit 1 are appended (§4.1)."""
    shape = (cmd.w, cmd.h, 1, cmd.c)
    out_hw, channels = None, 0
    for i, run in enumerate(cmd.runs):
        (ow, oh, _, oc), _ = dims.run_output_shape(run, shape)
        if cmd.topo >> i & 1:
            if out_hw not in (None, (oh, ow)):
                raise NoMapping("branch outputs differ in size")
            out_hw, channels = (oh, ow), channels + oc
            shape = (cmd.w, cmd.h, 1, cmd.c)
        else:
            shape = (ow, oh, 1, oc)
    return out_hw[0], out_hw[1], channels
