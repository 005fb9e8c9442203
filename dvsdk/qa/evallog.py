"""The per-image log of ``dvsdk eval`` (``--per-image FILE``, read back by ``--resume``).

One row per image: its path, its label (or mask), then its prediction (top-k class names
with their scores, or its pixel accuracy and the non-zero cells of its confusion matrix as
``true:predicted:count``; a detector's boxes as ``[x0, y0, x1, y1, score, class]`` lists,
JSON in a CSV cell; a recognizer's text and score), its device time, or its error.
``.jsonl`` holds one JSON object a line; ``.csv`` the columns of :data:`COLUMNS` (the
top-k names, their scores and the boxes as JSON lists, the cells as ``;``-joined triples).

The log is written while the run goes: one ``write`` of a whole line per image, on a file
opened for appending, so a run killed at any point leaves every completed image in it
(a line cut short by the kill has no newline; it is dropped when the log is read or
reopened). At the end the file is rewritten atomically in dataset order.
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import DatasetError
from ..fsutil import atomic_write
from .dataset import Dataset, Sample

#: the CSV columns
COLUMNS = ["path", "label", "mask", "prediction", "top_k", "scores", "pixel_accuracy",
           "cells", "detections", "boxes", "score", "objects", "edits", "device_us", "error"]


def image_row(sample: Sample, r: dict[str, Any] | None, error: str, classes: list[str]
              ) -> dict[str, Any]:
    """One image's row (class indices as the names of ``classes``)."""
    row: dict[str, Any] = {"path": sample.image}
    target = getattr(sample, "target", None)   # detect, ocr (qa.task_datasets)
    if sample.mask:
        row["mask"] = sample.mask
    elif isinstance(target, str):
        row["label"] = target
    elif target is None:
        row["label"] = _name(sample.label, classes) if sample.label >= 0 else None
    if r is None:
        row["error"] = error
        return row
    if "boxes" in r:
        row["detections"] = len(r["scores"])
        row["boxes"] = [[*map(float, b), float(s), int(c)]
                        for b, s, c in zip(r["boxes"], r["scores"], r["classes"])]
    elif "text" in r:
        row["prediction"], row["score"] = r["text"], float(r["score"])
    elif "top" in r:
        row["prediction"] = _name(r["top"][0], classes) if r["top"] else None
        row["top_k"] = [_name(i, classes) for i in r["top"]]
        row["scores"] = [float(v) for v in r["scores"]]
    else:
        row["pixel_accuracy"] = r["pixel_accuracy"]
        if "cells" in r:
            row["cells"] = r["cells"]
    row["device_us"] = r["device_us"]
    return row


def _name(i: int, classes: list[str]) -> str:
    return classes[i] if 0 <= i < len(classes) else str(i)


def _line(row: dict[str, Any], as_csv: bool) -> str:
    if not as_csv:
        return json.dumps(row) + "\n"
    buf = io.StringIO()
    cells = {"cells": ";".join(":".join(map(str, c)) for c in row.get("cells", []))}
    csv.DictWriter(buf, COLUMNS, lineterminator="\n").writerow(
        {k: json.dumps(v) if k in _JSON_CELLS else ";".join(str(x) for x in v)
         if isinstance(v, list) else ("" if v is None else v)
         for k, v in {**row, **cells}.items()})
    return buf.getvalue()


#: CSV cells holding a JSON list: boxes, and the top-k class names (a name may hold ";")
_JSON_CELLS = ("boxes", "top_k", "scores")


def _header(as_csv: bool) -> str:
    return ",".join(COLUMNS) + "\n" if as_csv else ""


