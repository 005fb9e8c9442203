"""Outputs never destroy inputs (issue 25, item 13).

``dvsdk-run net.bin img.png --save net.bin`` (and ``--trace``, ``--record``,
``--save-mask``, or any of them naming the image), ``dvsdk eval ... --confusion net.bin``,
``dvsdk analyze ... --plot net.bin`` and ``dvsdk.compile("m.onnx", "m.onnx")`` overwrote
their own inputs.  Every writer now refuses a path that is one of its inputs, compared by
``os.stat`` identity (a symlink or a hard link to an input counts), and every output flag
honours ``--force`` as dvsdk-compile does.  The API and the CLI share one validation of
``labels`` and ``mean``/``std``.
"""

from __future__ import annotations

import hashlib
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.cli import compile as compile_cli
from dvsdk.cli import run as run_cli
from dvsdk.cli.main import run as main_run
from dvsdk.errors import InvalidArgument, ModelError
from dvsdk.netfile import read

from .conftest import DATA, ROOT

MODELS = ROOT / "examples" / "models"
OUTPUTS = ("--save", "--trace", "--record", "--save-mask")


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


@pytest.fixture
def work(tmp_path):
    """Writable copies of the digits net.bin, its ONNX model, labels and two samples."""
    for name in ("digits.bin", "digits.onnx", "digits_labels.txt"):
        shutil.copy(MODELS / name, tmp_path / name)
    for name in ("seven_1442.png", "one_1457.png"):
        shutil.copy(MODELS / "samples" / name, tmp_path / name)
    return tmp_path


def digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def call(tool, argv, capsys) -> tuple[int, str, str]:
    rc = tool([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def link(kind: str, target, where):
    """``where`` as a symlink or hard link to ``target`` (or ``target`` itself)."""
    if kind == "same":
        return target
    if kind == "symlink":
        os.symlink(target, where)
    else:
        os.link(target, where)
    return where


# --------------------------------------------------------------------------- dvsdk-run
@pytest.mark.parametrize("opt", OUTPUTS)
@pytest.mark.parametrize("victim", ["digits.bin", "seven_1442.png"])
@pytest.mark.parametrize("kind", ["same", "symlink", "hardlink"])
def test_run_output_flags_never_replace_an_input(work, capsys, opt, victim, kind):
    before = {p: digest(work / p) for p in ("digits.bin", "seven_1442.png")}
    target = link(kind, work / victim, work / f"alias_{kind}")
    for force in ([], ["--force"]):
        rc, _, err = call(run_cli.run, [work / "digits.bin", work / "seven_1442.png", opt,
                                        target, "-q", *force], capsys)
        assert rc == 2 and err.count("\n") == 1, err
        assert f"{opt} would replace" in err and str(target) in err
    assert {p: digest(work / p) for p in before} == before
    assert os.path.samefile(target, work / victim)   # a link is not replaced either


def test_run_output_naming_an_input_tensor_or_an_image_in_a_directory(work, capsys):
    x = work / "x.npy"
    np.save(x, np.zeros((1, 1, 16, 16), np.float32))
    rc, _, err = call(run_cli.run, [work / "digits.bin", "--input", x, "--save", x, "--force"],
                      capsys)
    assert rc == 2 and "--save would replace an --input file" in err
    imgs = work / "imgs"
    imgs.mkdir()
    shutil.copy(work / "one_1457.png", imgs / "one.png")
    rc, _, err = call(run_cli.run, [work / "digits.bin", imgs, "--trace", imgs / "one.png",
                                    "--force"], capsys)
    assert rc == 2 and "--trace would replace an input image" in err
    assert digest(imgs / "one.png") == digest(work / "one_1457.png")


def test_run_outputs_honour_force(work, capsys):
    out = work / "y.npz"
    out.write_bytes(b"keep me")
    argv = [work / "digits.bin", work / "seven_1442.png", "--save", out, "-q"]
    rc, _, err = call(run_cli.run, argv, capsys)
    assert rc == 2 and "already exists" in err and "--force" in err
    assert out.read_bytes() == b"keep me"
    rc, _, err = call(run_cli.run, [*argv, "--force"], capsys)
    assert rc == 0, err
    assert "probs" in np.load(out)
    rc, _, err = call(run_cli.run, [work / "digits.bin", work / "seven_1442.png", "--save",
                                    work / "a.npz", "--trace", work / "a.npz"], capsys)
    assert rc == 2 and "name the same file" in err


# --------------------------------------------------------------------------- eval, analyze
def test_eval_confusion_never_replaces_an_input(work, capsys):
    ds = work / "ds"
    for cls, img in (("seven", "seven_1442.png"), ("one", "one_1457.png")):
        (ds / cls).mkdir(parents=True)
        shutil.copy(work / img, ds / cls / img)
    before = digest(work / "digits.bin")
    for target in (work / "digits.bin", ds / "seven" / "seven_1442.png"):
        rc, _, err = call(main_run, ["eval", work / "digits.bin", ds, "-q", "--confusion",
                                     target, "--force"], capsys)
        assert rc == 2 and err.count("\n") == 1 and "--confusion would replace" in err, err
    assert digest(work / "digits.bin") == before
    assert digest(ds / "seven" / "seven_1442.png") == digest(work / "seven_1442.png")


def test_analyze_plot_never_replaces_an_input(work, capsys):
    before = digest(work / "digits.bin")
    for target in (work / "digits.bin", work / "digits.onnx", work / "seven_1442.png"):
        rc, _, err = call(main_run, ["analyze", work / "digits.bin", "--reference",
                                     work / "digits.onnx", "--input", work / "seven_1442.png",
                                     "--plot", target, "--force"], capsys)
        assert rc == 2 and err.count("\n") == 1 and "--plot would replace" in err, err
    assert digest(work / "digits.bin") == before


# --------------------------------------------------------------------------- compile
@pytest.mark.parametrize("kind", ["same", "symlink", "hardlink"])
def test_api_compile_never_replaces_its_model(work, kind):
    model = work / "digits.onnx"
    before = digest(model)
    target = link(kind, model, work / f"alias_{kind}.bin")
    with pytest.raises(InvalidArgument, match="output would replace the model itself"):
        dvsdk.compile(model, target, golden=False)
    assert digest(model) == before and onnx.load(str(model)).graph.node


def test_api_compile_never_replaces_an_onnx_models_external_data(work):
    """A model saved with its weights in a separate file: that file is an input too."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                          "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = work / "ext.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), str(model),
              save_as_external_data=True, location="ext.weights", size_threshold=0)
    before = digest(work / "ext.weights")
    with pytest.raises(InvalidArgument, match="would replace the model's external data"):
        dvsdk.compile(model, work / "ext.weights", golden=False)
    assert digest(work / "ext.weights") == before


def test_compile_never_replaces_an_openvino_weights_file_or_the_labels(work, capsys):
    """dvsdk-compile m.xml's default output is m.bin, the IR's own weights."""
    pytest.importorskip("defusedxml")
    for suffix in (".xml", ".bin"):
        shutil.copy(DATA / "openvino" / f"digits_fp32{suffix}", work / f"ir{suffix}")
    before = digest(work / "ir.bin")
    rc, _, err = call(compile_cli.run, [work / "ir.xml", "--force"], capsys)
    assert rc == 2 and "output would replace the model's weights" in err
    with pytest.raises(InvalidArgument, match="the model's weights"):
        dvsdk.compile(work / "ir.xml", work / "ir.bin", golden=False)
    assert digest(work / "ir.bin") == before
    labels = work / "digits_labels.txt"
    rc, _, err = call(compile_cli.run, [work / "digits.onnx", "--labels", labels, "-o", labels,
                                        "--force"], capsys)
    assert rc == 2 and "output would replace the labels file" in err


# --------------------------------------------------------------------------- one validation
def five_classes() -> bytes:
    """A 5-class scorer: (1, 3) in, (1, 5) out."""
    w = numpy_helper.from_array(np.ones((3, 5), np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()


def test_api_refuses_labels_that_do_not_match_the_classes(tmp_path, capsys):
    """Two names for a 5-class model compiled through the API; the CLI refused them."""
    with pytest.raises(InvalidArgument, match="2 labels for a model that scores 5 classes"):
        dvsdk.compile(five_classes(), labels=["a", "b"], golden=False)
    model = tmp_path / "m.onnx"
    model.write_bytes(five_classes())
    two = tmp_path / "two.txt"
    two.write_text("a\nb\n")
    rc, _, err = call(compile_cli.run, [model, "--labels", two], capsys)
    assert rc == 2 and "2 labels for a model that scores 5 classes" in err and str(two) in err
    assert not (tmp_path / "m.bin").exists()
    net = dvsdk.compile(five_classes(), labels=list("abcde"), golden=False)
    assert net.meta["labels"] == list("abcde")


@pytest.mark.parametrize("field, value", [("mean", (1, 2)), ("std", (1, 2, 3, 4))])
def test_api_refuses_a_mean_or_std_of_the_wrong_length(tmp_path, capsys, field, value):
    with pytest.raises(ModelError, match=f"{field} needs 1 or 3 values") as e:
        dvsdk.compile(five_classes(), golden=False, **{field: value})
    assert e.value.field == field
    model = tmp_path / "m.onnx"
    model.write_bytes(five_classes())
    rc, _, err = call(compile_cli.run, [model, f"--{field}", ",".join(map(str, value))], capsys)
    assert rc == 2 and field in err


def test_one_mean_value_is_every_channels_in_both(tmp_path, capsys):
    net = dvsdk.compile(five_classes(), golden=False, mean=5)
    assert net.meta["inputs"][0]["preprocess"]["mean"] == [5.0, 5.0, 5.0]
    model = tmp_path / "m.onnx"
    model.write_bytes(five_classes())
    rc, _, err = call(compile_cli.run, [model, "--mean", "5", "-q"], capsys)
    assert rc == 0, err
    cli = read(tmp_path / "m.bin").meta["inputs"][0]["preprocess"]["mean"]
    assert cli == [5.0, 5.0, 5.0]
