"""Datasets for ``dvsdk eval``: what users have on disk, read into a list of samples.

Three layouts are recognized:

* **image folders** (classification): ``DIR/<class>/<image>``, one folder per class;
* **a CSV** (classification or segmentation): ``path,label`` rows (label: a class name or
  index) or ``image,mask`` rows; an optional header row; paths relative to the CSV's folder;
* **image + mask pairs** (segmentation): ``DIR/images/<stem>.*`` with ``DIR/masks/<stem>.*``,
  masks holding one class index per pixel (palette or grayscale PNG; 255 = ignore).

Class names map to the net's labels when it has them (a folder named ``seven`` is the class
the net calls ``seven``); folders named by integers are those class indices; otherwise the
sorted folder names are the classes in order.  Anything else is a :class:`DatasetError`
naming the file or folder.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import DatasetError
from ..runtime.images import IMAGE_SUFFIXES

CLASSIFY, SEGMENT = "classify", "segment"
IGNORE = 255
MAX_SAMPLES = 10_000_000


@dataclass(frozen=True)
class Sample:
    image: str
    label: int = -1          # classification: the class index
    mask: str | None = None  # segmentation: the mask image


@dataclass
class Dataset:
    kind: str                 # CLASSIFY or SEGMENT
    samples: list[Sample]
    classes: list[str]        # class index -> name
    source: str


def _is_image(p: Path) -> bool:
    return p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES


def _class_index(name: str, labels: list[str] | None, where: str) -> int:
    if labels and name in labels:
        return labels.index(name)
    try:
        index = int(name)
    except ValueError:
        raise DatasetError("class is neither one of the net's labels nor an index",
                           field=where, value=name,
                           limit=labels[:12] if labels else "an integer") from None
    if index < 0 or (labels and index >= len(labels)):
        raise DatasetError("class index out of range", field=where, value=index,
                           limit=f"0..{len(labels) - 1}" if labels else ">= 0")
    return index


def _folders(root: Path, labels: list[str] | None) -> Dataset:
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    by_label = labels and all(d.name in labels for d in dirs)
    by_index = all(d.name.isdigit() for d in dirs)
    if by_label or by_index:
        classes = list(labels) if labels else [str(i) for i in
                                               range(max(int(d.name) for d in dirs) + 1)]
        index = {d.name: _class_index(d.name, labels, str(d)) for d in dirs}
    else:
        if labels:
            unknown = [d.name for d in dirs if d.name not in labels]
            raise DatasetError("class folders do not match the net's labels",
                               field=str(root), value=unknown[:8], limit=labels[:12])
        classes = [d.name for d in dirs]
        index = {d.name: i for i, d in enumerate(dirs)}
    samples = [Sample(str(f), index[d.name]) for d in dirs
               for f in sorted(d.iterdir()) if _is_image(f)]
    return Dataset(CLASSIFY, samples, classes, str(root))


def _pairs(root: Path, classes: list[str]) -> Dataset:
    masks = {f.stem: f for f in (root / "masks").iterdir() if _is_image(f)}
    samples = []
    for f in sorted((root / "images").iterdir()):
        if not _is_image(f):
            continue
        if f.stem not in masks:
            raise DatasetError("image has no mask", field=str(f),
                               limit=f"{root / 'masks' / f.stem}.png")
        samples.append(Sample(str(f), mask=str(masks[f.stem])))
    return Dataset(SEGMENT, samples, classes, str(root))


def _csv(path: Path, labels: list[str] | None) -> Dataset:
    base = path.parent
    try:
        rows = list(csv.reader(path.read_text(encoding="utf-8-sig").splitlines()))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise DatasetError(f"cannot read the CSV: {e}", field=str(path)) from None
    rows = [r for r in rows if r and any(c.strip() for c in r)]
    if rows and rows[0][0].strip().lower() in ("path", "image", "file", "filename"):
        rows = rows[1:]
    if not rows:
        raise DatasetError("the CSV has no rows", field=str(path))
    samples, segment = [], None
    for n, row in enumerate(rows, 1):
        if len(row) != 2:
            raise DatasetError("a CSV row needs two columns", field=f"{path}:{n}",
                               value=row, limit="path,label or image,mask")
        image, second = (c.strip() for c in row)
        is_mask = Path(second).suffix.lower() in IMAGE_SUFFIXES
        if segment is None:
            segment = is_mask
        elif segment != is_mask:
            raise DatasetError("the CSV mixes labels and masks", field=f"{path}:{n}",
                               value=second)
        img = base / image
        if segment:
            samples.append(Sample(str(img), mask=str(base / second)))
        else:
            samples.append(Sample(str(img), _class_index(second, labels, f"{path}:{n}")))
    classes = list(labels or [])
    if not segment and not classes:
        classes = [str(i) for i in range(max(s.label for s in samples) + 1)]
    return Dataset(SEGMENT if segment else CLASSIFY, samples, classes, str(path))


def open_dataset(path: str | os.PathLike, labels: list[str] | None = None,
                 num_classes: int | None = None) -> Dataset:
    """Read the dataset at ``path`` (see the module docstring).  Every sample's path is
    absolute, resolved here on the client: a Dask worker or an agent in another folder
    would read a relative one against its own."""
    root = Path(path).absolute()
    if not root.exists():
        raise DatasetError("dataset not found", field="dataset", value=str(root))
    if root.is_file():
        if root.suffix.lower() != ".csv":
            raise DatasetError("a dataset file must be a .csv", field="dataset",
                               value=str(root), limit="DIR/<class>/<image>, DIR with "
                               "images/ and masks/, or a .csv")
        ds = _csv(root, labels)
    elif (root / "images").is_dir() and (root / "masks").is_dir():
        classes = list(labels) if labels else [str(i) for i in range(num_classes or 0)]
        ds = _pairs(root, classes)
    else:
        ds = _folders(root, labels)
    if not ds.samples:
        raise DatasetError("the dataset holds no images", field="dataset", value=str(root),
                           limit=f"files ending in {', '.join(IMAGE_SUFFIXES[:4])}, ...")
    if len(ds.samples) > MAX_SAMPLES:
        raise DatasetError("too many samples", field="dataset", value=len(ds.samples),
                           limit=MAX_SAMPLES)
    return ds
