"""Non-maximum suppression, vectorized in numpy.

Greedy NMS as detectors define it: boxes with score >= ``conf`` in descending score order
(ties: the lower index first); a box is kept unless a kept box *of the same class* overlaps
it with IoU > ``iou``; at most ``max_det`` are kept.  IoU = area(a ∩ b) / area(a ∪ b)
with areas (x1 − x0)·(y1 − y0), no +1 (ONNX NonMaxSuppression's definition).

Classes never suppress each other: each box is shifted by class · (largest coordinate
extent + 1), so boxes of different classes cannot overlap, and one pass serves all
classes.  The IoU of every pair is one (n, n) array; the greedy pass then walks the
kept boxes only (each step one vectorized row), at most ``max_det`` steps.
"""

from __future__ import annotations

import numpy as np

#: candidates compared at once (the (n, n) IoU array); the highest-scored are taken first
MAX_CANDIDATES = 4096


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(n, m) IoU of x0, y0, x1, y1 boxes (empty boxes: 0)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray | None = None,
        iou: float = 0.45, conf: float = 0.0, max_det: int = 300) -> np.ndarray:
    """Indices of the boxes kept (module docstring), highest score first."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    cls = np.zeros(len(scores), np.int64) if classes is None \
        else np.asarray(classes, np.int64).reshape(-1)
    ok = np.flatnonzero((scores >= conf) & np.isfinite(scores)
                        & np.isfinite(boxes).all(axis=1))
    if not len(ok) or max_det < 1:
        return np.zeros(0, np.int64)
    order = ok[np.argsort(-scores[ok], kind="stable")][:MAX_CANDIDATES]
    b = boxes[order]
    span = float(np.abs(b).max()) * 2 + 1 if len(b) else 1.0
    shifted = b + (cls[order] * span)[:, None]
    overlaps = iou_matrix(shifted, shifted) > iou
    alive = np.ones(len(order), bool)
    kept: list[int] = []
    i = 0
    while len(kept) < max_det:
        rest = np.flatnonzero(alive[i:])
        if not len(rest):
            break
        i += int(rest[0])
        kept.append(i)
        alive &= ~overlaps[i]
        alive[i] = False
    return order[np.asarray(kept, np.int64)]
