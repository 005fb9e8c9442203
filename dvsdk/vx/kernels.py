"""The eight NN kernels: names, enums, parameter signatures and validators.

Each kernel is reachable by its name string and enum (``formats.md`` §2.4) through
:func:`get_kernel` (``vxGetKernelByName`` / ``vxGetKernelByEnum``).  The parameter lists
follow the kernel parameter numbering of §2.6 (the node creators' ``size_of_*`` arguments
are not kernel parameters).  A validator checks a node's parameters at verification and
resolves its output's dimensions and type (the output validator of the core spec); the
size rules live in :mod:`dvsdk.vx.shapes`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import shapes
from .reference import Reference
from .types import (
    ActivationFunction,
    ConvertPolicy,
    ConvolutionParams,
    DeconvolutionParams,
    Direction,
    KernelEnum,
    NormType,
    ParameterState,
    PoolingType,
    RoiPoolParams,
    RoundingType,
    RoundPolicy,
    Status,
    Type,
    VxError,
)

__all__ = ["Param", "KernelDef", "Kernel", "KERNELS", "get_kernel", "kernel_def"]

IN, OUT = Direction.INPUT, Direction.OUTPUT
REQ, OPT = ParameterState.REQUIRED, ParameterState.OPTIONAL


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``kind`` is ``"tensor"``, an enum class, ``"size"``,
    ``"float32"`` or a params dataclass; ``static`` marks the seed's [static]."""

    name: str
    direction: Direction
    kind: Any
    state: ParameterState = REQ
    static: bool = False

    @property
    def type(self) -> Type:
        if self.kind == "tensor":
            return Type.TENSOR
        if self.kind == "size":
            return Type.SIZE
        if self.kind == "float32":
            return Type.FLOAT32
        if self.kind is ConvolutionParams:
            return Type.NN_CONVOLUTION_PARAMS
        if self.kind is DeconvolutionParams:
            return Type.NN_DECONVOLUTION_PARAMS
        if self.kind is RoiPoolParams:
            return Type.NN_ROI_POOL_PARAMS
        return Type.ENUM


@dataclass(frozen=True)
class KernelDef:
    enum: KernelEnum
    name: str
    params: tuple[Param, ...]
    #: validate(values, tensors) -> {output index: (dims, type, fpp)}, derived attributes
    validate: Callable[..., tuple[dict, dict]]

    @property
    def short(self) -> str:
        return self.name.rsplit(".", 1)[-1]


def _t(name: str, direction: Direction = IN, state: ParameterState = REQ,
       static: bool = False) -> Param:
    return Param(name, direction, "tensor", state, static)


_CONV = (_t("inputs"), _t("weights", static=True), _t("biases", state=OPT, static=True),
         Param("convolution_params", IN, ConvolutionParams, static=True), _t("outputs", OUT))
_DECONV = (_t("inputs"), _t("weights", static=True), _t("biases", state=OPT, static=True),
           Param("deconvolution_params", IN, DeconvolutionParams, static=True),
           _t("outputs", OUT))
_FC = (_t("inputs"), _t("weights", static=True), _t("biases", state=OPT, static=True),
       Param("overflow_policy", IN, ConvertPolicy, static=True),
       Param("rounding_policy", IN, RoundPolicy, static=True), _t("outputs", OUT))
_POOL = (_t("inputs"), Param("pooling_type", IN, PoolingType, static=True),
         Param("pooling_size_x", IN, "size", static=True),
         Param("pooling_size_y", IN, "size", static=True),
         Param("pooling_padding_x", IN, "size", static=True),
         Param("pooling_padding_y", IN, "size", static=True),
         Param("rounding", IN, RoundingType, static=True), _t("outputs", OUT))
_SOFTMAX = (_t("inputs"), _t("outputs", OUT))
_NORM = (_t("inputs"), Param("type", IN, NormType, static=True),
         Param("normalization_size", IN, "size", static=True),
         Param("alpha", IN, "float32", static=True), Param("beta", IN, "float32", static=True),
         _t("outputs", OUT))
_ACT = (_t("inputs"), Param("function", IN, ActivationFunction, static=True),
        Param("a", IN, "float32", static=True), Param("b", IN, "float32", static=True),
        _t("outputs", OUT))
_ROI = (_t("input_data"), _t("input_rois"),
        Param("roi_pool_params", IN, RoiPoolParams, static=True), _t("output_arr", OUT))

_NN = "org.khronos.nn_extension."

KERNELS: dict[KernelEnum, KernelDef] = {k.enum: k for k in (
    KernelDef(KernelEnum.CONVOLUTION_LAYER, _NN + "convolution_layer", _CONV,
              shapes.convolution),
    KernelDef(KernelEnum.FULLY_CONNECTED_LAYER, _NN + "fully_connected_layer", _FC,
              shapes.fully_connected),
    KernelDef(KernelEnum.POOLING_LAYER, _NN + "pooling_layer", _POOL, shapes.pooling),
    KernelDef(KernelEnum.SOFTMAX_LAYER, _NN + "softmax_layer", _SOFTMAX, shapes.same_shape),
    KernelDef(KernelEnum.NORMALIZATION_LAYER, _NN + "normalization_layer", _NORM,
              shapes.normalization),
    KernelDef(KernelEnum.ACTIVATION_LAYER, _NN + "activation_layer", _ACT, shapes.same_shape),
    KernelDef(KernelEnum.ROI_POOLING_LAYER, _NN + "roi_pooling_layer", _ROI,
              shapes.roi_pooling),
    KernelDef(KernelEnum.DECONVOLUTION_LAYER, _NN + "deconvolution_layer", _DECONV,
              shapes.deconvolution),
)}
_BY_NAME = {k.name: k for k in KERNELS.values()}


def kernel_def(name_or_enum: str | int) -> KernelDef:
    """The kernel named ``name_or_enum`` (name string or enum value)."""
    if isinstance(name_or_enum, str):
        k = _BY_NAME.get(name_or_enum)
    else:
        try:
            k = KERNELS.get(KernelEnum(int(name_or_enum)))
        except (TypeError, ValueError):
            k = None
    if k is None:
        raise VxError(Status.ERROR_INVALID_PARAMETERS, f"no kernel {name_or_enum!r}",
                      field="kernel", value=name_or_enum,
                      limit=sorted(_BY_NAME) + [hex(e) for e in KERNELS])
    return k


class Kernel(Reference):
    """``vx_kernel``: ``name``, ``enum``, ``num_parameters``, ``parameters``."""

    vx_type = Type.KERNEL

    def __init__(self, context: Any, kdef: KernelDef) -> None:
        self.kdef = kdef
        super().__init__(context, kdef.name)

    @property
    def enum(self) -> KernelEnum:
        return self.kdef.enum

    @property
    def num_parameters(self) -> int:
        return len(self.kdef.params)

    @property
    def parameters(self) -> tuple[Param, ...]:
        return self.kdef.params


def get_kernel(context: Any, name_or_enum: str | int) -> Kernel:
    """``vxGetKernelByName`` / ``vxGetKernelByEnum``."""
    return Kernel(context, kernel_def(name_or_enum))
