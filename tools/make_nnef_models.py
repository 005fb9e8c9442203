#!/usr/bin/env python3
"""Generate the NNEF test models in ``tests/data/nnef/`` with the real converter.

Each model is a small ONNX graph built with ``onnx.helper`` (seeded random weights, opset 13),
saved as ``<name>.onnx`` (the twin onnxruntime runs as the reference) and converted by the
Khronos NNEF-Tools converter::

    python -m nnef_tools.convert --input-format onnx --output-format nnef \\
        --input-model <name>.onnx --output-model <name>.nnef --keep-io-names

into ``<name>.nnef/`` (``graph.nnef`` + one ``.dat`` per weight).  ``digits`` is the SDK's
trained example CNN (``examples/models/digits.onnx``) converted the same way.  Together the
models cover the NNEF ops the converter emits for the frontend's op list; ops it never emits
are tested with hand-written ``graph.nnef`` texts in ``tests/test_frontend_nnef.py``.

Needs ``pip install onnx nnef-tools`` (development only; the tests read the checked-in
files).  Usage::

    python3 tools/make_nnef_models.py            # rewrite tests/data/nnef/
    python3 tools/make_nnef_models.py --out DIR  # somewhere else
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
OPSET = 13


class _Net:
    """A tiny onnx.helper graph builder with seeded weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def const(self, value, hint: str = "c") -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, *shape: int, scale: float = 0.5) -> str:
        w = (self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(w, "w")

    def op(self, op_type: str, inputs: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int, group: int = 1, bias: bool = True,
             **attrs) -> str:
        ins = [x, self.weight(cout, cin // group, k, k, scale=1.0 / np.sqrt(cin // group * k * k))]
        if bias:
            ins.append(self.weight(cout, scale=0.1))
        return self.op("Conv", ins, group=group, **attrs)

    def model(self, name: str, inputs: dict[str, list[int]],
              outputs: dict[str, str], out_shapes: dict[str, list[int]]) -> onnx.ModelProto:
        for final, tensor in outputs.items():
            self.nodes.append(helper.make_node("Identity", [tensor], [final], name=final))
        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, out_shapes[k])
             for k in outputs], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="dvsdk make_nnef_models")
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        return m


def convs() -> onnx.ModelProto:
    """conv (bias / none, groups, depth-wise, dilation, auto and asymmetric padding), deconv,
    batch_normalization, relu, leaky_relu, prelu, elu, clamp, sigmoid, tanh."""
    b = _Net(1)
    x = b.op("Relu", [b.conv("x", 3, 8, 3, pads=[1, 1, 1, 1])])
    x = b.op("LeakyRelu", [b.conv(x, 8, 8, 3, group=2, bias=False, dilations=[2, 2],
                                  pads=[2, 2, 2, 2])], alpha=0.1)
    x = b.conv(x, 8, 8, 3, group=8, strides=[2, 2], auto_pad="SAME_UPPER")
    x = b.op("PRelu", [x, b.const(np.linspace(0.05, 0.4, 8, dtype=np.float32).reshape(8, 1, 1))])
    bn = [b.const((1 + 0.2 * b.rng.standard_normal(8)).astype(np.float32)),
          b.weight(8, scale=0.1), b.weight(8, scale=0.1),
          b.const((0.5 + b.rng.random(8)).astype(np.float32))]
    x = b.op("Elu", [b.op("BatchNormalization", [b.conv(x, 8, 8, 1), *bn], epsilon=1e-3)])
    x = b.op("Clip", [x, b.const(np.float32(0.0)), b.const(np.float32(6.0))])
    x = b.op("Sigmoid", [b.op("ConvTranspose", [x, b.weight(8, 4, 4, 4, scale=0.2),
                                                b.weight(4, scale=0.1)],
                              strides=[2, 2], pads=[1, 1, 1, 1])])
    y = b.op("Tanh", [b.conv(x, 4, 4, 2, pads=[0, 0, 1, 1])])
    return b.model("convs", {"x": [1, 3, 12, 12]}, {"y": y}, {"y": [1, 4, 12, 12]})


