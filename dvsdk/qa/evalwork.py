"""The work of one ``dvsdk eval`` worker: a net loaded on one device, predicting chunks.

Each task kind is a pair: ``predict`` scores one image into a small per-image row (and a
contribution to the chunk's sum), and ``summarise`` turns the rows and the summed
contributions into the report.  Classification rows hold the top-k class indices with
their scores; segmentation sums each chunk's confusion matrix on the worker, so the client
never holds one matrix per image (a row keeps only the image's non-zero cells, and only
when a per-image log needs them to resume).  Detection and OCR (nets with a task head)
score each image's boxes or text on the client (:mod:`.eval_tasks`).

A failure is the image's or the device's: anything an image causes (undecodable, over the
pixel limit, a bad mask, out of memory) fails that image alone; a
:class:`~dvsdk.errors.DeviceError` (or a dropped connection) stops the chunk there, and
the caller runs the rest elsewhere.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DatasetError, DeviceError, DvsdkError, InvalidArgument
from . import eval_tasks, metrics
from .dataset import CLASSIFY, IGNORE, SEGMENT, Sample

#: failures that are the device's (or its link's), not the image's
DEVICE_ERRORS = (DeviceError, ConnectionError, TimeoutError, EOFError)

Row = tuple[int, "dict[str, Any] | None", str]   # (sample index, result or None, error)


def reason(e: BaseException) -> str:
    """One line naming what went wrong."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


@dataclass
class ChunkOut:
    """What a worker returns for a chunk: the rows of the images it got through, the sum
    of their contributions, and where the device failed (``stopped_at``: the position in
    the chunk of the image that was running; None: the chunk is done)."""
    rows: list[Row] = field(default_factory=list)
    total: Any = None
    stopped_at: int | None = None
    why: str = ""


# -- task kinds ------------------------------------------------------------------------

class NoSum:
    """A kind scored per image on the client: nothing summed per chunk on the worker."""

    def zero(self, k: int) -> Any:
        return None

    def add(self, total: Any, part: Any) -> Any:
        return None

    def contribution(self, row: dict[str, Any], k: int) -> Any:
        return None


class Classify(NoSum):
    """Top-k classes with their scores per image; no per-chunk sum."""

    def predict(self, w: Worker, sample: Sample) -> tuple[dict[str, Any], Any]:
        y = w.run(sample)
        scores = np.asarray(y[w.output], np.float32).reshape(-1)
        top = metrics.top_k(scores, w.top)
        return {"top": [int(i) for i in top], "scores": [float(s) for s in scores[top]],
                "device_us": w.device_us()}, None

    def summarise(self, labels: np.ndarray, rows: list[dict[str, Any]], total: Any,
                  k: int, top_k: int) -> dict[str, Any]:
        top = np.full((len(rows), top_k), -1, np.int64)
        for i, r in enumerate(rows):
            n = min(len(r["top"]), top_k)
            top[i, :n] = r["top"][:n]
        k = max(k, int(top.max(initial=-1)) + 1, int(labels.max(initial=-1)) + 1)
        return metrics.classification_summary(top, labels, k, top_k)


class Segment:
    """The class map against the mask: a confusion matrix summed per chunk on the worker;
    per image its pixel accuracy (and its non-zero cells, for a per-image log)."""

    def predict(self, w: Worker, sample: Sample) -> tuple[dict[str, Any], Any]:
        y = w.run(sample)
        del y
        pred = w.net.class_map(w.output)
        mask = load_mask(sample.mask, pred.shape)
        conf = metrics.confusion(mask, pred, w.num_classes, ignore=IGNORE)
        t, p = np.nonzero(conf)
        total = int(conf.sum())
        row = {"pixel_accuracy": float(np.trace(conf) / total) if total else None,
               "device_us": w.device_us(),
               "cells": np.stack([t, p, conf[t, p]], 1).tolist()}
        return row, conf

    def zero(self, k: int) -> Any:
        return np.zeros((k, k), np.int64)

    def add(self, total: Any, part: Any) -> Any:
        total += part
        return total

    def contribution(self, row: dict[str, Any], k: int) -> Any:
        """The confusion of one logged image (its non-zero cells), for ``--resume``."""
        conf = np.zeros((k, k), np.int64)
        cells = np.asarray(row.get("cells") or [], np.int64).reshape(-1, 3)
        if len(cells) and (cells[:, :2].max() >= k or cells.min() < 0):
            raise DatasetError("a logged confusion cell is out of range", field="cells",
                               value=cells.tolist()[:4], limit=f"classes 0..{k - 1}")
        np.add.at(conf, (cells[:, 0], cells[:, 1]), cells[:, 2])
        return conf

    def summarise(self, labels: np.ndarray, rows: list[dict[str, Any]], total: Any,
                  k: int, top_k: int) -> dict[str, Any]:
        return metrics.segmentation_summary(total if total is not None
                                            else np.zeros((k, k), np.int64))


