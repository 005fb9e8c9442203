"""The golden pair's tolerance and precision warnings (firmware_spec/netbin.md "golden"),
and the preprocessing the compiler refuses.  The formula is re-derived here from the stored
reference and the simulator's error, not read back from the compiler."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import dvsdk
from dvsdk.compiler.build import Options
from dvsdk.compiler.golden import PrecisionWarning
from dvsdk.errors import ModelError

from . import onnx_models as M
from .onnx_models import make_model


@pytest.fixture(scope="module")
def sim():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


def _conv(scale: float, k: float = 0.5, size: int = 8) -> object:
    """A 3x3 conv (on the DV700) whose output is about ``scale`` in magnitude."""
    rng = np.random.default_rng(11)
    wt = (rng.standard_normal((8, 8, 3, 3)) * k * scale).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    return make_model([node], [("x", (1, 8, size, size))], ["y"], {"w": wt})


def _stored(net, name):
    ref = net.array(net.meta["golden"]["outputs"][name], "GOLD").astype(np.float64)
    return ref, float(net.meta["golden"]["sim_max_abs_error"][name])


def test_tolerance_is_relative_to_the_output_range(sim) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        net = dvsdk.compile(_conv(1.0))
    assert "warnings" not in net.meta
    ref, err = _stored(net, "y")
    big = max(ref.max() - ref.min(), np.abs(ref).max())
    tol = net.meta["golden"]["tolerance"]["y"]
    assert tol == pytest.approx(min(max(4 * err, big / 1024), big / 32))
    assert 0 < err < big / 1024 * 4  # FP16 on a 72-term dot product: well inside
    with dvsdk.load(net, sim) as n:
        assert n.selftest()["passed"]


def test_tiny_outputs_fail_the_selftest_and_warn(sim) -> None:
    """Outputs spanning ~1e-9 (random-init torchvision MobileNets) are below FP16's
    normal range: the simulator loses them, and the self-test used to pass anyway (any
    error within 1e-3 absolute)."""
    with pytest.warns(PrecisionWarning) as caught:
        net = dvsdk.compile(_conv(1e-9))
    kinds = [w["kind"] for w in net.meta["warnings"]]
    assert kinds == ["fp16_subnormal_output", "golden_mismatch"], net.meta["warnings"]
    assert all(w["tensor"] == "y" and w["message"] for w in net.meta["warnings"])
    assert [str(c.message) for c in caught] == [w["message"] for w in net.meta["warnings"]]
    ref, err = _stored(net, "y")
    assert np.abs(ref).max() < 6.1e-5
    assert err > np.ptp(ref) / 32  # the simulator is off by more than the cap ...
    with dvsdk.load(net, sim) as n:
        result = n.selftest()
    assert not result["passed"], result  # ... so the self-test says so
    reread = dvsdk.netfile.decode(dvsdk.netfile.encode(net), "net.bin")
    assert reread.meta["warnings"] == net.meta["warnings"]  # the CLI can print them


def test_fp16_overflow_records_no_pair_and_the_file_loads(tmp_path, sim) -> None:
    """Outputs above 65504 overflow FP16 on the DV700: inf on the simulator.  The compiler
    warns and records no golden pair, with the reason; the file loads and runs, and
    ``--selftest`` says why there is no pair.  (Before issue 25 it recorded a pair whose
    ``sim_max_abs_error`` was null, which the reader refused: exit 2 for any run.)"""
    from dvsdk.cli.run import run as dvsdk_run

    path = tmp_path / "overflow.bin"
    with pytest.warns(PrecisionWarning, match="non-finite.*no golden pair is recorded"):
        net = dvsdk.compile(_conv(1.0, k=8e3), path)
    assert [w["kind"] for w in net.meta["warnings"]] == ["golden_mismatch"]
    assert "golden" not in net.meta and net.golden == b""
    assert "'y' is not finite" in net.meta["golden_omitted"]
    with dvsdk.load(path, sim) as n:
        assert np.isinf(n.run(np.ones((1, 8, 8, 8), np.float32))["y"]).any()
        with pytest.raises(dvsdk.errors.NetFileError, match="no golden pair.*not finite"):
            n.selftest()
    np.save(tmp_path / "x.npy", np.zeros((1, 8, 8, 8), np.float32))   # (no overflow)
    assert dvsdk_run([str(path), "--input", str(tmp_path / "x.npy")]) == 0
    assert dvsdk_run([str(path), "--selftest"]) == 2


def test_no_golden_says_so() -> None:
    net = dvsdk.compile(_conv(1.0), golden=False)
    assert "golden" not in net.meta and "--no-golden" in net.meta["golden_omitted"]
    dvsdk.netfile.decode(dvsdk.netfile.encode(net))


def test_the_compiler_never_returns_a_file_its_reader_refuses(tmp_path, monkeypatch) -> None:
    """Whatever goes wrong in the compiler's own steps, the file it would write passes the
    reader's checks or is a ModelError, and nothing is written."""
    import dvsdk.compiler.build as build

    def bad_golden(net, graph):   # what the compiler wrote before issue 25
        net.meta["golden"] = {"inputs": {}, "outputs": {}, "tolerance": {},
                              "sim_max_abs_error": {"y": None}}

    monkeypatch.setattr(build, "add_golden", bad_golden)
    out = tmp_path / "net.bin"
    with pytest.raises(ModelError, match="internal: the compiled net.bin fails") as ei:
        dvsdk.compile(_conv(1.0), out)
    assert ei.value.field.startswith("golden")
    assert not out.exists()


