"""Column bands: a chain of commands run band by band, every intermediate on chip (issue 27).

A pure chain of runs (§4.1) keeps each intermediate in the unified buffer only if the
intermediate fits there whole (§7.3, :func:`dvsdk.hw.dims.ubuf_kept_bytes`); at the large
early resolutions of an image network it does not, and every layer goes to DRAM and back.
Cut into vertical bands -- the same split the hardware's own tiles make, §7.2 -- the chain
fits: each band is one multi-run command over a strip of the chain's input columns, wide
enough for the columns it must produce (the halo of every kernel and stride on the way),
with its edge pads only where the band touches the tensor's edge.  The strips overlap by
the halo; the input is read about once, the intermediates never leave the chip.

Where strips are plain addresses (§1): inside a chunk of 8 channels the layout is x
outermost, so columns ``[a, b)`` of a tensor of at most 8 channels are one contiguous
range, ``a·H·C·2`` bytes in.  A band therefore needs a chain input of at most 8 channels
(a network's RGB input), and writes its output columns in place when the output has at
most 8 channels too.  A wider output goes to a band's own tensor and per 8-channel chunk
a copy command (a 2x upsample then a 2x2 max pool: the value itself bit for bit, -0 too,
:func:`_copies`) puts its columns in place.  The strips of views are named after the
tensor they are part of (``x#colsA:B``, ``y#colsA:B/cK``, ``@n`` for a batch's sample n:
:mod:`dvsdk.runtime.views`), and the input strips read all of the input between them.

Every output pixel is computed by the same runs from the same inputs as without bands
(each run's arithmetic is per output pixel, ``firmware_spec/arithmetic.md``; the values
between runs are FP16 on chip as in DRAM), so the results are the same bits.  The pass
takes a chain only where the cycle model (:func:`dvsdk.hw.timing.run_cycles`, the
simulator's own) predicts it faster than the commands it replaces, copies and all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from functools import reduce

from ..driver.commands import ConvRun
from ..driver.device import DeviceInfo
from ..errors import InvalidCommand
from ..hw import dims
from ..hw.spec import SPEC
from .chain import chain_kinds, join_commands
from .groups import best_groups, pairs
from .program import (
    HwCmd,
    Program,
    Rewrite,
    cmd_cycles,
    readers_and_pinned,
    rewrite_commands,
    validate_cmd,
)

_PAD7 = SPEC.bits("pad7")
_PAD8 = SPEC.bits("pad8")
_POOL = SPEC.enum("pool_enable")
#: The copy of a chunk of 1..8 channels: two runs (:func:`_copies`)
_COPY = {cs: (ConvRun.make(cs, pool="upsample"),
              ConvRun.make(cs, pool="max", pool_size=2, pool_stride=2)) for cs in range(1, 9)}
_COPY_KIND = "copy [2x nearest upsample -> maxpool 2x2]"
#: Most bands tried for one chain (more make the halos and per-command costs win).
MAX_BANDS = 64


def _bandable(run: ConvRun) -> bool:
    """A run whose columns depend on a window of its input's columns we can follow: a
    conv or depthwise conv (square odd kernel, no dilation, not a deconvolution), with or
    without a fused max pool, a max pool alone, or an activation alone."""
    if run.is_lrn:
        return False
    if run.conv_enable:
        if run.conv_enable not in (1, 3) or run.dilation != (1, 1):
            return False
        if run.kx != run.ky or not run.kx % 2:
            return False
    return run.pool_enable in (_POOL.none, _POOL.max)


def _window(lo: int, hi: int, k: int, s: int, pad_a: int, n_in: int
            ) -> tuple[int, int, int, int]:
    """Input columns ``[a, b)`` and pads ``(left, right)`` for output columns ``[lo, hi)``
    of a window ``k`` with stride ``s`` and left pad ``pad_a`` over ``n_in`` columns: the
    band's own pads are the tensor's only where the band reaches its edge."""
    a, b = lo * s - pad_a, (hi - 1) * s - pad_a + k
    return max(a, 0), min(b, n_in), max(-a, 0), max(b - n_in, 0)


@dataclass
class _Band:
    a: int            # input columns [a, b)
    b: int
    runs: list[ConvRun]   # with the band's pads


def _band(runs: list[ConvRun], widths: list[tuple[int, int]], lo: int, hi: int) -> _Band:
    """The runs of the band producing output columns ``[lo, hi)``: walked back from the
    last run, each window gives the columns its input must have and the pads at the
    tensor's edges.  ``widths[i]`` is run i's (input, conv output) width over the whole
    tensor."""
    out: list[ConvRun] = []
    for run, (w_in, w_conv) in zip(reversed(runs), reversed(widths)):
        if run.pool_enable == _POOL.max:
            (pk, _), (ps, _), pp = run.pool_kernel, run.pool_strides, run.pool_pads
            lo, hi, left, right = _window(lo, hi, pk, ps, pp[0], w_conv)
            run = replace(run, pool_pad=_PAD8.pack(left=left, right=right, top=pp[2],
                                                   bottom=pp[3]))
        if run.conv_enable:
            pads = run.pads
            lo, hi, left, right = _window(lo, hi, run.kx, run.stride[0], pads[0], w_in)
            run = replace(run, conv_pad=_PAD7.pack(left=left, right=right, top=pads[2],
                                                   bottom=pads[3]))
        out.append(run)
    return _Band(lo, hi, out[::-1])


def _widths(cmd: HwCmd) -> list[tuple[int, int]]:
    """Per run of a pure chain: (input width, conv output width before its pool)."""
    res = []
    for run, ((w, h, _, c), _) in zip(cmd.runs, dims.run_shapes(cmd, cmd.runs)):
        (wc, _, _, _), _ = dims.run_output_shape(replace(run, pool_enable=0), (w, h, 1, c))
        res.append((w, wc))
    return res


def _strip(name: str, a: int, b: int) -> str:
    return f"{name}#cols{a}:{b}"


@dataclass
class _Plan:
    commands: list[HwCmd]
    device: dict[str, tuple[int, int, int]]
    aliases: dict[str, tuple[str, int]]
    cycles: int


def plan_bands(chain: HwCmd, out_c: int, info: DeviceInfo, bands: int) -> _Plan | None:
    """``chain`` (a pure chain as one command, possibly too big for the unified buffer) as
    ``bands`` band commands (and the copies a wide output needs) for each of its samples,
    or None when a band does not fit the device (the driver's validation, §6 and §7.3).
    A batch runs sample by sample: a band's strip of each sample is its own range (§1,
    §4.10 steps whole samples only)."""
    widths = _widths(chain)
    oh, ow, _ = dims.command_output_shape(chain, chain.runs)
    if bands > ow:
        return None
    kind = "band [" + " -> ".join(chain_kinds(chain.kind)) + "]"
    cuts = [ow * k // bands for k in range(bands + 1)]
    spans = [_band(chain.runs, widths, lo, hi) for lo, hi in zip(cuts, cuts[1:])]
    geometry = []
    for k, band in enumerate(spans):
        # the strips read all of the input: up to the next one (a stride above the kernel
        # skips columns) and to the edge (columns the last window does not reach); the
        # band's output stays as wide, which the shapes below check
        b = max(band.b, spans[k + 1].a if k + 1 < bands else chain.w)
        cmd = HwCmd("in", "out", b - band.a, chain.h, chain.c, band.runs, chain.blobs,
                    topo=chain.topo, sources=list(chain.sources), kind=kind)
        if dims.command_output_shape(cmd, cmd.runs)[:2] != (oh, cuts[k + 1] - cuts[k]):
            return None
        try:
            validate_cmd(cmd, info)
        except InvalidCommand:
            return None
        geometry.append((cuts[k], cuts[k + 1], band.a, b, cmd))
    plan = _Plan([], {}, {}, 0)
    for n in range(chain.batch):
        _instantiate(plan, chain, n, geometry, oh, ow, out_c)
    plan.cycles = sum(cmd_cycles(c, info.ub_size) for c in plan.commands)
    return plan


def _instantiate(plan: _Plan, chain: HwCmd, n: int, geometry: list, oh: int, ow: int,
                 out_c: int) -> None:
    """The band commands (and copies) of sample ``n``: its strips are ranges of its own
    sample of the chain's input and output."""
    x, y, h_in, c_in = chain.input, chain.output, chain.h, chain.c
    tag = f"@{n}" if chain.batch > 1 else ""
    x_off, y_off = n * chain.w * h_in * c_in * 2, n * ow * oh * out_c * 2
    for lo, hi, a, b, cmd in geometry:
        src = _strip(x, a, b) + tag
        plan.device[src] = (h_in, b - a, c_in)
        plan.aliases[src] = (x, x_off + a * h_in * c_in * 2)
        if out_c <= 8:
            dst = _strip(y, lo, hi) + tag
            plan.aliases[dst] = (y, y_off + lo * oh * out_c * 2)
        else:
            dst = f"{y}#band{lo}:{hi}{tag}"
        plan.device[dst] = (oh, hi - lo, out_c)
        plan.commands.append(replace(cmd, input=src, output=dst))
        if out_c > 8:   # right after their band: its tensor's slot is free again after them
            plan.commands += _copies(dst, y, y_off, lo, hi, oh, ow, out_c, tag, plan,
                                     chain.sources)


