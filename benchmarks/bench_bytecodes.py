"""The runtime's Python work per event, in bytecodes: what ``board_model`` charges a board's CPU.

:mod:`dvsdk.runtime.board_model` predicts the Cortex-A53's share of a run from the
bytecodes CPython executes per event (``BoardParams.*_bytecodes``: a hardware segment's
kick and interrupt, a CPU step on the compiled or numpy path, a pack or unpack, a cache
sync) times ``bytecode_cycles``.  This script counts them: ``sys.settrace`` with opcode
events on the main thread, for one steady run (the third) of each network, on

* ``uio://`` -- a fake board of real files (``tests/fakeboard.py``: sysfs, the UIO
  register maps and u-dma-buf as files the driver maps; a thread plays the DV700 with the
  simulator's core), with DMP's R5 kick (``--kick direct`` for the older bitstreams).
  This is the driver a board runs: its register accesses, interrupt wait and syncs;
* and ``sim://`` for comparison (its register accesses are the simulator's, not a
  board's).

Each opcode is charged to the innermost event running: a cache sync
(``DmaBuffer.sync_for_cpu`` / ``sync_for_device``), a pack or unpack (``hw.layout``), a CPU
step (``cpusteps.step``, the numpy path's op, or a fused plan), else the hardware segment
(``Net._step`` of a hardware step: its kick, wait, counters and bookkeeping) or the run's
own bookkeeping.  The simulator core behind the fake board runs on its own thread and is
not counted; neither is the fake board's polling: on a board the interrupt wait blocks in
``poll()``, so the wait is entered once the fake has raised the interrupt (one pass of
the wait loop, as a board's wake-up after the ``poll``).

Nothing here is timed: the counts are the same on every machine (they depend on the
Python version: CPython 3.11 here, as on a PetaLinux 2023+ image).

    python benchmarks/bench_bytecodes.py [--nets digits,ppocr_cls] [--kick r5|direct]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvsdk.compiler.build import compile as compile_model  # noqa: E402
from dvsdk.runtime import board_model  # noqa: E402
from tests.bytecodes import MODEL, count, ioctl_sync  # noqa: E402
from tests.fakeboard import open_fake_device  # noqa: E402
from tests.realistic_nets import NETWORKS, input_of  # noqa: E402


def _model(name: str):
    if name == "digits":
        import onnx

        model = onnx.load(ROOT / "examples" / "models" / "digits.onnx")
        shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
        return model, np.random.default_rng(1).random(shape).astype(np.float32)
    build, size = NETWORKS[name]
    return build(size), input_of(name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default="digits,ppocr_cls,mobilenetv3_small")
    ap.add_argument("--kick", default="r5", choices=("r5", "direct"))
    ap.add_argument("--sync", default="ioctl", choices=("ioctl", "sysfs"),
                    help="u-dma-buf's sync: ioctl (4.7.0 and later) or its sysfs files")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    p = board_model.DEFAULT
    print(f"Python {sys.version.split()[0]}; bytecodes per event, one steady run "
          f"(main thread); board_model's constant in brackets")
    for name in args.nets.split(","):
        model, x = _model(name)
        nf = compile_model(model.SerializeToString(), golden=False)
        tmp = tempfile.TemporaryDirectory()
        with ioctl_sync(args.sync == "ioctl"):
            dev = open_fake_device(tmp.name, kick=args.kick)
            try:
                results = {f"uio:// {args.kick}": count(nf, x, dev),
                           "sim://": count(nf, x, "sim://")}
            finally:
                dev.close()
                tmp.cleanup()
        for where, c in results.items():
            cells = []
            for label in ("segment", "step (fused)", "step (numpy)", "convert", "sync"):
                n = c.events[label]
                if n:
                    cells.append(f"{label} {c.ops[label] / n:6.0f} x{n:<3d} "
                                 f"[{getattr(p, MODEL[label])}]")
            total = sum(c.ops.values())
            print(f"{name:18s} {where:15s} total {total:7d}  run {c.ops['run']:5d}  "
                  + "  ".join(cells), flush=True)


if __name__ == "__main__":
    main()
