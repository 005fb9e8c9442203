"""Immediate mode (``vxu*``): each layer as a one-node graph, verified and processed at
once, for quick checks (OpenVX core: immediate-mode functions behave like single-node
graphs).  Each takes the context first, then the node creator's arguments without the
graph, and returns the :class:`Status` of the run; after a failure the module attribute
``last_error`` holds the :class:`VxError` naming node and parameter.

These compile a graph per call: use graphs for anything run more than once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import layers
from .types import Status, VxError

__all__ = ["convolution_layer", "deconvolution_layer", "fully_connected_layer",
           "pooling_layer", "softmax_layer", "normalization_layer", "activation_layer",
           "roi_pooling_layer", "last_error"]

#: the error of the last failed call (None after a success)
last_error: VxError | None = None


def _immediate(creator: Callable[..., Any]) -> Callable[..., Status]:
    def run(context: Any, *args: Any, **kwargs: Any) -> Status:
        global last_error
        graph = context.graph()
        try:
            creator(graph, *args, **kwargs)
            status = graph.process()
            last_error = graph.error if status != Status.SUCCESS else None
            return status
        finally:
            graph.release()

    run.__name__ = creator.__name__
    run.__doc__ = (f"``vxu{creator.__name__.title().replace('_', '')}(context, ...)``: "
                   f":func:`dvsdk.vx.layers.{creator.__name__}` as a one-node graph.")
    return run


convolution_layer = _immediate(layers.convolution_layer)
deconvolution_layer = _immediate(layers.deconvolution_layer)
fully_connected_layer = _immediate(layers.fully_connected_layer)
pooling_layer = _immediate(layers.pooling_layer)
softmax_layer = _immediate(layers.softmax_layer)
normalization_layer = _immediate(layers.normalization_layer)
activation_layer = _immediate(layers.activation_layer)
roi_pooling_layer = _immediate(layers.roi_pooling_layer)
