"""simplify.reduce_to_global_pool: ReduceMean / ReduceMax over the spatial axes of NCHW run
as GlobalAveragePool / GlobalMaxPool on the DV700 (ONNX GlobalAveragePool-1 and ReduceMean-13/-18
define the same mean); compiled, run on sim://, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from .compile_harness import run_case


def _model(op: str, axes: list[int], keepdims: int, opset: int) -> onnx.ModelProto:
    w = np.random.default_rng(3).standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
    inits = [onnx.numpy_helper.from_array(w, "w")]
    ins = ["c"]
    attrs = {"keepdims": keepdims}
    if opset >= 18:
        inits.append(onnx.numpy_helper.from_array(np.asarray(axes, np.int64), "axes"))
        ins.append("axes")
    else:
        attrs["axes"] = axes
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node(op, ins, ["y"], **attrs)]
    g = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, 3, 10, 12])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("op,axes,keepdims,opset,pool", [
    ("ReduceMean", [2, 3], 1, 13, "GlobalAveragePool"),
    ("ReduceMean", [-1, -2], 0, 18, "GlobalAveragePool"),
    ("ReduceMax", [3, 2], 1, 18, "GlobalMaxPool"),
    ("ReduceMax", [2, 3], 0, 13, "GlobalMaxPool"),
    ("ReduceMean", [1], 1, 13, None),        # not the spatial axes: stays a CPU ReduceMean
    ("ReduceMean", [2], 1, 18, None),
])
def test_spatial_reduce_runs_as_a_global_pool(op, axes, keepdims, opset, pool):
    net, _ = run_case(_model(op, axes, keepdims, opset))
    placed = {r["type"]: r["where"] for r in net.meta["report"]}
    if pool is None:
        assert placed[op] == "cpu" and "GlobalAveragePool" not in placed
    else:
        assert op not in placed and placed[pool] == "hw", placed
