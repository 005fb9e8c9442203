"""OpenVINO IR files: the hardened XML reader, the bounds-checked ``.bin`` reader, the layer
graph, and the builder the layer converters write IR ops with.

Reference: ``formats.md`` §5.1 (IR XML and ``.bin`` structure): a ``<net version>`` holds
``<layers>`` (``<layer id name type [version] [precision]>`` with a ``<data>`` child, or an
older ``<*_data>`` tag, ``<input>``/``<output>`` ``<port id>`` lists of ``<dim>``, outermost
first) and ``<edges>`` (``from-layer``/``from-port`` to ``to-layer``/``to-port``).  Weights are
byte ranges of the ``.bin`` beside the ``.xml``: ``Const`` ``<data offset size
element_type shape>`` in IR v10/v11, ``<blobs><weights|biases|custom offset size/>`` in the
legacy (v2-v7) IR, whose element type follows the layer ``precision``.

The XML is parsed with ``defusedxml`` (no DTD, so no entity expansion and no external
entities); it is imported only here, and a missing package is a ModelError naming the
``openvino`` extra.  Every ``.bin`` range is checked against the file size before it is read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...cpu.ops import KERNELS, run_op
from ...errors import ModelError
from ..ir import Op, Tensor

#: IR element types (v10/v11 ``element_type``, legacy ``precision``) -> numpy dtype.
#: FP16 data is widened to float32 when read (exactly): the IR computes in float32.
ELEMENT_TYPES: dict[str, np.dtype] = {k: np.dtype(v) for k, v in {
    "f32": np.float32, "fp32": np.float32, "f16": np.float16, "fp16": np.float16,
    "f64": np.float64, "fp64": np.float64, "bf16": np.uint16,
    "i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64,
    "u8": np.uint8, "u16": np.uint16, "u32": np.uint32, "u64": np.uint64,
    "boolean": np.bool_, "bool": np.bool_,
}.items()}
#: the ONNX TensorProto data type of each numpy dtype (for ``Cast``)
ONNX_TYPES = {np.dtype(np.float32): 1, np.dtype(np.uint8): 2, np.dtype(np.int8): 3,
              np.dtype(np.uint16): 4, np.dtype(np.int16): 5, np.dtype(np.int32): 6,
              np.dtype(np.int64): 7, np.dtype(np.bool_): 9, np.dtype(np.float64): 11,
              np.dtype(np.uint32): 12, np.dtype(np.uint64): 13}
_FOLD_LIMIT = 1 << 22  # elements: larger constant results stay ops (fold may take them)
#: the largest IR XML read, and the longest tag in it (both in bytes): an IR keeps its
#: weights in the .bin, so its XML is small and each layer's attributes short
MAX_XML_BYTES = 256 << 20
MAX_TAG_BYTES = 1 << 20
_HINT_EXTRA = 'pip install "dvsdk[openvino]"'


def element_type(text: str, what: str) -> np.dtype:
    """The numpy dtype of an IR element type or precision name (ModelError if unknown)."""
    dt = ELEMENT_TYPES.get(text.strip().lower())
    if dt is None:
        raise ModelError("unsupported element type", field=what, value=text,
                         limit=sorted(k for k in ELEMENT_TYPES if not k.startswith("fp")))
    return dt


# --------------------------------------------------------------------------- the layer graph
@dataclass
class Port:
    """One ``<port>``: its id, declared dims (-1 where dynamic), precision and tensor names."""

    id: int
    dims: tuple[int, ...]
    precision: str = ""
    names: tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return all(d >= 0 for d in self.dims)


@dataclass
class Layer:
    """One ``<layer>`` with its ``<data>`` attributes, ports and blob ranges."""

    id: str
    name: str
    type: str
    version: str
    precision: str
    data: dict[str, str]
    inputs: list[Port]
    outputs: list[Port]
    blobs: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # offset, size, prec

    @property
    def origin(self) -> str:
        return f"{self.type} {self.name}"

    def where(self, attr: str = "") -> str:
        return f"{self.type} {self.name}" + (f".{attr}" if attr else "")

    # -- attributes -----------------------------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.data and self.data[key].strip() != ""

    def text(self, key: str, default: str = "") -> str:
        return self.data.get(key, default).strip()

    def ints(self, key: str, default: Sequence[int] | None = None) -> list[int]:
        if not self.has(key):
            if default is None:
                raise ModelError("layer attribute missing", field=self.where(key))
            return list(default)
        try:
            return [int(float(v)) for v in _split_list(self.data[key])]
        except (ValueError, OverflowError):     # "x", "nan"; "1e309" (int(inf))
            raise ModelError("attribute is not a list of integers", field=self.where(key),
                             value=self.data[key]) from None

    def int1(self, key: str, default: int | None = None) -> int:
        v = self.ints(key, None if default is None else [default])
        if len(v) != 1:
            raise ModelError("attribute is not one integer", field=self.where(key), value=v)
        return v[0]

    def floats(self, key: str, default: Sequence[float] | None = None) -> list[float]:
        if not self.has(key):
            if default is None:
                raise ModelError("layer attribute missing", field=self.where(key))
            return list(default)
        try:
            return [float(v) for v in _split_list(self.data[key])]
        except ValueError:
            raise ModelError("attribute is not a list of numbers", field=self.where(key),
                             value=self.data[key]) from None

    def num(self, key: str, default: float | None = None) -> float:
        v = self.floats(key, None if default is None else [default])
        if len(v) != 1:
            raise ModelError("attribute is not one number", field=self.where(key), value=v)
        return v[0]

    def flag(self, key: str, default: bool = False) -> bool:
        if not self.has(key):
            return default
        v = self.text(key).lower()
        if v in ("true", "1", "yes"):
            return True
        if v in ("false", "0", "no"):
            return False
        raise ModelError("attribute is not a boolean", field=self.where(key), value=v)


def _split_list(text: str) -> list[str]:
    return [t for t in re.split(r"[,\s]+", text.strip()) if t]


def _port_names(text: str) -> tuple[str, ...]:
    """``names="a,b"`` with ``\\,`` escaping a comma inside a name."""
    parts = re.split(r"(?<!\\),", text)
    return tuple(p.replace("\\,", ",").strip() for p in parts if p.strip())


@dataclass
class Net:
    """A parsed IR: version, layers by id (file order), edges by (to-layer, to-port)."""

    name: str
    version: int
    layers: dict[str, Layer]
    sources: dict[tuple[str, int], tuple[str, int]]  # (to layer, to port) -> (from, port)
    consumers: dict[tuple[str, int], int]            # (from layer, port) -> readers

    def order(self) -> list[Layer]:
        """Layers in topological order (file order where free); ModelError on a cycle."""
        deps: dict[str, set[str]] = {lid: set() for lid in self.layers}
        for (to, _), (src, _) in self.sources.items():
            deps[to].add(src)
        done: set[str] = set()
        out: list[Layer] = []
        pending = list(self.layers)
        while pending:
            rest = [lid for lid in pending if not deps[lid] <= done]
            ready = [lid for lid in pending if deps[lid] <= done]
            if not ready:
                raise ModelError("the IR's edges form a cycle", field="edges",
                                 value=[self.layers[i].name for i in rest[:5]])
            for lid in ready:
                done.add(lid)
                out.append(self.layers[lid])
            pending = rest
        return out


def _read_bounded(path: Path) -> bytes:
    """The XML's bytes, refused when the file exceeds :data:`MAX_XML_BYTES`."""
    try:
        size = path.stat().st_size
        if size > MAX_XML_BYTES:
            raise ModelError("the IR XML is too large", field=str(path), value=size,
                             limit=f"{MAX_XML_BYTES:,} bytes")
        return path.read_bytes()
    except OSError as exc:
        raise ModelError("cannot read the IR XML", field=str(path), value=str(exc)) from None


