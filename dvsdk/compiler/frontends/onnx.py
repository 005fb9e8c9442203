"""ONNX -> IR: read a model, normalize opset differences, check support, fix input shapes.

:func:`load_onnx` returns a :class:`~dvsdk.compiler.ir.Graph` whose ops use ONNX op types
with latest-opset semantics (see :mod:`dvsdk.compiler.ir`): attribute forms of older opsets
(``Clip`` min/max, ``Pad`` pads/value, ``Slice`` starts/ends/axes, ``Split`` split,
``Squeeze``/``Unsqueeze``/``Reduce*`` axes, ``Reshape`` shape) become constant inputs;
``Upsample`` and opset-10 ``Resize`` become ``Resize`` with ``asymmetric`` coordinates;
``Constant`` nodes become constant tensors; ``Softmax``/``LogSoftmax`` record the model opset.
Graph inputs get static shapes: a free batch dimension becomes 1, other free dimensions must
come from ``input_sizes``.  A dimension is free when it is symbolic (``dim_param``), unset,
or negative (``-1``, as PaddlePaddle exports write a free batch), as onnxruntime reads it.

Shapes of intermediate tensors are not computed here; run
:func:`dvsdk.compiler.fold.infer_and_fold` next (or :func:`dvsdk.compiler.simplify.optimize`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...cpu.dtypes import ONNX_DTYPES, type_name
from ...cpu.ms_attention import OP as MS_ATTENTION
from ...cpu.ops import COMPILER_OPS, KERNELS
from ...errors import ModelError, UnsupportedOps
from ..hwmap import HARDWARE_OPS
from ..ir import Graph, Op, Tensor

__all__ = ["load", "load_onnx", "HW_OPS", "SUPPORTED_OPS", "DOMAIN_OPS"]

#: Ops the DV700 lowering maps to hardware: the lowering's own table (all have CPU kernels).
HW_OPS = frozenset(HARDWARE_OPS)
#: Op types the frontend rewrites into others (or into constants).
_REWRITTEN = frozenset({"Constant", "Upsample"})
#: Everything load_onnx accepts.
SUPPORTED_OPS = frozenset(HW_OPS | (set(KERNELS) - COMPILER_OPS) | _REWRITTEN)
#: Ops of other domains load_onnx accepts: (domain, op type) -> the IR op type (one no
#: model may name in the default domain: :data:`dvsdk.cpu.ops.COMPILER_OPS`).
DOMAIN_OPS = {("com.microsoft", "Attention"): MS_ATTENTION}

_REDUCE = ("ReduceSum ReduceMean ReduceMax ReduceMin ReduceProd ReduceL2 "
           "ReduceSumSquare ReduceL1 ReduceLogSum ReduceLogSumExp").split()
_HINT_SIZE = "pass --input-size HxW (input_sizes={name: full NCHW shape})"


# --------------------------------------------------------------------------- reading
def _read(model_or_path: Any) -> tuple[onnx.ModelProto, str]:
    label = "<ModelProto>"
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    elif isinstance(model_or_path, (bytes, bytearray)):
        label = "<bytes>"
        try:
            model = onnx.load_from_string(bytes(model_or_path))
        except Exception as exc:
            raise ModelError("cannot read ONNX model", field=label,
                             hint=f"not a valid ONNX protobuf ({type(exc).__name__})") from exc
    else:
        label = os.fspath(model_or_path)
        if not Path(label).is_file():
            raise ModelError("cannot read ONNX model", field=label, hint="file not found")
        try:
            model = onnx.load(label, load_external_data=True)
        except Exception as exc:
            raise ModelError(
                "cannot read ONNX model", field=label,
                hint=f"corrupt file or missing external data file ({type(exc).__name__}: "
                     f"{str(exc)[:120]})",
            ) from exc
    if model.ir_version <= 0 or not model.HasField("graph") or len(model.graph.output) == 0:
        raise ModelError("cannot read ONNX model", field=label,
                         hint="the file does not look like an ONNX model (no graph outputs)")
    return model, label


def _opset(model: onnx.ModelProto) -> int:
    """The model's default-domain opset: 1 up to the newest the installed onnx package
    defines (an op's meaning depends on it, so one outside that range is refused)."""
    newest = int(onnx.defs.onnx_opset_version())
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            version = int(imp.version)
            if not 1 <= version <= newest:
                raise ModelError(f"opset {version} is not an ONNX opset this SDK knows",
                                 field="opset_import", value=version, limit=f"1..{newest}",
                                 hint="newer than the installed onnx package defines: "
                                      "upgrade onnx, or export with an older opset"
                                      if version > newest else
                                      "opsets start at 1: the file is damaged or hand-made")
            return version
    raise ModelError("model has no default-domain opset import", field="opset_import")


def _to_array(t: onnx.TensorProto, what: str) -> np.ndarray:
    if t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data:
        raise ModelError("tensor data is stored in an external file that was not loaded",
                         field=what, value=t.name,
                         hint="load the model from its path so the data file beside it is found")
    try:
        return numpy_helper.to_array(t)
    except Exception as exc:
        raise ModelError(f"cannot decode tensor: {exc}", field=what, value=t.name) from exc


def _attr_value(a: onnx.AttributeProto, node: str) -> Any:
    v = helper.get_attribute_value(a)
    if isinstance(v, onnx.TensorProto):
        return _to_array(v, f"{node}.{a.name}")
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, list):
        return [x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in v]
    return v


