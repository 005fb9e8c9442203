"""The node creators of the NN extension (``formats.md`` §2.6), one per kernel.

``vxConvolutionLayer(graph, inputs, weights, biases, &params, sizeof(params), outputs)``
becomes ``convolution_layer(graph, inputs, weights, biases, params, outputs)``: the same
arguments in the same order, the ``size_of_*`` one optional (a Python struct knows its
size). Where the C API has it (convolution, deconvolution, ROI pooling) it may be given in
its place, ``convolution_layer(graph, x, w, b, params, sizeof_params, y)``, or by keyword
(``size_of_convolution_params=48``); it must then be ``sizeof`` the C struct
(:data:`dvsdk.vx.khr_nn.SIZEOF`), else the node carries ``ERROR_INVALID_PARAMETERS`` naming
the argument, as a C implementation checking it would return. Scalars may be plain numbers
and enum members or :class:`~dvsdk.vx.scalar.Scalar` objects; structs are the dataclasses of
:mod:`dvsdk.vx.types` (or dicts of their fields).

Every creator returns the node; a bad argument leaves it with an error ``status`` (see
:mod:`dvsdk.vx.node`) instead of raising. The same nodes can be made from a kernel name or
enum with ``graph.generic_node(kernel)`` and ``node.set_parameter_by_index``.
"""

from __future__ import annotations

from typing import Any

from .graph import Graph
from .kernels import kernel_def
from .khr_nn import check_size
from .node import Node
from .types import KernelEnum, Status, VxError

__all__ = ["convolution_layer", "deconvolution_layer", "fully_connected_layer",
           "pooling_layer", "softmax_layer", "normalization_layer", "activation_layer",
           "roi_pooling_layer"]


def _node(graph: Graph, kernel: KernelEnum, *values: Any) -> Node:
    node = graph.generic_node(kernel_def(kernel))
    for i, v in enumerate(values):
        node.set_parameter_by_index(i, v)
    return node


def _sized(name: str, rest: tuple, size: Any) -> tuple[Any, Any]:
    """(outputs, size) from the arguments after the struct: ``(outputs,)`` or ``(size,
    outputs)``, with ``size`` also allowed by keyword."""
    if len(rest) == 2:
        if size is not None:
            raise TypeError(f"{name} given twice")
        return rest[1], rest[0]
    if len(rest) != 1:
        raise TypeError(f"expected outputs, or {name} and outputs, after the parameters; "
                        f"got {len(rest)} arguments")
    return rest[0], size


def _size_checked(node: Node, index: int, name: str, size: Any) -> Node:
    """Record a wrong ``size_of_*`` on the struct's parameter (the node's status)."""
    err = None if size is None else check_size(name, size)
    if err is not None:
        node._errors[index] = VxError(Status.ERROR_INVALID_PARAMETERS, f"node {node.name!r} "
                                      f"{err.message.split(': ', 1)[1]}",
                                      field=f"{node.name}.{name}", value=size,
                                      limit=err.limit)
    return node


def convolution_layer(graph: Graph, inputs: Any, weights: Any, biases: Any,
                      convolution_params: Any, *rest: Any,
                      size_of_convolution_params: int | None = None) -> Node:
    """``vxConvolutionLayer``: padding per side, dilation as zeros inserted, the skip
    (stride) inferred from the output size with floor or ceil rounding; biases shared
    ``[#OFM]`` or unshared ``[width, height, #OFM]``."""
    outputs, size = _sized("size_of_convolution_params", rest, size_of_convolution_params)
    node = _node(graph, KernelEnum.CONVOLUTION_LAYER, inputs, weights, biases,
                 convolution_params, outputs)
    return _size_checked(node, 3, "size_of_convolution_params", size)


