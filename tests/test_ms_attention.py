"""onnxruntime's com.microsoft Attention contrib op (IR ``MsAttention``,
:mod:`dvsdk.cpu.ms_attention`): the kernel against onnxruntime's CPU kernel over head
counts, causal masking, 1-D / 2-D / 3-D mask_index, qkv_hidden_sizes, scale and
attention_bias; a model compiled and run on sim:// with numpy's BLAS entry points trapped;
the refusals (past, present, do_rotary, past_present_share_buffer, bad attributes and
shapes) as typed errors naming the field; the domain handling of the ONNX frontend.

Tolerance: the float32 CPU path, ``8 eps * max|expected|`` (tests/test_onnx_nodes.py's
CPU_EPS): the projection and both products are float32 sums in another order than MLAS's,
the softmax is float64 rounded once (onnxruntime's is float32), each a few ulps of the
largest output at most (measured: under 2 eps).
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.cpu.ops import run_op
from dvsdk.errors import ModelError, NetFileError, UnsupportedOps

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

TOL = 8 * float(np.finfo(np.float32).eps)
MS = helper.make_opsetid("com.microsoft", 1)


def _rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


def _model(b: int, s: int, hidden: int, attrs: dict, sizes: list[int] | None = None,
           mask: np.ndarray | None = None, attn_bias: np.ndarray | None = None,
           seed: int = 0, const_mask: bool = False, pre: bool = False):
    """A one-node (``pre``: LayerNormalization first) model and its feeds."""
    r = _rng(seed)
    total = sum(sizes) if sizes else 3 * hidden
    vh = sizes[2] if sizes else hidden
    w = (r.standard_normal((hidden, total)) * 0.4).astype(np.float32)
    bias = (r.standard_normal(total) * 0.5).astype(np.float32)
    x = r.standard_normal((b, s, hidden)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "bias")]
    feeds = {"x": x}
    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    ins = ["xn" if pre else "x", "w", "bias"]
    if mask is not None:
        ins.append("mask")
        if const_mask:
            inits.append(numpy_helper.from_array(mask, "mask"))
        else:
            feeds["mask"] = mask
            gin.append(helper.make_tensor_value_info("mask", TensorProto.INT32, mask.shape))
    if attn_bias is not None:
        ins += [""] * (5 - len(ins)) + ["ab"]
        feeds["ab"] = attn_bias
        gin.append(helper.make_tensor_value_info("ab", TensorProto.FLOAT, attn_bias.shape))
    a = dict(attrs)
    if sizes:
        a["qkv_hidden_sizes"] = sizes
    nodes = [helper.make_node("Attention", ins, ["y"], domain="com.microsoft", **a)]
    if pre:
        inits += [numpy_helper.from_array(np.linspace(0.5, 1.5, hidden, dtype=np.float32), "g"),
                  numpy_helper.from_array(np.zeros(hidden, np.float32), "beta")]
        nodes.insert(0, helper.make_node("LayerNormalization", ["x", "g", "beta"], ["xn"],
                                         axis=-1))
    graph = helper.make_graph(nodes, "msattn", gin,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             (b, s, vh))], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), MS])
    model.ir_version = 8
    return model, feeds, (x, w, bias)


def _ort(model, feeds) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def _close(got: np.ndarray, want: np.ndarray, what: object = "") -> None:
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    assert np.isfinite(got).all(), what
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    assert err <= TOL * float(np.max(np.abs(want))), (what, err)


B, S, H = 2, 5, 8
CONFIGS = [
    ("heads1", 1, {}, None, None),
    ("heads2", 2, {}, None, None),
    ("heads4", 4, {}, None, None),
    ("causal1", 1, {"unidirectional": 1}, None, None),
    ("causal4", 4, {"unidirectional": 1}, None, None),
    ("lengths", 2, {}, None, np.array([3, 5], np.int32)),
    ("lengths_causal", 4, {"unidirectional": 1}, None, np.array([2, 4], np.int32)),
    ("end_start", 2, {}, None, np.array([4, 5, 1, 2], np.int32)),
    ("pad2d", 2, {}, None, np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]], np.int32)),
    ("pad2d_causal", 2, {"unidirectional": 1}, None,
     np.array([[1, 0, 1, 1, 0], [1, 1, 1, 0, 1]], np.int32)),
    ("all_masked_row", 2, {"mask_filter_value": -50.0}, None,
     np.array([[0, 0, 0, 0, 0], [1, 1, 1, 1, 0]], np.int32)),
    ("mask3d", 2, {}, None, (_rng(7).random((B, S, S)) > 0.4).astype(np.int32)),
    ("scale", 2, {"scale": 0.3}, None, None),
    ("qkv_sizes", 2, {}, [8, 8, 4], None),
    ("qkv_sizes_wide", 4, {"unidirectional": 1, "scale": 0.2}, [12, 12, 16],
     np.array([4, 3], np.int32)),
]


@pytest.mark.parametrize("name,heads,attrs,sizes,mask", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_kernel_matches_onnxruntime(name, heads, attrs, sizes, mask):
    attrs = {"num_heads": heads, **attrs}
    model, feeds, (x, w, bias) = _model(B, S, H, attrs, sizes, mask)
    want = _ort(model, feeds)
    full = dict(attrs, **({"qkv_hidden_sizes": sizes} if sizes else {}))
    got = run_op("MsAttention", [x, w, bias, mask], full)[0]
    _close(got, want, name)


def test_attention_bias_is_added_to_the_scores():
    ab = (_rng(3).standard_normal((1, 2, S, S)) * 2).astype(np.float32)
    model, feeds, (x, w, bias) = _model(B, S, H, {"num_heads": 2}, attn_bias=ab)
    got = run_op("MsAttention", [x, w, bias, None, None, ab], {"num_heads": 2})[0]
    _close(got, _ort(model, feeds))


@pytest.mark.parametrize("const_mask", [False, True])
def test_a_model_compiles_and_runs_on_sim_without_blas(monkeypatch, const_mask):
    """LayerNormalization -> com.microsoft Attention (4 heads, causal, a 2-D padding mask
    as a graph input or an initializer), compiled and run on sim://, BLAS trapped."""
    import dvsdk

    mask = np.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    model, feeds, _ = _model(2, 6, 16, {"num_heads": 4, "unidirectional": 1}, mask=mask,
                             seed=5, const_mask=const_mask, pre=True)
    want = _ort(model, feeds)
    net = dvsdk.compile(model, golden=False)
    assert "MsAttention" in {s.get("op") for s in net.meta["program"]}

    def trap(*args, **kwargs):
        raise AssertionError("BLAS was called")

    for fn in ("matmul", "dot", "vdot", "inner", "tensordot", "einsum", "outer"):
        monkeypatch.setattr(np, fn, trap)
    with dvsdk.load(net, "sim://") as loaded:
        got = loaded.run(feeds)["y"]
    _close(got, want)