# --------------------------------------------------------------------------- inputs
def _input_type(vi: onnx.ValueInfoProto) -> np.dtype:
    """The numpy element type of a graph input; ModelError for anything but a tensor of a
    type the kernels handle (sequences, optionals, maps, strings, bfloat16, float8 ...)."""
    kind = vi.type.WhichOneof("value")
    if kind != "tensor_type":
        what = {"sequence_type": "a sequence", "optional_type": "an optional",
                "map_type": "a map", "sparse_tensor_type": "a sparse tensor"}.get(
            kind or "", "of no type")
        raise ModelError(f"input {vi.name!r} is {what}, not a tensor", field=vi.name,
                         value=kind, limit="tensor inputs only")
    elem = vi.type.tensor_type.elem_type
    if elem not in ONNX_DTYPES:
        raise ModelError(f"input {vi.name!r} has an element type the SDK does not handle",
                         field=vi.name, value=type_name(elem),
                         limit=[type_name(c) for c in sorted(ONNX_DTYPES)])
    return ONNX_DTYPES[elem]


def _input_shape(vi: onnx.ValueInfoProto, given: Sequence[int] | None) -> tuple[int, ...]:
    name = vi.name
    tt = vi.type.tensor_type
    dims: list[tuple[int | None, str]] | None = None
    if tt.HasField("shape"):
        dims = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value == 0:
                raise ModelError(f"input {name!r} has a zero-size dimension at axis {i}",
                                 field=f"{name}[{i}]", value=0, limit=">= 1",
                                 hint="an empty tensor carries no data to compute on")
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append((int(d.dim_value), ""))
            elif d.HasField("dim_value"):   # -1 (PaddlePaddle's export): a free dimension
                dims.append((None, str(int(d.dim_value))))
            else:
                dims.append((None, d.dim_param or "?"))
    if given is not None:
        given = [int(v) for v in given]
        if dims is not None and len(dims) == 4 and len(given) == 2:  # H, W only
            given = [dims[0][0] or 1, dims[1][0] or -1, *given]
        if dims is not None and len(given) != len(dims):
            raise ModelError("input size has the wrong rank", field=name, value=tuple(given),
                             limit=f"rank {len(dims)}", hint=_HINT_SIZE)
        for i, v in enumerate(given):
            fixed = dims[i][0] if dims is not None else None
            if v <= 0:
                raise ModelError("input size must be positive", field=name,
                                 value=tuple(given), hint=_HINT_SIZE)
            if fixed is not None and fixed != v:
                raise ModelError("input size conflicts with the model's fixed dimension",
                                 field=f"{name}[{i}]", value=v, limit=fixed)
        return tuple(given)
    if dims is None:
        raise ModelError(f"input {name!r} has no shape in the model", field=name,
                         hint=_HINT_SIZE)
    out = []
    for i, (v, label) in enumerate(dims):
        if v is None:
            if i == 0:
                v = 1  # free batch dimension
            else:
                raise ModelError(
                    f"input {name!r} has a free dimension {label!r} at axis {i}",
                    field=name, value=label, hint=_HINT_SIZE,
                )
        out.append(v)
    return tuple(out)


