"""What lowering produces: DV700 commands over symbolic tensors, CPU steps, the program.

Shared by the lowering passes (:mod:`.lower`, :mod:`.lower_ops`, :mod:`.multirun`), the
memory plan (:mod:`.memplan`) and the net.bin builder (:mod:`.build`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from ..driver.commands import BufferRef, ConvCommand, ConvRun
from ..driver.device import DeviceInfo
from ..driver.validate import validate_conv
from ..hw import dims
from ..hw.timing import DEFAULT_PARAMS, run_cycles
from .hwmap import NoMapping
from .ir import Graph, Op


@dataclass
class HwCmd:
    """A conv command over symbolic tensors; ``blobs[i]`` are run i's packed weights.

    ``batch`` is the number of samples of its input, output and element-wise operand (the
    tensors' N, back to back in DRAM): the command runs once per sample, §4.10."""

    input: str
    output: str
    w: int
    h: int
    c: int
    runs: list[ConvRun]
    blobs: list[bytes | None]
    eltwise: str | None = None
    topo: int = 1
    sources: list[str] = field(default_factory=list)
    kind: str = ""
    batch: int = 1

    def command(self, place: dict[str, BufferRef], weights: list[BufferRef | None]) -> ConvCommand:
        runs = [replace(r, weight_buf=wb) if wb is not None else r
                for r, wb in zip(self.runs, weights)]
        return ConvCommand(input_buf=place[self.input], output_buf=place[self.output],
                           eltwise_buf=place[self.eltwise] if self.eltwise else BufferRef(),
                           w=self.w, h=self.h, c=self.c, runs=runs, topo=self.topo,
                           output_mode=1 if self.eltwise else 0,
                           input_circular_offset=self.batch)


class _FakeBuffer:
    """A huge, aligned stand-in so validation checks shapes before the memory plan: all of
    the 32-bit DMA space above it (§6.8), so a batch too large for that is refused."""

    def __init__(self, phys: int) -> None:
        self.phys, self.size, self.freed, self.name = phys, (1 << 32) - phys, False, "plan"


_FAKE = BufferRef(_FakeBuffer(0x1000_0000), 0)


def validate_cmd(cmd: HwCmd, info: DeviceInfo) -> None:
    """The driver's own validation (§6) of ``cmd`` with stand-in buffers (InvalidCommand
    when the device described by ``info`` would reject it)."""
    place = {cmd.input: _FAKE, cmd.output: _FAKE}
    if cmd.eltwise:
        place[cmd.eltwise] = _FAKE
    validate_conv(cmd.command(place, [_FAKE if b else None for b in cmd.blobs]), info)


@dataclass
class CpuStep:
    op: Op


@dataclass
class HwStep:
    commands: list[HwCmd] = field(default_factory=list)


def unit_io(unit: HwCmd | CpuStep) -> tuple[list[str], list[str]]:
    """(tensors read, tensors written) of one command or CPU step: a command reads its
    input and element-wise operand and writes its output."""
    if isinstance(unit, HwCmd):
        return [unit.input] + ([unit.eltwise] if unit.eltwise else []), [unit.output]
    return [i for i in unit.op.inputs if i], [o for o in unit.op.outputs if o]


def readers_and_pinned(program: Program) -> tuple[Counter[str], set[str]]:
    """How many commands and CPU steps read each tensor, and the tensors a pass that drops
    or splits a tensor must leave alone: the graph's outputs, views and what they view."""
    readers: Counter[str] = Counter()
    for step in program.steps:
        for unit in step.commands if isinstance(step, HwStep) else [step]:
            readers.update(unit_io(unit)[0])
    pinned = set(program.graph.outputs) | set(program.aliases)
    pinned |= {base for base, _ in program.aliases.values()}
    return readers, pinned


#: A rewrite of the commands at one place: (commands taken, commands in their place, their
#: new device tensors, their new aliases); see :func:`rewrite_commands`
Rewrite = tuple[int, list[HwCmd], dict[str, tuple[int, int, int]], dict[str, tuple[str, int]]]


def rewrite_commands(program: Program, at: Callable[[list[HwCmd], int], Rewrite | None]
                     ) -> Program:
    """``program`` with each hw step's commands rewritten where ``at(commands, i)`` says:
    the ``taken`` commands from ``i`` are replaced, and the tensors between them leave the
    arena.  A rewrite whose new tensors have a name the program has already (the model's
    own names are free text, and one could read as a part's, :mod:`dvsdk.runtime.views`)
    is not taken."""
    device, aliases = dict(program.device), dict(program.aliases)
    steps: list[HwStep | CpuStep] = []
    for step in program.steps:
        if not isinstance(step, HwStep):
            steps.append(step)
            continue
        out: list[HwCmd] = []
        cmds, i = step.commands, 0
        while i < len(cmds):
            got = at(cmds, i)
            if got is None or any(n in device or n in program.graph.tensors for n in got[2]):
                out.append(cmds[i])
                i += 1
                continue
            taken, new, dev, al = got
            out += new
            for c in cmds[i:i + taken - 1]:
                device.pop(c.output, None)
            device.update(dev)
            aliases.update(al)
            i += taken
        steps.append(HwStep(out))
    return Program(program.graph, steps, device, aliases, program.report, program.samples)


def as_steps(units: Iterable[HwCmd | CpuStep]) -> list[HwStep | CpuStep]:
    """Commands and CPU steps in order as program steps: each run of consecutive commands
    one :class:`HwStep`."""
    steps: list[HwStep | CpuStep] = []
    for u in units:
        if isinstance(u, CpuStep):
            steps.append(u)
        elif steps and isinstance(steps[-1], HwStep):
            steps[-1].commands.append(u)
        else:
            steps.append(HwStep([u]))
    return steps


@dataclass
class Program:
    graph: Graph
    steps: list[HwStep | CpuStep]
    device: dict[str, tuple[int, int, int]]        # tensors with an arena slot: (H, W, C)
    aliases: dict[str, tuple[str, int]]            # tensor -> (base tensor, byte offset)
    report: list[dict]
    #: device tensor -> its samples N (absent: 1), back to back in its slot (§1)
    samples: dict[str, int] = field(default_factory=dict)

    def nbytes(self, name: str) -> int:
        """Bytes of device tensor ``name`` in the arena: N samples of (H, W, C) FP16."""
        h, w, c = self.device[name]
        return self.samples.get(name, 1) * h * w * c * 2


def out_hwc(cmd: HwCmd) -> tuple[int, int, int]:
    """(H, W, C) of a command's output: runs with topo bit 1 are appended (§4.1)."""
    shapes = dims.run_shapes(cmd, cmd.runs)
    outs = {(oh, ow) for k, (_, (ow, oh, _, _)) in enumerate(shapes) if cmd.topo >> k & 1}
    if len(outs) > 1:
        raise NoMapping("branch outputs differ in size")
    return dims.command_output_shape(cmd, cmd.runs)


def cmd_cycles(cmd: HwCmd, ub_size: int) -> int:
    """Predicted cycles of one command on a unified buffer of ``ub_size`` bytes (the
    simulator's model, ``dvsdk/hw/timing.py``)."""
    shapes = dims.run_shapes(cmd, cmd.runs)
    tiles = dims.command_tiles(cmd, cmd.runs, ub_size) if len(cmd.runs) == 1 else 1
    elt = 0
    if cmd.eltwise:
        ew, eh, _, ec = dims.eltwise_shape(cmd.runs[0], (cmd.w, cmd.h, 1, cmd.c))
        elt = ew * eh * ec * 2
    total, topo = [], cmd.topo
    for i, (run, (shp_in, shp_out)) in enumerate(zip(cmd.runs, shapes)):
        in_ubuf = i > 0 and not topo >> (i - 1) & 1
        wsize = dims.run_weight_size(run, shp_in[3]) if run.conv_enable else 0
        t, _ = run_cycles(run, shp_in, shp_out, tiles, wsize, in_ubuf, not topo >> i & 1,
                          elt if i == 0 else 0)
        total.append(t)
    return DEFAULT_PARAMS.command_overhead + cmd.batch * sum(t.total_cycles for t in total)
