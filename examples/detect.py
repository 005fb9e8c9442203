#!/usr/bin/env python3
"""Object detection end to end: a YOLOv8n-like network, compiled with its task head, on an
image or a video, with the boxes drawn.

The network is built right here with ``onnx.helper`` and seeded random weights (or read
from ``--onnx yolov8n.onnx``, your trained export): a YOLOv8-style backbone of strided
3x3 convs with SiLU and a residual block, three detection scales (strides 8, 16, 32),
and the anchor-free head YOLOv8 exports, one ``(1, 4 + C, N)`` tensor of box centre,
width and height in input pixels, then C class scores::

    image 1x3xSxS -> conv/2 -> conv/2 -> residual -> conv/2 (P3) -> conv/2 (P4) -> conv/2 (P5)
                     each Pk -> 1x1 convs -> box (cx, cy, w, h), classes (sigmoid) -> concat

``dvsdk.compile(..., task="detect")`` records the head (decoder, thresholds, labels) in the
net.bin, so ``net.run_image(img)`` returns boxes in the image's own pixels after the
decoding and class-aware NMS, and ``result.draw(img)`` draws them.  With random weights
the boxes mean nothing; the point is the flow (and the device time).  A video input goes
through :func:`dvsdk.apps.run_pipeline` (decode, run, draw and encode in parallel) and
writes one annotated frame per input frame.

    python3 examples/detect.py                          # a synthetic image
    python3 examples/detect.py photo.jpg -o boxes.png
    python3 examples/detect.py clip.mp4 -o boxes.mp4    # needs PyAV: pip install "dvsdk[video]"
    python3 examples/detect.py --onnx yolov8n.onnx photo.jpg --labels coco.txt

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

#: the class convs' weight gain: wide enough a spread that a few scores pass 0.25
CLS_GAIN = 100.0


def _silu(nodes: list, x: str) -> str:
    from onnx import helper

    nodes += [helper.make_node("Sigmoid", [x], [f"{x}_sig"]),
              helper.make_node("Mul", [x, f"{x}_sig"], [f"{x}_silu"])]
    return f"{x}_silu"


def yolov8n_like(size: int = 128, classes: int = 80, seed: int = 0):
    """A YOLOv8n-shaped detector (module docstring) with seeded random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes: list = []

    def conv(x: str, name: str, cin: int, cout: int, k: int, stride: int,
             bias: np.ndarray | None = None, gain: float = 1.6) -> str:
        fan = cin * k * k
        inits[f"{name}_w"] = (rng.standard_normal((cout, cin, k, k)) * (gain / fan) ** 0.5
                              ).astype(np.float32)
        inits[f"{name}_b"] = bias if bias is not None else np.zeros(cout, np.float32)
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [name],
                                      kernel_shape=[k, k], strides=[stride, stride],
                                      pads=[k // 2] * 4))
        return name

    x = _silu(nodes, conv("images", "stem", 3, 16, 3, 2))
    x = _silu(nodes, conv(x, "down1", 16, 32, 3, 2))
    r = _silu(nodes, conv(x, "res_a", 32, 32, 1, 1))
    r = _silu(nodes, conv(r, "res_b", 32, 32, 3, 1))
    nodes.append(helper.make_node("Add", [x, r], ["res"]))
    feats, chans = [], 32
    for stride, name in ((8, "p3"), (16, "p4"), (32, "p5")):
        x = _silu(nodes, conv(feats[-1][0] if feats else "res", name, chans, 64, 3, 2))
        feats.append((x, stride))
        chans = 64
    boxes, scores = [], []
    for x, stride in feats:
        g = size // stride
        n = g * g
        box = conv(x, f"box{stride}", 64, 4, 1, 1)
        # class scores spread wide enough (gain) that a few pass the 0.25 threshold
        cls = conv(x, f"cls{stride}", 64, classes, 1, 1,
                   bias=np.full(classes, -4.0, np.float32), gain=CLS_GAIN)
        # cx, cy = (grid + sigmoid * 2 - 0.5) * stride; w, h = sigmoid * 8 * stride
        ys, xs = np.mgrid[:g, :g].astype(np.float32)
        inits[f"grid{stride}"] = np.stack([xs, ys])[None] * stride - 0.5 * stride
        inits[f"gain{stride}"] = np.array([2 * stride, 2 * stride, 8 * stride, 8 * stride],
                                          np.float32).reshape(1, 4, 1, 1)
        inits[f"off{stride}"] = np.concatenate(
            [inits[f"grid{stride}"], np.zeros((1, 2, g, g), np.float32)], axis=1)
        inits[f"shape{stride}"] = np.array([1, 4, n], np.int64)
        inits[f"cshape{stride}"] = np.array([1, classes, n], np.int64)
        del inits[f"grid{stride}"]
        nodes += [helper.make_node("Sigmoid", [box], [f"{box}_s"]),
                  helper.make_node("Mul", [f"{box}_s", f"gain{stride}"], [f"{box}_g"]),
                  helper.make_node("Add", [f"{box}_g", f"off{stride}"], [f"{box}_xywh"]),
                  helper.make_node("Reshape", [f"{box}_xywh", f"shape{stride}"], [f"{box}_f"]),
                  helper.make_node("Sigmoid", [cls], [f"{cls}_s"]),
                  helper.make_node("Reshape", [f"{cls}_s", f"cshape{stride}"], [f"{cls}_f"])]
        boxes.append(f"{box}_f")
        scores.append(f"{cls}_f")
    nodes += [helper.make_node("Concat", boxes, ["xywh"], axis=2),
              helper.make_node("Concat", scores, ["cls"], axis=2),
              helper.make_node("Concat", ["xywh", "cls"], ["output0"], axis=1)]
    graph = helper.make_graph(
        nodes, "yolov8n_like",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("output0", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                             producer_name="dvsdk-examples")


def synthetic_scene(height: int = 240, width: int = 320) -> np.ndarray:
    """A grey scene with a few coloured rectangles (something to draw boxes on)."""
    img = np.full((height, width, 3), 90, np.uint8)
    img[40:140, 30:120] = (200, 60, 50)
    img[120:220, 170:300] = (40, 120, 210)
    img[20:80, 200:260] = (230, 210, 60)
    return img


def compile_detector(out: Path, onnx_path: str | None, size: int, labels: list[str] | None
                     ) -> float:
    """Compile the detector (built here, or ``onnx_path``) with the detect head; seconds."""
    model = onnx_path or yolov8n_like(size)
    t0 = time.perf_counter()
    dvsdk.compile(model, out, task="detect", scale=1 / 255, resize="letterbox",
                  labels=labels, golden=False)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", nargs="?", help="image or video (default: a synthetic scene)")
    p.add_argument("-o", "--output", help="annotated image or video to write "
                                          "(default: detect_out.png, or .mp4 for a video)")
    p.add_argument("--onnx", help="your YOLOv8/v11 ONNX export instead of the random one")
    p.add_argument("--labels", help="class names, one a line")
    p.add_argument("--size", type=int, default=128, help="input size of the built network")
    p.add_argument("--keep", metavar="NET.bin", help="also keep the compiled net.bin here")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("-f", "--force", action="store_true", help="replace the output file")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = p.parse_args(argv)
    return entry("detect.py", lambda _: _main(args), [])


def _main(args) -> int:
    from dvsdk.apps.sources import is_video

    labels = Path(args.labels).read_text().split("\n") if args.labels else None
    labels = [s.strip() for s in labels if s.strip()] if labels else None
    video = args.input is not None and is_video(args.input)
    out = args.output or ("detect_out.mp4" if video else "detect_out.png")
    with tempfile.TemporaryDirectory() as tmp:
        net_path = Path(args.keep or os.path.join(tmp, "detect.bin"))
        secs = compile_detector(net_path, args.onnx, args.size, labels)
        print(f"compiled {args.onnx or 'a YOLOv8n-like network (random weights)'} with the "
              f"detect head in {secs:.2f} s")
        with dvsdk.load(net_path, args.device) as net:
            how = "predicted" if net.device.info().simulated else "measured"
            if video:
                from dvsdk.apps import run_pipeline
                from dvsdk.apps.sinks import VideoSink
                from dvsdk.apps.sources import open_source

                src = open_source(args.input)
                report = run_pipeline(net, src, [VideoSink(out, src.fps, force=args.force)])
                print("\n".join(report.lines()))
                print(f"wrote {out} ({report.frames} annotated frames)")
                return 0
            image = args.input if args.input else synthetic_scene()
            result = net.run_image(image)
            print(f"{len(result)} detections, device {net.last_run.device_us:.1f} us ({how})")
            print(result.summary())
            if os.path.exists(out) and not args.force:
                print(f"detect.py: {out} exists: pass -f to replace it", file=sys.stderr)
                return 2
            from PIL import Image

            from dvsdk.runtime.images import as_rgb

            Image.fromarray(result.draw(as_rgb(image))).save(out)
            print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