def _copies(src: str, y: str, y_off: int, lo: int, hi: int, oh: int, ow: int, out_c: int,
            tag: str, plan: _Plan, sources: list[str]) -> list[HwCmd]:
    """Per 8-channel chunk of band tensor ``src`` (columns ``[lo, hi)`` of ``y``'s sample at
    ``y_off``), a copy into that chunk of ``y``, where those columns are contiguous (§1): a
    2x upsample (a copy of each value into a 2x2 block, §4.3) then a 2x2 max pool with
    stride 2, the maximum of four copies of a value -- the value itself, bit for bit, -0
    and NaN too (``firmware_spec/arithmetic.md`` step 4; a run that only adds or
    multiplies, as an average pool or an activation, would turn -0 into +0)."""
    res = []
    w = hi - lo
    for c0 in range(0, out_c, 8):
        cs = min(8, out_c - c0)
        piece, place = f"{src}/c{c0}", f"{_strip(y, lo, hi)}/c{c0}{tag}"
        plan.device[piece] = plan.device[place] = (oh, w, cs)
        plan.aliases[piece] = (src, c0 * oh * w * 2)
        plan.aliases[place] = (y, y_off + c0 * oh * ow * 2 + lo * oh * cs * 2)
        res.append(HwCmd(piece, place, w, oh, cs, list(_COPY[cs]), [None, None], topo=0b10,
                         sources=list(sources[-1:]), kind=_COPY_KIND))
    return res


