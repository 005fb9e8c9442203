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

__all__ = ["parent", "expected", "is_view_of", "shares", "covered"]

_VIEW = re.compile(r"^(?P<p>.+)#(?:cols(?P<a>\d+):(?P<b>\d+)(?:/c(?P<k>\d+))?"
                   r"|ch(?P<c0>\d+):(?P<c1>\d+))(?:@(?P<n>\d+))?$")
_SAMPLE = re.compile(r"^(?P<p>.+)@(?P<n>\d+)$")


def _parse(name: str) -> tuple[str, re.Match] | None:
    m = _VIEW.match(name) or _SAMPLE.match(name)
    return (m.group("p"), m) if m else None


def parent(name: str) -> str | None:
    """The tensor ``name`` says it is a view of, or None."""
    got = _parse(name)
    return got[0] if got else None


def expected(name: str, dev: dict[str, Placement]) -> Placement | None:
    """The placement ``name`` implies from its parent's in ``dev`` (module docstring), or
    None when it names no view, its parent has no placement or the view is out of range."""
    got = _parse(name)
    if got is None or got[0] not in dev:
        return None
    p, m = got
    off, (h, w, c), n = dev[p]
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


def is_view_of(name: str, of: str, dev: dict[str, Placement]) -> bool:
    """Whether ``name`` is a view of ``of`` placed where its name says."""
    return parent(name) == of and name in dev and expected(name, dev) == dev[name]


def shares(a: str, b: str, dev: dict[str, Placement]) -> bool:
    """Whether ``a`` and ``b`` may share bytes as parts of one tensor: one is a view of the
    other, or both are views of the same one."""
    if is_view_of(a, b, dev) or is_view_of(b, a, dev):
        return True
    pa = parent(a)
    return pa is not None and pa == parent(b) and is_view_of(a, pa, dev) \
        and is_view_of(b, pa, dev)


def covered(dev: dict[str, Placement], held: set[str]) -> set[str]:
    """The tensors of ``dev`` whose bytes are all within views of them that are in ``held``
    (views where commands read or write them)."""
    spans: dict[str, list[tuple[int, int]]] = {}
    for name in held:
        p = parent(name)
        if p is not None and is_view_of(name, p, dev):
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