# --------------------------------------------------------------------------- loader
class _Builder:
    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.unsupported: list[tuple[str, str]] = []

    def const(self, hint: str, value: Any, dtype: Any = None) -> str:
        name = hint
        i = 1
        while name in self.tensors:
            name = f"{hint}_{i}"
            i += 1
        self.tensors[name] = Tensor(name, const=np.asarray(value, dtype=dtype))
        return name

    def op_name(self, node: onnx.NodeProto, index: int) -> str:
        name = node.name or f"{node.op_type}_{index}"
        base, i = name, 1
        while name in self.op_names:
            name = f"{base}_{i}"
            i += 1
        self.op_names.add(name)
        return name


def _attr_to_input(b: _Builder, name: str, attrs: dict, inputs: list[str], key: str,
                   pos: int, dtype: Any = np.int64) -> None:
    """Move attribute ``key`` to input ``pos`` (as a constant), padding with ``""``."""
    if key not in attrs:
        return
    value = attrs.pop(key)
    while len(inputs) < pos:
        inputs.append("")
    cname = b.const(f"{name}_{key}", value, dtype)
    if len(inputs) == pos:
        inputs.append(cname)
    else:
        inputs[pos] = cname


def _check_domain_op(node: onnx.NodeProto, name: str) -> None:
    """Refuse the parts of a :data:`DOMAIN_OPS` op the CPU kernel does not compute: for
    com.microsoft Attention the ``past`` and ``past_sequence_length`` inputs and the
    ``present`` output (ModelError naming the field)."""
    what = f"{node.domain}.{node.op_type}"
    for i, field in ((4, "past"), (6, "past_sequence_length")):
        if len(node.input) > i and node.input[i]:
            raise ModelError(f"{what} {field} (input {i}) is not supported",
                             field=f"{what}.{field}", value=node.input[i],
                             hint=f"node {name}: export without a key/value cache")
    if len(node.output) > 1 and node.output[1]:
        raise ModelError(f"{what} present (output 1) is not supported",
                         field=f"{what}.present", value=node.output[1],
                         hint=f"node {name}: export without a key/value cache")


