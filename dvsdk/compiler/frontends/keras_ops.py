"""Keras 3 operations called on Keras tensors: ``x + 3.0``, ``2.0 * x``, ``ops.maximum(x, 0)``.

In a Keras 3 functional model, arithmetic on a Keras tensor is not a layer but a call of a
``keras.ops`` operation, and the saved config lists it among the layers anyway: an entry
whose class is the operation's (``Add``, ``Subtract``, ``Multiply``, ``TrueDivide`` ...,
some of them the names of merge layers too), whose config holds only its name, and whose
inbound node passes the operands positionally: ``{"args": [<tensor>, 3.0]}``.  A merge
layer is called with *one* argument, the list of its tensors (``{"args": [[a, b]]}``).
A constant operand is a number or ``{"class_name": "__numpy__", "config": {"value": ...}}``.

Each such call becomes one element-wise IR op; a constant broadcasts the numpy way against
the tensor's Keras shape and is stored in the IR's order (NCHW for rank 4).  Operations
outside :data:`OPERATIONS` are refused by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .keras_ir import KT, NHWC_TO_NCHW, Builder, Layer

__all__ = ["OPERATIONS", "is_operation", "origin_class", "convert_operation", "elementwise"]

#: Keras operation class -> IR op (binary, element-wise)
OPERATIONS = {"Add": "Add", "Subtract": "Sub", "Multiply": "Mul", "TrueDivide": "Div",
              "Divide": "Div", "Maximum": "Max", "Minimum": "Min"}


def _is_tensor(v: Any) -> bool:
    return isinstance(v, dict) and v.get("class_name") == "__keras_tensor__"


def is_operation(ly: dict) -> bool:
    """Whether a Keras 3 layer entry is an operation call (two positional operands) rather
    than a layer (merge layers take one list of tensors)."""
    nodes = ly.get("inbound_nodes")
    if not isinstance(nodes, list) or not nodes:
        return False
    for node in nodes:
        args = node.get("args") if isinstance(node, dict) else None
        if not (isinstance(args, list) and len(args) == 2
                and not any(isinstance(a, list) for a in args)
                and any(_is_tensor(a) for a in args)):
            return False
    return True


def _constant(layer: Layer, v: Any) -> np.ndarray:
    if isinstance(v, dict) and v.get("class_name") == "__numpy__":
        cfg = v.get("config")
        v = cfg.get("value") if isinstance(cfg, dict) else None
    try:
        arr = np.asarray(v, dtype=np.float64)
    except (TypeError, ValueError):
        raise layer.err("operand is neither a tensor nor a number", value=str(v)[:80]) from None
    if isinstance(v, bool) or not np.all(np.isfinite(arr)):
        raise layer.err("operand is not a finite number", value=str(v)[:80])
    return arr.astype(np.float32)


def origin_class(cls: str) -> str:
    """The class an operation's IR ops name as their source (``ops.Add``): not a layer's."""
    return f"ops.{cls}"


def convert_operation(b: Builder, layer: Layer, node: dict, xs: list[KT]) -> KT:
    """The IR op of one call of operation ``layer`` (its ``cls`` from :func:`origin_class`):
    ``node["args"]`` in order, its tensors taken from ``xs``."""
    tensors = iter(xs)
    operands = [next(tensors) if _is_tensor(a) else a for a in node["args"]]
    return elementwise(b, layer, OPERATIONS[layer.cls.removeprefix("ops.")], operands)


def elementwise(b: Builder, layer: Layer, op_type: str, operands: list[Any]) -> KT:
    """One binary element-wise IR op ``op_type`` of ``operands`` (Keras tensors, or numbers /
    arrays that broadcast the numpy way against the tensors' Keras shapes)."""
    ops: list[KT | np.ndarray] = [b.plain(o) if isinstance(o, KT) else _constant(layer, o)
                                  for o in operands]
    if not any(isinstance(o, KT) for o in ops):
        raise layer.err("no operand is a tensor", value=[str(o)[:40] for o in operands])
    rank = max(len(o.shape) for o in ops if isinstance(o, KT))
    shapes = [o.shape for o in ops]
    if any(len(s) > rank for s in shapes):
        raise layer.err("a constant operand has more dimensions than the tensor",
                        value=[tuple(s) for s in shapes], limit=f"rank <= {rank}")
    if any(isinstance(o, KT) and len(o.shape) != rank for o in ops):
        raise layer.err("operands of different rank", value=[tuple(s) for s in shapes])
    try:
        shape = tuple(int(d) for d in np.broadcast_shapes(*shapes))
    except ValueError:
        raise layer.err("operands cannot be broadcast together",
                        value=[tuple(s) for s in shapes]) from None
    names = []
    for i, o in enumerate(ops):
        if isinstance(o, KT):
            names.append(o.name)
            continue
        c = o.reshape((1,) * (rank - o.ndim) + o.shape)
        if rank == 4:
            c = c.transpose(NHWC_TO_NCHW)
        names.append(b.const(f"{layer.name}_operand{i}", c))
    return KT(b.op(op_type, names), shape)
