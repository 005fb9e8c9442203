"""Lowering: the optimized graph IR → a program of DV700 commands and CPU ops.

Conv-like ops become runs; following ops fuse into the same run in the hardware's
order ``conv → add → max-pool → activation`` (§4.1), an activation before the
max-pool only when it is monotonic (so it commutes with max).  Every candidate
command is checked with the driver's own validation (§6) against the target's
UBUF; what fails, or has no mapping, runs on the CPU with the reason recorded.
Consecutive hardware commands form one segment (one command list).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..driver.commands import ConvRun
from ..driver.device import DeviceInfo
from ..errors import InvalidCommand, WeightError
from ..hw.weights import pack_conv_weights, pack_dilated_weights, quantize_weights
from . import hwmap
from .bands import band_commands
from .batch import BATCH_REASON
from .chain import chain_commands
from .groups import group_commands
from .hwmap import Act, NoMapping, hwc
from .ir import Graph, Op
from .lower_ops import OpLowerings
from .multirun import MultiRunLowerings
from .program import CpuStep, HwCmd, HwStep, Program, out_hwc, validate_cmd
from .reorder import convs_before_their_adds
from .schedule import schedule
from .table import tabulate

#: Op attribute a graph builder may set (``dvsdk.vx`` does): ``"cpu"`` keeps the op out of
#: DV700 runs (no mapping, no fusion); ``"hw"`` on an ``LRN`` asks for the LRN unit (§4.7),
#: whose piecewise-linear curve the builder has judged accurate enough for the op's input
#: range (``firmware_spec/lrn.md``).  Ops without it are placed as usual (LRN: CPU).
TARGET = "dvsdk_target"


def _entry(op: Op, where: str, detail: str) -> dict:
    """One ``--report`` line: the op, where it runs and why (and its source layer)."""
    e = {"op": op.name, "type": op.type, "where": where, "detail": detail}
    if op.origin:
        e["source"] = op.origin
    return e


class Lowering(OpLowerings, MultiRunLowerings):
    def __init__(self, graph: Graph, info: DeviceInfo, quantize: bool | frozenset = False,
                 multirun: bool = True) -> None:
        self.g = graph
        self.info = info
        #: True: every weight run 8-bit; a set: only the runs of these ops (--quantize-skip)
        self.quantize = quantize
        self.multirun = multirun
        self.cons = graph.consumers()
        self.prod = graph.producers()
        self.order = {op.name: i for i, op in enumerate(graph.ops)}
        self.done: set[str] = set()
        self.steps: list[HwStep | CpuStep] = []
        self.device: dict[str, tuple[int, int, int]] = {}
        self.aliases: dict[str, tuple[str, int]] = {}
        self.split_parts: dict[str, Op] = {}  # a Split's output (a view) -> the Split
        self.report: list[dict] = []
        self.deferred: dict[str, Op] = {}  # view output -> view op a Gemm may absorb
        self.emit_sink: list[HwCmd] | None = None
        self.written: set[str] = set()  # tensors hardware commands (or placements) produce
        #: zero-copy placements (concats, free views): (op, the tensors that fill the slot,
        #: every tensor of the group, where in the program it was lowered)
        self.placements: list[tuple[Op, list[str], list[str], tuple[int, int | None]]] = []

    # -- helpers ------------------------------------------------------------------------
    def shape(self, name: str) -> tuple[int, ...]:
        s = self.g.shape(name)
        if s is None:
            raise NoMapping(f"shape of {name} unknown")
        return s

    def dev_shape(self, name: str) -> tuple[int, int, int]:
        """(H, W, C) of one sample of a tensor that may live on the device."""
        d = hwc(self.shape(name))
        if d is None or self.g.is_const(name):
            raise NoMapping(f"{name} {self.shape(name)} cannot live on the device (rank 2 "
                            "or 4 only)")
        self.check_float(name)
        return d

    def samples(self, name: str) -> int:
        """N of a device tensor (N, C, H, W) or (N, C)."""
        return hwmap.samples(self.shape(name))

    def set_batch(self, cmd: HwCmd) -> None:
        """``cmd.batch``: the samples of its input, which its output and element-wise operand
        must share (each sample is one pass of the command over one sample of each, §4.10;
        the add's operand is per sample too, §4.4)."""
        n = self.samples(cmd.input)
        for t in (cmd.output, cmd.eltwise):
            if t and self.samples(t) != n:
                raise NoMapping(f"{BATCH_REASON}{t} has {self.samples(t)} samples, the "
                                f"command's input {cmd.input} {n}: a command runs sample "
                                "by sample")
        cmd.batch = n

    def check_float(self, name: str) -> None:
        """The DV700 computes in FP16: only float32 tensors may go to or come from it."""
        dt = self.g.tensors[name].dtype
        if dt != np.float32:
            raise NoMapping(f"{name} is {dt}: the DV700 computes float (FP16) tensors only")

    def single_consumer(self, name: str) -> Op | None:
        users = self.cons.get(name, [])
        if len(users) != 1 or name in self.g.outputs or users[0].attrs.get(TARGET) == "cpu":
            return None
        return users[0] if users[0].name not in self.done else None

    def quantizes(self, op: Op) -> bool:
        """Whether ``op``'s weights are packed 8-bit."""
        return self.quantize is True or (bool(self.quantize) and op.name in self.quantize)

    def _pack(self, w: np.ndarray, b: np.ndarray, prelu: np.ndarray | None = None,
              dilated: bool = False, quantizable: bool = True) -> tuple[bytes, int]:
        """Pack a run's weights; 8-bit when quantizing, except PReLU runs (§6.1 m) and
        weights the model does not have (per-channel affine runs) which stay FP16.  Weights
        FP16 cannot hold (beyond 65504) keep the op on the CPU."""
        try:
            if quantizable and self.quantize is not False and prelu is None:
                table, idx = quantize_weights(w)
                blob = (pack_dilated_weights(idx, b, table=table) if dilated
                        else pack_conv_weights(idx, b, table=table))
                return blob, 3
            blob = (pack_dilated_weights(w, b) if dilated
                    else pack_conv_weights(w, b, prelu=prelu))
        except WeightError as e:
            raise NoMapping(f"weights cannot be packed for the DV700: {e}") from None
        return blob, 1

    def check(self, cmd: HwCmd) -> None:
        """The driver's own validation (§6) with stand-in buffers, for the command's batch."""
        self.set_batch(cmd)
        try:
            validate_cmd(cmd, self.info)
        except InvalidCommand as e:
            raise NoMapping(f"rejected by DV700 validation: {e}") from None

    # -- walking ------------------------------------------------------------------------
    def run(self) -> Program:

        groups = self.find_groups() if self.multirun else {}
        for op in self.g.ops:
            if op.name in self.done:
                continue
            group = groups.get(op.name)
            if group is not None and self.lower_group(group):
                continue
            try:
                handled = self.lower_op(op)
            except NoMapping as e:
                handled, reason = False, str(e)
            else:
                reason = ""
            if not handled:
                for name in op.inputs:  # a view deferred for this op must run first
                    view = self.deferred.pop(name, None)
                    if view is not None:
                        self.report[:] = [r for r in self.report if r["op"] != view.name]
                        self.cpu(view, "its Gemm consumer runs on the CPU")
                self.cpu(op, reason or f"{op.type} has no hardware mapping")
        self.settle_placements()
        for step in self.steps:
            if isinstance(step, HwStep):
                for cmd in step.commands:
                    for t in (cmd.input, cmd.output, cmd.eltwise):
                        if t:
                            self.device[t] = self.dev_shape(t)
        for name, (base, _) in self.aliases.items():
            self.device.setdefault(base, self.dev_shape(base))
            self.device[name] = self.dev_shape(name)
        samples = {t: self.samples(t) for t in self.device if self.samples(t) != 1}
        return Program(self.g, self.steps, self.device, self.aliases, self.report, samples)

    def position(self) -> tuple[int, int | None]:
        """Where the program is now: the step count, and the commands in the last step if
        it is a hardware step (see :meth:`insert_cpu`)."""
        last = self.steps[-1] if self.steps else None
        return len(self.steps), (len(last.commands) if isinstance(last, HwStep) else None)

    def insert_cpu(self, pos: tuple[int, int | None], op: Op) -> None:
        """Put a CPU step for ``op`` where :meth:`position` was taken, splitting the
        hardware step that has grown since."""
        k, n = pos
        hw = self.steps[k - 1] if n is not None else None
        if hw is None or len(hw.commands) == n:
            self.steps.insert(k, CpuStep(op))
            return
        tail = HwStep(hw.commands[n:])
        hw.commands = hw.commands[:n]
        self.steps[k:k] = [CpuStep(op), tail]

    def settle_placements(self) -> None:
        """A zero-copy placement (a concat's members in its output's slot, a free view in
        its input's) is worth it when DV700 commands write what fills the slot or read
        some tensor of the group.  One that only the CPU makes and reads would move CPU
        data through the arena for nothing (and leave placements no command touches): it
        runs on the CPU instead."""
        read = {t for s in self.steps if isinstance(s, HwStep) for c in s.commands
                for t in (c.input, c.eltwise) if t}
        for op, fill, group, pos in sorted(self.placements, key=lambda p: p[3],
                                           reverse=True):
            alias = [n for n in group if self.aliases.get(n, (None,))[0] in group]
            others = {n for n, (b, _) in self.aliases.items() if b in group} - set(alias)
            if read & set(group) or others or all(t in self.written for t in fill) \
                    or any(t in self.aliases and t not in alias for t in group):
                continue
            for n in alias:
                del self.aliases[n]
            self.written.discard(op.outputs[0])
            self.report[:] = [_entry(op, "cpu", "CPU results no DV700 command reads")
                              if r["op"] == op.name else r for r in self.report]
            self.insert_cpu(pos, op)

    def emit(self, cmd: HwCmd) -> None:
        if self.emit_sink is not None:  # a dry run (multirun.lower_group) collects
            self.emit_sink.append(cmd)
            return
        self.set_batch(cmd)
        self.written.add(cmd.output)
        if not self.steps or not isinstance(self.steps[-1], HwStep):
            self.steps.append(HwStep())
        self.steps[-1].commands.append(cmd)
        for name in cmd.sources:
            self.done.add(name)
            self.report.append(_entry(self.g.op_by_name(name), "hw", cmd.kind))

    def cpu(self, op: Op, reason: str) -> None:
        self.done.add(op.name)
        self.steps.append(CpuStep(op))
        self.report.append(_entry(op, "cpu", reason))

    def note(self, op: Op, where: str, detail: str) -> None:
        self.done.add(op.name)
        self.report.append(_entry(op, where, detail))

    def lower_op(self, op: Op) -> bool:
        target = op.attrs.get(TARGET)
        if target == "cpu":
            raise NoMapping("placed on the CPU by its graph (target CPU)")
        for name in op.inputs + op.outputs:
            if name and not self.g.is_const(name):
                self.check_float(name)
        t = op.type
        if t == "LRN" and target == "hw":
            return self.lower_lrn(op)
        if t in ("Conv", "ConvTranspose"):
            return self.lower_conv(op)
        if t == "Gemm":
            return self.lower_gemm(op)
        if t == "MaxPool":
            return self.lower_maxpool(op)
        if t in ("AveragePool", "GlobalAveragePool"):
            return self.lower_avgpool(op)
        if t == "GlobalMaxPool":
            return self.lower_global_max(op)
        if t in ("Add", "Sub", "Mul", "Div", "BatchNormalization"):
            return self.lower_elementwise(op)
        if t in hwmap.ACTIVATIONS:
            return self.lower_activation(op)
        if t in ("Resize", "Upsample"):
            return self.lower_upsample(op)
        if t in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            return self.lower_view(op)
        if t == "Concat":
            return self.lower_concat(op)
        if t == "Split":
            return self.lower_split(op)
        return False

    # -- fusion tail: [add] -> [max-pool] -> [activation] -> [abs] ----------------------
    def fuse_tail(self, run: ConvRun, out: str, channels: int, allow_add: bool,
                  allow_pool: bool, before: int) -> tuple[ConvRun, str, list[str], str | None,
                                                          Act | None]:
        fused: list[str] = []
        eltwise = None
        act: Act | None = None
        stage = 0  # 1 add, 2 pool, 3 act, 4 abs
        while True:
            nxt = self.single_consumer(out)
            if nxt is None:
                break
            try:
                if stage < 1 and allow_add and nxt.type == "Add" and not any(
                        self.g.is_const(i) for i in nxt.inputs):
                    other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
                    if self.g.shape(other) != self.g.shape(out) or other == out:
                        break
                    p = self.prod.get(other)
                    if p is not None and self.order[p.name] >= before:
                        break
                    self.dev_shape(other)
                    eltwise, stage = other, 1
                elif (stage < 2 or (stage == 3 and act is not None and act.monotonic
                                    and run.pool_enable == 0)) and allow_pool \
                        and nxt.type == "MaxPool":
                    run = self.maxpool_fields(run, nxt, self.shape(out))
                    stage = max(stage, 2)
                elif stage < 3 and nxt.type in hwmap.ACTIVATIONS:
                    act = hwmap.activation(nxt, self.g, channels)
                    stage = 3
                elif stage == 3 and nxt.type == "Abs":
                    run = replace(run, rectifi_en=1)
                    stage = 4
                else:
                    break
            except NoMapping:
                break
            fused.append(nxt.name)
            out = nxt.outputs[0]
        if act is not None:
            run = replace(run, actfunc=act.code, actfunc_param=hwmap.fp16_param(act.param))
        return run, out, fused, eltwise, act

    def maxpool_fields(self, run: ConvRun, op: Op, in_shape: tuple[int, ...]) -> ConvRun:
        (kx, ky), (sx, sy), (dx, dy) = hwmap.window(op)
        if (dx, dy) != (1, 1) or op.attrs.get("storage_order", 0):
            raise NoMapping("dilated max-pool")
        if not (2 <= kx <= 3 and 1 <= ky <= 3):
            raise NoMapping(f"max-pool window {kx}x{ky} outside 2..3 x 1..3")
        l, r, t, b = hwmap.pads_lrtb(op)
        _, _, h, w = in_shape
        oh, ow = self.shape(op.outputs[0])[2:]
        r += hwmap.extra_pad(w, kx, l, r, sx, ow)
        b += hwmap.extra_pad(h, ky, t, b, sy, oh)
        hwmap.check_pads((l, r, t, b), "max-pool", seven_bit=False)
        if max(sx, sy) > 255:
            raise NoMapping("pool stride too large")
        mk = ConvRun.make(pool="max", pool_size=(kx, ky), pool_stride=(sx, sy),
                          pool_pads=(l, r, t, b))
        return replace(run, pool_enable=mk.pool_enable, pool_size=mk.pool_size,
                       pool_stride=mk.pool_stride, pool_pad=mk.pool_pad)

    def _finish(self, cmd: HwCmd, act: Act | None) -> bool:
        if act is not None and act.prelu is not None:
            if cmd.runs[0].conv_enable == 0:
                raise NoMapping("PReLU needs a conv run")
        want = self.shape(cmd.output)
        self.check(cmd)
        got = out_hwc(cmd)
        if hwc(want) != got:
            raise NoMapping(f"hardware output {got} differs from the model's {hwc(want)}")
        self.emit(cmd)
        return True

    def lower_lrn(self, op: Op) -> bool:
        """§4.7: the LRN unit is Caffe's LRN with n=5, alpha=1e-4, beta=0.75, k=1 as a
        piecewise-linear curve, a standalone run on C % 16 == 0 channels."""
        a = op.attrs
        want = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}
        got = {"size": int(a.get("size", 0)), "alpha": float(a.get("alpha", 1e-4)),
               "beta": float(a.get("beta", 0.75)), "bias": float(a.get("bias", 1.0))}
        if any(not np.isclose(got[k], v, rtol=1e-6, atol=0) for k, v in want.items()):
            raise NoMapping(f"the LRN unit has fixed parameters {want}; this LRN has {got}")
        x = op.inputs[0]
        h, w, c = self.dev_shape(x)
        if c % 16:
            raise NoMapping(f"the LRN unit needs C % 16 == 0; C = {c}")
        cmd = HwCmd(x, op.outputs[0], w, h, c, [ConvRun.make(c, lrn=True)], [None], None, 1,
                    [op.name], "LRN (piecewise linear)")
        return self._finish(cmd, None)

    # -- conv / deconv ------------------------------------------------------------------
    def lower_conv(self, op: Op) -> bool:
        x, wname = op.inputs[0], op.input(1)
        w = self.g.const(wname)
        if w is None:
            raise NoMapping("conv weights are not constant")
        bias = self.g.const(op.input(2))
        h, wd, c = self.dev_shape(x)
        (kx, ky), (sx, sy), (dx, dy) = hwmap.window(op)
        group = int(op.attrs.get("group", 1))
        deconv = op.type == "ConvTranspose"
        w = np.asarray(w, np.float32)
        if deconv:
            m = w.shape[1] * group
            if group == 1:
                wk = w.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
            elif group == c == m:
                wk = w[:, :, ::-1, ::-1]
            else:
                raise NoMapping("grouped transposed conv")
        else:
            m = w.shape[0]
            wk = w
        depthwise = group > 1
        if depthwise and not (group == c == m):
            raise NoMapping(f"grouped conv with group {group} (not depthwise)")
        if max(kx, ky) > 7:
            raise NoMapping(f"kernel {kx}x{ky} larger than 7x7")
        b = np.zeros(m, np.float32) if bias is None else np.asarray(bias, np.float32)
        pads = hwmap.pads_lrtb(op)
        if deconv:
            if (dx, dy) != (1, 1):
                raise NoMapping("dilated transposed conv")
            opad = [int(v) for v in op.attrs.get("output_padding", [0, 0])]
            l, r, t, bt = pads
            pads = (kx - 1 - l, kx - 1 - r + opad[1], ky - 1 - t, ky - 1 - bt + opad[0])
        hwmap.check_pads(pads, "conv")
        dilated = max(dx, dy) > 1
        if dilated and depthwise:
            # the dilated weight stream (reference §8.2) has no depthwise form; packed anyway,
            # the device rejects the command (bad_config) at run time
            raise NoMapping("dilated depthwise conv: the dilated weight format has no "
                            "depthwise form")
        # activation first, so PReLU slopes can be packed with the weights
        probe, out, fused, eltwise, act = self.fuse_tail(
            ConvRun(pool_stride=0x0101), op.outputs[0], m, allow_add=not dilated,
            allow_pool=not dilated, before=self.order[op.name])
        prelu = act.prelu if act is not None and act.code == 4 else None
        if prelu is not None and dilated:
            raise NoMapping("PReLU with dilation")
        blob, fmt = self._pack(wk, b, prelu, dilated=dilated, quantizable=self.quantizes(op))
        kind = ("depthwise " if depthwise else "") + ("deconv" if deconv else
                                                       "dilated conv" if dilated else "conv")
        run = replace(probe, m=m, conv_enable=(1 | (2 if depthwise else 0)
                                               | (4 if deconv else 0)),
                      p=kx | ky << 8, pz=1, conv_pad=pads[0] | pads[1] << 8 | pads[2] << 16
                      | pads[3] << 24, conv_stride=sx | sy << 8,
                      conv_dilation=dx | dy << 8, weight_fmt=fmt)
        desc = self._describe(kind, kx, ky, run, eltwise)
        cmd = HwCmd(x, out, wd, h, c, [run], [blob], eltwise, 1, [op.name, *fused], desc)
        try:
            return self._finish(cmd, act)
        except NoMapping:
            if not fused:
                raise
        # retry without fusion
        blob, fmt = self._pack(wk, b, None, dilated=dilated, quantizable=self.quantizes(op))
        run = replace(run, pool_enable=0, pool_size=0, pool_stride=0x0101, pool_pad=0,
                      actfunc=0, actfunc_param=0, rectifi_en=0, weight_fmt=fmt)
        cmd = HwCmd(x, op.outputs[0], wd, h, c, [run], [blob], None, 1, [op.name], kind)
        return self._finish(cmd, None)

    @staticmethod
    def _describe(kind: str, kx: int, ky: int, run: ConvRun, eltwise: str | None) -> str:
        parts = [f"{kind} {kx}x{ky}"]
        if eltwise:
            parts.append("+add")
        if run.pool_enable == 1:
            parts.append(f"+maxpool {run.pool_kernel[0]}x{run.pool_kernel[1]}")
        if run.actfunc:
            parts.append("+" + hwmap.act_words(run.actfunc, run.actfunc_param))
        return " ".join(parts)


def lower(graph: Graph, info: DeviceInfo, quantize: bool | frozenset = False,
          multirun: bool = True, chain: bool = True, tables: bool = True,
          fuse_adds: bool = False, bands: bool = True, groups: bool = True) -> Program:
    """Lower an optimized, shape-inferred graph for a device with ``info``; convs moved to
    just before the Add they feed (``fuse_adds``, :mod:`.reorder`: changes results),
    element-wise tails of device tensors as table lookups (``tables``, :mod:`.table`), the
    steps in an order with few device <-> CPU transitions (:mod:`.schedule`), chained
    commands merged into one (``chain``, :mod:`.chain`), and with it chains on a narrow input
    run in column bands (``bands``, :mod:`.bands`) and a conv with the per-channel runs after
    it in groups of output channels (``groups``, :mod:`.groups`) where that is faster."""
    if fuse_adds:
        graph = convs_before_their_adds(graph)
    program = Lowering(graph, info, quantize, multirun).run()
    if tables:
        program = tabulate(program)
    program = schedule(program)
    if not chain:
        return program
    program = chain_commands(program, info)
    if bands:
        program = band_commands(program, info)
    return group_commands(program, info) if groups else program
