"""Fewer CPU steps (issue 14): large stride-1 max-pools as cascades of hardware pools,
HardSigmoid folded into its conv with the hardware's ReLU6, channel Splits and Slices as
zero-copy views, nearest 4x/8x upsampling as 2x stages; each against onnxruntime, with the
cases that must stay on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from dvsdk.compiler.build import Options, compile, load_model
from dvsdk.compiler.chain import chain_kinds
from dvsdk.compiler.interpret import run_graph
from dvsdk.runtime.net import Net

from .compile_harness import SIM, cpu_types, hw_stage_count, max_err, ort_reference, where
from .onnx_models import NetBuilder, make_feeds

OPSET = 17


def _pool_model(shape, **attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "mp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def _halves(rng, shape, lo=-8.0, hi=-1.0):
    """FP16-representable values (so a max is exact on the device); all negative by
    default, so a border padded with 0 instead of -inf would win the max."""
    return rng.uniform(lo, hi, shape).astype(np.float16).astype(np.float32)


POOLS = [
    # (input NCHW, attrs): YOLO's SPPF and SPP windows, then the padding edge cases
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
    ((1, 16, 13, 11), dict(kernel_shape=[9, 9], pads=[4, 4, 4, 4])),
    ((1, 8, 15, 15), dict(kernel_shape=[13, 13], pads=[6, 6, 6, 6])),
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5])),                               # no padding
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5], pads=[1, 3, 4, 0])),            # asymmetric
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5], pads=[0, 4, 2, 1])),
    ((1, 3, 11, 7), dict(kernel_shape=[3, 5], pads=[1, 2, 1, 2])),            # 5 wide, 3 high
    ((1, 3, 11, 7), dict(kernel_shape=[7, 4], pads=[3, 1, 3, 2])),            # even width
    ((1, 9, 8, 8), dict(kernel_shape=[1, 6], pads=[0, 2, 0, 3])),             # a 1-high row
    ((1, 8, 12, 12), dict(kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 8, 11, 13), dict(kernel_shape=[5, 5], strides=[2, 2], ceil_mode=1)),
    ((1, 8, 11, 13), dict(kernel_shape=[5, 4], strides=[3, 2], pads=[1, 0, 2, 3],
                          ceil_mode=1)),
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2], ceil_mode=1)),
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], strides=[5, 5])),              # was on the CPU
]


@pytest.mark.parametrize("shape,attrs", POOLS, ids=lambda v: str(v))
def test_large_max_pools_run_as_cascades_of_hardware_pools(shape, attrs):
    model = _pool_model(shape, **attrs)
    net = compile(model, golden=False)
    assert where(net) == [("MaxPool", "hw")], net.meta["report"]
    kh, kw = attrs["kernel_shape"]
    assert hw_stage_count(net) == max(-(-(kh - 1) // 2), -(-(kw - 1) // 2))
    assert net.meta["stats"]["commands"] == 1  # the stages chained (dvsdk.compiler.chain)
    x = _halves(np.random.default_rng(sum(shape)), shape)
    ref = ort_reference(model, {"x": x})[0]
    with Net(net, SIM) as dev:
        y = dev.run(x)["y"]
    assert np.array_equal(y, ref)  # a max of FP16 values is exact


def test_a_cascade_keeps_the_max_where_positive_and_negative_values_mix():
    model = _pool_model((1, 16, 20, 20), kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    x = _halves(np.random.default_rng(3), (1, 16, 20, 20), -4, 4)
    with Net(compile(model, golden=False), SIM) as dev:
        assert np.array_equal(dev.run(x)["y"], ort_reference(model, {"x": x})[0])


@pytest.mark.parametrize("shape,attrs,why", [
    ((1, 8, 12, 12), dict(kernel_shape=[5, 5], dilations=[2, 2], pads=[4, 4, 4, 4]),
     "dilated"),
    ((1, 8, 12, 12), dict(kernel_shape=[5, 1], pads=[2, 0, 2, 0]), "split into"),
    ((1, 8, 12, 12), dict(kernel_shape=[7, 2]), "split into"),
])
def test_max_pools_a_cascade_cannot_express_stay_on_the_cpu(shape, attrs, why):
    model = _pool_model(shape, **attrs)
    net = compile(model, golden=False)
    assert where(net) == [("MaxPool", "cpu")]
    assert why in net.meta["report"][0]["detail"]
    x = _halves(np.random.default_rng(5), shape)
    with Net(net, SIM) as dev:
        assert np.array_equal(dev.run(x)["y"], ort_reference(model, {"x": x})[0])


# --------------------------------------------------------------------------- split views
def _c2f(split_sizes=(8, 8), order=(0, 1), opset=OPSET, num_outputs=False):
    """YOLOv8's C2f: conv -> Split in two -> a conv on the second half -> Concat of both
    halves and that conv's output -> conv."""
    b = NetBuilder(21, opset)
    c = sum(split_sizes)
    y = b.node("Relu", [b.conv("x", 3, c)])
    if num_outputs:
        parts = b.node("Split", [y], n_out=len(split_sizes), axis=1,
                       num_outputs=len(split_sizes))
    else:
        parts = b.node("Split", [y, b.const(np.array(split_sizes, np.int64), "split")],
                       n_out=len(split_sizes), axis=1)
    h = b.node("Relu", [b.conv(parts[-1], split_sizes[-1], 8)])
    cat = b.node("Concat", [parts[i] for i in order] + [h], axis=1)
    out = b.conv(cat, c + 8, 8, k=1)
    return b.model([("x", (1, 3, 12, 10))], [out], "c2f")


