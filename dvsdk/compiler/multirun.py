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

from .hwmap import ACTIVATIONS, NoMapping, hwc
from .ir import Op
from .program import HwCmd

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


class MultiRunLowerings:
    """A mixin of :class:`dvsdk.compiler.lower.Lowering`: branch groups as one command."""

    def find_groups(self) -> dict[str, BranchGroup]:
        """Concat ops whose inputs are short single-consumer branches from one tensor, keyed
        by the name of the group's first op in program order."""
        groups: dict[str, BranchGroup] = {}
        for op in self.g.ops:
            if op.type != "Concat" or int(op.attrs.get("axis", 1)) != 1:
                continue
            if len(op.inputs) < 2 or len(set(op.inputs)) != len(op.inputs):
                continue
            branches, sources = [], set()
            for member in op.inputs:
                chain = self._branch(member)
                if chain is None:
                    break
                branches.append(chain)
                sources.add(chain[0].inputs[0])
            if len(branches) != len(op.inputs) or len(sources) != 1:
                continue
            source = sources.pop()
            if hwc(self.g.shape(source)) is None or self.g.is_const(source):
                continue
            group = BranchGroup(source, op, branches)
            first = min(group.ops, key=lambda o: self.order[o.name])
            groups[first.name] = group
        return groups


    def _branch(self, member: str) -> list[Op] | None:
        """The ops from the split point to ``member`` (at most two conv/pool stages)."""
        chain: list[Op] = []
        name = member
        while True:
            p = self.prod.get(name)
            if p is None or p.type not in _STAGES | _FUSED or p.attrs.get("dvsdk_target") == "cpu":
                return None
            chain.insert(0, p)
            if sum(o.type in _STAGES for o in chain) > 2:
                return None
            src = p.inputs[0]
            users = self.cons.get(src, [])
            if len(users) > 1 or src in self.g.inputs or self.prod.get(src) is None:
                break  # the split point: the tensor all branches read
            if src in self.g.outputs:
                return None
            name = src
        if chain[0].type not in _STAGES or any(len(self.cons.get(o.outputs[0], [])) != 1
                                               for o in chain):
            return None
        return chain


    def lower_group(self, group: BranchGroup) -> bool:
        """Try the whole group as one command; nothing is emitted unless it succeeds."""
        collected: list[HwCmd] = []
        self.emit_sink = collected
        try:
            per_branch = []
            for branch in group.branches:
                start = len(collected)
                for op in branch:
                    if any(op.name in c.sources for c in collected[start:]):
                        continue
                    if not self.lower_op(op):
                        return False
                per_branch.append(collected[start:])
        except NoMapping:
            return False
        finally:
            self.emit_sink = None
        cmd = self.merge(group, per_branch)
        if cmd is None:
            return False
        try:
            self.check(cmd)
        except NoMapping:
            return False
        self.emit(cmd)
        return True


    def merge(self, group: BranchGroup, per_branch: list[list[HwCmd]]) -> HwCmd | None:
        runs, blobs, sources, kinds, topo, bit = [], [], [], [], 0, 0
        h, w, c = self.dev_shape(group.source)
        out_h = out_w = None
        members = group.concat.inputs
        for i, (cmds, member) in enumerate(zip(per_branch, members)):
            if not 1 <= len(cmds) <= 2 or cmds[0].input != group.source or \
                    cmds[-1].output != member or any(k.eltwise or len(k.runs) != 1 for k in cmds):
                return None
            if len(cmds) == 2 and cmds[0].output != cmds[1].input:
                return None
            mh, mw, mc = self.dev_shape(member)
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
        return HwCmd(group.source, group.concat.outputs[0], w, h, c, runs, blobs, None, topo,
                        sources, f"multi-run topo {topo:#x} [" + " | ".join(kinds) + "]")
