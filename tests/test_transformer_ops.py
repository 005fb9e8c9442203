"""The transformer, recurrent and sampling CPU kernels (issue 28 item 2) against independent
references: math.erf, onnxruntime, the ONNX reference implementation
(onnx.reference.ReferenceEvaluator) and numpy written here; a small transformer block
compiled and run on ``sim://`` without BLAS; bad attributes refused with typed errors.

Tolerance: ``8 * eps(float32) * max|expected|`` (the conformance harness's CPU rule).
"""

from __future__ import annotations

import itertools
import math
import zlib

import numpy as np
import pytest

from dvsdk.cpu.ops import run_op
from dvsdk.errors import ModelError
from dvsdk.hw import elementary

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from .single_node import TOL  # noqa: E402
from .single_node import close as _close  # noqa: E402
from .single_node import ort_node as _ort  # noqa: E402
from .single_node import reference as _reference  # noqa: E402

rng = np.random.default_rng(28)


@pytest.fixture(autouse=True)
def _seeded(request):
    """Inputs seeded by the test's name: the same values in any order and worker."""
    global rng
    rng = np.random.default_rng(zlib.crc32(request.node.name.encode()))


def _r(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


# --------------------------------------------------------------------------- erf, Gelu
def test_erf_is_within_its_documented_bound_of_math_erf():
    xs = np.concatenate([np.linspace(-7, 7, 70001), np.logspace(-300, 1, 1000),
                         -np.logspace(-300, 1, 1000), [0.0, 6.0, 2.0, -2.0]])
    want = np.array([math.erf(v) for v in xs])
    got = elementary.erf(xs)
    assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-300)) < 6e-16
    special = elementary.erf(np.array([np.inf, -np.inf, np.nan, -0.0]))
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2])
    assert np.signbit(special[3])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_erf_match_the_onnx_reference(approximate):
    x = _r(3, 50, scale=3.0)
    _close(run_op("Gelu", [x], {"approximate": approximate}),
           _reference("Gelu", [x], {"approximate": approximate}, opset=20))
    _close(run_op("Erf", [x], {}), _reference("Erf", [x], {}, opset=13))


# --------------------------------------------------------------------------- LayerNorm
@pytest.mark.parametrize("axis,bias", [(-1, True), (1, True), (2, False), (0, True)])
def test_layer_normalization_matches_onnxruntime(axis, bias):
    x = _r(2, 3, 4, 5, scale=2.0) + 1.0
    sh = x.shape[axis:]
    ins = [x, _r(*sh), _r(*sh)] if bias else [x, _r(*sh)]
    attrs = {"axis": axis, "epsilon": 1e-3}
    _close(run_op("LayerNormalization", ins, attrs),
           _ort("LayerNormalization", ins, attrs, 3, opset=17), (axis, bias))


