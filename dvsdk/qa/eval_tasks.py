"""``dvsdk eval`` for detectors and text recognizers (nets compiled with ``--task detect`` or
``--task ocr``): what a worker computes per image and how the client sums it up.

The orchestration (devices, ``--jobs``, Dask, sample order) is :mod:`.evaluate`'s; it hands
samples of these kinds to :func:`predict_one` and their results to :func:`summarize`.

* detect: each image's boxes after the net's own decode and NMS (its recorded ``conf``,
  ``iou``, ``max_det``: compile with a low ``--conf``, e.g. 0.001, to measure mAP as the
  COCO tools do), scored against the ground truth by :mod:`.detection_map`: ``map``
  (mAP@[.5:.95]), ``map50``, ``map75``, per-class AP;
* ocr: each image's CTC-decoded text against its label by :mod:`.ocr_metrics`:
  ``char_accuracy``, ``cer``, ``word_accuracy``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DatasetError
from .detection_map import ImageDetections, ImageTruth, detection_summary
from .ocr_metrics import edit_distance, text_summary
from .task_datasets import DETECT, OCR

KINDS = (DETECT, OCR)


def predict_one(net: Any, sample: Any, kind: str) -> dict[str, Any]:
    """One image's result on a worker (small: boxes or text, and the device time)."""
    task = (net.meta.get("task") or {}).get("kind")
    if task != kind:
        raise DatasetError(f"a {kind} dataset needs a net compiled with --task {kind}",
                           field="task", value=task, limit=kind)
    res = net.run_image(sample.image)
    us = float(net.last_run.device_us)
    if kind == DETECT:
        return {"boxes": np.asarray(res.boxes, np.float32),
                "scores": np.asarray(res.scores, np.float32),
                "classes": np.asarray(res.classes, np.int32), "device_us": us}
    return {"text": res.text, "score": float(res.score), "device_us": us}


def summarize(dataset: Any, results: list, workers: list[str], result_type: type) -> Any:
    """The client's sum of every sample's result (``results``: (index, result or None,
    error) sorted by index) as ``result_type`` (:class:`.evaluate.EvalResult`).  A failed
    image is left out of the metrics and listed in ``errors``."""
    errors = [(dataset.samples[i].image, msg) for i, _, msg in results if msg]
    ok = [(i, r) for i, r, msg in results if not msg]
    rows = []
    if dataset.kind == DETECT:
        truths: list[ImageTruth] = [dataset.samples[i].target for i, _ in ok]
        dets = [ImageDetections(r["boxes"], r["scores"], r["classes"]) for _, r in ok]
        summary = detection_summary(truths, dets, list(dataset.classes))
        for i, r, msg in results:
            row: dict[str, Any] = {"path": dataset.samples[i].image,
                                   "objects": int(len(dataset.samples[i].target.classes))}
            if r is None:
                row["error"] = msg
            else:
                row["detections"] = int(len(r["scores"]))
                row["device_us"] = r["device_us"]
            rows.append(row)
    else:
        preds = [r["text"] for _, r in ok]
        labels = [dataset.samples[i].target for i, _ in ok]
        summary = text_summary(preds, labels)
        for i, r, msg in results:
            row = {"path": dataset.samples[i].image, "label": dataset.samples[i].target}
            if r is None:
                row["error"] = msg
            else:
                row.update(prediction=r["text"], score=r["score"],
                           edits=edit_distance(r["text"], dataset.samples[i].target),
                           device_us=r["device_us"])
            rows.append(row)
    summary["failed"] = len(errors)
    return result_type(dataset.kind, summary, list(dataset.classes), errors, workers, rows)


def print_report(result: Any) -> None:
    """The human report of ``dvsdk eval`` for these kinds."""
    s = result.summary
    n = f"on {s['samples']} images ({len(result.workers)} worker" \
        f"{'s' if len(result.workers) != 1 else ''})"
    if result.kind == DETECT:
        width = max([len(c) for c in result.classes] + [5])
        print(f"{'class':{width}s}  AP@[.5:.95]  AP@.5")
        for row in s["per_class"]:
            if row["ap"] is not None:
                print(f"{row['class']:{width}s}  {row['ap']:11.2%}  {row['ap50']:6.2%}")
        print(f"mAP@[.5:.95] {s['map']:.2%}  mAP@.5 {s['map50']:.2%}  {n}, "
              f"{s['objects']} objects, {s['detections']} detections")
    else:
        print(f"character accuracy {s['char_accuracy']:.2%} (CER {s['cer']:.2%})  word "
              f"accuracy {s['word_accuracy']:.2%}  {n}")
