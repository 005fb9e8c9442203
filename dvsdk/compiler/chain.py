"""Consecutive commands of a chain as one multi-run command (reference §4.1, §7.3).

A command whose output only the next command of its segment reads can hand that output
over in the unified buffer instead of DRAM: one command whose runs each feed the next
(``topo`` bit clear on every run but the last, a "pure chain": §7.3 step 14 ping-pongs
its runs between the two ends of the UBUF).  A squeeze-excitation block is such a chain:
its global average pool stages, the 1x1 reduce conv and the 1x1 expand conv are four
commands on tensors of a few KB each, and one command after this pass (MobileNetV3-small:
71 commands -> 43).  The values are the same: a run's output is FP16 whether it goes to
DRAM or stays in the UBUF (our numerics choice, ``firmware_spec/README.md``; §7.3 counts
2 bytes an element there), and the next run reads it as it is.

A chain is taken only where it stays exactly as valid as its parts (:func:`_chains`): the
intermediate has no other reader, and the driver's own validation (§6, with the
multi-run rules: every run single-tile, no dilation, no 3-D input, the UBUF peak of §7.3
and the whole tensors of every kept run within the target's UBUF,
:func:`dvsdk.hw.dims.ubuf_kept_bytes`) accepts the merged command.  The intermediate then
no longer exists in DRAM: it leaves the arena, ``command_outputs`` name the chain's last
tensor only, and ``dvsdk analyze`` compares what the chain writes (``dvsdk-compile
--no-chain``, ``Options.chain = False``: a command per layer, for per-layer analysis).  DMP's
converter fuses branches that meet at a concat (:mod:`.multirun`), not chains.
"""

from __future__ import annotations

from collections import Counter

from ..driver.device import DeviceInfo
from ..errors import InvalidCommand
from ..hw.dims import MAX_NUM_RUNS
from .program import CpuStep, HwCmd, HwStep, Program, out_hwc, readers_and_pinned, validate_cmd


def _pure_chain(cmd: HwCmd) -> bool:
    """Whether only the last run of ``cmd`` writes to DRAM (a single run is one)."""
    return cmd.topo == 1 << (len(cmd.runs) - 1)


def chain_commands(program: Program, info: DeviceInfo) -> Program:
    """``program`` with each run of consecutive chained commands merged (module
    docstring); the steps, their order and every other tensor unchanged."""
    readers, pinned = readers_and_pinned(program)
    dropped: set[str] = set()
    steps: list[HwStep | CpuStep] = []
    for step in program.steps:
        if not isinstance(step, HwStep):
            steps.append(step)
            continue
        merged: list[HwCmd] = []
        for cmd in step.commands:
            prev = merged[-1] if merged else None
            if prev is not None and _chains(prev, cmd, readers, pinned):
                joined = join_commands(prev, cmd)
                try:
                    validate_cmd(joined, info)
                except InvalidCommand:
                    merged.append(cmd)
                    continue
                merged[-1] = joined
                dropped.add(prev.output)
            else:
                merged.append(cmd)
        steps.append(HwStep(merged))
    device = {n: hwc for n, hwc in program.device.items() if n not in dropped}
    samples = {n: k for n, k in program.samples.items() if n not in dropped}
    return Program(program.graph, steps, device, program.aliases, program.report, samples)


def _chains(prev: HwCmd, cmd: HwCmd, readers: Counter[str], pinned: set[str]) -> bool:
    """Whether ``cmd`` may take ``prev``'s output in the UBUF: it reads exactly that tensor,
    with the shape ``prev`` writes (an FC reads a conv's bytes as a 1x1xN vector: no
    hand-over); nothing else reads it (no other command, CPU step or graph output) and no
    view, concat slot or alias lives on it (``pinned``); both are pure chains; and neither
    adds an element-wise operand (dvsdk supports it on single-run commands only, §4.4
    [AMBIG]).  Whether the merged command fits is :func:`validate_cmd`'s to say."""
    return (cmd.input == prev.output and readers[prev.output] == 1 and cmd.batch == prev.batch
            and prev.output not in pinned and prev.eltwise is None and cmd.eltwise is None
            and _pure_chain(prev) and _pure_chain(cmd)
            and len(prev.runs) + len(cmd.runs) <= MAX_NUM_RUNS
            and out_hwc(prev) == (cmd.h, cmd.w, cmd.c))


def chain_kinds(kind: str) -> list[str]:
    """The kinds of the commands a command of ``kind`` (``HwCmd.kind``, the net.bin's
    ``runs``) was chained from: ``"chain [a -> b]"`` -> ``[a, b]``, else ``[kind]``."""
    if kind.startswith("chain [") and kind.endswith("]"):
        return kind[len("chain ["):-1].split(" -> ")
    return [kind]


def join_commands(prev: HwCmd, cmd: HwCmd) -> HwCmd:
    """``prev`` then ``cmd`` as one command: ``prev``'s input, ``cmd``'s output."""
    kinds = chain_kinds(prev.kind) + chain_kinds(cmd.kind)
    runs = prev.runs + cmd.runs
    return HwCmd(input=prev.input, output=cmd.output, w=prev.w, h=prev.h, c=prev.c,
                 runs=runs, blobs=prev.blobs + cmd.blobs, eltwise=None,
                 topo=1 << (len(runs) - 1), sources=prev.sources + cmd.sources,
                 kind="chain [" + " -> ".join(kinds) + "]", batch=prev.batch)
