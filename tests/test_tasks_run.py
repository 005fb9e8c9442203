"""Task heads end to end on sim://: ``dvsdk-compile --task`` then ``dvsdk-run --json`` /
``net.run_image`` against onnxruntime's outputs decoded independently here (letterbox with
PIL, per-column YOLOv8 decode, per-box NMS, nearest resize, CTC loops)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from PIL import Image

import dvsdk
from dvsdk.cli.compile import run as compile_cli
from dvsdk.cli.run import run as run_cli
from dvsdk.errors import NetFileError, TaskError
from dvsdk.netfile import decode, encode
from dvsdk.tasks import Classification, Detections, Raw, Segmentation, Text, head_for

from .task_models import ctc_recognizer, segmenter, yolov8_like
from .test_tasks_nms import ref_nms


def ort_run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def letterbox_ref(rgb, size):
    """Scale to fit (PIL bilinear), centre, zeros around: (image, scale_x, scale_y, left,
    top)."""
    h, w = rgb.shape[:2]
    s = min(size / h, size / w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    out = np.zeros((size, size, 3), np.uint8)
    top, left = (size - nh) // 2, (size - nw) // 2
    out[top:top + nh, left:left + nw] = np.asarray(
        Image.fromarray(rgb).resize((nw, nh), Image.BILINEAR))
    return out, nw / w, nh / h, left, top


def reference_detections(model, rgb, conf=0.3, iou=0.5):
    """onnxruntime on the 32x32 letterboxed image, a YOLOv8 (1, 4 + C, N) head decoded and
    NMS'd here (:func:`ref_nms`), boxes clipped in ``rgb``'s pixels: (boxes, scores,
    classes) of the kept candidates, and every candidate's score."""
    boxed, sx, sy, left, top = letterbox_ref(rgb, 32)
    out = ort_run(model, (boxed.astype(np.float32) / 255).transpose(2, 0, 1)[None])[0]
    boxes, scores, classes = [], [], []
    for n in range(out.shape[1]):
        cx, cy, w, h = (float(v) for v in out[:4, n])
        cls = [float(v) for v in out[4:, n]]
        boxes.append([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2])
        scores.append(max(cls))
        classes.append(cls.index(max(cls)))
    keep = ref_nms(boxes, scores, classes, iou, conf, 300)
    hgt, wid = rgb.shape[:2]
    kept = [[min(max((b[0] - left) / sx, 0), wid), min(max((b[1] - top) / sy, 0), hgt),
             min(max((b[2] - left) / sx, 0), wid), min(max((b[3] - top) / sy, 0), hgt)]
            for b in (boxes[k] for k in keep)]
    return kept, [scores[k] for k in keep], [classes[k] for k in keep], scores


def photo(h=40, w=60, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.random((h, w, 3)) * 255).astype(np.uint8)


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    d = tmp_path_factory.mktemp("det")
    model = yolov8_like()
    onnx.save(model, d / "y.onnx")
    (d / "labels.txt").write_text("cat\ndog\nbird\n")
    assert compile_cli([str(d / "y.onnx"), "-o", str(d / "y.bin"), "--task", "detect",
                        "--labels", str(d / "labels.txt"), "--letterbox", "--scale", "1/255",
                        "--conf", "0.3", "--iou", "0.5", "-q"]) == 0
    return d, model