def test_qkv_hidden_sizes_model_compiles_with_the_v_width():
    import dvsdk

    model, feeds, _ = _model(1, 4, 8, {"num_heads": 2, "scale": 0.25}, sizes=[8, 8, 12],
                             mask=np.array([3], np.int32))
    want = _ort(model, feeds)
    net = dvsdk.compile(model, golden=False)
    with dvsdk.load(net, "sim://") as loaded:
        got = loaded.run(feeds)["y"]
    assert got.shape == (1, 4, 12)
    _close(got, want)


# --------------------------------------------------------------------------- refusals
X, W, BIAS = (np.ones((1, 4, 8), np.float32), np.ones((8, 24), np.float32),
              np.zeros(24, np.float32))


@pytest.mark.parametrize("inputs,attrs,field", [
    ([X, W, BIAS], {}, "num_heads"),
    ([X, W, BIAS], {"num_heads": 3}, "num_heads"),
    ([X, W, BIAS], {"num_heads": 0}, "num_heads"),
    ([X, W, BIAS], {"num_heads": 2, "do_rotary": 1}, "do_rotary"),
    ([X, W, BIAS], {"num_heads": 2, "past_present_share_buffer": 1},
     "past_present_share_buffer"),
    ([X, W, BIAS], {"num_heads": 2, "qkv_hidden_sizes": [8, 4, 12]}, "qkv_hidden_sizes"),
    ([X, W, BIAS], {"num_heads": 2, "qkv_hidden_sizes": [8, 8, 4]}, "qkv_hidden_sizes"),
    ([X, np.ones((8, 20), np.float32), np.zeros(20, np.float32)], {"num_heads": 2},
     "weights"),
    ([X, np.ones((6, 24), np.float32), BIAS], {"num_heads": 2}, "weights"),
    ([X, W, np.zeros(12, np.float32)], {"num_heads": 2}, "bias"),
    ([X[0], W, BIAS], {"num_heads": 2}, "input"),
    ([X, W, BIAS, np.ones((1, 1, 4, 4), np.int32)], {"num_heads": 2}, "mask_index"),
    ([X, W, BIAS, np.ones((3,), np.int32)], {"num_heads": 2}, "mask_index"),
    ([X, W, BIAS, None, np.zeros((2, 1, 2, 0, 4), np.float32)], {"num_heads": 2}, "past"),
    ([X, W, BIAS, None, None, np.zeros((1, 2, 3, 3), np.float32)], {"num_heads": 2},
     "attention_bias"),
])
def test_kernel_refusals_name_the_field(inputs, attrs, field):
    with pytest.raises(ModelError) as e:
        run_op("MsAttention", inputs, attrs)
    assert e.value.field == f"com.microsoft.Attention.{field}", e.value.field


