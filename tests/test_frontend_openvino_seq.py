"""OpenVINO IR from the installed ``openvino``: ScaledDotProductAttention-13 and Range-1/-4
(dvsdk/compiler/frontends/openvino_v10_seq.py), and the realistic nets converted to IR
compiling with the ONNX model's DV700/CPU split (issue 28 item 4).

Every IR here is written by OpenVINO itself (``openvino.convert_model`` of the ONNX stand-in,
or the ``opset13``/``opset1`` node builders, then ``openvino.save_model`` with
``compress_to_fp16=False``), compiled, run on sim://, and compared with OpenVINO's runtime
(CPU plugin, f32 inference precision): at the suite's FP16 tolerance
(tests/compile_harness.py) for the small graphs, at the FP16 levels of
tests/test_realistic_nets.py for the nets.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.frontends import load
from dvsdk.runtime.net import Net

from .compile_harness import SIM, assert_matches, max_err
from .realistic_nets import NETWORKS, input_of

ov = pytest.importorskip("openvino")
o13 = pytest.importorskip("openvino.opset13")
o1 = pytest.importorskip("openvino.opset1")


def _save(model, path) -> str:
    xml = str(path / "m.xml")
    ov.save_model(model, xml, compress_to_fp16=False)
    return xml


def _ov_run(xml: str, feeds: list[np.ndarray]) -> list[np.ndarray]:
    cm = ov.Core().compile_model(xml, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    res = cm(feeds)
    return [res[o] for o in cm.outputs]


def _check(xml: str, feeds: list[np.ndarray], exact: bool = False):
    net = compile(xml, golden=False)
    refs = _ov_run(xml, feeds)
    names = [i["name"] for i in net.meta["inputs"]]
    with Net(net, SIM) as n:
        out = n.run(dict(zip(names, feeds)))
    outs = [out[o["name"]] for o in net.meta["outputs"]]
    assert len(outs) == len(refs)
    for got, ref in zip(outs, refs):
        assert got.shape == ref.shape
        if exact:
            assert got.dtype == ref.dtype and np.array_equal(got, ref), (got, ref)
        else:
            assert_matches(got, ref, what=xml)
    return net


def _param(shape, name, dtype=np.float32):
    return o13.parameter(list(shape), dtype, name=name)


# --------------------------------------------------------------------------- SDPA
SDPA_CASES = {
    # name: (Q, K, V shapes, mask: None | "float" | "bool", scale or None, causal)
    "plain4d": ((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 6), None, None, False),
    "scale": ((1, 2, 5, 8), (1, 2, 7, 8), (1, 2, 7, 8), None, 0.3, False),
    "float_mask": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 4), "float", None, False),
    "bool_mask": ((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), "bool", None, False),
    "causal_square": ((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8), None, None, True),
    "causal_ignores_mask": ((1, 1, 5, 4), (1, 1, 7, 4), (1, 1, 7, 3), "float", 0.5, True),
    "rank3": ((2, 5, 16), (2, 5, 16), (2, 5, 16), "float", None, False),
}


@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_matches_openvino_runtime(case, tmp_path):
    qs, ks, vs, mask, scale, causal = SDPA_CASES[case]
    rng = np.random.default_rng(5)
    q, k, v = (_param(s, n) for s, n in ((qs, "q"), (ks, "k"), (vs, "v")))
    params, feeds = [q, k, v], [rng.standard_normal(s).astype(np.float32)
                                for s in (qs, ks, vs)]
    args = [q, k, v]
    lead = qs[:-2] + (qs[-2], ks[-2])
    if mask == "float":  # a graph input: added to the scores as it is
        m = _param((1,) * (len(qs) - 2) + lead[-2:], "mask")
        params.append(m)
        feeds.append((rng.standard_normal(m.get_output_partial_shape(0).to_shape())
                      * 2).astype(np.float32))
        args.append(m)
    elif mask == "bool":  # a constant: True attends, every row keeps one key
        bm = rng.random(lead) < 0.6
        bm[..., 0] = True
        args.append(o13.constant(bm))
    if scale is not None:
        if len(args) == 3:
            args.append(o13.constant(np.zeros((), np.float32)))
        args.append(o13.constant(np.float32(scale)))
    y = o13.scaled_dot_product_attention(*args, causal=causal)
    xml = _save(ov.Model([y], params, "sdpa"), tmp_path)
    assert 'type="ScaledDotProductAttention"' in open(xml).read()
    net = _check(xml, feeds)
    types = {r["type"] for r in net.meta["report"]}
    assert {"MatMul", "Softmax"} <= types


def test_sdpa_decomposition_follows_the_specification(tmp_path):
    """Without a scale input, scale = 1 / Sqrt(E) folds to a constant; causal makes a constant
    -inf / 0 [L, S] bias from Range, Less and Where (all folded at compile time)."""
    q, k, v = _param((1, 1, 3, 4), "q"), _param((1, 1, 5, 4), "k"), _param((1, 1, 5, 4), "v")
    y = o13.scaled_dot_product_attention(q, k, v, causal=True)
    g = load(_save(ov.Model([y], [q, k, v], "c"), tmp_path))
    from dvsdk.compiler.fold import infer_and_fold

    g = infer_and_fold(g)
    assert g.op_types() == ["Transpose", "MatMul", "Mul", "Add", "Softmax", "MatMul"]
    mul, add = g.ops[2], g.ops[3]
    assert g.const(mul.inputs[1]) == np.float32(1) / np.sqrt(np.float32(4))
    bias = g.const(add.inputs[1])
    want = np.where(np.arange(5)[None, :] > np.arange(3)[:, None], -np.inf, 0.0)
    assert bias.dtype == np.float32 and np.array_equal(bias, want)
    # a scale with the scalar zero mask OpenVINO writes for "no mask": no bias Add at all
    y = o13.scaled_dot_product_attention(q, k, v, o13.constant(np.zeros((), np.float32)),
                                         o13.constant(np.float32(0.25)), causal=False)
    (tmp_path / "z").mkdir()
    g = infer_and_fold(load(_save(ov.Model([y], [q, k, v], "z"), tmp_path / "z")))
    assert g.op_types() == ["Transpose", "MatMul", "Mul", "Softmax", "MatMul"]
    assert g.const(g.ops[2].inputs[1]) == np.float32(0.25)


# --------------------------------------------------------------------------- Range
def test_range_of_static_shape_folds_and_matches_openvino(tmp_path):
    """Range(0, ShapeOf(x)[2], 1) (Range-4, i64) as positions added to x: folds to a constant."""
    x = _param((1, 2, 5, 3), "x")
    n = o13.gather(o13.shape_of(x), o13.constant(np.int64(2)), o13.constant(np.int64(0)))
    r = o13.range(o13.constant(np.int64(0)), n, o13.constant(np.int64(1)), "i64")
    pos = o13.convert(o13.unsqueeze(r, o13.constant(np.array([1], np.int64))), "f32")
    xml = _save(ov.Model([o13.add(x, pos)], [x], "r"), tmp_path)
    assert 'type="Range"' in open(xml).read()
    g = load(xml)
    from dvsdk.compiler.fold import infer_and_fold

    assert infer_and_fold(g).op_types() == ["Add"]
    _check(xml, [np.random.default_rng(1).standard_normal((1, 2, 5, 3)).astype(np.float32)])


@pytest.mark.parametrize("args,out_type", [
    ((np.int64(2), np.int64(11), np.int64(3)), "i64"),
    ((np.int32(9), np.int32(-4), np.int32(-2)), "i32"),
    ((np.float32(0.5), np.float32(3.0), np.float32(0.25)), "f32"),
    ((np.float32(1.7), np.float32(9.9), np.float32(2.2)), "i64"),   # truncated first
    ((np.int64(1), np.int64(7), np.int64(2)), "f32"),
])
def test_range4_constant_bounds_are_exact(args, out_type, tmp_path):
    x = _param((1,), "x")
    r = o13.range(*(o13.constant(a) for a in args), out_type)
    y = o13.add(o13.convert(r, "f32"), x)
    xml = _save(ov.Model([y], [x], "r4"), tmp_path)
    _check(xml, [np.zeros(1, np.float32)], exact=True)


def test_range1_with_a_computed_stop(tmp_path):
    """Range-1 (no output_type): the inputs' own type; stop read from a static shape."""
    x = _param((1, 3, 4, 7), "x")
    stop = o13.gather(o13.shape_of(x), o13.constant(np.int64(3)), o13.constant(np.int64(0)))
    stop = o13.multiply(stop, o13.constant(np.int64(2)))            # 1, 3, ... 13: W values
    r = o1.range(o13.constant(np.int64(1)), stop, o13.constant(np.int64(2)))
    y = o13.multiply(x, o13.convert(r, "f32"))
    xml = _save(ov.Model([y], [x], "r1"), tmp_path)
    _check(xml, [np.random.default_rng(2).standard_normal((1, 3, 4, 7)).astype(np.float32)])


