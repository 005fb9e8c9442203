"""``dvsdk-compile`` as people use it (issue 10 §4): no silent overwrite, fractions,
one-line errors that name the user's file, ``--version``, ``--report`` in words.

Through the real entry point ``dvsdk.cli.compile.run(argv)`` and, for a few, the installed
console scripts; the model is the bundled digits ONNX (compiles in a fraction of a second).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dvsdk.cli import compile as compile_cli
from dvsdk.cli import run as run_cli
from dvsdk.netfile import read

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"
BIN = Path(sys.executable).parent


@pytest.fixture
def shipped(tmp_path):
    """A copy of examples/models: digits.onnx beside its compiled digits.bin."""
    d = tmp_path / "models"
    shutil.copytree(MODELS, d, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return d


def call(tool, argv, capsys) -> tuple[int, str, str]:
    rc = tool.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_default_output_never_replaces_the_shipped_net_bin(shipped, capsys, monkeypatch):
    before = (shipped / "digits.bin").read_bytes()
    rc, out, err = call(compile_cli, [shipped / "digits.onnx"], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "already exists" in err and "--force" in err
    assert str(shipped / "digits.bin") in err
    assert (shipped / "digits.bin").read_bytes() == before
    # the quick start still classifies with the shipped scale and labels
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")
    rc, out, _ = call(run_cli, [shipped / "digits.bin", shipped / "samples/seven_1442.png"],
                      capsys)
    top = out.splitlines()[1].split()
    assert rc == 0 and top[1] == "seven" and top[0] != "100.00%"
    assert not list(shipped.glob(".digits.bin.*"))  # and no temporary file was left


def test_force_replaces_and_an_explicit_existing_output_is_refused_too(shipped, capsys):
    out_path = shipped / "digits.bin"
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", out_path], capsys)
    assert rc == 2 and "already exists" in err
    rc, out, _ = call(compile_cli, [shipped / "digits.onnx", "--force", "--scale", "1/255",
                                    "--labels", shipped / "digits_labels.txt"], capsys)
    assert rc == 0 and f"wrote {out_path}" in out
    assert read(out_path).meta["inputs"][0]["preprocess"]["scale"] == 1 / 255
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "digits.onnx",
                                    "--force"], capsys)
    assert rc == 2 and "replace the model itself" in err
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "samples"],
                      capsys)
    assert rc == 2 and "is a directory" in err


def test_the_help_example_for_digits_compiles_the_shipped_preprocessing(shipped, capsys,
                                                                        monkeypatch):
    rc, helptext, _ = call(compile_cli, ["--help"], capsys)
    assert rc == 0
    (line,) = [ln.split() for ln in helptext.splitlines() if "digits.onnx" in ln]
    assert line[line.index("--scale") + 1] == "1/255"
    files = {"digits.onnx": shipped / "digits.onnx", "digits.bin": shipped / "again.bin",
             "digits_labels.txt": shipped / "digits_labels.txt"}
    argv = [files.get(a, a) for a in line[1:]]
    assert call(compile_cli, argv, capsys)[0] == 0
    fresh, ref = read(shipped / "again.bin").meta, read(shipped / "digits.bin").meta
    assert fresh["inputs"][0]["preprocess"] == ref["inputs"][0]["preprocess"]
    assert fresh["labels"] == ref["labels"]


def test_fractions_in_scale_mean_and_std(shipped, capsys):
    out = shipped / "f.bin"
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", out, "--scale", "2/255",
                                    "--mean", "255/2", "--std", "1/2,0.5,3/6", "-q"], capsys)
    assert rc == 0, err
    pre = read(out).meta["inputs"][0]["preprocess"]
    assert pre["scale"] == 2 / 255 and pre["mean"] == [127.5] * 3 and pre["std"] == [0.5] * 3


@pytest.mark.parametrize("extra,needle", [
    (["--scale", "0"], "--scale"),
    (["--scale", "0/7"], "--scale"),
    (["--scale", "1/0"], "--scale"),
    (["--scale", "nan"], "--scale"),
    (["--ub-size", "0"], "--ub-size"),
    (["--ub-size", "-4"], "--ub-size"),
    (["--std", "1,0,1"], "std"),
    (["--mean", "1/x"], "mean"),
])
def test_bad_values_are_one_line_exit_2(shipped, capsys, extra, needle):
    rc, out, err = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "x.bin",
                                      *extra], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and needle in err
    assert "usage:" not in err and not (shipped / "x.bin").exists()


@pytest.mark.parametrize("op, attrs, bad", [
    ("Conv", {"dilations": [0, 0]}, "dilations"),        # wrote a file the reader refused
    ("Conv", {"strides": [1, 0]}, "strides"),            # ZeroDivisionError
    ("MaxPool", {"kernel_shape": [2, 2], "strides": [0, 1]}, "strides"),
    ("AveragePool", {"kernel_shape": [0, 2]}, "kernel_shape"),
    ("ConvTranspose", {"dilations": [1, 0]}, "dilations"),
])
def test_window_attributes_out_of_range_are_a_model_error(tmp_path, capsys, op, attrs, bad):
    """A 0 dilation, stride or kernel (issue 25, item 8): a ModelError naming the op, the
    attribute, its value and the range, one line, exit 2, nothing written."""
    import numpy as np
    from onnx import helper

    from .onnx_models import make_model

    conv = "Conv" in op
    model = make_model([helper.make_node(op, ["x", "w"] if conv else ["x"], ["y"], **attrs)],
                       [("x", [1, 8, 8, 8])], ["y"],
                       {"w": np.ones((8, 8, 3, 3), np.float32)} if conv else {})
    src = tmp_path / "m.onnx"
    src.write_bytes(model.SerializeToString())
    rc, out, err = call(compile_cli, [src, "-o", tmp_path / "m.bin"], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert f"{bad} out of range" in err and f"field={op} {op}_0.{bad}" in err
    assert "limit=1..65536" in err
    assert not (tmp_path / "m.bin").exists()


def test_labels_must_match_the_classes_and_errors_name_the_file(shipped, capsys):
    three = shipped / "three.txt"
    three.write_text("zero\none\ntwo\n")
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "x.bin",
                                    "--labels", three], capsys)
    assert rc == 2 and err.count("\n") == 1 and "3 labels" in err and "10 classes" in err
    png = shipped / "samples" / "seven_1442.png"
    for labels, needle in ((png, "not a text file"), (shipped / "nope.txt", "not found"),
                           (shipped / "samples", "is a directory")):
        rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "x.bin",
                                        "--labels", labels], capsys)
        assert rc == 2 and err.count("\n") == 1 and needle in err and str(labels) in err
    assert not (shipped / "x.bin").exists()


def test_a_directory_as_the_model_says_so(tmp_path, capsys):
    empty = tmp_path / "emptydir"
    empty.mkdir()
    rc, _, err = call(compile_cli, [empty], capsys)
    assert rc == 2 and err.count("\n") == 1 and "directory" in err and str(empty) in err


def test_output_in_a_missing_directory_names_the_path(shipped, capsys):
    target = shipped / "nonexistent" / "o.bin"
    rc, _, err = call(compile_cli, [shipped / "digits.onnx", "-o", target], capsys)
    assert rc == 2 and err.count("\n") == 1 and str(target) in err and ".tmp" not in err


def test_report_names_activations_in_words(shipped, capsys):
    rc, out, _ = call(compile_cli, [shipped / "digits.onnx", "-o", shipped / "r.bin",
                                    "--report"], capsys)
    rows = [ln for ln in out.splitlines() if ln.startswith(("conv1 ", "relu2 "))]
    assert rc == 0 and len(rows) == 2
    assert all(r.endswith("conv 3x3 +maxpool 2x2 +relu") for r in rows)
    assert "+act" not in out
    # the digits net ends in a Softmax on the CPU: one hand-over, after the last segment
    assert "program: 1 CPU step in 1 segment, 1 device<->CPU transition" in out.splitlines()


def test_every_tool_has_version_and_dvsdk_help_lists_every_command():
    from dvsdk import __version__

    for tool in ("dvsdk", "dvsdk-compile", "dvsdk-run"):
        proc = subprocess.run([str(BIN / tool), "--version"], capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0 and __version__ in proc.stdout, (tool, proc.stderr)
    helptext = subprocess.run([str(BIN / "dvsdk"), "--help"], capture_output=True, text=True,
                              timeout=60).stdout
    from dvsdk.cli.main import COMMANDS

    assert set(COMMANDS) == {"doctor", "info", "clock", "eval", "analyze", "replay"}
    for name in COMMANDS:
        assert any(ln.split()[:1] == [name] for ln in helptext.splitlines()), name


def test_console_script_refuses_to_overwrite(shipped):
    before = (shipped / "digits.bin").read_bytes()
    proc = subprocess.run([str(BIN / "dvsdk-compile"), str(shipped / "digits.onnx")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert (shipped / "digits.bin").read_bytes() == before



@pytest.mark.parametrize("model, expected", [
    ("a/m.onnx", "a/m.bin"), ("m.tar.gz", "m.bin"), ("m.tgz", "m.bin"), ("m.nnef", "m.bin"),
    ("m.xml", "m.bin"), ("M.TAR.GZ", "M.bin"), ("m.h5", "m.bin"),
])
def test_default_output_drops_the_whole_format_suffix(model, expected):
    from pathlib import Path

    from dvsdk.cli.compile import default_output

    assert default_output(Path(model)) == Path(expected)
