"""dvsdk.tasks.nms and the YOLO decoders against independent references: a plain per-box
Python NMS written here, onnxruntime's NonMaxSuppression op, and per-cell decode loops."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import dvsdk.tasks.nms as nms_mod
from dvsdk.errors import TaskError
from dvsdk.tasks import yolo
from dvsdk.tasks.nms import nms


def ref_nms(boxes, scores, classes, iou, conf, max_det):
    """Greedy class-aware NMS, one box at a time (the definition, no numpy tricks)."""
    def area(b):
        return max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])

    def overlap(a, b):
        w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
        h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
        inter = w * h
        union = area(a) + area(b) - inter
        return inter / union if union > 0 else 0.0

    order = sorted((i for i in range(len(scores)) if scores[i] >= conf),
                   key=lambda i: (-scores[i], i))
    kept = []
    for i in order:
        if len(kept) == max_det:
            break
        if all(classes[j] != classes[i] or overlap(boxes[i], boxes[j]) <= iou for j in kept):
            kept.append(i)
    return kept


def random_boxes(rng, n, classes=3, span=100.0):
    xy = rng.random((n, 2)) * span
    wh = rng.random((n, 2)) * span / 3 + 1
    boxes = np.concatenate([xy, xy + wh], axis=1)
    return boxes, rng.random(n), rng.integers(0, classes, n)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("iou,conf,max_det", [(0.45, 0.0, 300), (0.3, 0.25, 300),
                                              (0.7, 0.1, 5), (0.0, 0.5, 300)])
def test_nms_equals_per_box_reference(seed, iou, conf, max_det):
    rng = np.random.default_rng(seed)
    boxes, scores, classes = random_boxes(rng, 200)
    got = nms(boxes, scores, classes, iou=iou, conf=conf, max_det=max_det)
    assert got.tolist() == ref_nms(boxes.tolist(), scores.tolist(), classes.tolist(), iou,
                                   conf, max_det)


def ort_nms(boxes, scores, classes, iou, conf, n_classes):
    """onnxruntime's NonMaxSuppression: boxes as (y1, x1, y2, x2), one score row per class
    (a box scores 0 in the classes it is not), selected indices per class."""
    g = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["sel"],
                          center_point_box=0)], "nms",
        [helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, None, 4]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [1, n_classes, None])],
        [helper.make_tensor_value_info("sel", TensorProto.INT64, [None, 3])],
        [helper.make_tensor("m", TensorProto.INT64, [1], [100000]),
         helper.make_tensor("i", TensorProto.FLOAT, [1], [iou]),
         helper.make_tensor("t", TensorProto.FLOAT, [1], [conf])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    s = np.zeros((1, n_classes, len(scores)), np.float32)
    s[0, classes, np.arange(len(scores))] = scores
    b = boxes[:, [1, 0, 3, 2]].astype(np.float32)[None]
    (sel,) = sess.run(None, {"b": b, "s": s})
    return {(int(c), int(k)) for _, c, k in sel}


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("iou", [0.3, 0.5, 0.8])
def test_nms_equals_onnxruntime(seed, iou):
    rng = np.random.default_rng(100 + seed)
    boxes, scores, classes = random_boxes(rng, 300, classes=4)
    boxes = boxes.astype(np.float32).astype(np.float64)   # the same numbers ORT sees
    scores = scores.astype(np.float32).astype(np.float64)
    got = nms(boxes, scores, classes, iou=iou, conf=0.05, max_det=100000)
    want = ort_nms(boxes, scores, classes, iou, 0.05, 4)
    assert {(int(classes[k]), int(k)) for k in got} == want
    assert len(got) == len(want)
    assert np.all(np.diff(scores[got]) <= 0)   # best first


def test_nms_edge_cases():
    assert nms(np.zeros((0, 4)), np.zeros(0)).tolist() == []
    boxes = np.array([[0, 0, 10, 10], [0, 0, 10, 10], [0, 0, np.nan, 10]], float)
    scores = np.array([0.9, 0.8, 0.95])
    # identical boxes: IoU 1 > 0.45 suppresses the second; the NaN box is dropped
    assert nms(boxes, scores, None, iou=0.45).tolist() == [0]
    # different classes never suppress each other
    assert nms(boxes, scores, np.array([0, 1, 0]), iou=0.45).tolist() == [0, 1]


def test_nms_candidate_cap_takes_the_best(monkeypatch):
    monkeypatch.setattr(nms_mod, "MAX_CANDIDATES", 10)
    rng = np.random.default_rng(5)
    boxes, scores, classes = random_boxes(rng, 50)
    top = np.argsort(-scores)[:10]
    got = nms(boxes, scores, classes, iou=0.5)
    want = [top[i] for i in ref_nms(boxes[top].tolist(), scores[top].tolist(),
                                     classes[top].tolist(), 0.5, 0.0, 300)]
    assert got.tolist() == [int(i) for i in want]


# -- decoders ---------------------------------------------------------------------------

def test_yolov8_decode_equals_per_column_reference():
    rng = np.random.default_rng(1)
    out = rng.random((1, 4 + 3, 20)).astype(np.float32) * 50
    boxes, scores, classes = yolo.decode_yolov8([out])
    for n in range(20):
        cx, cy, w, h = (float(v) for v in out[0, :4, n])
        cls = [float(v) for v in out[0, 4:, n]]
        k = cls.index(max(cls))
        assert boxes[n] == pytest.approx([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2],
                                         rel=1e-6)
        assert scores[n] == pytest.approx(max(cls)) and classes[n] == k


def test_yolov5_decode_equals_per_row_reference():
    rng = np.random.default_rng(2)
    out = rng.random((1, 30, 5 + 4)).astype(np.float32)
    boxes, scores, classes = yolo.decode_yolov5([out])
    for n in range(30):
        cx, cy, w, h, obj = (float(v) for v in out[0, n, :5])
        cls = [obj * float(v) for v in out[0, n, 5:]]
        assert boxes[n] == pytest.approx([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
        assert scores[n] == pytest.approx(max(cls)) and classes[n] == cls.index(max(cls))


def test_yolov3_decode_equals_per_cell_reference():
    import math

    rng = np.random.default_rng(3)
    c, na = 2, 2
    anchors = [[[4, 5], [8, 6]], [[12, 20], [30, 25]]]   # strides 4 (8x8 grid), 8 (4x4)
    coarse = rng.standard_normal((1, na * (5 + c), 4, 4)).astype(np.float32)
    fine = rng.standard_normal((1, na * (5 + c), 8, 8)).astype(np.float32)
    boxes, scores, classes = yolo.decode_yolov3([coarse, fine], anchors, (32, 32))
    sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    want = []
    for out, anc, s in ((fine, anchors[0], 4), (coarse, anchors[1], 8)):
        g = out.shape[2]
        for a in range(na):
            for i in range(g):
                for j in range(g):
                    t = [float(out[0, a * (5 + c) + f, i, j]) for f in range(5 + c)]
                    cx, cy = (sig(t[0]) + j) * s, (sig(t[1]) + i) * s
                    w, h = anc[a][0] * math.exp(t[2]), anc[a][1] * math.exp(t[3])
                    sc = [sig(t[4]) * sig(v) for v in t[5:]]
                    want.append(([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], max(sc),
                                 sc.index(max(sc))))
    assert len(want) == len(scores)
    for n, (b, sc, k) in enumerate(want):
        assert boxes[n] == pytest.approx(b, rel=1e-9, abs=1e-9)
        assert scores[n] == pytest.approx(sc) and classes[n] == k


def test_choose_decoder_rule():
    assert yolo.choose_decoder([(1, 84, 8400)]) == "yolov8"
    assert yolo.choose_decoder([(1, 25200, 85)]) == "yolov5"
    assert yolo.choose_decoder([(1, 255, 13, 13), (1, 255, 26, 26)]) == "yolov3"
    assert yolo.choose_decoder([(1, 7, 64)], 3) == "yolov8"
    assert yolo.choose_decoder([(1, 64, 8)], 3) == "yolov5"
    with pytest.raises(TaskError, match="both"):
        yolo.choose_decoder([(1, 7, 8)], 3)          # 4+3 rows and 5+3 columns
    with pytest.raises(TaskError, match="cannot tell"):
        yolo.choose_decoder([(1, 9, 9)])
    with pytest.raises(TaskError, match="cannot tell"):
        yolo.choose_decoder([(1, 1000)])
    with pytest.raises(TaskError) as e:
        yolo.classes_of("yolov5", [(1, 84, 8400), (1, 2)])
    assert e.value.field == "decoder"


def _meta(outputs, labels=None, resize="stretch", task=None):
    return {"inputs": [{"name": "x", "shape": [1, 3, 32, 32], "layout": "NCHW",
                        "preprocess": {"resize": resize}}],
            "outputs": [{"name": n, "shape": list(s)} for n, s in outputs],
            "labels": labels, "task": task}


def test_yolov5_and_yolov3_heads_end_to_end_from_meta():
    from dvsdk.tasks import head_for
    from dvsdk.tasks.geometry import Geometry
    from dvsdk.tasks.heads import resolve_task

    rng = np.random.default_rng(9)
    # YOLOv5: (1, N, 5+C), decoder chosen from the shape, boxes back through a stretch
    out = rng.random((1, 40, 5 + 2)).astype(np.float32)
    out[0, :, :4] *= 32
    meta = _meta([("out", (1, 40, 7))], labels=["a", "b"])
    meta["task"] = resolve_task({"kind": "detect", "conf": 0.2, "iou": 0.4}, meta)
    assert meta["task"]["decoder"] == "yolov5"
    head = head_for(meta)
    res = head.finish({"out": out}, Geometry.of(64, 96, 32, 32))
    boxes, scores, classes = yolo.decode_yolov5([out])
    keep = ref_nms(boxes.tolist(), scores.tolist(), classes.tolist(), 0.4, 0.2, 300)
    want = np.clip(boxes[keep] * [3, 2, 3, 2], 0, [96, 64, 96, 64])
    np.testing.assert_allclose(res.boxes, want, rtol=1e-6)
    assert res.labels == [["a", "b"][classes[k]] for k in keep]
    # YOLOv3: two raw scales, the published anchors' first two scales given as text
    fine = rng.standard_normal((1, 3 * 7, 8, 8)).astype(np.float32)
    coarse = rng.standard_normal((1, 3 * 7, 4, 4)).astype(np.float32)
    meta = _meta([("p4", (1, 21, 4, 4)), ("p3", (1, 21, 8, 8))])
    anchors = "10,13,16,30,33,23;30,61,62,45,59,119"
    meta["task"] = resolve_task({"kind": "detect", "anchors": anchors, "conf": 0.3}, meta)
    assert meta["task"]["decoder"] == "yolov3"
    res = head_for(meta).finish({"p4": coarse, "p3": fine}, Geometry.of(32, 32, 32, 32))
    boxes, scores, classes = yolo.decode_yolov3(
        [coarse, fine], [[[10, 13], [16, 30], [33, 23]], [[30, 61], [62, 45], [59, 119]]],
        (32, 32))
    keep = ref_nms(boxes.tolist(), scores.tolist(), classes.tolist(), 0.45, 0.3, 300)
    assert len(keep) > 0
    np.testing.assert_allclose(res.boxes, np.clip(boxes[keep], 0, 32), rtol=1e-6)
    with pytest.raises(TaskError, match="anchor set per output"):
        resolve_task({"kind": "detect", "anchors": "10,13,16,30,33,23"}, meta)


def test_nms_refuses_operands_of_different_lengths():
    boxes = np.array([[0, 0, 10, 10], [1, 1, 9, 9]], float)
    with pytest.raises(TaskError, match="one box, score and class") as e:
        nms(boxes, np.array([0.9, 0.8]), np.array([0, 1, 2]))
    assert e.value.value == (2, 2, 3)
    with pytest.raises(TaskError):
        nms(boxes, np.array([0.9]))


@pytest.mark.parametrize("sides", [(0, 160, 64, 64), (90, -1, 64, 64), (90, 160, 0, 64),
                                   (90.5, 160, 64, 64)])
@pytest.mark.parametrize("mode", ["stretch", "letterbox", "crop"])
def test_geometry_refuses_sides_that_are_not_pixels(sides, mode):
    from dvsdk.errors import ImageError
    from dvsdk.tasks.geometry import Geometry

    with pytest.raises(ImageError, match="positive whole number"):
        Geometry.of(*sides, mode)
