"""Byte span lists of the simulator's coherence and tensor bookkeeping.

A span list is a list of ``(start, end)`` tuples: half-open byte ranges, sorted and
disjoint.  :mod:`.device` keeps, per DMA buffer, the spans the CPU wrote without a sync
and the spans the device wrote that the CPU did not sync yet (the two directions of
linux-dma.md's streaming mappings); :mod:`.dram` keeps the live part of each stored tensor.
Lists are never mutated: each function returns a new list (or the same one unchanged).

These functions are the reference and the fallback of the compiled twins of
``dvsdk/_native_sim.c`` (``span_add``, ``span_remove``, ``span_overlap``, ``span_cover``),
which return the same values; the callers pick one at call time (``native.NATIVE``).
"""

from __future__ import annotations

from bisect import bisect_left


def add_span(spans: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """``spans`` (sorted, disjoint, not touching) with ``[a, b)`` merged in, as a new list
    (or ``spans`` itself where it covers ``[a, b)`` already; callers never mutate one)."""
    i = bisect_left(spans, (a, a))
    if i and spans[i - 1][1] >= a:
        i -= 1
    if i < len(spans) and spans[i][0] <= a and b <= spans[i][1]:
        return spans  # already covered (a device output written run after run)
    j = i
    while j < len(spans) and spans[j][0] <= b:
        j += 1
    if i < j:
        a, b = min(a, spans[i][0]), max(b, spans[j - 1][1])
    return spans[:i] + [(a, b)] + spans[j:]


def remove_span(spans: list[tuple[int, int]], a: int, b: int) -> list[tuple[int, int]]:
    """``spans`` (half-open byte ranges) minus ``[a, b)``."""
    out = []
    for s, e in spans:
        if e <= a or s >= b:
            out.append((s, e))
            continue
        if s < a:
            out.append((s, a))
        if e > b:
            out.append((b, e))
    return out


def first_overlap(spans: list[tuple[int, int]], a: int, b: int) -> tuple[int, int] | None:
    """The part of ``[a, b)`` in the first span that overlaps it, or None."""
    for s, e in spans:
        if s < b and a < e:
            return max(s, a), min(e, b)
    return None


def covered(spans: list[tuple[int, int]], a: int, b: int) -> tuple[int, int] | None:
    """The first to the last byte of ``[a, b)`` that ``spans`` cover, or None."""
    hits = [(max(s, a), min(e, b)) for s, e in spans if s < b and a < e]
    return (hits[0][0], hits[-1][1]) if hits else None