class PerImageLog:
    """The log being written: ``start`` rows first (those resumed), then ``add`` per image."""

    def __init__(self, path: str | os.PathLike, start: Iterable[dict[str, Any]] = ()):
        self.path = str(path)
        self.csv = self.path.lower().endswith(".csv")
        text = _header(self.csv) + "".join(_line(r, self.csv) for r in start)
        atomic_write(self.path, lambda f: f.write(text.encode()))
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))

    def add(self, row: dict[str, Any]) -> None:
        os.write(self.fd, _line(row, self.csv).encode())   # one write: a whole line

    def finish(self, rows: list[dict[str, Any]]) -> None:
        """Rewrite the log atomically with ``rows`` (dataset order)."""
        self.close()
        text = _header(self.csv) + "".join(_line(r, self.csv) for r in rows)
        atomic_write(self.path, lambda f: f.write(text.encode()))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _check_is_log(path: Path, text: str, rows: list[Any], as_csv: bool) -> None:
    """A file given to ``--resume`` must be a per-image log (or empty): the log is
    rewritten at the end, so another file (the dataset's CSV, a typo) would be replaced.
    A CSV log starts with a header naming ``path`` and ``error`` among :data:`COLUMNS`;
    every JSON line is an object with a ``path``."""
    if as_csv:
        header = next(csv.reader(io.StringIO(text)), None) if text.strip() else None
        if header is not None and not {"path", "error"} <= set(header) <= set(COLUMNS):
            raise DatasetError("not a per-image log: its CSV header is not the log's",
                               field="resume", value=f"{path}: {','.join(header)[:60]}",
                               limit=",".join(COLUMNS), hint="--resume only takes a log "
                               "that --per-image wrote (it is rewritten)")
        return
    for n, row in enumerate(rows, 1):
        if not isinstance(row, dict) or "path" not in row:
            raise DatasetError("not a per-image log: a line is not an object with a path",
                               field=f"{path}:{n}", value=str(row)[:60],
                               hint="--resume only takes a log that --per-image wrote "
                                    "(it is rewritten)")


def read_log(path: str | os.PathLike, dataset: Dataset, top: int = 1
             ) -> dict[int, dict[str, Any]]:
    """The scored images of a per-image log, as results by dataset index (failed images
    and rows naming no image of ``dataset`` are left to run again; a line cut short by a
    kill is ignored). A missing log is an empty one; a log holding fewer than ``top``
    classes per image (written with a smaller --top-k) is a :class:`DatasetError`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read the log: {e}", field="resume", value=str(path)
                           ) from None
    text = text[: text.rfind("\n") + 1]                 # a partial last line: not done
    as_csv = str(path).lower().endswith(".csv")
    rows = list(csv.DictReader(io.StringIO(text))) if as_csv else []
    if not as_csv:
        for n, line in enumerate(text.splitlines(), 1):
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise DatasetError("a log line is not JSON", field=f"{path}:{n}",
                                   value=line[:60]) from None
    _check_is_log(path, text, rows, as_csv)
    where = {(s.image, s.mask or None): i for i, s in enumerate(dataset.samples)}
    names = {c: i for i, c in enumerate(dataset.classes)}
    done: dict[int, dict[str, Any]] = {}
    for n, row in enumerate(rows, 1):
        index = where.get((row.get("path"), row.get("mask") or None))
        if index is None or row.get("error"):
            continue
        try:
            done[index] = r = _result(row, names, as_csv)
        except (KeyError, ValueError, TypeError):
            raise DatasetError("a log row lacks its result", field=f"{path}:{n}",
                               value={k: row.get(k) for k in ("path", "top_k", "scores")}
                               ) from None
        if "top" in r and len(r["top"]) < min(top, len(dataset.classes)):
            raise DatasetError("the log holds fewer classes per image than --top-k",
                               field=f"{path}:{n}", value=len(r["top"]), limit=top,
                               hint="resume with the --top-k of the logged run")
    return done


def _result(row: dict[str, Any], names: dict[str, int], as_csv: bool) -> dict[str, Any]:
    def split(v: Any) -> list:
        if not as_csv:
            return list(v)
        if v.startswith("["):      # a JSON cell (_JSON_CELLS)
            return [str(x) for x in json.loads(v)]
        return v.split(";") if v else []

    us = float(row["device_us"])
    if "boxes" in row and row["boxes"] not in (None, ""):
        boxes = json.loads(row["boxes"]) if as_csv else row["boxes"]
        boxes = [[float(v) for v in b] for b in boxes]
        return {"boxes": [b[:4] for b in boxes], "scores": [b[4] for b in boxes],
                "classes": [int(b[5]) for b in boxes], "device_us": us}
    if "score" in row and row["score"] not in (None, ""):
        return {"text": row.get("prediction") or "", "score": float(row["score"]),
                "device_us": us}
    if row.get("mask"):
        cells = row.get("cells") or []
        if as_csv:
            cells = [[int(x) for x in c.split(":")] for c in split(cells)]
        acc = row.get("pixel_accuracy")
        return {"pixel_accuracy": None if acc in (None, "") else float(acc),
                "device_us": us, "cells": cells}
    top = [names[c] if c in names else int(c) for c in split(row["top_k"])]
    return {"top": top, "scores": [float(v) for v in split(row["scores"])],
            "device_us": us}
