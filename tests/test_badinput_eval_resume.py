"""``dvsdk eval --resume FILE`` given a file that is not a per-image log: refused with a
DatasetError naming the file, and the file left byte for byte as it was (the log is
rewritten at the end, so an unrelated CSV, such as the dataset's own list, was replaced by
a log; a JSON line that is not an object raised AttributeError). dvsdk/qa/evallog.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from dvsdk.cli.main import run
from dvsdk.errors import DatasetError
from dvsdk.qa.dataset import open_dataset
from dvsdk.qa.evallog import read_log

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"
NET = str(MODELS / "digits.bin")
LABELS = (MODELS / "digits_labels.txt").read_text().split()


@pytest.fixture()
def folders(tmp_path):
    data = np.load(MODELS / "digits_heldout.npz")
    for cls in range(2):
        i = int(np.flatnonzero(data["labels"] == cls)[0])
        (tmp_path / "ds" / LABELS[cls]).mkdir(parents=True)
        img = (data["images"][i].astype(np.float32) * (255 / 16)).astype(np.uint8)
        Image.fromarray(img).save(tmp_path / "ds" / LABELS[cls] / "a.png")
    return tmp_path


@pytest.mark.parametrize("name, content", [
    ("other.csv", "path,label\nelsewhere/a.png,1\nelsewhere/b.png,2\n"),
    ("notes.csv", "just,some,columns\n1,2,3\n"),
    ("list.jsonl", "[1, 2]\n"),
    ("nums.jsonl", "7\n"),
    ("obj.jsonl", '{"a": 1}\n'),
])
def test_resume_from_a_file_that_is_not_a_log(folders, capsys, name, content):
    target = folders / name
    target.write_text(content)
    rc = run(["eval", NET, str(folders / "ds"), "-q", "--resume", str(target)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "not a per-image log" in err
    assert target.read_text() == content                       # not replaced


def test_read_log_refuses_a_non_object_line(folders):
    (folders / "l.jsonl").write_text('{"path": "x"}\n[1]\n')
    ds = open_dataset(folders / "ds", LABELS)
    with pytest.raises(DatasetError) as info:
        read_log(folders / "l.jsonl", ds)
    assert info.value.field.endswith("l.jsonl:2")


def test_a_log_written_by_per_image_still_resumes(folders, capsys):
    """The check accepts what --per-image writes: a resumed run reads both images as
    scored and reports the same top-1 as the first run."""
    for log in ("log.csv", "log.jsonl"):
        assert run(["eval", NET, str(folders / "ds"), "-q", "--json",
                    "--per-image", str(folders / log)]) == 0
        first = capsys.readouterr().out
        ds = open_dataset(folders / "ds", LABELS)
        assert sorted(read_log(folders / log, ds)) == [0, 1]
        assert run(["eval", NET, str(folders / "ds"), "-q", "--json",
                    "--resume", str(folders / log)]) == 0
        again = capsys.readouterr().out
        assert json.loads(again)["top1"] == json.loads(first)["top1"]
