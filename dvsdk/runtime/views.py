"""Device tensors named as views of another: where a name says its bytes are.

The compiler runs some work on parts of a tensor (:mod:`dvsdk.compiler.bands`,
:mod:`dvsdk.compiler.groups`) and names each part after the tensor it is part of, so the
net.bin says what it is (``firmware_spec/netbin.md``):

* ``P#colsA:B`` -- columns ``[A, B)`` of ``P`` (at most 8 channels); ``P#colsA:B/cK`` the
  same columns of the 8-channel chunk that starts at channel ``K``.  Inside a chunk x is the
  outermost index (§1), so columns of one chunk are one range of bytes;
* ``P#chA:B`` -- channels ``[A, B)`` of ``P``, ``A`` a multiple of 8 (whole chunks, §1);
* a trailing ``@n`` -- of sample ``n`` of ``P`` (a batch's samples lie back to back, §4.10);
  ``P@n`` alone is the whole sample.

:func:`expected` is the placement such a name implies from ``P``'s; a view whose META
placement is not exactly that is no view.  The schedule check (:mod:`.schedule`) lets a
view and its parent (and two views of one parent) share bytes, and a parent is where
commands read or write it when its views cover it (:func:`covered`).
"""

from __future__ import annotations

import re

#: a device tensor's placement: (arena offset, (H, W, C), samples N)
Placement = tuple[int, tuple[int, int, int], int]

__all__ = ["Placement", "parent", "expected", "shares", "part", "covered"]

_VIEW = re.compile(r"^(?P<p>.+)#(?:cols(?P<a>\d+):(?P<b>\d+)(?:/c(?P<k>\d+))?"
                   r"|ch(?P<c0>\d+):(?P<c1>\d+))(?:@(?P<n>\d+))?$")
_SAMPLE = re.compile(r"^(?P<p>.+)@(?P<n>\d+)$")


def _candidates(name: str) -> list[tuple[str, re.Match]]:
    """Every way to read ``name`` as a view: ``a#ch0:8@1`` is sample 1 of ``a#ch0:8`` or
    channels 0:8 of sample 1 of ``a`` (the parent's placement tells which)."""
    return [(m.group("p"), m) for m in (_VIEW.match(name), _SAMPLE.match(name)) if m]


def _place(m: re.Match, place: Placement) -> Placement | None:
    off, (h, w, c), n = place
    groups = m.groupdict()
    sample = int(groups["n"]) if groups.get("n") is not None else 0
    if sample >= n or (n > 1 and groups.get("n") is None):
        return None
    base = off + sample * 2 * h * w * c
    if groups.get("a") is not None:
        a, b = int(groups["a"]), int(groups["b"])
        k = int(groups["k"]) if groups["k"] is not None else 0
        if not (0 <= a < b <= w and k % 8 == 0 and k < c) or (groups["k"] is None and c > 8):
            return None
        cs = min(8, c - k)
        return base + 2 * h * w * k + 2 * a * h * cs, (h, b - a, cs), 1
    if groups.get("c0") is not None:
        c0, c1 = int(groups["c0"]), int(groups["c1"])
        if not (0 <= c0 < c1 <= c and c0 % 8 == 0 and (c1 % 8 == 0 or c1 == c)):
            return None
        return base + 2 * h * w * c0, (h, w, c1 - c0), 1
    return base, (h, w, c), 1


def parent(name: str, dev: dict[str, Placement]) -> str | None:
    """The tensor ``name`` is a view of, placed where its name says in ``dev``, or None."""
    for p, m in _candidates(name):
        if p in dev and name in dev and _place(m, dev[p]) == dev[name]:
            return p
    return None


def expected(name: str, dev: dict[str, Placement]) -> Placement | None:
    """The placement ``name`` implies from its parent's in ``dev`` (module docstring): of
    the reading whose parent ``dev`` has (the one that fits ``name``'s own placement, if
    several do), or None when it names no view or the view is out of range."""
    got = [(p, _place(m, dev[p])) for p, m in _candidates(name) if p in dev]
    got = [(p, place) for p, place in got if place is not None]
    for _, place in got:
        if dev.get(name) == place:
            return place
    return got[0][1] if got else None


def shares(a: str, b: str, dev: dict[str, Placement]) -> bool:
    """Whether ``a`` and ``b`` may share bytes as parts of one tensor: one is a view of the
    other, or both are views of the same one."""
    pa, pb = parent(a, dev), parent(b, dev)
    return pa == b or pb == a or (pa is not None and pa == pb)


def part(name: str, dev: dict[str, Placement]) -> tuple[str, tuple[slice, ...]] | None:
    """``(parent, index)``: ``name`` is ``parent[index]`` of the parent's (N, C, H, W) value
    in the device's orientation, or None when it is no view."""
    for p, m in _candidates(name):
        if p not in dev or name not in dev or _place(m, dev[p]) != dev[name]:
            continue
        g = m.groupdict()
        n = int(g["n"]) if g.get("n") is not None else 0
        c = dev[p][1][2]
        if g.get("a") is not None:
            k = int(g["k"]) if g["k"] is not None else 0
            return p, (slice(n, n + 1), slice(k, min(k + 8, c)), slice(None),
                       slice(int(g["a"]), int(g["b"])))
        if g.get("c0") is not None:
            return p, (slice(n, n + 1), slice(int(g["c0"]), int(g["c1"])))
        return p, (slice(n, n + 1),)
    return None


def covered(dev: dict[str, Placement], held: set[str]) -> set[str]:
    """The tensors of ``dev`` whose bytes are all within views of them that are in ``held``
    (views where commands read or write them)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for name in held:
        p = parent(name, dev)
        if p is not None:
            off, (h, w, c), n = dev[name]
            spans.setdefault(p, []).append((off, off + 2 * h * w * c * n))
    out = set()
    for p, ranges in spans.items():
        off, (h, w, c), n = dev[p]
        end, want = off, off + 2 * h * w * c * n
        for a, b in sorted(ranges):
            if a > end:
                break
            end = max(end, b)
        if end >= want:
            out.add(p)
    return out
