"""Objects and their lifecycle: contexts, reference counts, release, tensors, views,
copy_patch, scalars, kernels by name and enum."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx

F32 = vx.Type.FLOAT32
WO, RO = vx.Accessor.WRITE_ONLY, vx.Accessor.READ_ONLY
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


def test_context_owns_and_releases_everything(device):
    ctx = vx.Context(device)
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    n = vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, y)
    assert ctx.references == 4
    assert g.verify() == S.SUCCESS
    assert ctx.release() == S.SUCCESS
    assert not any(o.alive for o in (g, x, y, n))
    with pytest.raises(vx.VxError) as e:
        x.copy_patch()
    assert e.value.status == S.ERROR_INVALID_REFERENCE
    assert device.info() is not None                 # a Device object stays the caller's


def test_context_opens_and_closes_its_own_device():
    with vx.Context("sim://") as ctx:
        dev = ctx.device
        assert dev.info().simulated
    assert dev.closed                                # closed with the context


def test_reference_counts_follow_nodes_and_graphs(ctx):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 2, 1), F32)
    assert x.ref_count == 1
    n = vx.activation_layer(g, x, vx.ActivationFunction.RELU, 0, 0, y)
    assert x.ref_count == 2 and n.ref_count == 2     # the caller's and the graph's
    assert x.release() == S.SUCCESS
    assert x.alive and x.ref_count == 1              # the node still holds it
    n.release()
    assert n.alive
    g.release()                                      # nodes go, then what only they held
    assert not g.alive and not n.alive and not x.alive
    assert y.alive and y.ref_count == 1
    with pytest.raises(vx.VxError):
        n.set_parameter_by_index(0, y)


def test_views_hold_their_parent(ctx):
    t = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    v = t.view((0, 0, 2, 0), (4, 4, 6, 1))
    t.release()
    assert t.alive
    v.release()
    assert not t.alive and not v.alive


def test_context_manager_on_objects(ctx):
    with vx.Tensor(ctx, (2, 2, 1, 1), F32) as t:
        assert t.alive
    assert not t.alive


def test_extensions_name_the_nn_extension_and_the_native_fp16(ctx):
    """The text's legal combination "KHR_NN_8 KHR_NN_16" (both, 8 first), then dvsdk's own
    FP16 one; the C query by VX_CONTEXT_EXTENSIONS (0x80107) and its size with the NUL."""
    names = ctx.extensions.split(" ")
    assert names[:2] == ["KHR_NN_8", "KHR_NN_16"] and names[2:] == ["DVSDK_nn_fp16"]
    assert ctx.extensions == vx.EXTENSIONS
    assert ctx.query(0x80107) == ctx.extensions
    assert ctx.query(vx.ContextAttribute.EXTENSIONS_SIZE) == len(ctx.extensions) + 1
    assert ctx.query(0x80101) == 0x0102 and ctx.query(0x8010E) == 6


# -- tensors -------------------------------------------------------------------------------

def test_copy_patch_openvx_order_and_patches(ctx):
    t = vx.Tensor(ctx, (5, 3, 2, 1), F32)            # [width 5, height 3, IFM 2, N 1]
    data = np.arange(30, dtype=np.float32).reshape(5, 3, 2, 1)
    t.copy_patch(data, WO)
    assert np.array_equal(t.copy_patch(), data)
    patch = t.copy_patch(view_start=(1, 0, 1, 0), view_end=(3, 2, 2, 1))
    assert np.array_equal(patch, data[1:3, 0:2, 1:2])
    t.copy_patch(np.full((2, 2, 1, 1), -1, np.float32), WO, (1, 0, 1, 0), (3, 2, 2, 1))
    got = t.copy_patch()
    assert np.all(got[1:3, 0:2, 1:2] == -1) and got[0, 0, 0, 0] == 0
    flat = np.arange(30, dtype=np.float32)             # a flat buffer in OpenVX memory order
    t.copy_patch(flat, WO)
    assert t.copy_patch()[1, 0, 0, 0] == 1 and t.copy_patch()[0, 1, 0, 0] == 5


def test_views_share_storage_without_copies(ctx):
    t = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    v = t.view((0, 0, 4, 0), (4, 4, 8, 1))
    vv = v.view((1, 1, 0, 0), (3, 3, 2, 1))
    assert vv.root is t and vv.box() == ((1, 3), (1, 3), (4, 6), (0, 1))
    vv.copy_patch(np.full((2, 2, 2, 1), 7, np.float32), WO)
    got = t.copy_patch()
    assert np.all(got[1:3, 1:3, 4:6] == 7) and got.sum() == 7 * 8


@pytest.mark.parametrize("start,end", [((0, 0, 0, 0), (5, 4, 8, 1)), ((2, 0, 0, 0), (2, 4, 8, 1)),
                                       ((0, 0), (4, 4))])
def test_view_outside_the_tensor_refused(ctx, start, end):
    t = vx.Tensor(ctx, (4, 4, 8, 1), F32)
    with pytest.raises(vx.VxError):
        t.view(start, end)


def test_virtual_tensors_are_not_host_accessible(ctx):
    g = ctx.graph()
    v = g.virtual_tensor((4, 4, 2, 1), F32)
    with pytest.raises(vx.VxError) as e:
        v.copy_patch()
    assert e.value.status == S.ERROR_OPTIMIZED_AWAY
    with pytest.raises(vx.VxError) as e:
        g.virtual_tensor().view((0,), (1,))           # dimensionless: no view
    assert e.value.status == S.ERROR_INVALID_DIMENSION


@pytest.mark.parametrize("dims,dtype", [((0, 4), F32), ((), F32), ((4,) * 7, F32),
                                        ((4, 4), vx.Type.INT32), ((4, 4), 0x1234)])
def test_bad_tensors_refused(ctx, dims, dtype):
    with pytest.raises(vx.VxError):
        vx.Tensor(ctx, dims, dtype)


def test_copy_patch_shape_mismatch_names_openvx_order(ctx):
    t = vx.Tensor(ctx, (5, 3, 2, 1), F32)
    with pytest.raises(vx.VxError) as e:
        t.copy_patch(np.zeros((1, 2, 3, 5), np.float32), WO)
    assert "OpenVX order" in str(e.value)


# -- scalars, kernels, generic nodes -----------------------------------------------------

def test_scalar_values_and_types(ctx):
    s = ctx.scalar(vx.Type.FLOAT32, 0.1)
    assert s.value == float(np.float32(0.1))
    s.set_value(3)
    assert s.value == 3.0
    with pytest.raises(vx.VxError):
        s.set_value("x")
    with pytest.raises(vx.VxError):
        ctx.scalar(vx.Type.TENSOR, 1)


@pytest.mark.parametrize("name,enum", [
    ("org.khronos.nn_extension.convolution_layer", 0x1000),
    ("org.khronos.nn_extension.fully_connected_layer", 0x1001),
    ("org.khronos.nn_extension.pooling_layer", 0x1002),
    ("org.khronos.nn_extension.softmax_layer", 0x1003),
    ("org.khronos.nn_extension.normalization_layer", 0x1004),
    ("org.khronos.nn_extension.activation_layer", 0x1005),
    ("org.khronos.nn_extension.roi_pooling_layer", 0x1006),
    ("org.khronos.nn_extension.deconvolution_layer", 0x1007)])
def test_kernels_by_name_and_enum(ctx, name, enum):
    by_name, by_enum = ctx.kernel(name), ctx.kernel(enum)
    assert by_name.enum == enum and by_enum.name == name
    assert by_name.num_parameters == by_enum.num_parameters
    with pytest.raises(vx.VxError):
        ctx.kernel(name + "x")


def test_generic_node_by_enum_equals_the_creator(ctx):
    x = vx.Tensor(ctx, (6, 6, 3, 1), F32)
    x.copy_patch(np.random.default_rng(0).standard_normal((6, 6, 3, 1)).astype(np.float32), WO)
    outs = []
    for how in ("creator", "generic"):
        g = ctx.graph()
        y = vx.Tensor(ctx, (3, 3, 3, 1), F32)
        args = [x, vx.PoolingType.AVG, 2, 2, 0, 0, vx.RoundingType.FLOOR, y]
        if how == "creator":
            vx.pooling_layer(g, *args)
        else:
            node = g.generic_node(ctx.kernel(vx.KernelEnum.POOLING_LAYER))
            for i, a in enumerate(args):
                assert node.set_parameter_by_index(i, a) == S.SUCCESS
            assert node.parameter(1).direction == vx.Direction.INPUT
            assert node.parameter(7).direction == vx.Direction.OUTPUT
        assert g.process() == S.SUCCESS, g.error
        outs.append(y.copy_patch())
    assert np.array_equal(outs[0], outs[1])
    assert np.allclose(outs[0], x.copy_patch().reshape(3, 2, 3, 2, 3).mean(axis=(1, 3))[
        ..., None], atol=2e-3)


def test_set_parameter_out_of_range_is_an_error_status(ctx):
    g = ctx.graph()
    node = g.generic_node("org.khronos.nn_extension.softmax_layer")
    assert node.set_parameter_by_index(5, None) == S.ERROR_INVALID_PARAMETERS
    assert node.status == S.ERROR_INVALID_PARAMETERS
    assert g.verify() == S.ERROR_INVALID_PARAMETERS
