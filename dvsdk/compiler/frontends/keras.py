"""Keras ``.h5`` -> IR, with h5py alone (no TensorFlow, no Keras).

A Keras HDF5 model file holds the architecture as JSON in the root attribute
``model_config`` and the weights in the group ``model_weights/<layer name>/``, whose
attribute ``weight_names`` lists the datasets (``conv2d_1/kernel:0`` in Keras 2,
``conv2d_1/kernel`` in Keras 3).  Both generations are read:

* ``Sequential``: ``config`` is the list of layers (Keras <= 2.1) or ``{"layers": [...]}``;
  the input comes from an ``InputLayer`` or the first layer's ``batch_input_shape``
  (Keras 3: ``batch_shape``, or the model's ``build_input_shape``);
* functional (``Model`` / ``Functional``): ``inbound_nodes`` are lists of
  ``[layer, node, tensor, kwargs]`` (Keras 2) or ``{"args": [...], "kwargs": {...}}``
  whose tensors carry ``keras_history = [layer, node, tensor]`` (Keras 3); shared layers
  (several nodes) are supported.

The JSON is bounded (:data:`MAX_CONFIG_BYTES`, :data:`MAX_DEPTH`, :data:`MAX_LAYERS`).
Every unknown layer class and every refused configuration is listed by name in one
:class:`~dvsdk.errors.UnsupportedOps`; weights are matched by layer name and by role
(``kernel``, ``bias``, ``gamma`` ...), and a weight of the wrong shape is a ModelError naming
the layer, the weight, its shape and the expected one.  The layer conversions are in
:mod:`.keras_layers`; the graph is NCHW inside with ``layout = "NHWC"``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ModelError, UnsupportedOps
from ..ir import Graph
from .keras_ir import KT, Builder, Layer, ir_shape
from .keras_layers import LAYERS
from .keras_ops import OPERATIONS, convert_operation, is_operation, origin_class
from .keras_tfop import check_tfop, convert_tfop, is_tfop, tfop_refs

__all__ = ["load", "load_keras", "LAYERS", "MAX_CONFIG_BYTES", "MAX_DEPTH", "MAX_LAYERS"]

MAX_CONFIG_BYTES = 16 << 20
MAX_DEPTH = 64
MAX_LAYERS = 20000
_HINT_SIZE = "pass --input-size HxW (input_size=(H, W))"
_NESTED = ("Sequential", "Functional", "Model")


# --------------------------------------------------------------------------- the file
def _h5py() -> Any:
    try:
        import h5py
    except ImportError:
        raise ModelError("reading Keras .h5 models needs h5py", field="format", value="keras",
                         hint='pip install "dvsdk[keras]"') from None
    return h5py


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if isinstance(v, np.ndarray) and v.size == 1:
        return _text(v.reshape(-1)[0])
    return str(v)


def _depth(obj: Any) -> int:
    deepest, stack = 0, [(obj, 1)]
    while stack:
        o, d = stack.pop()
        deepest = max(deepest, d)
        if d > MAX_DEPTH:
            break
        if isinstance(o, dict):
            stack.extend((v, d + 1) for v in o.values())
        elif isinstance(o, list):
            stack.extend((v, d + 1) for v in o)
    return deepest


def _attr(obj: Any, name: str, limit: int, where: str) -> Any:
    """Attribute ``name`` of an HDF5 object, or None; its size is checked before it is read
    (a damaged header can claim gigabytes)."""
    if name not in obj.attrs:
        return None
    aid = obj.attrs.get_id(name)
    count = int(np.prod(aid.shape)) if aid.shape else 1
    size = max(aid.get_storage_size(), count)
    if size > limit:
        raise ModelError(f"attribute {name} too large", field=where, value=size, limit=limit)
    return obj.attrs[name]


def _config(f: Any, label: str) -> dict:
    raw = _attr(f, "model_config", MAX_CONFIG_BYTES, label)
    if raw is None:
        raise ModelError("the .h5 file has no model_config (a weights-only file?)",
                         field=label, hint="save the whole model: model.save('model.h5')")
    try:
        size = len(raw)
        if size > MAX_CONFIG_BYTES:
            raise ModelError("model_config too large", field=label, value=size,
                             limit=MAX_CONFIG_BYTES)
        cfg = json.loads(_text(raw))
    except RecursionError:
        raise ModelError("model_config nested too deeply", field=label,
                         limit=MAX_DEPTH) from None
    except (ValueError, TypeError) as e:
        raise ModelError(f"model_config is not JSON: {e}", field=label) from None
    if _depth(cfg) > MAX_DEPTH:
        raise ModelError("model_config nested too deeply", field=label, limit=MAX_DEPTH)
    if not isinstance(cfg, dict) or "class_name" not in cfg:
        raise ModelError("model_config is not a Keras model", field=label,
                         value=type(cfg).__name__)
    return cfg


def _keras_version(f: Any, cfg: dict) -> tuple[int, int]:
    """(major, minor) of the Keras that wrote the file (``keras_version``), else a guess
    from the config's form."""
    for obj in (f, f["model_weights"] if "model_weights" in f else None):
        v = None if obj is None else _attr(obj, "keras_version", 256, "keras_version")
        if v is not None:
            m = re.match(r"\s*(\d+)(?:\.(\d+))?", _text(v))
            if m:
                return int(m.group(1)), int(m.group(2) or 0)
    return (3, 0) if '"keras_history"' in json.dumps(cfg) else (2, 0)