def pools() -> onnx.ModelProto:
    """max_pool (border ignore), avg_pool (border ignore / constant), mean_reduce and
    max_reduce over H, W (global pools) and over channels."""
    b = _Net(2)
    x = b.conv("x", 4, 8, 3, pads=[1, 1, 1, 1])
    y1 = b.op("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y2 = b.op("AveragePool", [x], kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=0)
    y3 = b.op("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
              count_include_pad=1)
    y4 = b.op("Add", [b.op("GlobalAveragePool", [x]),
                      b.op("ReduceMax", [x], axes=[2, 3], keepdims=1)])
    y5 = b.op("ReduceMean", [x], axes=[1], keepdims=1)
    return b.model("pools", {"x": [1, 4, 10, 10]},
                   {"y1": y1, "y2": y2, "y3": y3, "y4": y4, "y5": y5},
                   {"y1": [1, 8, 5, 5], "y2": [1, 8, 10, 10], "y3": [1, 8, 5, 5],
                    "y4": [1, 8, 1, 1], "y5": [1, 1, 10, 10]})


def eltwise() -> onnx.ModelProto:
    """add / sub / mul / div with constants and with tensors, tanh, sigmoid, clamp,
    batch_normalization, local_response_normalization, softmax; two inputs."""
    b = _Net(3)
    a = b.op("Add", ["x", "x2"])
    s = b.op("Sub", [a, b.const(np.float32(0.5))])
    m = b.op("Mul", [s, b.const(np.linspace(0.5, 1.5, 8, dtype=np.float32).reshape(1, 8, 1, 1))])
    d = b.op("Div", [m, b.const(np.float32(2.0))])
    t = b.op("Mul", [b.op("Tanh", [d]), b.op("Sigmoid", ["x2"])])
    q = b.op("Div", [b.op("Sub", [t, "x"]), b.op("Add", [b.op("Abs", ["x2"]),
                                                         b.const(np.float32(1.0))])])
    bn = [b.const((1 + 0.2 * b.rng.standard_normal(8)).astype(np.float32)),
          b.weight(8, scale=0.1), b.weight(8, scale=0.1),
          b.const((0.5 + b.rng.random(8)).astype(np.float32))]
    q = b.op("BatchNormalization", [q, *bn], epsilon=1e-5)
    q = b.op("LRN", [q], size=3, alpha=0.3, beta=0.75, bias=1.5)
    y1 = b.op("Softmax", [q], axis=1)
    y2 = b.op("Clip", ["x", b.const(np.float32(-0.5)), b.const(np.float32(0.75))])
    return b.model("eltwise", {"x": [1, 8, 6, 6], "x2": [1, 8, 6, 6]}, {"y1": y1, "y2": y2},
                   {"y1": [1, 8, 6, 6], "y2": [1, 8, 6, 6]})


def shapes() -> onnx.ModelProto:
    """concat, split, pad (constant, reflect, replicate), transpose, reshape, unsqueeze,
    squeeze, linear (flatten + Gemm), matmul with a constant weight, softmax."""
    b = _Net(4)
    cat = b.op("Concat", ["x", b.conv("x", 4, 4, 1)], axis=1)
    s1, s2 = b.op("Split", [cat, b.const(np.array([4, 4], np.int64))], n_out=2, axis=1)
    p1 = b.op("Pad", [s1, b.const(np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))])
    p2 = b.op("Pad", [s2, b.const(np.array([0, 0, 2, 0, 0, 0, 0, 2], np.int64))], mode="reflect")
    p3 = b.op("Pad", [s2, b.const(np.array([0, 0, 0, 1, 0, 0, 2, 1], np.int64))], mode="edge")
    x = b.op("Add", [b.op("Add", [p1, b.op("Transpose", [p2], perm=[0, 1, 3, 2])]), p3])
    x = b.op("Reshape", [x, b.const(np.array([1, 4, 36], np.int64))])
    x = b.op("Squeeze", [b.op("Unsqueeze", [x, b.const(np.array([3], np.int64))]),
                         b.const(np.array([3], np.int64))])
    x = b.op("Gemm", [b.op("Flatten", [x], axis=1), b.weight(12, 144, scale=0.1),
                      b.weight(12, scale=0.1)], transB=1)
    y = b.op("Softmax", [b.op("MatMul", [b.op("Relu", [x]), b.weight(12, 6, scale=0.3)])],
             axis=1)
    return b.model("shapes", {"x": [1, 4, 4, 4]}, {"y": y}, {"y": [1, 6]})


def upsample() -> onnx.ModelProto:
    """nearest_upsample and multilinear_upsample (symmetric, asymmetric and aligned, border
    replicate) from ONNX Resize."""
    b = _Net(5)
    x = b.conv("x", 4, 4, 3, pads=[1, 1, 1, 1])
    sc = b.const(np.array([1, 1, 2, 2], np.float32))
    roi = b.const(np.zeros(0, np.float32))
    n = b.op("Resize", [x, roi, sc], mode="nearest", nearest_mode="floor",
             coordinate_transformation_mode="asymmetric")
    lin = b.op("Resize", [x, roi, sc], mode="linear")
    asym = b.op("Resize", [x, roi, sc], mode="linear",
                coordinate_transformation_mode="asymmetric")
    al = b.op("Resize", [x, roi, sc], mode="linear",
              coordinate_transformation_mode="align_corners")
    y = b.op("Concat", [n, lin, asym, al], axis=1)
    return b.model("upsample", {"x": [1, 4, 5, 5]}, {"y": y}, {"y": [1, 16, 10, 10]})


MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "convs": convs, "pools": pools, "eltwise": eltwise, "shapes": shapes,
    "upsample": upsample,
}


def convert(onnx_path: Path, nnef_path: Path) -> None:
    if nnef_path.exists():
        shutil.rmtree(nnef_path)
    cmd = [sys.executable, "-m", "nnef_tools.convert", "--input-format", "onnx",
           "--output-format", "nnef", "--input-model", str(onnx_path),
           "--output-model", str(nnef_path), "--keep-io-names"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0 or not (nnef_path / "graph.nnef").is_file():
        raise SystemExit(f"nnef_tools.convert failed on {onnx_path}:\n{proc.stdout}\n"
                         f"{proc.stderr}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "nnef")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in MODELS.items():
        path = args.out / f"{name}.onnx"
        onnx.save(build(), str(path))
        convert(path, args.out / f"{name}.nnef")
        print(f"wrote {path} and {name}.nnef/")
    convert(ROOT / "examples" / "models" / "digits.onnx", args.out / "digits.nnef")
    print("wrote digits.nnef/ (from examples/models/digits.onnx)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
