"""Atomic writes (dvsdk.fsutil): a writer killed mid-write leaves a temporary file that the
next write to the same target removes; the directory is synced after the rename; errors
name the target.  Real files, a real SIGKILL, the real CLIs."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from dvsdk.fsutil import atomic_write

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"

WRITER = textwrap.dedent("""
    import sys, time
    from dvsdk.fsutil import atomic_write

    def write(f):
        f.write(b"half a file")
        f.flush()
        print("writing", flush=True)
        time.sleep(120)

    atomic_write(sys.argv[1], write)
""")


def _killed_mid_write(target: Path) -> Path:
    """A real process stopped by SIGKILL inside atomic_write; returns its leftover."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(target)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
        (left,) = target.parent.glob(f".{target.name}.*.tmp")
        assert left.read_bytes() == b"half a file"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    assert left.exists()                       # the kill left it: nobody could remove it
    return left


def test_a_killed_writers_leftover_is_removed_by_the_next_write(tmp_path):
    target = tmp_path / "net.bin"
    target.write_bytes(b"old")
    left = _killed_mid_write(target)
    assert target.read_bytes() == b"old"       # the target was never half-written
    atomic_write(target, lambda f: f.write(b"new"))
    assert target.read_bytes() == b"new" and not left.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["net.bin"]


def test_killed_compile_output_is_cleaned_by_the_next_dvsdk_compile(tmp_path, capsys):
    from dvsdk.cli import compile as compile_cli

    target = tmp_path / "digits.bin"
    left = _killed_mid_write(target)
    rc = compile_cli.run([str(MODELS / "digits.onnx"), "-o", str(target), "-q"])
    assert rc == 0, capsys.readouterr().err
    assert not left.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["digits.bin"]


def test_killed_save_is_cleaned_by_the_next_dvsdk_run(tmp_path, monkeypatch, capsys):
    from dvsdk.cli import run as run_cli

    monkeypatch.setenv("DVSDK_DEVICE", "sim://")
    target = tmp_path / "y.npz"
    left = _killed_mid_write(target)
    rc = run_cli.run([str(MODELS / "digits.bin"), str(MODELS / "samples" / "two_1465.png"),
                      "--save", str(target), "-q"])
    assert rc == 0, capsys.readouterr().err
    assert not left.exists() and target.exists()


def test_live_writers_and_other_files_are_left_alone(tmp_path):
    target = tmp_path / "out.bin"
    host = socket.gethostname().replace("/", "_").replace("-", "_")[:32]
    mine = tmp_path / f".out.bin.{host}-{os.getpid()}-abcd.tmp"      # this process: alive
    parent = tmp_path / f".out.bin.{host}-{os.getppid()}-abcd.tmp"   # alive too
    remote = tmp_path / ".out.bin.otherhost-1-abcd.tmp"              # another machine's
    other = tmp_path / ".other.bin.x-1-abcd.tmp"                     # another target's
    legacy = tmp_path / ".out.bin.k2j4h5g6.tmp"                      # not in our format
    for p in (mine, parent, remote, other, legacy):
        p.write_bytes(b"x")
    atomic_write(target, lambda f: f.write(b"data"))
    for p in (mine, parent, remote, other, legacy):
        assert p.exists(), p


def test_the_directory_is_synced_after_the_rename(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        st = os.fstat(fd)
        synced.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    target = tmp_path / "o.bin"
    atomic_write(target, lambda f: f.write(b"data"))
    assert synced == [("file", target.stat().st_ino), ("dir", tmp_path.stat().st_ino)]


def test_permissions_and_errors_name_the_target(tmp_path):
    target = tmp_path / "p.bin"
    atomic_write(target, lambda f: f.write(b"x"))
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask
    missing = tmp_path / "nonexistent" / "o.npz"
    with pytest.raises(FileNotFoundError) as e:
        atomic_write(missing, lambda f: f.write(b"x"))
    assert e.value.filename == str(missing)
    with pytest.raises(IsADirectoryError) as e:
        atomic_write(tmp_path, lambda f: f.write(b"x"))
    assert e.value.filename == str(tmp_path)
    assert not list(tmp_path.parent.glob(f".{tmp_path.name}.*.tmp"))

    def fails(f):
        f.write(b"partial")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        atomic_write(target, fails)
    assert target.read_bytes() == b"x" and sorted(p.name for p in tmp_path.iterdir()) == [
        "p.bin"]
