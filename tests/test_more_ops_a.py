"""Issue 28's normalization, activation, reduction and loss kernels (dvsdk/cpu/norms.py,
dvsdk/cpu/losses.py) against independent references: the ONNX reference implementation
(onnx.reference.ReferenceEvaluator, fed float64 so its own rounding stays far below ours),
onnxruntime and numpy written here; a loss net compiled and run on ``sim://``; bad
attributes refused with typed errors (the kernels and net.bin's attribute checks).

Tolerance: ``8 * eps(float32) * max|expected|`` (the conformance harness's CPU rule).
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from dvsdk.cpu.ops import KERNELS, run_op
from dvsdk.errors import ModelError

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from .single_node import TOL, node_model, ort_node  # noqa: E402
from .single_node import close as _close  # noqa: E402

_BOOL = {"IsInf", "IsNaN"}  # (their outputs are bool)


def _types(op, n_out):
    return [9] * n_out if op in _BOOL else None


def _model(op, ins, attrs, n_out, opset):
    return node_model(op, ins, attrs, n_out, opset, _types(op, n_out))


def _reference(op, ins, attrs, n_out=1, opset=23):
    """The ONNX reference implementation on float64 copies of the float inputs, rounded to
    float32 (so its float32 rounding steps do not count against ours)."""
    from onnx.reference import ReferenceEvaluator

    ins64 = [x.astype(np.float64) if x is not None and x.dtype == np.float32 else x
             for x in ins]
    m, feeds = _model(op, ins64, attrs, n_out, opset)
    out = ReferenceEvaluator(m).run(None, feeds)
    return [o.astype(np.float32) if o.dtype == np.float64 else o for o in out]


def _ort(op, ins, attrs, n_out=1, opset=13):
    return ort_node(op, ins, attrs, n_out, opset, _types(op, n_out))


rng = np.random.default_rng(28)


@pytest.fixture(autouse=True)
def _seeded(request):
    global rng
    rng = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _r(*shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------- normalizations
@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_rms_normalization_matches_the_reference(axis, eps):
    x = _r(2, 3, 5, scale=3.0)
    scale = _r(*x.shape[axis % 3:])
    attrs = {"axis": axis, "epsilon": eps}
    _close(run_op("RMSNormalization", [x, scale], attrs),
           _reference("RMSNormalization", [x, scale], attrs, opset=23), attrs)


@pytest.mark.parametrize("p", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_lp_normalization_matches_onnxruntime_and_numpy(p, axis):
    x = _r(3, 4, 5)
    x[0, 0, :] = 0  # a zero row: 0, not NaN (along the last axis)
    got = run_op("LpNormalization", [x], {"axis": axis, "p": p})
    xd = x.astype(np.float64)
    n = (np.abs(xd) if p == 1 else xd * xd).sum(axis=axis, keepdims=True)
    n = n if p == 1 else np.sqrt(n)
    want = np.where(n == 0, 0, xd / np.where(n == 0, 1, n)).astype(np.float32)
    _close(got, [want], (p, axis))
    if axis != -1:  # (onnxruntime: NaN for a zero norm)
        return
    _close(got, [np.nan_to_num(_ort("LpNormalization", [x], {"axis": axis, "p": p},
                                    opset=1)[0])], (p, axis, "ort"))


@pytest.mark.parametrize("groups", [1, 2, 4])
def test_group_normalization_matches_the_reference(groups):
    x, scale, bias = _r(3, 4, 2, 3, scale=2.0), _r(4), _r(4)
    attrs = {"num_groups": groups, "epsilon": 1e-3}
    _close(run_op("GroupNormalization", [x, scale, bias], attrs),
           _reference("GroupNormalization", [x, scale, bias], attrs, opset=21), attrs)


@pytest.mark.parametrize("axes", [None, [0, 2, 3], [1], [2, 3]])
def test_mean_variance_normalization_matches_onnxruntime(axes):
    x = _r(2, 3, 4, 5, scale=2.0) + 1
    attrs = {} if axes is None else {"axes": axes}
    _close(run_op("MeanVarianceNormalization", [x], attrs),
           _ort("MeanVarianceNormalization", [x], attrs, opset=13), attrs, tol=64 * TOL)


# --------------------------------------------------------------------------- activations
@pytest.mark.parametrize("op,attrs,opset", [
    ("Celu", {}, 12), ("Celu", {"alpha": 2.0}, 12), ("Mish", {}, 22), ("Swish", {}, 24),
    ("Swish", {"alpha": 0.5}, 24), ("ThresholdedRelu", {}, 22),
    ("ThresholdedRelu", {"alpha": 0.3}, 22), ("Shrink", {}, 9),
    ("Shrink", {"lambd": 1.5, "bias": 1.5}, 9), ("Hardmax", {}, 13),
    ("Hardmax", {"axis": 0}, 13), ("IsInf", {}, 20), ("IsInf", {"detect_positive": 0}, 20),
    ("IsInf", {"detect_negative": 0}, 20), ("IsNaN", {}, 20),
])
def test_activations_match_the_reference(op, attrs, opset):
    x = _r(3, 4, 5, scale=4.0)
    if op in ("IsInf", "IsNaN"):
        x.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, 0, -0.0, 1e38]
    _close(run_op(op, [x], attrs), _reference(op, [x], attrs, opset=opset), (op, attrs))


@pytest.mark.parametrize("op,opset", [("Celu", 12), ("Mish", 18), ("Shrink", 9),
                                      ("ThresholdedRelu", 10), ("Hardmax", 13)])
def test_activations_match_onnxruntime(op, opset):
    x = _r(4, 6, scale=5.0)
    _close(run_op(op, [x], {}), _ort(op, [x], {}, opset=opset), op)


def test_hardmax_takes_the_first_maximum_and_before_opset_13_the_2d_coercion():
    x = np.array([[[1, 3, 3], [2, 0, 2]]], np.float32)
    assert run_op("Hardmax", [x], {}).pop().tolist() == [[[0, 1, 0], [1, 0, 0]]]
    # opset 11, axis 1: the input as 1 x 6, one 1 in all of it
    got = run_op("Hardmax", [x], {"opset": 11, "axis": 1})[0]
    assert got.tolist() == [[[0, 1, 0], [0, 0, 0]]]
    _close([got], _ort("Hardmax", [x], {"axis": 1}, opset=11))


# --------------------------------------------------------------------------- reductions
@pytest.mark.parametrize("op", ["ReduceL1", "ReduceLogSum", "ReduceLogSumExp"])
@pytest.mark.parametrize("axes,keep", [(None, 1), ([1], 0), ([0, 2], 1), ([-1], 1)])
def test_reductions_match_the_reference_and_onnxruntime(op, axes, keep):
    x = _r(3, 4, 5, scale=3.0)
    if op == "ReduceLogSum":
        x = np.abs(x) + np.float32(0.1)
    ins = [x] if axes is None else [x, np.array(axes, np.int64)]
    attrs = {"keepdims": keep}
    got = run_op(op, ins, attrs)
    _close(got, _reference(op, ins, attrs, opset=18), (op, axes))
    _close(got, _ort(op, ins, attrs, opset=18), (op, axes, "ort"))


def test_reduce_l1_of_integers_is_exact_and_log_sum_exp_does_not_overflow():
    x = np.arange(-6, 6, dtype=np.int32).reshape(3, 4)
    assert run_op("ReduceL1", [x, np.array([1], np.int64)], {"keepdims": 0})[0].tolist() == \
        [18, 4, 14]
    big = np.array([[1000.0, 1000.0], [-1000.0, 0.0]], np.float32)
    got = run_op("ReduceLogSumExp", [big, np.array([1], np.int64)], {"keepdims": 0})[0]
    _close([got], [np.array([1000 + np.log(2), 0.0], np.float32)])
    assert run_op("ReduceLogSum", [big[:1], np.array([0], np.int64)], {})[0].dtype == np.float32


# --------------------------------------------------------------------------- losses
def _loss_case(shape, weight, ii):
    n, c = shape[0], shape[1]
    x = _r(*shape)
    t = rng.integers(0, c, (n, *shape[2:])).astype(np.int64)
    if ii is not None:
        t.reshape(-1)[::3] = ii
    w = _r(c) if weight else None
    return x, t, w


_LOSS_CASES = [((3, 5), False, None), ((3, 5), True, None), ((3, 5, 2), True, 1),
               ((3, 5, 2, 4), False, 2), ((2, 5, 3, 2, 2), True, -1), ((3, 5), True, 10)]


@pytest.mark.parametrize("red", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape,weight,ii", _LOSS_CASES)
def test_nll_loss_matches_the_reference_and_onnxruntime(shape, weight, ii, red):
    x, t, w = _loss_case(shape, weight, ii)
    attrs = {"reduction": red, **({} if ii is None else {"ignore_index": ii})}
    ins = [x, t] + ([w] if w is not None else [])
    got = run_op("NegativeLogLikelihoodLoss", ins, attrs)
    _close(got, _ort("NegativeLogLikelihoodLoss", ins, attrs, opset=13), attrs, tol=4 * TOL)
    if ii != -1:  # (the reference computes an unweighted mean over the ignored ones too)
        _close(got, _reference("NegativeLogLikelihoodLoss", ins, attrs, opset=22), attrs,
               tol=4 * TOL)


@pytest.mark.parametrize("red", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape,weight,ii", _LOSS_CASES)
def test_softmax_cross_entropy_loss_matches_the_reference_and_onnxruntime(shape, weight, ii,
                                                                          red):
    x, t, w = _loss_case(shape, weight, ii)
    attrs = {"reduction": red, **({} if ii is None else {"ignore_index": ii})}
    ins = [x, t] + ([w] if w is not None else [])
    got = run_op("SoftmaxCrossEntropyLoss", ins, attrs)
    _close(got, _reference("SoftmaxCrossEntropyLoss", ins, attrs, n_out=2, opset=13), attrs,
           tol=4 * TOL)
    _close(got, _ort("SoftmaxCrossEntropyLoss", ins, attrs, n_out=2, opset=13), attrs,
           tol=4 * TOL)


def test_a_loss_net_compiles_and_runs_on_sim():
    import dvsdk

    x, t, w = _loss_case((4, 6, 3), True, 2)
    nodes = [helper.make_node("RMSNormalization", ["x", "s"], ["n"], axis=1),
             helper.make_node("Mish", ["n"], ["m"]),
             helper.make_node("SoftmaxCrossEntropyLoss", ["m", "t", "w"], ["loss", "lp"],
                              ignore_index=2),
             helper.make_node("ReduceLogSumExp", ["lp"], ["lse"], keepdims=0)]
    s = _r(6, 3)
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", 1, x.shape),
         helper.make_tensor_value_info("t", 7, t.shape)],
        [helper.make_tensor_value_info(n, 1, None) for n in ("loss", "lse")],
        [onnx.numpy_helper.from_array(s, "s"), onnx.numpy_helper.from_array(w, "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": x, "t": t})
    net = dvsdk.compile(m, golden=False)
    with dvsdk.open_device("sim://") as dev, dvsdk.load(net, dev) as l:
        got = l.run({"x": x, "t": t})
    _close([got["loss"], got["lse"]], want, tol=16 * TOL)


# --------------------------------------------------------------------------- errors
_X = np.ones((2, 3), np.float32)


@pytest.mark.parametrize("op,ins,attrs,field", [
    ("LpNormalization", [_X], {"p": 3}, "LpNormalization.p"),
    ("LpNormalization", [_X], {"axis": 2}, "LpNormalization.axis"),
    ("RMSNormalization", [_X, _X], {"axis": -3}, "RMSNormalization.axis"),
    ("GroupNormalization", [np.ones((1, 4, 2), np.float32), np.ones(4, np.float32),
                            np.ones(4, np.float32)], {"num_groups": 3},
     "GroupNormalization.num_groups"),
    ("GroupNormalization", [np.ones((1, 4, 2), np.float32), np.ones(2, np.float32),
                            np.ones(2, np.float32)], {"num_groups": 2},
     "GroupNormalization.scale"),
    ("MeanVarianceNormalization", [_X], {"axes": [5]}, "MeanVarianceNormalization.axes"),
    ("Celu", [_X], {"alpha": 0.0}, "Celu.alpha"),
    ("Hardmax", [_X], {"axis": 4}, "Hardmax.axis"),
    ("NegativeLogLikelihoodLoss", [_X, np.zeros(2, np.int64)], {"reduction": "max"},
     "NegativeLogLikelihoodLoss.reduction"),
    ("NegativeLogLikelihoodLoss", [_X, np.array([0, 3])], {}, "NegativeLogLikelihoodLoss.target"),
    ("SoftmaxCrossEntropyLoss", [_X, np.zeros(3, np.int64)], {},
     "SoftmaxCrossEntropyLoss.target"),
])
def test_bad_attributes_and_inputs_are_typed_errors_naming_the_field(op, ins, attrs, field):
    with pytest.raises(ModelError) as e:
        run_op(op, ins, attrs)
    assert e.value.field == field


def test_the_new_kernels_refuse_other_element_types_by_name():
    for op in ("Mish", "RMSNormalization", "ReduceLogSumExp", "IsNaN"):
        assert op in KERNELS
        with pytest.raises(ModelError, match=rf"{op}\[int32\]"):
            run_op(op, [np.ones(3, np.int32), np.ones(3, np.int32)][:1 + (op[0] == "R")], {})
    with pytest.raises(ModelError, match=r"SoftmaxCrossEntropyLoss\[float32\]"):
        run_op("SoftmaxCrossEntropyLoss", [_X, np.zeros(2, np.float32)], {})


def test_netbin_attribute_checks_reject_bad_values_of_the_new_ops():
    from dvsdk.errors import NetFileError
    from dvsdk.runtime.records import check_attrs

    check_attrs("SoftmaxCrossEntropyLoss", {"reduction": "mean", "ignore_index": -1}, [2], "p")
    check_attrs("LpNormalization", {"p": 1, "axis": -1}, [2], "p")
    check_attrs("Shrink", {"lambd": 0.5, "bias": 0.0}, [2], "p")
    for op, attrs in [("NegativeLogLikelihoodLoss", {"reduction": "add"}),
                      ("SoftmaxCrossEntropyLoss", {"ignore_index": 1.5}),
                      ("LpNormalization", {"p": 3}), ("GroupNormalization", {"num_groups": 0}),
                      ("Shrink", {"lambd": float("nan")}), ("IsInf", {"detect_negative": 2}),
                      ("ScatterND", {"reduction": "mean"})]:
        with pytest.raises(NetFileError):
            check_attrs(op, attrs, [2], "p")
