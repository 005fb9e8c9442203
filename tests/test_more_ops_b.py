"""The index, scan, bitwise, quantization and spatial CPU kernels (issue 28, ops B) against
independent references: the ONNX reference implementation (onnx.reference.ReferenceEvaluator),
onnxruntime and numpy written here, on random inputs beyond the node tests; integer results
exactly, float ones within ``8 * eps(float32) * max|expected|``; a small quantized net
compiled and run on ``sim://`` without BLAS; bad attributes refused with typed errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.cpu.ops import run_op
from dvsdk.errors import ModelError

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from .single_node import close as _check  # noqa: E402
from .single_node import node_model  # noqa: E402

rng = np.random.default_rng(2828)


def _model(op, ins, attrs, n_out, opset):
    """(outputs of no declared type: the reference and the kernel each give theirs)"""
    return node_model(op, ins, attrs, n_out, opset, [onnx.TensorProto.UNDEFINED] * n_out)


def _reference(op, ins, attrs, n_out=1, opset=22):
    from onnx.reference import ReferenceEvaluator

    m, feeds = _model(op, ins, attrs, n_out, opset)
    return ReferenceEvaluator(m).run(None, feeds)


def _same(op, ins, attrs, n_out=1, opset=22):
    _check(run_op(op, ins, attrs), _reference(op, ins, attrs, n_out, opset), (op, attrs))


# --------------------------------------------------------------------------- indexing
@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-3, -1, 0, 2, 7])
def test_trilu_matches_numpy(upper, k):
    x = rng.integers(-50, 50, (2, 4, 6)).astype(np.int32)
    want = np.triu(x, k) if upper else np.tril(x, k)
    _check(run_op("Trilu", [x, np.array(k, np.int64)], {"upper": upper}), [want])


@pytest.mark.parametrize("op", ["CumSum", "CumProd"])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32])
def test_scans_match_the_reference(op, exclusive, reverse, dtype):
    x = (rng.integers(-4, 5, (3, 5, 4)) if dtype != np.float32 else
         rng.standard_normal((3, 5, 4))).astype(dtype)
    for axis in (0, 1, -1):
        _same(op, [x, np.array(axis, np.int64)], {"exclusive": exclusive, "reverse": reverse},
              opset=26 if op == "CumProd" else 14)


def test_cumsum_adds_in_sequence_order():
    """float32 adds one position at a time: 1e8 + 1 + ... stays 1e8 in float32, as a
    sequential sum does (pairwise or float64 sums would not)."""
    x = np.array([1e8] + [1.0] * 16, np.float32)
    got = run_op("CumSum", [x, np.array(0, np.int64)], {})[0]
    want = np.empty_like(x)
    acc = np.float32(0)
    for i, v in enumerate(x):
        acc = np.float32(acc + v)
        want[i] = acc
    assert np.array_equal(got, want)
    rev = run_op("CumSum", [x, np.array(0, np.int64)], {"reverse": 1})[0]
    assert rev[0] == np.float32(np.float32(16.0) + np.float32(1e8))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
def test_bitshift_matches_the_reference_and_shifts_out_past_the_width(dtype, direction):
    bits = np.dtype(dtype).itemsize * 8
    x = rng.integers(0, np.iinfo(dtype).max, 12, dtype=dtype, endpoint=True)
    y = rng.integers(0, bits, 12).astype(dtype)
    _same("BitShift", [x, y], {"direction": direction}, opset=11)
    far = run_op("BitShift", [x, np.full(12, bits, dtype)], {"direction": direction})[0]
    assert not far.any()


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.uint16, np.uint64])
def test_bitwise_ops_match_the_reference(op, dtype):
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, (3, 4), dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (4,), dtype=dtype, endpoint=True)
    _same(op, [a, b], {}, opset=18)
    _same("BitwiseNot", [a], {}, opset=18)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_matches_the_reference(reduction):
    data = rng.standard_normal((4, 5)).astype(np.float32)
    idx = rng.integers(-5, 5, (3, 5)).astype(np.int64)
    if reduction == "none":   # (duplicate indices are undefined without a reduction)
        idx = np.stack([rng.permutation(5) - 5 * (i % 2) for i in range(3)]).astype(np.int64)
    upd = rng.standard_normal((3, 5)).astype(np.float32)
    _same("ScatterElements", [data, idx, upd], {"axis": 1, "reduction": reduction}, opset=18)


def test_gather_nd_matches_the_reference():
    data = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for b, k in [(0, 1), (0, 3), (1, 2), (2, 1), (1, 3)]:
        shape = data.shape[b:b + k]
        cols = [rng.integers(-d, d, (*data.shape[:b], 2, 3)) for d in shape]
        idx = np.stack(cols, -1).astype(np.int64)
        _same("GatherND", [data, idx], {"batch_dims": b}, opset=13)


@pytest.mark.parametrize("axis", [-3, -1, 0, 1, 2])
def test_one_hot_matches_the_reference(axis):
    idx = rng.integers(-6, 9, (3, 4)).astype(np.int64)     # out of range: all "off"
    _same("OneHot", [idx, np.array(6, np.int64), np.array([2, 7], np.int32)], {"axis": axis},
          opset=11)


def test_eye_like_center_crop_pad_reverse_sequence_match_the_reference():
    x = np.zeros((3, 5), np.int32)
    for k in (-4, -1, 0, 2, 6):
        _same("EyeLike", [x], {"k": k, "dtype": onnx.TensorProto.FLOAT}, opset=22)
    y = rng.standard_normal((5, 4, 3)).astype(np.float32)
    for shape, axes in [([3, 6, 3], None), ([7, 2], [0, 1]), ([1, 9], [-1, -3])]:
        attrs = {} if axes is None else {"axes": axes}
        _same("CenterCropPad", [y, np.array(shape, np.int64)], attrs, opset=18)
    lens = np.array([4, 0, 1, 3], np.int64)
    _same("ReverseSequence", [rng.standard_normal((4, 5, 3)).astype(np.float32), lens],
          {"batch_axis": 0, "time_axis": 1}, opset=10)
    _same("ReverseSequence", [y, np.array([5, 2, 0, 3], np.int64)],
          {"batch_axis": 1, "time_axis": 0}, opset=10)


# --------------------------------------------------------------------------- quantization
@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_rounds_half_to_even_and_saturates(dtype):
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 1e9, -1e9, np.nan, 3.49999], np.float32)
    zp = np.array(3, dtype)
    y = run_op("QuantizeLinear", [x, np.array(1.0, np.float32), zp], {})[0]
    info = np.iinfo(dtype)
    want = np.clip(np.array([0, 2, 2, 0, -2, info.max, info.min, 0, 3], np.float64) + 3,
                   info.min, info.max).astype(dtype)
    want[5], want[6] = info.max, info.min
    assert y.dtype == dtype and np.array_equal(y, want)


@pytest.mark.parametrize("mode", ["tensor", "axis", "block"])
def test_quantize_dequantize_match_the_reference(mode):
    x = (rng.standard_normal((3, 6, 4)) * 40).astype(np.float32)
    if mode == "tensor":
        s, z, attrs = np.array(0.37, np.float32), np.array(-7, np.int8), {}
    elif mode == "axis":
        s = rng.uniform(0.1, 1, 6).astype(np.float32)
        z, attrs = rng.integers(-20, 20, 6).astype(np.int8), {"axis": 1}
    else:
        s = rng.uniform(0.1, 1, (3, 3, 4)).astype(np.float32)
        z, attrs = rng.integers(-20, 20, (3, 3, 4)).astype(np.int8), {"axis": 1,
                                                                     "block_size": 2}
    _same("QuantizeLinear", [x, s, z], attrs, opset=21)
    q = run_op("QuantizeLinear", [x, s, z], attrs)[0]
    _same("DequantizeLinear", [q, s, z], attrs, opset=21)


def test_dynamic_quantize_linear_matches_the_reference():
    for x in (rng.standard_normal((4, 5)).astype(np.float32),
              rng.uniform(0.5, 3, 7).astype(np.float32), -rng.uniform(0.5, 3, 7)
              .astype(np.float32), np.zeros(3, np.float32)):
        _same("DynamicQuantizeLinear", [x], {}, n_out=3, opset=11)


def test_integer_products_match_the_reference_exactly():
    a = rng.integers(0, 256, (2, 5, 7)).astype(np.uint8)
    b = rng.integers(-128, 128, (7, 3)).astype(np.int8)
    _same("MatMulInteger", [a, b, np.array(131, np.uint8), np.array(-3, np.int8)], {},
          opset=10)
    x = rng.integers(0, 256, (1, 4, 6, 5)).astype(np.uint8)
    w = rng.integers(0, 256, (6, 2, 3, 3)).astype(np.uint8)
    attrs = {"pads": [1, 0, 1, 2], "strides": [2, 1], "group": 2}
    _same("ConvInteger", [x, w, np.array(17, np.uint8), np.array(100, np.uint8)], attrs,
          opset=10)


def test_qlinear_ops_match_the_reference():
    a = rng.integers(0, 256, (3, 4, 8)).astype(np.uint8)
    b = rng.integers(0, 256, (8, 5)).astype(np.uint8)
    f = np.float32
    ins = [a, np.array(0.02, f), np.array(120, np.uint8), b, np.array(0.03, f),
           np.array(130, np.uint8), np.array(0.05, f), np.array(125, np.uint8)]
    _same("QLinearMatMul", ins, {}, opset=21)
    x = rng.integers(-128, 128, (1, 3, 7, 6)).astype(np.int8)
    w = rng.integers(-128, 128, (4, 3, 3, 3)).astype(np.int8)
    ins = [x, np.array(0.05, f), np.array(3, np.int8), w,
           rng.uniform(0.001, 0.01, 4).astype(f), np.zeros(4, np.int8), np.array(0.4, f),
           np.array(-5, np.int8), rng.integers(-500, 500, 4).astype(np.int32)]
    _same("QLinearConv", ins, {"pads": [1, 1, 1, 1]}, opset=10)


def test_a_quantized_net_compiles_and_runs_on_sim_without_blas(monkeypatch):
    import dvsdk

    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 3, 6, 6])
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    inits = [helper.make_tensor("s", onnx.TensorProto.FLOAT, [], [0.05]),
             helper.make_tensor("z", onnx.TensorProto.UINT8, [], [128]),
             helper.make_tensor("w", onnx.TensorProto.UINT8, [4, 3, 3, 3],
                                rng.integers(0, 256, 108).tolist()),
             helper.make_tensor("wz", onnx.TensorProto.UINT8, [], [127]),
             helper.make_tensor("ws", onnx.TensorProto.FLOAT, [], [0.01]),
             helper.make_tensor("ys", onnx.TensorProto.FLOAT, [], [0.2]),
             helper.make_tensor("yz", onnx.TensorProto.UINT8, [], [100])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("QLinearConv", ["q", "s", "z", "w", "ws", "wz", "ys", "yz"],
                              ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["c", "ys", "yz"], ["y"])]
    m = helper.make_model(helper.make_graph(nodes, "q", [x], [y], inits),
                          opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    feed = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    want = ReferenceEvaluator(m).run(None, {"x": feed})[0]
    monkeypatch.setattr(np, "dot", None)          # no BLAS anywhere on the way
    net = dvsdk.compile(m, golden=False)
    with dvsdk.open_device("sim://") as dev, dvsdk.load(net, dev) as loaded:
        got = loaded.run({"x": feed})["y"]
    assert np.array_equal(got, want)


# --------------------------------------------------------------------------- spatial
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [3, 2], "p": 3, "strides": [2, 1], "pads": [1, 0, 1, 1]},
    {"kernel_shape": [2, 2], "p": 1, "dilations": [2, 1], "ceil_mode": 1, "strides": [2, 2]},
    {"kernel_shape": [3, 3], "p": 2, "auto_pad": "SAME_UPPER"},
])
def test_lp_pool_matches_the_reference(attrs):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    _same("LpPool", [x], attrs, opset=22)


def test_max_unpool_inverts_max_pool_indices():
    x = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    v, i = _reference("MaxPool", [x], attrs, n_out=2, opset=22)
    _same("MaxUnpool", [v, i], attrs, opset=22)
    _same("MaxUnpool", [v, i, np.array([2, 3, 7, 9], np.int64)], attrs, opset=22)


@pytest.mark.parametrize("mode,ctm,ratio", [("avg", "half_pixel", 0), ("avg",
                                            "output_half_pixel", 2), ("max", "half_pixel", 3)])
def test_roi_align_equals_the_reference_bit_for_bit(mode, ctm, ratio):
    x = rng.standard_normal((2, 3, 9, 11)).astype(np.float32)
    rois = np.array([[0, 0, 9, 9], [1.3, 2.7, 8.1, 6.6], [-2, -1, 14, 12], [5, 5, 5.2, 5.1]],
                    np.float32)
    bidx = np.array([0, 1, 1, 0], np.int64)
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "output_height": 3,
             "output_width": 4, "sampling_ratio": ratio, "spatial_scale": 0.75}
    got = run_op("RoiAlign", [x, rois, bidx], attrs)[0]
    assert np.array_equal(got, _reference("RoiAlign", [x, rois, bidx], attrs)[0])


@pytest.mark.parametrize("seed", range(6))
def test_roi_align_many_rois_of_different_grids_equal_the_reference(seed):
    # adaptive sampling (ratio 0) gives each ROI its own grid; empty, inverted and
    # out-of-image ROIs; signed zeros in X.  Equal values: a zero's sign may differ where a
    # max mixes zero-weighted samples (the reference's Python ints as weights)
    g = np.random.default_rng(100 + seed)
    x = g.standard_normal((2, 4, 8, 10)).astype(np.float32)
    x[:, :, 0, :3] = -0.0
    rois = g.uniform(-5, 15, (12, 4)).astype(np.float32)
    rois[::3, 2:] = rois[::3, :2] + g.uniform(-1, 9, (4, 2)).astype(np.float32)
    bidx = g.integers(0, 2, 12)
    for mode, ctm in (("avg", "half_pixel"), ("max", "output_half_pixel")):
        attrs = {"mode": mode, "coordinate_transformation_mode": ctm,
                 "output_height": int(g.integers(1, 4)), "output_width": int(g.integers(1, 5)),
                 "sampling_ratio": int(seed % 3), "spatial_scale": float(g.choice([0.5, 1.25]))}
        got = run_op("RoiAlign", [x, rois, bidx], attrs)[0]
        ref = _reference("RoiAlign", [x, rois, bidx], attrs)[0]
        assert np.array_equal(got, ref), (mode, attrs)


def test_roi_align_refuses_non_finite_rois():
    x = np.ones((1, 1, 4, 4), np.float32)
    rois = np.array([[0, 0, 2, 2], [0, np.nan, 2, 2]], np.float32)
    with pytest.raises(ModelError, match="finite") as e:
        run_op("RoiAlign", [x, rois, np.zeros(2, np.int64)], {})
    assert e.value.field == "RoiAlign.rois"


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 1], "pads": [1, 0, 0, 1]},
                                   {"dilations": [1, 2]}])
def test_col2im_matches_the_reference(attrs):
    image, block = np.array([5, 6], np.int64), np.array([2, 3], np.int64)
    s = attrs.get("strides", [1, 1])
    d = attrs.get("dilations", [1, 1])
    p = attrs.get("pads", [0, 0, 0, 0])
    grid = [(image[i] + p[i] + p[2 + i] - (d[i] * (block[i] - 1) + 1)) // s[i] + 1
            for i in range(2)]
    x = rng.standard_normal((2, 2 * 6, grid[0] * grid[1])).astype(np.float32)
    _same("Col2Im", [x, image, block], attrs, opset=18)


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_matches_the_reference(align):
    for size, theta in (([2, 1, 4, 5], rng.standard_normal((2, 2, 3))),
                        ([1, 2, 3, 4, 2], rng.standard_normal((1, 3, 4)))):
        _same("AffineGrid", [theta.astype(np.float32), np.array(size, np.int64)],
              {"align_corners": align}, opset=20)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("op,ins,attrs,field", [
    ("BitShift", [np.ones(2, np.uint8)] * 2, {"direction": "UP"}, "BitShift.direction"),
    ("ScatterElements", [np.ones((2, 2), np.float32), np.full((1, 2), 2, np.int64),
                         np.ones((1, 2), np.float32)], {}, "ScatterElements.indices"),
    ("ScatterElements", [np.ones((2, 2), np.float32), np.zeros((1, 2), np.int64),
                         np.ones((1, 2), np.float32)], {"reduction": "xor"},
     "ScatterElements.reduction"),
    ("CumSum", [np.ones((2, 2), np.float32), np.array(2, np.int64)], {}, "CumSum.axis"),
    ("OneHot", [np.zeros(2, np.int64), np.array(0, np.int64), np.array([0, 1], np.int64)], {},
     "OneHot.depth"),
    ("GatherND", [np.ones((2, 2), np.float32), np.array([[2, 0]], np.int64)], {},
     "GatherND.indices"),
    ("ReverseSequence", [np.ones((3, 2), np.float32), np.array([4, 1], np.int64)], {},
     "ReverseSequence.sequence_lens"),
    ("RoiAlign", [np.ones((1, 1, 4, 4), np.float32), np.zeros((1, 4), np.float32),
                  np.zeros(1, np.int64)], {"mode": "median"}, "RoiAlign.mode"),
    ("LpPool", [np.ones((1, 1, 4, 4), np.float32)], {"kernel_shape": [2, 2], "p": 0},
     "LpPool.p"),
    ("QuantizeLinear", [np.ones(4, np.float32), np.ones(3, np.float32)], {"axis": 0},
     "QuantizeLinear.y_scale"),
    ("MaxUnpool", [np.ones((1, 1, 2, 2), np.float32), np.full((1, 1, 2, 2), 99, np.int64)],
     {"kernel_shape": [2, 2], "strides": [2, 2]}, "MaxUnpool.I"),
])
def test_bad_inputs_are_typed_errors_naming_the_field(op, ins, attrs, field):
    with pytest.raises(ModelError) as e:
        run_op(op, ins, attrs)
    assert e.value.field == field


def test_netbin_attribute_checks_reject_bad_values_of_the_new_ops():
    from dvsdk.errors import NetFileError
    from dvsdk.runtime.records import check_attrs

    check_attrs("BitShift", {"direction": "LEFT"}, [1, 1], "p")
    check_attrs("RoiAlign", {"coordinate_transformation_mode": "output_half_pixel",
                             "mode": "max", "sampling_ratio": 0, "spatial_scale": 0.5,
                             "output_height": 2, "output_width": 3}, [4, 2, 1], "p")
    check_attrs("OneHot", {"axis": 2}, [2, 0, 1], "p")
    check_attrs("QuantizeLinear", {"axis": 1, "block_size": 0, "output_dtype": 0}, [2], "p")
    for op, attrs in [("BitShift", {"direction": "forward"}), ("Trilu", {"upper": 2}),
                      ("CumSum", {"exclusive": 3}), ("EyeLike", {"dtype": 17}),
                      ("RoiAlign", {"coordinate_transformation_mode": "align_corners"}),
                      ("RoiAlign", {"mode": "median"}), ("LpPool", {"p": 0}),
                      ("QuantizeLinear", {"block_size": -1}),
                      ("QuantizeLinear", {"output_dtype": 17}), ("OneHot", {"axis": 3}),
                      ("GatherND", {"batch_dims": 2}), ("MaxUnpool", {"strides": [1, 1]})]:
        with pytest.raises(NetFileError):
            check_attrs(op, attrs, [2, 2], "p")
