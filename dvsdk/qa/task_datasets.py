"""Datasets of detectors and text recognizers for ``dvsdk eval`` (nets compiled with
``--task detect`` or ``--task ocr``).

* **COCO JSON** (detect): ``instances.json`` with ``images`` (``id``, ``file_name``),
  ``annotations`` (``image_id``, ``category_id``, ``bbox`` = [x, y, width, height],
  ``iscrowd``) and ``categories`` (``id``, ``name``).  Images are found relative to the
  JSON's folder, else in its ``images/`` folder.  Categories map to the net's classes by
  name when every name is one of the net's labels, otherwise in ascending ``id`` order
  (the first category is class 0).  Crowd regions are ignored (COCO's rule).
* **Pascal VOC XML** (detect): a folder with ``Annotations/*.xml`` and ``JPEGImages/``
  (or the XML files beside their images): ``<object><name>``, ``<bndbox>`` ``xmin``,
  ``ymin``, ``xmax``, ``ymax`` (taken as x0, y0, x1, y1), ``<difficult>1`` ignored.  Names
  must be the net's labels.
* **a label file** (ocr): ``.txt`` or ``.tsv`` lines ``image<TAB>text`` (paths relative to
  the file's folder), the text being everything after the first tab.

Every sample's path is absolute (resolved on the client, as :mod:`.dataset` does).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DatasetError
from ..runtime.images import IMAGE_SUFFIXES
from .dataset import MAX_SAMPLES, Dataset, Sample
from .detection_map import ImageTruth

DETECT, OCR = "detect", "ocr"
MAX_BYTES = 1 << 30


@dataclass(frozen=True)
class TaskSample(Sample):
    """A sample with its ground truth: an :class:`ImageTruth` (detect) or the text (ocr)."""

    target: Any = None


def open_task_dataset(path: str | os.PathLike, meta: dict) -> Dataset | None:
    """The dataset of a net with a detect or ocr task, or None for other nets (their
    datasets are :func:`.dataset.open_dataset`'s)."""
    kind = (meta.get("task") or {}).get("kind")
    if kind not in (DETECT, OCR):
        return None
    labels = list(meta.get("labels") or [])
    root = Path(path).absolute()
    if not root.exists():
        raise DatasetError("dataset not found", field="dataset", value=str(root))
    if kind == OCR:
        if not root.is_file() or root.suffix.lower() not in (".txt", ".tsv"):
            raise DatasetError("a text recognizer's dataset is a label file", field="dataset",
                               value=str(root), limit="FILE.txt or .tsv: image<TAB>text")
        ds = _label_file(root, meta["task"].get("chars") or [])
    elif root.is_file():
        if root.suffix.lower() != ".json":
            raise DatasetError("a detector's dataset is COCO JSON or a VOC folder",
                               field="dataset", value=str(root),
                               limit="instances.json, or DIR with Annotations/")
        ds = _coco(root, labels)
    else:
        ds = _voc(root, labels)
    if not ds.samples:
        raise DatasetError("the dataset holds no images", field="dataset", value=str(root))
    if len(ds.samples) > MAX_SAMPLES:
        raise DatasetError("too many samples", field="dataset", value=len(ds.samples),
                           limit=MAX_SAMPLES)
    return ds


def _read_text(path: Path) -> str:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise DatasetError("annotation file too large", field=str(path),
                               value=path.stat().st_size, limit=MAX_BYTES)
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read: {e}", field=str(path)) from None


def _coco(path: Path, labels: list[str]) -> Dataset:
    try:
        doc = json.loads(_read_text(path))
        images = {int(i["id"]): str(i["file_name"]) for i in doc["images"]}
        cats = sorted((int(c["id"]), str(c["name"])) for c in doc.get("categories", []))
        anns = doc.get("annotations", [])
    except (ValueError, KeyError, TypeError) as e:
        raise DatasetError(f"not COCO JSON: {e}", field=str(path),
                           limit="images, annotations, categories") from None
    names = [n for _, n in cats]
    if labels and names and all(n in labels for n in names):
        index = {cid: labels.index(n) for cid, n in cats}
        classes = list(labels)
    else:
        if labels and len(cats) > len(labels):
            raise DatasetError("more categories than the net has classes", field=str(path),
                               value=len(cats), limit=len(labels))
        index = {cid: k for k, (cid, _) in enumerate(cats)}
        classes = list(labels) if labels else names
    per: dict[int, list] = {i: [] for i in images}
    for n, a in enumerate(anns):
        try:
            x, y, w, h = (float(v) for v in a["bbox"])
            per[int(a["image_id"])].append((x, y, x + w, y + h, index[int(a["category_id"])],
                                            bool(a.get("iscrowd", 0))))
        except (KeyError, ValueError, TypeError):
            raise DatasetError("a malformed annotation (bbox, image_id or category_id)",
                               field=f"{path}:annotations[{n}]", value=str(a)[:120]) from None
    base = path.parent
    samples = []
    for iid in sorted(images):
        f = base / images[iid]
        if not f.exists() and (base / "images" / images[iid]).exists():
            f = base / "images" / images[iid]
        rows = np.array(per[iid], np.float64).reshape(-1, 6)
        truth = ImageTruth(rows[:, :4], rows[:, 4].astype(np.int64),
                           crowd=rows[:, 5].astype(bool))
        samples.append(TaskSample(str(f), target=truth))
    return Dataset(DETECT, samples, classes, str(path))


def _voc(root: Path, labels: list[str]) -> Dataset:
    import xml.etree.ElementTree as ET

    ann_dir = root / "Annotations" if (root / "Annotations").is_dir() else root
    img_dir = root / "JPEGImages" if (root / "JPEGImages").is_dir() else ann_dir
    xmls = sorted(ann_dir.glob("*.xml"))
    if not xmls:
        raise DatasetError("no VOC annotations (Annotations/*.xml)", field="dataset",
                           value=str(root))
    if not labels:
        raise DatasetError("VOC names need the net's labels (compile with --labels)",
                           field="labels", value=None)
    samples = []
    for x in xmls:
        try:
            doc = ET.fromstring(_read_text(x))
            rows = []
            for obj in doc.iter("object"):
                name = (obj.findtext("name") or "").strip()
                if name not in labels:
                    raise DatasetError("object name is not one of the net's labels",
                                       field=str(x), value=name, limit=labels[:12])
                bb = obj.find("bndbox")
                box = [float(bb.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax")]
                rows.append(box + [labels.index(name),
                                   (obj.findtext("difficult") or "0").strip() == "1"])
            fname = (doc.findtext("filename") or "").strip()
        except (ET.ParseError, AttributeError, TypeError, ValueError) as e:
            raise DatasetError(f"not VOC XML: {e}", field=str(x)) from None
        img = img_dir / fname if fname else None
        if img is None or not img.exists():
            found = [p for p in sorted(img_dir.glob(x.stem + ".*"))
                     if p.suffix.lower() in IMAGE_SUFFIXES]
            img = found[0] if found else img_dir / (fname or x.stem + ".jpg")
        r = np.array(rows, np.float64).reshape(-1, 6)
        samples.append(TaskSample(str(img), target=ImageTruth(
            r[:, :4], r[:, 4].astype(np.int64), ignore=r[:, 5].astype(bool))))
    return Dataset(DETECT, samples, list(labels), str(root))


def _label_file(path: Path, chars: list[str]) -> Dataset:
    samples = []
    for n, line in enumerate(_read_text(path).split("\n"), 1):   # not splitlines: a
        line = line.removesuffix("\r")        # label may hold U+0085, U+2028, form feeds
        if not line.strip():
            continue
        image, sep, text = line.partition("\t")
        if not sep:
            raise DatasetError("a label line is image<TAB>text", field=f"{path}:{n}",
                               value=line[:120])
        samples.append(TaskSample(str(path.parent / image.strip()), target=text))
    return Dataset(OCR, samples, list(chars) or ["text"], str(path))
