"""``dvsdk eval`` on detectors (COCO JSON) and text recognizers (a label file) compiled with
--task, on sim://: mAP against pycocotools on onnxruntime's boxes decoded in the test,
character and word accuracy by hand, ``--expect`` on the new metric names."""

from __future__ import annotations

import json

import numpy as np
import onnx
from PIL import Image

import dvsdk
from dvsdk.cli.compile import run as compile_cli
from dvsdk.cli.main import run as dvsdk_cli

from .task_models import yolov8_like
from .test_qa_detection import pycoco
from .test_tasks_run import compiled_recognizer, ctc_ref, ort_run, photo, reference_detections


def reference_boxes(model, rgb):
    """onnxruntime on the letterboxed image, decoded and NMS'd in the test, in rgb's pixels."""
    boxes, scores, classes, _ = reference_detections(model, rgb)
    return list(zip(boxes, scores, classes))


def test_eval_detection_map_equals_pycocotools(tmp_path, capsys):
    model = yolov8_like()
    onnx.save(model, tmp_path / "y.onnx")
    (tmp_path / "labels.txt").write_text("cat\ndog\nbird\n")
    assert compile_cli([str(tmp_path / "y.onnx"), "-o", str(tmp_path / "y.bin"), "--task",
                        "detect", "--labels", str(tmp_path / "labels.txt"), "--letterbox",
                        "--scale", "1/255", "--conf", "0.3", "--iou", "0.5", "-q"]) == 0
    data = tmp_path / "coco"
    data.mkdir()
    images, anns, dets = [], [], []
    for iid, seed in enumerate((1, 5, 6), 1):
        rgb = photo(seed=seed)
        Image.fromarray(rgb).save(data / f"{iid}.png")
        images.append({"id": iid, "file_name": f"{iid}.png", "width": 60, "height": 40})
        ref = reference_boxes(model, rgb)
        for n, (b, s, k) in enumerate(ref):
            xywh = [b[0], b[1], b[2] - b[0], b[3] - b[1]]
            dets.append({"image_id": iid, "category_id": k + 1, "bbox": xywh, "score": s})
            if n % 3 == 0:   # ground truth: every third box, slightly shifted
                xywh = [xywh[0] + 0.8, xywh[1] - 0.5, xywh[2], xywh[3]]
            if n % 5 != 4:   # and a fifth of them never there (false positives)
                anns.append({"id": len(anns) + 1, "image_id": iid, "category_id": k + 1,
                             "bbox": xywh, "area": xywh[2] * xywh[3], "iscrowd": 0})
        anns.append({"id": len(anns) + 1, "image_id": iid, "category_id": 1,   # missed
                     "bbox": [1, 1, 6, 6], "area": 36, "iscrowd": 0})
    gt = {"images": images, "annotations": anns,
          "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"},
                         {"id": 3, "name": "bird"}]}
    (data / "instances.json").write_text(json.dumps(gt))
    # pycocotools on what the device finds (its FP16 scores may order near-ties unlike
    # onnxruntime's), the ground truth built from onnxruntime's boxes
    found = []
    with dvsdk.load(tmp_path / "y.bin") as net:
        for iid in (1, 2, 3):
            res = net.run_image(str(data / f"{iid}.png"))
            found += [{"image_id": iid, "category_id": int(k) + 1, "score": float(s),
                       "bbox": [float(b[0]), float(b[1]), float(b[2] - b[0]),
                                float(b[3] - b[1])]}
                      for b, s, k in zip(res.boxes, res.scores, res.classes)]
    assert len(found) == len(dets)
    want = pycoco(gt, found)
    assert 0.3 < want.stats[1] < 0.99
    capsys.readouterr()
    argv = ["eval", str(tmp_path / "y.bin"), str(data / "instances.json")]
    assert dvsdk_cli(argv + ["--json", "--per-image", str(tmp_path / "p.csv")]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["kind"] == "detect" and got["samples"] == 3 and got["failed"] == 0
    assert abs(got["map50"] - want.stats[1]) < 1e-9
    assert abs(got["map"] - want.stats[0]) < 1e-9
    assert got["detections"] == len(dets) and got["objects"] == len(anns)
    assert dvsdk_cli(argv + ["--json", "--jobs", "2"]) == 0   # samples pickled to processes
    again = json.loads(capsys.readouterr().out)
    assert (again["map"], again["map50"]) == (got["map"], got["map50"])
    head = (tmp_path / "p.csv").read_text().splitlines()[0].split(",")
    assert "objects" in head and "detections" in head and "boxes" in head
    for log in ("p.csv", "p.jsonl"):   # every image from the log: the same mAP
        if log == "p.jsonl":
            assert dvsdk_cli(argv + ["-q", "--per-image", str(tmp_path / log)]) == 0
            capsys.readouterr()
        assert dvsdk_cli(argv + ["--json", "--resume", str(tmp_path / log)]) == 0
        resumed = json.loads(capsys.readouterr().out)
        assert (resumed["map"], resumed["map50"], resumed["detections"]) == (
            got["map"], got["map50"], got["detections"]), log
    assert dvsdk_cli(argv + ["-q", "--expect", "map50>=0.3", "--expect", "map>=0.2"]) == 0
    assert dvsdk_cli(argv + ["-q", "--expect", "map50>=0.995"]) == 6
    err = capsys.readouterr().err
    assert "expected map50>=0.995" in err
    assert dvsdk_cli(argv + ["-q", "--expect", "top1>=0.5"]) == 2   # not a detection metric
    assert "map50" in capsys.readouterr().err
    assert dvsdk_cli(argv) == 0
    out = capsys.readouterr().out
    assert "mAP@[.5:.95]" in out and "mAP@.5" in out


def test_eval_ocr_char_and_word_accuracy(tmp_path, capsys):
    model = compiled_recognizer(tmp_path)
    lines, texts = [], []
    for seed in range(40):
        rgb = photo(8, 32, seed=seed)
        steps = ort_run(model, (rgb.astype(np.float32) / 255).transpose(2, 0, 1)[None])[0]
        srt = np.sort(steps, axis=1)
        if (srt[:, -1] - srt[:, -2]).min() < 0.01:
            continue
        Image.fromarray(rgb).save(tmp_path / f"w{seed}.png")
        texts.append(ctc_ref(steps, "abcde"))
        lines.append(f"w{seed}.png\t{texts[-1]}")
        if len(lines) == 4:
            break
    assert len(lines) == 4 and all(len(t) >= 2 for t in texts)
    # the last label: one character replaced, one appended -> 2 edits
    wrong = ("a" if texts[-1][0] != "a" else "b") + texts[-1][1:] + "e"
    lines[-1] = lines[-1].split("\t")[0] + "\t" + wrong
    (tmp_path / "labels.txt").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert dvsdk_cli(["eval", str(tmp_path / "c.bin"), str(tmp_path / "labels.txt"),
                      "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    chars = sum(len(t) for t in texts[:-1]) + len(wrong)
    assert got["kind"] == "ocr" and got["samples"] == 4
    assert abs(got["char_accuracy"] - (1 - 2 / chars)) < 1e-12
    assert got["word_accuracy"] == 0.75
    assert dvsdk_cli(["eval", str(tmp_path / "c.bin"), str(tmp_path / "labels.txt"), "-q",
                      "--expect", "word_accuracy>=0.8"]) == 6


def test_eval_classification_of_a_net_with_a_task_head(tmp_path, capsys):
    """A classifier compiled with --task classify still evaluates on its scores (the
    worker asks run_image for tensors): the same report as without the head."""
    from .test_resize_crop import classifier

    model = classifier(tmp_path)
    labels = ["a", "b", "c", "d"]
    dvsdk.compile(model, tmp_path / "plain.bin", labels=labels, scale=1 / 255)
    dvsdk.compile(model, tmp_path / "head.bin", labels=labels, scale=1 / 255, task="classify")
    rng = np.random.default_rng(1)
    for name in labels:
        (tmp_path / "ds" / name).mkdir(parents=True)
        for i in range(2):
            Image.fromarray((rng.random((16, 16, 3)) * 255).astype(np.uint8)).save(
                tmp_path / "ds" / name / f"{i}.png")
    reports = []
    for net in ("plain.bin", "head.bin"):
        capsys.readouterr()
        assert dvsdk_cli(["eval", str(tmp_path / net), str(tmp_path / "ds"), "--json"]) == 0
        r = json.loads(capsys.readouterr().out)
        reports.append((r["top1"], r["samples"], r["per_class"]))
    assert reports[0] == reports[1] and reports[0][1] == 8