def _links(prev: HwCmd, cmd: HwCmd, readers: Counter[str], pinned: set[str]) -> bool:
    """Whether ``cmd`` continues a band chain ending in ``prev``: it reads exactly
    ``prev``'s output, which nothing else reads and nothing views."""
    return (cmd.input == prev.output and readers[prev.output] == 1 and cmd.batch == prev.batch
            and prev.output not in pinned and _plain(cmd)
            and dims.command_output_shape(prev, prev.runs) == (cmd.h, cmd.w, cmd.c))


def _plain(cmd: HwCmd) -> bool:
    """A pure chain of bandable runs without an element-wise operand."""
    return (cmd.eltwise is None and cmd.topo == 1 << (len(cmd.runs) - 1)
            and all(_bandable(r) for r in cmd.runs))


def _unbanded(cmds: list[HwCmd], info: DeviceInfo) -> int:
    """Predicted cycles of a chain's commands without bands: as they are, or a conv and the
    per-channel command after it in channel groups where :mod:`.groups` would take them
    (the pass after this one; bands must beat what it would make)."""
    total, i = 0, 0
    while i < len(cmds):
        got = None
        if i + 1 < len(cmds) and pairs(cmds[i], cmds[i + 1]):
            got = best_groups(cmds[i], cmds[i + 1], info)
        if got is None:
            total += cmd_cycles(cmds[i], info.ub_size)
            i += 1
        else:
            total += got[0]
            i += 2
    return total


def _best(cmds: list[HwCmd], info: DeviceInfo) -> tuple[int, _Plan] | None:
    """The longest-saving prefix of ``cmds`` as bands: (commands taken, plan), or None
    when no prefix of two or more runs is predicted faster banded."""
    best: tuple[int, int, _Plan] | None = None
    fewest = 2
    for n in range(1, len(cmds) + 1):
        base = _unbanded(cmds[:n], info)
        chain = reduce(join_commands, cmds[:n])
        if len(chain.runs) < 2 or len(chain.runs) > dims.MAX_NUM_RUNS:
            continue
        out_c = dims.command_output_shape(chain, chain.runs)[2]
        for bands in range(fewest, MAX_BANDS + 1):
            got = plan_bands(chain, out_c, info, bands)
            if got is None:
                continue
            saving = base - got.cycles
            if saving > 0 and (best is None or saving > best[0]):
                best = (saving, n, got)
            fewest = bands   # a longer chain needs as many bands at least
            break   # the fewest bands that fit: more only add halo and commands
        else:
            break   # no band count fits: nor will it with more runs
    return None if best is None else (best[1], best[2])


def band_commands(program: Program, info: DeviceInfo) -> Program:
    """``program`` with each chain of commands on an input of at most 8 channels run in
    column bands where that is predicted faster (module docstring); everything else, and
    every result bit, unchanged."""
    readers, pinned = readers_and_pinned(program)

    def at(cmds: list[HwCmd], i: int) -> Rewrite | None:
        first = cmds[i]
        if first.c > 8 or not _plain(first):
            return None
        run = [first]
        while i + len(run) < len(cmds) and _links(run[-1], cmds[i + len(run)], readers,
                                                   pinned):
            run.append(cmds[i + len(run)])
        got = _best(run, info)
        return None if got is None else (got[0], got[1].commands, got[1].device,
                                         got[1].aliases)

    return rewrite_commands(program, at)
