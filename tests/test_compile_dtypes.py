"""Wrong answers and crashes that must not come back (issue 10 §3): element types, training
mode, Gemm biases, empty and non-tensor inputs.  Each test compiles a small model, runs it
on sim:// and compares with onnxruntime or numpy written here; each failed before its fix.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.cpu.dtypes import refusal
from dvsdk.cpu.ops import run_op
from dvsdk.errors import ModelError, UnsupportedOps

from .compile_harness import ort_reference, where
from .onnx_models import make_model

I64, I32, I8, F, B = (TensorProto.INT64, TensorProto.INT32, TensorProto.INT8,
                      TensorProto.FLOAT, TensorProto.BOOL)


@pytest.fixture(scope="module")
def sim():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


def run(model, feeds, sim, **options):
    net = dvsdk.compile(model, golden=options.pop("golden", False), **options)
    with dvsdk.load(net, sim) as n:
        return net, n.run(feeds)


# --------------------------------------------------------------------------- integer types
@pytest.mark.parametrize("elem", [I64, I32])
def test_integer_div_truncates_end_to_end(sim, elem) -> None:
    """[7,-7,5,3] / [2,2,3,4] is [3,-3,1,0] in ONNX; the runtime used to feed float32 and
    return [3.5, -3.5, 1.667, 0.75]."""
    dt = helper.tensor_dtype_to_np_dtype(elem)
    model = make_model([helper.make_node("Div", ["a", "b"], ["y"])],
                       [("a", (4,), elem), ("b", (4,), elem)], [("y", elem)])
    net, out = run(model, {"a": np.array([7, -7, 5, 3], dt), "b": np.array([2, 2, 3, 4], dt)},
                   sim)
    assert out["y"].dtype == dt
    np.testing.assert_array_equal(out["y"], np.array([3, -3, 1, 0], dt))
    assert net.meta["inputs"][0]["dtype"] == net.meta["outputs"][0]["dtype"] == str(dt)


def test_integer_tensors_never_go_to_the_dv700(sim) -> None:
    """A 4-D int32 Relu and per-channel Add used to be lowered to FP16 hardware runs (FP16
    cannot hold 100001); they stay on the CPU, exact."""
    c = np.arange(8, dtype=np.int32).reshape(1, 8, 1, 1)
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Add", ["r", "c"], ["y"])],
                       [("x", (1, 8, 4, 4), I32)], [("y", I32)], {"c": c})
    x = np.random.default_rng(0).integers(-200000, 200000, (1, 8, 4, 4)).astype(np.int32)
    net, out = run(model, {"x": x}, sim)
    assert [w for _, w in where(net)] == ["cpu", "cpu"]
    np.testing.assert_array_equal(out["y"], np.maximum(x, 0) + c)


def test_float_op_on_integers_is_refused_by_name() -> None:
    model = make_model([helper.make_node("Sigmoid", ["x"], ["y"], name="sig")],
                       [("x", (2, 3), I64)], [("y", I64)])
    with pytest.raises(UnsupportedOps, match=r"Sigmoid\[int64\] \(sig\)"):
        dvsdk.compile(model, golden=False)
    with pytest.raises(ModelError, match=r"Sigmoid\[int64\]"):
        run_op("Sigmoid", [np.zeros(3, np.int64)], {})
    assert refusal("And", [np.dtype(np.float32)] * 2) == "And[float32]"
    assert refusal("Div", [np.dtype(np.int8)] * 2) is None


def test_clip_int8_saturates(sim) -> None:
    """Clip on int8 without bounds or with one: 'cannot convert float infinity to integer'
    from the kernel; float attribute bounds now saturate to the type's range."""
    x = np.array([-128, -5, 0, 5, 127], np.int8)
    model = make_model([helper.make_node("Clip", ["x", "lo"], ["y"])],
                       [("x", (5,), I8)], [("y", I8)], {"lo": np.array(-3, np.int8)})
    _, out = run(model, {"x": x}, sim)
    np.testing.assert_array_equal(out["y"], np.clip(x, -3, 127))
    model = make_model([helper.make_node("Clip", ["x"], ["y"])], [("x", (5,), I8)], [("y", I8)])
    _, out = run(model, {"x": x}, sim)
    np.testing.assert_array_equal(out["y"], x)
    y = run_op("Clip", [x], {"min": -np.inf, "max": 4.0})[0]
    np.testing.assert_array_equal(y, np.minimum(x, 4))
    assert y.dtype == np.int8


