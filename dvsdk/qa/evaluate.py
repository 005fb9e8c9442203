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

Chunks hold about a quarter of a worker's share (1..64 images). Faults are survived
(:mod:`.evalpools`): lost processes and Dask workers have their chunks resubmitted, a
device failing ``max_failures`` times in a row leaves the rotation, and every image ends up
scored or failed with its reason; the summary counts both (``images``, ``scored``,
``failed``) and its accuracy is over the scored images. ``done`` (from a per-image log,
:mod:`.evallog`) skips images already scored; ``log`` writes each image as it completes.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DatasetError, InvalidArgument
from . import eval_tasks, evalpools
from .dataset import CLASSIFY, Dataset
from .evallog import PerImageLog, image_row
from .evalwork import TASKS, Row

MAX_FAILURES = 3
WORKER_TIMEOUT = 120.0
TOP = 5          # the default k of top-k accuracy
TOP_MAX = 1000
#: the most --jobs processes: each is a simulator with the net loaded (a process per
#: chunk at most; far more than a machine has cores only thrashes)
MAX_JOBS = 256


@dataclass
class EvalResult:
    kind: str
    summary: dict[str, Any]
    classes: list[str]
    errors: list[tuple[str, str]] = field(default_factory=list)   # (image, message)
    workers: list[str] = field(default_factory=list)
    per_image: list[dict[str, Any]] = field(default_factory=list)  # in dataset order
    warnings: list[str] = field(default_factory=list)   # devices that left, ...

    def as_json(self) -> dict[str, Any]:
        out = {k: (v.tolist() if isinstance(v, np.ndarray) else v)
               for k, v in self.summary.items()}
        return {"kind": self.kind, "classes": self.classes, **out,
                "errors": [{"image": i, "error": e} for i, e in self.errors],
                "workers": self.workers, "warnings": self.warnings}


# -- orchestration -----------------------------------------------------------------------

