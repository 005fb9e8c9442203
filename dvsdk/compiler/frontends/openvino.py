"""OpenVINO IR -> IR: ``model.xml`` with its ``model.bin`` beside it, both generations.

* **IR v10/v11** (the opsets OpenVINO writes today): :mod:`.openvino_v10` (Range and
  ScaledDotProductAttention: :mod:`.openvino_v10_seq`);
* **legacy IR v2-v7** (the layer catalog of ``formats.md`` §5, which OpenVINO itself no longer
  reads): :mod:`.openvino_legacy`.

The XML is read with ``defusedxml`` (no DTD, entities or external references) and the
``.bin`` through bounds-checked reads (:mod:`.openvino_ir`).  Layers convert in topological
order; every IR op records its source layer in ``Op.origin`` ("<type> <name>") for
``--report``.  A layer type (or attribute variant) no converter handles is collected, and all
of them are raised together in one :class:`~dvsdk.errors.UnsupportedOps`.  The IR is NCHW like
ONNX, so the graph is too (``Graph.layout`` stays "NCHW").

Graph inputs are the ``Parameter`` (``Input``) layers, named by their tensor name; outputs are
the tensors feeding ``Result`` layers (legacy: every output port no edge leaves), named by the
producing port's tensor name (else the layer name, ``name:port`` for extra ports).
"""

from __future__ import annotations

import os
from typing import Any

from ...errors import ModelError, UnsupportedOps
from ..ir import Graph, Tensor
from . import openvino_legacy, openvino_v10_seq
from .openvino_ir import Builder, Layer, Net, Weights, bin_path, read_xml, resolve_path

__all__ = ["load", "V10_LAYERS", "LEGACY_LAYERS", "LEGACY_VERSIONS", "V10_VERSIONS"]

#: layer type -> (converter, IR op types): the tables the README's OpenVINO section shows
#: (openvino_v10's, which openvino_v10_seq completes with Range and ScaledDotProductAttention)
V10_LAYERS = openvino_v10_seq.LAYERS
LEGACY_LAYERS = openvino_legacy.LAYERS
V10_VERSIONS = (10, 11)
LEGACY_VERSIONS = (2, 3, 4, 5, 6, 7)


def _port_tensor(b: Builder, layer: Layer, index: int) -> str:
    port = layer.outputs[index]
    if port.names:
        hint = port.names[0]
    elif len(layer.outputs) == 1:
        hint = layer.name
    else:
        hint = f"{layer.name}:{port.id}"
    name = b.fresh(hint)
    b.tensors[name] = Tensor(name)
    return name


def _convert(net: Net, b: Builder, table: dict) -> None:
    produced: dict[tuple[str, int], str] = {}
    poisoned: set[tuple[str, int]] = set()
    position = {lid: i for i, lid in enumerate(net.layers)}
    ranked: list[tuple[int, str]] = []  # outputs in the file's layer order, as OpenVINO has
    for layer in net.order():
        srcs = [net.sources[(layer.id, p.id)] for p in layer.inputs]
        entry = table.get(layer.type)
        if entry is None:
            b.unsupported.append((layer.type, layer.name))
        if entry is None or any(s in poisoned for s in srcs):
            poisoned.update((layer.id, p.id) for p in layer.outputs)
            continue
        b.layer, b.count = layer, 0
        ins = [produced[s] for s in srcs]
        outs = [_port_tensor(b, layer, i) for i in range(len(layer.outputs))]
        n_bad, n_out = len(b.unsupported), len(b.outputs)
        result = entry[0](b, layer, ins, outs)
        if len(b.unsupported) > n_bad:
            poisoned.update((layer.id, p.id) for p in layer.outputs)
            continue
        result = list(result if result is not None else outs)
        for i, port in enumerate(layer.outputs):
            if i < len(result) and result[i]:
                produced[(layer.id, port.id)] = result[i]
            else:
                poisoned.add((layer.id, port.id))
        if net.version < 10 and layer.type not in ("Input", "Const"):
            for i, port in enumerate(layer.outputs):
                if not net.consumers.get((layer.id, port.id)) and i < len(result):
                    b.outputs.append(result[i])
        ranked += [(position[layer.id], o) for o in b.outputs[n_out:]]
    b.outputs = [o for _, o in sorted(ranked, key=lambda r: r[0])]
    b.layer = None


def _finish(b: Builder, net: Net) -> Graph:
    outputs: list[str] = []
    for name in b.outputs:
        if name in b.inputs or name in outputs:  # a graph output must be its own tensor
            b.layer = Layer("", f"{name}/output", "Result", "", "", {}, [], [])
            name = b.op1("Identity", [name])
        outputs.append(name)
    if not outputs:
        raise ModelError("the IR has no outputs", field="Result")
    produced = {o for op in b.ops for o in op.outputs}
    for name in [n for n, t in b.tensors.items()
                 if t.const is None and n not in produced and n not in b.inputs]:
        del b.tensors[name]  # ports of layers that became aliases of other tensors
    graph = Graph(b.tensors, b.ops, list(b.inputs), outputs, 13, net.name)
    graph.topo_sort()
    graph.validate(require_shapes=False)
    return graph


def load(source: str | os.PathLike[str] | Any,
         input_size: tuple[int, int] | None = None) -> Graph:
    """Read the OpenVINO IR at ``source`` (the ``.xml``; the ``.bin`` is found beside it).

    ``input_size`` (H, W) fills free spatial dimensions of 4-D inputs (it must agree with
    fixed ones); a free batch dimension becomes 1.  Raises ModelError for unreadable, unsafe
    or inconsistent files and UnsupportedOps listing every layer without a conversion.
    """
    xml = resolve_path(source)
    net = read_xml(xml)
    if net.version in V10_VERSIONS:
        table = V10_LAYERS
    elif net.version in LEGACY_VERSIONS:
        table = LEGACY_LAYERS
    else:
        raise ModelError("unsupported OpenVINO IR version", field="net version",
                         value=net.version, limit=f"{LEGACY_VERSIONS} (legacy), {V10_VERSIONS}")
    b = Builder(net, Weights(bin_path(xml)), input_size)
    _convert(net, b, table)
    if b.unsupported:
        raise UnsupportedOps(b.unsupported)
    if not b.inputs:
        raise ModelError("the IR has no inputs", field="Parameter")
    return _finish(b, net)
