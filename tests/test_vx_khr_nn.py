"""The NN extension's own names (dvsdk.vx.khr_nn): the numbers of vx_khr_nn.h as the
extension text prints them (§2.1.2-2.1.3, copied below from the text, not from dvsdk), the
core header's round policy, the extension strings, and the ``size_of_*`` arguments."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import dvsdk.vx as vx
from dvsdk.vx import khr_nn

# the text: "#define VX_LIBRARY_KHR_NN_EXTENSION (0x1)" and "enum vx_nn_enum_e {
# VX_ENUM_NN_ROUNDING_TYPE = 0x1A, VX_ENUM_NN_POOLING_TYPE = 0x1B,
# VX_ENUM_NN_NORMALIZATION_TYPE = 0x1C, VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE = 0x1D }"
ENUM_TYPES = {"VX_ENUM_NN_ROUNDING_TYPE": 0x1A, "VX_ENUM_NN_POOLING_TYPE": 0x1B,
              "VX_ENUM_NN_NORMALIZATION_TYPE": 0x1C, "VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE": 0x1D}
# "VX_NN_POOLING_MAX = VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_POOLING_TYPE) + 0x0" etc., with
# the core's VX_ENUM_BASE(vendor, id) = (vendor << 20) | (id << 12) and VX_ID_KHRONOS = 0
VALUES = {
    "VX_NN_DS_SIZE_ROUNDING_FLOOR": (0x1A, 0), "VX_NN_DS_SIZE_ROUNDING_CEILING": (0x1A, 1),
    "VX_NN_POOLING_MAX": (0x1B, 0), "VX_NN_POOLING_AVG": (0x1B, 1),
    "VX_NN_NORMALIZATION_SAME_MAP": (0x1C, 0), "VX_NN_NORMALIZATION_ACROSS_MAPS": (0x1C, 1),
    **{f"VX_NN_ACTIVATION_{n}": (0x1D, k) for k, n in enumerate(
        "LOGISTIC HYPERBOLIC_TAN RELU BRELU SOFTRELU ABS SQUARE SQRT LINEAR".split())},
}
KERNELS = ["CONVOLUTION", "FULLY_CONNECTED", "POOLING", "SOFTMAX", "NORMALIZATION",
           "ACTIVATION", "ROI_POOLING", "DECONVOLUTION"]


def test_library_and_enum_type_ids():
    assert vx.VX_LIBRARY_KHR_NN_EXTENSION == 0x1
    for name, value in ENUM_TYPES.items():
        assert getattr(vx, name) == value == getattr(khr_nn, name)
        assert vx.NnEnum[name] == value
    assert len(vx.NnEnum) == 4


@pytest.mark.parametrize("name", sorted(VALUES))
def test_nn_enum_values(name):
    type_id, k = VALUES[name]
    assert getattr(khr_nn, name) == (0 << 20 | type_id << 12) + k


def test_the_enums_of_dvsdk_vx_carry_the_same_numbers():
    assert vx.PoolingType.AVG == khr_nn.VX_NN_POOLING_AVG == 0x1B001
    assert vx.RoundingType.CEILING == khr_nn.VX_NN_DS_SIZE_ROUNDING_CEILING == 0x1A001
    assert vx.NormType.ACROSS_MAPS == khr_nn.VX_NN_NORMALIZATION_ACROSS_MAPS == 0x1C001
    assert vx.ActivationFunction.LINEAR == khr_nn.VX_NN_ACTIVATION_LINEAR == 0x1D008


@pytest.mark.parametrize("k,name", enumerate(KERNELS))
def test_kernel_enums(k, name):
    """VX_KERNEL_BASE(VX_ID_KHRONOS, VX_LIBRARY_KHR_NN_EXTENSION) + k = (1 << 12) + k."""
    value = getattr(khr_nn, f"VX_KERNEL_{name}_LAYER")
    assert value == 0x1000 + k == vx.KernelEnum[f"{name}_LAYER"]


def test_struct_type_enums():
    assert (khr_nn.VX_TYPE_NN_CONVOLUTION_PARAMS, khr_nn.VX_TYPE_NN_DECONVOLUTION_PARAMS,
            khr_nn.VX_TYPE_NN_ROI_POOL_PARAMS) == (0x025, 0x026, 0x027)


def test_round_policy_numbers_of_the_core_header():
    """vx_types.h: VX_ROUND_POLICY_TO_ZERO = VX_ENUM_BASE(VX_ID_KHRONOS,
    VX_ENUM_ROUND_POLICY) + 0x1, TO_NEAREST_EVEN + 0x2 (VX_ENUM_ROUND_POLICY = 0x12); the
    convert policy starts at + 0x0 (VX_ENUM_CONVERT_POLICY = 0x0A)."""
    assert (vx.RoundPolicy.TO_ZERO, vx.RoundPolicy.TO_NEAREST_EVEN) == (0x12001, 0x12002)
    assert (vx.ConvertPolicy.WRAP, vx.ConvertPolicy.SATURATE) == (0xA000, 0xA001)


# -- size_of_* -----------------------------------------------------------------------------

@pytest.mark.skipif(struct.calcsize("P") != 8, reason="the sizes below are LP64's")
def test_sizeof_the_structs_on_lp64():
    """vx_size padding_x, padding_y; vx_enum x3 (4 bytes, then 4 of padding); vx_size x2
    = 48; the deconvolution's two vx_size, two vx_enum, two vx_size = 40; one vx_enum = 4."""
    assert khr_nn.SIZEOF == {"size_of_convolution_params": 48, "size_of_deconv_params": 40,
                             "size_of_roi_params": 4}