class _Weights:
    """A layer's weights by role (``kernel``, ``bias`` ...), read from ``model_weights``."""

    def __init__(self, f: Any, label: str) -> None:
        self.root = f["model_weights"] if "model_weights" in f else f
        self.label = label
        self.h5py = _h5py()

    def _datasets(self, name: str) -> list[tuple[str, Any]]:
        if name not in self.root:
            return []
        g = self.root[name]
        names = _attr(g, "weight_names", 1 << 16, f"{self.label}:model_weights/{name}")
        out = []
        if names is not None:
            for n in np.asarray(names).reshape(-1):
                n = _text(n)
                if n not in g:
                    raise ModelError("weight listed in weight_names is missing",
                                     field=f"{self.label}:model_weights/{name}", value=n)
                out.append((n, g[n]))
            return out
        g.visititems(lambda n, o: out.append((n, o)) if isinstance(o, self.h5py.Dataset)
                     else None)
        return out

    def getter(self, layer_name: str, origin: str, order: tuple[str, ...], inner: str = ""):
        """weight(role, shape) of layer ``layer_name`` (of its member ``inner``, for the
        layers of a nested Sequential, whose weights the outer layer's group holds)."""
        cache: dict[str, Any] | None = None

        def role(n: str) -> str:
            return n.rsplit("/", 1)[-1].split(":", 1)[0]

        def get(want: str, shape: tuple[int, ...]) -> np.ndarray:
            nonlocal cache
            if cache is None:
                found = self._datasets(layer_name)
                if inner:
                    found = [(n, ds) for n, ds in found
                             if n.startswith(f"{inner}/") or f"/{inner}/" in n]
                cache = {role(n): ds for n, ds in found}
                if not set(order) & set(cache) and len(found) == len(order):
                    cache = dict(zip(order, (ds for _, ds in found)))  # unnamed: by position
            if want not in cache and _ALIASES.get(want) in cache:
                want = _ALIASES[want]
            if want not in cache:
                raise ModelError("weight missing from model_weights", field=origin,
                                 value=want, limit=sorted(cache) or "no weights stored")
            ds = cache[want]
            if not isinstance(ds, self.h5py.Dataset) or tuple(ds.shape) != tuple(shape):
                raise ModelError("weight has the wrong shape", field=f"{origin}/{want}",
                                 value=tuple(getattr(ds, "shape", ())), limit=tuple(shape))
            try:
                arr = np.asarray(ds[()])
            except Exception as e:  # noqa: BLE001 - h5py raises OSError/KeyError/...
                raise ModelError(f"cannot read weight: {e}", field=f"{origin}/{want}") from None
            if arr.dtype.kind != "f":
                raise ModelError("weight is not floating point", field=f"{origin}/{want}",
                                 value=str(arr.dtype))
            if tuple(arr.shape) != tuple(shape):
                raise ModelError("weight has the wrong shape", field=f"{origin}/{want}",
                                 value=tuple(arr.shape), limit=tuple(shape))
            if not np.all(np.isfinite(arr)):
                raise ModelError("weight holds NaN or infinity", field=f"{origin}/{want}")
            return arr.astype(np.float32)
        return get


