"""The DRAM's live tensor ranges (dvsdk/sim/dram.py ``live_clip`` / ``live_insert`` and their
compiled twins in dvsdk/_native_sim.c) against a plain numpy model: one owner id per byte.

A store of ``[a, b)`` clears those bytes; an owner that is written out (``packed`` set)
loses every byte it has once any of them is hit; one that is not keeps what lies outside
``[a, b)``.  The three parallel lists must always equal the runs of equal id of the model,
and the owners a clip returns the ids the model saw inside the hit ranges."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk import native
from dvsdk.sim import dram

SIZE = 400


class Owner:
    """A stand-in for a StoredTensor: only ``packed`` is read."""

    __slots__ = ("ident", "packed")

    def __init__(self, ident: int, packed: bool) -> None:
        self.ident = ident
        self.packed = b"x" if packed else None


def _impls() -> list:
    out = [(dram.live_clip, dram.live_insert)]
    if native.NATIVE is not None:
        out.append((native.NATIVE.live_clip, native.NATIVE.live_insert))
    return out


def _runs(ids: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, id) of each maximal run of one id >= 0 in ``ids``."""
    out = []
    edges = np.flatnonzero(np.diff(ids)) + 1
    bounds = [0, *edges.tolist(), ids.size]
    for s, e in zip(bounds, bounds[1:]):
        if ids[s] >= 0:
            out.append((s, e, int(ids[s])))
    return out


@pytest.mark.parametrize("impl", range(2))
def test_live_ranges_against_a_byte_model(impl: int) -> None:
    if impl >= len(_impls()):
        pytest.skip("dvsdk._native not built")
    clip, insert = _impls()[impl]
    rng = np.random.default_rng(41 + impl)
    for _ in range(60):
        ids = np.full(SIZE, -1, np.int64)  # the model
        owners_by_id: dict[int, Owner] = {}
        starts: list[int] = []
        ends: list[int] = []
        owners: list[Owner] = []
        for step in range(40):
            a = int(rng.integers(0, SIZE))
            b = int(rng.integers(a + 1, min(SIZE, a + 120) + 1))
            inside = ids[a:b]
            seen = [int(i) for i in dict.fromkeys(inside[inside >= 0].tolist())]
            hit = clip(starts, ends, owners, a, b)
            if not seen:
                assert hit is None
            else:
                assert [t.ident for t in dict.fromkeys(hit)] == seen
            ids[a:b] = -1
            for i in seen:
                if owners_by_id[i].packed is not None:
                    ids[ids == i] = -1
            if rng.random() < 0.8:  # a store takes the range; else it stays free
                t = Owner(step, packed=bool(rng.random() < 0.4))
                owners_by_id[step] = t
                insert(starts, ends, owners, a, b, t)
                ids[a:b] = step
            got = [(s, e, t.ident) for s, e, t in zip(starts, ends, owners)]
            assert got == _runs(ids)


def test_compiled_clip_keeps_the_int_objects_and_returns_the_hit_slice() -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    t, u = Owner(1, packed=False), Owner(2, packed=True)
    for fn in (dram.live_clip, native.NATIVE.live_clip):
        starts, ends, owners = [0, 20], [10, 30], [t, u]
        assert fn(starts, ends, owners, 5, 25) == [t, u]
        # t (not written out) keeps 0..5; u (written out) loses all of 20..30
        assert (starts, ends, owners) == ([0], [5], [t])
        assert fn(starts, ends, owners, 5, 9) is None  # nothing live there any more
        assert fn([], [], [], 0, 1) is None


