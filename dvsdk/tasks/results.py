"""What a task head returns: one result per image, each with ``to_json()`` (a
JSON-serialisable dict with stable keys, ``kind`` first), ``draw(rgb)`` (a new annotated
uint8 RGB image, :mod:`.draw`), ``summary()`` (one short human line or a few) and
``outputs`` (the raw output tensors it was made from).

=================  ===========================================================
kind               to_json keys
=================  ===========================================================
classify           top: [{class, label, score}] best first
detect             detections: [{box: [x0, y0, x1, y1], score, class, label}]
                   best first; box in the original image's pixels
segment            height, width, classes: [{class, label, pixels}] (present
                   classes, most pixels first); the map itself is ``class_map``
ocr                text, score
raw                outputs: {name: {shape, dtype, min, max}}
=================  ===========================================================
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import draw as _draw

Outputs = dict[str, np.ndarray]


@dataclass
class Classification:
    """Top-k classes: (class id, label, score) best first; score a probability."""

    top: list[tuple[int, str, float]]
    outputs: Outputs = field(default_factory=dict, repr=False)
    kind = "classify"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "top": [{"class": int(k), "label": str(label),
                                            "score": float(s)} for k, label, s in self.top]}

    def summary(self) -> str:
        return "\n".join(f"{s:7.2%}  {label}" for _, label, s in self.top)

    def draw(self, rgb: np.ndarray) -> np.ndarray:
        return _draw.text(rgb, [f"{label} {s:.2f}" for _, label, s in self.top])


@dataclass
class Detections:
    """Boxes (n, 4) float32 x0, y0, x1, y1 in the original image's pixels, best first."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    labels: list[str]
    outputs: Outputs = field(default_factory=dict, repr=False)
    kind = "detect"

    def __len__(self) -> int:
        return len(self.scores)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "detections": [
            {"box": [float(v) for v in b], "score": float(s), "class": int(k), "label": lab}
            for b, s, k, lab in zip(self.boxes, self.scores, self.classes, self.labels)]}

    def summary(self) -> str:
        if not len(self):
            return "no detections"
        return "\n".join(f"{s:6.2f}  {lab:16s} [{b[0]:.0f}, {b[1]:.0f}, {b[2]:.0f}, {b[3]:.0f}]"
                         for b, s, lab in zip(self.boxes, self.scores, self.labels))

    def draw(self, rgb: np.ndarray) -> np.ndarray:
        return _draw.boxes(rgb, self.boxes, self.classes,
                           [f"{lab} {s:.2f}" for s, lab in zip(self.scores, self.labels)])


@dataclass
class Segmentation:
    """A per-pixel class map (H, W) of the original image's size; ``labels`` names the
    classes (may be empty: classes are then numbered)."""

    class_map: np.ndarray
    labels: list[str]
    outputs: Outputs = field(default_factory=dict, repr=False)
    kind = "segment"

    def _name(self, k: int) -> str:
        return self.labels[k] if 0 <= k < len(self.labels) else str(k)

    def to_json(self) -> dict[str, Any]:
        present, counts = np.unique(np.asarray(self.class_map, np.int64), return_counts=True)
        order = np.argsort(-counts, kind="stable")
        h, w = self.class_map.shape[:2]
        return {"kind": self.kind, "height": int(h), "width": int(w),
                "classes": [{"class": int(present[j]), "label": self._name(int(present[j])),
                             "pixels": int(counts[j])} for j in order]}

    def summary(self) -> str:
        total = max(1, self.class_map.size)
        return ", ".join(f"{c['label']} {c['pixels'] / total:.1%}"
                         for c in self.to_json()["classes"][:8])

    def draw(self, rgb: np.ndarray) -> np.ndarray:
        return _draw.blend(rgb, self.class_map)


@dataclass
class Text:
    """Recognized text and its score (the mean probability of the characters kept)."""

    text: str
    score: float
    outputs: Outputs = field(default_factory=dict, repr=False)
    kind = "ocr"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "score": float(self.score)}

    def summary(self) -> str:
        return f"{self.text!r} ({self.score:.2f})"

    def draw(self, rgb: np.ndarray) -> np.ndarray:
        return _draw.text(rgb, [f"{self.text} ({self.score:.2f})"])


@dataclass
class Raw:
    """No task recorded: the output tensors as they are."""

    outputs: Outputs = field(default_factory=dict, repr=False)
    kind = "raw"

    def to_json(self) -> dict[str, Any]:
        def one(v: np.ndarray) -> dict[str, Any]:
            v = np.asarray(v)
            finite = v[np.isfinite(v)] if v.dtype.kind == "f" else v
            return {"shape": list(v.shape), "dtype": str(v.dtype),
                    "min": float(finite.min()) if finite.size else None,
                    "max": float(finite.max()) if finite.size else None}
        return {"kind": self.kind, "outputs": {k: one(v) for k, v in self.outputs.items()}}

    def summary(self) -> str:
        return "\n".join(f"{k}: {tuple(np.shape(v))}" for k, v in self.outputs.items())

    def draw(self, rgb: np.ndarray) -> np.ndarray:
        from ..runtime.images import as_rgb

        return as_rgb(rgb).copy()


Result = Classification | Detections | Segmentation | Text | Raw