def _conv(ctx, *size, **kw):
    g = ctx.graph()
    x = vx.Tensor(ctx, (4, 4, 1, 1), vx.Type.FLOAT32)
    w = vx.Tensor(ctx, (3, 3, 1, 1), vx.Type.FLOAT32)
    w.copy_patch(np.ones((3, 3, 1, 1), np.float32), vx.Accessor.WRITE_ONLY)
    y = vx.Tensor(ctx, (2, 2, 1, 1), vx.Type.FLOAT32)
    node = vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(), *size, y, **kw)
    return g, node


def test_right_size_accepted_positionally_and_by_keyword():
    size = khr_nn.SIZEOF["size_of_convolution_params"]
    with vx.Context() as ctx:
        for args, kw in (((size,), {}), ((), {"size_of_convolution_params": size}), ((), {})):
            g, node = _conv(ctx, *args, **kw)
            assert node.status == vx.Status.SUCCESS
            assert g.verify() == vx.Status.SUCCESS, g.error


@pytest.mark.parametrize("bad", [0, 40, 47, 49, "48", True])
def test_wrong_size_is_a_typed_error_naming_the_argument(bad):
    with vx.Context() as ctx:
        g, node = _conv(ctx, bad)
        assert node.status == vx.Status.ERROR_INVALID_PARAMETERS
        err = node.error
        assert isinstance(err, vx.VxError)
        assert err.field.endswith("size_of_convolution_params") and err.value == bad
        assert err.limit == khr_nn.SIZEOF["size_of_convolution_params"]
        assert g.verify() == vx.Status.ERROR_INVALID_PARAMETERS


def test_deconvolution_and_roi_sizes():
    with vx.Context() as ctx:
        g = ctx.graph()
        x = vx.Tensor(ctx, (2, 2, 1, 1), vx.Type.FLOAT32)
        w = vx.Tensor(ctx, (2, 2, 1, 1), vx.Type.FLOAT32)
        y = vx.Tensor(ctx, (4, 4, 1, 1), vx.Type.FLOAT32)
        ok = vx.deconvolution_layer(g, x, w, None, vx.DeconvolutionParams(),
                                    khr_nn.SIZEOF["size_of_deconv_params"], y)
        bad = vx.deconvolution_layer(g, x, w, None, vx.DeconvolutionParams(), 48, y)
        assert ok.status == vx.Status.SUCCESS
        assert bad.status == vx.Status.ERROR_INVALID_PARAMETERS
        assert "size_of_deconv_params" in bad.error.field
        rois = vx.Tensor(ctx, (4, 1), vx.Type.FLOAT32)
        out = vx.Tensor(ctx, (1, 1, 1, 1), vx.Type.FLOAT32)
        r = vx.roi_pooling_layer(g, x, rois, vx.RoiPoolParams(), 8, out)
        assert r.status == vx.Status.ERROR_INVALID_PARAMETERS and r.error.limit == 4
        assert vx.roi_pooling_layer(g, x, rois, vx.RoiPoolParams(), 4, out).status == \
            vx.Status.SUCCESS


def test_unknown_context_attribute_is_a_typed_error():
    with vx.Context() as ctx, pytest.raises(vx.VxError) as e:
        ctx.query(0x80108)                       # CONVOLUTION_MAX_DIMENSION: not an NN one
    assert e.value.status == vx.Status.ERROR_NOT_SUPPORTED and e.value.value == 0x80108


def test_header_names_at_the_package_level():
    assert vx.VX_NN_POOLING_MAX == 0x1B000 and vx.VX_KERNEL_DECONVOLUTION_LAYER == 0x1007
    with pytest.raises(AttributeError):
        vx.VX_NN_POOLING_MEDIAN  # noqa: B018 - no such name in the header