#: another name a role is stored under (Keras 3's DepthwiseConv2D calls its kernel "kernel")
_ALIASES = {"depthwise_kernel": "kernel"}
#: weight roles in Keras's own order, for files whose weight names carry no role
_ORDER = {"Conv2D": ("kernel", "bias"), "Conv2DTranspose": ("kernel", "bias"),
          "Dense": ("kernel", "bias"), "DepthwiseConv2D": ("depthwise_kernel", "bias"),
          "SeparableConv2D": ("depthwise_kernel", "pointwise_kernel", "bias"),
          "BatchNormalization": ("gamma", "beta", "moving_mean", "moving_variance"),
          "PReLU": ("alpha",), "Normalization": ("mean", "variance", "count"),
          "LayerNormalization": ("gamma", "beta"), "LayerScale": ("variable",)}


# --------------------------------------------------------------------------- the topology
class _Node:
    """One call of a layer: its inputs as (layer, node, tensor) references, and the call as
    the file has it (``raw``)."""

    def __init__(self, layer: dict, index: int, refs: list[tuple[str, int, int]],
                 raw: Any = None) -> None:
        self.layer, self.index, self.refs, self.raw = layer, index, refs, raw

    @property
    def key(self) -> tuple[str, int]:
        return (self.layer["name"], self.index)


def _ref(v: Any, where: str) -> tuple[str, int, int]:
    if (isinstance(v, (list, tuple)) and len(v) >= 3 and isinstance(v[0], str)
            and all(isinstance(i, int) for i in v[1:3])):
        return (v[0], int(v[1]), int(v[2]))
    raise ModelError("malformed layer reference", field=where, value=str(v)[:80])


def _node_refs(node: Any, where: str) -> list[tuple[str, int, int]]:
    if isinstance(node, dict):   # Keras 3: {"args": [...], "kwargs": {...}}
        refs: list[tuple[str, int, int]] = []

        def walk(v: Any) -> None:
            if isinstance(v, dict) and v.get("class_name") == "__keras_tensor__":
                cfg = v.get("config")            # a dict, unless the file is damaged
                refs.append(_ref((cfg if isinstance(cfg, dict) else {}).get("keras_history"),
                                 where))
            elif isinstance(v, list):
                for i in v:
                    walk(i)
        walk(node.get("args", []))
        return refs
    if isinstance(node, list):   # Keras 2: [[layer, node, tensor, kwargs], ...]
        return [_ref(r, where) for r in node]
    raise ModelError("malformed inbound node", field=where, value=str(node)[:80])


def _io_refs(v: Any, where: str) -> list[tuple[str, int, int]]:
    if isinstance(v, list) and v and isinstance(v[0], str):
        return [_ref(v, where)]
    if not isinstance(v, list) or not v:
        raise ModelError("model lists no inputs/outputs", field=where, value=v)
    return [_ref(r, where) for r in v]


