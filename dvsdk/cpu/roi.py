"""ONNX ``MaxRoiPool`` (Fast R-CNN's ROI pooling, as Caffe computes it).

Each ROI ``[batch_index, x1, y1, x2, y2]`` is scaled by ``spatial_scale`` and rounded
(half away from zero); its corners are inclusive, so it spans ``x2 - x1 + 1`` columns (at
least 1).  It is cut into ``pooled_shape = [ph, pw]`` bins of real size ``height / ph`` by
``width / pw``; bin (i, j) covers rows ``floor(i * bh) .. ceil((i + 1) * bh)`` (exclusive
end) from the ROI's top, clipped to the image, and yields the maximum there, or 0 when the
clipped bin is empty.  Output ``(num_rois, C, ph, pw)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..hw import arith

__all__ = ["max_roi_pool"]


def _round_half_away(v: np.ndarray) -> np.ndarray:
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def _bins(start: int, size: int, n: int, limit: int) -> list[tuple[int, int]]:
    edge = size / n
    return [(min(max(int(np.floor(i * edge)) + start, 0), limit),
             min(max(int(np.ceil((i + 1) * edge)) + start, 0), limit)) for i in range(n)]


def max_roi_pool(inputs: list, attrs: Mapping[str, Any]) -> list[np.ndarray]:
    x, rois = np.asarray(inputs[0]), np.asarray(inputs[1], np.float64)
    ph, pw = (int(v) for v in attrs["pooled_shape"])
    scale = float(attrs.get("spatial_scale", 1.0))
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, ph, pw), x.dtype)
    corners = _round_half_away(rois[:, 1:5] * scale)
    batch = np.clip(rois[:, 0], 0, n - 1).astype(np.int64)
    for r in range(rois.shape[0]):           # per ROI and per bin; each bin is vectorized
        x1, y1, x2, y2 = (int(v) for v in np.nan_to_num(corners[r]))
        rows = _bins(y1, max(y2 - y1 + 1, 1), ph, h)
        cols = _bins(x1, max(x2 - x1 + 1, 1), pw, w)
        img = x[batch[r]]
        for i, (r0, r1) in enumerate(rows):
            if r1 <= r0:
                continue
            band = arith.reduce_max(img[:, r0:r1, :], axis=1)  # (C, W)
            for j, (c0, c1) in enumerate(cols):
                if c1 > c0:
                    out[r, :, i, j] = arith.reduce_max(band[:, c0:c1], axis=1)
    return [out]
