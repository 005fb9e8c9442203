"""Device tensors in the arena, as CPU steps see them: a META placement's layout shape and
bytes, the merged byte ranges of several tensors, and one ``sync_for_cpu`` per range
(:mod:`.cpusteps`, :mod:`.fused`; netbin.md, ``tensors``)."""

from __future__ import annotations

import math
import time
from typing import Any

_now = time.perf_counter


def device_shape(d: dict) -> tuple[int, ...]:
    """The layout shape of a META device placement: (H, W, C), or (N, H, W, C) for N > 1
    samples back to back."""
    n = int(d.get("batch", 1))
    h, w, c = d["hwc"]
    return (h, w, c) if n == 1 else (n, h, w, c)


def device_nbytes(d: dict) -> int:
    """Bytes of a META device placement in the arena."""
    return 2 * int(d.get("batch", 1)) * math.prod(d["hwc"])


def merge_spans(items: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """Byte ranges merged where they touch or overlap, with the tensors they hold."""
    out: list[list] = []
    for a, b, name in sorted(items):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
            out[-1][2] += f"+{name}"
        else:
            out.append([a, b, name])
    return [tuple(s) for s in out]


def read_spans(net: Any, names: list[str]) -> list[tuple[int, int, str]]:
    """The merged arena ranges of the device tensors among ``names``."""
    items = []
    for t in names:
        d = net._dev(t)
        if t in net.constants or d is None:
            continue
        items.append((d["offset"], d["offset"] + device_nbytes(d), t))
    return merge_spans(items)


def sync_spans_for_cpu(h: Any, spans: list[tuple[int, int, str]]) -> None:
    """One ``sync_for_cpu`` of run handle ``h``'s arena per span, each a "sync" event."""
    st, arena = h.stats, h.ctx.arena
    for a, b, names in spans:
        t = _now()
        try:
            arena.sync_for_cpu(a, b - a)
        finally:
            st.add("sync", names, t, {"bytes": b - a})