def _run_against_ort(model, tol=2e-2):
    net = compile(model, golden=False)
    feeds = make_feeds(model, seed=2)
    ref = ort_reference(model, feeds)
    with Net(net, SIM) as dev:
        out = dev.run(feeds)
    for spec, r in zip(net.meta["outputs"], ref):
        err, span = max_err(out[spec["name"]], r)
        assert err <= 1e-3 + tol * span, (spec["name"], err, span)
    return net


@pytest.mark.parametrize("sizes,num_outputs", [((8, 8), False), ((16, 8, 8), False),
                                               ((8, 8), True)])
def test_a_channel_split_is_views_and_the_c2f_concat_places_the_split_tensor(sizes,
                                                                           num_outputs):
    model = _c2f(sizes, order=tuple(range(len(sizes))), num_outputs=num_outputs,
                 opset=18 if num_outputs else OPSET)
    net = _run_against_ort(model)
    assert cpu_types(net) == []
    rep = {r["type"]: r["detail"] for r in net.meta["report"]}
    assert "zero-copy" in rep["Split"] and "zero-copy" in rep["Concat"]
    # the parts are the byte ranges of their channels in the split tensor, which itself
    # sits at the start of the concat's slot
    t = net.meta["tensors"]
    split = next(n for n in model.graph.node if n.op_type == "Split")
    concat = next(n for n in model.graph.node if n.op_type == "Concat")
    start = t[split.input[0]]["device"]["offset"]
    h, w, _ = t[split.input[0]]["device"]["hwc"]
    assert start == t[concat.output[0]]["device"]["offset"]
    for name, c0 in zip(split.output, np.cumsum((0,) + sizes[:-1])):
        assert t[name]["device"]["offset"] == start + h * w * int(c0) * 2


@pytest.mark.parametrize("sizes,order,cpu", [
    ((5, 11), (0, 1), ["Concat", "Split"]),  # a first part of 5 channels: no whole chunks
    ((8, 8), (1, 0), ["Concat"]),            # halves swapped: the split tensor cannot sit
])                                            # in the concat, the concat runs on the CPU
def test_splits_and_concats_that_cannot_be_views_stay_on_the_cpu(sizes, order, cpu):
    net = _run_against_ort(_c2f(sizes, order))
    assert cpu_types(net) == cpu


def test_a_last_part_of_any_width_is_a_view_too():
    b = NetBuilder(23)
    y = b.node("Relu", [b.conv("x", 3, 13)])
    a, c = b.node("Split", [y, b.const(np.array([8, 5], np.int64), "s")], n_out=2, axis=1)
    model = b.model([("x", (1, 3, 12, 10))], [b.conv(a, 8, 8), b.conv(c, 5, 8), c],
                    "split_8_5")
    net = _run_against_ort(model)
    assert cpu_types(net) == []


def test_a_spatial_split_stays_on_the_cpu():
    b = NetBuilder(22)
    y = b.node("Relu", [b.conv("x", 3, 8)])
    top, bottom = b.node("Split", [y, b.const(np.array([4, 8], np.int64), "s")], n_out=2,
                         axis=2)
    model = b.model([("x", (1, 3, 12, 10))], [b.conv(top, 8, 8), b.conv(bottom, 8, 8)],
                    "spatial_split")
    net = _run_against_ort(model)
    assert cpu_types(net) == ["Split"]


