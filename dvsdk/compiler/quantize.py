"""``--quantize``: 8-bit k-means weight tables, applied to the graph before lowering.

Each Conv/ConvTranspose/Gemm weight tensor gets its own 256-entry codebook (entry 0 is
0.0, §8.3) from :func:`dvsdk.hw.weights.quantize_weights`, and the graph's constant is
replaced by the dequantized values.  The lowering then re-quantizes values that already
lie on the codebook, which reproduces it exactly, and the golden reference (computed from
this graph) is the quantized model: the self-test measures the device, not the
quantization.  The per-layer quantization error is recorded in net.bin's report.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..hw.weights import quantization_error, quantize_weights
from .ir import Graph

QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm")


def quantize_graph(graph: Graph) -> tuple[Graph, list[dict[str, Any]]]:
    """A copy of ``graph`` with codebook-quantized weights, and the error per layer."""
    g = graph.copy()
    report = []
    for op in g.ops:
        if op.type not in QUANTIZED_OPS:
            continue
        w = g.const(op.input(1))
        if w is None or w.size == 0:
            continue
        table, idx = quantize_weights(np.asarray(w, np.float32))
        err = quantization_error(w, table, idx)
        deq = table.astype(np.float32)[idx].reshape(w.shape)
        op.inputs[1] = g.add_const(f"{op.input(1)}_q8", deq)
        report.append({"op": op.name, "type": op.type, "weights": int(w.size),
                       **{k: float(v) for k, v in err.items()}})
    g.dead_code_elimination()
    return g, report