@pytest.mark.parametrize("args, exc", [
    (([0], [1], "x", 0, 1), TypeError),             # owners not a list
    (([0], [1, 2], [None], 0, 1), ValueError),      # lengths differ
    ((["0"], [1], [None], 0, 1), TypeError),        # a bound that is not an int
    (([0], [1], [None], 0.5, 1), TypeError),        # a float address
    (([0], [1], [None], 0, 1 << 80), OverflowError),
    (([0], [5], [object()], 2, 3), AttributeError),  # an owner without ``packed``
])
def test_compiled_clip_refuses_bad_input(args: tuple, exc: type) -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    lists = [list(x) if isinstance(x, list) else x for x in args[:3]]
    before = [list(x) if isinstance(x, list) else x for x in lists]
    with pytest.raises(exc):
        native.NATIVE.live_clip(*lists, *args[3:])
    assert lists == before  # an error leaves the lists as they were
    with pytest.raises(TypeError):
        native.NATIVE.live_clip([0], [1], [None], 0)  # too few arguments


def test_compiled_clip_notices_an_owner_that_changes_the_lists() -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    starts, ends = [0], [10]

    class Meddler:
        @property
        def packed(self) -> None:
            starts.clear()
            ends.clear()
            owners.clear()

    owners: list = [Meddler()]
    with pytest.raises(RuntimeError):
        native.NATIVE.live_clip(starts, ends, owners, 5, 6)


@pytest.mark.parametrize("args, exc", [
    (([0], [1], None, 2, 3, None), TypeError),
    (([0], [], [None], 2, 3, None), ValueError),
    (([0], [1], [None], 3, 2, None), ValueError),   # ends before it starts
    (([0], [1], [None], "2", 3, None), TypeError),
    (([[0]], [1], [None], 2, 3, None), TypeError),  # a bound that is not an int
])
def test_compiled_insert_refuses_bad_input(args: tuple, exc: type) -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    lists = [list(x) if isinstance(x, list) else x for x in args[:3]]
    before = [list(x) if isinstance(x, list) else x for x in lists]
    with pytest.raises(exc):
        native.NATIVE.live_insert(*lists, *args[3:])
    assert lists == before


@pytest.mark.parametrize("impl", range(2))
def test_live_unpacked_against_a_byte_model(impl: int) -> None:
    """The owners not written out with live bytes in [a, b): the ids a byte model sees."""
    fns = [dram.live_unpacked] + ([native.NATIVE.live_unpacked] if native.NATIVE else [])
    if impl >= len(fns):
        pytest.skip("dvsdk._native not built")
    unpacked = fns[impl]
    clip, insert = _impls()[0]
    rng = np.random.default_rng(7 + impl)
    ids = np.full(SIZE, -1, np.int64)
    by_id: dict[int, Owner] = {}
    starts: list[int] = []
    ends: list[int] = []
    owners: list[Owner] = []
    for step in range(300):
        a = int(rng.integers(0, SIZE))
        b = int(rng.integers(a + 1, min(SIZE, a + 90) + 1))
        inside = ids[a:b]
        want = [i for i in dict.fromkeys(inside[inside >= 0].tolist())
                if by_id[i].packed is None]
        got = unpacked(starts, ends, owners, a, b)
        assert [t.ident for t in dict.fromkeys(got)] == want
        # (then a store there, as the DRAM makes them)
        hit = clip(starts, ends, owners, a, b) or []
        ids[a:b] = -1
        for t in dict.fromkeys(hit):
            if t.packed is not None:
                ids[ids == t.ident] = -1
        t = Owner(step, packed=bool(rng.random() < 0.5))
        by_id[step] = t
        insert(starts, ends, owners, a, b, t)
        ids[a:b] = step


def test_compiled_live_unpacked_refuses_bad_input() -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    f = native.NATIVE.live_unpacked
    with pytest.raises(TypeError):
        f([0], [1], None, 0, 1)
    with pytest.raises(ValueError):
        f([0], [1, 2], [Owner(0, False)], 0, 1)
    with pytest.raises(TypeError):
        f([0], [1], [Owner(0, False)], "0", 1)
    with pytest.raises(AttributeError):
        f([0], [5], [object()], 1, 2)
    with pytest.raises(TypeError):
        f([0], [5], [Owner(0, False)], 1)
    assert f([0], [5], [Owner(0, False)], 5, 9) == []
