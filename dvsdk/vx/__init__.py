"""``dvsdk.vx``: the OpenVX graph API with the Neural Network Extension, on the DV700.

Build a network node by node the OpenVX way, verify it once (which compiles it for the
DV700 and loads it on the context's device), then process it as often as needed::

    import numpy as np
    import dvsdk.vx as vx

    with vx.Context() as ctx:                          # default device: the simulator
        g = ctx.graph()
        x = vx.Tensor(ctx, [28, 28, 1, 1], vx.Type.FLOAT32)     # [width, height, IFM, N]
        w = vx.Tensor(ctx, [5, 5, 1, 8], vx.Type.FLOAT32)       # [kx, ky, IFM, OFM]
        w.copy_patch(np.ones((5, 5, 1, 8), np.float32) / 25, vx.Accessor.WRITE_ONLY)
        y = vx.Tensor(ctx, [24, 24, 8, 1], vx.Type.FLOAT32)
        vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(), y)
        assert g.verify() == vx.Status.SUCCESS
        x.copy_patch(np.random.rand(28, 28, 1, 1).astype(np.float32), vx.Accessor.WRITE_ONLY)
        g.process()
        out = y.copy_patch()                          # a[x, y, c, n], OpenVX order

Modules: :mod:`.types` (enums, status, parameter structs), :mod:`.context`,
:mod:`.khr_nn` (the header's ``VX_*`` names), :mod:`.tensor`, :mod:`.scalar`,
:mod:`.node`, :mod:`.kernels`, :mod:`.layers` (the node creators), :mod:`.graph`,
:mod:`.vxu` (immediate mode).  The README section "OpenVX graphs
(dvsdk.vx)" lists what runs on the DV700 and where results differ from a conformant
fixed-point implementation.
"""

from __future__ import annotations

from . import khr_nn, vxu
from .context import EXTENSIONS, Context, ContextAttribute
from .graph import Graph
from .kernels import Kernel, get_kernel
from .khr_nn import (
    VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE,
    VX_ENUM_NN_NORMALIZATION_TYPE,
    VX_ENUM_NN_POOLING_TYPE,
    VX_ENUM_NN_ROUNDING_TYPE,
    VX_LIBRARY_KHR_NN_EXTENSION,
    NnEnum,
)
from .layers import (
    activation_layer,
    convolution_layer,
    deconvolution_layer,
    fully_connected_layer,
    normalization_layer,
    pooling_layer,
    roi_pooling_layer,
    softmax_layer,
)
from .node import Node, Parameter
from .perf import Perf
from .scalar import Scalar
from .tensor import Tensor
from .types import (
    Accessor,
    Action,
    ActivationFunction,
    ConvertPolicy,
    ConvolutionParams,
    DeconvolutionParams,
    Direction,
    GraphState,
    KernelEnum,
    NormType,
    ParameterState,
    PoolingType,
    RoiPoolParams,
    RoundingType,
    RoundPolicy,
    Status,
    Target,
    Type,
    VxError,
)

__all__ = [
    "Context", "Graph", "Tensor", "Scalar", "Node", "Parameter", "Kernel", "Perf",
    "get_kernel", "vxu", "EXTENSIONS",
    "convolution_layer", "deconvolution_layer", "fully_connected_layer", "pooling_layer",
    "softmax_layer", "normalization_layer", "activation_layer", "roi_pooling_layer",
    "Accessor", "Action", "ActivationFunction", "ConvertPolicy", "ConvolutionParams",
    "DeconvolutionParams", "Direction", "GraphState", "KernelEnum", "NormType",
    "ParameterState", "PoolingType", "RoiPoolParams", "RoundingType", "RoundPolicy",
    "Status", "Target", "Type", "VxError",
    "ContextAttribute", "khr_nn", "NnEnum", "VX_LIBRARY_KHR_NN_EXTENSION",
    "VX_ENUM_NN_ROUNDING_TYPE", "VX_ENUM_NN_POOLING_TYPE", "VX_ENUM_NN_NORMALIZATION_TYPE",
    "VX_ENUM_NN_ACTIVATION_FUNCTION_TYPE",
]


def __getattr__(name: str) -> int:
    """Every ``VX_*`` name of ``vx_khr_nn.h`` (:mod:`.khr_nn`) as ``dvsdk.vx.VX_...`` too."""
    if name.startswith("VX_") and hasattr(khr_nn, name):
        return getattr(khr_nn, name)
    raise AttributeError(f"module 'dvsdk.vx' has no attribute {name!r}")
