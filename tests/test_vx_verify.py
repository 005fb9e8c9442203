"""Verification: the seed's shape vectors as known answers, and every graph-formalism
violation refused with the status OpenVX uses and a message naming node and parameter."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx
from dvsdk.vx import shapes

F32 = vx.Type.FLOAT32
WO = vx.Accessor.WRITE_ONLY
S = vx.Status


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


@pytest.fixture
def ctx(device):
    with vx.Context(device) as c:
        yield c


def const(ctx, shape, value=0.1):
    t = vx.Tensor(ctx, shape, F32)
    t.copy_patch(np.full(shape, value, np.float32), WO)
    return t


def conv(g, x, y, k=3, cin=None, cout=None, **params):
    ctx = g.context
    cin = cin or x.dims[2]
    cout = cout or (y.dims[2] if y.dims else 4)
    return vx.convolution_layer(g, x, const(ctx, (k, k, cin, cout)), None,
                                vx.ConvolutionParams(**params), y)


# -- the seed's shape vectors (formats.md §2.7) ---------------------------------------------

@pytest.mark.parametrize("w,k,pad,dil,skip,ceil,want", [
    (224, 11, 0, 0, 4, False, 54), (224, 11, 0, 0, 4, True, 55),
    (10, 3, 2, 1, 1, False, 10)])
def test_conv_size_vectors(w, k, pad, dil, skip, ceil, want):
    rounding = vx.RoundingType.CEILING if ceil else vx.RoundingType.FLOOR
    k_eff = k + (k - 1) * dil
    assert shapes.conv_size(w, pad, k_eff, skip, rounding) == want
    assert shapes.infer_skip(w, pad, k_eff, want, rounding) == skip


@pytest.mark.parametrize("w,k,pad,skip,ceil,want", [
    (112, 3, 0, 2, False, 55), (112, 3, 0, 2, True, 56), (13, 3, 1, 2, False, 7),
    (13, 3, 1, 2, True, 7)])
def test_pool_size_vectors(w, k, pad, skip, ceil, want):
    rounding = vx.RoundingType.CEILING if ceil else vx.RoundingType.FLOOR
    assert shapes.conv_size(w, pad, k, skip, rounding) == want
    assert shapes.infer_skip(w, pad, k, want, rounding) == skip


@pytest.mark.parametrize("w,up,pad,k,a,want", [(4, 2, 1, 4, 0, 8), (4, 2, 1, 4, 1, 9),
                                               (4, 2, 0, 3, 1, 10)])
def test_deconv_size_vectors(w, up, pad, k, a, want):
    assert shapes.deconv_size(w, pad, k, up, a) == want
    assert shapes.infer_upscale(w, pad, k, a, want) == up


@pytest.mark.parametrize("ceil,out", [(False, 54), (True, 55)])
def test_alexnet_conv1_verifies_with_the_inferred_skip(ctx, ceil, out):
    """224 x 224, 11 x 11 kernel, output 54 (floor) or 55 (ceil): the skip is 4."""
    g = ctx.graph()
    x = vx.Tensor(ctx, (224, 224, 1, 1), F32)
    y = vx.Tensor(ctx, (out, out, 2, 1), F32)
    rounding = vx.RoundingType.CEILING if ceil else vx.RoundingType.FLOOR
    node = conv(g, x, y, k=11, down_scale_size_rounding=rounding)
    assert g.verify() == S.SUCCESS, g.error
    assert node.derived["skip"] == (4, 4)


def test_pool_112_ceil_gives_56_and_floor_refuses_56(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (112, 112, 8, 1), F32)
    y = vx.Tensor(ctx, (56, 56, 8, 1), F32)
    node = vx.pooling_layer(g, x, vx.PoolingType.MAX, 3, 3, 0, 0, vx.RoundingType.CEILING, y)
    assert g.verify() == S.SUCCESS and node.derived["skip"] == (2, 2)
    node.set_parameter_by_index(6, vx.RoundingType.FLOOR)
    assert g.verify() == S.ERROR_INVALID_DIMENSION
    assert f"node {node.name!r} parameter #7 outputs" in str(g.error)
    assert "output width 56 cannot come from input 112" in str(g.error)


def test_deconv_upscale_inferred_and_a_must_be_below_it(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    y = vx.Tensor(ctx, (9, 9, 2, 1), F32)
    w = const(ctx, (4, 4, 2, 2))
    node = vx.deconvolution_layer(g, x, w, None, vx.DeconvolutionParams(1, 1, a_x=1, a_y=1), y)
    assert g.verify() == S.SUCCESS and node.derived["upscale"] == (2, 2)
    node.set_parameter_by_index(3, vx.DeconvolutionParams(1, 1, a_x=3, a_y=1))
    assert g.verify() == S.ERROR_INVALID_DIMENSION          # 9 = 3*u - 2 + 4 + 3: no u > 3


def test_virtual_tensor_dims_resolve_at_verification(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (8, 6, 3, 1), F32)
    mid = g.virtual_tensor()                                # rank, dims and type undefined
    part = g.virtual_tensor((0, 0, 4, 0), F32)              # some dims undefined
    y = vx.Tensor(ctx, (6, 4, 4, 1), F32)
    conv(g, x, mid, k=1, cout=4)
    vx.activation_layer(g, mid, vx.ActivationFunction.RELU, 0, 0, part)
    conv(g, part, y, k=3)
    assert mid.dims is None and part.dims == (0, 0, 4, 0)
    assert mid.data_type == vx.Type.INVALID
    assert g.verify() == S.SUCCESS, g.error
    assert mid.dims == (8, 6, 4, 1) and part.dims == (8, 6, 4, 1)
    assert mid.data_type == F32


def test_views_of_a_virtual_tensor_of_undefined_type(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    v = g.virtual_tensor((4, 4, 16, 1))                     # type resolved by its writers
    halves = [v.view((0, 0, 8 * k, 0), (4, 4, 8 * k + 8, 1)) for k in (0, 1)]
    for h in halves:
        vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, h)
    vx.softmax_layer(g, v, vx.Tensor(ctx, (4, 4, 16, 1), F32))
    assert halves[0].data_type == vx.Type.INVALID
    assert g.verify() == S.SUCCESS, g.error
    assert v.data_type == F32


# -- formalism violations --------------------------------------------------------------------

def test_two_writers_refused(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    y = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    a = vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, y)
    b = vx.activation_layer(g, x, vx.ActivationFunction.ABS, 0, 0, y)
    assert g.verify() == S.ERROR_MULTIPLE_WRITERS
    msg = str(g.error)
    assert f"node {b.name!r} parameter #4 outputs writes {y.name!r}" in msg
    assert f"node {a.name!r} parameter #4 outputs already writes" in msg
    assert not g.verified


def test_overlapping_views_are_two_writers_but_disjoint_ones_are_a_concat(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 16, 1), F32)
    vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, y.view((0, 0, 0, 0),
                                                                        (4, 4, 8, 1)))
    late = vx.activation_layer(g, x, vx.ActivationFunction.ABS, 0, 0,
                               y.view((0, 0, 4, 0), (4, 4, 12, 1)))
    assert g.verify() == S.ERROR_MULTIPLE_WRITERS
    late.set_parameter_by_index(4, y.view((0, 0, 8, 0), (4, 4, 16, 1)))
    assert g.verify() == S.SUCCESS, g.error


def test_writing_a_view_and_its_parent_is_two_writers(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, y)
    vx.activation_layer(g, x.view((0, 0, 0, 0), (4, 4, 4, 1)), vx.ActivationFunction.RELU, 0,
                        0, y.view((0, 0, 4, 0), (4, 4, 8, 1)))
    assert g.verify() == S.ERROR_MULTIPLE_WRITERS


def test_cycle_refused_naming_the_nodes(ctx):
    g = ctx.graph()
    a_t = g.virtual_tensor((4, 4, 2, 1), F32)
    b_t = g.virtual_tensor((4, 4, 2, 1), F32)
    a = vx.activation_layer(g, a_t, vx.ActivationFunction.RELU, 0, 0, b_t)
    b = vx.activation_layer(g, b_t, vx.ActivationFunction.ABS, 0, 0, a_t)
    assert g.verify() == S.ERROR_INVALID_GRAPH
    msg = str(g.error)
    assert "cycle" in msg and a.name in msg and b.name in msg


def test_node_reading_its_own_output_is_a_cycle(ctx):
    g = ctx.graph()
    t = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    n = vx.activation_layer(g, t, vx.ActivationFunction.RELU, 0, 0, t)
    assert g.verify() == S.ERROR_INVALID_GRAPH
    assert f"{n.name} -> {n.name}" in str(g.error)


def test_unwritten_virtual_tensor_refused(ctx):
    g = ctx.graph()
    v = g.virtual_tensor((4, 4, 2, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    n = vx.activation_layer(g, v, vx.ActivationFunction.RELU, 0, 0, y)
    assert g.verify() == S.ERROR_INVALID_GRAPH
    assert (f"virtual tensor {v.name!r} is read by node {n.name!r} parameter #0 inputs but no "
            "node writes it") in str(g.error)


def test_virtual_read_beyond_the_written_views_refused(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    v = g.virtual_tensor((4, 4, 16, 1), F32)
    vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, v.view((0, 0, 0, 0),
                                                                        (4, 4, 8, 1)))
    vx.activation_layer(g, v, vx.ActivationFunction.RELU, 0, 0, vx.Tensor(ctx, (4, 4, 16, 1),
                                                                            F32))
    assert g.verify() == S.ERROR_INVALID_GRAPH
    assert "reads a part of virtual tensor" in str(g.error)


def test_missing_required_parameter_refused(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    n = vx.convolution_layer(g, x, None, None, vx.ConvolutionParams(),
                             vx.Tensor(ctx, (4, 4, 2, 1), F32))
    assert n.status == S.SUCCESS                   # NULL is allowed at creation
    assert g.verify() == S.ERROR_NOT_SUFFICIENT
    assert f"node {n.name!r} parameter #1 weights is required but not set" in str(g.error)


def test_static_parameter_without_data_refused(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    w = vx.Tensor(ctx, (3, 3, 2, 2), F32)          # never copy_patch'ed
    n = vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(),
                             vx.Tensor(ctx, (4, 4, 2, 1), F32))
    assert g.verify() == S.ERROR_NOT_SUFFICIENT
    assert f"node {n.name!r} parameter #1 weights is static" in str(g.error)
    assert "copy_patch it before verification" in str(g.error)


def test_static_parameter_written_by_a_node_refused(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (3, 3, 2, 2), F32)
    w = const(ctx, (3, 3, 2, 2))
    vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, w)
    conv(g, vx.Tensor(ctx, (6, 6, 2, 1), F32), vx.Tensor(ctx, (4, 4, 2, 1), F32), cout=2)
    g.nodes[1].set_parameter_by_index(1, w)
    assert g.verify() == S.ERROR_INVALID_PARAMETERS
    assert "is static but" in str(g.error)


def test_bad_enum_is_a_node_status_and_refused_at_verify(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    n = vx.pooling_layer(g, x, 0x1B005, 2, 2, 0, 0, vx.RoundingType.FLOOR,
                         vx.Tensor(ctx, (3, 3, 2, 1), F32))
    assert n.status == S.ERROR_INVALID_PARAMETERS
    assert g.verify() == S.ERROR_INVALID_PARAMETERS
    msg = str(g.error)
    assert f"node {n.name!r} parameter #1 pooling_type: 0x1b005 is not a PoolingType" in msg
    assert "MAX 0x1b000" in msg and "AVG 0x1b001" in msg


def test_bad_enum_inside_a_params_struct_refused_at_verify(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    n = conv(g, x, vx.Tensor(ctx, (4, 4, 2, 1), F32), down_scale_size_rounding=7)
    assert g.verify() == S.ERROR_INVALID_PARAMETERS
    assert (f"node {n.name!r} parameter #3 convolution_params: down_scale_size_rounding: 0x7"
            in str(g.error))


def test_wrong_object_type_and_scope_are_node_errors(ctx):
    g, other = ctx.graph(), ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    n = vx.softmax_layer(g, x, ctx.scalar(vx.Type.FLOAT32, 1.0))
    assert n.status == S.ERROR_INVALID_TYPE and "parameter #1 outputs" in str(n.error)
    m = vx.softmax_layer(g, x, other.virtual_tensor((6, 6, 2, 1), F32))
    assert m.status == S.ERROR_INVALID_SCOPE
    assert g.verify() in (S.ERROR_INVALID_TYPE, S.ERROR_INVALID_SCOPE)


def test_type_mismatch_between_input_and_weights(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (6, 6, 2, 1), F32)
    w = vx.Tensor(ctx, (3, 3, 2, 2), vx.Type.INT16, 8)
    w.copy_patch(np.zeros((3, 3, 2, 2), np.int16), WO)
    n = vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(),
                             vx.Tensor(ctx, (4, 4, 2, 1), F32))
    assert g.verify() == S.ERROR_INVALID_FORMAT
    assert f"node {n.name!r} parameter #1 weights" in str(g.error)


def test_failed_verification_leaves_nothing_allocated():
    with dvsdk.open_device("sim://?dram_mb=1") as dev, vx.Context(dev) as ctx:
        base = dev.allocator.used_bytes
        g = ctx.graph()
        x = vx.Tensor(ctx, (8, 8, 16, 1), F32)
        small = vx.Tensor(ctx, (8, 8, 16, 1), F32)
        n = vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, small)
        assert g.verify() == S.SUCCESS
        assert dev.allocator.used_bytes > base
        big_in = vx.Tensor(ctx, (512, 512, 8, 1), F32)     # 4 MB per tensor: cannot fit
        big = vx.Tensor(ctx, (510, 510, 8, 1), F32)
        n.set_parameter_by_index(0, big_in)
        n.set_parameter_by_index(4, vx.Tensor(ctx, (512, 512, 8, 1), F32))
        vx.convolution_layer(g, big_in, const(ctx, (3, 3, 8, 8)), None,
                             vx.ConvolutionParams(), big)
        assert g.verify() == S.ERROR_NO_MEMORY, g.error
        assert not g.verified
        assert dev.allocator.used_bytes == base            # the old net released too


def test_static_change_after_verify_unverifies_and_process_reverifies(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    x.copy_patch(np.ones((4, 4, 1, 1), np.float32), WO)
    w = const(ctx, (1, 1, 1, 1), 2.0)
    y = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(), y)
    s = ctx.scalar(vx.Type.FLOAT32, 1.0)
    z = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    vx.activation_layer(g, y, vx.ActivationFunction.LINEAR, s, 0.0, z)
    assert g.process() == S.SUCCESS and np.all(z.copy_patch() == 2)
    w.copy_patch(np.full((1, 1, 1, 1), 3.0, np.float32), WO)
    assert not g.verified
    assert g.process() == S.SUCCESS and np.all(z.copy_patch() == 3)
    s.set_value(0.5)
    assert not g.verified
    assert g.process() == S.SUCCESS and np.all(z.copy_patch() == 1.5)
    assert g.verified
