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
import pytest

from dvsdk.cli import run as run_cli
from dvsdk.cli.main import run as main_run

from .conftest import ROOT

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


