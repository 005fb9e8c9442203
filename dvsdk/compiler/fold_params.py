"""Parameters a model states for an op, checked before shape inference uses them (split
from :mod:`.fold`): a model file is untrusted input (:mod:`.limits`), and a missing
attribute, a 0 block size or step, a list of the wrong length or a non-finite scale would
otherwise surface as a ``KeyError``, ``ZeroDivisionError``, ``IndexError`` or
``ValueError`` deep in the shape rules or the lowering.  Each refusal is a
:class:`~dvsdk.errors.ModelError` naming the op and attribute (or input), the value and the
limit.  The rules are ONNX's operator definitions (``onnx/docs/Operators.md``: Pad, Slice,
Resize, Split, DepthToSpace, SpaceToDepth, BatchNormalization, InstanceNormalization, Conv,
ConvTranspose, the pools (auto_pad too), the Reduce ops, Squeeze and Unsqueeze, and the ops
of one ``axis``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import ModelError
from .ir import Graph, Op

__all__ = ["check_params"]


def _fail(op: Op, what: str, message: str, value: object, limit: object) -> ModelError:
    return ModelError(message, field=f"{op.type} {op.name}.{what}", value=value, limit=limit)


def _ints(g: Graph, op: Op, i: int) -> list[int] | None:
    """Input ``i`` as a list of integers; None where it is absent or not (yet) constant."""
    n = op.input(i)
    v = g.const(n) if n else None
    return None if v is None else [int(x) for x in np.asarray(v).reshape(-1)]


def _axes(op: Op, what: str, axes: list[int], rank: int) -> None:
    bad = [a for a in axes if not -rank <= a < rank]
    if bad:
        raise _fail(op, what, "axis out of range", axes, f"{-rank}..{rank - 1}")


def _window(g: Graph, op: Op) -> None:
    """Conv, ConvTranspose and the pools: each window list as long as the input has
    spatial axes (``pads`` twice that), before the auto-pad rules index them."""
    n = len(g.shape(op.input(0))) - 2
    for key, want in (("kernel_shape", n), ("strides", n), ("dilations", n), ("pads", 2 * n),
                      ("output_padding", n), ("output_shape", n)):
        v = op.attrs.get(key)
        if v is not None and not isinstance(v, (int, np.integer)) and len(v) != want:
            raise _fail(op, key, f"{key} needs {want} values for {n} spatial axes",
                        [int(x) for x in v], f"{want} values")
    auto_pad = op.attrs.get("auto_pad", "NOTSET")
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode("utf-8", "replace")
    if auto_pad not in _AUTO_PADS and auto_pad != "":   # ("" reads as NOTSET, as ORT does)
        raise _fail(op, "auto_pad", "unknown auto_pad", auto_pad, sorted(_AUTO_PADS))
    pads = op.attrs.get("pads")
    if op.type == "ConvTranspose" and pads is not None and min(int(p) for p in pads) < 0:
        # a Conv's negative pads crop and are checked once resolved; a ConvTranspose's
        # stated ones are not (only those derived from output_shape may be negative)
        raise _fail(op, "pads", "ConvTranspose pads must be >= 0", [int(p) for p in pads],
                    ">= 0")


#: ONNX's auto_pad values (Conv, ConvTranspose, the pools)
_AUTO_PADS = frozenset({"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})


def _stated_axes(g: Graph, op: Op) -> list[int] | None:
    """The ``axes`` attribute, or (from the opset that moved it) the constant input 1."""
    axes = op.attrs.get("axes")
    return [int(a) for a in axes] if axes is not None else _ints(g, op, 1)


def _reduce(g: Graph, op: Op) -> None:
    """Reduce*: each axis (the attribute, or input 1 from opset 18) in -r..r-1."""
    axes = _stated_axes(g, op)
    if axes:
        _axes(op, "axes", axes, len(g.shape(op.input(0))))


def _squeeze(g: Graph, op: Op) -> None:
    """Squeeze (axes of the input) and Unsqueeze (axes of the output, rank r + len(axes)):
    each in range, none twice."""
    rank = len(g.shape(op.input(0)))
    axes = _stated_axes(g, op)
    if not axes:
        return
    out_rank = rank + len(axes) if op.type == "Unsqueeze" else rank
    _axes(op, "axes", axes, out_rank)
    if len({a % out_rank for a in axes}) != len(axes):
        raise _fail(op, "axes", "an axis named twice", axes, "distinct axes")


def _one_axis(low_rank: int = 0) -> Callable[[Graph, Op], None]:
    """Ops of one ``axis`` attribute in -r..r-1 (``low_rank`` 1: Flatten's -r..r)."""

    def check(g: Graph, op: Op) -> None:
        rank = len(g.shape(op.input(0)))
        axis = op.attrs.get("axis")
        if axis is not None and not -rank <= int(axis) < rank + low_rank:
            raise _fail(op, "axis", "axis out of range", int(axis),
                        f"{-rank}..{rank - 1 + low_rank}")

    return check


_axis = _one_axis()


def _pool(g: Graph, op: Op) -> None:
    if op.attrs.get("kernel_shape") is None:
        raise _fail(op, "kernel_shape", f"{op.type} needs kernel_shape", None,
                    "one value per spatial axis")
    _window(g, op)


def _block(g: Graph, op: Op) -> None:
    b = op.attrs.get("blocksize")
    if not isinstance(b, (int, np.integer)) or b < 1:
        raise _fail(op, "blocksize", "blocksize out of range", b, ">= 1")


def _pad(g: Graph, op: Op) -> None:
    rank = len(g.shape(op.input(0)))
    pads, axes = _ints(g, op, 1), _ints(g, op, 3)
    if axes is not None:
        _axes(op, "axes", axes, rank)
    n = rank if axes is None else len(axes)
    if pads is not None and len(pads) != 2 * n:
        raise _fail(op, "pads", "pads needs a begin and an end per axis", pads,
                    f"{2 * n} values")


def _slice(g: Graph, op: Op) -> None:
    rank = len(g.shape(op.input(0)))
    starts, ends, axes, steps = (_ints(g, op, i) for i in range(1, 5))
    if starts is None or ends is None:
        return
    for what, vals in (("ends", ends), ("axes", axes), ("steps", steps)):
        if vals is not None and len(vals) != len(starts):
            raise _fail(op, what, f"Slice {what} and starts differ in length", vals,
                        f"{len(starts)} values, as starts")
    if axes is not None:
        _axes(op, "axes", axes, rank)
        if len({a % rank for a in axes}) != len(axes):
            raise _fail(op, "axes", "Slice axes repeat an axis", axes, "distinct axes")
    elif len(starts) > rank:
        raise _fail(op, "starts", "Slice has more starts than the input has axes", starts,
                    f"at most {rank} values")
    if steps is not None and 0 in steps:
        raise _fail(op, "steps", "Slice step is 0", steps, "non-zero steps")


def _resize(g: Graph, op: Op) -> None:
    rank = len(g.shape(op.input(0)))
    axes = op.attrs.get("axes")
    n = len(axes) if axes else rank
    if axes:
        _axes(op, "axes", [int(a) for a in axes], rank)
    scales = g.const(op.input(2))          # the frontends give Resize opset 11's inputs
    if scales is not None and np.asarray(scales).size:
        s = np.asarray(scales, np.float64).reshape(-1)
        if s.size != n:
            raise _fail(op, "scales", "scales needs one value per axis", s.tolist(),
                        f"{n} values")
        if not (np.isfinite(s).all() and (s > 0).all()):
            raise _fail(op, "scales", "scales must be finite and > 0", s.tolist(), "> 0")
    sizes = _ints(g, op, 3)
    if sizes and len(sizes) != n:
        raise _fail(op, "sizes", "sizes needs one value per axis", sizes, f"{n} values")
    if sizes and min(sizes) < 1:
        raise _fail(op, "sizes", "Resize sizes must be >= 1", sizes, ">= 1")


def _split(g: Graph, op: Op) -> None:
    _axis(g, op)
    n = op.attrs.get("num_outputs")
    if n is not None and (isinstance(n, bool) or int(n) != len(op.outputs)):
        raise _fail(op, "num_outputs", "Split num_outputs differs from its outputs", n,
                    f"{len(op.outputs)} (the outputs)")


def _per_channel(first: int) -> Callable[[Graph, Op], None]:
    """BatchNormalization (scale, B, mean, var) and InstanceNormalization (scale, B): one
    value per channel of the input (axis 1)."""

    def check(g: Graph, op: Op) -> None:
        x = g.shape(op.input(0))
        if len(x) < 2:
            raise _fail(op, "X", f"{op.type} needs an input with a channel axis", x,
                        "rank >= 2")
        for i in range(first, len(op.inputs)):
            n = op.input(i)
            shape = g.shape(n) if n else None
            if shape is not None and int(np.prod(shape)) != x[1]:
                raise _fail(op, n, f"{op.type} parameter needs one value per channel",
                            tuple(shape), f"({x[1]},)")

    return check


_CHECKS: dict[str, Callable[[Graph, Op], None]] = {
    "MaxPool": _pool, "AveragePool": _pool, "LpPool": _pool,
    "Conv": _window, "ConvTranspose": _window,
    "DepthToSpace": _block, "SpaceToDepth": _block,
    "Pad": _pad, "Slice": _slice, "Resize": _resize, "Split": _split,
    "BatchNormalization": _per_channel(1), "InstanceNormalization": _per_channel(1),
    **dict.fromkeys(("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd",
                     "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp",
                     "ReduceSumSquare"), _reduce),
    "Squeeze": _squeeze, "Unsqueeze": _squeeze,
    **dict.fromkeys(("Softmax", "LogSoftmax", "Hardmax", "Concat", "Gather",
                     "GatherElements", "ArgMax", "ArgMin", "Compress"), _axis),
    "Flatten": _one_axis(1),
}


def check_params(g: Graph, op: Op) -> None:
    """Refuse ``op``'s stated parameters where they break its operator definition (its
    inputs' shapes are known); ops without a check pass."""
    check = _CHECKS.get(op.type)
    if check is not None:
        check(g, op)
