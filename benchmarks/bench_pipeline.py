"""The frame pipeline against a plain loop (issue 31 item 3): frames per second on sim://.

The detector of ``examples/detect.py`` (YOLOv8n-like, 128 x 128, random weights, compiled
with the detect head) on N random 320 x 240 frames, three ways, each the median of
``--repeat`` passes:

- ``loop``: ``head.prepare`` -> ``net.run`` -> ``head.finish`` -> ``draw``, one frame after
  the other (what an application without threads does);
- ``pipeline``: :func:`dvsdk.apps.run_pipeline` with a sink that wants the drawing (so the
  same work: prepare, run, finish, draw), four threads and two runs in flight;
- the ratio ``pipeline / loop`` (above 1: the overlap pays).

On the simulator the "device" is numpy on this host, competing with the other stages for
its cores and the GIL, so the ratio here understates what a board gains, where the DV700
runs beside the CPU; the device's rate, predicted, is printed for reference.

    python benchmarks/bench_pipeline.py [--frames 40] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import dvsdk  # noqa: E402
from dvsdk.apps import run_pipeline  # noqa: E402
from dvsdk.tasks import head_for  # noqa: E402


class DrawSink:
    needs_annotated = True

    def write(self, frame, result, annotated) -> None:
        pass

    def close(self) -> None:
        pass


def main() -> int:
    from detect import compile_detector

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=40)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args()
    frames = [np.random.default_rng(i).integers(0, 256, (240, 320, 3), dtype=np.uint8)
              for i in range(args.frames)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "det.bin"
        compile_detector(path, None, 128, None)
        with dvsdk.load(path, "sim://") as net:
            head = head_for(net)

            def loop() -> float:
                t0 = time.perf_counter()
                for f in frames:
                    x, ctx = head.prepare(f)
                    head.finish(net.run(x), ctx).draw(f)
                return len(frames) / (time.perf_counter() - t0)

            def pipe() -> tuple[float, dict]:
                rep = run_pipeline(net, frames, [DrawSink()], head=head)
                return rep.fps, rep.as_dict()

            loop()                                         # warm up
            loops = [loop() for _ in range(args.repeat)]
            pipes = [pipe() for _ in range(args.repeat)]
    lo = float(np.median(loops))
    pi = float(np.median([f for f, _ in pipes]))
    dev = pipes[-1][1]["device"]
    print(f"{args.frames} frames of 320x240 through a YOLOv8n-like 128x128 detector, sim://, "
          f"median of {args.repeat}")
    print(f"loop      {lo:7.1f} FPS")
    print(f"pipeline  {pi:7.1f} FPS   x{pi / lo:.2f}")
    print(f"device    {dev['fps']:7.1f} FPS   (predicted by the simulator's cycle model)")
    for name, s in pipes[-1][1]["stages"].items():
        print(f"  {name:8s} median {s['median_ms']:6.2f} ms  p99 {s['p99_ms']:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