def _check_tags(data: bytes, path: Path) -> None:
    """Refuse a tag longer than :data:`MAX_TAG_BYTES`, in one linear pass before parsing.

    Expat re-scans a token that a chunk of input leaves unfinished from its start on every
    further chunk (CPython feeds it 1 MiB at a time), so one 50 MiB attribute would take
    quadratic time; a start tag with all its attributes is one token.  The distance between
    two ``<`` bounds every tag (``<`` cannot occur inside one)."""
    arr = np.frombuffer(data, np.uint8)
    bounds = np.concatenate(([0], np.flatnonzero(arr == ord("<")), [arr.size]))
    gaps = np.diff(bounds)
    i = int(np.argmax(gaps)) if gaps.size else 0
    if not gaps.size or int(gaps[i]) <= MAX_TAG_BYTES:
        return
    start, end = int(bounds[i]), int(bounds[i + 1])
    head = data[start:start + 64].split(None, 1)[0].decode("utf-8", "replace")
    quotes = np.flatnonzero(arr[start:end] == ord('"')) + start
    what = f"{head}...>"
    if quotes.size >= 2:  # name the longest attribute value
        pairs = quotes[: quotes.size // 2 * 2].reshape(-1, 2)
        q = int(pairs[int(np.argmax(pairs[:, 1] - pairs[:, 0])), 0])
        name = data[max(start, q - 64):q].rstrip(b"= \t\r\n").split()[-1:]
        if name:
            what = f"{head} {name[0].decode('utf-8', 'replace')}=...>"
    line = data.count(b"\n", 0, start) + 1
    raise ModelError("an XML tag of the IR is too long", field=f"{path} line {line}",
                     value=f"{what} of {end - start:,} bytes",
                     limit=f"{MAX_TAG_BYTES:,} bytes per tag",
                     hint="OpenVINO writes weights to the .bin, never into the XML")


def _safe_parse(path: Path) -> Any:
    try:
        from defusedxml import DefusedXmlException
        from defusedxml import ElementTree as SafeET
    except ImportError:
        raise ModelError("reading OpenVINO IR needs the defusedxml package", field="model",
                         value=str(path), hint=_HINT_EXTRA) from None
    from xml.etree.ElementTree import ParseError

    data = _read_bounded(path)
    _check_tags(data, path)
    try:  # one buffer, not a file read in 64 KiB pieces: fewer re-scans of long tokens
        return SafeET.fromstring(data, forbid_dtd=True, forbid_entities=True,
                                 forbid_external=True)
    except DefusedXmlException as exc:
        raise ModelError("refused: the IR XML declares a DTD or entities", field=str(path),
                         value=type(exc).__name__,
                         hint="OpenVINO IR never does; entity expansion is not allowed") from None
    except ParseError as exc:
        raise ModelError("the IR XML is not well-formed", field=str(path),
                         value=str(exc)) from None
    except OSError as exc:
        raise ModelError("cannot read the IR XML", field=str(path), value=str(exc)) from None


def _int(text: str | None, what: str) -> int:
    try:
        return int(str(text).strip())
    except (TypeError, ValueError):
        raise ModelError("not an integer", field=what, value=text) from None


def dim(text: str | None, what: str) -> int:
    """One dimension as the IR writes it: a size >= 0, or -1 for a dynamic one (``?``,
    ``-1``, a range ``a..b``); any other negative number is a ModelError."""
    t = (text or "").strip()
    if t in ("?", "-1") or ".." in t:
        return -1
    v = _int(t, what)
    if v < 0:
        raise ModelError("negative dimension", field=what, value=v,
                         limit=">= 0, or -1 / ? for a dynamic one")
    return v


def _ports(elem: Any, layer: str, kind: str) -> list[Port]:
    ports = []
    if elem is None:
        return ports
    for p in elem.findall("port"):
        pid = _int(p.get("id"), f"{layer} {kind} port id")
        dims = tuple(dim(d.text, f"{layer} port {pid} dim") for d in p.findall("dim"))
        ports.append(Port(pid, dims, (p.get("precision") or "").strip(),
                          _port_names(p.get("names") or "")))
    ids = [p.id for p in ports]
    if len(set(ids)) != len(ids):
        raise ModelError("duplicate port id", field=f"{layer} {kind}", value=ids)
    return sorted(ports, key=lambda p: p.id)


def _layer(elem: Any) -> Layer:
    lid = (elem.get("id") or "").strip()
    name = elem.get("name") or f"layer{lid}"
    ltype = (elem.get("type") or "").strip()
    where = f"layer id={lid} ({name})"
    if not lid or not ltype:
        raise ModelError("layer without id or type", field=where)
    data: dict[str, str] = {}
    for child in elem:
        if child.tag == "data" or child.tag.endswith("_data"):
            data.update({k: v for k, v in child.attrib.items()})
    blobs: dict[str, tuple[int, int, str]] = {}
    holders = [elem] + list(elem.findall("blobs"))
    for holder in holders:
        for b in holder:
            if b.tag in ("weights", "biases", "custom") or (holder is not elem):
                if b.get("offset") is None and b.get("size") is None:
                    continue
                blobs[b.tag] = (_int(b.get("offset"), f"{where} {b.tag} offset"),
                                _int(b.get("size"), f"{where} {b.tag} size"),
                                (b.get("precision") or "").strip())
    return Layer(lid, name, ltype, (elem.get("version") or "").strip(),
                 (elem.get("precision") or "").strip(), data,
                 _ports(elem.find("input"), where, "input"),
                 _ports(elem.find("output"), where, "output"), blobs)


def read_xml(path: Path) -> Net:
    """Parse and check the IR's structure: layers, ports and edges (§5.1)."""
    root = _safe_parse(path)
    if root.tag != "net":
        raise ModelError("not an OpenVINO IR (root element is not <net>)", field=str(path),
                         value=root.tag)
    version = _int(root.get("version", "0"), "net version")
    layers: dict[str, Layer] = {}
    lroot = root.find("layers")
    for elem in ([] if lroot is None else lroot.findall("layer")):
        layer = _layer(elem)
        if layer.id in layers:
            raise ModelError("duplicate layer id", field="layer id", value=layer.id)
        layers[layer.id] = layer
    if not layers:
        raise ModelError("the IR has no layers", field=str(path))
    sources: dict[tuple[str, int], tuple[str, int]] = {}
    consumers: dict[tuple[str, int], int] = {}
    eroot = root.find("edges")
    for e in ([] if eroot is None else eroot.findall("edge")):
        fl, tl = (e.get("from-layer") or "").strip(), (e.get("to-layer") or "").strip()
        fp = _int(e.get("from-port"), f"edge {fl}->{tl} from-port")
        tp = _int(e.get("to-port"), f"edge {fl}->{tl} to-port")
        what = f"edge {fl}:{fp} -> {tl}:{tp}"
        if fl not in layers or tl not in layers:
            raise ModelError("edge names a layer the IR does not have", field=what,
                             value=fl if fl not in layers else tl)
        src = next((p for p in layers[fl].outputs if p.id == fp), None)
        dst = next((p for p in layers[tl].inputs if p.id == tp), None)
        if src is None:
            raise ModelError("edge leaves from a port that is not an output of its layer",
                             field=what, value=layers[fl].where(),
                             limit=[p.id for p in layers[fl].outputs])
        if dst is None:
            raise ModelError("edge enters a port that is not an input of its layer",
                             field=what, value=layers[tl].where(),
                             limit=[p.id for p in layers[tl].inputs])
        if (tl, tp) in sources:
            raise ModelError("input port has two edges", field=what)
        ps, pd = src.precision.upper(), dst.precision.upper()
        if ps and pd and ps != pd:
            raise ModelError("edge joins ports of different precisions", field=what,
                             value=(ps, pd))
        if src.static and dst.static and src.dims != dst.dims:
            raise ModelError("edge joins ports of different shapes", field=what,
                             value=(src.dims, dst.dims))
        sources[(tl, tp)] = (fl, fp)
        consumers[(fl, fp)] = consumers.get((fl, fp), 0) + 1
    for layer in layers.values():
        for p in layer.inputs:
            if (layer.id, p.id) not in sources:
                raise ModelError("input port is not connected", field=layer.where(),
                                 value=f"port {p.id}")
    return Net(root.get("name") or path.stem, version, layers, sources, consumers)


# --------------------------------------------------------------------------- weights
class Weights:
    """The ``.bin`` beside the ``.xml``, memory-mapped read-only; every read bounds-checked."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._data: np.ndarray | None = None
        self.size = path.stat().st_size if path.is_file() else -1

    def read(self, layer: Layer, offset: int, size: int, dtype: np.dtype, count: int,
             what: str = "") -> np.ndarray:
        """``count`` elements of ``dtype`` at byte ``offset`` (``size`` bytes) of the file."""
        field_ = layer.where(what)
        if self.size < 0:
            raise ModelError("the weights file (.bin) beside the IR XML is missing",
                             field=field_, value=str(self.path))
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ModelError("weights lie outside the .bin file", field=field_,
                             value=f"offset {offset} size {size}",
                             limit=f"file size {self.size}")
        if size != count * dtype.itemsize:
            raise ModelError("weights size does not match the declared shape and type",
                             field=field_, value=size,
                             limit=f"{count} x {dtype.itemsize} = {count * dtype.itemsize} bytes")
        if size == 0:
            return np.zeros(count, dtype)
        if self._data is None:
            self._data = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = np.array(self._data[offset:offset + size])  # a copy: no mmap left open
        return raw.view(dtype)


def widen(arr: np.ndarray, type_name: str) -> np.ndarray:
    """FP16 -> float32 (exact); bf16 (read as uint16) -> float32."""
    if arr.dtype == np.float16:
        return arr.astype(np.float32)
    if type_name.lower() == "bf16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr


# --------------------------------------------------------------------------- builder
class Builder:
    """Collects IR tensors and ops; one converter call per layer (``self.layer``).

    ``op`` folds an op whose inputs are all constants right away (with the CPU kernels), so
    converters can read weights, shapes and axes computed by earlier layers as constants.
    """

    def __init__(self, net: Net, weights: Weights,
                 input_size: tuple[int, int] | None = None) -> None:
        self.net, self.weights, self.input_size = net, weights, input_size
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.op_names: set[str] = set()
        self.unsupported: list[tuple[str, str]] = []
        self.layer: Layer | None = None
        self.count = 0  # ops emitted for the current layer
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    # -- names ------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.tensors:
            name = f"{hint}_{i}"
            i += 1
        return name

    def _op_name(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.op_names:
            name = f"{hint}_{i}"
            i += 1
        self.op_names.add(name)
        return name

    # -- tensors ----------------------------------------------------------------------------
    def const(self, value: Any, hint: str = "const", dtype: Any = None) -> str:
        """A new constant tensor; returns its name."""
        base = f"{self.layer.name}/{hint}" if self.layer else hint
        name = self.fresh(base)
        self.tensors[name] = Tensor(name, const=np.asarray(value, dtype=dtype))
        return name

    def add_input(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.tensors[name] = Tensor(name, shape, dtype)
        self.inputs.append(name)

    def const_named(self, name: str, value: np.ndarray) -> str:
        """Make the (reserved) tensor ``name`` a constant."""
        self.tensors[name] = Tensor(name, const=np.asarray(value))
        return name

    def ints(self, values: Any, hint: str = "const") -> str:
        return self.const(np.asarray(values, dtype=np.int64).reshape(-1), hint)

    def value(self, name: str) -> np.ndarray | None:
        t = self.tensors.get(name) if name else None
        return None if t is None else t.const

    def need(self, name: str, what: str) -> np.ndarray:
        """The constant value of ``name`` or ModelError naming the layer input."""
        v = self.value(name)
        if v is None:
            raise ModelError("layer input must be constant", field=self.layer.where(what),
                             hint="dvsdk needs static shapes and parameters")
        return v

    def refuse(self, detail: str = "") -> list[str]:
        """Record the current layer (or a variant of it) as unsupported."""
        kind = self.layer.type + (f"[{detail}]" if detail else "")
        self.unsupported.append((kind, self.layer.name))
        return []

    # -- ops --------------------------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1,
           attrs: dict | None = None) -> list[str]:
        """Emit one IR op for the current layer (or fold it); returns its output names."""
        layer = self.layer
        if isinstance(outputs, int):
            outputs = [self.fresh(f"{layer.name}/{op_type}") for _ in range(outputs)]
            for o in outputs:
                self.tensors[o] = Tensor(o)
        else:
            outputs = list(outputs)
        attrs = dict(attrs or {})
        ins = list(inputs)
        while ins and not ins[-1]:
            ins.pop()
        vals = [self.value(n) if n else None for n in ins]
        if (ins and op_type in KERNELS and all(v is not None for n, v in zip(ins, vals) if n)
                and sum(v.size for v in vals if v is not None) <= _FOLD_LIMIT):
            try:
                res = run_op(op_type, vals, attrs)
            except ModelError:
                raise
            except Exception as exc:
                raise ModelError(f"constant evaluation failed: {exc}",
                                 field=layer.where(), value=op_type) from exc
            for o, v in zip(outputs, res):
                self.tensors[o] = Tensor(o, const=np.asarray(v))
            return outputs
        name = self._op_name(layer.name if self.count == 0 else f"{layer.name}/{op_type}")
        self.count += 1
        self.ops.append(Op(op_type, name, ins, outputs, attrs, origin=layer.origin))
        return outputs

    def op1(self, op_type: str, inputs: Sequence[str], out: str | None = None,
            attrs: dict | None = None) -> str:
        """``op`` with one output (named ``out`` when given)."""
        return self.op(op_type, inputs, [out] if out else 1, attrs)[0]


def bin_path(xml: Path) -> Path:
    return xml.with_suffix(".bin")


def resolve_path(source: Any) -> Path:
    if not isinstance(source, (str, os.PathLike)):
        raise ModelError("an OpenVINO IR is read from its .xml path", field="model",
                         value=type(source).__name__)
    p = Path(os.fspath(source))
    if not p.is_file():
        raise ModelError("model file not found", field="model", value=str(p))
    return p
