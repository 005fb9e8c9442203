"""Accuracy metrics as pure numpy functions: top-k, confusion matrices, per-class tables, IoU.

Definitions (as in common use): top-k accuracy is the share of samples whose label is among
the k highest scores; a confusion matrix counts ``C[true, predicted]``; recall = C[i,i] /
row i, precision = C[i,i] / column i; IoU_i = C[i,i] / (row i + column i − C[i,i]); mIoU is
the mean IoU over classes that occur (in labels or predictions); pixel accuracy = trace / sum.
"""

from __future__ import annotations

import numpy as np


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first (ties: the lower index first)."""
    scores = np.asarray(scores, np.float64).reshape(-1)
    k = min(k, scores.size)
    return np.argsort(-scores, kind="stable")[:k]


def confusion(true: np.ndarray, pred: np.ndarray, num_classes: int,
              ignore: int | None = None) -> np.ndarray:
    """``C[t, p]`` counts (int64); entries with ``true == ignore`` or outside
    ``0..num_classes-1`` are left out."""
    t = np.asarray(true, np.int64).reshape(-1)
    p = np.asarray(pred, np.int64).reshape(-1)
    keep = (t >= 0) & (t < num_classes) & (p >= 0) & (p < num_classes)
    if ignore is not None:
        keep &= t != ignore
    flat = t[keep] * num_classes + p[keep]
    return np.bincount(flat, minlength=num_classes * num_classes).reshape(
        num_classes, num_classes)


def classification_summary(top: np.ndarray, labels: np.ndarray, num_classes: int,
                           k: int = 5) -> dict:
    """``top``: (N, >= k) predicted classes, best first; ``labels``: (N,).  Accuracy as
    ``top1`` and ``top<k>``."""
    top = np.asarray(top, np.int64)
    labels = np.asarray(labels, np.int64)
    n = len(labels)
    hits = top == labels[:, None]
    conf = confusion(labels, top[:, 0], num_classes)
    return {
        "samples": n,
        "top1": float(hits[:, :1].any(axis=1).mean()) if n else 0.0,
        f"top{k}": float(hits[:, :k].any(axis=1).mean()) if n else 0.0,
        "confusion": conf,
        "per_class": per_class(conf),
    }


def per_class(conf: np.ndarray) -> list[dict]:
    """Support, recall (per-class accuracy) and precision of each class."""
    diag = np.diag(conf).astype(np.float64)
    rows, cols = conf.sum(axis=1), conf.sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(rows > 0, diag / np.maximum(rows, 1), np.nan)
        precision = np.where(cols > 0, diag / np.maximum(cols, 1), np.nan)
    return [{"support": int(rows[i]), "recall": _num(recall[i]),
             "precision": _num(precision[i])} for i in range(len(diag))]


def segmentation_summary(conf: np.ndarray) -> dict:
    """Per-class IoU, mIoU over classes that occur, pixel accuracy."""
    conf = np.asarray(conf, np.int64)
    diag = np.diag(conf).astype(np.float64)
    union = conf.sum(axis=0) + conf.sum(axis=1) - diag
    iou = np.where(union > 0, diag / np.maximum(union, 1), np.nan)
    total = conf.sum()
    return {
        "pixels": int(total),
        "pixel_accuracy": float(diag.sum() / total) if total else 0.0,
        "miou": float(np.nanmean(iou)) if np.isfinite(iou).any() else 0.0,
        "iou": [_num(v) for v in iou],
        "confusion": conf,
    }


def _num(v: float) -> float | None:
    return None if not np.isfinite(v) else float(v)