def deconvolution_layer(graph: Graph, inputs: Any, weights: Any, biases: Any,
                        deconvolution_params: Any, *rest: Any,
                        size_of_deconv_params: int | None = None) -> Node:
    """``vxDeconvolutionLayer``: zeros inserted between the inputs (the upscale, inferred
    from the output size), then a convolution with the weights as given, over the
    upscaled input padded by ``kernel - padding - 1`` on each side and ``a`` more at the
    end (right, bottom); biases ``[#OFM]`` or one per output location
    ``[width, height, #OFM]``."""
    outputs, size = _sized("size_of_deconv_params", rest, size_of_deconv_params)
    node = _node(graph, KernelEnum.DECONVOLUTION_LAYER, inputs, weights, biases,
                 deconvolution_params, outputs)
    return _size_checked(node, 3, "size_of_deconv_params", size)


def fully_connected_layer(graph: Graph, inputs: Any, weights: Any, biases: Any,
                          overflow_policy: Any, rounding_policy: Any, outputs: Any) -> Node:
    """``vxFullyConnectedLayer``: ``out[i] = sum_j in[j] w[j, i] + b[i]``.  A
    ``[width, height, #IFM, #batches]`` input is flattened in OpenVX memory order,
    ``j = x + width * (y + height * c)``, which is NCHW's flatten order; batches may be
    several dimensions (``[#IFM, b1, b2]`` -> ``[#OFM, b1, b2]``) and the weights
    ``[#IFM, #OFM]`` or ``[width, height, #IFM, #OFM]``."""
    return _node(graph, KernelEnum.FULLY_CONNECTED_LAYER, inputs, weights, biases,
                 overflow_policy, rounding_policy, outputs)


def pooling_layer(graph: Graph, inputs: Any, pooling_type: Any, pooling_size_x: Any,
                  pooling_size_y: Any, pooling_padding_x: Any, pooling_padding_y: Any,
                  rounding: Any, outputs: Any) -> Node:
    """``vxPoolingLayer``: MAX or AVG over a window on zero-padded input (average
    pooling counts the padded zeros), the skip inferred from the output size."""
    return _node(graph, KernelEnum.POOLING_LAYER, inputs, pooling_type, pooling_size_x,
                 pooling_size_y, pooling_padding_x, pooling_padding_y, rounding, outputs)


def softmax_layer(graph: Graph, inputs: Any, outputs: Any) -> Node:
    """``vxSoftmaxLayer``: over dimension 0 for 1-D and 2-D tensors (dimension 1 of a 2-D
    tensor is the batch), over dimension 2 (the classes) for 3-D and 4-D ones."""
    return _node(graph, KernelEnum.SOFTMAX_LAYER, inputs, outputs)


def normalization_layer(graph: Graph, inputs: Any, type: Any, normalization_size: Any,  # noqa: A002
                        alpha: Any, beta: Any, outputs: Any) -> Node:
    """``vxNormalizationLayer``: ``x / (1 + alpha / n * sum x_i^2) ** beta`` over n maps
    centred on x (ACROSS_MAPS) or an n x n square of its map (SAME_MAP), zero padded."""
    return _node(graph, KernelEnum.NORMALIZATION_LAYER, inputs, type, normalization_size,
                 alpha, beta, outputs)


def activation_layer(graph: Graph, inputs: Any, function: Any, a: Any, b: Any,
                     outputs: Any) -> Node:
    """``vxActivationLayer``: one of the nine functions of ``ActivationFunction``."""
    return _node(graph, KernelEnum.ACTIVATION_LAYER, inputs, function, a, b, outputs)


def roi_pooling_layer(graph: Graph, input_data: Any, input_rois: Any, roi_pool_params: Any,
                      *rest: Any, size_of_roi_params: int | None = None) -> Node:
    """``vxROIPoolingLayer``: each ROI ``(x0, y0, x1, y1)`` (corners included, input
    coordinates) max-pooled to the output's width and height; output
    ``[pooled_width, pooled_height, #IFM, roi_count]``, or with a batch (data
    ``[W, H, #IFM, #batches]``, ROIs ``[4, roi_count, #batches]``)
    ``[pooled_width, pooled_height, #IFM, roi_count, #batches]``."""
    output_arr, size = _sized("size_of_roi_params", rest, size_of_roi_params)
    node = _node(graph, KernelEnum.ROI_POOLING_LAYER, input_data, input_rois,
                 roi_pool_params, output_arr)
    return _size_checked(node, 2, "size_of_roi_params", size)
