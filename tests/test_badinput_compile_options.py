"""dvsdk.compile's options of the wrong type or range: a ModelError naming the option, not
a TypeError or ValueError from deep inside a frontend (dvsdk/compiler/build.py, Options).
``input_size`` also takes dvsdk-compile's "HxW" form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.errors import ModelError

DIGITS = str(Path(__file__).resolve().parents[1] / "examples/models/digits.onnx")


@pytest.mark.parametrize("option, value", [
    ("input_size", "0x0"), ("input_size", "HxW"), ("input_size", 7), ("input_size", (0, 4)),
    ("input_size", (8, 8, 8)), ("input_size", (8.5, 8)), ("input_size", "8x8x8"),
    ("labels", 5), ("quantize_skip", 5), ("quantize_skip", [1, 2]),
    ("ub_size", 0), ("ub_size", -5), ("ub_size", "big"), ("ub_size", True),
])
def test_bad_option_is_a_model_error(option, value, tmp_path):
    out = tmp_path / "n.bin"
    with pytest.raises(ModelError) as info:
        dvsdk.compile(DIGITS, out, **{option: value}, quantize=option == "quantize_skip")
    assert info.value.field == option
    assert info.value.value == (str(value) if option == "labels" else value)
    assert not out.exists()


def test_input_size_as_text_fixes_free_dimensions(tmp_path):
    """"6x10" is (6, 10): the free H and W of a 1x1 conv's input become 6 and 10, and the
    net computes 2 * x (numpy)."""
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "H", "W"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.full((1, 1, 1, 1), 2, np.float32), "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              tmp_path / "free.onnx")
    nf = dvsdk.compile(str(tmp_path / "free.onnx"), input_size="6x10", golden=False)
    assert nf.meta["inputs"][0]["shape"] == [1, 1, 6, 10]
    x = np.random.default_rng(0).random((1, 1, 6, 10), np.float32)
    with dvsdk.load(nf, "sim://") as net:
        np.testing.assert_allclose(net.run(x)["y"], 2 * x, rtol=1e-3)


def test_quantize_skip_from_a_generator_keeps_its_names():
    from dvsdk.compiler.build import Options

    assert Options(quantize=True, quantize_skip=(n for n in ["a", "b"])).quantize_skip == \
        ("a", "b")
