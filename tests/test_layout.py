"""Tests for dvsdk.hw.layout (dv700-interface.md §1, formats.md §1.3/§1.4).

References are independent of the code under test: the wiki offsets in
``tests/data/layout_offsets.json`` and a naive per-element loop written from formats.md
§1.4 Rule B below.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dvsdk.errors import LayoutError
from dvsdk.hw import layout


def naive_pack(x: np.ndarray, transpose: bool) -> np.ndarray:
    """formats.md §1.4 Rule B, one element at a time (batch = samples back to back)."""
    if x.ndim == 3:
        x = x[None]
    n_, h, w, c = x.shape
    out = np.full(x.size, np.nan, dtype=np.float16)
    for n in range(n_):
        for y in range(h):
            for xx in range(w):
                for ch in range(c):
                    chunk, sub = divmod(ch, 8)
                    cw = 8 if chunk < c // 8 else c % 8
                    sp = y * w * cw + xx * cw if transpose else xx * h * cw + y * cw
                    off = n * w * h * c + chunk * w * h * 8 + sp + sub
                    out[off] = x[n, y, xx, ch]
    return out


def fp16_values(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Random finite FP16-representable values (as float32)."""
    bits = rng.integers(0, 0x7C00, size=shape, dtype=np.uint16)
    bits |= rng.integers(0, 2, size=shape, dtype=np.uint16) << 15
    return bits.view(np.float16).astype(np.float32)


# ------------------------------------------------------------------ golden offsets


