"""Every NN kernel of dvsdk.vx on the simulator against numpy written for the test in
OpenVX's own dimension order (tests/vx_refs.py), plus where each one runs.

Tolerances: the DV700 stores FP16 (relative step 2**-11) and accumulates in float32; CPU
steps are float32.  Integer-valued data small enough to be exact in FP16 must match
exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx

from . import vx_refs as ref

F32 = vx.Type.FLOAT32
W, R = vx.Accessor.WRITE_ONLY, vx.Accessor.READ_ONLY


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


@pytest.fixture
def ctx(device):
    with vx.Context(device) as c:
        yield c


def tensor(ctx, data, dtype=F32):
    data = np.asarray(data)
    t = vx.Tensor(ctx, data.shape, dtype)
    t.copy_patch(data.astype(np.float32), W)
    return t


def run(graph):
    status = graph.verify()
    assert status == vx.Status.SUCCESS, graph.error
    assert graph.process() == vx.Status.SUCCESS, graph.error


def close(got, want, rel=4e-3, atol=2e-3):
    """|got - want| <= atol * max(1, max|want|) + rel * |want| (FP16 storage of inputs,
    weights and outputs; float32 sums)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert got.shape == want.shape
    err = np.abs(got - want)
    atol = atol * max(1.0, float(np.abs(want).max()))
    assert np.all(err <= atol + rel * np.abs(want)), float(err.max())


def rng(seed=0):
    return np.random.default_rng(seed)


# -- convolution ---------------------------------------------------------------------------

@pytest.mark.parametrize("case", [
    dict(size=(9, 7), k=(3, 3), pad=(1, 1), skip=(1, 1), dil=(0, 0), ceil=False),
    dict(size=(11, 9), k=(3, 5), pad=(0, 2), skip=(2, 1), dil=(0, 0), ceil=False),
    dict(size=(10, 10), k=(3, 3), pad=(0, 0), skip=(2, 2), dil=(0, 0), ceil=True),
    dict(size=(12, 12), k=(3, 3), pad=(2, 2), skip=(1, 1), dil=(1, 1), ceil=False),
])
def test_convolution_matches_numpy(ctx, case):
    r = rng(1)
    cin, cout = 5, 6
    x = r.standard_normal((*case["size"], cin, 1))
    w = r.standard_normal((*case["k"], cin, cout)) * 0.3
    b = r.standard_normal(cout)
    want = ref.convolution(x, w, b, case["pad"], case["dil"], case["skip"], case["ceil"])
    g = ctx.graph()
    y = vx.Tensor(ctx, want.shape, F32)
    params = vx.ConvolutionParams(
        padding_x=case["pad"][0], padding_y=case["pad"][1], dilation_x=case["dil"][0],
        dilation_y=case["dil"][1], down_scale_size_rounding=vx.RoundingType.CEILING
        if case["ceil"] else vx.RoundingType.FLOOR)
    node = vx.convolution_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b), params, y)
    run(g)
    close(y.copy_patch(), want)
    assert node.derived["skip"] == case["skip"]
    assert node.where == "DV700", node.placement


def test_convolution_unshared_biases_and_batches(ctx):
    r = rng(2)
    x = r.standard_normal((6, 5, 3, 2))                 # two images: batches
    w = r.standard_normal((3, 3, 3, 4)) * 0.3
    b = r.standard_normal((4, 3, 4))                    # [width, height, OFM]: unshared
    want = ref.convolution(x, w, b)
    g = ctx.graph()
    y = vx.Tensor(ctx, want.shape, F32)
    vx.convolution_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b),
                         vx.ConvolutionParams(), y)
    run(g)
    close(y.copy_patch(), want)


def test_convolution_small_integers_are_exact(ctx):
    r = rng(3)
    x = r.integers(-3, 4, (8, 8, 4, 1))
    w = r.integers(-2, 3, (3, 3, 4, 8))
    g = ctx.graph()
    y = vx.Tensor(ctx, (6, 6, 8, 1), F32)
    vx.convolution_layer(g, tensor(ctx, x), tensor(ctx, w), None, vx.ConvolutionParams(), y)
    run(g)
    assert np.array_equal(y.copy_patch(), ref.convolution(x, w, None))


# -- deconvolution --------------------------------------------------------------------------

@pytest.mark.parametrize("up,pad,k,a", [((2, 2), (1, 1), (4, 4), (0, 0)),
                                        ((2, 2), (1, 1), (4, 4), (1, 1)),
                                        ((2, 3), (0, 1), (3, 3), (1, 2))])