def _layers(cfg: dict, label: str) -> tuple[list[dict], bool, dict]:
    """(layer dicts, is_sequential, model config dict)."""
    inner = cfg.get("config")
    seq = cfg["class_name"] == "Sequential"
    if seq and isinstance(inner, list):   # Keras <= 2.1
        inner = {"layers": inner}
    if not isinstance(inner, dict) or not isinstance(inner.get("layers"), list):
        raise ModelError("model_config has no layer list", field=label,
                         value=cfg.get("class_name"))
    layers = inner["layers"]
    if len(layers) > MAX_LAYERS:
        raise ModelError("too many layers", field=label, value=len(layers), limit=MAX_LAYERS)
    for i, ly in enumerate(layers):
        if not (isinstance(ly, dict) and isinstance(ly.get("class_name"), str)
                and isinstance(ly.get("config", {}), dict)):
            raise ModelError("malformed layer entry", field=f"{label}:layers[{i}]")
        ly.setdefault("config", {})
        name = ly.get("name", ly["config"].get("name"))
        if not isinstance(name, str) or not name:
            raise ModelError("layer has no name", field=f"{label}:layers[{i}]")
        ly["name"] = name
    if not seq and cfg["class_name"] not in ("Model", "Functional"):
        raise UnsupportedOps([(cfg["class_name"], "model")])
    return layers, seq, inner


def _batch_shape(c: dict) -> Any:
    for key in ("batch_input_shape", "batch_shape"):
        if c.get(key) is not None:
            return c[key]
    return None


def _input_shape(name: str, dims: Any, input_size: tuple[int, int] | None) -> tuple[int, ...]:
    if not isinstance(dims, list) or not 2 <= len(dims) <= 4 or not all(
            d is None or (isinstance(d, int) and d > 0) for d in dims):
        raise ModelError("input shape not supported", field=name, value=dims,
                         limit="rank 2..4 with positive dimensions")
    dims = [1 if dims[0] is None else dims[0], *dims[1:]]
    if dims[0] != 1:
        raise ModelError("batch size must be 1 or free", field=name, value=dims[0], limit=1)
    if input_size is not None:
        if len(dims) != 4:
            raise ModelError("--input-size applies to image inputs only", field=name,
                             value=tuple(dims))
        for i, v in zip((1, 2), input_size):
            if int(v) <= 0:
                raise ModelError("input size must be positive", field=name,
                                 value=tuple(input_size))
            if dims[i] is not None and dims[i] != int(v):
                raise ModelError("input size conflicts with the model's fixed dimension",
                                 field=f"{name}[{i}]", value=int(v), limit=dims[i])
            dims[i] = int(v)
    if any(d is None for d in dims):
        raise ModelError(f"input {name!r} has free dimensions", field=name, value=dims,
                         hint=_HINT_SIZE)
    return tuple(dims)


def _refusals(layers: list[dict], version: tuple[int, int]) -> list[tuple[str, str]]:
    bad = []
    for ly in layers:
        cls = ly["class_name"]
        spec = LAYERS.get(cls)
        if is_operation(ly):   # Keras 3 arithmetic on a tensor (x + 3.0): not a layer
            if cls not in OPERATIONS:
                bad.append((origin_class(cls), ly["name"]))
        elif is_tfop(ly):      # Keras 2: a TF function on a tensor (tf.nn.relu6(x))
            label = check_tfop(ly)
            if label:
                bad.append((label, ly["name"]))
        elif cls == "UpSampling2D" and ly["config"].get("interpolation") == "bilinear" \
                and version < (2, 4):   # TF1-era resize (no half-pixel centers): not mapped
            bad.append((f"{cls}[bilinear, Keras {version[0]}.{version[1]}]", ly["name"]))
        elif cls == "Sequential" and isinstance(ly["config"].get("layers"), list):
            inner = [i for i in ly["config"]["layers"] if isinstance(i, dict)
                     and i.get("class_name") != "InputLayer"]
            if len(inner) != len(ly["config"]["layers"]) - sum(
                    1 for i in ly["config"]["layers"]
                    if isinstance(i, dict) and i.get("class_name") == "InputLayer"):
                bad.append((f"{cls} (malformed nested model)", ly["name"]))
                continue
            for i in inner:   # members are read in order, as in a Sequential model
                i.setdefault("config", {})
                i["name"] = i.get("name", i["config"].get("name"))
                if not isinstance(i["name"], str) or not isinstance(i.get("class_name"), str):
                    bad.append((f"{cls} (malformed nested model)", ly["name"]))
                    break
            else:
                bad += _refusals(inner, version)
        elif cls in _NESTED:
            bad.append((f"{cls} (nested model)", ly["name"]))
        elif spec is None:
            bad.append((cls, ly["name"]))
        elif spec.check is not None:
            label = spec.check(Layer(cls, ly["name"], ly["config"], _no_weights))
            if label:
                bad.append((label, ly["name"]))
    return bad


