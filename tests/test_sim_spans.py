"""The simulator's span lists and DRAM write clocks, compiled and in Python, against a plain
numpy model: a boolean mask per byte for the spans, a clock per byte for the stores
(dvsdk/sim/spans.py, Dram._stamp / Dram.version, dvsdk/_native_sim.c)."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk import native
from dvsdk.sim import spans
from dvsdk.sim.dram import Dram

SIZE = 300


def _mask(spans_: list[tuple[int, int]]) -> np.ndarray:
    m = np.zeros(SIZE, bool)
    for s, e in spans_:
        m[s:e] = True
    return m


def _runs(m: np.ndarray) -> list[tuple[int, int]]:
    """The maximal runs of True in ``m`` as (start, end), sorted: the reference span list."""
    d = np.diff(np.concatenate([[0], m.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(d == 1).tolist(), np.flatnonzero(d == -1).tolist()))


def _random_spans(rng: np.random.Generator) -> list[tuple[int, int]]:
    return _runs(rng.random(SIZE) < rng.uniform(0.05, 0.9))


def _impls() -> list:
    """The Python functions and, where built, their compiled twins."""
    out = [(spans.add_span, spans.remove_span, spans.first_overlap, spans.covered)]
    if native.NATIVE is not None:
        n = native.NATIVE
        out.append((n.span_add, n.span_remove, n.span_overlap, n.span_cover))
    return out


@pytest.mark.parametrize("impl", range(2))
def test_spans_against_a_byte_mask(impl: int) -> None:
    if impl >= len(_impls()):
        pytest.skip("dvsdk._native not built")
    add, remove, overlap, cover = _impls()[impl]
    rng = np.random.default_rng(27 + impl)
    for _ in range(400):
        have = _random_spans(rng)
        a = int(rng.integers(0, SIZE))
        b = int(rng.integers(a + 1, SIZE + 1))  # (callers never ask about empty ranges)
        m = _mask(have)
        part = np.zeros(SIZE, bool)
        part[a:b] = True
        assert add(have, a, b) == _runs(m | part)
        if (m | part == m).all():
            assert add(have, a, b) is have  # covered already: the same list
        # remove keeps the pieces of each span (not merged, as the spans were disjoint)
        assert _mask(remove(have, a, b)).tolist() == (m & ~part).tolist()
        assert all(e > s for s, e in remove(have, a, b))
        hit = np.flatnonzero(m & part)
        if hit.size == 0:
            assert overlap(have, a, b) is None and cover(have, a, b) is None
            continue
        assert cover(have, a, b) == (int(hit[0]), int(hit[-1]) + 1)
        first = [(max(s, a), min(e, b)) for s, e in have if s < b and a < e][0]
        lo, hi = overlap(have, a, b)
        assert (lo, hi) == first and lo == hit[0] and m[lo:hi].all() and part[lo:hi].all()


def test_compiled_spans_refuse_bad_input() -> None:
    if native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    with pytest.raises(TypeError):
        native.NATIVE.span_add((1, 2), 0, 1)
    with pytest.raises(TypeError):
        native.NATIVE.span_remove([(1, 2, 3)], 0, 1)
    with pytest.raises(TypeError):
        native.NATIVE.span_cover([(1, "x")], 0, 1)


@pytest.mark.parametrize("compiled", [False, True])
def test_dram_version_against_a_clock_per_byte(compiled: bool, monkeypatch) -> None:
    """version(a, n) changes exactly when a store touched [a, a+n) since it was last asked
    (the DRAM's clocks are line-grained: a store anywhere in a 64-byte line counts), and
    the compiled and Python clocks give the same numbers, also when switched mid-way."""
    if compiled and native.NATIVE is None:
        pytest.skip("dvsdk._native not built")
    base, size = 0x6000_0000, 1 << 18
    rng = np.random.default_rng(5)
    mem = Dram(np.zeros(size, np.uint8), base, lazy=True)
    twin = Dram(np.zeros(size, np.uint8), base, lazy=True)  # always Python
    nat = native.NATIVE
    line = np.zeros(size // 64 + 1, np.int64)  # the reference: last store per line
    watched = [(int(rng.integers(0, size - 9000)), int(rng.integers(1, 9000)))
               for _ in range(12)]
    seen = {}
    for step in range(600):
        if compiled:  # (switch now and then: both keep the other's clocks valid)
            monkeypatch.setattr(native, "NATIVE", nat if step % 97 < 80 else None)
        off = int(rng.integers(0, size - 1))
        n = int(rng.integers(1, min(70000, size - off) + 1))
        mem._stamp(base + off, n)
        monkeypatch.setattr(native, "NATIVE", None)
        twin._stamp(base + off, n)
        line[off >> 6 : ((off + n - 1) >> 6) + 1] = step + 1
        if compiled:
            monkeypatch.setattr(native, "NATIVE", nat if step % 89 < 70 else None)
        for a, k in watched:
            v = mem.version(base + a, k)
            ref = int(line[a >> 6 : ((a + k - 1) >> 6) + 1].max())
            assert v == ref
            seen[(a, k)] = v
        monkeypatch.setattr(native, "NATIVE", None)
        assert [twin.version(base + a, k) for a, k in watched] == [seen[w] for w in watched]
