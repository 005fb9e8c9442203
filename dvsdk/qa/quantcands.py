"""``dvsdk analyze --quantize-candidates``: what 8-bit weights cost, layer by layer.

The source model is compiled in FP16, fully quantized, and once per weighted layer with
only that layer quantized (``quantize_skip`` = every other one); each net runs on the
device on the same input, and its outputs are compared with the float32 reference.  Per
layer: the weight bytes quantizing it saves, and how much it adds to the output error
over the FP16 net.  Layers that lose much accuracy for few bytes are the ones to keep in
FP16 with ``dvsdk-compile --quantize --quantize-skip LAYER,...``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..compiler.build import compile as compile_model
from ..runtime.net import Net
from .analyze import compare, reference_tensors


@dataclass
class Candidate:
    layer: str
    weights: int          # parameters
    saved_bytes: int      # weight bytes saved by quantizing this layer alone
    rel_error: float      # output error (max over outputs, share of range) with it quantized
    added: float          # rel_error minus the FP16 net's

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _options(net: Net) -> dict[str, Any]:
    meta = net.meta
    opts: dict[str, Any] = {"golden": False, "transpose": bool(meta.get("transposed")),
                            "ub_size": int(meta["hardware"]["ub_size_min"])}
    shapes = [i["shape"] for i in meta["inputs"] if len(i["shape"]) == 4]
    if shapes:
        opts["input_size"] = tuple(shapes[0][2:])
    return opts


def _output_error(netfile: Any, device: Any, feeds: dict[str, np.ndarray],
                  ref: dict[str, np.ndarray]) -> float:
    with Net(netfile, device) as n:
        y = n.run(feeds)
        return max(compare(y[o["name"]], ref[o["tensor"]].reshape(y[o["name"]].shape))[1]
                   for o in n.outputs if o["tensor"] in ref)


def quantize_candidates(net: Net, model: Any, x: Any, fmt: str | None = None,
                        progress: Any = None) -> tuple[list[Candidate], dict[str, Any]]:
    """Per-layer candidates (worst trade first) and a summary of the FP16 and fully
    quantized nets (``fp16_error``, ``q8_error``, ``fp16_bytes``, ``q8_bytes``)."""
    feeds = net._feeds(x)
    ref = reference_tensors(model, [o["tensor"] for o in net.outputs], feeds, fmt)
    opts = _options(net)
    fp16 = compile_model(model, format=fmt, **opts)
    full = compile_model(model, format=fmt, quantize=True, **opts)
    layers = [r["op"] for r in full.meta["quantization"]]
    fp16_err = _output_error(fp16, net.device, feeds, ref)
    summary = {"fp16_error": fp16_err, "q8_error": _output_error(full, net.device, feeds, ref),
               "fp16_bytes": fp16.meta["weights"]["size"],
               "q8_bytes": full.meta["weights"]["size"], "layers": len(layers)}
    weights = {r["op"]: r["weights"] for r in full.meta["quantization"]}
    out = []
    for i, layer in enumerate(layers):
        one = compile_model(model, format=fmt, quantize=True,
                            quantize_skip=tuple(n for n in layers if n != layer), **opts)
        err = _output_error(one, net.device, feeds, ref)
        out.append(Candidate(layer, weights[layer],
                             summary["fp16_bytes"] - one.meta["weights"]["size"], err,
                             err - fp16_err))
        if progress:
            progress(i + 1, len(layers))
    out.sort(key=lambda c: -c.added / max(c.saved_bytes, 1))
    return out, summary
