"""Detection mAP (dvsdk.qa.detection_map) against pycocotools on generated ground truths and
detections, hand-computed cases, and the COCO/VOC loaders; OCR accuracy by hand."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from dvsdk.errors import DatasetError
from dvsdk.qa.detection_map import ImageDetections, ImageTruth, detection_summary
from dvsdk.qa.ocr_metrics import edit_distance, text_summary
from dvsdk.qa.task_datasets import open_task_dataset

CATS = [(1, "person"), (3, "car"), (7, "dog")]


def generated_set(seed: int, n_images: int = 25):
    """COCO ground truth and detections: jittered copies of most objects, duplicates,
    wrong classes, false positives, crowd regions, one image with > 100 detections."""
    rng = np.random.default_rng(seed)
    images, anns, dets = [], [], []
    for iid in range(1, n_images + 1):
        images.append({"id": iid, "file_name": f"{iid}.png", "width": 200, "height": 150})
        for _ in range(rng.integers(0, 6)):
            x, y = rng.random(2) * [160, 110]
            w, h = rng.random(2) * [40, 40] + 5
            cid = CATS[rng.integers(0, 3)][0]
            crowd = int(rng.random() < 0.1)
            anns.append({"id": len(anns) + 1, "image_id": iid, "category_id": cid,
                         "bbox": [x, y, w, h], "area": w * h, "iscrowd": crowd})
            for _ in range(rng.integers(0, 3)):     # 0, 1 or 2 detections of it
                j = rng.normal(0, [1, 1, 1.5, 1.5])
                c = cid if rng.random() < 0.85 else CATS[rng.integers(0, 3)][0]
                dets.append({"image_id": iid, "category_id": c, "score": float(rng.random()),
                             "bbox": [x + j[0], y + j[1], max(1, w + j[2]), max(1, h + j[3])]})
        for _ in range(rng.integers(0, 4)):         # false positives
            x, y = rng.random(2) * [160, 110]
            dets.append({"image_id": iid, "category_id": CATS[rng.integers(0, 3)][0],
                         "score": float(rng.random()),
                         "bbox": [x, y, *(rng.random(2) * 40 + 5)]})
    for _ in range(130):                             # image 1: past maxDets = 100
        x, y = rng.random(2) * [160, 110]
        dets.append({"image_id": 1, "category_id": 1, "score": float(rng.random() * 0.5),
                     "bbox": [x, y, 20.0, 20.0]})
    return ({"images": images, "annotations": anns,
             "categories": [{"id": c, "name": n} for c, n in CATS]}, dets)


def pycoco(gt: dict, dets: list[dict]):
    coco = COCO()
    coco.dataset = json.loads(json.dumps(gt))
    with contextlib.redirect_stdout(io.StringIO()):
        coco.createIndex()
        res = coco.loadRes(json.loads(json.dumps(dets)))
        ev = COCOeval(coco, res, "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return ev


def ours(tmp_path, gt, dets):
    (tmp_path / "instances.json").write_text(json.dumps(gt))
    ds = open_task_dataset(tmp_path / "instances.json", {"task": {"kind": "detect"},
                                                         "labels": ["person", "car", "dog"]})
    index = {cid: k for k, (cid, _) in enumerate(CATS)}
    by_image = {s.image: [] for s in ds.samples}
    for d in dets:
        x, y, w, h = d["bbox"]
        by_image[str(tmp_path / f"{d['image_id']}.png")].append(
            (x, y, x + w, y + h, d["score"], index[d["category_id"]]))
    truths, found = [], []
    for s in ds.samples:
        r = np.array(by_image[s.image], np.float64).reshape(-1, 6)
        truths.append(s.target)
        found.append(ImageDetections(r[:, :4], r[:, 4], r[:, 5]))
    return detection_summary(truths, found, ds.classes)


@pytest.mark.parametrize("seed", range(5))
def test_map_equals_pycocotools(tmp_path, seed):
    gt, dets = generated_set(seed)
    ev = pycoco(gt, dets)
    got = ours(tmp_path, gt, dets)
    assert got["map"] == pytest.approx(ev.stats[0], abs=1e-12)
    assert got["map50"] == pytest.approx(ev.stats[1], abs=1e-12)
    assert got["map75"] == pytest.approx(ev.stats[2], abs=1e-12)
    prec = ev.eval["precision"][:, :, :, 0, 2]          # T, R, K at area all, 100 dets
    for k, row in enumerate(got["per_class"]):
        assert row["ap"] == pytest.approx(prec[:, :, k].mean(), abs=1e-12)
        assert row["ap50"] == pytest.approx(prec[0, :, k].mean(), abs=1e-12)
    assert 0.05 < got["map"] < 0.95      # neither trivial end: the set exercises both


def test_map_hand_computed_cases():
    gt = ImageTruth([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 0])
    perfect = ImageDetections([[0, 0, 10, 10], [20, 20, 30, 30]], [0.9, 0.8], [0, 0])
    assert detection_summary([gt], [perfect], ["a"])["map"] == pytest.approx(1.0)
    # one of two objects found, with the best score: recall reaches 0.5 at precision 1,
    # so 51 of the 101 recall points (0, 0.01, ..., 0.50) score 1
    half = ImageDetections([[0, 0, 10, 10]], [0.9], [0])
    assert detection_summary([gt], [half], ["a"])["map50"] == pytest.approx(51 / 101)
    # a false positive ranked first: precision 1/2 then 2/3 at recall 1 -> all 101 at 2/3
    fp_first = ImageDetections([[50, 50, 60, 60], [0, 0, 10, 10], [20, 20, 30, 30]],
                               [0.95, 0.9, 0.8], [0, 0, 0])
    assert detection_summary([gt], [fp_first], ["a"])["map50"] == pytest.approx(2 / 3)
    # a box shifted by 2 px: IoU 8x10 / (100 + 100 - 80) = 0.667, a match at the
    # thresholds 0.5 .. 0.65 (4 of 10), not from 0.7 up
    one = ImageTruth([[0, 0, 10, 10]], [0])
    shifted = ImageDetections([[2, 0, 12, 10]], [0.9], [0])
    s = detection_summary([one], [shifted], ["a"])
    assert s["map50"] == pytest.approx(1.0) and s["map"] == pytest.approx(4 / 10)
    # no detections: 0; a class without ground truth is left out of the mean
    none = ImageDetections(np.zeros((0, 4)), [], [])
    s = detection_summary([gt], [none], ["a", "b"])
    assert s["map"] == 0.0 and s["per_class"][1]["ap"] is None
    # a detection on an ignored (difficult / crowd) object counts neither way
    hard = ImageTruth([[0, 0, 10, 10], [20, 20, 30, 30]], [0, 0], ignore=[False, True])
    both = ImageDetections([[20, 20, 30, 30], [0, 0, 10, 10]], [0.95, 0.9], [0, 0])
    assert detection_summary([hard], [both], ["a"])["map"] == pytest.approx(1.0)


def test_voc_xml_loader(tmp_path):
    (tmp_path / "Annotations").mkdir()
    (tmp_path / "JPEGImages").mkdir()
    (tmp_path / "JPEGImages" / "a.jpg").write_bytes(b"")
    (tmp_path / "Annotations" / "a.xml").write_text(
        "<annotation><filename>a.jpg</filename>"
        "<object><name>dog</name><difficult>0</difficult><bndbox><xmin>1</xmin><ymin>2</ymin>"
        "<xmax>30</xmax><ymax>40</ymax></bndbox></object>"
        "<object><name>car</name><difficult>1</difficult><bndbox><xmin>5</xmin><ymin>6</ymin>"
        "<xmax>7</xmax><ymax>8</ymax></bndbox></object></annotation>")
    ds = open_task_dataset(tmp_path, {"task": {"kind": "detect"},
                                      "labels": ["person", "car", "dog"]})
    (s,) = ds.samples
    assert s.image == str(tmp_path / "JPEGImages" / "a.jpg")
    np.testing.assert_array_equal(s.target.boxes, [[1, 2, 30, 40], [5, 6, 7, 8]])
    assert s.target.classes.tolist() == [2, 1] and s.target.ignore.tolist() == [False, True]
    (tmp_path / "Annotations" / "a.xml").write_text(
        "<annotation><object><name>cat</name></object></annotation>")
    with pytest.raises(DatasetError, match="labels"):
        open_task_dataset(tmp_path, {"task": {"kind": "detect"}, "labels": ["dog"]})


def test_coco_loader_errors_name_the_file(tmp_path):
    p = tmp_path / "instances.json"
    p.write_text('{"images": [{"id": 1, "file_name": "x.png"}], "annotations": '
                 '[{"image_id": 1, "category_id": 9, "bbox": [1, 2]}], "categories": []}')
    with pytest.raises(DatasetError) as e:
        open_task_dataset(p, {"task": {"kind": "detect"}})
    assert "annotations[0]" in e.value.field
    p.write_text("[1, 2]")
    with pytest.raises(DatasetError, match="not COCO JSON"):
        open_task_dataset(p, {"task": {"kind": "detect"}})
    assert open_task_dataset(p, {"task": {"kind": "classify"}}) is None


def test_edit_distance_and_text_accuracy_by_hand():
    assert edit_distance("kitten", "sitting") == 3     # k->s, e->i, +g
    assert edit_distance("", "abc") == 3 and edit_distance("abc", "") == 3
    assert edit_distance("flaw", "lawn") == 2          # -f, +n
    assert edit_distance("日本語", "日本") == 1          # characters, not bytes
    assert edit_distance("abc", "abc") == 0
    s = text_summary(["hello", "wrld", "xyz"], ["hello", "world", "ab"])
    # edits 0 + 1 + 3 (two substitutions, one deletion) over 5 + 5 + 2 characters
    assert s["edits"] == 4 and s["chars"] == 12
    assert s["char_accuracy"] == pytest.approx(1 - 4 / 12)
    assert s["cer"] == pytest.approx(4 / 12)
    assert s["word_accuracy"] == pytest.approx(1 / 3)
    assert text_summary(["garbage text"], ["ab"])["char_accuracy"] == 0.0   # clipped
    assert text_summary([""], [""])["char_accuracy"] == 1.0
    with pytest.raises(DatasetError, match="one prediction per label") as e:
        text_summary(["a", "b"], ["a"])
    assert (e.value.value, e.value.limit) == (2, 1)


def test_edit_distance_equals_plain_dynamic_programming():
    def ref(a, b):
        d = [[i + j if i * j == 0 else 0 for j in range(len(b) + 1)] for i in range(len(a) + 1)]
        for i in range(1, len(a) + 1):
            for j in range(1, len(b) + 1):
                d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1,
                              d[i - 1][j - 1] + (a[i - 1] != b[j - 1]))
        return d[-1][-1]

    rng = np.random.default_rng(0)
    for _ in range(200):
        a = "".join(rng.choice(list("abc"), rng.integers(0, 9)))
        b = "".join(rng.choice(list("abc"), rng.integers(0, 9)))
        assert edit_distance(a, b) == ref(a, b), (a, b)


def test_ocr_label_lines_split_at_newlines_only(tmp_path):
    """The text is everything after the first tab: U+0085, U+2028 and a form feed are part of
    a label (str.splitlines split there), a CRLF file reads as LF."""
    p = tmp_path / "labels.txt"
    p.write_bytes("a.png\tAB\x85CD\r\nb.png\tok\u2028fine\x0c\n\nc.png\t\n".encode())
    ds = open_task_dataset(p, {"task": {"kind": "ocr", "chars": ["A", "B"]}})
    assert [(Path(s.image).name, s.target) for s in ds.samples] == [
        ("a.png", "AB\x85CD"), ("b.png", "ok\u2028fine\x0c"), ("c.png", "")]
