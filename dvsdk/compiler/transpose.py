"""``--transpose``: run the network in transposed spatial coordinates (DHWC input).

The DV700 tiles along the width (§7.2), and its tensor layout is x-major (§1).  A
transposed network sees every image with x and y exchanged: its input in the
8-channel-chunked layout is exactly the row-major HWC image (formats.md §1.1),
and wide images become tall ones that need fewer tiles.  Every spatial op is
rewritten for the exchanged axes — kernels, pads, strides, dilations, pool
windows, resize scales — and a Flatten feeding a Gemm gets its weight columns
permuted.  Only the model's inputs and outputs are transposed back at the
boundary, so results keep the model's own layout.
"""

from __future__ import annotations

import numpy as np

from ..errors import ModelError
from .fold import infer_and_fold
from .ir import Graph, Op

# ops that act per element or per channel: nothing to change (4-D constants aside)
_POINTWISE = {"Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Clip", "Abs",
              "Add", "Sub", "Mul", "Div", "BatchNormalization", "Identity", "Dropout",
              "Sqrt", "Exp", "Log", "Neg", "HardSigmoid", "HardSwish", "Softplus", "Max",
              "Min", "Sum", "Mean", "Pow", "Reciprocal", "Floor", "Ceil", "Round", "Sign",
              "Softsign", "Selu", "InstanceNormalization", "LRN", "GlobalAveragePool",
              "GlobalMaxPool", "Gemm", "MatMul", "Cast"}
_WINDOWED = {"Conv", "ConvTranspose", "MaxPool", "AveragePool"}


def _swap_pairs(v: list, n: int = 2) -> list:
    """[a, b] -> [b, a]; ONNX pads [t, l, b, r] -> [l, t, r, b]."""
    v = list(v)
    if len(v) == n:
        return v[::-1]
    if len(v) == 2 * n:
        return v[:n][::-1] + v[n:][::-1]
    return v


def _swap_const(g: Graph, name: str) -> str:
    """A 4-D constant with spatial extent gets its last two axes exchanged."""
    c = g.const(name)
    if c is None or c.ndim != 4 or (c.shape[2] == 1 and c.shape[3] == 1):
        return name
    return g.add_const(f"{name}_T", np.ascontiguousarray(np.swapaxes(c, 2, 3)))


def _axis(op: Op, rank: int) -> int:
    a = int(op.attrs.get("axis", 1))
    return a + rank if a < 0 else a


def transpose_spatial(graph: Graph) -> Graph:
    """The same network in transposed spatial coordinates (see the module docstring)."""
    g = graph.copy()
    shapes = {n: t.shape for n, t in g.tensors.items()}
    blocked: list[tuple[str, str]] = []
    cons = g.consumers()
    for op in g.ops:
        t = op.type
        rank = len(shapes.get(op.inputs[0]) or ()) if op.inputs else 0
        if t in _WINDOWED:
            for key in ("kernel_shape", "strides", "dilations", "output_padding"):
                if key in op.attrs:
                    op.attrs[key] = _swap_pairs(op.attrs[key])
            if "pads" in op.attrs:
                op.attrs["pads"] = _swap_pairs(op.attrs["pads"])
            if t in ("Conv", "ConvTranspose"):
                w = g.const(op.input(1))
                if w is None:
                    blocked.append((t, op.name))
                    continue
                op.inputs[1] = g.add_const(f"{op.input(1)}_T",
                                           np.ascontiguousarray(np.swapaxes(w, 2, 3)))
        elif t in _POINTWISE:
            op.inputs = [_swap_const(g, i) if i else i for i in op.inputs]
        elif t in ("Softmax", "LogSoftmax", "Concat", "Split"):
            if rank == 4 and _axis(op, rank) in (2, 3):
                op.attrs["axis"] = 5 - _axis(op, rank)
        elif t in ("Resize", "Upsample"):
            for i in range(1, len(op.inputs)):
                c = g.const(op.input(i))
                if c is not None and c.size == 4:
                    op.inputs[i] = g.add_const(f"{op.input(i)}_T", c.reshape(-1)[[0, 1, 3, 2]])
        elif t == "Pad":
            c = g.const(op.input(1))
            if c is None or c.size != 8 or len(op.inputs) > 3 and op.input(3):
                blocked.append((t, op.name))
                continue
            p = c.reshape(-1)
            op.inputs[1] = g.add_const(f"{op.input(1)}_T", p[[0, 1, 3, 2, 4, 5, 7, 6]])
        elif t in ("Flatten", "Reshape", "Squeeze", "Unsqueeze"):
            src = shapes.get(op.inputs[0]) or ()
            if len(src) == 4 and (src[2] > 1 or src[3] > 1):
                users = cons.get(op.outputs[0], [])
                out = shapes.get(op.outputs[0]) or ()
                if len(out) != 2 or not users or any(
                        u.type != "Gemm" or u.inputs[0] != op.outputs[0]
                        or g.const(u.input(1)) is None or not u.attrs.get("transB")
                        for u in users):
                    blocked.append((t, op.name))
                    continue
                _, c, h, w = src
                j = np.arange(c * h * w).reshape(c, h, w)       # original column of (c, y, x)
                perm = j.transpose(0, 2, 1).reshape(-1)           # new order: (c, x, y)
                for u in users:
                    wt = g.const(u.input(1))
                    u.inputs[1] = g.add_const(f"{u.input(1)}_T",
                                              np.ascontiguousarray(wt[:, perm]))
            elif len(src) == 4 and t == "Reshape":
                blocked.append((t, op.name))
        elif t in ("Shape", "Gather", "Slice", "Transpose", "Tile", "Expand",
                   "DepthToSpace", "SpaceToDepth", "ReduceMean", "ReduceMax", "ReduceSum",
                   "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ArgMax",
                   "ArgMin", "GatherElements", "Where", "Equal"):
            if rank == 4:
                blocked.append((t, op.name))
        else:
            blocked.append((t, op.name))
    if blocked:
        listing = ", ".join(f"{t} ({n})" for t, n in blocked[:8])
        raise ModelError(f"--transpose cannot rewrite these ops for transposed images: "
                         f"{listing}", field="transpose", value=len(blocked),
                         hint="compile without --transpose")
    for name in list(g.inputs) + list(g.outputs):
        s = shapes.get(name)
        if s is not None and len(s) == 4:
            g.tensors[name].shape = (s[0], s[1], s[3], s[2])
    for name, tensor in g.tensors.items():
        if not tensor.is_const and name not in g.inputs:
            tensor.shape = None
    return infer_and_fold(g)
