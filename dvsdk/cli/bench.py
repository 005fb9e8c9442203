"""``dvsdk-run --bench N`` / ``-t SECONDS``: where the time of a run goes, stage by stage.

One warm-up run comes first and is not counted.  Each stage (preprocess, pack, sync,
device, unpack, CPU ops, total) is summarized by its mean, min, median, 99th percentile
and max over the runs.  A run of a net compiled for a batch of N (``dvsdk-compile
--batch N``) takes N images: the stages are per batch, and a line more gives the device
and total time per image and the images per second.  On the simulator the device row is
the time predicted at the configured clock (the simulator's own wall time is not the
device's); the host stages are measured, so the total mixes both, and the table says so.
Next to them, the ``board us`` column predicts each stage on the board
(``RunStats.board``: the device time, then the Cortex-A53 model of
:mod:`dvsdk.runtime.board_model` for the CPU's work and the syncs), with its own FPS,
apart from this host's.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict
from typing import Any

import numpy as np

from ..netfile import ProgramShape, program_shape
from ..runtime.board_model import format_us
from .inputs import Job, preprocessed
from .term import Console

STAGES = ("preprocess", "pack", "sync", "device", "unpack", "cpu ops", "total")
COLUMNS = ("mean", "min", "median", "p99", "max")
#: the table's rows as the board's prediction has them (``BoardEstimate`` fields)
BOARD_ROWS = {"pack": "pack_us", "sync": "sync_us", "device": "device_us",
              "unpack": "unpack_us", "cpu ops": "cpu_steps_us", "kick/wait": "kick_us",
              "run": "run_us", "total": "total_us"}


def summarize(values: list[float]) -> dict[str, float]:
    v = np.asarray(values, np.float64)
    return {"mean": statistics.fmean(values), "min": float(v.min()),
            "median": float(np.median(v)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max())}


def bench(net: Any, job: Job, runs: int | None, seconds: float | None,
          console: Console | None = None) -> tuple[dict[str, Any], list]:
    """Run ``job`` ``runs`` times, or for ``seconds``, or until either limit (whichever
    comes first); returns the summary and every run's ``RunStats``."""
    stages: dict[str, list[float]] = {k: [] for k in STAGES}
    stats = []
    t0 = time.perf_counter()
    net.run(preprocessed(net, job))  # warm-up (first-use imports and caches): not counted
    warmup_us = (time.perf_counter() - t0) * 1e6
    start = time.perf_counter()
    while True:
        done = len(stats)
        if runs is not None and done >= runs:
            break
        if seconds is not None and done and time.perf_counter() - start >= seconds:
            break
        t0 = time.perf_counter()
        x = preprocessed(net, job)
        t1 = time.perf_counter()
        net.run(x)
        st = net.last_run
        stats.append(st)
        host = st.total_us - sum(s.wall_us for s in st.segments)
        pre = (t1 - t0) * 1e6 if job.kind == "image" else 0.0
        for key, val in (("preprocess", pre), ("pack", st.pack_us), ("sync", st.sync_us),
                         ("device", st.device_us), ("unpack", st.unpack_us),
                         ("cpu ops", st.cpu_us), ("total", pre + host + st.device_us)):
            stages[key].append(val)
        if console is not None:
            console.step("bench")
    wall = time.perf_counter() - start
    rows = {k: summarize(v) for k, v in stages.items()}
    crossing = cpu_crossings(net.meta)
    host = [st.pack_us + st.sync_us + st.unpack_us for st in stats]
    around = [sum(d for kind, name, _, d, _ in st.events
                  if kind in ("pack", "sync", "unpack") and name in crossing) for st in stats]
    dev = rows["device"]["mean"]
    fps = 1e6 / max(rows["total"]["mean"], 1e-9)
    fps_pipe = 1e6 / max(rows["total"]["mean"] - dev, dev, 1e-9)
    info = net.device.info()
    n = batch_size(net.meta)
    per_image = {"device_us": dev / n, "total_us": rows["total"]["mean"] / n,
                 "images_per_s": fps * n}
    boards = [st.board.as_dict() for st in stats]
    board = {k: statistics.fmean(b[k] for b in boards) if isinstance(v, (int, float))
             and not isinstance(v, bool) else v for k, v in boards[0].items()}
    return {"input": job.name, "runs": len(stats), "seconds": wall, "warmup_us": warmup_us,
            "board": board, "stages": rows, "batch": n, "per_image": per_image,
            "fps": fps, "fps_double_buffered": fps_pipe,
            "program": asdict(program_shape(net.meta)),
            "cpu_us": rows["cpu ops"]["median"], "transfer_us": float(np.median(host)),
            "transfer_around_cpu_us": float(np.median(around)),
            "device_time": "predicted" if info.simulated else "measured",
            "clock_mhz": info.conv_freq}, stats