def _no_weights(role: str, shape: tuple[int, ...]) -> np.ndarray:
    raise AssertionError("config checks read no weights")


# --------------------------------------------------------------------------- building
def _build(b: Builder, layers: list[dict], seq: bool, inner: dict, weights: _Weights,
           input_size: tuple[int, int] | None) -> tuple[list[str], list[str]]:
    values: dict[tuple[str, int, int], KT] = {}
    inputs: list[str] = []
    names = {ly["name"] for ly in layers}
    first_op = 0

    def add_input(name: str, dims: Any) -> None:
        shape = _input_shape(name, dims, input_size)
        values[(name, 0, 0)] = KT(b.input(name, ir_shape(shape)), shape)
        inputs.append(name)

    def call(ly: dict, xs: list[KT], index: int, raw: Any = None) -> KT:
        nonlocal first_op
        cls, name = ly["class_name"], ly["name"]
        operation = is_operation(ly)
        if operation:
            cls = origin_class(cls)
        layer = Layer(cls, name, ly["config"],
                      weights.getter(name, f"{cls} {name}", _ORDER.get(cls, ())))
        b.origin, first_op = layer.origin, len(b.ops)
        if cls == "Sequential" and not operation:   # a nested Sequential: its members
            y = xs[0] if len(xs) == 1 else None
            if y is None:
                raise layer.err("a nested Sequential takes one input", value=len(xs))
            for member in ly["config"]["layers"]:
                mcls = member["class_name"]
                if mcls == "InputLayer":
                    continue
                m = Layer(mcls, member["name"], member["config"],
                          weights.getter(name, f"{mcls} {member['name']}",
                                         _ORDER.get(mcls, ()), member["name"]))
                b.origin = m.origin
                y = LAYERS[mcls].convert(b, m, [y])
            b.origin = layer.origin
        elif is_tfop(ly):
            y = convert_tfop(b, layer, raw, xs, names)
        else:
            y = convert_operation(b, layer, raw, xs) if operation else \
                LAYERS[cls].convert(b, layer, xs)
        want = name if index == 0 else f"{name}_{index}"
        if b.rename(y.name, want, first_op):
            y = KT(want, y.shape, y.chw)
        return y

    if seq:
        body = list(layers)
        if body and body[0]["class_name"] == "InputLayer":
            first = body.pop(0)
            add_input(first["name"], _batch_shape(first["config"]))
        else:
            dims = (_batch_shape(body[0]["config"]) if body else None) \
                or inner.get("build_input_shape")
            if dims is None:
                raise ModelError("Sequential model without an input shape", field="model",
                                 hint="build the model with an Input before saving it")
            add_input("input", dims)
        x = values[(inputs[0], 0, 0)]
        for ly in body:
            x = call(ly, [x], 0)
        return inputs, [_output(b, x, body[-1]["name"] if body else inputs[0], set())]

    by_name = {ly["name"]: ly for ly in layers}
    for r in _io_refs(inner.get("input_layers"), "input_layers"):
        ly = by_name.get(r[0])
        if ly is None or ly["class_name"] != "InputLayer":
            raise ModelError("input_layers names no InputLayer", field="input_layers",
                             value=r[0])
        add_input(r[0], _batch_shape(ly["config"]))
    pending: list[_Node] = []
    for ly in layers:
        if ly["class_name"] == "InputLayer":
            continue
        nodes = ly.get("inbound_nodes")
        if not isinstance(nodes, list) or not nodes:
            raise ModelError("layer has no inbound nodes", field=ly["name"])
        for i, node in enumerate(nodes):
            refs = tfop_refs(node, ly["name"], names) if is_tfop(ly) else \
                _node_refs(node, ly["name"])
            pending.append(_Node(ly, i, refs, node))
    while pending:   # topological order, whatever the file's
        ready = [n for n in pending if all(r in values for r in n.refs)]
        if not ready:
            missing = sorted({r[0] for n in pending for r in n.refs if r not in values})
            raise ModelError("layers read tensors no layer produces", field="inbound_nodes",
                             value=missing[:5])
        for n in ready:
            pending.remove(n)
            if not n.refs:
                raise ModelError("layer call has no tensor inputs", field=n.layer["name"])
            values[(n.layer["name"], n.index, 0)] = call(n.layer, [values[r] for r in n.refs],
                                                         n.index, n.raw)
    outs: list[str] = []
    taken: set[str] = set()
    for r in _io_refs(inner.get("output_layers"), "output_layers"):
        if r not in values:
            raise ModelError("output_layers names an unknown tensor", field="output_layers",
                             value=list(r), hint="layers with several outputs are not supported")
        outs.append(_output(b, values[r], r[0] if r[1] == 0 else f"{r[0]}_{r[1]}", taken))
    return inputs, outs


