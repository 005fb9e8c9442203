"""IR, ONNX frontend, shape inference/folding and simplification passes.

Every numerical check runs the transformed IR with dvsdk.compiler.interpret.run_graph and
compares it with onnxruntime on the *original* model: max-abs error <= 1e-4 * max(1, range
of the ORT output), float32, seeded random inputs (tests/onnx_models.py::assert_close).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from dvsdk.compiler import simplify as S
from dvsdk.compiler.fold import fold_constants, infer_and_fold, infer_shapes
from dvsdk.compiler.frontends.onnx import load_onnx
from dvsdk.compiler.interpret import run_graph
from dvsdk.compiler.ir import Graph, Op, Tensor
from dvsdk.errors import ModelError, UnsupportedOps

from . import onnx_models as M

ALL_CASES = M.SINGLE_OP_CASES + M.PATTERN_CASES + M.NET_CASES
_BY_NAME = {c.name: c for c in ALL_CASES}


def compare(graph: Graph, model: onnx.ModelProto, case: M.Case | None = None, seed: int = 0):
    feeds = M.make_feeds(model, seed, positive=bool(case and case.positive),
                         input_sizes=case.input_sizes if case else None)
    ref = M.ort_run(model, feeds)
    out = run_graph(graph, feeds)
    assert len(graph.outputs) == len(ref)
    for name, r in zip(graph.outputs, ref, strict=True):
        M.assert_close(out[name], r, name)


def folded(name: str) -> tuple[Graph, onnx.ModelProto]:
    model = _BY_NAME[name].build()
    return infer_and_fold(load_onnx(model)), model


# --------------------------------------------------------------------------- end to end
@pytest.mark.parametrize("case", ALL_CASES, ids=lambda c: c.name)
def test_optimize_matches_onnxruntime(case):
    model = case.build()
    g = S.optimize(load_onnx(model, case.input_sizes or None))
    g.validate()
    compare(g, model, case)


@pytest.mark.parametrize("name", ["mobilenetv2_like", "resnet_like"])
def test_nets_fully_fused(name):
    g, model = folded(name)
    opt = S.optimize(g)
    types = opt.op_types()
    assert "BatchNormalization" not in types and "Identity" not in types
    assert types.count("Conv") == g.op_types().count("Conv")
    for op in opt.ops:
        if op.type == "Clip":
            assert op.inputs == [op.inputs[0]] and op.attrs == {"min": 0.0, "max": 6.0}
        if op.type == "Gemm":
            assert op.attrs["transB"] == 1 and opt.const(op.inputs[2]).ndim == 1
    # a second run changes nothing
    assert S.optimize(opt).op_types() == types
    compare(opt, model, seed=3)


def test_export_style_shape_subgraphs_fold_away():
    model = M.torch_export_like()
    g = infer_and_fold(load_onnx(model))  # dynamic batch -> 1
    shape_ops = {"Shape", "Gather", "ConstantOfShape", "Unsqueeze", "Concat", "Slice", "Cast",
                 "Transpose", "Range", "Floor", "Mul", "Sub"}
    assert not shape_ops & set(g.op_types()), g.op_types()
    assert g.op_types() == ["Pad", "Conv", "Relu", "Resize", "MaxPool", "Reshape", "Gemm"]
    pad = g.ops[0]
    assert g.const(pad.inputs[1]).tolist() == [0, 0, 0, 1, 0, 0, 1, 2]
    assert g.shape(g.outputs[0]) == (1, 10)
    compare(g, model)
    opt = S.optimize(g)  # the zero Pad folds into the Conv
    assert opt.op_types()[0] == "Conv" and opt.ops[0].attrs["pads"] == [0, 1, 1, 2]
    compare(opt, model)


def test_shapes_agree_with_onnx_shape_inference():
    for build in (M.mobilenetv2_like, M.resnet_like, M.pad_conv, M.convT_bn, M.conv_affine):
        model = build()
        inferred = onnx.shape_inference.infer_shapes(model)
        theirs = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            dims = vi.type.tensor_type.shape.dim
            if dims and all(d.HasField("dim_value") for d in dims):
                theirs[vi.name] = tuple(d.dim_value for d in dims)
        g = infer_shapes(load_onnx(model), strict=True)
        assert theirs
        for name, shape in theirs.items():
            assert g.shape(name) == shape, name


# --------------------------------------------------------------------------- passes
def _run_pass(p, name: str) -> tuple[Graph, Graph, onnx.ModelProto]:
    g, model = folded(name)
    before = g.op_types()
    out = p(g)
    assert g.op_types() == before  # passes are pure
    compare(out, model)
    compare(g, model)
    return g, out, model


def test_pass_remove_identity():
    _, out, _ = _run_pass(S.remove_identity, "identity_chain")
    assert out.op_types() == ["Relu"]


def test_remove_identity_keeps_graph_input_passthrough():
    model = M.single("Identity", [(1, 3)])
    out = S.remove_identity(infer_and_fold(load_onnx(model)))
    assert out.op_types() == ["Identity"]
    compare(out, model)


def test_pass_fold_pad():
    g, out, _ = _run_pass(S.fold_pad, "pad_conv")
    assert g.op_types().count("Pad") == 2
    assert out.op_types().count("Pad") == 1  # the one before MaxPool stays
    conv = next(o for o in out.ops if o.type == "Conv")
    assert conv.attrs["pads"] == [1, 2, 2, 1]
    pool = next(o for o in out.ops if o.type == "AveragePool")
    assert pool.attrs["pads"] == [1, 2, 2, 1]
    assert next(o for o in out.ops if o.type == "MaxPool").inputs[0] != "x"


def test_fold_pad_skips_nonzero_value_and_exclude_pad():
    for value, cip in ((0.5, 1), (0.0, 0)):
        b = M.NetBuilder(1)
        p = b.node("Pad", ["x", b.const(M._i(0, 0, 1, 1, 0, 0, 1, 1)), b.const(np.float32(value))])
        y = b.node("AveragePool", [p], kernel_shape=[2, 2], count_include_pad=cip)
        model = b.model([("x", (1, 2, 5, 5))], [y], "pad_pool")
        out = S.fold_pad(infer_and_fold(load_onnx(model)))
        assert "Pad" in out.op_types()
        compare(out, model)


def test_pass_fold_batchnorm():
    for name, producer in (("conv_bn_relu", "Conv"), ("convT_bn", "ConvTranspose"),
                           ("gemm_bn", "Gemm"), ("mobilenetv2_like", "Conv")):
        g, model = folded(name)
        if producer == "Gemm":
            g = S.canonicalize_gemm(g)
        out = S.fold_batchnorm(g)
        assert "BatchNormalization" in g.op_types()
        assert "BatchNormalization" not in out.op_types(), name
        compare(out, model)


def test_fold_batchnorm_leaves_unfoldable_bn():
    _, out, _ = _run_pass(S.fold_batchnorm, "bn_standalone")
    assert out.op_types() == ["Conv", "Add", "BatchNormalization"]


def test_pass_fold_affine():
    g, out, _ = _run_pass(S.fold_affine, "conv_affine")
    assert g.op_types().count("Conv") == 2 and len(g.ops) == 10
    # the Sub before the padded conv cannot fold; everything else does
    assert out.op_types() == ["Sub", "Conv", "Conv"]


def test_pass_normalize_clip():
    g, out, _ = _run_pass(S.normalize_clip, "mobilenetv2_like")
    clips = [o for o in out.ops if o.type == "Clip"]
    assert clips and all(o.attrs == {"min": 0.0, "max": 6.0} and len(o.inputs) == 1
                         for o in clips)
    for name, attrs in (("clip_max_only", {"min": -np.inf, "max": 0.5}),
                        ("clip_attrs_opset6", {"min": -0.5, "max": 0.7})):
        g, model = folded(name)
        out = S.normalize_clip(g)
        assert out.ops[0].attrs == pytest.approx(attrs)
        compare(out, model)


def test_pass_matmul_to_gemm():
    _, out, _ = _run_pass(S.matmul_to_gemm, "matmul_add")
    assert out.op_types() == ["Flatten", "Gemm", "Relu"]
    gemm = out.ops[1]
    assert gemm.attrs["transB"] == 1 and out.shape(gemm.inputs[1]) == (10, 48)
    assert out.shape(gemm.inputs[2]) == (10,)


def test_pass_canonicalize_gemm():
    for name in ("gemm_transA_alpha_beta", "gemm_scalar_c", "gemm_no_c", "gemm_transB"):
        g, model = folded(name)
        out = S.canonicalize_gemm(g)
        op = out.ops[0]
        assert op.attrs["transB"] == 1 and op.attrs["alpha"] == 1.0 and op.attrs["beta"] == 1.0
        compare(out, model)


def test_pass_split_grouped_conv():
    g, out, _ = _run_pass(S.split_grouped_conv, "grouped_conv")
    types = out.op_types()
    assert types.count("Split") == 1 and types.count("Concat") == 1
    assert [o.attrs["group"] for o in out.ops if o.type == "Conv"] == [1, 1, 1, 1, 12]


# --------------------------------------------------------------------------- frontend
def test_unknown_ops_listed_together():
    with pytest.raises(UnsupportedOps) as ei:
        load_onnx(M.unknown_ops_model())
    assert ei.value.ops == [("NonMaxSuppression", "nms_1"), ("Unique", "unique_7"),
                            ("com.example::FancyOp", "fancy")]
    msg = str(ei.value)
    assert "NonMaxSuppression (nms_1)" in msg and "Unique (unique_7)" in msg
    assert isinstance(ei.value, ModelError)


def test_dynamic_spatial_dims_need_input_size():
    model = M.dynamic_spatial_model()
    with pytest.raises(ModelError, match="free dimension 'height'") as ei:
        load_onnx(model)
    assert "--input-size" in str(ei.value) and ei.value.field == "x"
    for sizes in ({"x": (1, 3, 12, 10)}, {"x": (12, 10)}):
        g = infer_and_fold(load_onnx(model, sizes))
        assert g.shape("x") == (1, 3, 12, 10)
        compare(g, model, M.Case("dyn", M.dynamic_spatial_model, input_sizes={"x": (1, 3, 12, 10)}))


def test_input_size_errors():
    model = M.dynamic_spatial_model()
    with pytest.raises(ModelError, match="does not have"):
        load_onnx(model, {"image": (1, 3, 8, 8)})
    with pytest.raises(ModelError, match="fixed dimension"):
        load_onnx(model, {"x": (1, 4, 8, 8)})
    with pytest.raises(ModelError, match="rank"):
        load_onnx(model, {"x": (1, 3, 8)})


def test_free_batch_becomes_one():
    g = load_onnx(M.torch_export_like())
    assert g.shape("x") == (1, 3, 16, 17)


def test_corrupt_and_missing_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(np.random.default_rng(0).bytes(300))
    with pytest.raises(ModelError, match="cannot read ONNX model") as ei:
        load_onnx(bad)
    assert ei.value.field == str(bad) and ei.value.hint
    good = M.conv_bn_relu().SerializeToString()
    trunc = tmp_path / "trunc.onnx"
    trunc.write_bytes(good[: len(good) // 2])
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        load_onnx(trunc)
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        load_onnx(b"\x00\x01garbage")
    with pytest.raises(ModelError, match="file not found"):
        load_onnx(tmp_path / "nope.onnx")
    (tmp_path / "ok.onnx").write_bytes(good)
    assert load_onnx(tmp_path / "ok.onnx").op_types() == ["Conv", "BatchNormalization", "Relu"]


def test_missing_initializer():
    with pytest.raises(ModelError, match="not produced") as ei:
        load_onnx(M.missing_initializer_model())
    assert ei.value.value == "W_missing" and "conv_no_w" in ei.value.field


def test_external_data(tmp_path):
    model = M.resnet_like(size=32)
    path = tmp_path / "net.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="net.weights", size_threshold=0)
    g = infer_and_fold(load_onnx(path))
    compare(g, M.resnet_like(size=32))
    (tmp_path / "net.weights").unlink()
    with pytest.raises(ModelError, match="cannot read ONNX model"):
        load_onnx(path)
    stub = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ModelError, match="external file"):
        load_onnx(stub)


def test_opset_forms_are_normalized():
    g = load_onnx(M.single("Clip", [(1, 4)], {"min": -0.5, "max": 0.7}, opset=6))
    op = g.ops[0]
    assert len(op.inputs) == 3 and g.const(op.inputs[2]) == np.float32(0.7)
    g = load_onnx(M.single("Upsample", [(1, 2, 3, 4), M._f(1, 1, 2, 2)], opset=9))
    assert g.ops[0].type == "Resize" and g.ops[0].inputs[1] == ""
    assert g.ops[0].attrs["coordinate_transformation_mode"] == "asymmetric"
    g = load_onnx(M.single("Split", [(1, 6, 4, 4)], {"axis": 1, "split": [2, 4]}, opset=11,
                           n_out=2))
    assert g.const(g.ops[0].inputs[1]).tolist() == [2, 4]
    g = load_onnx(M.single("Softmax", [(2, 3)], opset=11))
    assert g.ops[0].attrs == {"opset": 11, "axis": 1}
    g = load_onnx(M.single("Unsqueeze", [(4, 7)], {"axes": [1]}, opset=11))
    assert g.const(g.ops[0].inputs[1]).tolist() == [1]
    g = infer_shapes(load_onnx(M.single("Conv", [(1, 3, 7, 8), M.w(1, 4, 3, 4, 4)],
                                        {"auto_pad": "SAME_UPPER", "strides": [2, 3]})))
    assert g.ops[0].attrs == {"kernel_shape": [4, 4], "strides": [2, 3], "pads": [1, 1, 2, 1],
                              "dilations": [1, 1], "group": 1}


def test_constant_nodes_become_tensors():
    c = helper.make_node("Constant", [], ["k"], value=onnx.numpy_helper.from_array(M._f(2.0)))
    c2 = helper.make_node("Constant", [], ["k2"], value_ints=[1, 3])
    add = helper.make_node("Add", ["x", "k"], ["y"])
    rs = helper.make_node("Reshape", ["y", "k2"], ["z"])
    model = M.make_model([c, c2, add, rs], [("x", (3,))], ["z"])
    g = load_onnx(model)
    assert g.op_types() == ["Add", "Reshape"] and g.const("k2").tolist() == [1, 3]
    compare(infer_and_fold(g), model)


def test_runtime_shape_input_is_an_error():
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = M.make_model([node], [("x", (2, 3)), ("s", (2,), onnx.TensorProto.INT64)], ["y"])
    with pytest.raises(ModelError, match="not constant") as err:
        infer_and_fold(load_onnx(model))
    assert "from graph input s" in str(err.value)
    # the value of x (not only its shape) feeds the Reshape's shape: named too
    nodes = [helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Cast", ["m"], ["mi"], to=onnx.TensorProto.INT64),
             helper.make_node("Shape", ["x"], ["sx"]),
             helper.make_node("Mul", ["sx", "mi"], ["s2"]),
             helper.make_node("Reshape", ["x", "s2"], ["y"])]
    model = M.make_model(nodes, [("x", (2, 3))], ["y"])
    with pytest.raises(ModelError, match="from graph input x;"):
        infer_and_fold(load_onnx(model))


def test_value_sources_stop_at_shape_and_size():
    t = {n: Tensor(n, (2, 3), np.float32) for n in ("x", "z", "a")}
    t.update({n: Tensor(n) for n in ("s", "n", "r", "q")})
    ops = [Op("Shape", "sh", ["x"], ["s"]), Op("Size", "sz", ["z"], ["n"]),
           Op("Relu", "relu", ["z"], ["a"]), Op("Mul", "mul", ["s", "n"], ["r"]),
           Op("Add", "add", ["r", "a"], ["q"])]
    g = Graph(t, ops, ["x", "z"], ["q"])
    assert g.value_sources(["r"]) == []
    assert g.value_sources(["q"]) == ["z"]
    assert g.value_sources(["x", ""]) == ["x"]


# --------------------------------------------------------------------------- IR
def _toy() -> Graph:
    t = {n: Tensor(n, (1, 2), np.float32) for n in ("x", "a", "b", "y")}
    t["w"] = Tensor("w", const=np.ones((1, 2), np.float32))
    ops = [Op("Add", "add", ["a", "w"], ["b"]), Op("Relu", "relu", ["x"], ["a"]),
           Op("Neg", "neg", ["b"], ["y"]), Op("Abs", "dead", ["x"], ["unused"])]
    t["unused"] = Tensor("unused", (1, 2), np.float32)
    return Graph(t, ops, ["x"], ["y"])


def test_ir_topo_sort_maps_and_dce():
    g = _toy()
    with pytest.raises(ModelError, match="not defined before"):
        g.validate()
    g.topo_sort()
    assert g.op_types() == ["Relu", "Add", "Neg", "Abs"]
    g.validate()
    assert g.producers()["b"].name == "add"
    assert [o.name for o in g.consumers()["x"]] == ["relu", "dead"]
    assert g.dead_code_elimination() == 1
    assert "unused" not in g.tensors and g.op_types() == ["Relu", "Add", "Neg"]
    out = run_graph(g, {"x": np.array([[-1.0, 2.0]], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[-1.0, -3.0]])


def test_ir_validate_and_cycles():
    g = _toy().topo_sort()
    g.tensors["b"].shape = None
    with pytest.raises(ModelError, match="shape unknown"):
        g.validate()
    g.validate(require_shapes=False)
    g = _toy().topo_sort()
    g.ops.append(Op("Relu", "again", ["x"], ["a"]))
    with pytest.raises(ModelError, match="defined twice"):
        g.validate(require_shapes=False)
    g = _toy()
    g.ops[1].inputs = ["y"]  # relu reads neg's output: a cycle
    with pytest.raises(ModelError, match="cycle"):
        g.topo_sort()


def test_ir_copy_and_constants_are_safe():
    g = _toy().topo_sort()
    with pytest.raises(ValueError):
        g.const("w")[0, 0] = 5.0
    h = g.copy()
    h.ops[0].attrs["k"] = 1
    h.tensors["x"].shape = (9,)
    assert "k" not in g.ops[0].attrs and g.shape("x") == (1, 2)
    assert h.const("w") is g.const("w")


def test_ir_edit_helpers():
    g = _toy().topo_sort()
    relu = g.op_by_name("relu")
    g.remove_op(g.op_by_name("neg"), rewire=True)  # y is a graph output: add now writes y
    assert g.producers()["y"].name == "add" and "b" not in g.tensors
    name = g.add_tensor("a")
    assert name == "a_1"
    g.replace_op(relu, [Op("Relu", "r1", ["x"], [name]), Op("Identity", "r2", [name], ["a"])])
    assert g.op_types()[:2] == ["Relu", "Identity"]
    g.validate(require_shapes=False)
    assert g.unique_name("relu") == "relu"  # removed above
    assert "add" in g.summary()


def test_fold_constants_is_pure_and_folds_shape_of_static_tensor():
    model = M.single("Shape", [(1, 4, 7, 7)], out_type=onnx.TensorProto.INT64)
    g = infer_shapes(load_onnx(model))
    out = fold_constants(g)
    assert g.op_types() == ["Shape"] and out.op_types() == []
    assert out.const("y0").tolist() == [1, 4, 7, 7]
    compare(out, model)