def test_integer_pow_negative_exponent() -> None:
    """x ** -n truncates toward zero (numpy raises ValueError for integer negative powers)."""
    x = np.array([1, -1, -1, 2, -3, 0, 3], np.int64)
    e = np.array([-2, -3, -2, -1, -1, 2, 3], np.int64)
    np.testing.assert_array_equal(run_op("Pow", [x, e], {})[0], [1, -1, 1, 0, 0, 0, 27])


def test_integer_graph_matches_onnxruntime(sim) -> None:
    """Min/Max, ReduceMax, ArgMax, comparisons, Cast, Where and Mul on integers and bool."""
    nodes = [helper.make_node("Max", ["a", "b"], ["mx"]),
             helper.make_node("Min", ["a", "b"], ["mn"]),
             helper.make_node("Mul", ["mx", "mn"], ["prod"]),
             helper.make_node("ReduceMax", ["prod", "ax"], ["rmax"], keepdims=0),
             helper.make_node("ArgMax", ["a"], ["am"], axis=1),
             helper.make_node("Less", ["a", "b"], ["lt"]),
             helper.make_node("Where", ["lt", "a", "b"], ["wh"]),
             helper.make_node("Cast", ["wh"], ["wf"], to=F),
             helper.make_node("Cast", ["lt"], ["li"], to=I32),
             helper.make_node("ReduceMax", ["lt", "ax"], ["any"], keepdims=1)]
    model = make_model(nodes, [("a", (3, 5), I64), ("b", (3, 5), I64)],
                       [("rmax", I64), ("am", I64), ("wf", F), ("li", I32), ("any", B)],
                       {"ax": np.array([1], np.int64)}, opset=20)
    rng = np.random.default_rng(3)
    feeds = {k: rng.integers(-9, 10, (3, 5)).astype(np.int64) for k in "ab"}
    net, out = run(model, feeds, sim)
    for spec, ref in zip(net.meta["outputs"], ort_reference(model, feeds), strict=True):
        assert out[spec["name"]].dtype == ref.dtype, spec["name"]
        np.testing.assert_array_equal(out[spec["name"]], ref, err_msg=spec["name"])


# --------------------------------------------------------------------------- ops and modes
def _dropout(training) -> object:
    inits = {"r": np.array(0.5, np.float32)}
    inputs = [("x", (1, 4, 3, 3))]
    if training is None:
        inputs.append(("t", (), B))
    else:
        inits["t"] = np.array(training)
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")
    return make_model([node], inputs, ["y"], inits, opset=13)


def test_training_dropout_is_refused(sim) -> None:
    """Dropout with training_mode=True used to return its input; it drops at random."""
    for training in (True, None):  # a constant true, or decided at run time
        with pytest.raises(UnsupportedOps, match=r"Dropout\[training_mode\] \(drop\)"):
            dvsdk.compile(_dropout(training), golden=False)
    x = np.random.default_rng(1).standard_normal((1, 4, 3, 3)).astype(np.float32)
    _, out = run(_dropout(False), {"x": x}, sim)  # inference mode: the identity
    np.testing.assert_array_equal(out["y"], x)


