"""Shared harness of the compiler end-to-end tests: the onnxruntime reference (graph
optimizations off), the error metric and report helpers (metric: tests/test_compile.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import helper

from dvsdk.compiler.build import compile
from dvsdk.runtime.net import Net

from . import onnx_models as M
from .onnx_models import NetBuilder, _f, _i, make_model

ort = pytest.importorskip("onnxruntime")


TOL_REL, TOL_ABS = 1e-2, 1e-3
Q_TOL_REL = 5e-2
SIM = "sim://"


# --------------------------------------------------------------------------- harness
def ort_reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray],
                  optimize: bool = False) -> list[np.ndarray]:
    """onnxruntime on the CPU provider, graph optimizations DISABLED unless ``optimize``
    (onnxruntime 1.31 mis-optimizes Pad -> MaxPool: test_compile_nets.py)."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def max_err(y: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    """(max-abs error, range of the reference)."""
    y, ref = np.asarray(y, np.float64), np.asarray(ref, np.float64)
    assert y.shape == ref.shape, f"shape {y.shape} != reference {ref.shape}"
    if ref.size == 0:
        return 0.0, 0.0
    return float(np.max(np.abs(y - ref))), float(ref.max() - ref.min())


def assert_matches(y: np.ndarray, ref: np.ndarray, tol_rel: float = TOL_REL,
                   tol_abs: float = TOL_ABS, what: str = "") -> float:
    """The suite's metric; returns the error as a fraction of the reference range."""
    err, span = max_err(y, ref)
    assert np.all(np.isfinite(y)), f"{what}: non-finite output"
    assert err <= tol_abs + tol_rel * span, (
        f"{what}: max-abs error {err:.4g} > {tol_abs:g} + {tol_rel:g} x range {span:.4g}")
    return err / max(span, 1e-12)


def run_case(model: onnx.ModelProto, feeds: dict[str, np.ndarray] | None = None, *,
             tol_rel: float = TOL_REL, tol_abs: float = TOL_ABS, device: str = SIM,
             positive: bool = False, **options) -> tuple:
    """Compile, run on the simulator, compare every output; returns (net, outputs)."""
    options.setdefault("golden", False)
    net = compile(model, **options)
    if feeds is None:
        feeds = M.make_feeds(model, seed=7, positive=positive)
    refs = ort_reference(model, feeds)
    with Net(net, device) as n:
        out = n.run(feeds)
    names = [o["name"] for o in net.meta["outputs"]]
    assert len(names) == len(refs)
    for name, ref in zip(names, refs):
        assert_matches(out[name], ref, tol_rel, tol_abs, name)
    return net, out


def where(net) -> list[tuple[str, str]]:
    """(op type, "hw" | "cpu") per source op, in report order."""
    return [(r["type"], r["where"]) for r in net.meta["report"]]


def cpu_types(net) -> list[str]:
    return sorted(r["type"] for r in net.meta["report"] if r["where"] == "cpu")


def detail(net, op_type: str) -> str:
    """Report detail (the hardware command's description) of the first op of a type."""
    for r in net.meta["report"]:
        if r["type"] == op_type:
            return r["detail"]
    raise AssertionError(f"{op_type} not in the report: {where(net)}")


def hw_commands(net) -> list[list[str]]:
    """Source op TYPES of every hardware command, in program order."""
    types = {r["op"]: r["type"] for r in net.meta["report"]}
    cmds = []
    for step in net.meta["program"]:
        if step["kind"] == "hw":
            for sources in step["command_sources"]:
                cmds.append([types.get(s, "?") for s in sources])
    return cmds


def hw_stage_count(net) -> int:
    """Hardware commands as lowered, before chaining: a chained command counts each command
    it was made of (``dvsdk.compiler.chain``)."""
    from dvsdk.compiler.chain import chain_kinds

    return sum(len(chain_kinds(k)) for s in net.meta["program"] if s["kind"] == "hw"
               for k in s["runs"])


def program_ops(net) -> list[str]:
    """Op types of every CPU step plus every op fused into a hardware command."""
    ops = [s["op"] for s in net.meta["program"] if s["kind"] == "cpu"]
    return ops + [t for cmd in hw_commands(net) for t in cmd]


def resize_after_conv(mode: str = "nearest", scales=(1, 1, 2, 2), **attrs
                      ) -> Callable[[], onnx.ModelProto]:
    def build() -> onnx.ModelProto:
        b = NetBuilder(32)
        y = b.node("Resize", [b.conv("x", 3, 8), "", b.const(_f(*scales), "scales")],
                   mode=mode, **attrs)
        return b.model([("x", (1, 3, 5, 4))], [b.conv(y, 8, 8)], "resize_" + mode)
    return build


def pad_maxpool() -> onnx.ModelProto:
    nodes = [helper.make_node("Pad", ["x", "p"], ["t"], name="pad"),
             helper.make_node("MaxPool", ["t"], ["y"], name="pool", kernel_shape=[3, 3])]
    return make_model(nodes, [("x", (1, 8, 6, 6))], ["y"], {"p": _i(0, 0, 1, 1, 0, 0, 1, 1)})


def S(name: str) -> Callable[[], onnx.ModelProto]:
    """A single-op builder of tests/onnx_models.py by case name."""
    return {c.name: c.build for c in M.SINGLE_OP_CASES}[name]