def test_range_of_a_runtime_value_is_refused_by_name(tmp_path):
    from dvsdk.errors import ModelError

    x, n = _param((1, 4), "x"), _param((), "n", np.int64)
    r = o13.range(o13.constant(np.int64(0)), n, o13.constant(np.int64(1)), "f32")
    xml = _save(ov.Model([o13.add(x, o13.reduce_sum(r, o13.constant(np.int64(0))))],
                         [x, n], "rr"), tmp_path)
    with pytest.raises(ModelError, match="not constant") as err:
        compile(xml, golden=False)
    assert "Range" in str(err.value)


# --------------------------------------------------------------------------- nets as IR
NETS = {
    # name: ({"hw": n, "cpu": n} from ONNX, the same from IR, error bound / range)
    "ppocr_cls": ({"hw": 36, "cpu": 41}, {"hw": 36, "cpu": 41}, 1e-2),
    # OpenVINO drops the stand-in's all-zero LayerNorm biases (5 CPU Adds) and writes torch's
    # LayerNorm as MVN, whose decomposition squares with Mul where torch has Pow; the
    # attention (OpenVINO fuses it into ScaledDotProductAttention) splits as from ONNX
    "ppocr_rec": ({"hw": 49, "cpu": 180}, {"hw": 49, "cpu": 175}, 5e-2),
    "yolov8n": ({"hw": 98, "cpu": 114}, {"hw": 98, "cpu": 114}, 3e-2),
}


