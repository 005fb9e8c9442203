"""Non-maximum suppression, vectorized in numpy.

Greedy NMS as detectors define it: boxes with score >= ``conf`` in descending score order
(ties: the lower index first); a box is kept unless a kept box *of the same class* overlaps
it with IoU > ``iou``; at most ``max_det`` are kept.  IoU = area(a ∩ b) / area(a ∪ b)
with areas (x1 − x0)·(y1 − y0), no +1 (ONNX NonMaxSuppression's definition).

Classes never suppress each other: each box is shifted by class · (twice the largest
coordinate magnitude + 1), so boxes of different classes cannot overlap, and one pass
serves all classes.  The greedy pass walks the kept boxes only (at most ``max_det``
steps), each step one vectorized IoU row of the kept box against the boxes still alive:
memory O(n), time O(max_det · n), no (n, n) matrix.
"""

from __future__ import annotations

import numpy as np

from ..errors import TaskError

#: candidates considered, the highest-scored first (as detectors cap NMS's input)
MAX_CANDIDATES = 30000

def nms(boxes: np.ndarray, scores: np.ndarray, classes: np.ndarray | None = None,
        iou: float = 0.45, conf: float = 0.0, max_det: int = 300) -> np.ndarray:
    """Indices of the boxes kept (module docstring), highest score first."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    scores = np.asarray(scores, np.float64).reshape(-1)
    cls = np.zeros(len(scores), np.int64) if classes is None \
        else np.asarray(classes, np.int64).reshape(-1)
    if len(boxes) != len(scores) or len(cls) != len(scores):
        raise TaskError("one box, score and class per detection", field="boxes/scores/classes",
                        value=(len(boxes), len(scores), len(cls)), limit="equal lengths")
    ok = np.flatnonzero((scores >= conf) & np.isfinite(scores)
                        & np.isfinite(boxes).all(axis=1))
    if not len(ok) or max_det < 1:
        return np.zeros(0, np.int64)
    order = ok[np.argsort(-scores[ok], kind="stable")][:MAX_CANDIDATES]
    b = boxes[order]
    span = float(np.abs(b).max()) * 2 + 1 if len(b) else 1.0
    shifted = b + (cls[order] * span)[:, None]
    area = np.clip(shifted[:, 2] - shifted[:, 0], 0, None) \
        * np.clip(shifted[:, 3] - shifted[:, 1], 0, None)
    rest = np.arange(len(order))       # alive candidates, best first
    kept: list[int] = []
    while len(rest) and len(kept) < max_det:
        i, rest = int(rest[0]), rest[1:]
        kept.append(i)
        bi, bc = shifted[i], shifted[rest]
        inter = np.clip(np.minimum(bi[2], bc[:, 2]) - np.maximum(bi[0], bc[:, 0]), 0, None) \
            * np.clip(np.minimum(bi[3], bc[:, 3]) - np.maximum(bi[1], bc[:, 1]), 0, None)
        union = area[i] + area[rest] - inter
        with np.errstate(divide="ignore", invalid="ignore"):
            iou_row = np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)
        rest = rest[iou_row <= iou]
    return order[np.asarray(kept, np.int64)]