def batch_size(meta: dict[str, Any]) -> int:
    """Images one run takes: the leading dimension of the first input (rank 2 or more)."""
    shape = meta["inputs"][0]["shape"] if meta["inputs"] else []
    return int(shape[0]) if len(shape) >= 2 and shape[0] >= 1 else 1


def cpu_crossings(meta: dict[str, Any]) -> set[str]:
    """Device tensors a CPU step reads (downloaded for it) or writes (uploaded after it);
    graph inputs are not counted (every run uploads them anyway)."""
    inputs = {i["tensor"] for i in meta["inputs"]}
    names = {n for s in meta["program"] if s["kind"] == "cpu"
             for n in s["inputs"] + s["outputs"] if n}
    return {n for n in names - inputs if meta["tensors"].get(n, {}).get("device")}


def format_bench(res: dict[str, Any]) -> str:
    sim = res["device_time"] == "predicted"
    head = f"{'stage':12s}" + "".join(f" {c + ' us':>10s}" for c in COLUMNS) + f" {'board us':>10s}"
    lines = [f"benchmark: {res['input']}, {res['runs']} runs in {res['seconds']:.2f} s after "
             f"one warm-up run ({res['warmup_us'] / 1e3:.1f} ms, not counted)", head]
    board = res["board"]
    rows = [k for k in res["stages"] if k != "total"] + ["kick/wait", "run", "total"]
    for k in rows:
        r = res["stages"].get(k)
        cells = ("".join(f" {r[c]:10.1f}" for c in COLUMNS) if r is not None
                 else "".join(f" {'-':>10s}" for _ in COLUMNS))
        b = board.get(BOARD_ROWS.get(k, ""))
        lines.append(f"{k:12s}{cells}" + (f" {b:10.1f}" if b is not None else f" {'-':>10s}"))
    where = "this host" if sim else "this board"
    if sim:
        lines.append(f"columns mean..max: measured on {where}, but device: predicted by the "
                     f"simulator's cycle model at {res['clock_mhz']} MHz (so total mixes both)")
    else:
        lines.append(f"columns mean..max: measured on {where} (device: kick to interrupt)")
    lines.append(f"board us: one run on the board, predicted: device as above, the CPU's work "
                 f"on one Cortex-A53 at {board['cpu_mhz']:g} MHz and the DMA syncs by "
                 "dvsdk/runtime/board_model.py (preprocessing not modeled)")
    fps, pipe = res["fps"], res["fps_double_buffered"]
    lines.append(f"{ProgramShape(**res['program'])}; CPU ops {res['cpu_us'] / 1e3:.2f} ms, "
                 f"pack/sync/unpack {res['transfer_us'] / 1e3:.2f} ms per run, "
                 f"{res['transfer_around_cpu_us'] / 1e3:.2f} ms of it around the CPU steps "
                 "(medians)")
    mix = " (host stages measured, device time predicted: not a board figure)" if sim else ""
    lines.append(f"{where}: {fps:.1f} FPS sequential, {pipe:.1f} FPS with double buffering "
                 f"(x{pipe / fps:.2f}) over {res['runs']} runs{mix}")
    lines.append(f"on the board, predicted: {board['fps']:,.1f} FPS sequential, "
                 f"{format_us(board['total_us'])} per run = device "
                 f"{format_us(board['device_us'])} + CPU {format_us(board['cpu_us'])} + "
                 f"DMA syncs {format_us(board['sync_us'])}")
    n, one = res.get("batch", 1), res.get("per_image")
    if n > 1 and one:
        lines.append(f"batch of {n}: the stages above are per batch (a run); per image "
                     f"(means): device {one['device_us']:.1f} us, total "
                     f"{one['total_us']:.1f} us, {one['images_per_s']:.1f} images/s "
                     f"sequential; on the board, predicted: {board['fps'] * n:,.1f} images/s")
    return "\n".join(lines)