def _node_model(node, extra_inputs=(), outputs=("y",)):
    w = numpy_helper.from_array(W, "w")
    b = numpy_helper.from_array(BIAS, "bias")
    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)]
    gin += [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in extra_inputs]
    gout = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    return helper.make_model(helper.make_graph([node], "g", gin, gout, [w, b]),
                             opset_imports=[helper.make_opsetid("", 17), MS])


@pytest.mark.parametrize("ins,outs,field", [
    (["x", "w", "bias", "", "past"], ["y"], "past"),
    (["x", "w", "bias"], ["y", "present"], "present"),
])
def test_frontend_refuses_the_key_value_cache(ins, outs, field):
    import dvsdk

    node = helper.make_node("Attention", ins, outs, domain="com.microsoft", num_heads=2)
    extra = [("past", (2, 1, 2, 1, 4))] if "past" in ins else []
    with pytest.raises(ModelError) as e:
        dvsdk.compile(_node_model(node, extra, outs), golden=False)
    assert e.value.field == f"com.microsoft.Attention.{field}"


@pytest.mark.parametrize("attrs,field", [
    ({"num_heads": 2, "do_rotary": 1}, "do_rotary"),
    ({"num_heads": 2, "past_present_share_buffer": 1}, "past_present_share_buffer"),
    ({}, "num_heads"),
    ({"num_heads": 5}, "num_heads"),
])
def test_compile_refuses_bad_attributes_naming_the_field(attrs, field):
    import dvsdk

    node = helper.make_node("Attention", ["x", "w", "bias"], ["y"], domain="com.microsoft",
                            **attrs)
    with pytest.raises(ModelError) as e:
        dvsdk.compile(_node_model(node), golden=False)
    assert field in str(e.value.field)


def test_msattention_in_the_default_domain_and_other_contrib_ops_are_refused():
    import dvsdk

    node = helper.make_node("MsAttention", ["x", "w", "bias"], ["y"], num_heads=2)
    with pytest.raises(UnsupportedOps) as e:
        dvsdk.compile(_node_model(node), golden=False)
    assert e.value.ops == [("MsAttention", e.value.ops[0][1])]
    other = helper.make_node("FusedMatMul", ["x", "w"], ["y"], domain="com.microsoft")
    with pytest.raises(UnsupportedOps) as e:
        dvsdk.compile(_node_model(other), golden=False)
    assert e.value.ops[0][0] == "com.microsoft::FusedMatMul"


def test_netbin_attribute_checks():
    from dvsdk.runtime.records import check_attrs

    check_attrs("MsAttention", {"num_heads": 2, "unidirectional": 1, "scale": 0.5,
                                "mask_filter_value": -1e4, "qkv_hidden_sizes": [8, 8, 4]},
                [3, 2, 1], "p")
    for attrs in ({}, {"num_heads": 0}, {"num_heads": 2, "unidirectional": 2},
                  {"num_heads": 2, "qkv_hidden_sizes": [8, 8]},
                  {"num_heads": 2, "mask_filter_value": float("nan")},
                  {"num_heads": 2, "do_rotary": 3}):
        with pytest.raises(NetFileError):
            check_attrs("MsAttention", attrs, [3, 2, 1], "p")


def test_board_model_counts_the_projection_and_both_products():
    from dvsdk.runtime.board_model import _macs

    x, w = np.zeros((2, 5, 8)), np.zeros((8, 20))
    got = _macs("MsAttention", [x, w], 2 * 5 * 4, {"qkv_hidden_sizes": [8, 8, 4]})
    assert got == 2 * 5 * (8 * 20 + 5 * (8 + 4))