class TaskHead(NoSum):
    """A net compiled with ``--task detect`` or ``--task ocr``: its head's result per image
    (boxes, or text: :func:`.eval_tasks.predict_one`), scored on the client by
    :func:`.eval_tasks.summarize`; no per-chunk sum."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def predict(self, w: Worker, sample: Sample) -> tuple[dict[str, Any], Any]:
        return eval_tasks.predict_one(w.net, sample, self.kind), None


TASKS: dict[str, Any] = {CLASSIFY: Classify(), SEGMENT: Segment(),
                         **{kind: TaskHead(kind) for kind in eval_tasks.KINDS}}


def load_mask(path: str | None, shape: tuple[int, ...]) -> np.ndarray:
    """A class-index mask (palette or grayscale image), nearest-resized to ``shape``."""
    from PIL import Image, UnidentifiedImageError

    from ..runtime.decode import open_image

    try:
        with open_image(path) as img:
            if img.mode not in ("P", "L", "I", "I;16"):
                raise DatasetError("a mask must be a palette or grayscale image of class "
                                   "indices", field="mask", value=path, limit="mode P or L")
            if img.size != (shape[1], shape[0]):
                img = img.resize((shape[1], shape[0]), Image.NEAREST)
            return np.asarray(img, np.int64)
    except FileNotFoundError:
        raise DatasetError("mask not found", field="mask", value=path) from None
    except (UnidentifiedImageError, OSError) as e:
        raise DatasetError(f"cannot decode mask: {e}", field="mask", value=path) from None


# -- one worker ------------------------------------------------------------------------

class Worker:
    """A net loaded on one device, predicting chunks of samples."""

    def __init__(self, net_bytes: bytes, url: str | None, kind: str, output: str | None,
                 num_classes: int, top: int, keep: bool = False) -> None:
        from ..netfile import decode
        from ..runtime.net import load

        self.net = load(decode(net_bytes), url)
        self.task = TASKS[kind]
        self.num_classes, self.top, self.keep = num_classes, top, keep
        self.output = output or self.net.outputs[0]["name"]
        self.url = url or "default"

    def run(self, sample: Sample) -> dict[str, np.ndarray]:
        y = self.net.run_image(sample.image, raw=True)   # tensors, also with a task head
        if self.output not in y:
            raise InvalidArgument("the net has no such output", field="output",
                                  value=self.output, limit=sorted(y))
        return y

    def device_us(self) -> float:
        return float(self.net.last_run.device_us)

    def predict(self, chunk: Sequence[tuple[int, Sample]]) -> ChunkOut:
        """Every image of ``chunk`` scored or failed, each on its own, until the device
        fails (then ``stopped_at`` says where)."""
        out = ChunkOut(total=self.task.zero(self.num_classes))
        for pos, (index, sample) in enumerate(chunk):
            try:
                row, part = self.task.predict(self, sample)
            except DEVICE_ERRORS as e:
                out.stopped_at, out.why = pos, reason(e)
                return out
            except Exception as e:  # noqa: BLE001 - the image's own failure, whatever it is
                out.rows.append((index, None, str(e) if isinstance(e, DvsdkError)
                                 else reason(e)))
                continue
            if not self.keep:
                row.pop("cells", None)
            out.total = self.task.add(out.total, part)
            out.rows.append((index, row, ""))
        return out

    def close(self) -> None:
        try:
            self.net.close()
        except Exception:  # noqa: BLE001 - closing a net on a device that is gone
            pass


# -- a --jobs process -----------------------------------------------------------------

def process_main(conn: Any, net_bytes: bytes, url: str | None, args: tuple) -> None:
    """A ``--jobs`` process: load the net, then answer chunks on ``conn`` until None.
    Messages: ("ready", pid), ("failed", reason), ("done", ChunkOut)."""
    worker = None
    try:
        while True:
            if worker is None:
                try:
                    worker = Worker(net_bytes, url, *args)
                except Exception as e:  # noqa: BLE001 - reported to the parent
                    conn.send(("failed", reason(e)))
                    return
                conn.send(("ready", os.getpid()))
            chunk = conn.recv()
            if chunk is None:
                return
            out = worker.predict(chunk)
            conn.send(("done", out))
            if out.stopped_at is not None:   # the device failed: open it afresh
                worker.close()
                worker = None
    except (EOFError, OSError, KeyboardInterrupt):
        return
    finally:
        if worker is not None:
            worker.close()
