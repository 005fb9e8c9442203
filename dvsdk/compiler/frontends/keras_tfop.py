"""tf.keras (Keras 2) ``TFOpLambda`` and ``SlicingOpLambda`` layers: TF functions on tensors.

tf.keras saves a TensorFlow function applied to a Keras tensor (``x * 2.0``,
``tf.nn.relu6(x)``, ``tf.concat([a, b], -1)``, ``x[:, :, :, :8]`` ...) as a layer whose
config names the function (``"function": "math.multiply"``) and whose inbound node holds the
call: the *first* argument as node data (one ``[layer, node, tensor, kwargs]`` entry, or a
list of them when it is a list of tensors, ``tf.concat``), with a constant first argument
written ``["_CONSTANT_VALUE", -1, <value>, kwargs]`` (``2.0 * x``), and every other argument
by name in ``kwargs`` (the last entry's), tensors there as ``[layer, node, tensor]``.

Each supported function (:data:`FUNCTIONS`) becomes ONNX-typed IR ops in the frontend's
conventions (:mod:`.keras_ir`: rank-4 tensors NCHW inside, axes and constants mapped);
any other function is refused by name (``TFOpLambda[math.cumsum]``), and a call the mapping
cannot honour (a batch axis touched, a misshapen argument) is a ModelError naming the layer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ModelError
from .keras_ir import ACTIVATIONS, KT, TO_IR, Builder, Layer, ints, ir_axis, softmax
from .keras_layers import concatenate, permute, reshape
from .keras_ops import elementwise

__all__ = ["TFOP_CLASSES", "FUNCTIONS", "is_tfop", "check_tfop", "tfop_refs", "convert_tfop"]

TFOP_CLASSES = ("TFOpLambda", "SlicingOpLambda")
_CONST = "_CONSTANT_VALUE"
_Ref = tuple[str, int, int]


def is_tfop(ly: dict) -> bool:
    """Whether a layer entry is a TF function call (TFOpLambda / SlicingOpLambda)."""
    return ly.get("class_name") in TFOP_CLASSES


def _function(ly: dict) -> str:
    f = ly["config"].get("function")
    return f if isinstance(f, str) else repr(f)[:40]


def check_tfop(ly: dict) -> str | None:
    """The refusal label of an unsupported function (``TFOpLambda[math.cumsum]``), or None."""
    f = _function(ly)
    return None if f in FUNCTIONS else f"{ly['class_name']}[{f}]"


# --------------------------------------------------------------------------- the call
def _is_entry(v: Any) -> bool:
    return isinstance(v, list) and len(v) in (3, 4) and isinstance(v[0], str)


def _entries(node: Any, where: str) -> list[list]:
    """The node's entries (first argument's tensors and constants) in order."""
    if _is_entry(node):
        return [node]
    if isinstance(node, list) and node and all(_is_entry(e) for e in node):
        return list(node)
    raise ModelError("malformed TF function call", field=where, value=str(node)[:80])


def _is_ref(v: Any, names: set[str]) -> bool:
    return (isinstance(v, list) and len(v) == 3 and isinstance(v[0], str) and v[0] in names
            and all(isinstance(i, int) and not isinstance(i, bool) for i in v[1:]))


def _entry_ref(e: list, where: str) -> _Ref | None:
    if e[0] == _CONST:
        return None
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in e[1:3]):
        raise ModelError("malformed layer reference", field=where, value=str(e)[:80])
    return (e[0], int(e[1]), int(e[2]))


def _kwargs(entries: list[list], where: str) -> dict:
    kw = entries[-1][3] if len(entries[-1]) == 4 else {}
    kw = kw or {}
    if not isinstance(kw, dict):
        raise ModelError("malformed TF function arguments", field=where, value=str(kw)[:80])
    return kw


def tfop_refs(node: Any, where: str, names: set[str]) -> list[_Ref]:
    """The tensors a call reads: the first argument's, then those among its keyword
    arguments (``[layer, node, tensor]`` lists naming a layer of ``names``), in order."""
    entries = _entries(node, where)
    refs = [r for r in (_entry_ref(e, where) for e in entries) if r is not None]
    for v in _kwargs(entries, where).values():
        if _is_ref(v, names):
            refs.append((v[0], int(v[1]), int(v[2])))
    return refs


@dataclass
class _Call:
    """A parsed call: the first argument (a KT, a constant, or a list of them) and the
    keyword arguments with tensors replaced by KTs."""

    first: Any
    kwargs: dict[str, Any]
    is_list: bool


def _parse(node: Any, layer: Layer, xs: list[KT], names: set[str]) -> _Call:
    entries = _entries(node, layer.origin)
    it = iter(xs)
    firsts = [e[2] if e[0] == _CONST else next(it) for e in entries]
    kwargs = {k: next(it) if _is_ref(v, names) else v
              for k, v in _kwargs(entries, layer.origin).items()}
    is_list = not _is_entry(node)
    return _Call(firsts if is_list else firsts[0], kwargs, is_list)


# --------------------------------------------------------------------------- converters
def _arg(layer: Layer, call: _Call, name: str, default: Any = None,
         required: bool = False) -> Any:
    if name in call.kwargs:
        return call.kwargs[name]
    if required:
        raise layer.err(f"argument {name!r} missing", value=sorted(call.kwargs))
    return default


def _tensor(layer: Layer, v: Any, what: str = "argument") -> KT:
    if not isinstance(v, KT):
        raise layer.err(f"{what} is not a tensor", value=str(v)[:80])
    return v


def _only(layer: Layer, call: _Call, allowed: tuple[str, ...]) -> None:
    extra = sorted(set(call.kwargs) - set(allowed) - {"name"})
    if extra:
        raise layer.err("argument not supported", value=extra, limit=list(allowed))


def _binary(op_type: str, second: str = "y") -> Callable[[Builder, Layer, _Call], KT]:
    def convert(b: Builder, layer: Layer, call: _Call) -> KT:
        _only(layer, call, (second,))
        if call.is_list:
            raise layer.err("first argument is a list", value=len(call.first))
        return elementwise(b, layer, op_type, [call.first, _arg(layer, call, second,
                                                                required=True)])
    return convert


def _unary(act: str, axis_arg: str = "") -> Callable[[Builder, Layer, _Call], KT]:
    def convert(b: Builder, layer: Layer, call: _Call) -> KT:
        _only(layer, call, (axis_arg,) if axis_arg else ())
        x = b.plain(_tensor(layer, call.first))
        if axis_arg:
            axis = _arg(layer, call, axis_arg, -1)
            return KT(softmax(b, x, -1 if axis is None else axis, layer), x.shape)
        return KT(ACTIVATIONS[act][0](b, x), x.shape)
    return convert


def _leaky_relu(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ("alpha",))
    x = b.plain(_tensor(layer, call.first))
    alpha = _arg(layer, call, "alpha", 0.2)
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise layer.err("alpha must be a number", value=alpha)
    return KT(b.op("LeakyRelu", [x.name], {"alpha": float(alpha)}), x.shape)


def _negative(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ())
    x = b.plain(_tensor(layer, call.first))
    return KT(b.op("Neg", [x.name]), x.shape)


def _sub_layer(layer: Layer, cfg: dict) -> Layer:
    return Layer(layer.cls, layer.name, cfg, layer.weight)


def _concat(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ("axis",))
    if not call.is_list or not call.first:
        raise layer.err("concat takes a list of tensors", value=str(call.first)[:80])
    xs = [_tensor(layer, v, "a concatenated value") for v in call.first]
    return concatenate(b, _sub_layer(layer, {"axis": _arg(layer, call, "axis",
                                                          required=True)}), xs)


def _batch_kept(layer: Layer, v: Any, what: str) -> list:
    if not isinstance(v, (list, tuple)) or not v:
        raise layer.err(f"{what} must be a list", value=v)
    if v[0] not in (-1, 1, 0) or isinstance(v[0], bool):
        raise layer.err(f"{what} changes the batch axis", value=list(v), limit="batch first")
    return list(v)


def _reshape(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ("shape",))
    x = _tensor(layer, call.first)
    shape = _batch_kept(layer, _arg(layer, call, "shape", required=True), "shape")
    if shape[0] == 0:
        raise layer.err("shape changes the batch axis", value=shape, limit="batch first")
    return reshape(b, _sub_layer(layer, {"target_shape": shape[1:]}), [x])


def _transpose(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ("perm", "conjugate"))
    x = _tensor(layer, call.first)
    perm = _arg(layer, call, "perm")
    if perm is None:
        raise layer.err("transpose without perm reverses the batch axis", value=None,
                        limit="perm with perm[0] = 0")
    perm = _batch_kept(layer, perm, "perm")
    if perm[0] != 0:
        raise layer.err("perm moves the batch axis", value=perm, limit="perm[0] = 0")
    return permute(b, _sub_layer(layer, {"dims": perm[1:]}), [x])


def _reduce(op_type: str) -> Callable[[Builder, Layer, _Call], KT]:
    def convert(b: Builder, layer: Layer, call: _Call) -> KT:
        _only(layer, call, ("axis", "keepdims"))
        x = b.plain(_tensor(layer, call.first))
        r = len(x.shape)
        axis = _arg(layer, call, "axis")
        if axis is None:
            raise layer.err("a reduction over all axes (batch too) is not supported",
                            value=None, limit="axis")
        axes = sorted({a % r for a in ints(axis, len(axis) if isinstance(axis, list) else 1,
                                           "axis", layer)})
        for a in axes:
            ir_axis(layer, a, r)   # range and not the batch axis
        keep = bool(_arg(layer, call, "keepdims", False))
        kept = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        y = KT(b.op(op_type, [x.name], {"axes": [TO_IR[a] if r == 4 else a for a in axes],
                                        "keepdims": 1}), kept)
        if keep:
            return y
        out = [d for i, d in enumerate(x.shape) if i not in axes]
        if len(out) < 2:
            raise layer.err("a reduction to the batch axis alone is not supported",
                            value=axis, limit="keepdims=True or fewer axes")
        return reshape(b, _sub_layer(layer, {"target_shape": out[1:]}), [y])
    return convert


def _spec(layer: Layer, s: Any, n: int) -> tuple[int, int, int] | int:
    """One axis of a slice spec -> (start, stop, step) on a dimension of ``n``, or an index."""
    if isinstance(s, int) and not isinstance(s, bool):
        if not -n <= s < n:
            raise layer.err("index out of range", value=s, limit=n)
        return s % n
    if not isinstance(s, dict) or set(s) - {"start", "stop", "step"}:
        raise layer.err("slice element not supported", value=str(s)[:80],
                        limit="start:stop:step or an integer")
    vals = [s.get(k) for k in ("start", "stop", "step")]
    if any(v is not None and (not isinstance(v, int) or isinstance(v, bool)) for v in vals):
        raise layer.err("slice bounds must be integers", value=vals)
    step = 1 if vals[2] is None else vals[2]
    if step < 1:
        raise layer.err("slice step not supported", value=step, limit=">= 1")
    start, stop, _ = slice(vals[0], vals[1], step).indices(n)
    if len(range(start, stop, step)) < 1:
        raise layer.err("slice is empty", value=vals, limit=n)
    return (start, stop, step)


def _getitem(b: Builder, layer: Layer, call: _Call) -> KT:
    _only(layer, call, ("slice_spec",))
    x = b.plain(_tensor(layer, call.first))
    spec = _arg(layer, call, "slice_spec", required=True)
    if isinstance(spec, (dict, int)):
        spec = [spec]
    r = len(x.shape)
    if not isinstance(spec, list) or not 1 <= len(spec) <= r:
        raise layer.err("slice spec not supported", value=str(spec)[:80], limit=f"rank {r}")
    if spec[0] not in (0, {"start": None, "stop": None, "step": None}):
        raise layer.err("slicing the batch axis is not supported", value=spec[0],
                        limit="the whole batch axis")
    parts = [_spec(layer, s, n) for s, n in zip(spec, x.shape)]
    starts, ends, axes, steps, shape = [], [], [], [], list(x.shape)
    for i, p in enumerate(parts):
        start, stop, step = (p, p + 1, 1) if isinstance(p, int) else p
        if (start, stop, step) == (0, x.shape[i], 1):
            continue
        starts.append(start)
        ends.append(stop)
        axes.append(TO_IR[i] if r == 4 else i)
        steps.append(step)
        shape[i] = len(range(start, stop, step))
    y = x
    if axes:
        ins = [x.name] + [b.const(f"{layer.name}_{k}", v, np.int64) for k, v in (
            ("starts", starts), ("ends", ends), ("axes", axes), ("steps", steps))]
        y = KT(b.op("Slice", ins), tuple(shape))
    dropped = [i for i, p in enumerate(parts) if isinstance(p, int) and i > 0]
    if not dropped:
        return y
    out = [d for i, d in enumerate(shape) if i not in dropped]
    if len(out) < 2:
        raise layer.err("indexing every axis but the batch is not supported",
                        value=str(spec)[:80], limit="a slice on at least one axis")
    return reshape(b, _sub_layer(layer, {"target_shape": out[1:]}), [y])


@dataclass(frozen=True)
class TFFunction:
    """How one TF function converts: the converter and the IR ops it emits."""

    convert: Callable[[Builder, Layer, _Call], KT]
    ir_ops: tuple[str, ...]
    note: str = ""


_SCALAR = "a constant operand on either side; folded into the conv before it when it can be"
#: TF function name (as ``config["function"]`` has it) -> its conversion
FUNCTIONS: dict[str, TFFunction] = {
    "__operators__.add": TFFunction(_binary("Add"), ("Add",), _SCALAR),
    "math.add": TFFunction(_binary("Add"), ("Add",), _SCALAR),
    "math.subtract": TFFunction(_binary("Sub"), ("Sub",), _SCALAR),
    "math.multiply": TFFunction(_binary("Mul"), ("Mul",), _SCALAR),
    "math.truediv": TFFunction(_binary("Div"), ("Div",), _SCALAR),
    "math.divide": TFFunction(_binary("Div"), ("Div",), _SCALAR),
    "math.maximum": TFFunction(_binary("Max"), ("Max",)),
    "math.minimum": TFFunction(_binary("Min"), ("Min",)),
    "math.negative": TFFunction(_negative, ("Neg",)),
    "nn.relu": TFFunction(_unary("relu"), ("Relu",)),
    "nn.relu6": TFFunction(_unary("relu6"), ("Clip",)),
    "math.sigmoid": TFFunction(_unary("sigmoid"), ("Sigmoid",)),
    "math.tanh": TFFunction(_unary("tanh"), ("Tanh",)),
    "nn.elu": TFFunction(_unary("elu"), ("Elu",)),
    "nn.silu": TFFunction(_unary("silu"), ("Sigmoid", "Mul")),
    "nn.leaky_relu": TFFunction(_leaky_relu, ("LeakyRelu",)),
    "nn.softmax": TFFunction(_unary("softmax", "axis"), ("Softmax",)),
    "concat": TFFunction(_concat, ("Concat",)),
    "reshape": TFFunction(_reshape, ("Reshape", "Transpose"),
                          "the batch dimension must be -1 or 1"),
    "transpose": TFFunction(_transpose, ("Transpose",), "perm[0] = 0"),
    "compat.v1.transpose": TFFunction(_transpose, ("Transpose",), "perm[0] = 0"),
    "math.reduce_mean": TFFunction(_reduce("ReduceMean"), ("ReduceMean",),
                                   "over H and W with keepdims: a global pool"),
    "math.reduce_max": TFFunction(_reduce("ReduceMax"), ("ReduceMax",),
                                  "over H and W with keepdims: a global pool"),
    "math.reduce_sum": TFFunction(_reduce("ReduceSum"), ("ReduceSum",)),
    "__operators__.getitem": TFFunction(_getitem, ("Slice", "Reshape"),
                                        "SlicingOpLambda: start:stop:step (step >= 1) and "
                                        "integer indices; the batch axis whole"),
}


def convert_tfop(b: Builder, layer: Layer, node: Any, xs: list[KT], names: set[str]) -> KT:
    """The IR ops of one call of TF-function layer ``layer``: ``xs`` are the tensors of
    :func:`tfop_refs` in order, ``names`` the model's layer names."""
    f = _function({"config": layer.cfg})
    spec = FUNCTIONS.get(f)
    if spec is None:   # _refusals lists these first; kept for direct callers
        raise layer.err("TF function not supported", value=f, limit=sorted(FUNCTIONS))
    return spec.convert(b, layer, _parse(node, layer, xs, names))
