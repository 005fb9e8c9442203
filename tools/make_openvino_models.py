#!/usr/bin/env python3
"""Regenerate the OpenVINO IR v11 test files in ``tests/data/openvino/`` with OpenVINO itself.

Every file is written by ``openvino.save_model`` (the real tool), from either

* a small ONNX model built here with ``onnx.helper`` (seeded random weights) and converted by
  ``openvino.convert_model``; the ONNX twin is saved beside it, or
* a graph built with OpenVINO's own opset API, for layers that converting ONNX does not
  produce (``StridedSlice`` masks, ``Interpolate``-1/-4, ``BatchNormInference``-1/-5,
  ``ShapeOf`` subgraphs on a dynamic batch, ``ConvolutionBackpropData`` with ``output_shape``,
  ``HSigmoid``, ``MVN``, ...),

plus the project's trained CNN ``examples/models/digits.onnx``, converted twice: FP32 weights
and OpenVINO's default FP16-compressed weights (``Const`` f16 + ``Convert``).

Usage: ``python3 tools/make_openvino_models.py [--out DIR]`` (needs ``pip install -e .[dev]``).
The tests never run this; they read the checked-in files and use OpenVINO's runtime as the
reference.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "openvino"


class OnnxNet:
    """A tiny onnx.helper graph builder with seeded weights."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}

    def w(self, *shape: int, scale: float = 0.5) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def c(self, name: str, value) -> str:
        self.inits[name] = np.asarray(value)
        return name

    def n(self, op: str, ins: list[str], out: str | list[str], **attrs) -> str:
        from onnx import helper

        outs = [out] if isinstance(out, str) else out
        self.nodes.append(helper.make_node(op, ins, outs, name=outs[0], **attrs))
        return outs[0]

    def model(self, name: str, inputs: dict[str, list], outputs: list[str], opset: int = 13):
        from onnx import TensorProto, helper, numpy_helper

        g = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in inputs.items()],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="dvsdk tools/make_openvino_models.py")
        m.ir_version = 8
        return m


def onnx_convs():
    """Conv family and activations: Convolution, GroupConvolution (group 2, depthwise),
    ConvolutionBackpropData, PReLU, Clamp, Elu, HSwish, HardSigmoid, Swish, Sigmoid, Tanh,
    Add/Subtract/Multiply with broadcast (BatchNormalization folds into the conv)."""
    m = OnnxNet(11)
    y = m.n("Conv", ["x", m.c("w1", m.w(8, 3, 3, 3)), m.c("b1", m.w(8))], "c1", pads=[1] * 4)
    y = m.n("BatchNormalization", [y, m.c("g", m.w(8) + 1), m.c("be", m.w(8)),
                                   m.c("mu", m.w(8)), m.c("var", np.abs(m.w(8)) + 0.5)], "bn1")
    y = m.n("Relu", [y], "r1")
    y = m.n("Conv", [y, m.c("w2", m.w(8, 4, 3, 3))], "c2", pads=[1] * 4, strides=[2, 2], group=2)
    y = m.n("PRelu", [y, m.c("slope", m.w(8, 1, 1))], "p2")
    y = m.n("Conv", [y, m.c("w3", m.w(8, 1, 3, 3)), m.c("b3", m.w(8))], "c3", pads=[1] * 4,
            group=8)
    y = m.n("Clip", [y, m.c("lo", np.float32(0)), m.c("hi", np.float32(6))], "relu6")
    y = m.n("ConvTranspose", [y, m.c("w4", m.w(8, 4, 2, 2)), m.c("b4", m.w(4))], "ct4",
            strides=[2, 2])
    y = m.n("Mul", [y, m.c("k4", m.w(1, 4, 1, 1))], "scale4")
    y = m.n("Sub", [y, m.c("k5", m.w(1, 4, 1, 1))], "shift4")
    y = m.n("Elu", [y], "elu4", alpha=0.8)
    a = m.n("HardSwish", [y], "hswish")
    s = m.n("Sigmoid", [y], "sig")
    t = m.n("Tanh", [y], "tanh")
    h = m.n("HardSigmoid", [y], "hsig", alpha=1 / 6, beta=0.5)
    lr = m.n("LeakyRelu", [y], "leaky", alpha=0.1)
    sw = m.n("Mul", [y, m.n("Sigmoid", [y], "sig2")], "swish")
    u = m.n("Mul", [m.n("Add", [a, s], "sum1"), m.n("Sub", [t, h], "diff1")], "prod1")
    y = m.n("Add", [m.n("Add", [u, lr], "sum2"), sw], "out")
    return m.model("convs", {"x": [1, 3, 12, 12]}, ["out"])


