"""``dvsdk eval --jobs N`` with N far beyond the work: no more simulator processes than
chunks of images (3 images: 3 processes, not 64), and an absurd N (100000) refused at once
with InvalidArgument naming ``jobs`` and the limit, instead of spawning that many
processes (dvsdk/qa/evaluate.py)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dvsdk.errors import InvalidArgument
from dvsdk.qa.dataset import open_dataset
from dvsdk.qa.evaluate import MAX_JOBS, evaluate

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"
NET = MODELS / "digits.bin"
LABELS = (MODELS / "digits_labels.txt").read_text().split()


@pytest.fixture()
def three(tmp_path):
    """Three held-out digits (0, 1, 2) as class folders."""
    data = np.load(MODELS / "digits_heldout.npz")
    for cls in range(3):
        i = int(np.flatnonzero(data["labels"] == cls)[0])
        folder = tmp_path / LABELS[cls]
        folder.mkdir()
        img = (data["images"][i].astype(np.float32) * (255 / 16)).astype(np.uint8)
        Image.fromarray(img).save(folder / "a.png")
    return open_dataset(tmp_path, LABELS)


def test_no_more_processes_than_chunks(three):
    one = evaluate(NET, three)
    many = evaluate(NET, three, jobs=64)
    assert len(many.workers) == 3                      # 3 images: 3 chunks of 1
    assert many.as_json()["confusion"] == one.as_json()["confusion"]
    assert many.summary["samples"] == 3


@pytest.mark.parametrize("jobs", [0, -2, MAX_JOBS + 1, 100000, True, 2.5])
def test_jobs_out_of_range_is_refused(three, jobs):
    with pytest.raises(InvalidArgument) as info:
        evaluate(NET, three, jobs=jobs)
    assert info.value.field == "jobs" and info.value.limit == f"1..{MAX_JOBS}"


def test_cli_refuses_huge_jobs_in_one_line(three, capsys):
    from dvsdk.cli.main import run

    rc = run(["eval", str(NET), three.source, "--jobs", "100000", "-q"])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "field=jobs" in err
