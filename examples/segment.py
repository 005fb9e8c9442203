#!/usr/bin/env python3
"""Semantic segmentation end to end: build, compile, run, per-pixel argmax, colored mask.

The network is built right here with ``onnx.helper``: a hand-weighted, fully
convolutional color segmenter with four classes (background, red, green, blue):

    image (1x3xHxW, 0..1) -> 3x3 conv (smoothing) -> 1x1 conv + ReLU (6 color-difference
    features) -> 1x1 conv (4 class scores per pixel)

It is compiled to a temporary net.bin, run on the device, and the per-pixel class map
is computed by the DV700's **maximizer unit** straight from the score tensor the conv
unit left in DMA memory (one ``MaximizerCommand`` through the driver, which is what
``net.class_map()`` does in one call); without a maximizer (or with ``--cpu-argmax``)
numpy's argmax does it.  The mask is saved as a colored PNG.

    python3 examples/segment.py                        # a synthetic test image
    python3 examples/segment.py photo.jpg -o mask.png --size 96x128

Needs the compiler extra: ``python3 -m pip install -e ".[compiler]"``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import dvsdk
from dvsdk.cli import entry

CLASSES = ("background", "red", "green", "blue")
PALETTE = np.array([(0, 0, 0), (230, 40, 40), (40, 200, 60), (50, 90, 240)], np.uint8)


def build_model(height: int, width: int):
    """The four-class color segmenter as an ONNX ModelProto (weights chosen by hand)."""
    from onnx import TensorProto, helper, numpy_helper

    smooth = np.zeros((3, 3, 3, 3), np.float32)          # per-channel 3x3 box filter
    for ch in range(3):
        smooth[ch, ch] = 1 / 9
    pairs = [(0, 1), (0, 2), (1, 0), (1, 2), (2, 0), (2, 1)]  # relu(r-g), relu(r-b), ...
    feat = np.zeros((6, 3, 1, 1), np.float32)
    for i, (a, b) in enumerate(pairs):
        feat[i, a], feat[i, b] = 1, -1
    score = np.zeros((4, 6, 1, 1), np.float32)            # class k: its two differences
    score[1, 0:2] = score[2, 2:4] = score[3, 4:6] = 1
    score_b = np.array([0.7, 0, 0, 0], np.float32)       # background wins unless colorful

    inits = {"smooth_w": smooth, "smooth_b": np.zeros(3, np.float32), "feat_w": feat,
             "feat_b": np.zeros(6, np.float32), "score_w": score, "score_b": score_b}
    nodes = [
        helper.make_node("Conv", ["image", "smooth_w", "smooth_b"], ["smoothed"],
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], name="smooth"),
        helper.make_node("Conv", ["smoothed", "feat_w", "feat_b"], ["diff"],
                         kernel_shape=[1, 1], name="features"),
        helper.make_node("Relu", ["diff"], ["features"], name="relu"),
        helper.make_node("Conv", ["features", "score_w", "score_b"], ["scores"],
                         kernel_shape=[1, 1], name="classifier"),
    ]
    graph = helper.make_graph(
        nodes, "color_segmenter",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, height, width])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 4, height, width])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="dvsdk-examples")


def synthetic_image(height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """A dark, slightly noisy scene with a red square, a green disc and a blue bar,
    and its true class map."""
    rng = np.random.default_rng(7)
    img = rng.integers(0, 40, (height, width, 3)).astype(np.uint8)
    truth = np.zeros((height, width), np.uint8)
    yy, xx = np.mgrid[:height, :width]
    red = (yy >= height // 8) & (yy < height // 2) & (xx >= width // 8) & (xx < width // 2)
    green = (yy - 0.7 * height) ** 2 + (xx - 0.3 * width) ** 2 < (0.2 * min(height, width)) ** 2
    blue = (yy >= height // 6) & (yy < 5 * height // 6) & (xx >= 2 * width // 3) \
        & (xx < 5 * width // 6)
    for k, region, color in ((1, red, (220, 30, 30)), (2, green, (30, 200, 40)),
                             (3, blue, (20, 50, 230))):
        img[region] = color
        truth[region] = k
    return img, truth


def maximizer_argmax(net, scores_name: str, classes: int) -> tuple[np.ndarray, float] | None:
    """The class map from the maximizer unit, reading the score tensor in place.

    Returns ``(class map (H, W) uint8, device µs)``, or None when the device has no
    maximizer or the scores do not live in device memory.
    """
    from dvsdk.driver.cmdlist import CommandList
    from dvsdk.driver.commands import BufferRef, MaximizerCommand

    dev = net.device
    where = net.tensors.get(scores_name, {}).get("device")
    if "maximizer" not in dev.info().units or where is None:
        return None
    h, w, c = where["hwc"]
    out = dev.alloc(h * w, align=64, name="class-map")
    try:
        with CommandList(dev) as cl:
            # The scores are the last thing the conv unit wrote into the arena: FP16,
            # 8-channel chunks, x-major (§1), which is exactly what the maximizer reads.
            cl.add(MaximizerCommand(input_buf=BufferRef(net.arena, where["offset"]),
                                    output_buf=out, width=w, height=h, nclass=c))
            cl.commit()
            us = cl.run()
        out.sync_for_cpu()
        flat = out.read(0, h * w)                 # uint8, x-major: flat[x * H + y]
        return flat.reshape(w, h).T.copy(), us
    finally:
        out.free()


def parse_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("size must look like HxW, e.g. 64x64") from None
    if h < 4 or w < 4:
        raise argparse.ArgumentTypeError("size must be at least 4x4")
    return h, w


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("image", nargs="?", help="image to segment (default: a synthetic scene)")
    p.add_argument("-o", "--output", default="segment_mask.png",
                   help="colored mask PNG to write (default: %(default)s)")
    p.add_argument("--size", type=parse_size, default=(64, 64), metavar="HxW",
                   help="network input size; the image is resized to it (default 64x64)")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("--cpu-argmax", action="store_true",
                   help="compute the class map with numpy instead of the maximizer unit")
    p.add_argument("--keep", metavar="NET.bin", help="also keep the compiled net.bin here")
    args = p.parse_args(argv)

    try:
        model = build_model(*args.size)
    except ImportError:
        print("segment.py needs onnx: python3 -m pip install -e \".[compiler]\"",
              file=sys.stderr)
        return 2
    h, w = args.size
    if args.image:
        image, truth, source = args.image, None, args.image
    else:
        image, truth = synthetic_image(h, w)
        source = f"synthetic {h}x{w} scene"

    with tempfile.TemporaryDirectory() as tmp:
        bin_path = Path(args.keep or os.path.join(tmp, "segment.bin"))
        t0 = time.perf_counter()
        dvsdk.compile(model, bin_path, scale=1 / 255, labels=list(CLASSES))
        t_compile = time.perf_counter() - t0
        print(f"compiled a {len(model.graph.node)}-node ONNX model to {bin_path.name} "
              f"({bin_path.stat().st_size} B) in {t_compile:.2f} s")
        with dvsdk.load(bin_path, args.device) as net:
            simulated = net.device.info().simulated
            scores = net.run_image(image)["scores"]          # (1, 4, H, W) float32
            run = net.last_run
            print(f"ran on {source}: scores {tuple(scores.shape)}, {len(run.segments)} "
                  f"hardware segment(s), device {run.device_us:.1f} us"
                  + (" (predicted)" if simulated else ""))
            cpu_map = scores[0].argmax(axis=0).astype(np.uint8)
            found = None if args.cpu_argmax else maximizer_argmax(net, "scores", len(CLASSES))
            if found is not None:
                class_map, us = found
                agree = float(np.mean(class_map == cpu_map))
                print(f"class map by the maximizer unit in {us:.1f} us"
                      + (" (predicted)" if simulated else "")
                      + f"; agrees with numpy argmax on {agree:.2%} of pixels")
                same = np.array_equal(net.class_map("scores"), class_map)
                print(f"net.class_map(), the runtime's one-call version: "
                      f"{'the same map' if same else 'a DIFFERENT map'}")
            else:
                class_map = cpu_map
                print("class map by numpy argmax on the CPU")

    mask = PALETTE[class_map]
    from PIL import Image

    Image.fromarray(mask, "RGB").save(args.output)
    print(f"wrote {args.output} ({w}x{h} colored mask)")
    counts = np.bincount(class_map.ravel(), minlength=len(CLASSES))
    for name, n in zip(CLASSES, counts):
        print(f"  {name:10s} {n:6d} px  {n / class_map.size:6.1%}")
    if truth is not None:
        print(f"pixel accuracy vs the synthetic ground truth: {np.mean(class_map == truth):.1%}")
    return 0


if __name__ == "__main__":
    # as dvsdk's own tools: an error is one line and a non-zero exit (--debug: traceback)
    sys.exit(entry(Path(__file__).name, main))
