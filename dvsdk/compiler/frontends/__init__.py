"""Model formats into the graph IR (:mod:`dvsdk.compiler.ir`), one module per format.

Every frontend module has ``load(source, input_size=None) -> Graph``: ``source`` is what the
user holds (a path, or the format's in-memory object), ``input_size`` an optional (H, W)
applied to every 4-D input with free spatial dimensions.  The graph uses the IR's ONNX op
types and NCHW semantics, whatever the source layout; a frontend whose format is NHWC says so
in ``Graph.layout`` so the runtime converts at the boundary.  :func:`load` picks the
frontend from the file (:func:`detect`) unless ``fmt`` names it.

Each frontend imports its format library only when it loads a model, so a board with numpy
alone never needs them; a missing library is a :class:`~dvsdk.errors.ModelError` naming the
pip extra that provides it.
"""

from __future__ import annotations

import importlib
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import ModelError
from ..ir import Graph


@dataclass(frozen=True)
class Frontend:
    """One model format: how it is recognized and which module reads it."""

    name: str             # the --format value
    title: str            # for messages and the README tables
    module: str           # dvsdk.compiler.frontends.<module>
    expects: str          # what a file of this format looks like, for error messages
    suffixes: tuple[str, ...] = ()


FRONTENDS: dict[str, Frontend] = {f.name: f for f in (
    Frontend("onnx", "ONNX", "onnx", "a .onnx file", (".onnx",)),
    Frontend("nnef", "NNEF", "nnef", "a directory holding graph.nnef (+ .dat files), or a "
             ".tgz/.tar.gz/.tar of one", (".nnef", ".tgz", ".tar.gz", ".tar")),
    Frontend("openvino", "OpenVINO IR", "openvino", "an .xml file with its .bin beside it",
             (".xml",)),
    Frontend("keras", "Keras", "keras", "a Keras .h5 model file", (".h5", ".hdf5")),
)}


def detect(path: str | os.PathLike) -> str:
    """The format of the model at ``path``, from its name and, for directories, contents."""
    p = Path(path)
    if not p.exists():
        raise ModelError("model file not found", field="model", value=str(p))
    name = p.name.lower()
    for fe in FRONTENDS.values():
        if any(name.endswith(s) for s in fe.suffixes):
            return fe.name
    if p.is_dir() and (p / "graph.nnef").is_file():
        return "nnef"
    if p.is_dir():
        raise ModelError("the model is a directory that holds no model this SDK reads",
                         field="model", value=str(p), limit=expected())
    if tarfile.is_tarfile(p):
        raise ModelError("unknown archive", field="model", value=str(p), limit=expected())
    raise ModelError("unknown model format", field="model", value=str(p), limit=expected(),
                     hint="--format names the format if the file name does not")


def expected() -> str:
    """The formats :func:`detect` recognizes, for error messages."""
    return "; ".join(f"{fe.title}: {fe.expects}" for fe in FRONTENDS.values())


def source_files(model: Any) -> list[tuple[str, Path]]:
    """The files a model on disk consists of, as (what, path) for
    :func:`dvsdk.fsutil.check_outputs`: the model file, an OpenVINO IR's ``.bin`` beside
    its ``.xml``, every file of a model directory (NNEF); none for an in-memory model."""
    if not isinstance(model, (str, os.PathLike)):
        return []
    p = Path(model)
    if p.is_dir():
        return [("a file of the model", Path(root) / f)
                for root, _, names in os.walk(p) for f in names]
    files = [("the model itself", p)]
    if p.suffix.lower() == ".xml":
        files.append(("the model's weights", p.with_suffix(".bin")))
    if p.suffix.lower() == ".onnx" and p.is_file():
        files += [("the model's external data", f) for f in _onnx_external_files(p)]
    return files


def _onnx_external_files(path: Path) -> list[Path]:
    """The files an ONNX model keeps its large tensors in (``external_data`` locations,
    relative to the model's folder), read from the model without loading them."""
    try:
        import onnx

        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - an unreadable model: its reader says why, later
        return []

    def tensors(graph):  # initializers and constant attributes, subgraphs included
        yield from graph.initializer
        for node in graph.node:
            for a in node.attribute:
                if a.HasField("t"):
                    yield a.t
                for sub in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                    yield from tensors(sub)

    found = {path.parent / e.value for t in tensors(model.graph)
             if t.data_location == onnx.TensorProto.EXTERNAL
             for e in t.external_data if e.key == "location"}
    return sorted(found)


def frontend(fmt: str) -> Any:
    """The module that reads format ``fmt``."""
    if fmt not in FRONTENDS:
        raise ModelError("unknown model format", field="format", value=fmt,
                         limit=sorted(FRONTENDS))
    return importlib.import_module(f"{__name__}.{FRONTENDS[fmt].module}")


def load(model: Any, fmt: str | None = None,
         input_size: tuple[int, int] | None = None) -> Graph:
    """Read ``model`` (a path, or an in-memory model of format ``fmt``) into the IR."""
    if fmt is None:
        fmt = detect(model) if isinstance(model, (str, os.PathLike)) else _guess_object(model)
    return frontend(fmt).load(model, input_size)


def _guess_object(model: Any) -> str:
    """In-memory models: ONNX bytes or a ModelProto."""
    if isinstance(model, (bytes, bytearray)) or type(model).__name__ == "ModelProto":
        return "onnx"
    raise ModelError("cannot tell the model's format", field="model",
                     value=type(model).__name__, hint="pass a path, or fmt=")
