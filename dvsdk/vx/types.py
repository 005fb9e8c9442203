"""OpenVX enumerations, status codes, the NN parameter structs and :class:`VxError`.

Values are OpenVX's own (``formats.md`` §2.4 for the NN extension; the core ``vx_types.h``
[EXT] for the rest): ``VX_ENUM_BASE(VX_ID_KHRONOS, id) = id << 12`` and
``VX_KERNEL_BASE(VX_ID_KHRONOS, VX_LIBRARY_KHR_NN_EXTENSION) = 0x1000``, so an application
that stores raw enum values (from C code, a file) can pass them unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import numpy as np

from ..errors import DvsdkError

__all__ = [
    "Status", "VxError", "Type", "Direction", "ParameterState", "ConvertPolicy",
    "RoundPolicy", "RoundingType", "PoolingType", "NormType", "ActivationFunction",
    "KernelEnum", "Accessor", "Action", "GraphState", "Target", "ConvolutionParams",
    "DeconvolutionParams", "RoiPoolParams", "DTYPES", "enum_value", "type_name",
]


def _base(type_id: int) -> int:
    return type_id << 12


class Status(IntEnum):
    """``vx_status_e``: 0 is success, errors are negative."""

    SUCCESS = 0
    FAILURE = -1
    ERROR_NOT_IMPLEMENTED = -2
    ERROR_NOT_SUPPORTED = -3
    ERROR_NOT_SUFFICIENT = -4
    ERROR_NOT_ALLOCATED = -5
    ERROR_NOT_COMPATIBLE = -6
    ERROR_NO_RESOURCES = -7
    ERROR_NO_MEMORY = -8
    ERROR_OPTIMIZED_AWAY = -9
    ERROR_INVALID_PARAMETERS = -10
    ERROR_INVALID_MODULE = -11
    ERROR_INVALID_REFERENCE = -12
    ERROR_INVALID_LINK = -13
    ERROR_INVALID_FORMAT = -14
    ERROR_INVALID_DIMENSION = -15
    ERROR_INVALID_VALUE = -16
    ERROR_INVALID_TYPE = -17
    ERROR_INVALID_GRAPH = -18
    ERROR_INVALID_NODE = -19
    ERROR_INVALID_SCOPE = -20
    ERROR_GRAPH_SCHEDULED = -21
    ERROR_GRAPH_ABANDONED = -22
    ERROR_MULTIPLE_WRITERS = -23
    ERROR_REFERENCE_NONZERO = -24


class VxError(DvsdkError):
    """An OpenVX call failed: ``status`` is the :class:`Status`, the message names the
    object (node and parameter where there is one), ``value`` and ``limit`` as usual."""

    def __init__(self, status: Status, message: str, **kw: Any) -> None:
        self.status = Status(status)
        super().__init__(f"{self.status.name}: {message}", **kw)


class Type(IntEnum):
    """``vx_type_e`` (the ones this API uses)."""

    INVALID = 0x000
    INT8 = 0x002
    UINT8 = 0x003
    INT16 = 0x004
    UINT16 = 0x005
    INT32 = 0x006
    UINT32 = 0x007
    INT64 = 0x008
    UINT64 = 0x009
    FLOAT32 = 0x00A
    FLOAT64 = 0x00B
    ENUM = 0x00C
    SIZE = 0x00D
    FLOAT16 = 0x00F
    BOOL = 0x010
    REFERENCE = 0x800
    CONTEXT = 0x801
    GRAPH = 0x802
    NODE = 0x803
    KERNEL = 0x804
    PARAMETER = 0x805
    SCALAR = 0x80D
    TENSOR = 0x815
    NN_CONVOLUTION_PARAMS = 0x025
    NN_DECONVOLUTION_PARAMS = 0x026
    NN_ROI_POOL_PARAMS = 0x027


#: tensor element types the NN API takes, and their numpy storage
DTYPES: dict[Type, np.dtype] = {
    Type.FLOAT32: np.dtype(np.float32), Type.FLOAT16: np.dtype(np.float16),
    Type.INT16: np.dtype(np.int16), Type.UINT8: np.dtype(np.uint8),
    Type.INT8: np.dtype(np.int8),
}


def type_name(t: int) -> str:
    try:
        return f"VX_TYPE_{Type(t).name}"
    except ValueError:
        return hex(int(t))


class Direction(IntEnum):
    INPUT = _base(0x00) + 0
    OUTPUT = _base(0x00) + 1
    BIDIRECTIONAL = _base(0x00) + 2


class Action(IntEnum):
    """What a node callback returns."""

    CONTINUE = _base(0x01) + 0
    ABANDON = _base(0x01) + 1


class ParameterState(IntEnum):
    REQUIRED = _base(0x08) + 0
    OPTIONAL = _base(0x08) + 1


class ConvertPolicy(IntEnum):
    """Overflow: keep the low bits (two's complement) or clamp to the type's range."""

    WRAP = _base(0x0A) + 0
    SATURATE = _base(0x0A) + 1


class Accessor(IntEnum):
    READ_ONLY = _base(0x11) + 1
    WRITE_ONLY = _base(0x11) + 2
    READ_AND_WRITE = _base(0x11) + 3


class RoundPolicy(IntEnum):
    """``vx_round_policy_e``: the core header numbers them from 1 (``+ 0x1``, ``+ 0x2``)."""

    TO_ZERO = _base(0x12) + 1
    TO_NEAREST_EVEN = _base(0x12) + 2


class GraphState(IntEnum):
    UNVERIFIED = _base(0x15) + 0
    VERIFIED = _base(0x15) + 1
    RUNNING = _base(0x15) + 2
    ABANDONED = _base(0x15) + 3
    COMPLETED = _base(0x15) + 4


class RoundingType(IntEnum):
    """``vx_nn_rounding_type_e``: floor or ceil of the output-size formula."""

    FLOOR = _base(0x1A) + 0
    CEILING = _base(0x1A) + 1


class PoolingType(IntEnum):
    MAX = _base(0x1B) + 0
    AVG = _base(0x1B) + 1


class NormType(IntEnum):
    SAME_MAP = _base(0x1C) + 0
    ACROSS_MAPS = _base(0x1C) + 1


class ActivationFunction(IntEnum):
    LOGISTIC = _base(0x1D) + 0
    HYPERBOLIC_TAN = _base(0x1D) + 1
    RELU = _base(0x1D) + 2
    BRELU = _base(0x1D) + 3
    SOFTRELU = _base(0x1D) + 4
    ABS = _base(0x1D) + 5
    SQUARE = _base(0x1D) + 6
    SQRT = _base(0x1D) + 7
    LINEAR = _base(0x1D) + 8


class KernelEnum(IntEnum):
    """The eight NN kernels: ``VX_KERNEL_BASE(VX_ID_KHRONOS, 1) + k``."""

    CONVOLUTION_LAYER = 0x1000
    FULLY_CONNECTED_LAYER = 0x1001
    POOLING_LAYER = 0x1002
    SOFTMAX_LAYER = 0x1003
    NORMALIZATION_LAYER = 0x1004
    ACTIVATION_LAYER = 0x1005
    ROI_POOLING_LAYER = 0x1006
    DECONVOLUTION_LAYER = 0x1007


class Target:
    """``vxSetNodeTarget`` strings: ``ANY`` lets the compiler choose (the default)."""

    ANY = "ANY"
    CPU = "CPU"
    DV700 = "DV700"
    ALL = (ANY, CPU, DV700)


def enum_value(enum: type[IntEnum], value: Any, what: str) -> IntEnum:
    """``value`` as a member of ``enum``, or VxError(INVALID_PARAMETERS) naming it."""
    try:
        return enum(int(value))
    except (TypeError, ValueError):
        legal = ", ".join(f"{m.name} {m.value:#x}" for m in enum)
        shown = hex(value) if isinstance(value, int) else repr(value)
        raise VxError(Status.ERROR_INVALID_PARAMETERS,
                      f"{what}: {shown} is not a {enum.__name__} ({legal})",
                      field=what, value=value, limit=[m.name for m in enum]) from None


# -- the NN parameter structs (formats.md §2.5) --------------------------------------------

@dataclass
class ConvolutionParams:
    """``vx_nn_convolution_params_t``: padding per side, policies, output-size rounding,
    dilation as the number of zeros inserted between taps (0 = dense)."""

    padding_x: int = 0
    padding_y: int = 0
    overflow_policy: int = ConvertPolicy.SATURATE
    rounding_policy: int = RoundPolicy.TO_NEAREST_EVEN
    down_scale_size_rounding: int = RoundingType.FLOOR
    dilation_x: int = 0
    dilation_y: int = 0


@dataclass
class DeconvolutionParams:
    """``vx_nn_deconvolution_params_t``: padding removed from each side of the output,
    policies, and ``a_x``/``a_y`` choosing among the ``upscale`` possible output sizes."""

    padding_x: int = 0
    padding_y: int = 0
    overflow_policy: int = ConvertPolicy.SATURATE
    rounding_policy: int = RoundPolicy.TO_NEAREST_EVEN
    a_x: int = 0
    a_y: int = 0


@dataclass
class RoiPoolParams:
    """``vx_nn_roi_pool_params_t``: only ``PoolingType.MAX`` is allowed."""

    pool_type: int = PoolingType.MAX
