"""The NN extension header's own names (``vx_khr_nn.h``, the extension text §2.1.2-2.1.3).

C code written against ``vx_khr_nn.h`` ports line by line: every macro and enumerator of
the header has its name here with its number, built the header's way
(``VX_KERNEL_BASE(VX_ID_KHRONOS, VX_LIBRARY_KHR_NN_EXTENSION) + k`` and
``VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_*) + k``, with ``VX_ID_KHRONOS = 0`` so both bases
are ``id << 12``; ``formats.md`` §2.4).  The same values are the members of
:mod:`dvsdk.vx.types`' enums (``RoundingType``, ``PoolingType``, ``NormType``,
``ActivationFunction``, ``KernelEnum``), so either spelling can be passed anywhere.

The ``size_of_*`` arguments of ``vxConvolutionLayer``, ``vxDeconvolutionLayer`` and
``vxROIPoolingLayer`` carry ``sizeof`` of the C struct; :data:`SIZEOF` gives it for this
platform's C ABI (``vx_size`` is ``size_t``, ``vx_enum`` is ``int32_t``), from the structs
as the extension text declares them (§2.1.1), and :func:`check_size` is what the node
creators apply to a size they are given.
"""

from __future__ import annotations

import ctypes
from enum import IntEnum

from .types import Status, Type, VxError

__all__ = [
    "VX_LIBRARY_KHR_NN_EXTENSION", "NnEnum", "SIZEOF", "check_size", "EXTENSION_8",
    "EXTENSION_16",
]

#: ``#define VX_LIBRARY_KHR_NN_EXTENSION (0x1)``
VX_LIBRARY_KHR_NN_EXTENSION = 0x1
#: the extension strings (the text's §1: "KHR_NN_8", and "KHR_NN_16" only with it)
EXTENSION_8 = "KHR_NN_8"
EXTENSION_16 = "KHR_NN_16"

VX_ID_KHRONOS = 0x000


def VX_KERNEL_BASE(vendor: int, lib: int) -> int:  # noqa: N802 - the C macro's name
    return (vendor << 20) | (lib << 12)


def VX_ENUM_BASE(vendor: int, type_id: int) -> int:  # noqa: N802 - the C macro's name
    return (vendor << 20) | (type_id << 12)


class NnEnum(IntEnum):
    """``vx_nn_enum_e``: the type ids of the extension's enumerations."""

    VX_ENUM_NN_ROUNDING_TYPE = 0x1A
    VX_ENUM_NN_POOLING_TYPE = 0x1B
    VX_ENUM_NN_NORMALIZATION_TYPE = 0x1C
    VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE = 0x1D


VX_ENUM_NN_ROUNDING_TYPE = NnEnum.VX_ENUM_NN_ROUNDING_TYPE
VX_ENUM_NN_POOLING_TYPE = NnEnum.VX_ENUM_NN_POOLING_TYPE
VX_ENUM_NN_NORMALIZATION_TYPE = NnEnum.VX_ENUM_NN_NORMALIZATION_TYPE
VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE = NnEnum.VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE

_K = VX_KERNEL_BASE(VX_ID_KHRONOS, VX_LIBRARY_KHR_NN_EXTENSION)
# vx_kernel_nn_ext_e
VX_KERNEL_CONVOLUTION_LAYER = _K + 0x0
VX_KERNEL_FULLY_CONNECTED_LAYER = _K + 0x1
VX_KERNEL_POOLING_LAYER = _K + 0x2
VX_KERNEL_SOFTMAX_LAYER = _K + 0x3
VX_KERNEL_NORMALIZATION_LAYER = _K + 0x4
VX_KERNEL_ACTIVATION_LAYER = _K + 0x5
VX_KERNEL_ROI_POOLING_LAYER = _K + 0x6
VX_KERNEL_DECONVOLUTION_LAYER = _K + 0x7

_R = VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_ROUNDING_TYPE)
_P = VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_POOLING_TYPE)
_N = VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_NORMALIZATION_TYPE)
_A = VX_ENUM_BASE(VX_ID_KHRONOS, VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE)
# vx_nn_rounding_type_e
VX_NN_DS_SIZE_ROUNDING_FLOOR = _R + 0x0
VX_NN_DS_SIZE_ROUNDING_CEILING = _R + 0x1
# vx_nn_pooling_type_e
VX_NN_POOLING_MAX = _P + 0x0
VX_NN_POOLING_AVG = _P + 0x1
# vx_nn_norm_type_e
VX_NN_NORMALIZATION_SAME_MAP = _N + 0x0
VX_NN_NORMALIZATION_ACROSS_MAPS = _N + 0x1
# vx_nn_activation_function_e
VX_NN_ACTIVATION_LOGISTIC = _A + 0x0
VX_NN_ACTIVATION_HYPERBOLIC_TAN = _A + 0x1
VX_NN_ACTIVATION_RELU = _A + 0x2
VX_NN_ACTIVATION_BRELU = _A + 0x3
VX_NN_ACTIVATION_SOFTRELU = _A + 0x4
VX_NN_ACTIVATION_ABS = _A + 0x5
VX_NN_ACTIVATION_SQUARE = _A + 0x6
VX_NN_ACTIVATION_SQRT = _A + 0x7
VX_NN_ACTIVATION_LINEAR = _A + 0x8
# vx_nn_type_e
VX_TYPE_NN_CONVOLUTION_PARAMS = int(Type.NN_CONVOLUTION_PARAMS)
VX_TYPE_NN_DECONVOLUTION_PARAMS = int(Type.NN_DECONVOLUTION_PARAMS)
VX_TYPE_NN_ROI_POOL_PARAMS = int(Type.NN_ROI_POOL_PARAMS)


# -- the structs as C lays them out (§2.1.1) -------------------------------------------------
_size, _enum = ctypes.c_size_t, ctypes.c_int32


class _ConvolutionParams(ctypes.Structure):
    _fields_ = [("padding_x", _size), ("padding_y", _size), ("overflow_policy", _enum),
                ("rounding_policy", _enum), ("down_scale_size_rounding", _enum),
                ("dilation_x", _size), ("dilation_y", _size)]


class _DeconvolutionParams(ctypes.Structure):
    _fields_ = [("padding_x", _size), ("padding_y", _size), ("overflow_policy", _enum),
                ("rounding_policy", _enum), ("a_x", _size), ("a_y", _size)]


class _RoiPoolParams(ctypes.Structure):
    _fields_ = [("pool_type", _enum)]


#: ``sizeof`` of each parameter struct on this platform (48, 40 and 4 on LP64)
SIZEOF: dict[str, int] = {
    "size_of_convolution_params": ctypes.sizeof(_ConvolutionParams),
    "size_of_deconv_params": ctypes.sizeof(_DeconvolutionParams),
    "size_of_roi_params": ctypes.sizeof(_RoiPoolParams),
}


def check_size(name: str, value: object) -> VxError | None:
    """None if ``value`` is ``sizeof`` the struct the argument ``name`` sizes, else the
    error a node creator records (``ERROR_INVALID_PARAMETERS`` naming argument, value and
    the size expected)."""
    want = SIZEOF[name]
    if isinstance(value, bool) or not isinstance(value, int) or value != want:
        return VxError(Status.ERROR_INVALID_PARAMETERS, f"{name} is {value!r}, not sizeof "
                       f"the struct ({want} bytes on this platform)", field=name,
                       value=value, limit=want)
    return None