def test_deconvolution_matches_numpy(ctx, up, pad, k, a):
    r = rng(4)
    x = r.standard_normal((4, 5, 3, 1))
    w = r.standard_normal((*k, 3, 2)) * 0.3
    b = r.standard_normal(2)
    want = ref.deconvolution(x, w, b, up, pad, a)
    g = ctx.graph()
    y = vx.Tensor(ctx, want.shape, F32)
    node = vx.deconvolution_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b),
                                  vx.DeconvolutionParams(padding_x=pad[0], padding_y=pad[1],
                                                         a_x=a[0], a_y=a[1]), y)
    run(g)
    close(y.copy_patch(), want)
    assert "DV700" in node.where or "CPU" in node.where


# -- fully connected -------------------------------------------------------------------------

def test_fully_connected_2d_input(ctx):
    r = rng(5)
    x = r.standard_normal((20, 1))                      # [IFM, batches]
    w = r.standard_normal((20, 7)) * 0.3
    b = r.standard_normal(7)
    g = ctx.graph()
    y = vx.Tensor(ctx, (7, 1), F32)
    node = vx.fully_connected_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b),
                                    vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_ZERO, y)
    run(g)
    close(y.copy_patch(), ref.fully_connected(x, w, b))
    assert node.where == "DV700"


def test_fully_connected_4d_input_flattens_in_openvx_order(ctx):
    """j = x + W * (y + H * c): a weight that picks one (x, y, c) picks that element."""
    r = rng(6)
    x = r.standard_normal((3, 4, 5, 1))
    w = np.zeros((60, 3))
    w[2 + 3 * (1 + 4 * 4), 0] = 1.0                     # x=2, y=1, c=4
    w[0, 1] = 1.0
    w[:, 2] = r.standard_normal(60) * 0.2
    g = ctx.graph()
    y = vx.Tensor(ctx, (3, 1), F32)
    vx.fully_connected_layer(g, tensor(ctx, x), tensor(ctx, w), None,
                             vx.ConvertPolicy.WRAP, vx.RoundPolicy.TO_NEAREST_EVEN, y)
    run(g)
    got = y.copy_patch()
    close(got, ref.fully_connected(x, w, None))
    assert got[0, 0] == np.float32(np.float16(x[2, 1, 4, 0]))


# -- pooling ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,size,pad,skip,ceil", [
    ("max", (2, 2), (0, 0), (2, 2), False), ("max", (3, 3), (1, 1), (2, 2), False),
    ("avg", (3, 3), (1, 1), (1, 1), False), ("avg", (2, 2), (0, 0), (2, 2), True),
    ("max", (3, 3), (0, 0), (2, 2), True)])
def test_pooling_matches_numpy(ctx, kind, size, pad, skip, ceil):
    x = rng(7).standard_normal((9, 7, 4, 1))            # negatives: zero padding shows
    want = ref.pooling(x, kind, size, pad, skip, ceil)
    g = ctx.graph()
    y = vx.Tensor(ctx, want.shape, F32)
    vx.pooling_layer(g, tensor(ctx, x), vx.PoolingType.MAX if kind == "max" else
                     vx.PoolingType.AVG, size[0], size[1], pad[0], pad[1],
                     vx.RoundingType.CEILING if ceil else vx.RoundingType.FLOOR, y)
    run(g)
    close(y.copy_patch(), want)


# -- softmax, normalization, activation ---------------------------------------------------------

@pytest.mark.parametrize("dims", [(10,), (10, 3), (2, 3, 6), (2, 3, 6, 1)])
def test_softmax_axis_by_rank(ctx, dims):
    x = rng(8).standard_normal(dims) * 2
    g = ctx.graph()
    y = vx.Tensor(ctx, dims, F32)
    vx.softmax_layer(g, tensor(ctx, x), y)
    run(g)
    close(y.copy_patch(), ref.softmax(x), rel=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind,n,alpha,beta", [
    (vx.NormType.ACROSS_MAPS, 3, 0.5, 0.75), (vx.NormType.ACROSS_MAPS, 7, 2.0, 1.5),
    (vx.NormType.SAME_MAP, 3, 0.5, 0.75), (vx.NormType.SAME_MAP, 5, 1.0, 0.5)])
def test_normalization_matches_numpy(ctx, kind, n, alpha, beta):
    x = rng(9).standard_normal((6, 5, 9, 1)) * 3
    g = ctx.graph()
    y = vx.Tensor(ctx, x.shape, F32)
    node = vx.normalization_layer(g, tensor(ctx, x), kind, n, alpha, beta, y)
    run(g)
    close(y.copy_patch(), ref.normalization(x, kind == vx.NormType.ACROSS_MAPS, n, alpha,
                                             beta), rel=1e-5, atol=1e-6)
    assert node.where == "CPU"