def _output(b: Builder, x: KT, name: str, taken: set[str]) -> str:
    """The IR tensor of graph output ``name``: an op's output, each used once."""
    if x.chw is not None and x.name == name and name not in taken:
        # a Flatten output: its name goes to the Keras-order copy made for the output
        b.rename(name, b.fresh(f"{name}_chw"), 0)
        b.rename(b.plain(x).name, name, 0)
    x = b.plain(x)
    if x.name == name and name not in taken:
        taken.add(name)
        return name
    # a pass-through layer's output (Dropout, 'linear'), an input, or one tensor twice
    b.origin = f"Output {name}"
    y = b.op("Identity", [x.name], hint=name)
    taken.add(y)
    return y


# --------------------------------------------------------------------------- entry points
def load_keras(path: str | os.PathLike, input_size: tuple[int, int] | None = None) -> Graph:
    """Read a Keras ``.h5`` model (Keras 2 or 3, Sequential or functional) into the IR.

    ``input_size`` (H, W) fixes free spatial dimensions of image inputs. Raises ModelError
    for unreadable files, missing configs or weights and misshapen weights, and
    UnsupportedOps listing every layer that cannot be converted.
    """
    h5py = _h5py()
    label = os.fspath(path)
    if not Path(label).is_file():
        raise ModelError("model file not found", field="model", value=label)
    try:
        f = h5py.File(label, "r")
    except Exception as e:  # noqa: BLE001 - h5py raises OSError and others for bad files
        raise ModelError(f"cannot read the .h5 file: {e}", field=label,
                         hint="a corrupt, truncated or non-HDF5 file") from None
    try:
        with f:
            cfg = _config(f, label)
            version = _keras_version(f, cfg)
            layers, seq, inner = _layers(cfg, label)
            bad = _refusals(layers, version)
            if bad:
                raise UnsupportedOps(bad)
            b = Builder(version[0])
            inputs, outputs = _build(b, layers, seq, inner, _Weights(f, label), input_size)
    except (ModelError, UnsupportedOps):
        raise
    except (OSError, KeyError, RuntimeError, ValueError, TypeError) as e:   # a damaged file
        raise ModelError(f"cannot read the .h5 file: {e}", field=label,
                         hint="a corrupt or truncated file") from None
    name = inner.get("name") if isinstance(inner.get("name"), str) else Path(label).stem
    graph = Graph(b.tensors, b.ops, inputs, outputs, 13, name, layout="NHWC")
    graph.dead_code_elimination()
    graph.topo_sort()
    graph.validate(require_shapes=False)
    return graph


def load(source: str | os.PathLike, input_size: tuple[int, int] | None = None) -> Graph:
    """The frontend entry point (:mod:`dvsdk.compiler.frontends`)."""
    if not isinstance(source, (str, os.PathLike)):
        raise ModelError("the Keras frontend reads .h5 files", field="model",
                         value=type(source).__name__, hint="pass the file's path")
    return load_keras(source, input_size)