def _normalize(b: _Builder, node: onnx.NodeProto, name: str, attrs: dict, inputs: list[str],
               outputs: list[str], used: set[str]) -> tuple[str, dict]:
    """Rewrite opset-specific forms in place; return the (possibly new) op type and attrs."""
    t, opset = node.op_type, b.opset

    def unused(i: int) -> bool:
        return len(outputs) <= i or not outputs[i] or outputs[i] not in used

    if t == "Clip" and opset < 11:
        for pos, key in ((1, "min"), (2, "max")):
            _attr_to_input(b, name, attrs, inputs, key, pos, np.float32)
    elif t == "Pad" and opset < 11:
        _attr_to_input(b, name, attrs, inputs, "pads", 1)
        _attr_to_input(b, name, attrs, inputs, "value", 2, np.float32)
    elif t == "Slice" and opset < 10:
        for pos, key in ((1, "starts"), (2, "ends"), (3, "axes")):
            _attr_to_input(b, name, attrs, inputs, key, pos)
    elif t == "Split":
        if opset < 13:
            _attr_to_input(b, name, attrs, inputs, "split", 1)
        if len(inputs) < 2 or not inputs[1]:
            attrs.setdefault("num_outputs", len(outputs))
        attrs.setdefault("axis", 0)
    elif t in ("Squeeze", "Unsqueeze") and opset < 13:
        _attr_to_input(b, name, attrs, inputs, "axes", 1)
    elif t in _REDUCE and (opset < 18 and not (t == "ReduceSum" and opset >= 13)):
        _attr_to_input(b, name, attrs, inputs, "axes", 1)
    elif t == "Reshape" and opset < 5:
        _attr_to_input(b, name, attrs, inputs, "shape", 1)
    elif t in ("Softmax", "LogSoftmax", "Hardmax"):
        attrs["opset"] = opset
        attrs.setdefault("axis", -1 if opset >= 13 else 1)
    elif t == "BatchNormalization":
        if attrs.get("training_mode", 0) or any(not unused(i) for i in range(1, len(outputs))):
            b.unsupported.append(("BatchNormalization[training]", name))
        if attrs.get("spatial", 1) == 0:
            b.unsupported.append(("BatchNormalization[spatial=0]", name))
        del outputs[1:]
        attrs = {"epsilon": float(attrs.get("epsilon", 1e-5))}
    elif t == "Dropout":
        if not unused(1):
            b.unsupported.append(("Dropout[mask]", name))
        if _training(b, inputs, opset):
            b.unsupported.append(("Dropout[training_mode]", name))
        del inputs[1:], outputs[1:]
        attrs = {}
    elif t == "MaxPool":
        if not unused(1):
            b.unsupported.append(("MaxPool[Indices]", name))
        del outputs[1:]
    elif t == "Upsample":
        if opset < 7:  # height_scale/width_scale attributes
            b.unsupported.append(("Upsample[opset<7]", name))
        mode = str(attrs.get("mode", "nearest"))
        if opset < 9:
            _attr_to_input(b, name, attrs, inputs, "scales", 1, np.float32)
        inputs[:] = [inputs[0], "", inputs[1]]
        t = "Resize"
        attrs = {"mode": "linear" if mode in ("linear", "bilinear") else mode,
                 "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
    elif t == "Resize":
        if opset < 11:
            inputs[:] = [inputs[0], "", inputs[1]]
            attrs = {"mode": attrs.get("mode", "nearest"),
                     "coordinate_transformation_mode": "asymmetric", "nearest_mode": "simple"}
        else:
            if len(inputs) > 1:
                inputs[1] = ""  # roi: only used by tf_crop_and_resize
            attrs.setdefault("mode", "nearest")
            attrs.setdefault("coordinate_transformation_mode", "half_pixel")
            attrs.setdefault("nearest_mode", "round_prefer_floor")
            for i in (2, 3):
                if len(inputs) > i and inputs[i] in b.tensors and b.tensors[inputs[i]].size == 0:
                    inputs[i] = ""
        if attrs["mode"] not in ("nearest", "linear", "cubic"):
            b.unsupported.append((f"Resize[mode={attrs['mode']}]", name))
        if attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
            b.unsupported.append(("Resize[tf_crop_and_resize]", name))
        if attrs.get("antialias", 0) and attrs["mode"] != "nearest":
            b.unsupported.append(("Resize[antialias]", name))
    elif t == "Cast":
        if isinstance(attrs.get("to"), str):
            attrs["to"] = int(onnx.TensorProto.DataType.Value(attrs["to"].upper()))
        if int(attrs.get("to", 0)) not in ONNX_DTYPES:
            b.unsupported.append((f"Cast[to={type_name(attrs.get('to', 0))}]", name))
    elif t in ("Add", "Sub", "Mul", "Div", "Gemm") and "broadcast" in attrs:
        if t != "Gemm" and "axis" in attrs:
            b.unsupported.append((f"{t}[legacy axis broadcast]", name))
        attrs.pop("broadcast", None)
        attrs.pop("axis", None)
    elif t == "LeakyRelu":
        attrs.setdefault("alpha", 0.01)
    elif t == "Elu":
        attrs.setdefault("alpha", 1.0)
    for legacy in ("consumed_inputs", "is_test"):
        attrs.pop(legacy, None)
    while inputs and not inputs[-1]:
        inputs.pop()
    return t, attrs


def _training(b: _Builder, inputs: list[str], opset: int) -> bool:
    """Whether a Dropout drops: ``training_mode`` (input 2, opset >= 12) true or not a
    constant, unless the ratio is a constant 0 (then it is the identity either way)."""
    def value(i: int) -> float | None:  # a constant scalar input, else None
        t = b.tensors.get(inputs[i]) if len(inputs) > i and inputs[i] else None
        c = None if t is None or not t.is_const else np.asarray(t.const).reshape(-1)
        return float(c[0]) if c is not None and c.size else None

    if opset < 12 or len(inputs) < 3 or not inputs[2] or value(2) == 0.0:
        return False
    return value(1) != 0.0  # no ratio input: the default 0.5


def _constant_value(node: onnx.NodeProto, attrs: dict, b: _Builder, name: str) -> np.ndarray | None:
    if "value" in attrs:
        return np.asarray(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    b.unsupported.append(("Constant[" + ",".join(attrs) + "]", name))
    return None


def load_onnx(model_or_path: str | os.PathLike | bytes | onnx.ModelProto,
              input_sizes: Mapping[str, Sequence[int]] | None = None) -> Graph:
    """Read an ONNX model into the IR.

    ``model_or_path`` is a file path (external data beside it is loaded), serialized bytes or
    a ModelProto. ``input_sizes`` maps graph input names to full shapes (a 2-tuple is taken
    as H, W of a 4-D input); it is required for free dimensions other than the batch
    dimension, which defaults to 1.

    Raises ModelError for unreadable files, free dimensions, dangling tensor references and
    bad attributes, and UnsupportedOps listing *every* node whose op has neither a hardware
    mapping nor a CPU kernel.
    """
    model, label = _read(model_or_path)
    opset = _opset(model)
    g = model.graph
    b = _Builder(opset)
    for init in g.initializer:
        b.tensors[init.name] = Tensor(init.name, const=_to_array(init, "initializer"))
    if len(g.sparse_initializer):
        raise ModelError("sparse initializers are not supported", field="sparse_initializer",
                         value=[s.values.name for s in g.sparse_initializer][:5])

    sizes = dict(input_sizes or {})
    graph_inputs = [vi for vi in g.input if vi.name not in b.tensors]
    names = {vi.name for vi in graph_inputs}
    unknown = [k for k in sizes if k not in names]
    if unknown:
        raise ModelError("input_sizes names an input the model does not have",
                         field="input_sizes", value=unknown, limit=sorted(names))
    inputs: list[str] = []
    for vi in graph_inputs:
        dtype = _input_type(vi)
        shape = _input_shape(vi, sizes.get(vi.name))
        b.tensors[vi.name] = Tensor(vi.name, shape, dtype)
        inputs.append(vi.name)

    used = {n for node in g.node for n in node.input if n} | {o.name for o in g.output}
    for index, node in enumerate(g.node):
        name = b.op_name(node, index)
        t = node.op_type
        if node.domain not in ("", "ai.onnx"):
            if (node.domain, t) not in DOMAIN_OPS:
                b.unsupported.append((f"{node.domain}::{t}", name))
                continue
            _check_domain_op(node, name)
        elif t not in SUPPORTED_OPS:
            b.unsupported.append((t, name))
            continue
        try:
            attrs = {a.name: _attr_value(a, name) for a in node.attribute}
        except ModelError:
            raise
        except Exception as exc:
            raise ModelError(f"cannot read attributes: {exc}", field=f"{t} {name}") from exc
        if t == "Constant":
            value = _constant_value(node, attrs, b, name)
            if value is not None:
                b.tensors[node.output[0]] = Tensor(node.output[0], const=value)
            continue
        ins, outs = list(node.input), list(node.output)
        if node.domain not in ("", "ai.onnx"):
            t = DOMAIN_OPS[(node.domain, t)]
        else:
            t, attrs = _normalize(b, node, name, attrs, ins, outs, used)
        for o in outs:
            if o and o not in b.tensors:
                b.tensors[o] = Tensor(o)
        b.ops.append(Op(t, name, ins, outs, attrs))

    if b.unsupported:
        raise UnsupportedOps(b.unsupported)

    graph = Graph(b.tensors, b.ops, inputs, [o.name for o in g.output], opset,
                  g.name or Path(label).stem)
    defined = set(inputs) | {n for n, t in b.tensors.items() if t.is_const}
    defined |= {o for op in b.ops for o in op.outputs if o}
    for op in b.ops:
        for n in op.inputs:
            if n and n not in defined:
                raise ModelError(
                    "op input is not produced by any node, graph input or initializer",
                    field=f"{op.type} {op.name}", value=n,
                    hint="missing initializer (or external data not loaded)",
                )
    for n in graph.outputs:
        if n not in defined:
            raise ModelError("graph output is not produced by any node", field=n)
    graph.topo_sort()
    graph.validate(require_shapes=False)
    return graph


def load(source: str | os.PathLike | bytes | onnx.ModelProto,
         input_size: tuple[int, int] | None = None) -> Graph:
    """The frontend entry point (:mod:`dvsdk.compiler.frontends`): ``input_size`` (H, W)
    fixes the spatial dimensions of every graph input."""
    if input_size is None:
        return load_onnx(source)
    model, _ = _read(source)
    inits = {i.name for i in model.graph.initializer}
    sizes = {i.name: tuple(input_size) for i in model.graph.input if i.name not in inits}
    return load_onnx(model, sizes)
