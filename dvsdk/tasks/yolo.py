"""YOLO detection decoders: the network's output tensors → candidate boxes (x0, y0, x1, y1
in the network input's pixels), scores and classes, before NMS (:mod:`.nms`).

=========  ======================  ===============================================
decoder    output                  decode
=========  ======================  ===============================================
yolov8     one (1, 4+C, N)         rows cx, cy, w, h (input pixels), then C class
(v11)                              scores (already sigmoid); score = max class score
yolov5     one (1, N, 5+C)         columns cx, cy, w, h, objectness, C class scores
                                   (already sigmoid, as exported); score =
                                   objectness · class score, the best class
yolov3     one (1, A·(5+C), H, W)  raw: per anchor a of the scale with stride s,
           per scale               cell (i, j): cx = (σ(tx) + j)·s, cy = (σ(ty) + i)·s,
                                   w = a_w·exp(tw), h = a_h·exp(th), score =
                                   σ(obj)·σ(cls), the best class
=========  ======================  ===============================================

**Choosing from the output shapes** (:func:`choose_decoder`, when no ``--decoder`` is
given): several rank-4 outputs, or one rank-4 output whose channels are a multiple of
5 + C → yolov3; one rank-3 output (1, a, b): with C known (the labels), yolov8 if a = 4 + C,
yolov5 if b = 5 + C; without labels (or with labels that fit neither: the count is then
refused) the smaller of a and b is the per-box axis (a box has 4 + C or 5 + C numbers, a
grid has far more boxes: yolov8 if a < b, yolov5 if b < a).
Anything else, both rules matching, or a = b is refused with a TaskError naming the shapes
(give ``--decoder``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import TaskError

Candidates = tuple[np.ndarray, np.ndarray, np.ndarray]   # boxes (n, 4), scores, classes


def choose_decoder(shapes: Sequence[Sequence[int]], n_classes: int | None = None) -> str:
    """The decoder for these output shapes (module docstring), or TaskError."""
    shapes = [tuple(int(d) for d in s) for s in shapes]
    if shapes and all(len(s) == 4 and s[0] == 1 for s in shapes):
        if len(shapes) > 1 or n_classes is None or shapes[0][1] % (5 + n_classes) == 0:
            return "yolov3"
    if len(shapes) == 1 and len(shapes[0]) == 3 and shapes[0][0] == 1:
        _, a, b = shapes[0]
        if n_classes is not None:
            v8, v5 = a == 4 + n_classes, b == 5 + n_classes
            if v8 != v5:
                return "yolov8" if v8 else "yolov5"
            if v8 and v5:
                raise TaskError("the output fits both yolov8 (1, 4+C, N) and yolov5 (1, N, 5+C)"
                                "; give --decoder", field="decoder", value=shapes[0],
                                limit=("yolov8", "yolov5"))
        if a != b and min(a, b) >= 5:   # no labels, or labels that fit neither
            return "yolov8" if a < b else "yolov5"
    raise TaskError("cannot tell the detection decoder from the output shapes; give "
                    "--decoder (yolov8: one (1, 4+C, N); yolov5: one (1, N, 5+C); yolov3: "
                    "(1, A*(5+C), H, W) per scale)", field="decoder",
                    value=[list(s) for s in shapes], limit=("yolov8", "yolov5", "yolov3"))


def classes_of(decoder: str, shapes: Sequence[Sequence[int]], anchors: int = 3) -> int:
    """C, the classes a head of these output shapes scores (TaskError when the shapes do
    not fit the decoder)."""
    s = [list(x) for x in shapes]
    if decoder == "yolov8" and len(s) == 1 and len(s[0]) == 3 and s[0][1] >= 5:
        return s[0][1] - 4
    if decoder == "yolov5" and len(s) == 1 and len(s[0]) == 3 and s[0][2] >= 6:
        return s[0][2] - 5
    if decoder == "yolov3" and s and all(len(x) == 4 for x in s) and anchors:
        per = {x[1] // anchors for x in s if x[1] % anchors == 0}
        if len(per) == 1 and min(per) >= 6 and all(x[1] % anchors == 0 for x in s):
            return per.pop() - 5
    raise TaskError(f"the outputs do not fit the {decoder} decoder", field="decoder",
                    value=s, limit={"yolov8": "one (1, 4+C, N)", "yolov5": "one (1, N, 5+C)",
                                    "yolov3": "(1, A*(5+C), H, W) per scale"}.get(decoder))


def _xyxy(cx: np.ndarray, cy: np.ndarray, w: np.ndarray, h: np.ndarray) -> np.ndarray:
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _best(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(best score, its class) per row of an (n, C) array; ties: the lower class."""
    if scores.shape[1] == 0:
        return np.zeros(len(scores)), np.zeros(len(scores), np.int64)
    k = np.argmax(scores, axis=1)
    return scores[np.arange(len(scores)), k], k.astype(np.int64)


