"""``--quantize``: 8-bit k-means weight tables, applied to the graph before lowering.

Each Conv/ConvTranspose/Gemm weight tensor gets its own 256-entry codebook (entry 0 is
0.0, §8.3) from :func:`dvsdk.hw.weights.quantize_weights`, and the graph's constant is
replaced by the dequantized values.  The lowering then re-quantizes values that already
lie on the codebook, which reproduces it exactly, and the golden reference (computed from
this graph) is the quantized model: the self-test measures the device, not the
quantization.  The per-layer quantization error is recorded in net.bin's report.
``--quantize-skip`` keeps named layers in FP16 (e.g. the ones ``dvsdk analyze
--quantize-candidates`` shows lose most accuracy for the bytes they save).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw.weights import quantization_error, quantize_weights
from .ir import Graph, Op

QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm")


def layer_names(op: Op) -> set[str]:
    """The names a user may give for ``op`` in ``--quantize-skip``: the IR op's, and for
    non-ONNX models the source layer's (``Op.origin`` is "<type> <name>")."""
    names = {op.name}
    if op.origin:
        names.add(op.origin.split(" ", 1)[-1])
    return names


def quantize_graph(graph: Graph, skip: Iterable[str] = ()
                   ) -> tuple[Graph, list[dict[str, Any]], frozenset[str]]:
    """A copy of ``graph`` with codebook-quantized weights, the error per layer, and the
    names of the ops quantized.  Layers named in ``skip`` keep FP16 weights; a name that
    matches no weighted layer is a ModelError listing the ones that exist."""
    g = graph.copy()
    skip = set(skip)
    weighted = [op for op in g.ops if op.type in QUANTIZED_OPS]
    unknown = skip - set().union(*(layer_names(op) for op in weighted))
    if unknown:
        raise ModelError("--quantize-skip names no layer with weights", field="quantize_skip",
                         value=sorted(unknown),
                         limit=sorted(op.name for op in weighted)[:20])
    report, quantized = [], set()
    for op in weighted:
        if layer_names(op) & skip:
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
        quantized.add(op.name)
    g.dead_code_elimination()
    return g, report, frozenset(quantized)
