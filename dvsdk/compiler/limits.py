"""What a model may ask of the compiler: the bounds every frontend's graph is held to.

A model file is untrusted input.  Its numbers become array sizes, divisors and loop
counts, so each is checked before it is used, and a number out of range is a
:class:`~dvsdk.errors.ModelError` naming the op (or input), the value and the limit,
never a ``ZeroDivisionError`` or a ``MemoryError`` from deep inside numpy:

* **tensor size**: no tensor the program computes may exceed :data:`MAX_TENSOR_BYTES`.
  Every activation lives in the run's arena, DMA memory the DV700 reaches through 32-bit
  addresses (4 GiB in all, shared with the weights and the command stream); boards give it
  a few hundred MiB.  The bound is checked on shapes, before anything is allocated, so a
  ``Range`` up to 1e12 or a batch of a million images is refused at once;
* **windows** (Conv, ConvTranspose, pools): kernel, strides and dilations of at least 1,
  pads of at least 0, one value per spatial axis, a group of at least 1;
* **Split** sizes of at least 0;
* **Range**: a non-zero, finite step; its length is computed, not materialized.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError

__all__ = ["MAX_TENSOR_BYTES", "WINDOW_RANGES", "check_tensor", "check_window_attrs",
           "check_window", "check_split", "range_length"]

#: The largest tensor (bytes) a compiled program may compute: 1 GiB.
MAX_TENSOR_BYTES = 1 << 30


def tensor_bytes(shape: Sequence[int], dtype: Any) -> int:
    """Bytes of a tensor of ``shape`` and ``dtype`` (exact Python integers: no overflow)."""
    n = math.prod(int(d) for d in shape)
    return n * np.dtype(dtype if dtype is not None else np.float32).itemsize


def check_tensor(name: str, shape: Sequence[int], dtype: Any, where: str) -> None:
    """ModelError if tensor ``name`` of ``shape`` would exceed :data:`MAX_TENSOR_BYTES`;
    ``where`` names what makes it (an op, or "input")."""
    if any(int(d) < 0 for d in shape):
        raise ModelError(f"tensor {name!r} would have a negative dimension", field=where,
                         value=tuple(int(d) for d in shape), limit="dimensions >= 0")
    size = tensor_bytes(shape, dtype)
    if size > MAX_TENSOR_BYTES:
        raise ModelError(f"tensor {name!r} would need {size:,} bytes, more than a compiled "
                         "program may hold", field=where, value=tuple(int(d) for d in shape),
                         limit=f"{MAX_TENSOR_BYTES:,} bytes",
                         hint="the DV700's DMA memory holds every tensor a run computes: "
                              "a smaller input size or batch")


def _at_least(attrs: dict, key: str, low: int, n: int, where: str) -> None:
    vals = [int(v) for v in attrs[key]]
    if len(vals) != n:
        raise ModelError(f"{key} needs one value per spatial axis", field=f"{where}.{key}",
                         value=vals, limit=f"{n} values")
    if any(v < low for v in vals):
        raise ModelError(f"{key} out of range", field=f"{where}.{key}", value=vals,
                         limit=f">= {low}")


#: the integer attributes of a Conv, ConvTranspose or pooling window as a model states
#: them: ONNX's ranges (a 0 stride or dilation is meaningless), bounded as the net.bin
#: reader bounds them (negative pads crop: their sign is checked once resolved)
WINDOW_RANGES = {"kernel_shape": (1, 1 << 16), "strides": (1, 1 << 16),
                 "dilations": (1, 1 << 16), "pads": (-(1 << 16), 1 << 16),
                 "output_padding": (0, 1 << 16), "group": (1, 1 << 16)}


def check_window_attrs(attrs: dict, where: str) -> None:
    """The window attributes as the model states them, before any arithmetic uses them (a
    0 stride divides by zero in an auto-pad rule, a 0 dilation makes an empty window): each
    an integer within :data:`WINDOW_RANGES`; ModelError naming the attribute, its value
    and the range."""
    for key, (lo, hi) in WINDOW_RANGES.items():
        v = attrs.get(key)
        if v is None:
            continue
        scalar = isinstance(v, (int, np.integer))
        vals = [v] if scalar else list(v)
        if not all(isinstance(x, (int, np.integer)) and lo <= int(x) <= hi for x in vals):
            raise ModelError(f"{key} out of range", field=f"{where}.{key}",
                             value=int(v) if scalar else vals, limit=f"{lo}..{hi}")


def check_window(attrs: dict, spatial: int, where: str, *, pads: bool = True) -> None:
    """Check the resolved window attributes of a Conv/ConvTranspose/pool (``kernel_shape``,
    ``strides``, ``dilations``, ``pads`` as ONNX ``[begins..., ends...]``, ``group``)."""
    for key in ("kernel_shape", "strides", "dilations"):
        if key in attrs:
            _at_least(attrs, key, 1, spatial, where)
    if pads and "pads" in attrs:
        _at_least(attrs, "pads", 0, 2 * spatial, where)
    if int(attrs.get("group", 1)) < 1:
        raise ModelError("group out of range", field=f"{where}.group",
                         value=int(attrs["group"]), limit=">= 1")


def check_split(sizes: Sequence[int], where: str) -> None:
    """Split sizes may be 0 (an empty output), never negative."""
    if any(int(s) < 0 for s in sizes):
        raise ModelError("Split sizes must not be negative", field=f"{where}.split",
                         value=[int(s) for s in sizes], limit=">= 0")


def range_length(start: Any, limit: Any, delta: Any, where: str) -> int:
    """The number of elements ``Range(start, limit, delta)`` makes (ONNX:
    ``max(ceil((limit - start) / delta), 0)``), computed without making them: exactly for
    integers, within one element for floats (whose kernel divides in their own precision)."""
    vals = [np.asarray(v).reshape(-1) for v in (start, limit, delta)]
    if any(v.size != 1 for v in vals):
        raise ModelError("Range takes scalars", field=where,
                         value=tuple(v.size for v in vals), limit="one value each")
    if all(v.dtype.kind in "iub" for v in vals):
        s, lim, d = (int(v[0]) for v in vals)
        if d == 0:
            raise ModelError("Range step is 0", field=f"{where}.delta", value=0, limit="!= 0")
        return max(-((s - lim) // d), 0)
    s0, l0, d0 = (float(v[0]) for v in vals)
    if not all(math.isfinite(v) for v in (s0, l0, d0)):
        raise ModelError("Range bounds must be finite", field=where, value=(s0, l0, d0))
    if d0 == 0:
        raise ModelError("Range step is 0", field=f"{where}.delta", value=0.0, limit="!= 0")
    q = (l0 - s0) / d0
    return max(math.ceil(q), 0) if math.isfinite(q) else 1 << 62   # beyond any limit
