"""A model exported by a real framework: tests/data/torch_mbv2_tiny.onnx was written by
``torch.onnx.export`` (PyTorch 2.13, tools/export_torch_model.py) from a MobileNetV2-style
network with a dynamic batch axis and the ``x.view(x.size(0), -1)`` flatten idiom."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

import dvsdk

from .compile_harness import assert_matches, ort_reference

MODEL = Path(__file__).resolve().parent / "data" / "torch_mbv2_tiny.onnx"


def test_torch_export_compiles_runs_and_agrees_with_onnxruntime():
    model = onnx.load(str(MODEL))
    assert "pytorch" in model.producer_name.lower()
    assert {n.op_type for n in model.graph.node} >= {"Shape", "Gather", "Reshape", "Clip"}
    net = dvsdk.compile(str(MODEL))
    where = {(r["type"], r["where"]) for r in net.meta["report"]}
    assert ("Softmax", "cpu") in where
    assert {t for t, w in where if w == "cpu"} == {"Softmax"}     # everything else on the DV700
    program_ops = {s["op"] for s in net.meta["program"] if s["kind"] == "cpu"}
    assert program_ops == {"Softmax"}                             # Shape/Gather folded away
    rng = np.random.default_rng(2)
    with dvsdk.load(net, "sim://") as n:
        assert n.selftest()["passed"]
        for _ in range(3):
            x = rng.uniform(0, 1, (1, 3, 64, 64)).astype(np.float32)
            (ref,) = ort_reference(model, {"image": x})
            y = n.run({"image": x})["probs"]
            assert_matches(y, ref, what="torch export")
            assert y.argmax() == ref.argmax()
