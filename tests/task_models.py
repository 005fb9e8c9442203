"""Small seeded ONNX nets with the output heads of the task tests (issue 31).

* :func:`yolov8_like`: a few convs ending in a YOLOv8/v11 anchor-free head, (1, 4+C, N):
  rows cx, cy, w, h in input pixels (sigmoid · the input size; w, h sigmoid · size/2),
  then C class scores (sigmoid), with biases set so a handful of boxes pass 0.25.
* :func:`segmenter`: convs to (1, K, H, W) class scores at the input's size.
* :func:`ctc_recognizer`: convs + reshape to (1, T, K) CTC scores.
"""

from __future__ import annotations

import numpy as np
from onnx import helper

from .onnx_models import make_model, w


def _conv(name: str, x: str, y: str, cin: int, cout: int, k: int, stride: int, seed: int,
          inits: dict, bias: np.ndarray | None = None) -> list:
    inits[f"{name}_w"] = w(seed, cout, cin, k, k, scale=0.4)
    inits[f"{name}_b"] = bias if bias is not None else w(seed + 1, cout, scale=0.1)
    return [helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [y], kernel_shape=[k, k],
                             strides=[stride, stride], pads=[k // 2] * 4)]


def yolov8_like(classes: int = 3, size: int = 32, seed: int = 2, cls_bias: float = -1.0):
    """(1, 3, size, size) → (1, 4 + classes, (size/4)²) ``output0``."""
    inits: dict = {}
    nodes = _conv("c1", "images", "c1", 3, 8, 3, 2, seed, inits)
    nodes += [helper.make_node("Relu", ["c1"], ["r1"])]
    nodes += _conv("c2", "r1", "c2", 8, 16, 3, 2, seed + 10, inits)
    nodes += [helper.make_node("Relu", ["c2"], ["r2"])]
    nodes += _conv("box", "r2", "box", 16, 4, 1, 1, seed + 20, inits)
    bias = np.full(classes, cls_bias, np.float32) + w(seed + 31, classes, scale=0.3)
    nodes += _conv("cls", "r2", "cls", 16, classes, 1, 1, seed + 30, inits, bias=bias)
    n = (size // 4) ** 2
    inits["scale"] = np.array([size, size, size / 2, size / 2], np.float32).reshape(1, 4, 1, 1)
    inits["shape"] = np.array([1, 4 + classes, n], np.int64)
    nodes += [helper.make_node("Sigmoid", ["box"], ["box_s"]),
              helper.make_node("Mul", ["box_s", "scale"], ["xywh"]),
              helper.make_node("Sigmoid", ["cls"], ["cls_s"]),
              helper.make_node("Concat", ["xywh", "cls_s"], ["head"], axis=1),
              helper.make_node("Reshape", ["head", "shape"], ["output0"])]
    return make_model(nodes, [("images", [1, 3, size, size])], ["output0"], inits,
                      name="yolov8_like")


def segmenter(classes: int = 4, size: int = 16, seed: int = 3):
    """(1, 3, size, size) → (1, classes, size, size) ``scores``."""
    inits: dict = {}
    nodes = _conv("c1", "x", "c1", 3, 8, 3, 1, seed, inits)
    nodes += [helper.make_node("Relu", ["c1"], ["r1"])]
    nodes += _conv("c2", "r1", "scores", 8, classes, 3, 1, seed + 5, inits)
    return make_model(nodes, [("x", [1, 3, size, size])], ["scores"], inits, name="seg")


def ctc_recognizer(n_chars: int = 5, height: int = 8, width: int = 32, seed: int = 7):
    """(1, 3, height, width) → (1, width/2, 1 + n_chars) ``logits`` (T = width / 2)."""
    inits: dict = {}
    k = n_chars + 1
    nodes = _conv("c1", "x", "c1", 3, 8, 3, 2, seed, inits)
    nodes += [helper.make_node("Relu", ["c1"], ["r1"])]
    nodes += _conv("c2", "r1", "c2", 8, k, 3, 1, seed + 5, inits)
    inits["axes"] = np.array([2], np.int64)
    nodes += [helper.make_node("ReduceMean", ["c2"], ["m"], axes=[2], keepdims=0),
              helper.make_node("Transpose", ["m"], ["logits"], perm=[0, 2, 1])]
    del inits["axes"]
    return make_model(nodes, [("x", [1, 3, height, width])], ["logits"], inits, name="ctc")
