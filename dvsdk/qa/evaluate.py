"""``dvsdk eval``: a net.bin over a whole dataset, on one device, many, or a cluster.

The work is the same everywhere: a worker loads the net once, then predicts chunks of
samples (classification: the top-5 classes; segmentation: the per-image confusion matrix of
the class map against the mask).  Results are put back in sample order and summed, so the
numbers do not depend on where or in which order chunks ran:

* one device (default ``sim://`` or ``$DVSDK_DEVICE``), in this process;
* ``devices=[url, ...]``: a board farm, one thread per device (a board is never shared);
* ``jobs=N``: N simulator processes on this machine;
* ``scheduler="tcp://host:port"``: a Dask distributed cluster (the ``[cluster]`` extra);
  every worker loads the net once (cached by its SHA-256) on its own ``sim://``, or on
  ``$DVSDK_DEVICE`` where the worker's environment names one. Workers read the images by
  path: the dataset must be visible to them (a shared filesystem, or a local cluster).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import numpy as np

from ..errors import DatasetError, DvsdkError, InvalidArgument
from . import eval_tasks, metrics
from .dataset import CLASSIFY, IGNORE, Dataset, Sample

CHUNK = 16
TOP = 5          # the default k of top-k accuracy
TOP_MAX = 1000


@dataclass
class EvalResult:
    kind: str
    summary: dict[str, Any]
    classes: list[str]
    errors: list[tuple[str, str]] = field(default_factory=list)   # (image, message)
    workers: list[str] = field(default_factory=list)
    per_image: list[dict[str, Any]] = field(default_factory=list)  # in dataset order

    def as_json(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
               for k, v in self.summary.items()}
        return {"kind": self.kind, "classes": self.classes, **out,
                "errors": [{"image": i, "error": e} for i, e in self.errors],
                "workers": self.workers}


# -- the work of one worker --------------------------------------------------------------

class _Worker:
    """A net loaded on one device, predicting samples."""

    def __init__(self, net_bytes: bytes, url: str | None, kind: str, output: str | None,
                 num_classes: int, top: int = TOP) -> None:
        from ..netfile import decode
        from ..runtime.net import load

        self.net = load(decode(net_bytes), url)
        self.kind, self.num_classes, self.top = kind, num_classes, top
        self.output = output or self.net.outputs[0]["name"]
        self.url = url or "default"

    def predict(self, chunk: Sequence[tuple[int, Sample]]) -> list[tuple[int, Any, str]]:
        """(index, result or None, error message) per sample."""
        out = []
        for index, sample in chunk:
            try:
                out.append((index, self._one(sample), ""))
            except DvsdkError as e:
                out.append((index, None, str(e)))
        return out

    def _one(self, sample: Sample) -> np.ndarray:
        if self.kind in eval_tasks.KINDS:   # detect, ocr: a task head's result
            return eval_tasks.predict_one(self.net, sample, self.kind)
        y = self.net.run_image(sample.image)
        if self.output not in y:
            raise InvalidArgument("the net has no such output", field="output",
                                  value=self.output, limit=sorted(y))
        us = float(self.net.last_run.device_us)
        if self.kind == CLASSIFY:
            scores = np.asarray(y[self.output], np.float32).reshape(-1)
            top = metrics.top_k(scores, self.top).astype(np.int32)
            return {"top": top, "scores": scores[top], "device_us": us}
        pred = self.net.class_map(self.output)
        mask = _load_mask(sample.mask, pred.shape)
        return {"confusion": metrics.confusion(mask, pred, self.num_classes, ignore=IGNORE),
                "device_us": us}

    def close(self) -> None:
        self.net.close()


def _load_mask(path: str | None, shape: tuple[int, ...]) -> np.ndarray:
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


# process pools and Dask workers keep one loaded net per process
_LOCAL: dict[str, _Worker] = {}
_LOCAL_LOCK = threading.Lock()


def _cached_worker(key: str, args: tuple) -> _Worker:
    with _LOCAL_LOCK:
        worker = _LOCAL.get(key)
        if worker is None:
            worker = _LOCAL[key] = _Worker(*args)
        return worker


def _process_init(net_bytes: bytes, url: str | None, kind: str, output: str | None,
                  num_classes: int, top: int = TOP) -> None:
    _cached_worker("process", (net_bytes, url, kind, output, num_classes, top))


def _process_chunk(chunk: list[tuple[int, Sample]]) -> list[tuple[int, Any, str]]:
    return _LOCAL["process"].predict(chunk)


def _dask_chunk(chunk: list[tuple[int, Sample]], net_bytes: bytes, kind: str,
                output: str | None, num_classes: int, top: int = TOP
                ) -> list[tuple[int, Any, str]]:
    key = hashlib.sha256(net_bytes).hexdigest() + f"/{kind}/{output}/{num_classes}/{top}"
    url = os.environ.get("DVSDK_DEVICE") or "sim://"
    return _cached_worker(key, (net_bytes, url, kind, output, num_classes, top)
                          ).predict(chunk)


# -- orchestration -----------------------------------------------------------------------

def evaluate(net_source: str | os.PathLike | bytes, dataset: Dataset, *,
             devices: Sequence[str] = (), jobs: int = 1, scheduler: str | None = None,
             output: str | None = None, top: int = TOP,
             progress: Callable[[int, int], None] | None = None) -> EvalResult:
    """Evaluate a net.bin (path or bytes) on ``dataset``; see the module docstring.
    Classification reports top-1 and top-``top`` accuracy."""
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= TOP_MAX:
        raise InvalidArgument("top-k out of range", field="top_k", value=top,
                              limit=f"1..{TOP_MAX}")
    net_bytes = net_source if isinstance(net_source, bytes) else _read(net_source)
    if jobs < 1:
        raise InvalidArgument("jobs must be at least 1", field="jobs", value=jobs, limit=">= 1")
    if sum(bool(x) for x in (len(devices) > 1, jobs > 1, scheduler)) > 1:
        raise InvalidArgument("choose one of several devices, --jobs or --scheduler",
                              field="workers", value={"devices": list(devices), "jobs": jobs,
                                                      "scheduler": scheduler})
    if output is not None:  # checked once here, not once per image in the workers
        from ..netfile import decode

        names = [o["name"] for o in decode(net_bytes).meta["outputs"]]
        if output not in names:
            raise InvalidArgument("the net has no such output", field="output", value=output,
                                  limit=names)
    num_classes = len(dataset.classes)
    if dataset.kind != CLASSIFY and num_classes < 1:
        raise DatasetError("segmentation needs the class count (net labels)",
                           field="classes", value=0)
    args = (dataset.kind, output, num_classes, top)
    chunks = [list(enumerate(dataset.samples))[i:i + CHUNK]
              for i in range(0, len(dataset.samples), CHUNK)]
    done = [0]

    def tick(n: int) -> None:
        done[0] += n
        if progress:
            progress(done[0], len(dataset.samples))

    if scheduler:
        results, workers = _on_dask(scheduler, net_bytes, chunks, args, tick)
    elif jobs > 1:
        results, workers = _on_processes(jobs, net_bytes, devices[0] if devices else None,
                                         chunks, args, tick)
    else:
        results, workers = _on_devices(list(devices) or [None], net_bytes, chunks, args, tick)
    return _summarize(dataset, results, workers, top)


def _read(path: str | os.PathLike) -> bytes:
    from ..errors import NetFileError

    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise NetFileError(f"cannot read the net.bin: {e.strerror}", field="net",
                           value=str(path)) from None


def _on_devices(urls: list[str | None], net_bytes: bytes, chunks: list, args: tuple,
                tick: Callable[[int], None]) -> tuple[list, list[str]]:
    """One thread per device; each takes the next chunk until none is left."""
    todo = list(reversed(chunks))
    lock = threading.Lock()
    results: list = []

    def serve(url: str | None) -> None:
        worker = _Worker(net_bytes, url, *args)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    chunk = todo.pop()
                part = worker.predict(chunk)
                with lock:
                    results.extend(part)
                    tick(len(part))
        finally:
            worker.close()

    if len(urls) == 1:
        serve(urls[0])
    else:
        with ThreadPoolExecutor(len(urls)) as pool:
            for f in [pool.submit(serve, u) for u in urls]:
                f.result()
    return results, [u or os.environ.get("DVSDK_DEVICE") or "sim://" for u in urls]


def _on_processes(jobs: int, net_bytes: bytes, url: str | None, chunks: list, args: tuple,
                  tick: Callable[[int], None]) -> tuple[list, list[str]]:
    results: list = []
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"), initializer=_process_init,
                             initargs=(net_bytes, url, *args)) as pool:
        for f in as_completed([pool.submit(_process_chunk, c) for c in chunks]):
            part = f.result()
            results.extend(part)
            tick(len(part))
    return results, [f"process {i} on {url or 'sim://'}" for i in range(jobs)]


def _on_dask(scheduler: str, net_bytes: bytes, chunks: list, args: tuple,
             tick: Callable[[int], None]) -> tuple[list, list[str]]:
    try:
        from distributed import Client
        from distributed import as_completed as dask_completed
    except ImportError:
        raise InvalidArgument("--scheduler needs Dask distributed",
                              field="scheduler", value=scheduler,
                              hint="pip install 'dvsdk[cluster]'") from None
    try:
        client = Client(scheduler, timeout=10)
    except (OSError, TimeoutError) as e:
        raise InvalidArgument(f"cannot reach the Dask scheduler: {e}", field="scheduler",
                              value=scheduler) from None
    with client:
        blob = client.scatter(net_bytes, broadcast=True)
        futures = client.map(_dask_chunk, chunks, net_bytes=blob, kind=args[0],
                             output=args[1], num_classes=args[2], top=args[3], pure=False)
        results: list = []
        for f in dask_completed(futures):
            part = f.result()
            results.extend(part)
            tick(len(part))
        workers = sorted(client.scheduler_info().get("workers", {}))
    return results, workers


def _summarize(dataset: Dataset, results: list, workers: list[str], top_k: int = TOP
               ) -> EvalResult:
    results.sort(key=lambda r: r[0])
    if dataset.kind in eval_tasks.KINDS:
        return eval_tasks.summarize(dataset, results, workers, EvalResult)
    errors = [(dataset.samples[i].image, msg) for i, _, msg in results if msg]
    ok = [(i, r) for i, r, msg in results if not msg]
    k = len(dataset.classes)
    if dataset.kind == CLASSIFY:
        top = np.full((len(ok), top_k), -1, np.int64)
        for row, (_, r) in enumerate(ok):
            top[row, : len(r["top"])] = r["top"]
        labels = np.array([dataset.samples[i].label for i, _ in ok], np.int64)
        k = max(k, int(top.max(initial=-1)) + 1, int(labels.max(initial=-1)) + 1)
        summary = metrics.classification_summary(top, labels, k, top_k)
    else:
        conf = np.zeros((k, k), np.int64)
        for _, r in ok:
            conf += r["confusion"]
        summary = metrics.segmentation_summary(conf)
    classes = list(dataset.classes) + [str(i) for i in range(len(dataset.classes), k)]
    per_image = [_image_row(dataset.samples[i], r, msg, classes) for i, r, msg in results]
    return EvalResult(dataset.kind, summary, classes, errors, workers, per_image)


def _image_row(sample: Sample, r: dict | None, error: str, classes: list[str]
               ) -> dict[str, Any]:
    """One image's line of ``--per-image``: its path, label, prediction (top-k with their
    scores, or its pixel accuracy), device time, or its error."""
    row: dict[str, Any] = {"path": sample.image}
    if sample.mask:
        row["mask"] = sample.mask
    else:
        row["label"] = classes[sample.label] if 0 <= sample.label < len(classes) else None
    if r is None:
        row["error"] = error
        return row
    if "top" in r:
        row["prediction"] = classes[int(r["top"][0])] if len(r["top"]) else None
        row["top_k"] = [classes[int(i)] for i in r["top"]]
        row["scores"] = [float(v) for v in r["scores"]]
    else:
        c = r["confusion"]
        row["pixel_accuracy"] = float(np.trace(c) / c.sum()) if c.sum() else None
    row["device_us"] = r["device_us"]
    return row
