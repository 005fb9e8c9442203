"""Output paths in a folder that does not exist (or under a file): refused before any work
with InvalidArgument naming the option and the path, by every CLI output flag and by
dvsdk.compile; nothing is written anywhere (dvsdk/fsutil.py, check_outputs)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import dvsdk
from dvsdk.cli import compile as compile_cli
from dvsdk.cli import run as run_cli
from dvsdk.errors import InvalidArgument

ROOT = Path(__file__).resolve().parents[1]
DIGITS = str(ROOT / "examples/models/digits.bin")
ONNX = str(ROOT / "examples/models/digits.onnx")
SEVEN = str(ROOT / "examples/models/samples/seven_1442.png")


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("flag", ["--save", "--trace", "--record", "--save-mask",
                                  "--save-json"])
def test_run_output_in_a_missing_folder(flag, tmp_path, capsys):
    target = tmp_path / "nodir" / "out.bin"
    rc = run_cli.run([DIGITS, SEVEN, flag, str(target)])
    out, err = capsys.readouterr()
    assert rc == 2
    assert out == ""                                       # refused before the run
    assert len(err.strip().splitlines()) == 1
    assert f"field={flag}" in err and str(target) in err and "does not exist" in err
    assert _files(tmp_path) == []


def test_run_output_under_a_file(tmp_path, capsys):
    (tmp_path / "plain").write_text("x")
    rc = run_cli.run([DIGITS, SEVEN, "--save", str(tmp_path / "plain" / "y.npz")])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert "is not a folder" in err and "field=--save" in err
    assert _files(tmp_path) == ["plain"]


def test_compile_cli_output_in_a_missing_folder(tmp_path, capsys):
    target = tmp_path / "a" / "b" / "net.bin"
    rc = compile_cli.run([ONNX, "-o", str(target), "-q"])
    _, err = capsys.readouterr()
    assert rc == 2 and "field=output" in err and str(target) in err
    assert _files(tmp_path) == []


def test_compile_api_output_in_a_missing_folder(tmp_path):
    with pytest.raises(InvalidArgument) as info:
        dvsdk.compile(ONNX, tmp_path / "nodir" / "net.bin")
    assert info.value.field == "output"
    assert info.value.value == str(tmp_path / "nodir" / "net.bin")
    assert _files(tmp_path) == []


def test_output_in_a_read_only_folder(tmp_path, capsys):
    """A folder the user cannot write to: mode 0555, or for root (whom modes do not stop)
    the immutable attribute (``chattr +i``), which refuses root's writes too."""
    import shutil
    import subprocess

    folder = tmp_path / "ro"
    folder.mkdir()
    root = os.geteuid() == 0
    if root:
        if not shutil.which("chattr") or subprocess.run(
                ["chattr", "+i", str(folder)], capture_output=True).returncode:
            pytest.skip("no immutable attribute on this file system")
    else:
        folder.chmod(0o555)
    try:
        rc = run_cli.run([DIGITS, SEVEN, "--save", str(folder / "y.npz")])
        out, err = capsys.readouterr()
        assert rc == 2 and out == ""
        assert "not writable" in err and "field=--save" in err
        assert len(err.strip().splitlines()) == 1
        assert list(folder.iterdir()) == []
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        else:
            folder.chmod(0o755)
