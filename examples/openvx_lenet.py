#!/usr/bin/env python3
"""The bundled digits network rebuilt node by node with the OpenVX API (``dvsdk.vx``).

Reads the trained weights of ``models/digits.onnx`` (a LeNet: conv 3x3 -> ReLU -> max-pool
2x2, twice, then fully connected and softmax), creates one OpenVX node per layer with the
NN extension's kernels, verifies the graph (which compiles it for the DV700 and loads it on
the device), classifies the sample images, then times repeated executions with the
nodes' and the graph's ``perf``:

    python3 examples/openvx_lenet.py
    python3 examples/openvx_lenet.py examples/models/samples/ --runs 50
    DVSDK_DEVICE=uio:// python3 examples/openvx_lenet.py          # on a board

It also runs ``models/digits.bin`` (the same network compiled from ONNX) on the same
inputs and reports the largest difference of the scores.  Needs the ``onnx`` package to
read the weights (``pip install -e ".[compiler]"``).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import dvsdk
import dvsdk.vx as vx
from dvsdk.cli import entry
from dvsdk.runtime.images import IMAGE_SUFFIXES, preprocess

MODELS = Path(__file__).resolve().parent / "models"
F32 = vx.Type.FLOAT32


def onnx_weights(path: Path) -> dict[str, np.ndarray]:
    import onnx
    from onnx import numpy_helper

    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def build(ctx: vx.Context, w: dict[str, np.ndarray]) -> tuple[vx.Graph, vx.Tensor, vx.Tensor]:
    """The network in OpenVX order: tensors [width, height, maps, batch], weights
    [kx, ky, IFM, OFM] (ONNX's OIHW reversed), fully connected weights [IFM, OFM]."""
    g = ctx.graph()

    def const(a: np.ndarray) -> vx.Tensor:
        t = vx.Tensor(ctx, a.shape, F32)
        t.copy_patch(a.astype(np.float32), vx.Accessor.WRITE_ONLY)
        return t

    def named(node: vx.Node, name: str) -> vx.Node:
        node.name = name
        return node

    image = vx.Tensor(ctx, (16, 16, 1, 1), F32)
    image.name = "image"
    x = image
    for i, (size, maps) in enumerate(((16, 8), (8, 16)), start=1):
        conv = g.virtual_tensor((size, size, maps, 1), F32)
        named(vx.convolution_layer(g, x, const(w[f"conv{i}.weight"].transpose(3, 2, 1, 0)),
                                   const(w[f"conv{i}.bias"]),
                                   vx.ConvolutionParams(padding_x=1, padding_y=1), conv),
              f"conv{i}")
        relu = g.virtual_tensor((size, size, maps, 1), F32)
        named(vx.activation_layer(g, conv, vx.ActivationFunction.RELU, 0, 0, relu), f"relu{i}")
        x = g.virtual_tensor((size // 2, size // 2, maps, 1), F32)
        named(vx.pooling_layer(g, relu, vx.PoolingType.MAX, 2, 2, 0, 0,
                               vx.RoundingType.FLOOR, x), f"pool{i}")
    logits = g.virtual_tensor((10, 1), F32)
    # the [4, 4, 16, 1] input is flattened in OpenVX memory order = ONNX's NCHW Flatten
    named(vx.fully_connected_layer(g, x, const(w["fc.weight"].T), const(w["fc.bias"]),
                                   vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_NEAREST_EVEN,
                                   logits), "fc")
    probs = vx.Tensor(ctx, (10, 1), F32)
    probs.name = "probs"
    named(vx.softmax_layer(g, logits, probs), "softmax")
    return g, image, probs


def images(items: list[str]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        out += sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES) \
            if p.is_dir() else [p]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("images", nargs="*", default=[str(MODELS / "samples" / "seven_1442.png")],
                   help="image files or directories (default: one bundled sample)")
    p.add_argument("-n", "--runs", type=int, default=20, help="timed executions")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim)")
    args = p.parse_args(argv)
    labels = (MODELS / "digits_labels.txt").read_text().split()
    with vx.Context(args.device) as ctx:
        g, image, probs = build(ctx, onnx_weights(MODELS / "digits.onnx"))
        t0 = time.perf_counter()
        status = g.verify()
        if status != vx.Status.SUCCESS:
            print(f"verification failed: {g.error}", file=sys.stderr)
            return 1
        info = ctx.device.info()
        print(f"openvx_lenet: digits.onnx rebuilt as {len(g.nodes)} OpenVX nodes, verified "
              f"(compiled and loaded) in {time.perf_counter() - t0:.2f} s on {info.backend}")
        print(g.report())
        spec = {"scale": 1 / 255, "resize": "stretch"}
        reference = dvsdk.load(MODELS / "digits.bin", ctx.device)
        worst, correct, paths = 0.0, 0, images(args.images)
        for path in paths:
            x = preprocess(path, (1, 1, 16, 16), spec)                    # NCHW
            image.copy_patch(x.transpose(3, 2, 1, 0), vx.Accessor.WRITE_ONLY)
            if g.process() != vx.Status.SUCCESS:
                print(f"{path}: {g.error}", file=sys.stderr)
                return 1
            scores = probs.copy_patch()[:, 0]
            top = int(np.argmax(scores))
            truth = path.stem.split("_")[0]
            mark = "" if truth not in labels else \
                "  [correct]" if labels[top] == truth else "  [WRONG]"
            correct += labels[top] == truth
            print(f"{path}: {labels[top]} ({scores[top]:.1%}){mark}")
            ref = next(iter(reference.run(x).values())).reshape(-1)
            worst = max(worst, float(np.abs(scores - ref).max()))
        reference.close()
        print(f"{correct}/{len(paths)} correct; largest difference from digits.bin (the same "
              f"network compiled from ONNX): {worst:.3g}")
        for _ in range(args.runs):                 # asynchronous: schedule, then wait
            g.schedule()
            g.wait()
        timing = "predicted by the simulator's cycle model" if info.simulated else "measured"
        print(f"perf over {g.perf.num} executions (us; device time {timing}, CPU steps and "
              "transfers on this host):")
        print(f"  {'node':<8s} {'runs on':<9s} {'avg':>8s} {'min':>8s} {'max':>8s}")
        for n in g.nodes:
            pf = n.perf
            print(f"  {n.name:<8s} {n.where:<9s} {pf.avg / 1e3:8.1f} {pf.min / 1e3:8.1f} "
                  f"{pf.max / 1e3:8.1f}")
        pf = g.perf
        print(f"  {'graph':<8s} {'':<9s} {pf.avg / 1e3:8.1f} {pf.min / 1e3:8.1f} "
              f"{pf.max / 1e3:8.1f}")
    return 0


if __name__ == "__main__":
    # as dvsdk's own tools: an error is one line and a non-zero exit (--debug: traceback)
    sys.exit(entry(Path(__file__).name, main))
