"""``dvsdk replay`` of a recording whose manifest names its device's backend with a
non-string (-1, a list): the report prints it as it is instead of failing with TypeError
(dvsdk/cli/replay.py).  The replay itself still compares every output bit for bit."""

from __future__ import annotations

import json
import zipfile

import pytest

from dvsdk.cli import run as run_cli
from dvsdk.cli.main import run

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"


@pytest.mark.parametrize("backend", [-1, ["sim"], None])
def test_replay_with_a_non_string_backend(tmp_path, capsys, backend):
    rec = tmp_path / "r.dvrec"
    assert run_cli.run([str(MODELS / "digits.bin"), str(MODELS / "samples" / "seven_1442.png"),
                        "--record", str(rec), "-q"]) == 0
    capsys.readouterr()
    edited = tmp_path / "e.dvrec"
    with zipfile.ZipFile(rec) as src, zipfile.ZipFile(edited, "w") as out:
        for name in src.namelist():
            data = src.read(name)
            if name == "manifest.json":
                man = json.loads(data)
                man["device"]["backend"] = backend
                data = json.dumps(man).encode()
            out.writestr(name, data)
    rc = run(["replay", str(edited)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert out.splitlines()[0].startswith(f"recorded on {backend}")
    assert out.splitlines()[-1] == "bit-identical"
