"""``dvsdk eval --expect METRIC>=VALUE`` with a value that is not finite: refused as a bad
argument (one line, exit 2, naming --expect) before the run.  ``top1>=nan`` was accepted
and, as every comparison with NaN fails, always "missed" (exit 6) after a full run."""

from __future__ import annotations

import pytest

from dvsdk.cli.main import run

from .conftest import ROOT

NET = str(ROOT / "examples" / "models" / "digits.bin")


@pytest.mark.parametrize("expect", ["top1>=nan", "top1<=inf", "miou>=-inf", "top1>=NaN"])
def test_non_finite_expectation_is_a_bad_argument(tmp_path, capsys, expect):
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "a.png").write_bytes(
        (ROOT / "examples" / "models" / "samples" / "seven_1442.png").read_bytes())
    rc = run(["eval", NET, str(tmp_path), "-q", "--expect", expect])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--expect" in err and "finite" in err
