"""Channel groups: a conv and the per-channel runs after it, one command per group of its
output channels, the intermediate on chip (issue 27).

An inverted-residual block expands to many channels with a 1x1 conv and filters each of
them with a depthwise conv.  At a high resolution the expanded tensor does not fit the
unified buffer (EfficientNet-Lite0's 56x56x144 is 903 KB against 512 KiB), so the chain
pass (:mod:`.chain`) leaves two commands and the tensor goes to DRAM and back.  But a
depthwise conv (and a pool or an activation alone) reads each channel only for the same
channel: cut the conv's output channels into groups of whole 8-channel chunks and each
group is a chain of its own -- the conv with those output channels' weights, then the
per-channel runs on them -- small enough for the unified buffer, writing its chunks of the
output in place (chunk k of a tensor starts ``16·k·H·W`` bytes in, §1: a zero-copy slice,
as a concat member is).  Every group reads the conv's input again; the intermediate
never leaves the chip.

Each output value is computed by the same runs from the same inputs and weights as
without groups (a conv's output channel depends on its own weights only, a depthwise
channel on its own input channel; ``firmware_spec/arithmetic.md``), so the results are
the same bits.  The weights are the same FP16 values, packed for the group (§8.1).  A
group split is taken only where the cycle model (:func:`.program.cmd_cycles`) predicts it
faster than the two commands it replaces.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from ..driver.commands import ConvRun
from ..driver.device import DeviceInfo
from ..errors import InvalidCommand
from ..hw import dims
from ..hw.spec import SPEC
from ..hw.weights import pack_conv_weights, unpack_conv_weights
from .chain import chain_kinds, join_commands
from .program import (
    HwCmd,
    Program,
    Rewrite,
    cmd_cycles,
    readers_and_pinned,
    rewrite_commands,
    validate_cmd,
)

_POOL = SPEC.enum("pool_enable")
_PRELU = SPEC.enum("actfunc").prelu
_FP16 = SPEC.enum("weight_fmt").fp16


def _splittable(run: ConvRun) -> bool:
    """A conv run whose output channels can be computed a group at a time: FP16 weights,
    not dilated (the dilated packing, §8.2, is another format), not a deconvolution."""
    return (run.conv_enable in (1, 3) and run.weight_fmt == _FP16 and run.dilation == (1, 1)
            and not run.is_lrn)


def _per_channel(run: ConvRun) -> bool:
    """A run that computes each channel from the same channel only: a depthwise conv (FP16,
    not dilated), a max or average pool, or an activation alone (§4.1, §4.3, §4.5)."""
    if run.is_lrn:
        return False
    if run.conv_enable:
        return run.conv_enable == 3 and _splittable(run)
    return run.pool_enable in (_POOL.none, _POOL.max, _POOL.avg)


def _subset(run: ConvRun, blob: bytes | None, in_c: int, m0: int, m1: int
            ) -> tuple[ConvRun, bytes | None]:
    """``run`` for output channels ``[m0, m1)`` and its weights packed for them (the same
    FP16 values; a depthwise run reads input channels ``[m0, m1)`` too)."""
    if not run.conv_enable:
        return replace(run, m=m1 - m0), None
    prelu = run.actfunc == _PRELU
    w, b, p = unpack_conv_weights(blob, in_c, run.m, run.kx, run.ky, False,
                                  depthwise=run.depthwise, prelu=prelu)
    sub = pack_conv_weights(w[m0:m1], b[m0:m1], p[m0:m1] if p is not None else None)
    return replace(run, m=m1 - m0), sub


def _groups(m: int, n: int) -> list[tuple[int, int]]:
    """``m`` channels as ``n`` groups of whole 8-channel chunks, as even as they go."""
    chunks = -(-m // 8)
    cuts = [8 * (chunks * k // n) for k in range(n + 1)]
    return [(cuts[k], min(cuts[k + 1], m)) for k in range(n) if cuts[k] < min(cuts[k + 1], m)]


def plan_groups(prev: HwCmd, cmd: HwCmd, info: DeviceInfo, n: int
                ) -> tuple[list[HwCmd], dict, dict] | None:
    """``prev`` (whose last run is the conv) then ``cmd`` (per-channel runs) as ``n`` group
    commands writing chunks of ``cmd``'s output in place, or None when a group does not fit
    the device (the driver's validation, §6 and §7.3)."""
    joined = join_commands(prev, cmd)
    shapes = dims.run_shapes(joined, joined.runs)
    last = len(prev.runs) - 1
    conv_in_c = shapes[last][0][3]
    m = prev.runs[-1].m
    oh, ow, out_c = dims.command_output_shape(cmd, cmd.runs)
    if out_c != m:
        return None
    kind = "group [" + " -> ".join(chain_kinds(joined.kind)) + "]"
    templates = []
    for m0, m1 in _groups(m, n):
        runs, blobs = list(prev.runs[:last]), list(prev.blobs[:last])
        run, blob = _subset(prev.runs[-1], prev.blobs[-1], conv_in_c, m0, m1)
        runs.append(run)
        blobs.append(blob)
        for r, b in zip(cmd.runs, cmd.blobs):
            run, blob = _subset(r, b, m, m0, m1)
            runs.append(run)
            blobs.append(blob)
        group = HwCmd(prev.input, "out", prev.w, prev.h, prev.c, runs, blobs,
                      topo=1 << (len(runs) - 1), sources=prev.sources + cmd.sources,
                      kind=kind)
        try:
            validate_cmd(group, info)
        except InvalidCommand:
            return None
        templates.append((m0, m1, group))
    # a batch runs its groups sample by sample: a group's channels of one sample are one
    # range, of several samples not (§4.10 steps whole samples); views named as such
    cmds, device, aliases = [], {}, {}
    in_bytes, out_bytes = prev.w * prev.h * prev.c * 2, ow * oh * out_c * 2
    for k in range(prev.batch):
        tag = f"@{k}" if prev.batch > 1 else ""
        src = prev.input + tag
        if tag:
            device[src] = (prev.h, prev.w, prev.c)
            aliases[src] = (prev.input, k * in_bytes)
        for m0, m1, group in templates:
            name = f"{cmd.output}#ch{m0}:{m1}{tag}"
            device[name] = (oh, ow, m1 - m0)
            aliases[name] = (cmd.output, k * out_bytes + m0 * oh * ow * 2)
            cmds.append(replace(group, input=src, output=name))
    return cmds, device, aliases


def best_groups(prev: HwCmd, cmd: HwCmd, info: DeviceInfo
                ) -> tuple[int, list[HwCmd], dict, dict] | None:
    """``prev`` and ``cmd`` (a :func:`pairs` pair) in the fewest channel groups that fit,
    with their predicted cycles, when that is faster than the two commands; else None."""
    base = cmd_cycles(prev, info.ub_size) + cmd_cycles(cmd, info.ub_size)
    for n in range(2, -(-prev.runs[-1].m // 8) + 1):
        got = plan_groups(prev, cmd, info, n)
        if got is not None:   # the fewest groups that fit: the input read least
            cycles = sum(cmd_cycles(c, info.ub_size) for c in got[0])
            return (cycles, *got) if cycles < base else None
    return None


def pairs(prev: HwCmd, cmd: HwCmd) -> bool:
    """Whether ``cmd`` may take ``prev``'s output channel group by channel group, as far as
    the two commands say (the program must also let ``prev``'s output go: :func:`_pair`):
    it reads exactly that tensor; both are pure chains of as many samples, without
    element-wise operands; the last run of ``prev`` is a conv we can split and every run of
    ``cmd`` is per-channel."""
    return (cmd.input == prev.output
            and prev.batch == cmd.batch and prev.eltwise is None and cmd.eltwise is None
            and prev.topo == 1 << (len(prev.runs) - 1) and cmd.topo == 1 << (len(cmd.runs) - 1)
            and len(prev.runs) + len(cmd.runs) <= dims.MAX_NUM_RUNS
            and _splittable(prev.runs[-1]) and prev.runs[-1].m > 8
            and all(_per_channel(r) for r in cmd.runs)
            and dims.command_output_shape(prev, prev.runs) == (cmd.h, cmd.w, cmd.c))


def _pair(prev: HwCmd, cmd: HwCmd, readers: Counter[str], pinned: set[str],
          aliases: dict) -> bool:
    """:func:`pairs`, and nothing else reads or views ``prev``'s output, nor is ``cmd``'s
    output a view."""
    return (pairs(prev, cmd) and readers[prev.output] == 1 and prev.output not in pinned
            and cmd.output not in aliases)


def group_commands(program: Program, info: DeviceInfo) -> Program:
    """``program`` with each conv and the per-channel command after it run channel group by
    channel group where that is predicted faster (module docstring); everything else, and
    every result bit, unchanged."""
    readers, pinned = readers_and_pinned(program)

    def at(cmds: list[HwCmd], i: int) -> Rewrite | None:
        if i + 1 >= len(cmds) or not _pair(cmds[i], cmds[i + 1], readers, pinned,
                                           program.aliases):
            return None
        best = best_groups(cmds[i], cmds[i + 1], info)
        return None if best is None else (2, best[1], best[2], best[3])

    return rewrite_commands(program, at)
