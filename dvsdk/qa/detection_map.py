"""Detection mAP as the COCO evaluation defines it (bounding boxes, area range "all", at most
100 detections per image and class), in numpy.

Per class and IoU threshold t ∈ {0.50, 0.55, …, 0.95}:

1. In each image the class's detections, best score first (stable), at most ``max_det``,
   are matched greedily: a detection takes, among the ground truths not yet matched
   (crowd regions may be matched again), the one of highest IoU ≥ t (ties: the later one),
   preferring any that is not ignored over one that is.  A detection matched to an
   ignored ground truth (COCO ``iscrowd``, VOC ``difficult``) counts neither way.
   Crowd IoU is area(d ∩ g) / area(d); otherwise area(d ∩ g) / area(d ∪ g), areas
   (x1 − x0)·(y1 − y0).
2. All images' detections of the class, best score first (stable, images in order):
   recall = TP / (ground truths not ignored), precision = TP / (TP + FP); precision made
   non-increasing from the right; sampled at the 101 recalls 0, 0.01, …, 1 (the first
   point reaching each recall; 0 past the largest recall reached).
3. AP(class, t) = the mean of those 101 samples; classes without a ground truth that is
   not ignored are left out.

``map50`` is the mean AP at t = 0.5 over classes, ``map`` (mAP@[.5:.95]) the mean over
classes and the ten thresholds.  tests/test_qa_detection.py checks both against
pycocotools on generated sets.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)
RECALLS = np.linspace(0.0, 1.0, 101)
MAX_DET = 100


@dataclass
class ImageTruth:
    """One image's ground truth: boxes (n, 4) x0, y0, x1, y1, classes (n,), and per box
    whether it is ignored (crowd, difficult) and whether it is a crowd region."""

    boxes: np.ndarray
    classes: np.ndarray
    ignore: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    crowd: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, np.float64).reshape(-1, 4)
        self.classes = np.asarray(self.classes, np.int64).reshape(-1)
        n = len(self.classes)
        self.crowd = np.asarray(self.crowd, bool).reshape(-1) if len(self.crowd) else \
            np.zeros(n, bool)
        self.ignore = (np.asarray(self.ignore, bool).reshape(-1) if len(self.ignore)
                       else np.zeros(n, bool)) | self.crowd


@dataclass
class ImageDetections:
    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray

    def __post_init__(self) -> None:
        self.boxes = np.asarray(self.boxes, np.float64).reshape(-1, 4)
        self.scores = np.asarray(self.scores, np.float64).reshape(-1)
        self.classes = np.asarray(self.classes, np.int64).reshape(-1)


def _ious(d: np.ndarray, g: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    x0 = np.maximum(d[:, None, 0], g[None, :, 0])
    y0 = np.maximum(d[:, None, 1], g[None, :, 1])
    x1 = np.minimum(d[:, None, 2], g[None, :, 2])
    y1 = np.minimum(d[:, None, 3], g[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    ad = ((d[:, 2] - d[:, 0]) * (d[:, 3] - d[:, 1]))[:, None]
    ag = ((g[:, 2] - g[:, 0]) * (g[:, 3] - g[:, 1]))[None, :]
    union = np.where(crowd[None, :], ad, ad + ag - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def match_image(det_boxes: np.ndarray, gt_boxes: np.ndarray, gt_ignore: np.ndarray,
                gt_crowd: np.ndarray, thresholds: np.ndarray = IOU_THRESHOLDS
                ) -> tuple[np.ndarray, np.ndarray]:
    """(matched (T, D), ignored (T, D)) of one image's and class's detections, already
    best first (module docstring, step 1).  Greedy by nature: one step a detection, each
    over all thresholds and ground truths at once."""
    nt, nd, ng = len(thresholds), len(det_boxes), len(gt_boxes)
    matched = np.zeros((nt, nd), bool)
    ignored = np.zeros((nt, nd), bool)
    if not nd or not ng:
        return matched, ignored
    ious = _ious(det_boxes, gt_boxes, gt_crowd)
    taken = np.zeros((nt, ng), bool)
    reach = np.minimum(thresholds, 1 - 1e-10)[:, None]
    rank = np.arange(ng)[None, :] * 1e-12   # ties: the later ground truth
    for d in range(nd):
        free = (~taken | gt_crowd[None, :]) & (ious[d][None, :] >= reach)
        key = np.where(free, ious[d][None, :] + rank, -1.0)
        best_kept = np.argmax(np.where(~gt_ignore[None, :], key, -1.0), axis=1)
        has_kept = (free & ~gt_ignore[None, :]).any(axis=1)
        best_ign = np.argmax(np.where(gt_ignore[None, :], key, -1.0), axis=1)
        has_ign = (free & gt_ignore[None, :]).any(axis=1)
        g = np.where(has_kept, best_kept, best_ign)
        hit = has_kept | has_ign
        matched[:, d] = hit
        ignored[:, d] = hit & gt_ignore[g]
        taken[np.flatnonzero(hit), g[hit]] = True
    return matched, ignored


def average_precision(truths: list[ImageTruth], dets: list[ImageDetections],
                      num_classes: int, max_det: int = MAX_DET) -> np.ndarray:
    """(T, K) AP per threshold and class; NaN for a class without a ground truth that is
    not ignored."""
    ap = np.full((len(IOU_THRESHOLDS), num_classes), np.nan)
    for k in range(num_classes):
        scores, tps, fps, npos = [], [], [], 0
        for gt, dt in zip(truths, dets):
            gsel = gt.classes == k
            npos += int(np.count_nonzero(gsel & ~gt.ignore))
            dsel = np.flatnonzero(dt.classes == k)
            dsel = dsel[np.argsort(-dt.scores[dsel], kind="stable")][:max_det]
            if not len(dsel):
                continue
            m, ign = match_image(dt.boxes[dsel], gt.boxes[gsel], gt.ignore[gsel],
                                 gt.crowd[gsel])
            scores.append(dt.scores[dsel])
            tps.append(m & ~ign)
            fps.append(~m & ~ign)
        if npos == 0:
            continue
        if not scores:
            ap[:, k] = 0.0
            continue
        order = np.argsort(-np.concatenate(scores), kind="stable")
        tp = np.cumsum(np.concatenate(tps, axis=1)[:, order], axis=1, dtype=np.float64)
        fp = np.cumsum(np.concatenate(fps, axis=1)[:, order], axis=1, dtype=np.float64)
        recall = tp / npos
        precision = tp / (tp + fp + np.spacing(1))
        precision = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
        for t in range(len(IOU_THRESHOLDS)):
            idx = np.searchsorted(recall[t], RECALLS, side="left")
            ok = idx < recall.shape[1]
            q = np.zeros(len(RECALLS))
            q[ok] = precision[t, idx[ok]]
            ap[t, k] = q.mean()
    return ap


def detection_summary(truths: list[ImageTruth], dets: list[ImageDetections],
                      classes: list[str], max_det: int = MAX_DET) -> dict:
    """``map`` (mAP@[.5:.95]), ``map50``, ``map75``, per-class AP, counts."""
    ap = average_precision(truths, dets, len(classes), max_det)
    have = ~np.isnan(ap[0])

    def mean(a: np.ndarray) -> float:
        return float(a[:, have].mean()) if have.any() else 0.0

    return {
        "map": mean(ap), "map50": mean(ap[:1]), "map75": mean(ap[5:6]),
        "samples": len(truths),
        "objects": int(sum(int(np.count_nonzero(~t.ignore)) for t in truths)),
        "detections": int(sum(len(d.scores) for d in dets)),
        "per_class": [{"class": name, "ap": None if np.isnan(ap[0, k]) else
                       float(ap[:, k].mean()), "ap50": None if np.isnan(ap[0, k]) else
                       float(ap[0, k])} for k, name in enumerate(classes)],
    }
