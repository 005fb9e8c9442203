"""Per-command profile of a loaded network (``net.profile()``, ``dvsdk-run --profile``).

Every hardware command runs as its own command list, so its cycles (predicted on
the simulator), time, bytes moved and MAC utilization can be attributed.  CPU ops
run in between exactly as in a normal run; each also gets its time on the board's
Cortex-A53 as :mod:`.board_model` predicts it (for the path a normal run takes).
:func:`format_profile` ends with a normal run end to end on the board, predicted: the
device, the CPU's work and the cache syncs.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import numpy as np

from ..cpu import ops as cpu_ops
from ..driver.cmdlist import CommandList
from ..driver.commands import ConvCommand
from ..hw import dims
from . import board_model, cpusteps
from .handle import Run, RunStats


def command_macs(cmd: ConvCommand) -> int:
    """Multiply-accumulates the command's conv runs perform (per sample)."""
    total = 0
    for run, (shape, _) in zip(cmd.runs, dims.run_shapes(cmd, cmd.runs)):
        if run.conv_enable:
            (tw, th, _, _), _ = dims.run_output_shape(replace(run, pool_enable=0), shape)
            cin = 1 if run.depthwise else shape[3]
            total += tw * th * run.m * cin * run.kx * run.ky
    return total * cmd.batch


