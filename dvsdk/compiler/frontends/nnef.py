"""NNEF -> IR: a model directory or archive, parsed by the Khronos ``nnef`` package.

Implements the NNEF 1.0 container (S1 "Container Format"; ``formats.md`` §4.4): a directory
with ``graph.nnef`` (the structure), one ``<label>.dat`` tensor file per ``variable`` and an
optional ``graph.quant``; or a ``.tgz``/``.tar.gz``/``.tar`` archive of one (files at the top
or in one folder), unpacked into a temporary directory with every member checked: regular
files and folders only, no absolute or ``..`` paths, at most :data:`MAX_ARCHIVE_MEMBERS`
members and :data:`MAX_ARCHIVE_BYTES` bytes.

The structure goes through the Khronos parser (``pip install dvsdk[nnef]``), which expands
the standard compound fragments listed in :data:`~.nnef_ops.LOWERED` into their definitions;
shapes come from its ``infer_shapes``.  Tensor files are read and checked by
:mod:`.nnef_dat` (our code), and each must have the shape its variable declares (trailing
singleton dimensions are implicit, S1 §2.5).  Quantized tensor data takes its float value
from ``graph.quant``; activation quantization lines are hints an FP16 target ignores.

The graph is NCHW like the IR; ops carry ``origin = "<nnef op> <first output>"`` (the op of
the source document, also for the primitives a compound expands into) so ``--report`` names
it.  Every unsupported op is listed, with its output name, in one UnsupportedOps.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from ...errors import ModelError, UnsupportedOps
from ..ir import Graph, Tensor
from . import nnef_dat
from .nnef_ops import LOWERED, OPS, Converter, Refused

__all__ = ["load", "model_dir", "EXPECTS"]

EXPECTS = ("a directory holding graph.nnef and its <label>.dat files (or that graph.nnef), "
           "or a .tgz/.tar.gz/.tar archive of one")
MAX_ARCHIVE_BYTES = 2 << 30
MAX_ARCHIVE_MEMBERS = 10_000
MAX_GRAPH_BYTES = 64 << 20
_TENSOR_OPS = ("external", "variable", "constant")
_DTYPES = {"scalar": np.float32, "integer": np.int64, "logical": np.bool_}
_LABEL = re.compile(r"[A-Za-z0-9_\-./\\]+")
_PLANEWISE = {
    "planewise_conv": (
        "fragment planewise_conv( input: tensor<scalar>, filter: tensor<scalar>, bias: "
        "tensor<scalar> = 0.0, border: string = 'constant', padding: (integer,integer)[] = [], "
        "stride: integer[] = [], dilation: integer[] = [] ) -> ( output: tensor<scalar> ) "
        "{ output = conv(input, filter, bias, border = border, padding = padding, stride = "
        "stride, dilation = dilation, groups = 0); }"),
    "planewise_deconv": (
        "fragment planewise_deconv( input: tensor<scalar>, filter: tensor<scalar>, bias: "
        "tensor<scalar> = 0.0, border: string = 'constant', padding: (integer,integer)[] = [], "
        "stride: integer[] = [], dilation: integer[] = [], output_shape: integer[] = [] ) -> "
        "( output: tensor<scalar> ) { output = deconv(input, filter, bias, border = border, "
        "padding = padding, stride = stride, dilation = dilation, output_shape = output_shape, "
        "groups = 0); }"),
}


# --------------------------------------------------------------------------- container
def _fail(message: str, where: Any, **kw: Any) -> ModelError:
    return ModelError(message, field="model", value=str(where), **kw)


@contextmanager
def model_dir(source: str | os.PathLike) -> Iterator[tuple[Path, Path]]:
    """(directory, structure file) of the model: ``source`` itself with its ``graph.nnef``,
    an ``.nnef`` document and its folder, or an archive unpacked (checked) into a temporary
    directory removed afterwards."""
    p = Path(source)
    if not p.exists():
        raise _fail("model file not found", p)
    if p.is_dir():
        if not (p / "graph.nnef").is_file():
            raise _fail("NNEF model directory has no graph.nnef", p, limit=EXPECTS)
        yield p, p / "graph.nnef"
        return
    if p.name.lower().endswith(".nnef"):
        yield p.parent, p
        return
    if not tarfile.is_tarfile(p):
        raise _fail("not an NNEF model", p, limit=EXPECTS)
    tmp = tempfile.mkdtemp(prefix="dvsdk-nnef-")
    try:
        root = _extract(p, Path(tmp))
        yield root, root / "graph.nnef"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _extract(archive: Path, dest: Path) -> Path:
    """Unpack ``archive`` into ``dest`` member by member; the folder holding graph.nnef."""
    total = count = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for m in tar:
                count += 1
                if count > MAX_ARCHIVE_MEMBERS:
                    raise _fail("archive has too many members", archive,
                                limit=MAX_ARCHIVE_MEMBERS)
                parts = PurePosixPath(m.name).parts
                if m.name.startswith(("/", "\\")) or ".." in parts or any(
                        "\\" in s or ":" in s for s in parts):
                    raise ModelError("archive member path leaves the archive",
                                     field=f"{archive.name} member", value=m.name,
                                     limit="relative paths without '..'")
                if not parts:
                    continue
                target = dest.joinpath(*parts)
                if m.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not m.isfile():
                    raise ModelError("archive member is not a regular file",
                                     field=f"{archive.name} member", value=m.name,
                                     limit="regular files and folders (no links or devices)")
                total += m.size
                if total > MAX_ARCHIVE_BYTES:
                    raise _fail("archive unpacks to too many bytes", archive,
                                limit=f"{MAX_ARCHIVE_BYTES} bytes")
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None  # a regular file
                with src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise _fail(f"cannot unpack archive ({type(exc).__name__}: {str(exc)[:100]})",
                    archive, limit=EXPECTS) from exc
    if (dest / "graph.nnef").is_file():
        return dest
    subdirs = [d for d in dest.iterdir() if d.is_dir()]
    files = [f for f in dest.iterdir() if not f.is_dir()]
    if len(subdirs) == 1 and not files and (subdirs[0] / "graph.nnef").is_file():
        return subdirs[0]
    raise _fail("archive holds no graph.nnef", archive, limit=EXPECTS)


# --------------------------------------------------------------------------- parsing
def _import_nnef() -> Any:
    try:
        import nnef
    except ImportError:
        raise ModelError("reading NNEF models needs the Khronos NNEF parser", field="format",
                         value="nnef", hint="pip install dvsdk[nnef]") from None
    return nnef


def _read_text(path: Path, limit: int) -> str:
    size = path.stat().st_size
    if size > limit:
        raise ModelError("file is too large", field=path.name, value=size, limit=limit)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError("file is not UTF-8 text", field=path.name,
                         value=f"byte {exc.start}") from None


def _with_planewise(text: str) -> str:
    """Define the provisional ``planewise_conv``/``planewise_deconv`` (depth-wise conv and
    deconv) when the document uses them, on the ``version`` line so line numbers stay."""
    used = [n for n in _PLANEWISE if re.search(rf"\b{n}\s*\(", text)
            and not re.search(rf"\bfragment\s+{n}\b", text)]
    m = re.search(r"\bversion\s+\d+\.\d+\s*;", text)
    if not used or m is None:
        return text
    extra = " extension KHR_enable_fragment_definitions; " + " ".join(_PLANEWISE[n] for n in used)
    return text[: m.end()] + extra + text[m.end():]


def _parse(nnef: Any, text: str, quant: str | None, lowered: list[str]) -> Any:
    try:
        return nnef.parse_string(text, quant, lowered=lowered)
    except nnef.Error as exc:
        raise ModelError(f"cannot parse graph.nnef: {exc}", field="graph.nnef") from None


def _outputs(op: Any) -> list[str]:
    outs: list[str] = []
    for v in op.outputs.values():
        outs.extend(str(x) for x in (v if isinstance(v, list) else [v]))
    return outs


def _origins(orig: list, final: list, lowered: set[str]) -> list[str]:
    """For every op of the lowered graph, the source op it comes from ("<op> <output>"):
    a compound expands in place into ops that end once all its outputs are produced."""
    res: list[str] = []
    j = 0
    for u in orig:
        label = f"{u.name} {_outputs(u)[0]}"
        need = set(_outputs(u))
        if u.name not in lowered:
            if j >= len(final) or set(_outputs(final[j])) != need:
                break
            res.append(label)
            j += 1
            continue
        while need and j < len(final):
            need -= set(_outputs(final[j]))
            res.append(label)
            j += 1
    if j != len(final) or len(res) != len(final):  # no clean match: name each op itself
        return [f"{op.name} {_outputs(op)[0]}" for op in final]
    return res


# --------------------------------------------------------------------------- tensors
def _dat_path(root: Path, label: str) -> tuple[Path, str]:
    if not _LABEL.fullmatch(label):
        raise ModelError("variable label has characters NNEF does not allow", field="label",
                         value=label, limit="[A-Za-z0-9_-./\\]")
    rel = PurePosixPath(*[s for s in label.replace("\\", "/").split("/") if s not in ("", ".")])
    if ".." in rel.parts or not rel.parts:
        raise ModelError("variable label leaves the model directory", field="label",
                         value=label, limit="a path inside the model directory")
    name = f"{rel}.dat"
    path = root / name
    try:
        inside = path.resolve().is_relative_to(root.resolve())
    except OSError:
        inside = False
    if not inside:
        raise ModelError("variable file leaves the model directory", field="label",
                         value=label, limit="a path inside the model directory")
    if not path.is_file():
        raise ModelError("tensor file of a variable is missing", field=f"variable {label!r}",
                         value=name, limit="<label>.dat beside graph.nnef")
    return path, name


def _strip(shape: Any) -> tuple[int, ...]:
    s = [int(v) for v in shape]
    while s and s[-1] == 1:
        s.pop()
    return tuple(s)


def _variable(root: Path, op: Any, quant: dict, cache: dict) -> np.ndarray:
    label = str(op.attribs["label"])
    shape = tuple(int(v) for v in op.attribs["shape"])
    key = label.lower()
    if key not in cache:
        path, name = _dat_path(root, label)
        items, h = nnef_dat.read_dat(path, name)
        if h.kind in ("quint", "qint"):
            items = nnef_dat.dequantize(items, h, quant, name)
        if _strip(h.shape) != _strip(shape):
            raise ModelError("tensor file extents differ from the variable's shape",
                             field=f"{name} extents", value=list(h.shape), limit=list(shape))
        cache[key] = items
    items = cache[key]
    dtype = _DTYPES.get(str(op.dtype), np.float32)
    if _strip(items.shape) != _strip(shape):
        raise ModelError("variables sharing a label have different shapes",
                         field=f"variable {label!r}", value=list(items.shape), limit=list(shape))
    if dtype is np.bool_ and items.dtype != np.bool_:
        raise ModelError("logical variable stored as numbers", field=f"variable {label!r}",
                         value=str(items.dtype), limit="bool items")
    return np.ascontiguousarray(items.reshape(shape).astype(dtype))


def _constant(op: Any) -> np.ndarray:
    shape = tuple(int(v) for v in op.attribs["shape"])
    value = np.asarray(op.attribs["value"], dtype=_DTYPES.get(str(op.dtype), np.float32))
    volume = math.prod(shape)
    if value.size == 1:
        return np.full(shape, value.reshape(-1)[0], value.dtype)
    if value.size != volume:
        raise ModelError("constant value has the wrong length", field=f"constant "
                         f"{_outputs(op)[0]}", value=int(value.size), limit=f"1 or {volume}")
    return value.reshape(shape)


# --------------------------------------------------------------------------- loader
def load_dir(root: Path, graph_file: Path | None = None,
             input_size: tuple[int, int] | None = None) -> Graph:
    """Read the NNEF model in directory ``root`` (structure ``graph_file``, default
    ``root/graph.nnef``) into the IR."""
    nnef = _import_nnef()
    text = _with_planewise(_read_text(graph_file or root / "graph.nnef", MAX_GRAPH_BYTES))
    quant_path = root / "graph.quant"
    quant = _read_text(quant_path, MAX_GRAPH_BYTES) if quant_path.is_file() else None
    orig = _parse(nnef, text, quant, [])
    g, lowered = orig, []
    for _ in range(8):  # compounds within compounds: a few rounds at most
        more = sorted({op.name for op in g.operations if op.name not in OPS
                       and op.name in LOWERED} - set(lowered))
        if not more:
            break
        lowered += more
        g = _parse(nnef, text, quant, lowered)
    unknown = [(op.name, _outputs(op)[0]) for op in g.operations
               if op.name not in OPS and op.name not in _TENSOR_OPS]
    if any(name not in nnef.StandardOperations for name, _ in unknown):
        raise UnsupportedOps(unknown)  # custom fragments: no shapes to go on with

    if input_size is not None and (len(input_size) != 2 or min(input_size) <= 0):
        raise ModelError("input size must be two positive extents", field="input_size",
                         value=tuple(input_size), limit="(H, W) > 0")
    externals: dict[str, list[int]] = {}
    for op in g.operations:
        if op.name == "external":
            shape = [int(v) for v in op.attribs["shape"]]
            if input_size is not None and len(shape) == 4:
                shape[2:] = [int(v) for v in input_size]
            externals[_outputs(op)[0]] = shape
    if input_size is not None and not any(len(s) == 4 for s in externals.values()):
        raise ModelError("--input-size applies to 4-D inputs; the model has none",
                         field="input_size", value=tuple(input_size),
                         limit={k: tuple(v) for k, v in externals.items()})
    try:
        nnef.infer_shapes(g, external_shapes=externals)
    except AssertionError as exc:  # the parser's only bare assert: graph.quant array shapes
        raise ModelError("a graph.quant parameter does not fit its tensor's shape",
                         field="graph.quant", value=str(exc) or None) from None
    except (nnef.Error, ValueError, TypeError, IndexError) as exc:
        raise ModelError(f"NNEF shape inference failed: {exc}", field="graph.nnef") from None
    shapes = {n: tuple(int(d) for d in t.shape) for n, t in g.tensors.items()
              if t.shape is not None}

    tensors: dict[str, Tensor] = {}
    inputs: list[str] = []
    cache: dict[str, np.ndarray] = {}
    for op in g.operations:
        if op.name not in _TENSOR_OPS:
            continue
        name = _outputs(op)[0]
        if op.name == "external":
            tensors[name] = Tensor(name, tuple(externals[name]),
                                   _DTYPES.get(str(op.dtype), np.float32))
            inputs.append(name)
        elif op.name == "variable":
            tensors[name] = Tensor(name, const=_variable(
                root, op, g.tensors[name].quantization, cache))
        else:
            tensors[name] = Tensor(name, const=_constant(op))

    cv = Converter(shapes, tensors)
    origins = _origins(orig.operations, g.operations, set(lowered))
    refused: list[tuple[str, str]] = []
    for op, origin in zip(g.operations, origins):
        if op.name in _TENSOR_OPS:
            continue
        cv.origin, cv.base = origin, _outputs(op)[0]
        if op.name not in OPS:
            refused.append((op.name, cv.base))
            continue
        try:
            OPS[op.name].convert(cv, op)
        except Refused as r:
            refused.append((f"{op.name}[{r.reason}]", cv.base))
        except (KeyError, IndexError, ValueError, TypeError) as exc:  # malformed arguments
            raise ModelError(f"cannot convert the op ({type(exc).__name__}: {exc})",
                             field=origin) from None
    if refused:
        raise UnsupportedOps(refused)

    outputs = [str(o) for o in g.outputs]
    produced = {o for op in cv.ops for o in op.outputs}
    for i, o in enumerate(outputs):
        if o not in produced:  # an output that is an input or a constant
            cv.origin, cv.base = f"copy {o}", o
            outputs[i] = cv.emit("Identity", [o], [cv.fresh(f"{o}_out")])
    graph = Graph(cv.tensors, cv.ops, inputs, outputs, 13, str(g.name))
    graph.topo_sort()
    graph.validate(require_shapes=False)
    return graph


def load(source: str | os.PathLike, input_size: tuple[int, int] | None = None) -> Graph:
    """The frontend entry point (:mod:`dvsdk.compiler.frontends`): an NNEF model directory,
    its ``graph.nnef`` or an archive of it; ``input_size`` (H, W) replaces the spatial
    extents of every 4-D ``external``."""
    if not isinstance(source, (str, os.PathLike)):
        raise ModelError("an NNEF model is read from a path", field="model",
                         value=type(source).__name__, limit=EXPECTS)
    with model_dir(source) as (root, graph_file):
        return load_dir(root, graph_file, input_size)