def test_gemm_with_2d_constant_bias(sim) -> None:
    """A (3, 4) x B + C (3, 5): ValueError (broadcast) in the Gemm lowering before the CPU
    fallback was chosen."""
    rng = np.random.default_rng(2)
    inits = {"B": rng.standard_normal((5, 4)).astype(np.float32),
             "C": rng.standard_normal((3, 5)).astype(np.float32)}
    model = make_model([helper.make_node("Gemm", ["A", "B", "C"], ["y"], transB=1)],
                       [("A", (3, 4))], ["y"], inits)
    feeds = {"A": rng.standard_normal((3, 4)).astype(np.float32)}
    _, out = run(model, feeds, sim)
    np.testing.assert_allclose(out["y"], ort_reference(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_gemm_runtime_bias_is_not_dropped(sim) -> None:
    """A single-row Gemm whose C is a graph input was lowered with a zero bias."""
    rng = np.random.default_rng(4)
    model = make_model([helper.make_node("Gemm", ["A", "B", "C"], ["y"], transB=1)],
                       [("A", (1, 16)), ("C", (1, 8))], ["y"],
                       {"B": rng.standard_normal((8, 16)).astype(np.float32)})
    feeds = {"A": rng.standard_normal((1, 16)).astype(np.float32),
             "C": np.full((1, 8), 100.0, np.float32)}
    _, out = run(model, feeds, sim)
    np.testing.assert_allclose(out["y"], ort_reference(model, feeds)[0], rtol=1e-2, atol=1e-2)


def test_one_input_op_after_mul_folds(sim) -> None:
    """Mul after a one-input op (here Celu's expansion) made the affine fold index a missing
    weight input: IndexError."""
    model = make_model([helper.make_node("Relu", ["x"], ["r"]),
                        helper.make_node("Mul", ["r", "k"], ["y"])],
                       [("x", (1, 4, 2, 2))], ["y"], {"k": np.float32(3.0)})
    x = np.random.default_rng(5).standard_normal((1, 4, 2, 2)).astype(np.float32)
    _, out = run(model, {"x": x}, sim)
    np.testing.assert_allclose(out["y"], np.maximum(x, 0) * 3, rtol=1e-3)


def test_weights_beyond_fp16_run_on_the_cpu(sim) -> None:
    """Conv weights above 65504 raised WeightError out of dvsdk.compile; FP16 cannot hold
    them, so the conv runs on the CPU (float32, exact)."""
    wt = np.full((4, 4, 1, 1), 1e5, np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", (1, 4, 3, 3))],
                       ["y"], {"w": wt})
    x = np.random.default_rng(6).standard_normal((1, 4, 3, 3)).astype(np.float32)
    net, out = run(model, {"x": x}, sim)
    assert where(net) == [("Conv", "cpu")]
    assert "cannot be packed" in net.meta["report"][0]["detail"]
    np.testing.assert_allclose(out["y"], ort_reference(model, {"x": x})[0], rtol=1e-5)


# --------------------------------------------------------------------------- inputs
def test_zero_size_input_dimension_is_refused() -> None:
    """A 0 dimension became 1 at axis 0 (and a 'free dimension' elsewhere)."""
    for shape, axis in (((0, 3), 0), ((2, 0, 4), 1)):
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", shape)], ["y"])
        with pytest.raises(ModelError, match=f"zero-size dimension at axis {axis}"):
            dvsdk.compile(model, golden=False)


@pytest.mark.parametrize("kind", ["sequence", "optional"])
def test_non_tensor_input_is_refused_as_such(kind) -> None:
    """Sequence/optional inputs got "has no shape in the model; pass --input-size"."""
    tensor = helper.make_tensor_type_proto(F, [2])
    t = (helper.make_sequence_type_proto(tensor) if kind == "sequence"
         else helper.make_optional_type_proto(tensor))
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_value_info("x", t)],
                              [helper.make_value_info("y", t)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(ModelError, match=f"input 'x' is an? {kind}, not a tensor"):
        dvsdk.compile(model, golden=False)


def test_unhandled_element_types_are_named() -> None:
    model = make_model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
                       [("x", (2,))], [("y", TensorProto.BFLOAT16)])
    with pytest.raises(UnsupportedOps, match=r"Cast\[to=BFLOAT16\]"):
        dvsdk.compile(model, golden=False)
    model = make_model([helper.make_node("Identity", ["x"], ["y"])],
                       [("x", (2,), TensorProto.STRING)], [("y", TensorProto.STRING)])
    with pytest.raises(ModelError, match="STRING"):
        dvsdk.compile(model, golden=False)


def test_empty_tensor_into_a_reduction_is_refused() -> None:
    """An op that cannot reduce an empty tensor (np.max raises) is refused at compile time;
    element-wise and data-movement ops take empty tensors."""
    starts = numpy_helper.from_array(np.array([2], np.int64), "s")
    ends = numpy_helper.from_array(np.array([2], np.int64), "e")
    nodes = [helper.make_node("Slice", ["x", "s", "e"], ["t"]),
             helper.make_node("ReduceMax", ["t"], ["y"], keepdims=0, name="rmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F, [4])],
                              [helper.make_tensor_value_info("y", F, None)], [starts, ends])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ModelError, match="ReduceMax rmax"):
        dvsdk.compile(model, golden=False)