def test_dvsdk_run_json_boxes_equal_onnxruntime_decoded_here(detector, tmp_path, capsys):
    d, model = detector
    rgb = photo()
    Image.fromarray(rgb).save(tmp_path / "photo.png")
    capsys.readouterr()
    assert run_cli([str(d / "y.bin"), str(tmp_path / "photo.png"), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["results"][0]["result"]
    assert got["kind"] == "detect"

    want, kept_scores, kept_classes, scores = reference_detections(model, rgb)
    # nothing within FP16 reach of the score threshold (the test would not be decisive)
    assert min(abs(s - 0.3) for s in scores) > 0.01
    assert 3 <= len(want) < 30 and len(set(kept_classes)) >= 2
    dets = got["detections"]
    assert [x["class"] for x in dets] == kept_classes
    assert [x["label"] for x in dets] == [["cat", "dog", "bird"][c] for c in kept_classes]
    np.testing.assert_allclose([x["box"] for x in dets], want, atol=0.25)
    np.testing.assert_allclose([x["score"] for x in dets], kept_scores, atol=4e-3)
    capsys.readouterr()
    assert run_cli([str(d / "y.bin"), str(tmp_path / "photo.png")]) == 0
    human = capsys.readouterr().out.splitlines()
    assert f"{len(want)} detections" in human[1]
    first = dets[0]
    assert human[2].split()[:2] == [f"{first['score']:.2f}", first["label"]]


def test_run_image_returns_detections_and_draws_them(detector):
    d, _ = detector
    rgb = photo()
    with dvsdk.load(d / "y.bin") as net:
        res = net.run_image(rgb)
        raw = net.run_image(rgb, raw=True)
        head = head_for(net)
        x, ctx = head.prepare(rgb)
        again = head.finish(net.run(x), ctx)
    assert isinstance(res, Detections) and len(res) >= 3
    assert set(raw) == {"output0"} and raw["output0"].shape == (1, 7, 64)
    np.testing.assert_array_equal(again.boxes, res.boxes)
    assert res.boxes.dtype == np.float32 and res.classes.dtype.kind == "i"
    img = res.draw(rgb)
    assert img.shape == rgb.shape and img.dtype == np.uint8
    assert not np.array_equal(img, rgb) and np.array_equal(photo(), rgb)   # a new image
    # the right edge of the last (lowest-scored, drawn last) box has its class colour
    from dvsdk.tasks.draw import colour

    x0, y0, x1, y1 = res.boxes[-1]
    c = colour(int(res.classes[-1]))
    col = int(np.floor(x1)) if x1 < 59 else int(np.floor(x1)) - 1
    rows = np.arange(int(np.ceil(y0)) + 15, int(np.floor(y1)))
    if len(rows):
        assert (img[rows, col] == c).all(axis=1).any()
    json.dumps(res.to_json())


def test_letterbox_inversion_finds_a_rectangle_in_original_pixels():
    from dvsdk.runtime.images import resize
    from dvsdk.tasks.geometry import Geometry

    rgb = np.zeros((90, 160, 3), np.uint8)
    rgb[20:50, 100:140] = 255                      # x 100..140, y 20..50
    for mode in ("letterbox", "stretch"):
        small = resize(rgb, 64, 64, mode)
        ys, xs = np.nonzero(small[..., 0] > 127)
        box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
        g = Geometry.of(90, 160, 64, 64, mode)
        np.testing.assert_allclose(g.boxes_to_original(np.array([box]))[0],
                                   [100, 20, 140, 50], atol=160 / 64 + 0.5)
    g = Geometry.of(90, 160, 64, 64, "letterbox")
    assert (g.top, g.left, g.scaled_height, g.scaled_width) == (14, 0, 36, 64)
    np.testing.assert_allclose(g.boxes_to_original(np.array([[-5, 0, 70, 64]]))[0],
                               [0, 0, 160, 90])


def test_segmentation_class_map_equals_onnxruntime_argmax(tmp_path):
    model = segmenter()
    onnx.save(model, tmp_path / "s.onnx")
    labels = ["bg", "road", "car", "sky"]
    dvsdk.compile(tmp_path / "s.onnx", tmp_path / "s.bin", task="segment", labels=labels,
                  resize="letterbox", scale=1 / 255)
    rgb = photo(24, 40, seed=4)
    with dvsdk.load(tmp_path / "s.bin") as net:
        res = net.run_image(rgb)
        used_maximizer = "maximizer" in net.device.info().units
    assert isinstance(res, Segmentation) and res.class_map.shape == (24, 40)
    assert used_maximizer   # sim:// has the unit: run_image took the map from it
    boxed, sx, sy, left, top = letterbox_ref(rgb, 16)
    scores = ort_run(model, (boxed.astype(np.float32) / 255).transpose(2, 0, 1)[None])[0]
    am = scores.argmax(axis=0)
    srt = np.sort(scores, axis=0)
    margin = srt[-1] - srt[-2]
    want = np.empty((24, 40), np.int64)
    sure = np.empty((24, 40), bool)
    for y in range(24):
        for x in range(40):
            iy = top + min(int((y + 0.5) * sy), round(24 * sy) - 1)
            ix = left + min(int((x + 0.5) * sx), round(40 * sx) - 1)
            want[y, x], sure[y, x] = am[iy, ix], margin[iy, ix] > 0.02
    assert sure.mean() > 0.9
    np.testing.assert_array_equal(res.class_map[sure], want[sure])
    j = res.to_json()
    assert sum(c["pixels"] for c in j["classes"]) == 24 * 40
    assert {c["label"] for c in j["classes"]} <= set(labels)
    blended = res.draw(rgb)
    on = res.class_map != 0
    from dvsdk.tasks.draw import PALETTE

    mix = np.rint(rgb * 0.5 + PALETTE[res.class_map % 16] * 0.5)
    np.testing.assert_array_equal(blended[on], mix[on].astype(np.uint8))
    np.testing.assert_array_equal(blended[~on], rgb[~on])


def ctc_ref(steps, chars):
    out, prev = [], None
    for t in range(steps.shape[0]):
        k = int(np.argmax(steps[t]))
        if k != prev and k != 0:
            out.append(chars[k - 1])
        prev = k
    return "".join(out)


def compiled_recognizer(tmp_path):
    """The CTC recognizer of task_models, compiled with ``--task ocr`` and the characters
    a..e to ``tmp_path / "c.bin"``; the ONNX model."""
    model = ctc_recognizer()
    onnx.save(model, tmp_path / "c.onnx")
    (tmp_path / "chars.txt").write_text("a\nb\nc\nd\ne\n")
    assert compile_cli([str(tmp_path / "c.onnx"), "-o", str(tmp_path / "c.bin"), "--task",
                        "ocr", "--chars", str(tmp_path / "chars.txt"), "--scale", "1/255",
                        "-q"]) == 0
    return model


def test_ocr_text_equals_ctc_of_onnxruntime(tmp_path):
    model = compiled_recognizer(tmp_path)
    texts = []
    with dvsdk.load(tmp_path / "c.bin") as net:
        for seed in range(40):
            rgb = photo(8, 32, seed=seed)
            steps = ort_run(model, (rgb.astype(np.float32) / 255).transpose(2, 0, 1)[None])[0]
            srt = np.sort(steps, axis=1)
            if (srt[:, -1] - srt[:, -2]).min() < 0.01:
                continue   # a step FP16 could flip: not a decisive case
            res = net.run_image(rgb)
            assert isinstance(res, Text) and res.text == ctc_ref(steps, "abcde")
            texts.append(res.text)
    assert len(texts) >= 3 and len(set(texts)) > 1


def test_ctc_greedy_hand_cases():
    from dvsdk.tasks.ctc import greedy

    chars = list("helo")   # classes: 0 blank, 1 h, 2 e, 3 l, 4 o

    def onehot(seq):
        m = np.full((len(seq), 5), 0.0)
        m[np.arange(len(seq)), seq] = 1.0
        return m

    # "hh-e-ll-ll-oo": repeats collapse, a blank between two l's keeps both
    assert greedy(onehot([1, 1, 0, 2, 0, 3, 3, 0, 3, 3, 0, 4, 4]), chars) == ("hello", 1.0)
    assert greedy(onehot([0, 0, 0]), chars) == ("", 1.0)
    assert greedy(onehot([3, 3, 3])[None], chars)[0] == "l"          # (1, T, K)
    assert greedy(onehot([1, 2])[:, None], chars)[0] == "he"          # (T, 1, K)
    assert greedy(onehot([1, 2]).T[None], chars)[0] == "he"           # (1, K, T)
    p = np.array([[0.1, 0.7, 0.1, 0.05, 0.05], [0.6, 0.1, 0.1, 0.1, 0.1],
                  [0.1, 0.1, 0.5, 0.2, 0.1]])
    text, score = greedy(p, chars)
    assert text == "he" and score == pytest.approx((0.7 + 0.5) / 2)
    with pytest.raises(TaskError, match="CTC"):
        greedy(np.zeros((4, 7)), chars)


def test_classify_top_k_with_labels(tmp_path):
    from onnx import helper

    from .onnx_models import make_model, w

    inits = {"k": w(1, 6, 3, 4, 4, scale=0.3), "b": w(2, 6, scale=0.2),
             "shape": np.array([1, 6], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "k", "b"], ["c"], kernel_shape=[4, 4],
                              strides=[4, 4]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Reshape", ["g", "shape"], ["logits"])]
    model = make_model(nodes, [("x", [1, 3, 8, 8])], ["logits"], inits)
    onnx.save(model, tmp_path / "m.onnx")
    labels = [f"class{i}" for i in range(6)]
    dvsdk.compile(tmp_path / "m.onnx", tmp_path / "m.bin", labels=labels,
                  task={"kind": "classify", "top_k": 3}, scale=1 / 255)
    rgb = photo(8, 8, seed=9)
    with dvsdk.load(tmp_path / "m.bin") as net:
        res = net.run_image(rgb)
    logits = ort_run(model, (rgb.astype(np.float32) / 255).transpose(2, 0, 1)[None])[0]
    e = np.exp(logits - logits.max())
    probs = e / e.sum()
    order = sorted(range(6), key=lambda i: -probs[i])[:3]
    assert isinstance(res, Classification)
    assert [k for k, _, _ in res.top] == order
    assert [lab for _, lab, _ in res.top] == [labels[i] for i in order]
    np.testing.assert_allclose([s for *_, s in res.top], probs[order], atol=2e-3)
    assert res.to_json()["top"][0] == {"class": order[0], "label": labels[order[0]],
                                       "score": pytest.approx(float(probs[order[0]]), abs=2e-3)}


def test_net_without_task_keeps_tensors_and_gets_a_raw_head(tmp_path):
    onnx.save(segmenter(), tmp_path / "s.onnx")
    dvsdk.compile(tmp_path / "s.onnx", tmp_path / "s.bin")
    rgb = photo(16, 16)
    with dvsdk.load(tmp_path / "s.bin") as net:
        assert "task" not in net.meta
        outs = net.run_image(rgb)
        head = head_for(net)
        x, ctx = head.prepare(rgb)
        res = head.finish(net.run(x), ctx)
    assert isinstance(outs, dict) and outs["scores"].shape == (1, 4, 16, 16)
    assert isinstance(res, Raw)
    j = res.to_json()["outputs"]["scores"]
    assert j["shape"] == [1, 4, 16, 16]
    assert j["min"] == pytest.approx(float(outs["scores"].min()))
    assert j["max"] == pytest.approx(float(outs["scores"].max()))
    copy = res.draw(rgb)
    assert np.array_equal(copy, rgb) and copy is not rgb


def test_task_errors_are_typed_and_cli_says_one_line(tmp_path, capsys):
    onnx.save(yolov8_like(), tmp_path / "y.onnx")
    (tmp_path / "two.txt").write_text("a\nb\n")
    base = [str(tmp_path / "y.onnx"), "-o", str(tmp_path / "y.bin"), "-q"]
    cases = [
        (["--conf", "0.3"], "--conf needs --task"),
        (["--task", "detect", "--labels", str(tmp_path / "two.txt")], "2 labels for a "
         "detector of 3 classes"),
        (["--task", "detect", "--decoder", "yolov3"], "do not fit the yolov3"),
        (["--task", "detect", "--conf", "1.5"], "conf must be a number in [0, 1]"),
        (["--task", "ocr"], "--chars"),
        (["--task", "detect", "--decoder", "yolov3", "--anchors", "1,2,3"], "pairs"),
    ]
    for extra, msg in cases:
        capsys.readouterr()
        assert compile_cli(base + extra) == 2, extra
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1 and "Traceback" not in err
    with pytest.raises(TaskError) as e:
        dvsdk.compile(tmp_path / "y.onnx", task="track")
    assert e.value.field == "task.kind"
    for bad in (float("inf"), float("nan"), 5.5):   # inf and nan raised builtin errors
        with pytest.raises(TaskError) as e:
            dvsdk.compile(tmp_path / "y.onnx", task={"kind": "detect", "max_det": bad})
        assert e.value.field.endswith("max_det"), bad


def test_reader_refuses_a_bad_task_and_loads_old_files(tmp_path):
    onnx.save(segmenter(), tmp_path / "s.onnx")
    net = dvsdk.compile(tmp_path / "s.onnx", task="segment")
    data = encode(net)
    assert decode(data).meta["task"] == {"kind": "segment"}
    for bad, field in (({"kind": "segment", "outputs": ["nope"]}, "task.outputs"),
                       ({"kind": "detect", "decoder": "yolov9"}, "task.decoder"),
                       ({"decoder": "yolov8"}, "task.kind"), ("detect", "task")):
        net.meta["task"] = bad
        with pytest.raises(NetFileError) as e:
            decode(encode(net))
        assert e.value.field == field
    del net.meta["task"]
    assert "task" not in decode(encode(net)).meta