def onnx_pools():
    """MaxPool (ceil), AvgPool (exclude-pad true/false), Interpolate-11 (nearest scales,
    linear sizes, asymmetric/floor), Concat, ReduceMean/ReduceMax, SoftMax; two outputs."""
    m = OnnxNet(12)
    a = m.n("MaxPool", ["x"], "mp", kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    b = m.n("AveragePool", ["x"], "ap", kernel_shape=[3, 3], pads=[1] * 4, count_include_pad=0)
    b = m.n("AveragePool", [b], "ap2", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4,
            count_include_pad=1)
    c = m.n("Add", [a, b], "ab")
    up = m.n("Resize", [c, "", m.c("sc", np.array([1, 1, 2, 2], np.float32))], "up",
             mode="nearest")
    lin = m.n("Resize", [c, "", "", m.c("sz", np.array([1, 4, 10, 10], np.int64))], "lin",
              mode="linear")
    up3 = m.n("Resize", [c, "", m.c("sc3", np.array([1, 1, 2, 2], np.float32))], "up3",
              mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    cat = m.n("Concat", [up, lin, up3], "cat", axis=1)
    gap = m.n("GlobalAveragePool", [cat], "gap")
    rmax = m.n("ReduceMax", [cat], "rmax", axes=[2, 3], keepdims=1)
    m.n("ReduceMean", [cat], "rmean", axes=[1], keepdims=0)
    m.n("Softmax", [m.n("Add", [gap, rmax], "s")], "probs", axis=1)
    return m.model("pools", {"x": [1, 4, 10, 10]}, ["probs", "rmean"])


def onnx_shapes():
    """VariadicSplit, Split, Slice-8, Transpose, Reshape, Concat, MatMul (transpose_b),
    NormalizeL2, SoftMax on the last axis."""
    m = OnnxNet(13)
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    m.n("Split", ["x", m.c("splits", i64(2, 4))], ["sp1", "sp2"], axis=1)
    q = m.n("Slice", ["sp2", m.c("st", i64(1, 0)), m.c("en", i64(4, 3)), m.c("ax", i64(1, 3))],
            "sl")
    q = m.n("Transpose", [q], "tr", perm=[0, 2, 3, 1])
    q = m.n("Reshape", [q, m.c("shp", i64(1, 4, 9))], "rs")
    m.n("Split", ["sp1"], ["h1", "h2"], axis=2, num_outputs=2)
    e = m.n("Concat", ["h2", "h1"], "cat", axis=3)
    f = m.n("Concat", [m.n("Flatten", [e], "fl", axis=1), m.n("Flatten", [q], "fl2", axis=1)],
            "fc_in", axis=1)
    g = m.n("Gemm", [f, m.c("wfc", m.w(10, 68)), m.c("bfc", m.w(10))], "fc", transB=1)
    m.n("LpNormalization", [g], "l2", axis=1, p=2)
    m.n("Softmax", [m.n("MatMul", [f, m.c("wmm", m.w(68, 5))], "mm")], "sm", axis=-1)
    return m.model("shapes", {"x": [1, 6, 4, 4]}, ["l2", "sm"], opset=18)


def onnx_dynbatch():
    """A free batch dimension ("?" in the IR): Parameter with -1, Reshape special_zero."""
    m = OnnxNet(14)
    y = m.n("Relu", [m.n("Conv", ["x", m.c("w", m.w(4, 3, 3, 3))], "c", pads=[1] * 4)], "r")
    sh = m.n("Shape", [y], "sh")
    b = m.n("Gather", [sh, m.c("i0", np.array([0], np.int64))], "b", axis=0)
    cc = m.n("Concat", [b, m.c("m1", np.array([-1], np.int64))], "cc", axis=0)
    y = m.n("Reshape", [y, cc], "flat")
    m.n("MatMul", [y, m.c("wm", m.w(4 * 6 * 6, 5))], "out")
    return m.model("dynbatch", {"x": ["N", 3, 6, 6]}, ["out"])


def api_layers(ov):
    """OpenVINO opset API graph: layers ONNX conversion does not write."""
    import openvino.opset1 as o1
    import openvino.opset5 as o5
    import openvino.opset13 as o13

    rng = np.random.default_rng(15)

    def w(*shape):
        return o13.constant((rng.standard_normal(shape) * 0.5).astype(np.float32))

    def i64(*v):
        return o13.constant(np.array(v, np.int64))

    x = o13.parameter([1, 4, 6, 6], np.float32, name="x")
    # BatchNormInference-1 (serialized gamma, beta, data, mean, variance) and -5
    var = o13.constant((rng.uniform(0.5, 2, 4)).astype(np.float32))
    y = o1.batch_norm_inference(x, w(4), w(4), w(4), var, 1e-3, name="bn_v1")
    y = o5.batch_norm_inference(y, w(4), w(4), w(4), var, 1e-4, name="bn_v5")
    y = o13.hsigmoid(y, name="hsig")
    y = o13.clamp(y, 0.2, 0.7, name="clamp")
    y = o13.convolution(y, w(6, 4, 3, 3), [1, 1], [1, 1], [1, 1], [1, 1], name="conv")
    # deconvolutions: output_shape, groups
    d1 = o13.convolution_backprop_data(y, w(6, 4, 3, 3), [2, 2], output_shape=i64(11, 12),
                                       name="deconv_shape")
    d2 = o13.group_convolution_backprop_data(y, w(2, 3, 2, 3, 3), [2, 2], pads_begin=[1, 1],
                                             pads_end=[0, 0], name="gdeconv")
    d1 = o13.slice(d1, i64(0, 0), i64(10, 10), i64(1, 1), i64(2, 3), name="crop")
    d2 = o13.slice(d2, i64(1, 1), i64(11, 11), i64(1, 1), i64(2, 3), name="crop2")
    y = o13.concat([d1, d2], 1, name="cat")  # 1 x 8 x 10 x 10
    y = o13.swish(y, o13.constant(np.float32(1.5)), name="swish")
    y = o13.mvn(y, i64(2, 3), True, 1e-5, "inside_sqrt", name="mvn")
    y = o13.lrn(y, i64(1), 1e-2, 0.75, 2.0, 3, name="lrn")
    y = o13.mish(y, name="mish")
    y = o13.squared_difference(y, w(1, 8, 1, 1), name="sqdiff")
    y = o13.pad(y, i64(0, 0, 1, 2), i64(0, 0, 1, 0), "reflect", name="pad")  # 12 x 12
    y = o13.maximum(y, o13.minimum(y, w(1, 1, 12, 1), name="min"), name="max")
    y = o13.divide(y, o13.constant(np.float32(1.7)), name="div")
    y = o13.depth_to_space(y, "blocks_first", 2, name="d2s")  # 1 x 2 x 24 x 24
    out = o13.reduce_sum(y, i64(1), True, name="rsum")
    return ov.Model([o13.result(out, name="out")], [x], "layers")


def api_shapes(ov):
    """Shape and resize layers: StridedSlice masks, Squeeze/Unsqueeze, Transpose, Gather,
    VariadicSplit (-1), Interpolate-1/-4, ShapeOf subgraph on a dynamic batch."""
    import openvino.opset1 as o1
    import openvino.opset8 as o8
    import openvino.opset10 as o10
    import openvino.opset13 as o13

    def i64(*v):
        return o13.constant(np.array(v, np.int64))

    x = o13.parameter([-1, 6, 5, 7], np.float32, name="x")
    # Interpolate-4 sizes (linear_onnx, align_corners) and scales (nearest)
    a4 = o10.interpolate(x, i64(9, 11), np.array([1, 1], np.float32), "linear_onnx", "sizes",
                         coordinate_transformation_mode="align_corners", axes=i64(2, 3),
                         name="interp4")
    s4 = o10.interpolate(x, i64(10, 14), np.array([2, 2], np.float32), "nearest", "scales",
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor",
                         axes=i64(2, 3), name="up4")
    u1 = o1.interpolate(x, i64(10, 14), {"axes": [2, 3], "mode": "nearest",
                                         "align_corners": False}, name="up1")
    s = o13.add(s4, u1, name="ups")  # 1 x 6 x 10 x 14
    # StridedSlice with begin/end/new-axis/shrink masks and a negative stride
    ss = o13.strided_slice(s, i64(0, 1, 0, 0, 9), i64(0, 5, 0, 0, 1), i64(1, 1, 1, 1, -2),
                           begin_mask=[1, 0, 0, 1, 0], end_mask=[1, 0, 0, 1, 0],
                           new_axis_mask=[0, 0, 1, 0, 0], shrink_axis_mask=[0, 0, 0, 0, 0],
                           name="sslice")  # 1 x 4 x 1 x 10 x 4
    ss = o13.squeeze(ss, i64(2), name="squeeze")  # 1 x 4 x 10 x 4
    sh = o13.strided_slice(s, i64(0, 2), i64(0, 3), i64(1, 1), begin_mask=[1, 0],
                           end_mask=[1, 0], shrink_axis_mask=[0, 1], name="shrink")  # 1x10x14
    sh = o13.unsqueeze(sh, i64(1), name="unsqueeze")  # 1 x 1 x 10 x 14
    t = o13.transpose(a4, i64(0, 1, 3, 2), name="transpose")  # 1 x 6 x 11 x 9
    g = o8.gather(t, i64(0, 2, 5), i64(1), name="gather")  # 1 x 3 x 11 x 9
    p1, p2 = o13.variadic_split(g, i64(2), i64(4, -1), name="vsplit").outputs()
    p = o13.concat([p2, p1], 2, name="cat")
    # ShapeOf -> Gather -> Concat -> Reshape on the free batch
    b = o8.gather(o13.shape_of(p, name="shape"), i64(0), i64(0), name="batch")
    flat = o13.reshape(p, o13.concat([b, i64(-1)], 0, name="newshape"), False, name="flat")
    mm = o13.matmul(flat, o13.constant(np.random.default_rng(16).standard_normal(
        (5, 297)).astype(np.float32)), False, True, name="fc")
    return ov.Model([o13.result(ss, name="sliced"), o13.result(sh, name="row"),
                     o13.result(mm, name="fc_out")], [x], "shapes_api")


def api_misc(ov):
    """Element-wise, reduction and data-movement layers, one output each: Selu, LogSoftmax,
    Tile, Broadcast, SpaceToDepth, GRN, unary math, ReduceMin/Prod/L2, Power, Gather-1,
    Interpolate-1 linear, Convert on activations."""
    import openvino.opset1 as o1
    import openvino.opset13 as o13

    rng = np.random.default_rng(17)
    x = o13.parameter([1, 4, 6, 6], np.float32, name="x")

    def f32(v):
        return o13.constant(np.asarray(v, np.float32))

    def i64(*v):
        return o13.constant(np.array(v, np.int64))

    outs = {
        "selu_lsm": o13.add(o13.selu(x, f32([1.6]), f32([1.05]), name="selu"),
                            o13.log_softmax(x, 1, name="logsoftmax"), name="selu_lsm"),
        "tile": o13.tile(x, i64(1, 2, 1), name="tile"),
        "bcast": o13.multiply(x, o13.broadcast(f32(rng.standard_normal((4, 1, 1))),
                                               i64(1, 4, 6, 6), name="broadcast"),
                              name="bcast"),
        "s2d": o13.space_to_depth(x, "blocks_first", 2, name="s2d"),
        "grn": o13.grn(x, 0.5, name="grn"),
        "unary": o13.add(o13.add(o13.add(o13.floor(x, name="floor"),
                                         o13.ceiling(x, name="ceil"), name="fc"),
                                 o13.add(o13.sign(x, name="sign"),
                                         o13.softsign(x, name="softsign"), name="ss"), name="u1"),
                         o13.add(o13.softplus(x, name="softplus"),
                                 o13.negative(x, name="neg"), name="sn"), name="unary"),
        "explog": o13.add(o13.sqrt(o13.exp(x, name="exp"), name="sqrt"),
                          o13.log(o13.exp(o13.abs(x, name="abs"), name="exp2"), name="log"),
                          name="explog"),
        "rmin": o13.reduce_min(x, i64(2, 3), True, name="rmin"),
        "rprod": o13.reduce_prod(x, i64(3), False, name="rprod"),
        "rl2": o13.reduce_l2(x, i64(1), True, name="rl2"),
        "power": o13.power(o13.abs(x, name="abs2"), f32(1.5), name="power"),
        "gather": o1.gather(x, i64(3, 0), i64(2), name="gather1"),
        "interp": o1.interpolate(x, i64(9, 8), {"axes": [2, 3], "mode": "linear",
                                                "align_corners": False}, name="interp1"),
        "interp_ac": o1.interpolate(x, i64(11, 11), {"axes": [2, 3], "mode": "linear",
                                                     "align_corners": True}, name="interp1ac"),
        "convert": o13.convert(o13.convert(x, "i32", name="to_i32"), "f32", name="convert"),
    }
    return ov.Model([o13.result(v, name=k) for k, v in outs.items()], [x], "misc_api")


def api_unsupported(ov):
    """Two layers dvsdk refuses (Gelu, Sin) among supported ones: one UnsupportedOps error."""
    import openvino.opset13 as o13

    x = o13.parameter([1, 2, 4, 4], np.float32, name="x")
    y = o13.gelu(o13.relu(x, name="relu"), "erf", name="gelu")
    y = o13.sin(y, name="sine")
    return ov.Model([o13.result(o13.sigmoid(y, name="sig"), name="out")], [x], "unsupported")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    import onnx
    import openvino as ov

    args.out.mkdir(parents=True, exist_ok=True)

    def save(model, name: str, fp16: bool) -> None:
        ov.save_model(model, str(args.out / f"{name}.xml"), compress_to_fp16=fp16)
        size = sum((args.out / f"{name}{s}").stat().st_size for s in (".xml", ".bin"))
        print(f"{name}.xml (+.bin): {size} bytes")

    digits = ov.convert_model(str(ROOT / "examples" / "models" / "digits.onnx"))
    save(digits, "digits_fp32", False)
    save(digits, "digits_fp16", True)
    for build, fp16 in ((onnx_convs, True), (onnx_pools, False), (onnx_shapes, True),
                        (onnx_dynbatch, True)):
        model = build()
        name = model.graph.name
        onnx.save(model, str(args.out / f"{name}.onnx"))
        save(ov.convert_model(str(args.out / f"{name}.onnx")), name, fp16)
    save(api_layers(ov), "layers_api", True)
    save(api_shapes(ov), "shapes_api", False)
    save(api_misc(ov), "misc_api", False)
    save(api_unsupported(ov), "unsupported", False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
