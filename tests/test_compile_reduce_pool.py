"""simplify.reduce_to_global_pool: ReduceMean / ReduceMax over the spatial axes of NCHW run
as GlobalAveragePool / GlobalMaxPool on the DV700 (ONNX GlobalAveragePool-1 and ReduceMean-13/-18
define the same mean); compiled, run on sim://, compared with onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from dvsdk.compiler.build import compile
from dvsdk.runtime.net import Net

from .compile_harness import SIM, ort_reference, run_case


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


_ALL_REDUCE = ("ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL2 ReduceSumSquare "
               "ReduceL1 ReduceLogSum ReduceLogSumExp").split()


@pytest.mark.parametrize("op", _ALL_REDUCE)
def test_no_axes_with_noop_is_the_element_wise_part_as_onnxruntime(op):
    """opset 18, ``noop_with_empty_axes=1`` and no axes: nothing is reduced, but ReduceL2
    and ReduceL1 give |x|, ReduceSumSquare x², ReduceLogSum log x (onnxruntime and the ONNX
    reference agree; dvsdk gave x itself for all ten)."""
    x = np.random.default_rng(3).uniform(0.25, 3, (1, 2, 3, 4)).astype(np.float32)
    x *= np.where(np.random.default_rng(4).random(x.shape) < 0.5, -1, 1).astype(np.float32)
    node = helper.make_node(op, ["x", "axes"], ["y"], noop_with_empty_axes=1)
    graph = helper.make_graph(
        [node], "noop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array([], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (ref,) = ort_reference(model, {"x": x})
    with Net(compile(model, golden=False), SIM) as net:
        (got,) = net.run(x).values()
    assert got.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.nanmax(np.abs(got - ref)) <= 1e-6 * np.nanmax(np.abs(ref))
