"""OpenVINO IR v11 files written by OpenVINO itself (tests/data/openvino, made by
tools/make_openvino_models.py): compiled, run on sim://, compared with OpenVINO's own runtime
(CPU plugin, f32 inference precision) at the suite's FP16 tolerance (tests/compile_harness.py).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.frontends import detect, load
from dvsdk.runtime.net import Net

from .compile_harness import assert_matches
from .conftest import DATA, ROOT

ov = pytest.importorskip("openvino")
OV = DATA / "openvino"
#: every IR v11 file and what it covers (see tools/make_openvino_models.py)
MODELS = ["digits_fp32", "digits_fp16", "convs", "pools", "shapes", "dynbatch", "layers_api",
          "shapes_api", "misc_api"]


def ov_reference(xml, feeds: list[np.ndarray]) -> list[np.ndarray]:
    core = ov.Core()
    compiled = core.compile_model(str(xml), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    res = compiled(feeds)
    return [res[o] for o in compiled.outputs]


def feeds_for(xml, seed: int = 3) -> list[np.ndarray]:
    model = ov.Core().read_model(str(xml))
    rng = np.random.default_rng(seed)
    return [rng.standard_normal([d if d > 0 else 1 for d in p.get_partial_shape()
                                 .get_min_shape()]).astype(np.float32) for p in model.inputs]


@pytest.fixture(scope="module")
def compiled():
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = compile(OV / f"{name}.xml", golden=False)
        return cache[name]
    return get


@pytest.mark.parametrize("name", MODELS)
def test_matches_openvino_runtime_on_the_simulator(name, compiled):
    xml = OV / f"{name}.xml"
    net = compiled(name)
    feeds = feeds_for(xml)
    refs = ov_reference(xml, feeds)
    with Net(net, "sim://") as n:
        out = n.run(dict(zip([i["name"] for i in net.meta["inputs"]], feeds)))
    names = [o["name"] for o in net.meta["outputs"]]
    assert len(names) == len(refs)
    for o, ref in zip(names, refs):
        assert_matches(out[o], ref, what=f"{name}:{o}")


def test_fp16_compressed_weights_are_the_stored_halves():
    """Const f16 + Convert(decompression) folds to float32 constants equal to the halves of
    the source weights (shapes.onnx's MatMul weight, which OpenVINO stores transposed)."""
    import onnx
    from onnx import numpy_helper

    assert 'element_type="f16"' in (OV / "shapes.xml").read_text()
    src = {i.name: numpy_helper.to_array(i) for i in onnx.load(OV / "shapes.onnx").graph
           .initializer}["wmm"]
    g = load(OV / "shapes.xml")
    mm = next(op for op in g.ops if op.name == "mm")
    w = g.const(mm.inputs[1])
    assert w.dtype == np.float32 and w.shape == src.shape
    assert np.array_equal(w, src.astype(np.float16).astype(np.float32))
    assert not np.array_equal(w, src)


def test_digits_cnn_classifies_held_out_digits_like_openvino(compiled):
    """The project's trained CNN, converted by OpenVINO (FP16 weights): on sim:// it agrees
    with OpenVINO's runtime on held-out digits and keeps its accuracy."""
    spec = importlib.util.spec_from_file_location(
        "train_digits", ROOT / "examples" / "models" / "train_digits.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    held = np.load(script.HELDOUT_PATH)
    images, labels = held["images"][:40], held["labels"][:40].astype(np.int64)
    x = np.concatenate([script.to_input(script.render(d)) for d in images])
    core = ov.Core()
    cm = core.compile_model(str(OV / "digits_fp16.xml"), "CPU",
                            {"INFERENCE_PRECISION_HINT": "f32"})
    ref = np.array([int(cm([xi[None]])[cm.outputs[0]].argmax()) for xi in x])
    net = compiled("digits_fp16")
    with Net(net, "sim://") as n:
        pred = np.array([int(n.run({"image": xi[None]})["probs"].argmax()) for xi in x])
    assert (pred == ref).mean() >= 0.97
    assert (pred == labels).mean() >= 0.9


@pytest.mark.parametrize("name", ["convs", "layers_api", "shapes_api", "digits_fp16"])
def test_report_names_the_ir_layer_of_every_placement(name, compiled):
    xml_text = (OV / f"{name}.xml").read_text()
    layers = set(re.findall(r'<layer id="\d+" name="([^"]+)" type="([^"]+)"', xml_text))
    report = compiled(name).meta["report"]
    assert report
    sourced = set()
    for r in report:
        if "source" in r:
            ltype, lname = r["source"].split(" ", 1)
            assert (lname, ltype) in layers, r
            sourced.add(r["op"])
        else:  # simplify.split_grouped_conv makes new ops without Op.origin (not the
            # frontend's: every op it emits has one); they keep the layer's name as a prefix
            assert re.fullmatch(r".+_(split|g\d+|concat)(_\d+)?", r["op"]), r
            assert any(r["op"].startswith(n) for n, _ in layers), r


def test_detected_by_suffix_and_loaded_through_the_seam():
    assert detect(OV / "convs.xml") == "openvino"
    g = load(OV / "convs.xml")
    assert g.layout == "NCHW" and g.inputs == ["x"] and g.outputs == ["out"]
    assert all(op.origin for op in g.ops)
    assert {op.origin.split(" ")[0] for op in g.ops} >= {
        "Convolution", "GroupConvolution", "ConvolutionBackpropData", "PReLU", "Clamp",
        "HSwish", "HardSigmoid", "Swish", "Elu", "Add", "Subtract", "Multiply"}


def test_free_batch_becomes_one_and_input_size_fills_free_dims(tmp_path):
    g = load(OV / "dynbatch.xml")
    assert g.tensors["x"].shape == (1, 3, 6, 6)
    with pytest.raises(Exception, match="conflicts with the model's fixed dimension"):
        load(OV / "dynbatch.xml", input_size=(8, 8))
    assert load(OV / "dynbatch.xml", input_size=(6, 6)).tensors["x"].shape == (1, 3, 6, 6)


def test_cli_compiles_an_ir_and_reports_source_layers(tmp_path):
    out = tmp_path / "net.bin"
    proc = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile", str(OV / "convs.xml"),
                           "-o", str(out), "--report"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "source layer" in proc.stdout
    assert "GroupConvolution " in proc.stdout and "ConvolutionBackpropData " in proc.stdout
    assert out.is_file()


def test_readme_openvino_tables_come_from_the_frontend_tables():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_ops_table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from dvsdk.compiler.frontends.openvino import LEGACY_LAYERS, V10_LAYERS

    block = gen_ops_table.render_openvino()
    for name in list(V10_LAYERS) + list(LEGACY_LAYERS):
        assert f"| `{name}` |" in block
    assert "| `Convolution` | `Conv` | DV700 |" in block
    assert "| `SoftMax` | `Softmax` | CPU |" in block
    readme = (ROOT / "README.md").read_text()
    assert block in readme, "run: python3 tools/gen_ops_table.py --write"
    stale = readme.replace("| `Convolution` | `Conv` | DV700 |", "| `Convolution` | x | y |")
    assert gen_ops_table.splice_all(stale) == readme


def test_dvsdk_compile_writes_a_net_bin_from_an_xml_path(tmp_path):
    import dvsdk

    out = tmp_path / "pools.bin"
    dvsdk.compile(str(OV / "pools.xml"), out)
    feeds = feeds_for(OV / "pools.xml")
    with dvsdk.load(out, "sim://") as n:
        y = n.run({"x": feeds[0]})
    for name, ref in zip(["probs", "rmean"], ov_reference(OV / "pools.xml", feeds)):
        assert_matches(y[name], ref, what=name)