@pytest.mark.parametrize("fn", list(ref.ACTIVATIONS))
def test_activation_all_nine_functions(ctx, fn):
    r = rng(10)
    x = r.standard_normal((5, 4, 8, 1)) * 2
    if fn == "SQRT":
        x = np.abs(x)
    a, b = (6.0, 0.0) if fn == "BRELU" else (1.7, 0.66) if fn in ("HYPERBOLIC_TAN", "LINEAR") \
        else (0.0, 0.0)
    g = ctx.graph()
    y = vx.Tensor(ctx, x.shape, F32)
    vx.activation_layer(g, tensor(ctx, x), vx.ActivationFunction[fn], a, b, y)
    run(g)
    close(y.copy_patch(), ref.ACTIVATIONS[fn](x, a, b))


# -- ROI pooling --------------------------------------------------------------------------------

def test_roi_pooling_matches_numpy(ctx):
    r = rng(11)
    x = r.standard_normal((12, 10, 3, 1))
    rois = np.array([[1, 2, 8, 7], [0, 0, 11, 9], [5, 3, 5, 3], [-3, -2, 20, 30]],
                    np.float32).T                       # [4, roi_count]
    g = ctx.graph()
    y = vx.Tensor(ctx, (4, 3, 3, 4), F32)               # [pooled w, pooled h, IFM, ROIs]
    node = vx.roi_pooling_layer(g, tensor(ctx, x), tensor(ctx, rois),
                                vx.RoiPoolParams(vx.PoolingType.MAX), y)
    run(g)
    close(y.copy_patch(), ref.roi_pooling(x[..., 0], rois, (4, 3)), rel=0, atol=2e-3)
    assert node.where == "CPU"


# -- immediate mode -------------------------------------------------------------------------------

def test_vxu_runs_a_layer_as_a_one_node_graph(ctx):
    x = rng(12).standard_normal((6, 6, 2, 1))
    y = vx.Tensor(ctx, x.shape, F32)
    before = ctx.references
    status = vx.vxu.activation_layer(ctx, tensor(ctx, x), vx.ActivationFunction.RELU, 0, 0, y)
    assert status == vx.Status.SUCCESS
    close(y.copy_patch(), np.maximum(x, 0))
    assert ctx.references == before + 1                 # only the input tensor made here
    bad = vx.vxu.pooling_layer(ctx, y, vx.PoolingType.MAX, 9, 9, 0, 0,
                               vx.RoundingType.FLOOR, y)
    assert bad != vx.Status.SUCCESS and vx.vxu.last_error is not None


# -- views: concatenation and split without copies at the API ----------------------------------

def test_writing_channel_views_is_a_concat_and_reading_them_a_split(ctx):
    r = rng(13)
    x = r.standard_normal((6, 6, 8, 1))
    wa, wb = r.standard_normal((1, 1, 8, 8)) * 0.3, r.standard_normal((3, 3, 8, 8)) * 0.3
    g = ctx.graph()
    cat = g.virtual_tensor((6, 6, 16, 1), F32)               # [conv a | conv b] on channels
    xin = tensor(ctx, x)
    na = vx.convolution_layer(g, xin, tensor(ctx, wa), None, vx.ConvolutionParams(),
                              cat.view((0, 0, 0, 0), (6, 6, 8, 1)))
    vx.convolution_layer(g, xin, tensor(ctx, wb), None,
                         vx.ConvolutionParams(padding_x=1, padding_y=1),
                         cat.view((0, 0, 8, 0), (6, 6, 16, 1)))
    whole = vx.Tensor(ctx, (6, 6, 16, 1), F32)
    vx.activation_layer(g, cat, vx.ActivationFunction.RELU, 0, 0, whole)   # reads the concat
    part = vx.Tensor(ctx, (6, 6, 4, 1), F32)                               # reads a split
    vx.activation_layer(g, cat.view((0, 0, 6, 0), (6, 6, 10, 1)), vx.ActivationFunction.ABS,
                        0, 0, part)
    run(g)
    both = np.concatenate([ref.convolution(x, wa, None), ref.convolution(x, wb, None, (1, 1))],
                          axis=2)
    close(whole.copy_patch(), np.maximum(both, 0))
    close(part.copy_patch(), np.abs(both[:, :, 6:10]))
    concat = [p for n in g.nodes for p in n.placement if p["type"] == "Concat"]
    assert concat and concat[0]["where"] == "DV700"             # no copy: the two convs
    assert any(w in concat[0]["detail"] for w in ("zero-copy", "multi-run"))  # write in place
    assert na.where == "DV700"