def evaluate(net_source: str | os.PathLike | bytes, dataset: Dataset, *,
             devices: Sequence[str] = (), jobs: int = 1, scheduler: str | None = None,
             output: str | None = None, top: int = TOP,
             progress: Callable[[int, int], None] | None = None,
             max_failures: int = MAX_FAILURES, worker_timeout: float = WORKER_TIMEOUT,
             done: dict[int, dict[str, Any]] | None = None, log: str | None = None,
             warn: Callable[[str], None] | None = None) -> EvalResult:
    """Evaluate a net.bin (path or bytes) on ``dataset``; see the module docstring.
    Classification reports top-1 and top-``top`` accuracy. ``done``: results of images
    already scored (by dataset index, :func:`.evallog.read_log`); ``log``: a per-image
    log (.jsonl or .csv) written as images complete; ``warn``: called with each warning
    as it happens (a device leaving the rotation)."""
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= TOP_MAX:
        raise InvalidArgument("top-k out of range", field="top_k", value=top,
                              limit=f"1..{TOP_MAX}")
    if isinstance(max_failures, bool) or not isinstance(max_failures, int) \
            or not 1 <= max_failures <= 1000:
        raise InvalidArgument("max_failures out of range", field="max_failures",
                              value=max_failures, limit="1..1000")
    if not worker_timeout > 0:
        raise InvalidArgument("worker_timeout must be positive", field="worker_timeout",
                              value=worker_timeout, limit="> 0")
    net_bytes = net_source if isinstance(net_source, bytes) else _read(net_source)
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= MAX_JOBS:
        raise InvalidArgument("jobs out of range", field="jobs", value=jobs,
                              limit=f"1..{MAX_JOBS}")
    if sum(bool(x) for x in (len(devices) > 1, jobs > 1, scheduler)) > 1:
        raise InvalidArgument("choose one of several devices, --jobs or --scheduler",
                              field="workers", value={"devices": list(devices), "jobs": jobs,
                                                      "scheduler": scheduler})
    from ..netfile import decode

    meta = decode(net_bytes).meta   # a bad net.bin: one error here, not one per image
    if output is not None:  # checked once here, not once per image in the workers
        names = [o["name"] for o in meta["outputs"]]
        if output not in names:
            raise InvalidArgument("the net has no such output", field="output", value=output,
                                  limit=names)
    num_classes = len(dataset.classes)
    if dataset.kind != CLASSIFY and num_classes < 1:
        raise DatasetError("segmentation needs the class count (net labels)",
                           field="classes", value=0)
    task = TASKS[dataset.kind]
    args = (dataset.kind, output, num_classes, top, log is not None)
    done = dict(done or {})
    results: dict[int, Row] = {i: (i, r, "") for i, r in done.items()}
    total = task.zero(num_classes)
    for r in done.values():
        total = task.add(total, task.contribution(r, num_classes))
    n = len(dataset.samples)
    writer = PerImageLog(log, [image_row(dataset.samples[i], r, "", dataset.classes)
                               for i, r in sorted(done.items())]) if log else None
    warnings: list[str] = []
    state = {"total": total}

    def emit(rows: list[Row], part: Any) -> None:   # called under the Work lock
        if part is not None:
            state["total"] = task.add(state["total"], part)
        for row in rows:
            if row[0] in results:
                continue
            results[row[0]] = row
            if writer:
                writer.add(image_row(dataset.samples[row[0]], row[1], row[2],
                                     dataset.classes))
        if progress and rows:
            progress(len(results), n)

    def warning(text: str) -> None:
        warnings.append(text)
        if warn:
            warn(text)

    def work_for(chunks: list) -> evalpools.Work:
        return evalpools.Work(chunks, max_failures, emit, warning)

    items = [(i, s) for i, s in enumerate(dataset.samples) if i not in done]
    try:
        if not items:                   # everything came from the log
            workers = []
        elif scheduler:
            workers = _dask(scheduler)(scheduler, net_bytes, args, items, work_for,
                                       worker_timeout)
        elif jobs > 1:
            chunks = evalpools.split(items, jobs)
            workers = evalpools.on_processes(    # no more processes than chunks to run
                min(jobs, len(chunks)), net_bytes, devices[0] if devices else None, args,
                work_for(chunks), max_failures)
        else:
            urls = list(devices) or [None]
            workers = evalpools.on_devices(urls, net_bytes, args,
                                           work_for(evalpools.split(items, len(urls))),
                                           max_failures)
        missing = [i for i in range(n) if i not in results]
        if missing:    # cannot happen; if it does, say so per image rather than lose it
            emit([(i, None, "not run: no worker took it (a dvsdk bug, please report it)")
                  for i in missing], None)
        result = _summarize(dataset, results, state["total"], workers, top, warnings)
    finally:
        if writer:
            writer.close()
    if writer:
        writer.finish(result.per_image)
    return result


def _dask(scheduler: str) -> Callable:
    try:
        from .evaldask import on_dask
    except ImportError:
        raise InvalidArgument("--scheduler needs Dask distributed", field="scheduler",
                              value=scheduler, hint="pip install 'dvsdk[cluster]'") from None
    return on_dask


def _read(path: str | os.PathLike) -> bytes:
    from ..errors import NetFileError

    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise NetFileError(f"cannot read the net.bin: {e.strerror}", field="net",
                           value=str(path)) from None


def _summarize(dataset: Dataset, results: dict[int, Row], total: Any, workers: list[str],
               top_k: int, warnings: list[str]) -> EvalResult:
    rows = [results[i] for i in sorted(results)]
    if dataset.kind in eval_tasks.KINDS:   # detect, ocr: their own metrics
        result = eval_tasks.summarize(dataset, rows, workers, EvalResult)
        result.summary.update(images=len(dataset.samples), scored=len(rows) - len(
            result.errors), failed=len(result.errors))
        result.warnings = warnings
        return result
    errors = [(dataset.samples[i].image, msg) for i, _, msg in rows if msg]
    ok = [(i, r) for i, r, msg in rows if not msg]
    k = len(dataset.classes)
    labels = np.array([dataset.samples[i].label for i, _ in ok], np.int64)
    summary = TASKS[dataset.kind].summarise(labels, [r for _, r in ok], total, k, top_k)
    summary.update(images=len(dataset.samples), scored=len(ok), failed=len(errors))
    k = max(k, len(summary["confusion"]))
    classes = list(dataset.classes) + [str(i) for i in range(len(dataset.classes), k)]
    per_image = [image_row(dataset.samples[i], r, msg, classes) for i, r, msg in rows]
    return EvalResult(dataset.kind, summary, classes, errors, workers, per_image, warnings)