@pytest.mark.parametrize("transpose", [False, True])
def test_wiki_offsets(layout_vectors: dict, transpose: bool) -> None:
    key = "offset_bytes_transposed" if transpose else "offset_bytes"
    assert len(layout_vectors["cases"]) == 8
    for case in layout_vectors["cases"]:
        w, h, c = case["W"], case["H"], case["C"]
        x = np.zeros((h, w, c), dtype=np.float32)
        x[case["y"], case["x"], case["c"]] = 7.0
        buf = layout.pack(x, transpose=transpose)
        assert buf.dtype == np.float16 and buf.ndim == 1
        assert buf.nbytes == case["buffer_bytes"]
        assert layout.nbytes((h, w, c)) == case["buffer_bytes"]
        hits = np.flatnonzero(buf)
        assert hits.tolist() == [case[key] // 2], case
        assert layout.offset((h, w, c), case["y"], case["x"], case["c"],
                             transpose=transpose) * 2 == case[key]
        # Every element distinct: the target element is found at the wiki offset.
        vals = np.arange(h * w * c, dtype=np.float32).reshape(h, w, c)
        buf = layout.pack(vals, transpose=transpose)
        assert buf[case[key] // 2] == vals[case["y"], case["x"], case["c"]]
        # And unpack puts a lone value back at (y, x, c).
        lone = np.zeros(case["buffer_bytes"] // 2, dtype=np.float16)
        lone[case[key] // 2] = 3.0
        back = layout.unpack(lone, (h, w, c), transpose=transpose)
        assert np.flatnonzero(back).tolist() == [
            np.ravel_multi_index((case["y"], case["x"], case["c"]), (h, w, c))
        ]


def test_offset_batch_stride() -> None:
    # §1: sample stride W*H*C; the wiki offset #1 plus one sample.
    assert layout.offset((3, 2, 3, 20), 1, 2, 17, n=2) == 2 * 3 * 2 * 20 + 234 // 2
    assert layout.nbytes((3, 2, 3, 20)) == 3 * 240


def test_offsets_array_matches_formula() -> None:
    h, w, c = 3, 5, 21
    offs = layout.offsets((h, w, c))
    yy, xx, cc = np.meshgrid(np.arange(h), np.arange(w), np.arange(c), indexing="ij")
    c0 = cc & ~7
    expect = c0 * w * h + (xx * h + yy) * np.minimum(c - c0, 8) + (cc & 7)
    assert np.array_equal(offs, expect)
    expect_t = c0 * w * h + (yy * w + xx) * np.minimum(c - c0, 8) + (cc & 7)
    assert np.array_equal(layout.offsets((h, w, c), transpose=True), expect_t)


# -------------------------------------------------------------- naive reference


@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 3, 5), (3, 2, 8), (4, 3, 9), (3, 5, 20),
                                   (2, 4, 3, 17), (1, 7, 16), (5, 1, 24), (2, 1, 1, 70)])
@pytest.mark.parametrize("transpose", [False, True])
def test_pack_matches_naive(shape: tuple[int, ...], transpose: bool) -> None:
    x = fp16_values(np.random.default_rng(1), shape)
    buf = layout.pack(x, transpose=transpose)
    assert np.array_equal(buf.view(np.uint16), naive_pack(x, transpose).view(np.uint16))
    back = layout.unpack(buf, shape, transpose=transpose)
    assert back.dtype == np.float32 and back.shape == shape
    assert np.array_equal(back, x)


@pytest.mark.parametrize("c", range(1, 71))
def test_roundtrip_every_c(c: int) -> None:
    rng = np.random.default_rng(c)
    x = fp16_values(rng, (2, 5, 3, c))
    for transpose in (False, True):
        buf = layout.pack(x, transpose=transpose)
        assert np.array_equal(buf.view(np.uint16), naive_pack(x, transpose).view(np.uint16))
        assert np.array_equal(layout.unpack(buf, x.shape, transpose), x)
        single = layout.pack(x[1], transpose=transpose)
        assert np.array_equal(single, buf[5 * 3 * c :])


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("shape", [(3, 5, 20), (2, 4, 3, 17), (6, 4, 3), (1, 1, 37)])
def test_pack_into_a_given_buffer(shape, compiled, monkeypatch) -> None:
    """``out``: the same bytes as the naive reference, in the caller's array (a view into
    a bigger buffer), from float32 (the compiled loop) and float64 (numpy's path), and
    with the compiled loops off; nothing around it is touched."""
    from dvsdk import native

    if not compiled:
        monkeypatch.setattr(native, "NATIVE", None)
    x = fp16_values(np.random.default_rng(7), shape)
    for transpose in (False, True):
        for src in (x, x.astype(np.float64)):
            big = np.full(x.size + 16, 7.0, np.float16)
            got = layout.pack(src, transpose=transpose, out=big[8:-8])
            assert np.shares_memory(got, big)
            assert np.array_equal(big[8:-8].view(np.uint16),
                                  naive_pack(x, transpose).view(np.uint16))
            assert (big[:8] == 7).all() and (big[-8:] == 7).all()


@pytest.mark.parametrize("out,field_value", [
    (np.zeros(60, np.float32), "float32"), (np.zeros((6, 10), np.float16), "float16"),
    (np.zeros(120, np.float16)[::2], "float16"), (np.zeros(59, np.float16), 59),
    (np.zeros(61, np.float16), 61), (b"x" * 120, "bytes")])
def test_pack_into_a_wrong_buffer_is_refused(out, field_value) -> None:
    with pytest.raises(LayoutError) as ei:
        layout.pack(np.ones((2, 3, 10), np.float32), out=out)
    assert ei.value.field == "out" and str(field_value) in str(ei.value.value)
    ro = np.zeros(60, np.float16)
    ro.flags.writeable = False
    with pytest.raises(LayoutError):
        layout.pack(np.ones((2, 3, 10), np.float32), out=ro)


def test_c_le_8_is_whc_or_plain_cast() -> None:
    # §1 consequence: C <= 8 is [W][H][C]; transposed C <= 8 is plain HWC (formats §1.3).
    x = fp16_values(np.random.default_rng(3), (4, 6, 3))
    assert np.array_equal(layout.pack(x), x.transpose(1, 0, 2).astype(np.float16).ravel())
    assert np.array_equal(layout.pack(x, transpose=True), x.astype(np.float16).ravel())
    # W = H = 1: plain vector of C values.
    v = fp16_values(np.random.default_rng(4), (1, 1, 37))
    assert np.array_equal(layout.pack(v), v.astype(np.float16).ravel())


def test_dtypes_and_buffer_kinds() -> None:
    img = np.arange(2 * 3 * 11, dtype=np.uint8).reshape(2, 3, 11)
    ref = naive_pack(img.astype(np.float32), False)
    for src in (img, img.astype(np.float64), img.astype(np.float16), img.astype(np.int32)):
        assert np.array_equal(layout.pack(src), ref)
    buf = layout.pack(img)
    for b in (buf, buf.tobytes(), bytearray(buf.tobytes()), buf.view(np.uint8)):
        assert np.array_equal(layout.unpack(b, img.shape), img.astype(np.float32))
    # little-endian FP16 bytes
    assert layout.pack(np.ones((1, 1, 1))).tobytes() == b"\x00\x3c"


def test_pack_copies_and_allows_nan() -> None:
    x = np.zeros((2, 2, 3), dtype=np.float16)
    x[0, 1, 2] = np.nan
    buf = layout.pack(x, transpose=True)
    buf[:] = 1
    assert x[0, 0, 0] == 0  # no aliasing with the input
    out = layout.unpack(layout.pack(x), x.shape)
    assert np.isnan(out[0, 1, 2]) and np.count_nonzero(np.isnan(out)) == 1
    big = layout.pack(np.array([[[1e6, -1e6]]], dtype=np.float32))
    assert np.isposinf(big[0]) and np.isneginf(big[1])


# ---------------------------------------------------------------------- hypothesis


@st.composite
def tensors(draw: st.DrawFn) -> np.ndarray:
    batched = draw(st.booleans())
    shape = (draw(st.integers(1, 3)),) if batched else ()
    shape += (draw(st.integers(1, 9)), draw(st.integers(1, 9)), draw(st.integers(1, 40)))
    bits = draw(hnp.arrays(np.uint16, shape, elements=st.integers(0, 0xFFFF)))
    x = bits.view(np.float16)
    x[~np.isfinite(x)] = 0
    return x


@settings(max_examples=150, deadline=None)
@given(x=tensors(), transpose=st.booleans())
def test_roundtrip_property(x: np.ndarray, transpose: bool) -> None:
    buf = layout.pack(x, transpose=transpose)
    assert buf.size == x.size and layout.nbytes(x.shape) == buf.nbytes
    back = layout.unpack(buf.tobytes(), x.shape, transpose=transpose)
    assert np.array_equal(back.astype(np.float16).view(np.uint16), x.view(np.uint16))
    # a few spot checks of the §1 formula, written here independently
    n_, h, w, c = (1, *x.shape) if x.ndim == 3 else x.shape
    x4 = x.reshape(n_, h, w, c)
    rng = np.random.default_rng(x.size)
    for _ in range(5):
        n, y, xx, ch = (int(rng.integers(0, d)) for d in (n_, h, w, c))
        c0 = ch & ~7
        sp = (y * w + xx) if transpose else (xx * h + y)
        off = n * w * h * c + c0 * w * h + sp * min(c - c0, 8) + (ch & 7)
        assert buf.view(np.uint16)[off] == x4.view(np.uint16)[n, y, xx, ch]


# -------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "bad, field",
    [
        (np.zeros((2, 2, 0)), "C"),
        (np.zeros((0, 2, 2)), "H"),
        (np.zeros((2, 2)), "ndim"),
        (np.zeros((1, 1, 2, 2, 2)), "ndim"),
        (np.zeros((2, 2, 3), dtype=np.complex64), "dtype"),
        (np.zeros((2, 2, 3), dtype=bool), "dtype"),
        (np.full((2, 2, 3), "a"), "dtype"),
    ],
)
def test_pack_errors(bad: np.ndarray, field: str) -> None:
    with pytest.raises(LayoutError) as ei:
        layout.pack(bad)
    assert ei.value.field == field