# --------------------------------------------------------------------------- HardSigmoid
def _se(alpha=1 / 6, beta=0.5, swap=False, extra_reader=False, c=16):
    """MobileNetV3's squeeze-excitation: x -> GAP -> 1x1 ReLU -> 1x1 -> HardSigmoid ->
    Mul(x, s) -> the block's 1x1 projection (torch: alpha 1/6; paddle's PP-OCR: 0.2)."""
    b = NetBuilder(31)
    x = b.node("Relu", [b.conv("x", 3, c)])
    s = b.node("Relu", [b.conv(b.node("GlobalAveragePool", [x]), c, 8, k=1)])
    s = b.node("HardSigmoid", [b.conv(s, 8, c, k=1)], alpha=alpha, beta=beta)
    m = b.node("Mul", [s, x] if swap else [x, s])
    outs = [b.conv(m, c, 8, k=1)]
    if extra_reader:
        outs.append(b.node("Relu", [m]))
    return b.model([("x", (1, 3, 12, 10))], outs, "se")


def _float32_rewrite_is_exact(model):
    """The rewritten graph in float32 (dvsdk's interpreter) equals the model (onnxruntime)."""
    graph = load_model(model, Options())
    feeds = make_feeds(model, seed=4)
    got = run_graph(graph, feeds)
    for name, ref in zip(graph.outputs, ort_reference(model, feeds)):
        np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6)
    return graph


@pytest.mark.parametrize("alpha,beta,swap", [(1 / 6, 0.5, False), (0.2, 0.5, True),
                                             (-0.3, 0.4, False)])
def test_hardsigmoid_in_squeeze_excitation_runs_as_relu6_with_the_sixth_in_the_projection(
        alpha, beta, swap):
    model = _se(alpha, beta, swap)
    graph = _float32_rewrite_is_exact(model)
    assert [op.type for op in graph.ops].count("Mul") == 1  # no constant 1/6 left over
    net = _run_against_ort(model)
    assert cpu_types(net) == ["Mul"]  # x * s: two tensors, no DV700 form
    hs = next(n.name for n in model.graph.node if n.op_type == "HardSigmoid")
    assert [(r["type"], r["where"]) for r in net.meta["report"] if r["op"] == hs] == [
        ("Clip", "hw")]  # reported under its own name, as the ReLU6 it became
    assert "relu6" in next(r["detail"] for r in net.meta["report"] if r["op"] == hs)


def test_hardsigmoid_without_a_conv_sink_keeps_a_constant_sixth_on_the_device():
    model = _se(extra_reader=True)  # the Mul's output also feeds a Relu: no weights to scale
    graph = _float32_rewrite_is_exact(model)
    assert [op.type for op in graph.ops].count("Mul") == 2
    net = _run_against_ort(model)
    assert cpu_types(net) == ["Mul"]


def test_hardsigmoid_before_a_conv_folds_the_sixth_into_it():
    b = NetBuilder(32)
    y = b.node("HardSigmoid", [b.conv("x", 3, 8)], alpha=0.2, beta=0.5)
    model = b.model([("x", (1, 3, 12, 10))], [b.conv(y, 8, 8)], "hs_conv")
    graph = _float32_rewrite_is_exact(model)
    assert [op.type for op in graph.ops] == ["Conv", "Clip", "Conv"]
    net = _run_against_ort(model)
    assert cpu_types(net) == [] and hw_stage_count(net) == 2


@pytest.mark.parametrize("case", ["input", "shared"])
def test_hardsigmoid_without_its_own_conv_stays_on_the_cpu(case):
    b = NetBuilder(33)
    if case == "input":  # nothing to fold the affine part into
        outs = [b.conv(b.node("HardSigmoid", ["x"]), 3, 8)]
    else:  # the conv's output is read by another op too
        y = b.conv("x", 3, 8)
        outs = [b.node("HardSigmoid", [y]), b.node("Relu", [y])]
    model = b.model([("x", (1, 3, 12, 10))], outs, "hs_cpu")
    net = _run_against_ort(model)
    assert cpu_types(net) == ["HardSigmoid"]


