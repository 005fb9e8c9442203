"""What ``dvsdk-run`` runs: images, raw tensors (``.npy``, ``NAME=X.npy``, ``.npz``) or,
for a benchmark without an input, random data of the network's input shapes.

Every problem with an argument names the user's file and says what was expected.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ImageError, InvalidArgument

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"


@dataclass
class Job:
    """One run: ``kind`` "image" (a path or an RGB array) or "tensor" (an array, or a dict
    keyed by input name); ``name`` is what results and errors show, ``stem`` the key
    prefix of ``--save`` when there are several."""

    name: str
    kind: str
    payload: Any
    stem: str = ""
    #: an image's (height, width) once decoded (for a task head's inverse resize)
    size: tuple[int, int] | None = None


def image_jobs(items: list[str]) -> list[Job]:
    from ..runtime.images import IMAGE_SUFFIXES

    jobs: list[Job] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise ImageError("directory has no images", field="images", value=item,
                                 limit=IMAGE_SUFFIXES)
            jobs += [Job(str(q), "image", q, q.stem) for q in found]
        elif p.exists():
            jobs.append(Job(str(p), "image", p, p.stem))
        else:
            raise ImageError("no such image file or directory", field="images", value=item)
    return jobs


def check_image_input(net: Any) -> None:
    """Images need a single-input network whose input is an image (N, 1|3, H, W)."""
    shapes = [tuple(i["shape"]) for i in net.inputs]
    if len(shapes) != 1 or len(shapes[0]) != 4 or shapes[0][1] not in (1, 3):
        raise ImageError("this network's input is not one image: give tensors with --input",
                         field="input shapes", value=shapes, limit="one (N, 1|3, H, W)")


def _kind(path: str) -> str:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            head = f.read(6)
    except FileNotFoundError:
        raise InvalidArgument("tensor file not found", field="input", value=path) from None
    except IsADirectoryError:
        raise InvalidArgument("is a directory, not a .npy or .npz tensor file (a directory "
                              "of images goes without --input)", field="input",
                              value=path) from None
    except OSError as e:
        raise InvalidArgument(f"cannot read the tensor file: {e.strerror}", field="input",
                              value=path) from None
    if head.startswith(NPY_MAGIC):
        return "npy"
    if head.startswith(ZIP_MAGIC[:4]):
        return "npz"
    raise InvalidArgument("not a .npy or .npz tensor file (images are given without --input)",
                          field="input", value=path)


def _load(path: str, kind: str) -> Any:
    try:
        if kind == "npy":
            return np.load(path, allow_pickle=False)
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except ValueError as e:
        why = ("holds Python objects (pickled), not numbers" if "pickle" in str(e)
               else f"cannot read the tensor file: {e}")
        raise InvalidArgument(why, field="input", value=path) from None
    except OSError as e:
        raise InvalidArgument(f"cannot read the tensor file: {e}", field="input",
                              value=path) from None


def _check_shape(spec: dict, arr: np.ndarray, source: str, net: Any) -> None:
    """The array fits input ``spec`` of ``net``: its values (real; finite for a float
    input the DV700 reads) and shape; errors name the file ``source``."""
    from ..runtime.handle import feed_array

    try:
        feed_array(spec, arr, device="device" in net.tensors.get(spec["tensor"], {}))
    except InvalidArgument as e:
        raise InvalidArgument(e.message, field=source, value=e.value, limit=e.limit) from None
    want = tuple(spec["shape"])
    if arr.shape == want or (arr.size == int(np.prod(want)) and arr.ndim == len(want) - 1):
        return
    raise InvalidArgument(f"input {spec['name']!r} has the wrong shape", field=source,
                          value=tuple(arr.shape), limit=want)


def tensor_jobs(net: Any, items: list[str]) -> list[Job]:
    """``--input`` values: ``X.npy`` (a single-input net; one run each), ``NAME=X.npy``
    (one run of all named inputs together) and ``X.npz`` keyed by input name (one run)."""
    specs = {i["name"]: i for i in net.inputs}
    names = list(specs)
    jobs: list[Job] = []
    named: dict[str, np.ndarray] = {}
    named_from: list[str] = []
    for item in items:
        name, sep, path = item.partition("=")
        if sep and name in specs and not Path(item).exists():
            if name in named:
                raise InvalidArgument("input given twice", field="input", value=name)
            if _kind(path) != "npy":
                raise InvalidArgument("NAME=FILE takes a .npy file", field="input",
                                      value=path)
            arr = _load(path, "npy")
            _check_shape(specs[name], arr, path, net)
            named[name] = arr
            named_from.append(item)
            continue
        if sep and not Path(item).exists():
            raise InvalidArgument("no input of that name", field="input", value=name,
                                  limit=names)
        kind = _kind(item)
        data = _load(item, kind)
        if kind == "npz":
            if set(data) == set(names):
                feed: Any = data
            elif len(names) == 1 and len(data) == 1:
                feed = next(iter(data.values()))
            else:
                raise InvalidArgument("the .npz must hold one array per input, keyed by "
                                      "input name", field=item, value=sorted(data),
                                      limit=names)
        else:
            if len(names) != 1:
                raise InvalidArgument(f"this network has {len(names)} inputs: name each "
                                      "(--input NAME=X.npy) or give an .npz keyed by input "
                                      "name", field="input", value=item, limit=names)
            feed = data
        for n, arr in (feed.items() if isinstance(feed, dict) else [(names[0], feed)]):
            _check_shape(specs[n], arr, item, net)
        jobs.append(Job(item, "tensor", feed, Path(item).stem))
    if named:
        missing = [n for n in names if n not in named]
        if missing:
            raise InvalidArgument("inputs missing: name every input (--input NAME=X.npy)",
                                  field="input", value=sorted(named), limit=names)
        first = named_from[0].partition("=")[2]
        jobs.append(Job(" ".join(named_from), "tensor", named, Path(first).stem))
    return jobs


def random_job(net: Any, seed: int = 0) -> Job:
    """Random data of the input shapes, as ``benchmark_app`` feeds when given no input: a
    random 8-bit image through the recorded preprocessing for an image network, else
    uniform [0, 1) tensors."""
    rng = np.random.default_rng(seed)
    try:
        check_image_input(net)
    except ImageError:
        feed = {i["name"]: rng.random(tuple(i["shape"]), dtype=np.float32) for i in net.inputs}
        return Job("random data", "tensor", feed, "random")
    _, _, h, w = net.inputs[0]["shape"]
    return Job("random image", "image", rng.integers(0, 256, (h, w, 3), dtype=np.uint8),
               "random")


def preprocessed(net: Any, job: Job) -> Any:
    """The job's input as ``net.run`` takes it (images preprocessed as recorded; for a
    network compiled for N samples, the image in each of them)."""
    if job.kind != "image":
        return job.payload
    from ..runtime.images import preprocess

    spec = net.inputs[0]
    shape = tuple(spec["shape"])
    x = preprocess(job.payload, (1, *shape[1:]), spec.get("preprocess", {}),
                   spec.get("layout", "NCHW"))
    return x if shape[0] == 1 else np.repeat(x, shape[0], axis=0)


def runs(net: Any, jobs: list[Job], timeout: float, ipu: bool = False) -> Iterator[tuple]:
    """Run ``jobs`` in order: ``(job, outputs, run stats, (index, n))`` each, or ``(job,
    ImageError, None, (0, 1))`` for an image that cannot be read (the others still run).

    A network compiled for N > 1 samples (``dvsdk-compile --batch N``) runs N images a
    run: consecutive image jobs are grouped N at a time (the last group filled up with
    its last image), each job gets its sample's outputs ``(1, ...)``, ``index`` its place
    in the run and ``n`` = N; a tensor job is one run of its own (N, ...) arrays."""
    from ..runtime.images import as_rgb, preprocess

    def decoded(job: Job) -> np.ndarray:
        rgb = as_rgb(job.payload)
        job.size = rgb.shape[:2]
        return rgb

    spec = net.inputs[0] if net.inputs else {}
    shape = tuple(spec.get("shape", ()))
    n = shape[0] if len(shape) == 4 and shape[0] > 1 else 1
    group: list[tuple[Job, np.ndarray]] = []

    def flush() -> Iterator[tuple]:
        if group:
            xs = [x for _, x in group] + [group[-1][1]] * (n - len(group))
            outs = net.run(np.concatenate(xs), timeout)
            for i, (job, _) in enumerate(group):
                yield job, {k: v[i:i + 1] for k, v in outs.items()}, net.last_run, (i, n)
            group.clear()

    for job in jobs:
        if job.kind == "image" and n > 1 and not ipu:
            try:
                x = preprocess(decoded(job), (1, *shape[1:]), spec.get("preprocess", {}),
                               spec.get("layout", "NCHW"))
            except ImageError as e:
                yield job, e, None, (0, 1)
                continue
            group.append((job, x))
            if len(group) == n:
                yield from flush()
            continue
        yield from flush()
        try:
            if job.kind == "image":
                outs = net.run_image(decoded(job), timeout=timeout, ipu=ipu, raw=True)
            else:
                outs = net.run(job.payload, timeout=timeout)
        except ImageError as e:
            yield job, e, None, (0, 1)
            continue
        yield job, outs, net.last_run, (0, n if job.kind != "image" else 1)
    yield from flush()