def test_unpack_errors() -> None:
    buf = np.zeros(2 * 3 * 20, dtype=np.float16)
    with pytest.raises(LayoutError) as ei:
        layout.unpack(buf[:-1], (2, 3, 20))
    assert ei.value.value == 119 and ei.value.limit == 120
    assert "119" in str(ei.value) and "120" in str(ei.value)
    with pytest.raises(LayoutError):
        layout.unpack(np.zeros(121, np.float16), (2, 3, 20))
    with pytest.raises(LayoutError) as ei:
        layout.unpack(b"\x00" * 239, (2, 3, 20))
    assert ei.value.field == "buf.nbytes"
    with pytest.raises(LayoutError) as ei:
        layout.unpack(np.zeros(120, np.float32), (2, 3, 20))
    assert ei.value.field == "buf.dtype"
    with pytest.raises(LayoutError):
        layout.unpack([0.0] * 120, (2, 3, 20))
    with pytest.raises(LayoutError) as ei:
        layout.unpack(buf, (2, 3, 0))
    assert ei.value.field == "C" and ei.value.limit == ">= 1"
    with pytest.raises(LayoutError):
        layout.unpack(buf, (120,))


def test_offset_errors() -> None:
    with pytest.raises(LayoutError) as ei:
        layout.offset((2, 3, 20), 0, 3, 0)
    assert ei.value.field == "x" and ei.value.limit == "0..2"
    with pytest.raises(LayoutError):
        layout.offset((2, 3, 20), 0, 0, 20)
    with pytest.raises(LayoutError):
        layout.offset((2, 3, 20), -1, 0, 0)
    with pytest.raises(LayoutError):
        layout.offset((2, 3, 20), 0, 0, 0, n=1)
    with pytest.raises(LayoutError):
        layout.nbytes((2, 3, 2.5))


def test_threads_do_not_share_staging() -> None:
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(8)
    xs = [fp16_values(rng, (7, 5, 8 * i + 3)) for i in range(1, 9)]

    def work(x: np.ndarray) -> bool:
        ok = True
        for _ in range(20):
            buf = layout.pack(x)
            ok &= np.array_equal(buf.view(np.uint16), naive_pack(x, False).view(np.uint16))
            ok &= np.array_equal(layout.unpack(buf, x.shape), x)
        return bool(ok)

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(work, xs))
