"""OpenVINO IR v10/v11 generators and sequence layers: ``Range`` and
``ScaledDotProductAttention``, registered in :data:`.openvino_v10.LAYERS` (re-exported here as
``LAYERS``, the complete v10/v11 table, which :mod:`.openvino` uses).

* ``Range``-1 (start, stop, step of one numeric type; the output has it) and ``Range``-4
  (``output_type``; the inputs are converted to it first, a float to an integer truncating
  toward zero as OpenVINO's shape inference does) become ONNX ``Range``, whose element count
  ``max(ceil((stop - start) / step), 0)`` is the one both specifications give.  With constant
  inputs, or bounds read from static shapes (``ShapeOf`` -> ``Gather``), it folds at compile
  time (:func:`dvsdk.compiler.fold.infer_and_fold`).
* ``ScaledDotProductAttention``-13 decomposes exactly as its specification's pseudo-code
  (OpenVINO opset13, "ScaledDotProductAttention"): ``MatMul(Q, Transpose(K, [..., -1, -2]))
  * scale``, plus the bias, ``Softmax`` over the last axis, ``MatMul`` with V.  ``scale``
  defaults to ``1 / Sqrt(E)`` (E: Q's last dimension, in Q's type); the bias is, with
  ``causal``, ``-inf`` above the diagonal of the [L, S] scores (``triu(-inf, k=1)``; the
  mask input is then ignored), else ``Select(LogicalNot(mask), -inf, 0)`` for a boolean mask
  or the mask itself for a float one (none for a constant all-zero mask: OpenVINO writes the
  absent mask of a model with a scale as a scalar 0).  The sink input (opset15) is refused by name.
"""

from __future__ import annotations

import numpy as np

from .openvino_ir import ONNX_TYPES, Builder, Layer, element_type
from .openvino_v10 import LAYERS, layer

__all__ = ["LAYERS"]

_NUMERIC = ("f32", "f16", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64")


def _port_type(L: Layer, i: int) -> np.dtype | None:
    prec = L.inputs[i].precision
    return element_type(prec, L.where(f"port {i}")) if prec else None


@layer("Range", ir="Range")
def _range(b: Builder, L: Layer, ins: list, outs: list) -> list[str]:
    if L.has("output_type"):
        et = L.text("output_type")
        if et.lower() not in _NUMERIC:
            return b.refuse(f"output_type={et}")
        dt = element_type(et, L.where("output_type"))
        args = []
        for i, n in enumerate(ins[:3]):
            if _port_type(L, i) == dt:
                args.append(n)
            else:
                args.append(b.op1("Cast", [n], attrs={"to": ONNX_TYPES[np.dtype(dt)]}))
    else:
        args = list(ins[:3])
    return [b.op1("Range", args, outs[0])]


def _dim(b: Builder, L: Layer, i: int, x: str, axis: int) -> str:
    """Dimension ``axis`` of input port ``i`` as an int64 scalar (a constant when static)."""
    dims = L.inputs[i].dims
    if dims[axis] >= 0:
        return b.const(np.int64(dims[axis]), "dim")
    return b.op1("Gather", [b.op1("Shape", [x]), b.const(np.int64(axis), "axis")],
                 attrs={"axis": 0})


@layer("ScaledDotProductAttention",
       ir=("Transpose", "MatMul", "Mul", "Add", "Softmax", "Where", "Range", "Less"))
def _sdpa(b: Builder, L: Layer, ins: list, outs: list) -> list[str]:
    if len(ins) > 5:
        return b.refuse("sink")
    q, k, v = ins[:3]
    rank = len(L.inputs[0].dims)
    if rank < 2 or len(L.inputs[1].dims) != rank:
        return b.refuse(f"rank={rank}")
    dt = _port_type(L, 0) or np.dtype(np.float32)
    if dt.kind != "f":
        return b.refuse(f"element_type={L.inputs[0].precision}")
    zero, ninf = np.asarray(0, dt), np.asarray(-np.inf, dt)
    perm = list(range(rank - 2)) + [rank - 1, rank - 2]
    kt = b.op1("Transpose", [k], attrs={"perm": perm})
    if len(ins) > 4 and ins[4]:
        scale = ins[4]
    else:  # 1 / Sqrt(ConvertLike(E, query))
        e = b.op1("Cast", [_dim(b, L, 0, q, rank - 1)], attrs={"to": ONNX_TYPES[dt]})
        scale = b.op1("Div", [b.const(np.asarray(1, dt), "one"), b.op1("Sqrt", [e])])
    scores = b.op1("Mul", [b.op1("MatMul", [q, kt]), scale])
    if L.flag("causal"):
        rows = b.op1("Range", [b.const(np.int64(0), "zero"), _dim(b, L, 0, q, rank - 2),
                               b.const(np.int64(1), "one")])
        cols = b.op1("Range", [b.const(np.int64(0), "zero"), _dim(b, L, 1, k, rank - 2),
                               b.const(np.int64(1), "one")])
        upper = b.op1("Less", [b.op1("Unsqueeze", [rows, b.ints([1], "axes")]),
                               b.op1("Unsqueeze", [cols, b.ints([0], "axes")])])
        bias = b.op1("Where", [upper, b.const(ninf, "ninf"), b.const(zero, "zero")])
        scores = b.op1("Add", [scores, bias])
    elif len(ins) > 3 and ins[3]:
        mask = ins[3]
        mask_type = _port_type(L, 3)
        value = b.value(mask)
        if mask_type is not None and mask_type.kind == "b":
            mask = b.op1("Where", [mask, b.const(zero, "zero"), b.const(ninf, "ninf")])
            scores = b.op1("Add", [scores, mask])
        elif value is None or np.any(value != 0):  # OpenVINO writes "no mask" as a scalar 0
            scores = b.op1("Add", [scores, mask])
    attn = b.op1("Softmax", [scores], attrs={"axis": rank - 1, "opset": 13})
    return [b.op1("MatMul", [attn, v], outs[0])]
