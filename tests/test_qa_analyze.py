"""dvsdk analyze: per-layer error of the device against the source model in float32.

References are independent of the device path: onnxruntime (every compared tensor exposed
as a graph output) for ONNX.  A net with one deliberately damaged layer must be blamed on
that layer, not on the layers after it that merely carry the error."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dvsdk
from dvsdk.qa.analyze import analyze, compare, worst

from .conftest import ROOT
from .onnx_models import NetBuilder

MODELS = ROOT / "examples" / "models"


def chain(perturb: float = 0.0):
    """input → conv → relu → conv → relu → conv → relu → conv (8 channels, 12x12);
    ``perturb`` adds that share of noise to the second conv's weights only."""
    b = NetBuilder(31)
    x = "x"
    for i in range(4):
        x = b.conv(x, 8 if i else 3, 8)
        if i == 1 and perturb:
            name = b.nodes[-1].input[1]
            w = b.inits[name]
            b.inits[name] = (w + perturb * np.abs(w).mean() * np.random.default_rng(9)
                             .standard_normal(w.shape)).astype(np.float32)
        if i < 3:
            x = b.node("Relu", [x])
    return b.model([("x", (1, 3, 12, 12))], [x], "chain")


@pytest.mark.parametrize("chain", [True, False], ids=["shipped", "no_chain"])
def test_digits_every_layer_within_fp16_error(chain):
    # the shipped net chains its convs and pools into one command (one tensor compared);
    # compiled with --no-chain, every layer's output is compared
    net = MODELS / "digits.bin" if chain else dvsdk.compile(MODELS / "digits.onnx",
                                                             golden=False, chain=False)
    with dvsdk.load(net) as n:
        x = np.random.default_rng(1).uniform(0, 1, (1, 1, 16, 16)).astype(np.float32)
        rows = analyze(n, MODELS / "digits.onnx", x)
    assert len(rows) >= (3 if chain else 4)
    assert rows[-1].tensor == "probs" and rows[-1].where == "cpu"
    assert {r.where for r in rows} == {"hw", "cpu"}
    for r in rows:
        assert r.rel < 5e-3 and r.cosine > 0.9999, r


def test_the_damaged_layer_is_blamed_first():
    good, bad = chain(), chain(perturb=0.3)
    # (a command per layer: chained, the four convs would be one command and one tensor)
    net = dvsdk.compile(bad.SerializeToString(), golden=False, chain=False)
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    with dvsdk.load(net) as n:
        rows = analyze(n, good.SerializeToString(), x)
    convs = [r for r in rows if r.where == "hw"]
    assert len(convs) == 4
    first = worst(rows, 1)[0]
    assert first.tensor == convs[1].tensor            # the perturbed conv (with its ReLU)
    assert convs[0].rel < 5e-3                          # before it: FP16 error only
    assert all(r.rel > 0.05 for r in convs[1:])         # after it: the error is carried
    assert all(r.added < first.added / 3 for r in convs[2:])


def test_compare_known_answers():
    ref = np.array([0.0, 1.0, 2.0, 4.0])
    max_abs, rel, cos, rng = compare(ref + [0, 0, 0.5, 0], ref)
    assert (max_abs, rel, rng) == (0.5, 0.125, 4.0)
    assert cos == pytest.approx(float((ref + [0, 0, .5, 0]) @ ref
                                      / np.linalg.norm(ref + [0, 0, .5, 0])
                                      / np.linalg.norm(ref)))
    assert compare(np.array([np.inf, 1.0]), np.array([0.0, 1.0]))[0] == float("inf")


