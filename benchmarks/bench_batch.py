"""Batch on the DV700 (issue 27 item 2): device time per image, compile time and memory vs N.

For each network of ``tests/realistic_nets.py`` (MobileNetV3-small-like,
EfficientNet-Lite0-like, YOLOv8n-like, DBNet-like, the PP-OCRv4 and MTCNN stand-ins) and
each batch N of ``--batches``: compile with ``batch=N`` (no golden pair), run N
calibration images on ``sim://`` and print the device time per image (the simulator's
prediction: cycles at its clock, the same number on any host), its ratio to batch 1 (goal
<= 1.05), the commands and CPU steps of the program, the arena, the compile time and the
compiler's peak Python memory (``tracemalloc``; goal: both at most linear in N).  Sample 0
of each batch-N output is checked bit for bit against the batch-1 run on the same image
(the same arithmetic, dv700-interface.md §4.10; tests/test_batch.py checks every sample).

    python benchmarks/bench_batch.py [--batches 1,2,4,8] [--nets efficientnet_lite0]
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvsdk.compiler.build import compile as compile_model  # noqa: E402
from dvsdk.errors import ModelError  # noqa: E402
from dvsdk.runtime.net import Net  # noqa: E402
from tests.realistic_nets import NETWORKS, input_of  # noqa: E402

GOAL_PER_IMAGE = 1.05


def measure(name: str, model, n: int) -> dict:
    """Compile ``model`` for ``n`` samples and run ``n`` images; the numbers of one row."""
    tracemalloc.start()
    t0 = time.perf_counter()
    net = compile_model(model, golden=False, batch=n)
    compile_s = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    x = np.concatenate([input_of(name, 9 + i) for i in range(n)])
    with Net(net, "sim://") as dev:
        out = dev.run(x)
        device_us = dev.last_run.device_us
    kinds = [s["kind"] for s in net.meta["program"]]
    return {"n": n, "device_us": device_us, "per_image_us": device_us / n, "out": out,
            "commands": net.meta["stats"]["commands"], "cpu_steps": kinds.count("cpu"),
            "arena": net.meta["arena"]["size"], "compile_s": compile_s, "peak_mb": peak / 2**20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,2,4,8", help="comma-separated N (1 first)")
    ap.add_argument("--nets", default=",".join(NETWORKS),
                    help="comma-separated subset of " + ", ".join(NETWORKS))
    args = ap.parse_args()
    batches = sorted({1, *(int(b) for b in args.batches.split(","))})
    print(f"{'network':20s} {'N':>3s} {'us/image':>9s} {'x b1':>6s} {'cmds':>5s} "
          f"{'cpu':>4s} {'arena MB':>9s} {'compile s':>9s} {'peak MB':>8s}  bits")
    worst = 0.0
    for name in args.nets.split(","):
        build, size = NETWORKS[name]
        model = build(size)  # (an int or (H, W))
        base = None
        for n in batches:
            try:
                r = measure(name, model, n)
            except ModelError as e:  # e.g. a Reshape to a constant (1, ...): refused
                print(f"{name:20s} {n:3d} refused: {e.message}")
                break
            if base is None:
                base = r
            ratio = r["per_image_us"] / base["per_image_us"]
            worst = max(worst, ratio)
            # bit-identical to the batch-1 run of each sample (batch 1 ran image 0 only)
            same = all(np.array_equal(v[:1], base["out"][k]) for k, v in r["out"].items())
            print(f"{name:20s} {n:3d} {r['per_image_us']:9.1f} {ratio:6.3f} "
                  f"{r['commands']:5d} {r['cpu_steps']:4d} {r['arena'] / 2**20:9.2f} "
                  f"{r['compile_s']:9.2f} {r['peak_mb']:8.1f}  "
                  f"{'same' if same else 'DIFFER'}")
    print(f"worst per-image device time vs batch 1: x{worst:.3f} (goal <= {GOAL_PER_IMAGE})")


if __name__ == "__main__":
    main()