def _split(net) -> dict:
    return dict(collections.Counter(r["where"] for r in net.meta["report"]))


@pytest.mark.parametrize("name", list(NETS))
def test_realistic_net_as_ir_splits_like_onnx_and_matches_openvino(name, tmp_path):
    from_onnx, from_ir, bound = NETS[name]
    build, size = NETWORKS[name]
    model = build(size)
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    xml = _save(ov.convert_model(str(src)), tmp_path)
    assert _split(compile(model, golden=False)) == from_onnx
    net = compile(xml, golden=False)
    assert _split(net) == from_ir
    onnx_cpu = collections.Counter(r["type"] for r in compile(model, golden=False)
                                   .meta["report"] if r["where"] == "cpu")
    ir_cpu = collections.Counter(r["type"] for r in net.meta["report"] if r["where"] == "cpu")
    for t in ("HardSigmoid", "HardSwish", "ReduceMean", "GlobalAveragePool", "Softmax"):
        assert ir_cpu[t] == onnx_cpu[t], t
    x = input_of(name)
    refs = _ov_run(xml, [x])
    with Net(net, SIM) as n:
        out = n.run(x)
    for spec, ref in zip(net.meta["outputs"], refs):
        err, span = max_err(out[spec["name"]], ref)
        assert err <= bound * span, (name, spec["name"], err / span)