def test_views_of_a_graph_input_are_fed_by_the_host(ctx):
    x = rng(14).standard_normal((5, 4, 6, 1))
    g = ctx.graph()
    xin = tensor(ctx, x)
    y = vx.Tensor(ctx, (3, 2, 6, 1), F32)
    vx.activation_layer(g, xin.view((1, 1, 0, 0), (4, 3, 6, 1)), vx.ActivationFunction.RELU,
                        0, 0, y)
    run(g)
    close(y.copy_patch(), np.maximum(x[1:4, 1:3], 0))


def test_non_virtual_output_views_land_in_their_parent(ctx):
    x = rng(15).standard_normal((4, 4, 2, 1))
    g = ctx.graph()
    out = vx.Tensor(ctx, (4, 4, 6, 1), F32)
    out.copy_patch(np.full((4, 4, 6, 1), 9, np.float32), W)
    vx.activation_layer(g, tensor(ctx, x), vx.ActivationFunction.ABS, 0, 0,
                        out.view((0, 0, 2, 0), (4, 4, 4, 1)))
    run(g)
    got = out.copy_patch()
    close(got[:, :, 2:4], np.abs(x))
    assert np.all(got[:, :, :2] == 9) and np.all(got[:, :, 4:] == 9)   # the rest untouched


def test_convolutions_over_channel_views_become_one_grouped_conv(ctx):
    """Two groups of 4 -> 6 maps, nodes created in reverse channel order, one group's output
    view also read alone: one grouped Conv, the same numbers as per-group numpy."""
    r = rng(16)
    x = r.standard_normal((7, 6, 8, 1))
    ws = [r.standard_normal((3, 3, 4, 6)) * 0.3 for _ in range(2)]
    bs = [r.standard_normal(6) for _ in range(2)]
    g = ctx.graph()
    xin = tensor(ctx, x)
    y = vx.Tensor(ctx, (5, 4, 12, 1), F32)
    nodes = [vx.convolution_layer(g, xin.view((0, 0, 4 * k, 0), (7, 6, 4 * k + 4, 1)),
                                  tensor(ctx, ws[k]), tensor(ctx, bs[k]), vx.ConvolutionParams(),
                                  y.view((0, 0, 6 * k, 0), (5, 4, 6 * k + 6, 1)))
             for k in (1, 0)]
    second = vx.Tensor(ctx, (5, 4, 6, 1), F32)
    vx.activation_layer(g, y.view((0, 0, 6, 0), (5, 4, 12, 1)), vx.ActivationFunction.RELU, 0,
                        0, second)
    run(g)
    want = np.concatenate([ref.convolution(x[:, :, 4 * k:4 * k + 4], ws[k], bs[k])
                           for k in (0, 1)], axis=2)
    close(y.copy_patch(), want)
    close(second.copy_patch(), np.maximum(want[:, :, 6:], 0))
    convs = [op for op in g._ir.ops if op.type == "Conv"]
    assert len(convs) == 2 and all(o.name.startswith(nodes[1].name) for o in convs)  # split
    assert all("grouped convolution of 2 nodes" in n.placement[0]["detail"] for n in nodes)


def test_maxroipool_cpu_kernel_equals_onnxruntime():
    """The CPU step ROI pooling lowers to is ONNX MaxRoiPool: onnxruntime is the reference,
    ROIs inside, across the border, degenerate and reversed."""
    from onnx import TensorProto, helper

    from dvsdk.cpu.ops import run_op

    from .onnx_models import ort_run

    x = rng(17).standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0, 1, 2, 8, 7], [1, 0, 0, 11, 9], [0, 5.4, 3.5, 5.6, 3.5],
                     [1, -3, -2, 20, 30], [0, 9, 9, 2, 2], [1, 2.5, 1.5, 7.49, 6.5]],
                    np.float32)
    for shape, scale in (((3, 4), 1.0), ((2, 2), 0.5)):
        node = helper.make_node("MaxRoiPool", ["x", "r"], ["y"], pooled_shape=list(shape),
                                spatial_scale=scale)
        model = helper.make_model(helper.make_graph(
            [node], "roi", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                            helper.make_tensor_value_info("r", TensorProto.FLOAT, rois.shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]),
            opset_imports=[helper.make_opsetid("", 13)])
        want = ort_run(model, {"x": x, "r": rois})[0]
        got = run_op("MaxRoiPool", [x, rois], {"pooled_shape": shape, "spatial_scale": scale})
        assert np.array_equal(got[0], want)
