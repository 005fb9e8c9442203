"""The task head a net.bin records: META ``task`` (firmware_spec/netbin.md, "task").

``dvsdk-compile --task classify|detect|segment|ocr`` writes one JSON object::

    {"kind": "detect", "decoder": "yolov8", "conf": 0.25, "iou": 0.45, "max_det": 300,
     "anchors": [[[10, 13], [16, 30], [33, 23]], ...], "strides": [8, 16, 32],
     "outputs": ["output0"]}

==========  ==========================================================================
key         meaning
==========  ==========================================================================
kind        classify, detect, segment or ocr (required)
outputs     the output names the head reads (default: every output, in META order)
top_k       classify: classes reported (default 5)
decoder     detect: yolov8 (also v11), yolov5 or yolov3 (:mod:`.yolo`)
conf        detect: lowest score kept (default 0.25)
iou         detect: IoU above which a lower-scored box of its class is suppressed (0.45)
max_det     detect: most boxes kept (default 300)
anchors     detect, yolov3: per scale, (w, h) pairs in input pixels, strides ascending
strides     detect, yolov3: input pixels per grid cell of each scale, ascending
chars       ocr: the characters of classes 1..K-1 (class 0 is the CTC blank)
==========  ==========================================================================

Class names stay where classifiers always had them: META ``labels``.  A net.bin without
``task`` loads as before (``run_image`` returns the output tensors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..errors import TaskError

KINDS = ("classify", "detect", "segment", "ocr")
DECODERS = ("yolov8", "yolov11", "yolov5", "yolov3")
#: YOLOv3's published COCO anchors (w, h in input pixels), per scale with strides 8, 16, 32
YOLOV3_ANCHORS = (((10, 13), (16, 30), (33, 23)), ((30, 61), (62, 45), (59, 119)),
                  ((116, 90), (156, 198), (373, 326)))
LIMITS = {"top_k": 1000, "max_det": 100000, "anchors": 64, "chars": 100000}


@dataclass
class TaskSpec:
    """A validated META ``task`` (module docstring)."""

    kind: str
    outputs: list[str] | None = None
    top_k: int = 5
    decoder: str | None = None
    conf: float = 0.25
    iou: float = 0.45
    max_det: int = 300
    anchors: list[list[list[float]]] | None = None
    strides: list[int] | None = None
    chars: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise TaskError("unknown task", field="task.kind", value=self.kind, limit=KINDS)
        if self.outputs is not None:
            if not isinstance(self.outputs, list) or not all(
                    isinstance(o, str) and o for o in self.outputs):
                raise TaskError("task outputs must be a list of output names",
                                field="task.outputs", value=self.outputs)
        self.top_k = _int(self.top_k, "task.top_k", 1, LIMITS["top_k"])
        self.max_det = _int(self.max_det, "task.max_det", 1, LIMITS["max_det"])
        self.conf = _unit(self.conf, "task.conf")
        self.iou = _unit(self.iou, "task.iou")
        if self.decoder is not None:
            if self.decoder not in DECODERS:
                raise TaskError("unknown detection decoder", field="task.decoder",
                                value=self.decoder, limit=DECODERS)
            if self.decoder == "yolov11":
                self.decoder = "yolov8"   # the same (1, 4+C, N) head
        if self.anchors is not None:
            self.anchors = parse_anchors(self.anchors)
        if self.strides is not None:
            if not isinstance(self.strides, (list, tuple)) or not self.strides:
                raise TaskError("strides must be a list of positive integers",
                                field="task.strides", value=self.strides)
            self.strides = [_int(s, "task.strides", 1, 4096) for s in self.strides]
        if self.chars is not None:
            if not isinstance(self.chars, list) or not all(
                    isinstance(c, str) and c for c in self.chars):
                raise TaskError("chars must be a list of non-empty strings",
                                field="task.chars", value=str(self.chars)[:80])
            if len(self.chars) > LIMITS["chars"]:
                raise TaskError("too many characters", field="task.chars",
                                value=len(self.chars), limit=LIMITS["chars"])
        if self.kind == "ocr" and not self.chars:
            raise TaskError("an OCR head needs its character set (--chars FILE)",
                            field="task.chars", value=None)

    @classmethod
    def from_meta(cls, task: Any) -> TaskSpec:
        """The spec from META ``task`` (TaskError naming the key otherwise)."""
        if not isinstance(task, dict):
            raise TaskError("META task must be an object", field="task", value=task)
        known = {"kind", "outputs", "top_k", "decoder", "conf", "iou", "max_det", "anchors",
                 "strides", "chars"}
        if "kind" not in task:
            raise TaskError("META task lacks its kind", field="task.kind", value=None,
                            limit=KINDS)
        return cls(**{k: v for k, v in task.items() if k in known},
                   extra={k: v for k, v in task.items() if k not in known})

    def to_meta(self) -> dict[str, Any]:
        """The JSON object written to META ``task`` (only what this kind uses)."""
        out: dict[str, Any] = {"kind": self.kind}
        if self.outputs is not None:
            out["outputs"] = list(self.outputs)
        if self.kind == "classify":
            out["top_k"] = self.top_k
        if self.kind == "detect":
            out.update(decoder=self.decoder, conf=self.conf, iou=self.iou,
                       max_det=self.max_det)
            if self.anchors is not None:
                out["anchors"] = self.anchors
            if self.strides is not None:
                out["strides"] = self.strides
        if self.kind == "ocr":
            out["chars"] = list(self.chars or [])
        out.update(self.extra)
        return out


def _int(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v != int(v) or not lo <= int(v) <= hi:
        raise TaskError(f"{name.split('.')[-1]} must be an integer in [{lo}, {hi}]",
                        field=name, value=v, limit=f"{lo}..{hi}")
    return int(v)


def _unit(v: Any, name: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or not 0.0 <= float(v) <= 1.0:
        raise TaskError(f"{name.split('.')[-1]} must be a number in [0, 1]", field=name,
                        value=v, limit="0..1")
    return float(v)


def parse_anchors(value: Any) -> list[list[list[float]]]:
    """Anchors per scale as ``[[[w, h], ...], ...]``, from that nesting or from the CLI's
    text ``"10,13,16,30,33,23;30,61,..."`` (scales split by ``;``, w,h pairs flat)."""
    if isinstance(value, str):
        try:
            scales = [[float(v) for v in s.split(",") if v.strip()]
                      for s in value.split(";") if s.strip()]
        except ValueError:
            raise TaskError("anchors must be numbers: w,h,w,h;w,h,... (';' between scales)",
                            field="anchors", value=value) from None
        if not scales or any(len(s) % 2 or not s for s in scales):
            raise TaskError("each scale needs (w, h) pairs: w,h,w,h;w,h,...",
                            field="anchors", value=value)
        value = [[s[i:i + 2] for i in range(0, len(s), 2)] for s in scales]
    if not isinstance(value, (list, tuple)) or not value or len(value) > LIMITS["anchors"]:
        raise TaskError("anchors must be a non-empty list of scales", field="task.anchors",
                        value=str(value)[:80], limit=f"1..{LIMITS['anchors']} scales")
    out = []
    for scale in value:
        if not isinstance(scale, (list, tuple)) or not scale or len(scale) > LIMITS["anchors"]:
            raise TaskError("each scale must be a non-empty list of (w, h)",
                            field="task.anchors", value=str(scale)[:80])
        pairs = []
        for pair in scale:
            if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool)
                    and math.isfinite(v) and v > 0 for v in pair):
                raise TaskError("an anchor is a (w, h) pair of positive numbers",
                                field="task.anchors", value=str(pair)[:80])
            pairs.append([float(pair[0]), float(pair[1])])
        out.append(pairs)
    if len({len(s) for s in out}) != 1:
        raise TaskError("every scale needs the same number of anchors",
                        field="task.anchors", value=[len(s) for s in out])
    return out


def read_chars(path: str) -> list[str]:
    """A character file: one character (or token) a line, for classes 1..K-1; class 0 is
    the CTC blank and is not listed.  A line holding only a space is the space character
    (only the line end is stripped)."""
    from ..fsutil import read_utf8

    text = read_utf8(path, "character file", "chars",
                     "character file is not UTF-8 text (one character a line)", TaskError)
    chars = [ln.rstrip("\r") for ln in text.split("\n")]
    while chars and chars[-1] == "":
        chars.pop()
    if not chars or any(c == "" for c in chars):
        raise TaskError("character file needs one non-empty character a line",
                        field="chars", value=str(path))
    return chars
