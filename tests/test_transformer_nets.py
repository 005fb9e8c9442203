"""Transformer models end to end on sim:// against onnxruntime (issue 28 item 5).

A ViT-tiny-like classifier and an SVTR-like recognizer (tests/transformer_nets.py, random
weights with a fixed seed) compile, run with their LayerNorms, attention products,
softmaxes and GELUs on the CPU and their projections, MLPs and patch embedding on the
DV700, and agree with onnxruntime within the FP16 level of a few units of rounding
(measured: ViT 5.3e-4, SVTR 1.8e-3 of the output range); the CPU steps call no BLAS.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from dvsdk.compiler.build import compile
from dvsdk.runtime.net import Net

from .compile_harness import SIM, ort_reference
from .realistic_nets import calibration_image
from .transformer_nets import TRANSFORMERS

#: name: (linear layers with constant weights, error bound / output range)
CASES = {"vit_tiny": (4 * 4, 5e-3), "svtr_tiny": (2 * 4 + 1, 1e-2)}


def _input(model) -> tuple[str, np.ndarray]:
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return inp.name, calibration_image(tuple(shape[2:]), 3)


@pytest.mark.parametrize("name", list(CASES))
def test_transformer_agrees_with_onnxruntime(name, monkeypatch):
    linears, bound = CASES[name]
    model = TRANSFORMERS[name]()
    feed_name, x = _input(model)
    ref = ort_reference(model, {feed_name: x})[0]
    net = compile(model, golden=False)
    hw = collections.Counter(r["type"] for r in net.meta["report"] if r["where"] == "hw")
    cpu = collections.Counter(r["type"] for r in net.meta["report"] if r["where"] == "cpu")
    assert hw["Conv"] >= linears          # every projection and MLP layer on the DV700
    assert "Conv" not in cpu and "Gemm" not in cpu
    assert cpu["LayerNormalization"] and cpu["Softmax"] and cpu["MatMul"]

    def trap(*args, **kwargs):
        raise AssertionError("BLAS was called")

    with Net(net, SIM) as dev:
        for blas in ("matmul", "dot", "vdot", "inner", "tensordot", "einsum"):
            monkeypatch.setattr(np, blas, trap)
        got = np.asarray(list(dev.run(x).values())[0], np.float32)
        monkeypatch.undo()
    assert got.shape == ref.shape
    assert float(np.abs(got - ref).max()) <= bound * float(np.ptp(ref))
    assert np.array_equal(got.argmax(-1), ref.argmax(-1))


def _patch_model(k: int, pads: int = 0, size: int = 32):
    rng = np.random.default_rng(k)
    w = (rng.standard_normal((24, 3, k, k)) / (3 * k * k) ** 0.5).astype(np.float32)
    b = rng.normal(0, 0.1, 24).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], kernel_shape=[k, k],
                          strides=[k, k], pads=[pads] * 4)], "patch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, size, size))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("k", [8, 16])
def test_a_patch_embedding_larger_than_7x7_runs_on_the_dv700(k):
    """Conv k x k / k (no padding) -> SpaceToDepth on the host + a 1x1 conv on the device,
    within the FP16 level of onnxruntime."""
    model = _patch_model(k)
    x = calibration_image((32, 32), 4)
    ref = ort_reference(model, {"x": x})[0]
    net = compile(model, golden=False)
    program = [(s["kind"], s.get("op")) for s in net.meta["program"]]
    assert program == [("cpu", "SpaceToDepth"), ("hw", None)]
    with Net(net, SIM) as dev:
        got = dev.run(x)["y"]
    assert got.shape == ref.shape == (1, 24, 32 // k, 32 // k)
    assert float(np.abs(got - ref).max()) <= 2.0 ** -8 * float(np.abs(ref).max())


def test_a_padded_large_conv_stays_on_the_cpu():
    net = compile(_patch_model(8, pads=1, size=30), golden=False)
    report = [r for r in net.meta["report"] if r["type"] == "Conv"]
    assert report[0]["where"] == "cpu" and "larger than 7x7" in report[0]["detail"]
