"""Checks and refusals of shape inference (split from :mod:`.fold`): element types, empty
tensors, shape parameters that are not constant."""

from __future__ import annotations

from ..cpu.dtypes import refusal
from ..errors import ModelError, UnsupportedOps
from .ir import Graph, Op

__all__ = ["check_dtypes", "not_constant"]


def not_constant(g: Graph, op: Op) -> ModelError:
    """The error for an op whose output shape depends on an input that is not constant: names
    the inputs and the graph inputs whose values they are computed from
    (:meth:`.ir.Graph.value_sources`; Shape and Size of static tensors fold, so what is left
    depends on data)."""
    params = [n for i, n in enumerate(op.inputs) if n and not g.is_const(n) and (
        i > 0 or op.type in ("ConstantOfShape", "Range"))]
    src = g.value_sources(params)
    return ModelError("cannot infer shape: a shape-defining input is not constant",
                      field=f"{op.type} {op.name}", value=params,
                      hint="the value is computed at run time" + (
                          f" from graph input {', '.join(src)}" if src else "")
                      + "; dvsdk needs static shapes")


def check_dtypes(graph: Graph, empty_ok: frozenset[str]) -> None:
    """Refuse what the CPU kernels would compute wrongly: every op whose inputs have an
    element type its kernel does not handle (UnsupportedOps naming op and type, e.g.
    ``Sigmoid[int64]``), and an empty (zero-size) tensor read by an op other than the
    element-wise and data-movement ones, which compute it right (ModelError)."""
    bad = []
    for op in graph.ops:
        why = refusal(op.type, [graph.tensors[n].dtype if n else None for n in op.inputs],
                      op.attrs)
        if why is not None:
            bad.append((why, op.name))
    if bad:
        raise UnsupportedOps(bad)
    for op in graph.ops:
        if op.type in empty_ok:
            continue
        for n in op.inputs:
            shape = graph.shape(n) if n and not graph.is_const(n) else None
            if shape is not None and 0 in shape:
                raise ModelError("op reads a zero-size tensor", field=f"{op.type} {op.name}",
                                 value=(n, shape), limit="element-wise and data-movement "
                                 "ops only take empty tensors")
