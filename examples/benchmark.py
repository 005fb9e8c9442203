#!/usr/bin/env python3
"""Where the time goes: compile, load, and N inferences, stage by stage, with FPS.

    python3 examples/benchmark.py                          # the bundled digits model
    python3 examples/benchmark.py model.onnx --runs 50 --image cat.jpg
    python3 examples/benchmark.py net.bin --runs 100       # a net.bin: no compile stage
    DVSDK_DEVICE=uio:// python3 examples/benchmark.py      # on a board

Per-run stages come from ``net.last_run`` (a :class:`dvsdk.runtime.handle.RunStats`): packing the
input into the DV700's FP16 layout, cache maintenance, the hardware segments, unpacking,
and the ops that run on the CPU.  On the simulator (``sim://``) the device time is
*predicted* by its cycle model at the simulated clock, not measured, and wall-clock times
include simulating the DV700 in Python; on a board it is measured from kick to interrupt.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dvsdk
from dvsdk.cli import entry
from dvsdk.runtime.images import preprocess

MODELS = Path(__file__).resolve().parent / "models"
DEFAULT_MODEL = MODELS / "digits.onnx"
DEFAULT_IMAGE = MODELS / "samples" / "seven_1442.png"


def double_buffered(net, make_input, n: int) -> tuple[float, float]:
    """Run ``n`` inputs through ``net.run_async`` (two arenas alternate) and lay the runs on
    a timeline: each run's host time (preprocess, pack, sync, unpack, CPU ops; measured) and
    device time (predicted on the simulator).  Sequential: one after the other.  Double
    buffered: the host prepares input n+1 while the device runs input n, so a run starts on
    the device when both its input is packed and the device is free."""
    handles, host = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        x = make_input()
        prep = (time.perf_counter() - t0) * 1e6
        handles.append((prep, net.run_async(x)))
        if len(handles) == 2:  # keep two in flight, as a camera loop would
            p, h = handles.pop(0)
            h.wait()
            host.append((p, h.stats))
    for p, h in handles:
        h.wait()
        host.append((p, h.stats))
    before = [prep + st.pack_us + st.sync_us / 2 for prep, st in host]  # input side
    after = [st.unpack_us + st.cpu_us + st.sync_us / 2 for _, st in host]  # output side
    device = [st.device_us for _, st in host]
    seq = sum(before) + sum(device) + sum(after)
    # host order with two in flight: b0, b1, a0, b2, a1, ..., a(n-1); the device runs
    # input i once b_i is done and the device is free; a_i waits for run i
    clock = device_free = 0.0
    done: list[float] = []

    def prepare(i: int) -> None:
        nonlocal clock, device_free
        clock += before[i]
        device_free = max(clock, device_free) + device[i]
        done.append(device_free)

    def finish(i: int) -> None:
        nonlocal clock
        clock = max(clock, done[i]) + after[i]

    prepare(0)
    for i in range(1, len(host)):
        prepare(i)
        finish(i - 1)
    finish(len(host) - 1)
    pipe = clock
    return seq, pipe


def stats_ms(values_us: list[float]) -> tuple[float, float, float]:
    a = np.asarray(values_us, np.float64) / 1000
    return float(a.mean()), float(np.percentile(a, 50)), float(np.percentile(a, 99))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("model", nargs="?", default=str(DEFAULT_MODEL),
                   help="ONNX model to compile, or a net.bin (default: the bundled digits "
                   "model)")
    p.add_argument("-n", "--runs", type=int, default=20, help="timed runs (default 20)")
    p.add_argument("--image", help="input image (default: a digits sample for the default "
                   "model, else a random tensor)")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("--scale", type=float, default=1 / 255,
                   help="preprocessing scale recorded when compiling (default 1/255)")
    p.add_argument("--quantize", action="store_true", help="compile with 8-bit weights")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be >= 1")

    model = Path(args.model)
    bundled = model.resolve().with_suffix("") == DEFAULT_MODEL.with_suffix("")
    image = args.image or (str(DEFAULT_IMAGE) if bundled else None)
    once: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if model.suffix == ".bin":
            net_path = model
            once.append(("compile (skipped: net.bin given)", float("nan")))
        else:
            net_path = Path(tmp) / (model.stem + ".bin")
            t0 = time.perf_counter()
            try:
                dvsdk.compile(model, net_path, scale=args.scale, quantize=args.quantize)
            except ImportError:
                print("compiling needs onnx: python3 -m pip install -e \".[compiler]\"",
                      file=sys.stderr)
                return 2
            once.append(("compile (ONNX -> net.bin)", time.perf_counter() - t0))

        t0 = time.perf_counter()
        net = dvsdk.load(net_path, args.device)
        once.append(("load (open device, upload, commit)", time.perf_counter() - t0))
        with net:
            info = net.device.info()
            spec = net.inputs[0]
            if image is not None:
                def make_input():
                    return preprocess(image, tuple(spec["shape"]), spec.get("preprocess", {}))
                what = Path(image).name
            else:
                rng = np.random.default_rng(0)
                fixed = {i["name"]: rng.random(i["shape"], np.float32) for i in net.inputs}

                def make_input():
                    return fixed
                what = "a random tensor"

            t0 = time.perf_counter()
            net.run(make_input())
            once.append(("first run", time.perf_counter() - t0))

            rows: dict[str, list[float]] = {k: [] for k in (
                "preprocess", "pack (host -> DMA layout)", "cache sync",
                "device (hardware segments)", "device step, wall", "unpack", "cpu ops",
                "run total, wall")}
            for _ in range(args.runs):
                t0 = time.perf_counter()
                x = make_input()
                t1 = time.perf_counter()
                net.run(x)
                t2 = time.perf_counter()
                st = net.last_run
                rows["preprocess"].append((t1 - t0) * 1e6 if image else float("nan"))
                rows["pack (host -> DMA layout)"].append(st.pack_us)
                rows["cache sync"].append(st.sync_us)
                rows["device (hardware segments)"].append(st.device_us)
                rows["device step, wall"].append(sum(s.wall_us for s in st.segments))
                rows["unpack"].append(st.unpack_us)
                rows["cpu ops"].append(st.cpu_us)
                rows["run total, wall"].append((t2 - t0) * 1e6)
            segments, cycles = len(st.segments), st.cycles
            pipeline = double_buffered(net, make_input, args.runs)

    sim = info.simulated
    print(f"benchmark: {model.name} on {info.backend} ({'simulated ' if sim else ''}DV700, "
          f"{info.conv_freq} MHz), input {what}, {args.runs} runs")
    print(f"{'stage':34s} {'mean ms':>9s} {'p50 ms':>9s} {'p99 ms':>9s}")
    for name, seconds in once:
        shown = "        -" if seconds != seconds else f"{seconds * 1000:9.3f}"
        print(f"{name:34s} {shown}   (once)")
    for name, vals in rows.items():
        if any(v != v for v in vals):    # a stage this runtime does not report
            continue
        label = name
        if name.startswith("device ("):
            label = "device, predicted" if sim else "device, measured"
        mean, p50, p99 = stats_ms(vals)
        print(f"{label:34s} {mean:9.3f} {p50:9.3f} {p99:9.3f}")
    device_us = statistics.fmean(rows["device (hardware segments)"])
    wall_us = statistics.fmean(rows["run total, wall"])
    print(f"{segments} hardware segment(s), {cycles} cycles per run" if sim else
          f"{segments} hardware segment(s) per run")
    print(f"FPS: {1e6 / wall_us:,.1f} wall-clock (preprocess + run, this host)")
    if device_us > 0:
        print(f"FPS: {1e6 / device_us:,.0f} device-bound ({device_us:.1f} us of device "
              f"time per run{', predicted' if sim else ''})")
    if sim:
        seq, pipe = pipeline
        print(f"run_async, double-buffered (predicted timeline of {args.runs} inputs): "
              f"{seq / 1e3:.2f} ms sequential -> {pipe / 1e3:.2f} ms overlapped "
              f"(x{seq / pipe:.2f} throughput)")
        print("note: on the simulator the device time is predicted by its cycle model, not "
              "measured; wall-clock times include simulating the DV700 in Python")
    return 0


if __name__ == "__main__":
    # as dvsdk's own tools: an error is one line and a non-zero exit (--debug: traceback)
    sys.exit(entry(Path(__file__).name, main))