def _describe(cmd: ConvCommand) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(H, W, C) in and out (``dims.command_output_shape``: runs walked as §4.1 says)."""
    return (cmd.h, cmd.w, cmd.c), dims.command_output_shape(cmd, cmd.runs)


def default_input(net: Any) -> dict[str, np.ndarray]:
    """What the profile runs without an input: the golden input, else zeros."""
    gold = net.meta.get("golden")
    if gold:
        return {n: net.file.array(e, "GOLD") for n, e in gold["inputs"].items()}
    return {i["name"]: np.zeros(i["shape"], np.float32) for i in net.inputs}


def _board_work(net: Any, index: int, op_type: str, attrs: dict, args: list,
                results: list, host: Any = ()) -> dict[str, Any]:
    """What CPU step ``index`` does as a normal run runs it (the compiled FP16 path where
    that run takes it: cpusteps.step's test, ``host`` the tensors the run's host holds
    before the step), for :mod:`.board_model`."""
    if net.cpu_steps == "device":
        plan = cpusteps.runnable_plan(net, index, host)
        if plan is not None:
            return cpusteps.plan_work(plan)
    work = board_model.step_work(op_type, attrs, args, results)
    if net.cpu_steps == "device" and net._segments[index].start == index:
        work["enters"] = True  # (as cpusteps records it: the segment's set-up)
    return work


def profile_net(net: Any, x: Any | None = None) -> list[dict[str, Any]]:
    if x is None:
        x = default_input(net)
    while net._pending:
        net._pending[0].wait()
    ctx = net._contexts[0]
    if not hasattr(ctx, "single"):
        ctx.single = []
        for cmd in ctx.commands:
            cl = CommandList(net.device)
            cl.add(cmd)
            cl.commit()
            net._lists.append(cl)
            ctx.single.append(cl)
    info = net.device.info()
    h = Run(net, ctx, 10.0)
    for name, arr in net._feeds(x).items():
        h.host[name] = arr
        if net._dev(name) is not None:
            net._upload(ctx, name, arr, h.stats)
    rows: list[dict[str, Any]] = []
    program = net.meta["program"]
    for index, (step_meta, (kind, payload)) in enumerate(zip(program, net.steps)):
        if kind != "hw":
            op_type, attrs, inputs, outputs, name = payload
            held = set(h.host)  # (before _value reads the operands into it)
            args = [net._value(h, i) if i else None for i in inputs]
            t0 = time.perf_counter()
            with np.errstate(all="ignore"):  # FP16 infs from the device are values here
                results = cpu_ops.run_op(op_type, args, attrs)
            us = (time.perf_counter() - t0) * 1e6
            work = _board_work(net, index, op_type, attrs, args, results, held)
            for out, val in zip(outputs, results):
                if out:
                    h.host[out] = np.asarray(val)
                    if net._dev(out) is not None:
                        net._upload(ctx, out, h.host[out], h.stats)
            rows.append({"index": len(rows), "where": "cpu", "sources": [name],
                         "kind": op_type, "us": us, "cycles": None,
                         "board_us": board_model.event_us("cpu", work), "board_work": work})
            continue
        start, count = step_meta["commands"]
        kinds = step_meta.get("runs", [""] * count)
        sources = step_meta.get("command_sources", [[]] * count)
        for k in range(count):
            cmd, cl = ctx.commands[start + k], ctx.single[start + k]
            t0 = time.perf_counter()
            us = cl.run()
            wall = (time.perf_counter() - t0) * 1e6
            ins, outs = _describe(cmd)
            macs = command_macs(cmd)
            cyc = cl.last.cycles
            util = macs / (cyc * info.mac_num) if cyc and info.mac_num else None
            tiles = dims.command_tiles(cmd, cmd.runs, info.ub_size)
            rows.append({
                "index": len(rows), "where": "hw", "segment": step_meta.get("name"),
                "sources": sources[k] if k < len(sources) else [],
                "kind": kinds[k] if k < len(kinds) else "", "input": ins, "output": outs,
                "runs": cmd.num_runs, "batch": cmd.batch, "cycles": cyc, "us": us,
                "wall_us": wall,
                "macs": macs, "mac_util": util, "tiles": tiles,
                "bytes": cl.last.input_bytes + cl.last.weight_bytes + cl.last.output_bytes,
            })
        h.host = {t: v for t, v in h.host.items() if net._dev(t) is None}
    return rows


def short_names(names: list[str], width: int = 32) -> list[str]:
    """Op names short enough for a table column, still telling the rows apart.

    Framework exports name ops by scope path, each scope repeating its parent's name
    (torch: ``/blocks/blocks.0/block/block.3/Conv``).  A scope that the next one
    extends (``blocks`` before ``blocks.0``) is dropped, then the leading scopes all
    names share; what is still longer than ``width`` keeps its first scope and its tail
    (``net/...block.3/Conv``): ``blocks.0/block.3/Conv``."""
    split = []
    for name in names:
        parts = [p for p in name.split("/") if p]
        split.append([p for i, p in enumerate(parts)
                      if not (i + 1 < len(parts) and parts[i + 1].startswith(p + "."))])
    common = 0
    if split and all(len(p) > 1 for p in split):
        shortest = min(len(p) for p in split) - 1
        while common < shortest and len({tuple(p[: common + 1]) for p in split}) == 1:
            common += 1
    out = []
    for parts in split:
        short = "/".join(parts[common:])
        if len(short) > width:
            head = parts[common] + "/" if len(parts) - common > 1 else ""
            head = head if len(head) <= width // 2 else ""
            short = head + "..." + short[-(width - 3 - len(head)):]
        out.append(short)
    return out


def format_profile(rows: list[dict[str, Any]], peak_macs: int, run: RunStats | None = None,
                   clock_mhz: float | None = None) -> str:
    """The profile table; with ``run`` (a normal run of the same input), that run on the
    board, predicted, and what this machine measured of it."""
    names = short_names([r["sources"][0] if r["sources"] else "" for r in rows])
    labels = [f"{n} {r['kind']}".strip() for n, r in zip(names, rows)]
    w = min(max([len("op / run"), *map(len, labels)]), 64)
    lines = [f"{'#':>3s} {'where':5s} {'op / run':{w}s} {'in HxWxC':>13s} {'out HxWxC':>13s} "
             f"{'cycles':>9s} {'us':>9s} {'MAC util':>8s} {'bytes':>9s} {'tiles':>5s} "
             f"{'board us':>9s}"]
    for r, label in zip(rows, labels):
        label = label if len(label) <= w else label[: w - 3] + "..."
        if r["where"] == "cpu":
            board = r.get("board_us")
            shown = f"{board:9.1f}" if board is not None else f"{'-':>9s}"
            lines.append(f"{r['index']:3d} cpu   {label:{w}s} {'':>13s} {'':>13s} {'':>9s} "
                         f"{r['us']:9.1f} {'':>8s} {'':>9s} {'':>5s} {shown}")
            continue
        fmt = "x".join
        util = f"{r['mac_util']:.0%}" if r["mac_util"] is not None else "-"
        lines.append(f"{r['index']:3d} hw    {label:{w}s} {fmt(map(str, r['input'])):>13s} "
                     f"{fmt(map(str, r['output'])):>13s} {r['cycles'] or 0:9d} "
                     f"{r['us']:9.1f} {util:>8s} {r['bytes']:9d} {r['tiles']:5d}")
    hw = [r for r in rows if r["where"] == "hw"]
    tot_c = sum(r["cycles"] or 0 for r in hw)
    tot_m = sum(r["macs"] for r in hw)
    lines.append(f"total: {len(hw)} commands, {tot_c} cycles, {sum(r['us'] for r in hw):.1f} us "
                 f"device, MAC utilization {tot_m / max(tot_c * peak_macs, 1):.0%} of the "
                 f"{peak_macs}-MAC peak")
    n = max((r.get("batch", 1) for r in hw), default=1)
    if n > 1:  # (in/out shapes and bytes above are per command: per sample x the batch)
        lines.append(f"batch of {n} samples a command: "
                     f"{sum(r['us'] for r in hw) / n:.1f} us device per sample")
    if run is not None:
        lines += board_lines(run, clock_mhz, profile=True)
    return "\n".join(lines)


def board_lines(run: RunStats, clock_mhz: float | None, profile: bool = False) -> list[str]:
    """A run on the board, predicted (the three parts, labelled), and what this machine
    measured of it."""
    b = run.board
    sim = run.device_predicted
    clock = f" at {clock_mhz:g} MHz" if clock_mhz else ""
    lines = []
    if profile:
        dev = (f"the device's, predicted by the simulator's cycle model{clock}" if sim else
               "the device's, measured")
        lines.append(f"us: hw rows {dev}; cpu rows this machine's, measured; board us: the "
                     f"CPU step on one Cortex-A53 at {b.cpu_mhz:g} MHz, predicted "
                     "(dvsdk/runtime/board_model.py)")
    head, *parts = b.lines()
    lines += [f"on the board, predicted: {head}", *parts]
    where = "this host" if sim else "this board"
    lines.append(f"measured on {where}, the same run: CPU steps {run.cpu_us:.1f} us, "
                 f"pack/unpack {run.pack_us + run.unpack_us:.1f} us, syncs {run.sync_us:.1f} "
                 f"us, {run.total_us:.1f} us in all"
                 + (" (simulating the device included)" if sim else ""))
    return lines