def test_light_onnx_models_that_overflow_load() -> None:
    """The ONNX package's "light" squeezenet overflows FP16 on the golden input (one of
    six light models that did): it compiles to a file that loads."""
    import os

    import onnx

    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light",
                        "light_squeezenet.onnx")
    if not os.path.exists(path):
        pytest.skip("this onnx package ships no light models")
    with pytest.warns(PrecisionWarning):
        net = dvsdk.compile(path)
    assert "golden_omitted" in net.meta
    with dvsdk.load(dvsdk.netfile.decode(dvsdk.netfile.encode(net)), "sim://") as n:
        assert n.outputs


def test_bool_output_golden(sim) -> None:
    """A bool ReduceMax output: TypeError (numpy boolean subtract) building the golden pair."""
    nodes = [helper.make_node("Greater", ["x", "h"], ["g"]),
             helper.make_node("ReduceMax", ["g", "ax"], ["y"], keepdims=0)]
    model = make_model(nodes, [("x", (1, 4, 5, 5))], [("y", TensorProto.BOOL)],
                       {"h": np.float32(0.5), "ax": np.array([2, 3], np.int64)}, opset=20)
    net = dvsdk.compile(model)
    assert net.meta["golden"]["tolerance"]["y"] == 0
    x = net.array(net.meta["golden"]["inputs"]["x"], "GOLD")
    ref = net.array(net.meta["golden"]["outputs"]["y"], "GOLD")
    np.testing.assert_array_equal(ref, (x > 0.5).any(axis=(2, 3)))
    with dvsdk.load(net, sim) as n:
        assert n.selftest()["passed"]


def test_integer_index_input_golden(sim) -> None:
    """Integer inputs get small positive golden values, or zeros where those index out of
    range (here an axis of size 1)."""
    node = helper.make_node("Gather", ["d", "i"], ["y"], axis=0)
    model = make_model([node], [("i", (3,), TensorProto.INT64)], ["y"],
                       {"d": np.arange(6, dtype=np.float32).reshape(1, 6)})
    net = dvsdk.compile(model)
    idx = net.array(net.meta["golden"]["inputs"]["i"], "GOLD")
    assert idx.dtype == np.int64 and not idx.any()
    with dvsdk.load(net, sim) as n:
        assert n.selftest()["passed"]


# --------------------------------------------------------------------------- preprocessing
@pytest.mark.parametrize("field,value", [
    ("std", (0.0, 0.0, 0.0)), ("std", (1.0, -1.0, 1.0)), ("std", (1.0, float("nan"), 1.0)),
    ("std", (float("inf"),) * 3), ("mean", (0.0, float("inf"), 0.0)),
    ("mean", (float("nan"),) * 3), ("mean", "1,2,3"), ("scale", 0.0), ("scale", float("inf")),
    ("scale", float("nan")), ("scale", "x"),
])
def test_bad_preprocessing_is_refused(field, value) -> None:
    """--std 0,0,0 compiled and every image then ran to NaN ("nan%", exit 0)."""
    with pytest.raises(ModelError) as err:
        dvsdk.compile(M.conv_add_relu(), golden=False, **{field: value})
    assert err.value.field == field
    with pytest.raises(ModelError):
        Options(**{field: value})


def test_good_preprocessing_is_recorded() -> None:
    net = dvsdk.compile(M.conv_add_relu(), golden=False, mean=(1, 2, 3), std=[58.4, 57.1, 57.4],
                        scale=-0.5)
    pre = net.meta["inputs"][0]["preprocess"]
    assert pre["mean"] == [1.0, 2.0, 3.0] and pre["std"] == [58.4, 57.1, 57.4]
    assert pre["scale"] == -0.5


def test_unknown_option_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="unknown compile option"):
        dvsdk.compile(M.conv_add_relu(), golden=False, stdev=(1, 1, 1))
