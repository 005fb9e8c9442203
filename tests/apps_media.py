"""Media the apps tests make for themselves (issue 31): frames with a moving square, a
clip encoded by PyAV, and a detector whose one box is known exactly.

* :func:`square_frames`: n RGB frames, a grey field with a yellow square moving right;
* :func:`write_clip`: those frames as a video file (PyAV, MPEG-4 part 2, 4:2:0);
* :func:`fixed_box_detector`: a YOLOv8-style (1, 4 + C, N) head whose every anchor says
  the same box and class (the convs' weights are 0, the biases are the answer), so the
  detection after decoding and NMS is one box a test can predict without the code.
"""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
from onnx import helper

from .onnx_models import make_model

GREY, YELLOW = (40, 40, 40), (250, 250, 30)


def square_frames(n: int = 12, height: int = 48, width: int = 64, side: int = 16,
                  step: int = 4) -> list[np.ndarray]:
    """Frame i: the square's left edge at 4 + step * i, top at 10."""
    out = []
    for i in range(n):
        f = np.full((height, width, 3), GREY, np.uint8)
        x = 4 + step * i
        f[10:10 + side, x:x + side] = YELLOW
        out.append(f)
    return out


def write_clip(path: Path, frames: list[np.ndarray], fps: int = 12) -> Path:
    c = av.open(str(path), "w")
    s = c.add_stream("mpeg4", rate=fps)
    s.height, s.width = frames[0].shape[:2]
    s.pix_fmt = "yuv420p"
    for f in frames:
        c.mux(s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
    c.mux(s.encode(None))
    c.close()
    return path


def decode_all(path: Path) -> list[np.ndarray]:
    """Every frame of a video as RGB, decoded by PyAV here (not by dvsdk.apps)."""
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def fixed_box_detector(size: int = 32, classes: int = 2, box=(16.0, 16.0, 16.0, 12.0),
                       cls: int = 1, score: float = 0.9):
    """(1, 3, size, size) -> (1, 4 + classes, (size / 4)^2) ``output0``: every anchor says
    ``box`` (cx, cy, w, h in input pixels) with ``score`` for class ``cls``, 0.001 for the
    others.  Weights 0, biases the answer: the output does not depend on the image."""
    k = 4 + classes
    bias = np.full(k, 0.001, np.float32)
    bias[:4] = box
    bias[4 + cls] = score
    inits = {"w": np.zeros((k, 3, 4, 4), np.float32), "b": bias,
             "shape": np.array([1, k, (size // 4) ** 2], np.int64)}
    nodes = [helper.make_node("Conv", ["images", "w", "b"], ["c"], kernel_shape=[4, 4],
                              strides=[4, 4]),
             helper.make_node("Reshape", ["c", "shape"], ["output0"])]
    return make_model(nodes, [("images", [1, 3, size, size])], ["output0"], inits,
                      name="fixed_box")
