"""Task heads: an image in, a result out, around ``net.run``.

``head = head_for(net)`` reads META ``task`` (:mod:`.spec`; a net without one gets a
:class:`RawHead`).  ``x, ctx = head.prepare(rgb)`` applies the preprocessing the net.bin
records (:func:`dvsdk.runtime.images.preprocess`: stretch or letterbox, channel order,
mean, scale, std) and returns the input with the :class:`~.geometry.Geometry` that undoes
the resize; ``head.finish(net.run(x), ctx)`` turns the outputs into a result
(:mod:`.results`) in the original image's pixels.  ``net.run_image(img)`` does the three
for a net with a task (:func:`run_task_image`).

Segmentation's class map comes from the DV700's maximizer unit (§9.2,
:meth:`dvsdk.runtime.net.Net.class_map`) when ``run_image`` runs the net and the device
has one (at most 255 classes); ``finish`` on outputs alone (a pipeline's) takes the
argmax in numpy (the lowest class wins a tie, as the maximizer's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import InvalidArgument, TaskError
from ..runtime.images import as_rgb, preprocess
from . import ctc, yolo
from .geometry import Geometry
from .nms import nms
from .results import Classification, Detections, Raw, Result, Segmentation, Text
from .spec import YOLOV3_ANCHORS, TaskSpec

__all__ = ["Head", "RawHead", "ClassifyHead", "DetectHead", "SegmentHead", "OcrHead",
           "head_for", "run_task_image"]


class Head:
    """Preprocessing and post-processing of one single-image-input network."""

    kind = "raw"

    def __init__(self, meta: dict[str, Any], spec: TaskSpec | None = None) -> None:
        self.meta = meta
        self.spec = spec
        self.labels: list[str] = list(meta.get("labels") or [])
        inputs = meta["inputs"]
        if len(inputs) != 1:
            raise TaskError("a task head needs a single-input network", field="inputs",
                            value=[i["name"] for i in inputs], limit=1)
        self.input = inputs[0]
        shape = tuple(self.input["shape"])
        nhwc = self.input.get("layout", "NCHW") == "NHWC"
        if len(shape) != 4 or shape[3 if nhwc else 1] not in (1, 3):
            raise TaskError("a task head needs an image input", field="input shape",
                            value=shape, limit="(N, 1|3, H, W)")
        self.in_hw = (shape[1], shape[2]) if nhwc else (shape[2], shape[3])
        self.sample_shape = (1, *shape[1:])
        names = [o["name"] for o in meta["outputs"]]
        want = spec.outputs if spec is not None and spec.outputs else names
        missing = [n for n in want if n not in names]
        if missing:
            raise TaskError("the task names outputs the network lacks", field="task.outputs",
                            value=missing, limit=names)
        self.output_names: list[str] = list(want)

    # -- the two halves ----------------------------------------------------------------
    def geometry(self, height: int, width: int) -> Geometry:
        pre = self.input.get("preprocess") or {}
        return Geometry.of(height, width, *self.in_hw, pre.get("resize", "stretch"),
                           pre.get("crop_ratio"))

    def prepare(self, rgb: Any) -> tuple[np.ndarray, Geometry]:
        """(input for ``net.run``, context for :meth:`finish`) of one image (an array or a
        path; :func:`dvsdk.runtime.images.as_rgb`)."""
        img = as_rgb(rgb)
        x = preprocess(img, self.sample_shape, self.input.get("preprocess") or {},
                       self.input.get("layout", "NCHW"))
        return x, self.geometry(*img.shape[:2])

    def finish(self, outputs: dict[str, np.ndarray], ctx: Geometry) -> Result:
        """The result of one image's outputs."""
        return Raw(outputs=dict(outputs))

    # -- helpers ---------------------------------------------------------------------
    def _label(self, k: int) -> str:
        return self.labels[k] if 0 <= k < len(self.labels) else str(int(k))

    def _tensors(self, outputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        missing = [n for n in self.output_names if n not in outputs]
        if missing:
            raise TaskError("outputs lack what the task reads", field="outputs",
                            value=sorted(outputs), limit=self.output_names)
        return [np.asarray(outputs[n]) for n in self.output_names]


class RawHead(Head):
    kind = "raw"


class ClassifyHead(Head):
    """Top-k of a (1, K) (or (1, K, 1, 1)) score vector; softmax unless the scores are
    already probabilities (non-negative, summing to 1 within 1 %)."""

    kind = "classify"

    def finish(self, outputs: dict[str, np.ndarray], ctx: Geometry) -> Classification:
        v = self._tensors(outputs)[0].astype(np.float64).reshape(-1)
        if v.size < 1:
            raise TaskError("a classifier's output is empty", field="outputs", value=0)
        probs = ctc.probabilities(v[None])[0]
        k = self.spec.top_k if self.spec else 5
        top = np.argsort(-probs, kind="stable")[:k]
        return Classification([(int(i), self._label(int(i)), float(probs[i])) for i in top],
                              outputs=dict(outputs))


class DetectHead(Head):
    """YOLO decode (:mod:`.yolo`) + class-aware NMS (:mod:`.nms`), boxes back to the
    original image's pixels (:mod:`.geometry`)."""

    kind = "detect"

    def __init__(self, meta: dict[str, Any], spec: TaskSpec) -> None:
        super().__init__(meta, spec)
        shapes = [o["shape"] for o in meta["outputs"] if o["name"] in self.output_names]
        self.decoder = spec.decoder or yolo.choose_decoder(
            shapes, len(self.labels) if self.labels else None)
        self.anchors = spec.anchors or ([list(map(list, s)) for s in YOLOV3_ANCHORS]
                                        if self.decoder == "yolov3" else None)

    def candidates(self, outputs: dict[str, np.ndarray]) -> yolo.Candidates:
        """Boxes (input pixels), scores and classes before NMS."""
        t = self._tensors(outputs)
        if self.decoder == "yolov8":
            return yolo.decode_yolov8(t)
        if self.decoder == "yolov5":
            return yolo.decode_yolov5(t)
        return yolo.decode_yolov3(t, self.anchors, self.in_hw, self.spec.strides)

    def finish(self, outputs: dict[str, np.ndarray], ctx: Geometry) -> Detections:
        boxes, scores, classes = self.candidates(outputs)
        s = self.spec
        keep = nms(boxes, scores, classes, iou=s.iou, conf=s.conf, max_det=s.max_det)
        return Detections(boxes=ctx.boxes_to_original(boxes[keep]),
                          scores=scores[keep].astype(np.float32),
                          classes=classes[keep].astype(np.int64),
                          labels=[self._label(int(k)) for k in classes[keep]],
                          outputs=dict(outputs))


class SegmentHead(Head):
    """Per-pixel argmax over the class axis of (1, K, H, W) (NHWC outputs: classes last),
    or a (1, H, W) / (H, W) map the model computed itself; back to the original size."""

    kind = "segment"

    def class_map(self, outputs: dict[str, np.ndarray]) -> np.ndarray:
        v = self._tensors(outputs)[0]
        spec = next(o for o in self.meta["outputs"] if o["name"] == self.output_names[0])
        if v.ndim == 4:
            if spec.get("layout") == "NHWC":
                v = v.transpose(0, 3, 1, 2)
            if v.shape[0] != 1:
                raise TaskError("segmentation runs one image", field="outputs",
                                value=list(v.shape), limit="(1, K, H, W)")
            return np.argmax(v[0], axis=0)
        if v.ndim in (2, 3) and (v.ndim == 2 or v.shape[0] == 1):
            return np.asarray(v.reshape(v.shape[-2:]), np.int64)
        raise TaskError("a segmenter's output is (1, K, H, W) scores or an (H, W) map",
                        field="outputs", value=list(v.shape))

    def finish(self, outputs: dict[str, np.ndarray], ctx: Geometry,
               class_map: np.ndarray | None = None) -> Segmentation:
        cm = self.class_map(outputs) if class_map is None else np.asarray(class_map)
        return Segmentation(class_map=ctx.map_to_original(cm).astype(np.int32),
                            labels=self.labels, outputs=dict(outputs))


class OcrHead(Head):
    """CTC greedy decoding (:mod:`.ctc`) with the recorded character set."""

    kind = "ocr"

    def finish(self, outputs: dict[str, np.ndarray], ctx: Geometry) -> Text:
        text, score = ctc.greedy(self._tensors(outputs)[0], self.spec.chars or [])
        return Text(text=text, score=score, outputs=dict(outputs))


HEADS = {"classify": ClassifyHead, "detect": DetectHead, "segment": SegmentHead,
         "ocr": OcrHead}


def head_for(net: Any) -> Head:
    """The head of a loaded net (or anything with ``.meta``, or a META dict)."""
    meta = net if isinstance(net, dict) else net.meta
    task = meta.get("task")
    if task is None:
        return RawHead(meta)
    spec = TaskSpec.from_meta(task)
    return HEADS[spec.kind](meta, spec)


def run_task_image(net: Any, image: Any, timeout: float = 10.0, ipu: bool = False
                   ) -> Result | list[Result]:
    """``net.run_image`` of a net with a task: one result per image (a list for a batch-N
    net given a list)."""
    head = getattr(net, "_task_head", None)
    if head is None:
        head = net._task_head = head_for(net)
    many = isinstance(image, (list, tuple))
    rgbs = [as_rgb(i) for i in (image if many else [image])]
    ctxs = [head.geometry(*r.shape[:2]) for r in rgbs]
    with net.lock:
        outs = net.run_image(rgbs if many else rgbs[0], timeout, ipu, raw=True)
        maps = None
        if isinstance(head, SegmentHead) and head.output_names[0] == net.outputs[0]["name"]:
            try:
                maps = net.class_map(head.output_names[0])   # the maximizer, if any
            except InvalidArgument:   # not a (N, K, H, W) output: numpy's argmax instead
                maps = None
    n = len(rgbs)
    results = []
    for i, ctx in enumerate(ctxs):
        one = {k: v[i:i + 1] if n > 1 else v for k, v in outs.items()}
        if maps is not None:
            results.append(head.finish(one, ctx, maps if maps.ndim == 2 else maps[i]))
        else:
            results.append(head.finish(one, ctx))
    return results if many else results[0]


def resolve_task(task: Any, meta: dict[str, Any]) -> dict[str, Any]:
    """META ``task`` for a compiled net's META (the compiler's last step): ``task`` a kind,
    a dict of META keys (``chars`` may name a character file, ``anchors`` may be the CLI's
    text) or a TaskSpec; the detection decoder chosen from the output shapes when not
    given (:func:`.yolo.choose_decoder`), and the head built once so that anything it
    would refuse at run time is refused now (TaskError)."""
    from .spec import read_chars

    if isinstance(task, TaskSpec):
        spec = task
    else:
        d = {"kind": task} if isinstance(task, str) else dict(task) \
            if isinstance(task, dict) else None
        if d is None:
            raise TaskError("task must be a kind, a dict or a TaskSpec", field="task",
                            value=str(task)[:80])
        if isinstance(d.get("chars"), str):
            d["chars"] = read_chars(d["chars"])
        d = {k: v for k, v in d.items() if v is not None}
        spec = TaskSpec.from_meta(d)
    head = HEADS[spec.kind](meta, spec)
    if isinstance(head, DetectHead):
        spec.decoder = head.decoder
        if head.decoder == "yolov3" and spec.anchors is None:
            spec.anchors = head.anchors
        shapes = [o["shape"] for o in meta["outputs"] if o["name"] in head.output_names]
        n = yolo.classes_of(head.decoder, shapes, len(spec.anchors[0]) if spec.anchors
                            else 0)
        if head.decoder == "yolov3" and len(spec.anchors) != len(shapes):
            raise TaskError("yolov3 needs one anchor set per output scale", field="anchors",
                            value=len(spec.anchors), limit=len(shapes))
        if head.labels and len(head.labels) != n:
            raise TaskError(f"{len(head.labels)} labels for a detector of {n} classes",
                            field="labels", value=len(head.labels), limit=n)
    if isinstance(head, OcrHead):
        shape = next(o["shape"] for o in meta["outputs"] if o["name"] == head.output_names[0])
        ctc.as_steps(np.zeros([max(1, d) for d in shape]), len(spec.chars or []) + 1)
    return spec.to_meta()
