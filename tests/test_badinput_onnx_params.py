"""Adversarial ONNX op parameters: each is refused with a ModelError naming the op's
attribute (or input), the value and the limit, never a KeyError, IndexError,
ZeroDivisionError or ValueError from inside shape inference, lowering or the golden run
(dvsdk/compiler/fold_params.py; the rules are ONNX's operator definitions)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.errors import ModelError


def _model(node, inits=(), outputs=("y",), opset=13):
    g = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def _i64(*v):
    return np.array(v, np.int64)


CASES = {
    # name: (model, field suffix, value)
    "maxpool without kernel_shape": (
        _model(helper.make_node("MaxPool", ["x"], ["y"])), "kernel_shape", None),
    "DepthToSpace blocksize 0": (
        _model(helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=0)), "blocksize", 0),
    "SpaceToDepth blocksize -2": (
        _model(helper.make_node("SpaceToDepth", ["x"], ["y"], blocksize=-2)), "blocksize", -2),
    "Pad of 3 values for rank 4": (
        _model(helper.make_node("Pad", ["x", "p"], ["y"]), [("p", _i64(0, 0, 1))]),
        "pads", [0, 0, 1]),
    "Slice step 0": (
        _model(helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),
               [("s", _i64(0)), ("e", _i64(4)), ("a", _i64(2)), ("st", _i64(0))]),
        "steps", [0]),
    "Slice starts and ends of different lengths": (
        _model(helper.make_node("Slice", ["x", "s", "e"], ["y"]),
               [("s", _i64(0, 0)), ("e", _i64(4))]), "ends", [4]),
    "Slice axis 9 of rank 4": (
        _model(helper.make_node("Slice", ["x", "s", "e", "a"], ["y"]),
               [("s", _i64(0)), ("e", _i64(4)), ("a", _i64(9))]), "axes", [9]),
    "Resize NaN scale": (
        _model(helper.make_node("Resize", ["x", "", "sc"], ["y"]),
               [("sc", np.array([1, 1, np.nan, 2], np.float32))]), "scales", None),
    "Resize 3 scales for rank 4": (
        _model(helper.make_node("Resize", ["x", "", "sc"], ["y"]),
               [("sc", np.array([1, 2, 2], np.float32))]), "scales", [1.0, 2.0, 2.0]),
    "BatchNormalization 3 values for 1 channel": (
        _model(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]),
               [(k, np.ones(3, np.float32)) for k in "sbmv"]), "s", (3,)),
    "Conv SAME_UPPER with 1 stride for 2 axes": (
        _model(helper.make_node("Conv", ["x", "w"], ["y"], strides=[2], auto_pad="SAME_UPPER"),
               [("w", np.ones((2, 1, 3, 3), np.float32))]), "strides", [2]),
    "ConvTranspose with 3 pads": (
        _model(helper.make_node("ConvTranspose", ["x", "w"], ["y"], pads=[1, 1, 1]),
               [("w", np.ones((1, 2, 3, 3), np.float32))]), "pads", [1, 1, 1]),
    "ConvTranspose with a negative pad": (
        _model(helper.make_node("ConvTranspose", ["x", "w"], ["y"], pads=[1, 1, -3, 1]),
               [("w", np.ones((1, 2, 3, 3), np.float32))]), "pads", [1, 1, -3, 1]),
    "MaxPool SAME_LOWER with 3 dilations": (
        _model(helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2],
                                dilations=[1, 1, 1], auto_pad="SAME_LOWER")),
        "dilations", [1, 1, 1]),
    "Split num_outputs 0": (
        _model(helper.make_node("Split", ["x"], ["a", "b"], axis=2, num_outputs=0),
               outputs=("a", "b"), opset=18), "num_outputs", 0),
    "InstanceNormalization 3 values for 1 channel": (
        _model(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]),
               [(k, np.ones(3, np.float32)) for k in "sb"]), "s", (3,)),
    # axes out of range were taken modulo the rank, and unknown auto_pads compiled
    "ReduceMean axis 9 of rank 4": (
        _model(helper.make_node("ReduceMean", ["x"], ["y"], axes=[9])), "axes", [9]),
    "ReduceSum axis -5 of rank 4 (opset 13 input)": (
        _model(helper.make_node("ReduceSum", ["x", "a"], ["y"]), [("a", _i64(-5))]),
        "axes", [-5]),
    "Unsqueeze axis 9 (output rank 5)": (
        _model(helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [("a", _i64(9))]),
        "axes", [9]),
    "Unsqueeze the same axis twice": (
        _model(helper.make_node("Unsqueeze", ["x", "a"], ["y"]), [("a", _i64(0, -6))]),
        "axes", [0, -6]),
    "Squeeze axis 4 of rank 4": (
        _model(helper.make_node("Squeeze", ["x", "a"], ["y"]), [("a", _i64(4))]),
        "axes", [4]),
    "Softmax axis 4 of rank 4": (
        _model(helper.make_node("Softmax", ["x"], ["y"], axis=4)), "axis", 4),
    "Flatten axis 5 of rank 4": (
        _model(helper.make_node("Flatten", ["x"], ["y"], axis=5)), "axis", 5),
    "Conv auto_pad BOGUS": (
        _model(helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="BOGUS"),
               [("w", np.ones((2, 1, 3, 3), np.float32))]), "auto_pad", "BOGUS"),
    "Resize sizes of 0": (
        _model(helper.make_node("Resize", ["x", "", "", "sz"], ["y"]),
               [("sz", _i64(1, 1, 0, 4))]), "sizes", [1, 1, 0, 4]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_op_parameter_is_a_model_error(name, tmp_path):
    model, field, value = CASES[name]
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    out = tmp_path / "m.bin"
    with pytest.raises(ModelError) as info:
        dvsdk.compile(str(path), str(out))
    assert info.value.field.endswith("." + field), info.value.field
    if value is not None:
        assert info.value.value == value
    assert not out.exists() and list(tmp_path.iterdir()) == [path]   # nothing half-written


def test_nan_scale_named_in_the_error(tmp_path):
    model = CASES["Resize NaN scale"][0]
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelError) as info:
        dvsdk.compile(str(tmp_path / "m.onnx"))
    assert np.isnan(info.value.value[2]) and info.value.limit == "> 0"


def test_conv_with_no_filters_is_refused(tmp_path):
    """A (0, 1, 3, 3) weight makes a 0-channel output: refused at compile time (it divided
    by zero in the golden run's board model)."""
    model = _model(helper.make_node("Conv", ["x", "w"], ["y"]),
                   [("w", np.ones((0, 1, 3, 3), np.float32))])
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(ModelError) as info:
        dvsdk.compile(str(tmp_path / "m.onnx"))
    assert info.value.value == (1, 0, 6, 6)


def test_valid_parameters_still_compile_and_match_numpy(tmp_path):
    """The checks refuse only what breaks the definition: a Slice with a negative step and
    a Pad of 8 values compile and give numpy's result."""
    g = helper.make_graph(
        [helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["t"]),
         helper.make_node("Pad", ["t", "p"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in
         [("s", _i64(-1)), ("e", _i64(-9)), ("a", _i64(3)), ("st", _i64(-2)),
          ("p", _i64(0, 0, 1, 0, 0, 0, 0, 2))]])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              tmp_path / "m.onnx")
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8)
    want = np.pad(x[..., ::-2], [(0, 0), (0, 0), (1, 0), (0, 2)])
    with dvsdk.load(dvsdk.compile(str(tmp_path / "m.onnx"), golden=False), "sim://") as net:
        got = net.run(x)["y"]
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("auto_pad", ["", "NOTSET", "VALID", "SAME_UPPER"])
def test_known_and_empty_auto_pads_still_compile(tmp_path, auto_pad):
    """An empty auto_pad reads as NOTSET (onnxruntime runs such a model as NOTSET)."""
    model = _model(helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad),
                   [("w", np.full((2, 1, 3, 3), 0.1, np.float32))])
    onnx.save(model, tmp_path / "m.onnx")
    x = np.arange(64, dtype=np.float32).reshape(1, 1, 8, 8) / 64
    with dvsdk.load(dvsdk.compile(str(tmp_path / "m.onnx"), golden=False), "sim://") as net:
        got = net.run(x)["y"]
    side = 8 if auto_pad.startswith("SAME") else 6
    assert got.shape == (1, 2, side, side)