# --------------------------------------------------------------------------- scheduling
def _kinds(net) -> list[str]:
    return [s["kind"] for s in net.meta["program"]]


def test_independent_branches_share_segments():
    """Two heads, each conv -> CPU op -> conv, written interleaved: lowered in that order
    they would alternate five times; scheduled, the two CPU ops run back to back."""
    b = NetBuilder(41)
    x = b.node("Relu", [b.conv("x", 3, 8)])
    a = b.conv(x, 8, 8)
    c = b.conv(x, 8, 8)
    ea = b.node("Exp", [a])
    ec = b.node("Exp", [c])
    model = b.model([("x", (1, 3, 12, 10))], [b.conv(ea, 8, 8), b.conv(ec, 8, 8)], "heads")
    assert [n.op_type for n in model.graph.node][1:] == ["Relu", "Conv", "Conv", "Exp", "Exp",
                                                         "Conv", "Conv"]
    net = _run_against_ort(model)
    assert _kinds(net) == ["hw", "cpu", "cpu", "hw"]


def test_a_concat_reader_waits_for_every_member_writer_even_on_the_cpu():
    """The concat's output has no writer by name: its members write into its slot, one of
    them a CPU step (uploaded there).  The conv reading the concat must follow both."""
    b = NetBuilder(42)
    x = b.node("Relu", [b.conv("x", 3, 8)])
    cpu_member = b.node("Exp", [b.conv(x, 8, 8)])
    hw_member = b.node("Relu", [b.conv(x, 8, 8)])
    other = b.node("Exp", [b.conv(x, 8, 8)])  # tempts the scheduler to run CPU work early
    cat = b.node("Concat", [hw_member, cpu_member], axis=1)
    model = b.model([("x", (1, 3, 12, 10))], [b.conv(cat, 16, 8), b.conv(other, 8, 8)],
                    "cat_cpu_member")
    net = _run_against_ort(model)
    assert "zero-copy" in next(r["detail"] for r in net.meta["report"]
                               if r["type"] == "Concat")
    assert _kinds(net) == ["hw", "cpu", "cpu", "hw"]
    last = net.meta["program"][-1]
    assert cat in [i for ins in last["command_inputs"] for i in ins]


def test_a_chain_keeps_its_order():
    b = NetBuilder(43)
    y = b.conv(b.node("Exp", [b.conv("x", 3, 8)]), 8, 8)
    net = _run_against_ort(b.model([("x", (1, 3, 12, 10))], [y], "chain"))
    assert _kinds(net) == ["hw", "cpu", "hw"]


# --------------------------------------------------------------------------- upsampling
def _resize(scales, size=(5, 7), **attrs):
    b = NetBuilder(51)
    y = b.node("Relu", [b.conv("x", 3, 8)])
    up = b.node("Resize", [y, "", b.const(np.array(scales, np.float32), "scales")], **attrs)
    model = b.model([("x", (1, 3, *size))], [b.conv(up, 8, 8)], "resize")
    return model, up


@pytest.mark.parametrize("f,attrs", [
    (4, dict(mode="nearest")),                                          # ONNX defaults
    (8, dict(mode="nearest", coordinate_transformation_mode="asymmetric",
             nearest_mode="floor")),                                    # torch's export
])
def test_nearest_upsampling_by_a_power_of_two_is_a_chain_of_2x_runs(f, attrs):
    model, up = _resize([1, 1, f, f], **attrs)
    net = _run_against_ort(model)
    assert cpu_types(net) == []
    k = f.bit_length() - 1
    stages = [k for s in net.meta["program"] for r in s.get("runs", []) for k in chain_kinds(r)
              if "upsample" in k]
    assert len(stages) == k and hw_stage_count(net) == 2 + k


@pytest.mark.parametrize("scales,attrs", [
    ([1, 1, 3, 3], dict(mode="nearest")),                        # not a power of two
    ([1, 1, 4, 2], dict(mode="nearest")),                        # different factors
    ([1, 1, 4, 4], dict(mode="nearest", coordinate_transformation_mode="tf_half_pixel_for_nn")),
    ([1, 1, 4, 4], dict(mode="linear")),
])
def test_upsampling_that_is_not_a_2x_chain_stays_on_the_cpu(scales, attrs):
    model, _ = _resize(scales, **attrs)
    net = _run_against_ort(model)
    assert cpu_types(net) == ["Resize"]