# --------------------------------------------------------------------------- Einsum
EQUATIONS = [
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhid,bhjd->bhij", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("bhij,bhjd->bhid", [(1, 2, 3, 5), (1, 2, 5, 4)]), ("ij->ji", [(3, 4)]),
    ("ij->i", [(3, 4)]), ("ij->", [(3, 4)]), ("i,j->ij", [(3,), (4,)]), ("ii->i", [(3, 3)]),
    ("ii", [(4, 4)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]), ("i,i", [(5,), (5,)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("bij,bjk->", [(2, 3, 4), (2, 4, 5)]),
    ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ij,ij->ij", [(3, 4), (3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_the_onnx_reference(equation, shapes):
    ins = [_r(*s) for s in shapes]
    _close(run_op("Einsum", ins, {"equation": equation}),
           _reference("Einsum", ins, {"equation": equation}, opset=12), equation)


def test_einsum_products_sum_in_order_k():
    """'bij,bjk->bik' is MatMul's fixed-order product: the same bits as arith.matmul_nd."""
    from dvsdk.hw import arith

    a, b = _r(2, 3, 70), _r(2, 70, 5)
    got = run_op("Einsum", [a, b], {"equation": "bij,bjk->bik"})[0]
    assert np.array_equal(got.view(np.uint32), arith.matmul_nd(a, b).view(np.uint32))


# --------------------------------------------------------------------------- TopK etc.
@pytest.mark.parametrize("largest,dtype", itertools.product([0, 1], [np.float32, np.int64]))
def test_topk_breaks_ties_by_the_lower_index_like_onnxruntime(largest, dtype):
    x = rng.integers(-3, 4, (4, 9)).astype(dtype)
    for axis in (0, 1, -1):
        k = np.array([3], np.int64)
        _close(run_op("TopK", [x, k], {"axis": axis, "largest": largest}),
               _ort("TopK", [x, k], {"axis": axis, "largest": largest}, 2, opset=11,
                    types=[helper.np_dtype_to_tensor_dtype(x.dtype), onnx.TensorProto.INT64]),
               (axis, largest))


def _scatter_nd_numpy(data, indices, updates, reduction):
    """ScatterND as the ONNX spec writes it: one update slice after another."""
    out = data.copy()
    fn = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}
    for i in np.ndindex(indices.shape[:-1]):
        j = tuple(indices[i])
        out[j] = updates[i] if reduction == "none" else fn[reduction](out[j], updates[i])
    return out


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_nd_applies_repeated_indices_in_update_order(reduction):
    data = _r(4, 5, 3)
    indices = np.array([[[0, 1], [2, 3]], [[0, 1], [3, -1]], [[0, 1], [1, 1]]], np.int64)
    if reduction == "none":
        indices = indices[:, 1:]
    updates = _r(*indices.shape[:-1], 3)
    got = run_op("ScatterND", [data, indices, updates], {"reduction": reduction})[0]
    idx = np.where(indices < 0, indices + np.array(data.shape[:2]), indices)
    assert np.array_equal(got, _scatter_nd_numpy(data, idx, updates, reduction))


def test_cast_like_takes_the_element_type_of_its_second_input():
    x = _r(3, 4) * 100
    assert run_op("CastLike", [x, np.zeros(1, np.float16)], {})[0].dtype == np.float16
    y = run_op("CastLike", [x, np.zeros(1, np.int32)], {})[0]
    assert np.array_equal(y, run_op("Cast", [x], {"to": 6})[0])


# --------------------------------------------------------------------------- Attention
ATTENTION = [
    ({}, (2, 3, 4, 8), (2, 3, 6, 8), None, False),
    ({"is_causal": 1}, (2, 3, 4, 8), (2, 3, 6, 8), None, False),
    ({"scale": 0.2, "softcap": 2.0}, (1, 4, 5, 8), (1, 2, 5, 8), (5, 5), False),
    ({"q_num_heads": 4, "kv_num_heads": 2}, (2, 5, 32), (2, 7, 16), (5, 7), True),
    ({"is_causal": 1, "qk_matmul_output_mode": 2}, (1, 2, 3, 4), (1, 2, 3, 4), "bool", True),
    ({"qk_matmul_output_mode": 3}, (1, 2, 3, 4), (1, 2, 3, 4), (3, 3), False),
]


@pytest.mark.parametrize("attrs,qs,ks,mask,past", ATTENTION)
def test_attention_matches_the_onnx_reference(attrs, qs, ks, mask, past):
    q, k, v = _r(*qs), _r(*ks), _r(*ks)
    b = qs[0]
    heads = ks[1] if len(ks) == 4 else attrs["kv_num_heads"]
    hd = ks[-1] if len(ks) == 4 else ks[-1] // heads
    n_past = 2 if past else 0
    skv = ks[2] if len(ks) == 4 else ks[1]
    if mask == "bool":
        m = rng.integers(0, 2, (qs[2], skv + n_past)).astype(bool)
        m[:, 0] = True
    else:
        m = None if mask is None else _r(mask[0], mask[1] + n_past)
    pk = _r(b, heads, n_past, hd) if past else None
    pv = _r(b, heads, n_past, hd) if past else None
    ins = [q, k, v, m, pk, pv]
    while ins[-1] is None:
        ins.pop()
    _close(run_op("Attention", ins, attrs), _reference("Attention", ins, attrs, 4, opset=23),
           attrs)


# --------------------------------------------------------------------------- LSTM / GRU
CELLS = list(itertools.product(["LSTM", "GRU", "RNN"], ["forward", "reverse", "bidirectional"],
                               [0, 1], [0, 1, 2]))


@pytest.mark.parametrize("op,direction,layout,extra", CELLS)
def test_recurrent_layers_match_onnxruntime(op, direction, layout, extra):
    """Every direction and layout; extra 1/2: B, sequence_lens, initial states and the
    op's options (peepholes / input_forget, linear_before_reset, clip, activations).
    onnxruntime has no layout 1: it runs the layout-0 twin, its outputs transposed."""
    gates, n_out = {"LSTM": (4, 3), "GRU": (3, 2), "RNN": (1, 2)}[op]
    d = 2 if direction == "bidirectional" else 1
    s, b, i, h = 5, 3, 4, 6
    x = _r(s, b, i)
    state = (d, b, h)
    ins = [x, _r(d, gates * h, i, scale=0.5), _r(d, gates * h, h, scale=0.5)]
    attrs = {"hidden_size": h, "direction": direction}
    if extra:
        ins += [_r(d, 2 * gates * h), np.array([5, 2, 4], np.int32), _r(*state)]
        if op == "LSTM":
            ins += [_r(*state), _r(d, 3 * h) if extra == 1 else None]
            if extra == 2:
                attrs["input_forget"] = 1
        elif op == "GRU" and extra == 1:
            attrs["linear_before_reset"] = 1
        elif op == "GRU":
            attrs.update(activations=["HardSigmoid", "LeakyRelu"] * d,
                         activation_alpha=[0.3, 0.1] * d, activation_beta=[0.4] * d)
        else:
            attrs.update(clip=1.5, activations=["Relu"] * d) if extra == 1 else attrs.update(
                clip=0.7)
    while ins[-1] is None:
        ins.pop()
    want = _ort(op, ins, attrs, n_out)
    if layout:
        ins = list(ins)
        ins[0] = np.ascontiguousarray(x.swapaxes(0, 1))
        for j in (5, 6):
            if len(ins) > j and ins[j] is not None:
                ins[j] = np.ascontiguousarray(ins[j].swapaxes(0, 1))
        want = [want[0].transpose(2, 0, 1, 3)] + [w.swapaxes(0, 1) for w in want[1:]]
    _close(run_op(op, ins, {**attrs, "layout": layout}), want, (op, direction, layout, extra))


# --------------------------------------------------------------------------- sampling
@pytest.mark.parametrize("ctm,exclude,a,scales", [
    ("half_pixel", 0, -0.75, (1, 1, 2.0, 1.5)), ("half_pixel", 1, -0.5, (1, 1, 0.6, 0.8)),
    ("align_corners", 0, -0.75, (1, 1, 1.5, 2.0)), ("asymmetric", 0, -0.75, (1, 1, 2, 3)),
    ("pytorch_half_pixel", 1, -0.75, (1, 1, 0.5, 1.25)),
    ("half_pixel_symmetric", 0, -0.6, (1, 1, 1.3, 0.7))])
def test_cubic_resize_matches_the_onnx_reference(ctm, exclude, a, scales):
    x = _r(1, 2, 6, 7)
    sc = np.array(scales, np.float32)
    attrs = {"mode": "cubic", "coordinate_transformation_mode": ctm,
             "exclude_outside": exclude, "cubic_coeff_a": a}
    roi = np.zeros(0, np.float32)
    if ctm == "align_corners":
        # the ONNX reference computes this mode's coordinates in float64 (the others, and
        # onnxruntime all of them, in float32, as here); the lengths are whole numbers, where
        # onnxruntime's align_corners agrees with the spec
        want = _ort("Resize", [x, roi, sc], attrs, opset=19)[0]
    else:  # the reference on the same values in float64 (coordinates, weights: float32)
        want = _reference("Resize", [x.astype(np.float64), roi, sc], attrs, opset=19)[0]
    _close(run_op("Resize", [x, None, sc], attrs), [want.astype(np.float32)], (ctm, exclude, a))


@pytest.mark.parametrize("mode,pad,align", list(itertools.product(
    ["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [0, 1])))
def test_grid_sample_matches_the_onnx_reference(mode, pad, align):
    """Opset-16 mode names here, opset-20 ones in the reference, which runs on the same
    values in float64.  (onnxruntime's bicubic with border padding clamps differently from
    the ONNX reference, which the conformance data follow.)"""
    x = _r(2, 3, 5, 6)
    grid = rng.uniform(-1.4, 1.4, (2, 4, 7, 2)).astype(np.float32)
    if mode == "nearest":  # keep clear of rounding ties, where the two may pick either
        grid = np.round(grid * 40) / 40 + np.float32(0.003)
    attrs = {"mode": mode, "padding_mode": pad, "align_corners": align}
    new = {**attrs, "mode": {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)}
    want = _reference("GridSample", [x.astype(np.float64), grid], new, opset=20)[0]
    _close(run_op("GridSample", [x, grid], attrs), [want.astype(np.float32)], attrs)


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize("op,ins,attrs,field", [
    ("Gelu", [np.ones(3, np.float32)], {"approximate": "fast"}, "Gelu.approximate"),
    ("ScatterND", [np.ones(3, np.float32), np.zeros((1, 1), np.int64), np.ones(1, np.float32)],
     {"reduction": "xor"}, "ScatterND.reduction"),
    ("ScatterND", [np.ones(3, np.float32), np.full((1, 1), 3, np.int64),
                   np.ones(1, np.float32)], {}, "ScatterND.indices"),
    ("GridSample", [np.ones((1, 1, 2, 2), np.float32), np.zeros((1, 1, 1, 2), np.float32)],
     {"mode": "lanczos"}, "GridSample.mode"),
    ("GridSample", [np.ones((1, 1, 2, 2), np.float32), np.zeros((1, 1, 1, 2), np.float32)],
     {"padding_mode": "wrap"}, "GridSample.padding_mode"),
    ("Einsum", [np.ones((2, 3), np.float32)], {"equation": "ijk->i"}, "Einsum.equation"),
    ("TopK", [np.ones((2, 3), np.float32), np.array([4], np.int64)], {}, "TopK.K"),
    ("LSTM", [np.ones((1, 1, 2), np.float32), np.ones((1, 4, 2), np.float32),
              np.ones((1, 4, 1), np.float32)], {"direction": "sideways"}, "LSTM.direction"),
    ("GRU", [np.ones((1, 1, 2), np.float32), np.ones((1, 3, 2), np.float32),
             np.ones((1, 3, 1), np.float32)], {"activations": ["Sigmoid", "Gauss"]},
     "GRU.activations"),
    ("Attention", [np.ones((1, 2, 8), np.float32)] * 3, {"q_num_heads": 3, "kv_num_heads": 1},
     "Attention.q_num_heads"),
])
def test_bad_attributes_are_typed_errors_naming_the_field(op, ins, attrs, field):
    with pytest.raises(ModelError) as e:
        run_op(op, ins, attrs)
    assert e.value.field == field


def test_netbin_attribute_checks_reject_bad_values_of_the_new_ops():
    from dvsdk.errors import NetFileError
    from dvsdk.runtime.records import check_attrs

    check_attrs("Gelu", {"approximate": "tanh"}, [2], "p")
    check_attrs("LSTM", {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh"],
                         "hidden_size": 4, "layout": 1}, [3], "p")
    for op, attrs in [("Gelu", {"approximate": "fast"}), ("ScatterND", {"reduction": "xor"}),
                      ("GridSample", {"padding_mode": "wrap"}), ("GridSample", {"mode": "x"}),
                      ("LSTM", {"direction": "up"}), ("GRU", {"activations": ["Gauss"]}),
                      ("LSTM", {"hidden_size": 0}), ("Attention", {"qk_matmul_output_mode": 4}),
                      ("LayerNormalization", {"stash_type": 7}), ("TopK", {"largest": 2}),
                      ("Attention", {"softcap": float("nan")})]:
        with pytest.raises(NetFileError):
            check_attrs(op, attrs, [3], "p")


# --------------------------------------------------------------------------- a net
def test_a_transformer_block_compiles_and_runs_on_the_cpu_path_without_blas(monkeypatch):
    """LayerNorm -> (Q, K, V projections) -> Einsum scores -> Softmax -> Einsum -> Gelu MLP
    -> Attention-23 on the outputs: compiled, run on sim:// with numpy's BLAS entry points
    trapped, and compared with onnxruntime."""
    from onnx import TensorProto, numpy_helper

    import dvsdk

    t, d, h = 6, 16, 2
    w = {n: _r(*s, scale=0.3) for n, s in [("wq", (d, d)), ("wk", (d, d)), ("wv", (d, d)),
                                           ("w1", (d, 2 * d)), ("w2", (2 * d, d)),
                                           ("g", (d,)), ("b", (d,))]}
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], axis=-1),
        *[helper.make_node("MatMul", ["n", f"w{c}"], [c]) for c in "qkv"],
        helper.make_node("Einsum", ["q", "k"], ["s"], equation="bid,bjd->bij"),
        helper.make_node("Softmax", ["s"], ["p"], axis=-1),
        helper.make_node("Einsum", ["p", "v"], ["a"], equation="bij,bjd->bid"),
        helper.make_node("MatMul", ["a", "w1"], ["m1"]),
        helper.make_node("Gelu", ["m1"], ["m2"]),
        helper.make_node("MatMul", ["m2", "w2"], ["m3"]),
        helper.make_node("Attention", ["m3", "k", "v"], ["y"], q_num_heads=h,
                         kv_num_heads=h, is_causal=1),
    ]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, t, d))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, n) for n, v in w.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 10
    x = _r(1, t, d)
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    net = dvsdk.compile(model, golden=False)

    def trap(*args, **kwargs):
        raise AssertionError("BLAS was called")

    for name in ("matmul", "dot", "vdot", "inner", "tensordot", "einsum", "outer"):
        monkeypatch.setattr(np, name, trap)
    with dvsdk.load(net, "sim://") as loaded:
        got = loaded.run({"x": x})["y"]
    tol = 2.0 ** -8 if net.meta["stats"]["hw_ops"] else 64 * TOL  # (a chain of 9 ops)
    assert np.max(np.abs(got - want)) <= tol * np.max(np.abs(want))


