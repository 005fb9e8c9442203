"""The ONNX project's backend node tests: fetch, list and load them.

Each node test (``onnx/backend/test/data/node/<name>/``) is a ``model.onnx`` with one op (or,
``*_expanded``, its function body) and ``test_data_set_*/{input,output}_<i>.pb`` TensorProtos
computed by the ONNX reference implementation.  The data ships inside the ``onnx`` 1.22
wheel (later wheels dropped it), so :func:`fetch` downloads that wheel from the package
registry with pip and extracts only the node tests into a cache directory:
``$DVSDK_CACHE/onnx-node-tests/1.22.0`` (default ``~/.cache/dvsdk``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ONNX_VERSION = "1.22.0"
PREFIX = "onnx/backend/test/data/node/"


def cache_dir() -> Path:
    base = os.environ.get("DVSDK_CACHE") or Path.home() / ".cache" / "dvsdk"
    return Path(base) / "onnx-node-tests" / ONNX_VERSION


def fetch() -> Path | str:
    """The node-test directory, downloading it once; a string (the reason) if the package
    registry cannot be reached."""
    root = cache_dir() / "node"
    if (root / ".complete").is_file():
        return root
    cache_dir().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        try:
            r = subprocess.run(
                [sys.executable, "-m", "pip", "download", f"onnx=={ONNX_VERSION}", "--no-deps",
                 "--only-binary=:all:", "--disable-pip-version-check", "-q", "-d", tmp],
                capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"cannot run pip download onnx=={ONNX_VERSION}: {e}"
        wheels = sorted(Path(tmp).glob("onnx-*.whl"))
        if r.returncode or not wheels:
            last = (r.stderr.strip().splitlines() or ["no wheel"])[-1]
            return f"package registry unreachable (pip download onnx=={ONNX_VERSION}): {last}"
        staging = Path(tmp) / "node"
        with zipfile.ZipFile(wheels[0]) as z:
            for member in z.namelist():
                if member.startswith(PREFIX) and not member.endswith("/"):
                    dest = staging / member[len(PREFIX):]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(z.read(member))
        (staging / ".complete").write_text(f"onnx {ONNX_VERSION} backend node tests\n")
        try:
            staging.rename(root)  # atomic: a concurrent fetch either wins or finds it done
        except OSError:
            if not (root / ".complete").is_file():
                shutil.rmtree(root, ignore_errors=True)
                staging.rename(root)
    return root


@dataclass(frozen=True)
class NodeCase:
    """One node test, as shipped (``const=False``) or with every graph input but the first
    made an initializer holding its test value (``const=True``: weights, shapes, axes ...
    become constants, so the DV700 lowering and constant-shape paths run)."""

    name: str
    const: bool = False

    @property
    def id(self) -> str:
        return self.name + ("[const]" if self.const else "")


def cases(root: Path, accepted: frozenset[str]) -> list[NodeCase]:
    """Every node test all of whose ops are default-domain op types in ``accepted``, and a
    const variant of each with more than one graph input."""
    import onnx

    out = []
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        model = onnx.load(str(d / "model.onnx"), load_external_data=False)
        ops = {(n.domain, n.op_type) for n in model.graph.node}
        if not ops or any(dom not in ("", "ai.onnx") or t not in accepted for dom, t in ops):
            continue
        out.append(NodeCase(d.name))
        inits = {i.name for i in model.graph.initializer}
        inputs = [i for i in model.graph.input if i.name not in inits]
        if len(inputs) > 1 and all(i.type.WhichOneof("value") == "tensor_type" for i in inputs):
            out.append(NodeCase(d.name, const=True))
    return out


def _value(path: Path, type_proto) -> np.ndarray | None:
    """A test value as numpy, or None for sequences/optionals (never compiled: refused)."""
    import onnx
    from onnx import numpy_helper

    if type_proto.WhichOneof("value") != "tensor_type":
        return None
    return numpy_helper.to_array(onnx.load_tensor(str(path)))


def load(root: Path, case: NodeCase):
    """(model, {input name: value}, {output name: expected value}) of data set 0."""
    import onnx

    d = root / case.name
    model = onnx.load(str(d / "model.onnx"))
    data = d / "test_data_set_0"
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    feeds = {vi.name: _value(data / f"input_{k}.pb", vi.type)
             for k, vi in enumerate(graph_inputs)}
    expected = {vi.name: _value(data / f"output_{k}.pb", vi.type)
                for k, vi in enumerate(model.graph.output)}
    if case.const:
        from onnx import numpy_helper

        for vi in graph_inputs[1:]:
            model.graph.initializer.append(numpy_helper.from_array(feeds.pop(vi.name), vi.name))
    return model, feeds, expected
