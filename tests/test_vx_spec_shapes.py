"""The NN extension's shapes (issue 30 item 4), on the simulator, against numpy written here
and in ``tests/vx_refs.py``: fully connected with multi-dimensional batches ("In both cases
number of batches are optional and may be multidimensional", S0 vxFullyConnectedLayer),
4-D FC weights ``[width, height, #IFM, #OFM]`` and per-location deconvolution biases
(beyond the 1.2 text; the CTS tests them), batched ROI pooling ("#batches is optional and
must be the same as in inputs"), nested convolution batches ("all following dimensions
represent number of batches, possibly nested"); and the typed refusals of shapes the spec
does not allow, naming parameter, value and limit."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk.vx as vx

from . import vx_refs as ref

F32 = vx.Type.FLOAT32
W = vx.Accessor.WRITE_ONLY


@pytest.fixture(scope="module")
def ctx():
    with vx.Context() as c:
        yield c


def tensor(ctx, data):
    data = np.asarray(data, np.float32)
    t = vx.Tensor(ctx, data.shape, F32)
    t.copy_patch(data, W)
    return t


def run(g) -> None:
    assert g.verify() == vx.Status.SUCCESS, g.error
    assert g.process() == vx.Status.SUCCESS


def close(got, want) -> None:
    np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2 * float(np.abs(want).max()))


RNG = np.random.default_rng(30)


@pytest.mark.parametrize("batches", [(3,), (2, 3), (2, 1, 3)])
def test_fc_with_multi_dimensional_batches(ctx, batches) -> None:
    """[#IFM, b1, b2...] -> [#OFM, b1, b2...]: out[o, b...] = sum_j w[j, o] x[j, b...] + b[o]."""
    x = RNG.standard_normal((7,) + batches)
    w = RNG.standard_normal((7, 5))
    b = RNG.standard_normal(5)
    g = ctx.graph()
    y = vx.Tensor(ctx, (5,) + batches, F32)
    vx.fully_connected_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b),
                             vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_NEAREST_EVEN, y)
    run(g)
    close(y.copy_patch(), np.einsum("j...,jo->o...", x, w) + b.reshape((5,) + (1,) * len(batches)))


@pytest.mark.parametrize("four_d", [False, True])
def test_fc_conv_layout_nested_batches_and_4d_weights(ctx, four_d) -> None:
    """[W, H, #IFM, b1, b2] with weights [W*H*#IFM, #OFM] or [W, H, #IFM, #OFM]; the input
    is flattened in OpenVX memory order j = x + W (y + H c)."""
    x = RNG.standard_normal((3, 2, 4, 2, 2))
    w4 = RNG.standard_normal((3, 2, 4, 6))
    w = w4 if four_d else w4.reshape((-1, 6), order="F")
    g = ctx.graph()
    y = vx.Tensor(ctx, (6, 2, 2), F32)
    vx.fully_connected_layer(g, tensor(ctx, x), tensor(ctx, w), None,
                             vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_NEAREST_EVEN, y)
    run(g)
    close(y.copy_patch(), np.einsum("xycab,xyco->oab", x, w4))


def test_deconvolution_per_location_bias(ctx) -> None:
    x = RNG.standard_normal((4, 3, 2, 2))
    w = RNG.standard_normal((3, 3, 2, 3))
    out = ((4 - 1) * 2 + 3, (3 - 1) * 2 + 3)
    b = RNG.standard_normal(out + (3,))
    g = ctx.graph()
    y = vx.Tensor(ctx, out + (3, 2), F32)
    vx.deconvolution_layer(g, tensor(ctx, x), tensor(ctx, w), tensor(ctx, b),
                           vx.DeconvolutionParams(), y)
    run(g)
    want = ref.deconvolution(x, w, None, (2, 2)) + b[..., None]
    close(y.copy_patch(), want)


def test_batched_roi_pooling_pools_each_image_with_its_own_rois(ctx) -> None:
    data = RNG.standard_normal((9, 7, 3, 2))
    rois = np.array([[[0, 0, 4, 3], [2, 1, 8, 6]], [[1, 2, 5, 6], [-1, 0, 3, 2]]],
                    np.float32).transpose(2, 1, 0)          # [4, roi_count, #batches]
    g = ctx.graph()
    y = vx.Tensor(ctx, (2, 3, 3, 2, 2), F32)
    vx.roi_pooling_layer(g, tensor(ctx, data), tensor(ctx, rois), vx.RoiPoolParams(), y)
    run(g)
    got = y.copy_patch()
    for b in range(2):
        close(got[..., b], ref.roi_pooling(data[..., b], rois[:, :, b], (2, 3)))
    assert not np.allclose(got[..., 0], got[..., 1])


def test_convolution_with_nested_batches(ctx) -> None:
    x = RNG.standard_normal((6, 5, 2, 2, 3))
    w = RNG.standard_normal((3, 3, 2, 4))
    g = ctx.graph()
    y = vx.Tensor(ctx, (4, 3, 4, 2, 3), F32)
    vx.convolution_layer(g, tensor(ctx, x), tensor(ctx, w), None, vx.ConvolutionParams(), y)
    run(g)
    flat = x.reshape((6, 5, 2, 6), order="F")
    want = ref.convolution(flat, w, None).reshape((4, 3, 4, 2, 3), order="F")
    close(y.copy_patch(), want)


# -- shapes the spec does not allow: typed errors naming parameter, value and limit ----------------

def _refused(ctx, build) -> vx.VxError:
    g = ctx.graph()
    build(g)
    assert g.verify() == vx.Status.ERROR_INVALID_DIMENSION
    return g.error


def test_roi_batches_must_match_the_inputs(ctx) -> None:
    def build(g):
        vx.roi_pooling_layer(g, vx.Tensor(ctx, (8, 8, 2, 2), F32),
                             vx.Tensor(ctx, (4, 3, 3), F32), vx.RoiPoolParams(),
                             vx.Tensor(ctx, (2, 2, 2, 3, 2), F32))
    e = _refused(ctx, build)
    assert "input_rois" in str(e) and "#batches 2" in str(e) and e.value == [4, 3, 3]


def test_roi_output_needs_the_batch_dimension_for_several_images(ctx) -> None:
    def build(g):
        vx.roi_pooling_layer(g, vx.Tensor(ctx, (8, 8, 2, 2), F32),
                             vx.Tensor(ctx, (4, 3, 2), F32), vx.RoiPoolParams(),
                             vx.Tensor(ctx, (2, 2, 2, 3), F32))
    e = _refused(ctx, build)
    assert "output_arr" in str(e) and "#batches" in str(e)


def test_fc_4d_weights_need_the_conv_layout(ctx) -> None:
    def build(g):
        vx.fully_connected_layer(g, vx.Tensor(ctx, (24, 2), F32),
                                 tensor(ctx, np.ones((2, 3, 4, 5))), None,
                                 vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_ZERO,
                                 vx.Tensor(ctx, (5, 2), F32))
    e = _refused(ctx, build)
    assert "weights" in str(e) and e.value == [2, 3, 4, 5] and e.limit == "2-D weights"


def test_deconvolution_bias_of_another_shape_is_refused(ctx) -> None:
    def build(g):
        vx.deconvolution_layer(g, vx.Tensor(ctx, (4, 4, 2), F32),
                               tensor(ctx, np.ones((3, 3, 2, 3))), tensor(ctx, np.ones((3, 3))),
                               vx.DeconvolutionParams(), vx.Tensor(ctx, (6, 6, 3), F32))
    e = _refused(ctx, build)
    assert "biases" in str(e) and "[6, 6, 3]" in str(e) and e.value == [3, 3]