def _one(outputs: Sequence[np.ndarray], rank: int, name: str) -> np.ndarray:
    if len(outputs) != 1 or np.ndim(outputs[0]) != rank or np.shape(outputs[0])[0] != 1:
        raise TaskError(f"{name} decodes one (1, ...) output of rank {rank}", field="outputs",
                        value=[list(np.shape(o)) for o in outputs])
    return np.asarray(outputs[0], np.float64)[0]


def decode_yolov8(outputs: Sequence[np.ndarray]) -> Candidates:
    p = _one(outputs, 3, "yolov8")
    if p.shape[0] < 5:
        raise TaskError("yolov8 needs (1, 4+C, N) with C >= 1", field="outputs",
                        value=list(np.shape(outputs[0])))
    score, cls = _best(p[4:].T)
    return _xyxy(p[0], p[1], p[2], p[3]), score, cls


def decode_yolov5(outputs: Sequence[np.ndarray]) -> Candidates:
    p = _one(outputs, 3, "yolov5")
    if p.shape[1] < 6:
        raise TaskError("yolov5 needs (1, N, 5+C) with C >= 1", field="outputs",
                        value=list(np.shape(outputs[0])))
    score, cls = _best(p[:, 5:] * p[:, 4:5])
    return _xyxy(p[:, 0], p[:, 1], p[:, 2], p[:, 3]), score, cls


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * x))   # no overflow for large |x|


def decode_yolov3(outputs: Sequence[np.ndarray], anchors: Sequence[Sequence[Sequence[float]]],
                  input_hw: tuple[int, int], strides: Sequence[int] | None = None
                  ) -> Candidates:
    """Per-scale raw outputs (any order) with ``anchors`` per scale, strides ascending."""
    outs = [np.asarray(o, np.float64) for o in outputs]
    if not outs or any(o.ndim != 4 or o.shape[0] != 1 for o in outs):
        raise TaskError("yolov3 decodes (1, A*(5+C), H, W) outputs", field="outputs",
                        value=[list(o.shape) for o in outs])
    if len(anchors) != len(outs):
        raise TaskError("yolov3 needs one anchor set per output scale", field="anchors",
                        value=len(anchors), limit=len(outs))
    order = sorted(range(len(outs)), key=lambda i: -outs[i].shape[2])  # finest grid first
    if strides is not None and len(strides) != len(outs):
        raise TaskError("one stride per output scale", field="strides", value=list(strides),
                        limit=len(outs))
    boxes, scores, classes = [], [], []
    for rank, i in enumerate(order):
        o = outs[i][0]
        a = np.asarray(anchors[rank], np.float64)
        na = len(a)
        c, gh, gw = o.shape
        if c % na or c // na < 6:
            raise TaskError(f"output channels are not {na} anchors x (5 + C)",
                            field="outputs", value=list(outs[i].shape), limit=na)
        s = strides[rank] if strides is not None else input_hw[0] / gh
        p = o.reshape(na, c // na, gh, gw).transpose(0, 2, 3, 1)   # (A, H, W, 5+C)
        gy, gx = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
        cx = (_sigmoid(p[..., 0]) + gx) * s
        cy = (_sigmoid(p[..., 1]) + gy) * s
        w = a[:, 0, None, None] * np.exp(np.minimum(p[..., 2], 60.0))
        h = a[:, 1, None, None] * np.exp(np.minimum(p[..., 3], 60.0))
        sc, k = _best((_sigmoid(p[..., 5:]) * _sigmoid(p[..., 4:5])).reshape(-1, c // na - 5))
        boxes.append(_xyxy(cx.ravel(), cy.ravel(), w.ravel(), h.ravel()))
        scores.append(sc)
        classes.append(k)
    return np.concatenate(boxes), np.concatenate(scores), np.concatenate(classes)