def test_cli_table_json_and_plot(tmp_path, capsys):
    from dvsdk.cli.main import run

    net = MODELS / "digits.bin"
    png = tmp_path / "err.png"
    argv = ["analyze", str(net), "--reference", str(MODELS / "digits.onnx"), "--input",
            str(MODELS / "samples" / "seven_1442.png")]
    assert run(argv + ["--plot", str(png), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "<- worst" in out and "probs" in out and "tensors compared" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run(argv + ["--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert sum(r["worst"] for r in doc) == min(5, len(doc)) and all("cosine" in r for r in doc)


def test_cli_wrong_reference_is_one_clear_error(tmp_path, capsys):
    from dvsdk.cli.main import run

    other = tmp_path / "other.onnx"
    other.write_bytes(chain().SerializeToString())
    code = run(["analyze", str(MODELS / "digits.bin"), "--reference", str(other)])
    err = capsys.readouterr().err
    assert code == 2 and "reference" in err


@pytest.mark.parametrize("bad", ["corrupt", "invalid_graph", "missing"])
def test_cli_corrupt_or_unrunnable_reference_is_one_typed_error(bad, tmp_path, capsys):
    """A reference that is no ONNX file, one onnxruntime refuses, or none at all: exit 2
    with one line naming the reference, never "internal error" (issue 25 item 14)."""
    from onnx import TensorProto, helper

    from dvsdk.cli.main import run

    path = tmp_path / "ref.onnx"
    if bad == "corrupt":
        path.write_bytes(b"not a protobuf at all \xff\xfe")
    elif bad == "invalid_graph":  # parses, but a node reads a tensor nothing makes
        g = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["probs"])], "g",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                             [1, 1, 16, 16])],
                              [helper.make_tensor_value_info("probs", TensorProto.FLOAT, None)])
        path.write_bytes(helper.make_model(g).SerializeToString())
    code = run(["analyze", str(MODELS / "digits.bin"), "--reference", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err and len(err.strip().splitlines()) == 1
    assert "model" in err and ("ref.onnx" in err or "reference" in err)


def _weight_formats(netfile) -> dict[str, int]:
    """Per IR op with weights: the weight_fmt its command's run was packed with."""
    from dvsdk.driver.commands import ConvCommand

    fmts = {}
    steps = [s for s in netfile.meta["program"] if s["kind"] == "hw"]
    records = netfile.command_records()
    for s in steps:
        start, count = s["commands"]
        for k in range(count):
            cmd = ConvCommand.from_raw(records[start + k], lambda mem, offs: None)
            for op, run in zip(s["command_sources"][k], cmd.runs[: cmd.num_runs]):
                fmts[op] = run.weight_fmt
    return fmts


def test_quantize_skip_keeps_the_named_layers_fp16():
    model = chain().SerializeToString()
    full = dvsdk.compile(model, quantize=True, golden=False)
    layers = [r["op"] for r in full.meta["quantization"]]
    assert len(layers) == 4
    skip = dvsdk.compile(model, quantize=True, quantize_skip=layers[1:3], golden=False,
                         chain=False)  # (_weight_formats: one weighted layer a command)
    assert [r["op"] for r in skip.meta["quantization"]] == [layers[0], layers[3]]
    fmts = _weight_formats(skip)
    assert [fmts[n] for n in layers] == [3, 1, 1, 3]          # 8-bit table = 3, FP16 = 1
    assert set(_weight_formats(dvsdk.compile(model, quantize=True, golden=False,
                                             chain=False))[n] for n in layers) == {3}
    assert full.meta["weights"]["size"] < skip.meta["weights"]["size"]


def test_quantize_skip_refuses_unknown_layers():
    with pytest.raises(dvsdk.errors.ModelError, match="names no layer with weights"):
        dvsdk.compile(chain().SerializeToString(), quantize=True, quantize_skip=("nope",),
                      golden=False)
    with pytest.raises(dvsdk.errors.ModelError, match="needs quantize"):
        dvsdk.compile(chain().SerializeToString(), quantize_skip=("x",), golden=False)


def test_the_one_quantized_layer_is_found_first():
    model = chain().SerializeToString()
    layers = [r["op"] for r in dvsdk.compile(model, quantize=True,
                                             golden=False).meta["quantization"]]
    net = dvsdk.compile(model, quantize=True, golden=False, chain=False,
                        quantize_skip=[n for i, n in enumerate(layers) if i != 2])
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    with dvsdk.load(net) as n:
        rows = analyze(n, model, x)
    convs = [r for r in rows if r.where == "hw"]
    assert worst(rows, 1)[0].tensor == convs[2].tensor
    assert layers[2] in worst(rows, 1)[0].ops


def test_quantize_candidates_cli(tmp_path, capsys):
    from dvsdk.cli.main import run

    model = tmp_path / "chain.onnx"
    model.write_bytes(chain().SerializeToString())
    net = tmp_path / "chain.bin"
    dvsdk.compile(model, net, golden=False)
    assert run(["analyze", str(net), "--reference", str(model), "--quantize-candidates",
                "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["q8_bytes"] < doc["fp16_bytes"] and len(doc["layers"]) == 4
    assert sum(c["saved_bytes"] for c in doc["layers"]) == doc["fp16_bytes"] - doc["q8_bytes"]
    assert all(c["rel_error"] >= 0 for c in doc["layers"])


@pytest.mark.parametrize("model", ["nnef/digits.nnef", "openvino/digits_fp32.xml",
                                   "keras/k3_convs.h5"])
def test_other_formats_are_compared_with_dvsdks_own_float32_interpreter(model):
    """NNEF, OpenVINO IR and Keras: the reference is the frontend's graph run by
    dvsdk.compiler.interpret (float32), independent of the device path."""
    path = ROOT / "tests" / "data" / model
    net = dvsdk.compile(path, golden=False)
    with dvsdk.load(net) as n:
        x = {i["name"]: np.random.default_rng(4).uniform(0, 1, i["shape"]).astype(np.float32)
             for i in n.inputs}
        rows = analyze(n, path, x)
    assert len(rows) >= 3
    assert max(r.rel for r in rows) < 0.02 and min(r.cosine for r in rows) > 0.999


def test_a_real_framework_export(tmp_path):
    """torch.onnx.export's MobileNetV2-style network (tests/data): every compared tensor."""
    model = ROOT / "tests" / "data" / "torch_mbv2_tiny.onnx"
    net = dvsdk.compile(model, golden=False)
    with dvsdk.load(net) as n:
        x = np.random.default_rng(5).uniform(0, 1, n.inputs[0]["shape"]).astype(np.float32)
        rows = analyze(n, model, x)
    assert len(rows) > 10 and rows[-1].where == "cpu"          # the final Softmax
    assert max(r.rel for r in rows) < 0.02
