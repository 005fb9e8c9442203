"""What an install from a wheel or an sdist relies on, checked without building one (.ci/run
builds both, installs them in fresh venvs and runs the quick start).

The spec files are package data (``dvsdk.firmware_spec``) and are read through
importlib.resources, so they load wherever the package lives, a zip included."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import dvsdk
from dvsdk.errors import SpecError
from dvsdk.hw.spec import Spec, spec_files

ROOT = Path(__file__).resolve().parent.parent

_FROM_ZIP = """
import sys, zipfile
import dvsdk.hw.spec as spec
import dvsdk.link.protocol as link
from dvsdk.errors import SpecError

assert spec.__file__.startswith(sys.argv[1]), spec.__file__
assert isinstance(spec.spec_files(), zipfile.Path), type(spec.spec_files())
assert spec.SPEC.struct("conv_v0").size == 1864
assert "messages" in link.SPEC
try:
    spec.spec_dir()
except SpecError as e:
    print("spec_dir:", e)
else:
    raise AssertionError("spec_dir() of a zip install")
print("ok")
"""


def _zip_package(dest: Path) -> None:
    """dvsdk's modules and spec files laid out as installed, in a zip: no directory to
    point at, so only the Traversable API can read the spec."""
    pkg = Path(dvsdk.__file__).parent
    with zipfile.ZipFile(dest, "w") as zf:
        for py in pkg.rglob("*.py"):
            zf.write(py, f"dvsdk/{py.relative_to(pkg).as_posix()}")
        for item in spec_files().iterdir():
            if item.is_file():
                zf.writestr(f"dvsdk/firmware_spec/{item.name}", item.read_bytes())


def test_spec_loads_from_a_zip_on_sys_path(tmp_path):
    zpath = tmp_path / "dvsdk.zip"
    _zip_package(zpath)
    env = dict(os.environ, PYTHONPATH=str(zpath), DVSDK_NATIVE="0")
    r = subprocess.run([sys.executable, "-c", _FROM_ZIP, str(zpath)], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "ok"


def test_spec_root_need_not_be_a_path(tmp_path):
    zpath = tmp_path / "spec.zip"
    with zipfile.ZipFile(zpath, "w") as zf:
        for item in spec_files().iterdir():
            if item.name.endswith(".yaml"):
                zf.writestr(f"spec/{item.name}", item.read_bytes())
    with zipfile.ZipFile(zpath) as zf:
        assert Spec(zipfile.Path(zf, "spec/")).struct("conv_v0").size == 1864
        with pytest.raises(SpecError, match="cannot load commands.yaml"):
            Spec(zipfile.Path(zf, "nowhere/"))


def test_one_version_string_and_py_typed():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in meta["project"] and "version" in meta["project"]["dynamic"]
    setuptools = meta["tool"]["setuptools"]
    assert setuptools["dynamic"]["version"] == {"attr": "dvsdk.__version__"}
    assert "py.typed" in setuptools["package-data"]["dvsdk"]
    assert (ROOT / "dvsdk" / "py.typed").is_file()