# --------------------------------------------------------------------------- MatMul (T, D)
@pytest.mark.parametrize("bias", [False, True])
def test_a_rank3_matmul_with_constant_weights_is_a_1x1_conv_on_the_dv700(bias):
    """(2, 8, 16) x (16, 24) [+ b]: the rows as a one-row image (a Transpose and a Reshape
    on the CPU), one 1x1 conv command, back; the same bits as the 2-D MatMul of the rows,
    which is an FC."""
    from onnx import TensorProto, numpy_helper

    import dvsdk

    wt, b = _r(16, 24), _r(24)

    def model(shape):
        nodes = [helper.make_node("MatMul", ["x", "w"], ["m" if bias else "y"])]
        if bias:
            nodes.append(helper.make_node("Add", ["m", "b"], ["y"]))
        g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
            "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
                "y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])

    x = _r(2, 8, 16)
    n3 = dvsdk.compile(model((2, 8, 16)), golden=False)
    n2 = dvsdk.compile(model((16, 16)), golden=False)
    assert n3.meta["stats"]["hw_ops"] == 1 and n3.meta["stats"]["commands"] == 1
    assert [(s["kind"], s.get("op"), s.get("runs")) for s in n3.meta["program"]] == [
        ("cpu", "Transpose", None), ("cpu", "Reshape", None), ("hw", None, ["conv 1x1"]),
        ("cpu", "Reshape", None), ("cpu", "Transpose", None)]
    with dvsdk.load(n3, "sim://") as loaded:
        y3 = loaded.run({"x": x})["y"]
    with dvsdk.load(n2, "sim://") as loaded:
        y2 = loaded.run({"x": x.reshape(16, 16)})["y"]
    assert y3.shape == (2, 8, 24)
    assert np.array_equal(y3.reshape(16, 24).view(np.uint32), y2.view(np.uint32))
    want = (x.astype(np.float64) @ wt + (b if bias else 0)).astype(np.float32)
    assert np.max(np.abs(y3 - want)) <= 2.0 ** -8 * np.max(np.abs(want))


def test_a_rank3_matmul_reads_its_weights_once_for_all_rows():
    """PP-OCR rec's classifier shape, smaller: 40 rows x (120 -> 600).  An FC command with
    the rows as samples would read the 144 KB of weights 40 times (5.8 MB); the 1x1 conv
    reads them once (the simulator's count of the command's DRAM bytes)."""
    from onnx import TensorProto, numpy_helper

    import dvsdk

    wt = _r(120, 600)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 40, 120))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(wt, "w")])
    net = dvsdk.compile(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
                        golden=False)
    with dvsdk.load(net, "sim://") as loaded:
        rows = [r for r in loaded.profile({"x": _r(1, 40, 120)}) if r["where"] == "hw"]
    weights, io = wt.size * 2, (40 * 120 + 40 * 600) * 2
    assert len(rows) == 1 and rows[0]["bytes"] <= weights + 2 * io
