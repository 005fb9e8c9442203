"""Tests for dvsdk.hw.weights (dv700-interface.md §7.4, §8.1-§8.4).

Independent references: the 32 SHA-256 hashes of DMP's own ``test_weights``
(``tests/data/dmp_weight_golden.json``), the known dilated sizes of §7.4, and naive
element-by-element packers written below straight from the §8.1/§8.2/§8.4 tables.
"""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dvsdk.errors import WeightError
from dvsdk.hw import weights as W

# ------------------------------------------------------------------ golden vectors


def xorshift128_top_bytes(n: int) -> np.ndarray:
    """``r >> 24`` of n Marsaglia xorshift128 draws from state {1, 2, 3, 4} (vectors/README)."""
    s0, s1, s2, s3 = 1, 2, 3, 4
    mask = 0xFFFFFFFF
    out = bytearray(n)
    for i in range(n):
        t = s3
        t ^= (t << 11) & mask
        t ^= t >> 8
        s3, s2, s1 = s2, s1, s0
        t ^= s0 ^ (s0 >> 19)
        s0 = t
        out[i] = t >> 24
    return np.frombuffer(bytes(out), dtype=np.uint8)


@pytest.fixture(scope="session")
def golden_draws() -> dict:
    """Draws per (C, kx, ky, M), computed once: enough for bias, prelu and weights."""
    return {}


def golden_inputs(draws: dict, valid_bits: np.ndarray, case: dict):
    c, kx, ky, m = case["C"], case["kx"], case["ky"], case["M"]
    key = (c, kx, ky, m)
    if key not in draws:
        draws[key] = xorshift128_top_bytes(2 * m + m * c * ky * kx)
    r = draws[key]
    bias = valid_bits[r[:m]].view(np.float16)
    pos = m
    prelu = None
    if case["prelu"]:
        prelu = valid_bits[r[m : 2 * m]].view(np.float16)
        pos = 2 * m
    idx = r[pos : pos + m * c * ky * kx].reshape(m, c, ky, kx)
    return idx, bias, prelu


@pytest.mark.parametrize("i", range(32))
def test_golden_sha256(i: int, weight_golden: dict, golden_draws: dict) -> None:
    case = weight_golden["cases"][i]
    valid_bits = np.array(weight_golden["valid_floats_fp16_bits"], dtype=np.uint16)
    assert valid_bits.size == 256
    idx, bias, prelu = golden_inputs(golden_draws, valid_bits, case)
    c, kx, ky, m, q = case["C"], case["kx"], case["ky"], case["M"], case["quantized"]
    if q:
        blob = W.pack_conv_weights(idx, bias, prelu, table=valid_bits.view(np.float16))
    else:
        blob = W.pack_conv_weights(valid_bits[idx].view(np.float16), bias, prelu)
    assert hashlib.sha256(blob).hexdigest().upper() == case["sha256"]
    assert len(blob) == W.conv_weight_size(c, m, kx, ky, q, prelu=case["prelu"])
    # and the simulator's inverse recovers the inputs
    wb, bb, pb = W.unpack_conv_weights(blob, c, m, kx, ky, q, prelu=case["prelu"])
    assert np.array_equal(wb, valid_bits[idx].view(np.float16).astype(np.float32))
    assert np.array_equal(bb, bias.astype(np.float32))
    assert (pb is None) == (prelu is None)
    if prelu is not None:
        assert np.array_equal(pb, prelu.astype(np.float32))


def test_golden_sizes_table() -> None:
    # §8.1 configuration table: (C, k, M) -> Q8, FP16, Q8+PReLU, FP16+PReLU sizes.
    table = {
        (256, 1, 512): (148992, 295936, 150016, 296960),
        (128, 3, 256): (295936, 590336, 296448, 590848),
        (64, 5, 128): (295680, 590080, 295936, 590336),
        (64, 7, 128): (590592, 1179904, 590848, 1180160),
        (260, 1, 510): (185136, 368224, 186160, 369248),
        (70, 3, 130): (85024, 168752, 85296, 169024),
        (70, 5, 130): (328384, 655472, 328656, 655744),
        (70, 7, 130): (655984, 1310672, 656256, 1310944),
    }
    for (c, k, m), sizes in table.items():
        got = tuple(W.conv_weight_size(c, m, k, k, q, prelu=p)
                    for p in (False, True) for q in (True, False))
        assert got == sizes


def test_size_formulas() -> None:
    # §7.4 written out: groups per P, depthwise, even/non-square kernels.
    assert W.conv_weight_size(70, 9, 2, 2, False) == 144 * 9 * 9 + 16 * 2
    assert W.conv_weight_size(70, 9, 4, 1, False) == 144 * 9 * 35 + 16 * 2
    assert W.conv_weight_size(70, 9, 1, 6, True) == (512 + 72 * 9 * 70 + 32 + 15) // 16 * 16
    assert W.conv_weight_size(500, 9, 3, 3, False, depthwise=True) == 144 * 9 + 32
    assert W.conv_weight_size(65, 3, 1, 1, True, prelu=True) == 512 + 432 + 16 + 16
    assert W.fc_weight_size(3, 5, False) == 32 + 16
    assert W.fc_weight_size(3, 5, True) == 512 + 16 + 16
    assert W.fc_weight_size(1024, 10, False) == 20480 + 32


def test_dilated_known_sizes() -> None:
    assert W.dilated_weight_size(64, 16, 3, 3, False) == 21024
    assert W.dilated_weight_size(64, 16, 3, 3, True) == 11168
    rng = np.random.default_rng(0)
    w = rng.standard_normal((16, 64, 3, 3)).astype(np.float32)
    assert len(W.pack_dilated_weights(w, np.zeros(16))) == 21024
    idx = rng.integers(0, 256, (16, 64, 3, 3), dtype=np.uint8)
    table = np.linspace(0, 1, 256).astype(np.float16)
    assert len(W.pack_dilated_weights(idx, np.zeros(16), table=table)) == 11168


# ---------------------------------------------------------- naive §8 references


def _slot(p: int, c: int, yp: int, x: int) -> int:
    """§8.1 placement table, one weight at a time."""
    if p == 1:
        t, g = c & 7, (c & 63) >> 3
        row, col = 11 - 3 * (t >> 1) - g // 3, 3 * (t & 1) + g % 3
    elif p == 3:
        t = c & 7
        row, col = 9 - 3 * (t >> 1) + yp, 3 * (t & 1) + x
    elif p == 5:
        row, col = 7 - 6 * (c & 1) + yp, x
    elif x < 6:
        row, col = 5 + yp, x
    else:
        row, col = divmod([17, 3, 9, 15, 0, 6, 12][yp], 6)
    return 6 * row + col


def naive_conv(w, bias, prelu, lut, last_bias=True) -> bytes:
    """§8.1 stream, loop by loop. w: (M, C, ky, kx) uint16 bits or uint8 indices."""
    m_, c_, ky, kx = w.shape
    p = max(kx, ky) | 1
    fmt = "B" if lut is not None else "<H"
    out = bytearray(lut.tobytes() if lut is not None else b"")
    for m0 in range(0, m_, 8):
        m1 = min(m0 + 8, m_)
        for vec in (bias, prelu):
            if vec is None:
                continue
            vals = [int(v) if last_bias else 0 for v in vec[m0:m1]]
            out += struct.pack("<8H", *(vals + [0] * (8 - len(vals))))
        step = 64 if p == 1 else 8
        for c0 in range(0, c_, step):
            c1 = min(c0 + step, c_)
            if p in (1, 3):
                groups = [range(c0, c1)]
            elif p == 5:
                groups = [range(c, min(c + 2, c1)) for c in range(c0, c1, 2)]
            else:
                groups = [range(c, c + 1) for c in range(c0, c1)]
            for m in range(m0, m1):
                for grp in groups:
                    blk = [0] * 72
                    for c in grp:
                        for y in range(ky):
                            for x in range(kx):
                                blk[_slot(p, c, y + p - ky, x)] = int(w[m, c, y, x])
                    for v in blk:
                        out += struct.pack(fmt, v)
    out += bytes(-len(out) % 16)
    return bytes(out)


def naive_dilated(w, bias, lut) -> bytes:
    """§8.2: LUT once, then a 1x1 packing per tap (iy outer), bias only on the last."""
    m_, c_, ky, kx = w.shape
    out = bytearray(lut.tobytes() if lut is not None else b"")
    for iy in range(ky):
        for ix in range(kx):
            # a 1x1 packing of this tap; an empty LUT selects 1-byte slots when quantized
            tap = naive_conv(w[:, :, iy : iy + 1, ix : ix + 1], bias, None,
                             None if lut is None else np.zeros(0, np.uint16),
                             last_bias=(iy == ky - 1 and ix == kx - 1))
            out += tap + bytes(-len(tap) % 16)
    out += bytes(-len(out) % 16)
    return bytes(out)


def naive_fc(w6, bias_bits, lut) -> bytes:
    """§8.4 loop nest; w6 is (c_out, h_out, w_out, c_in, h_in, w_in) bits or indices."""
    co_, ho_, wo_, ci_, hi_, wi_ = w6.shape
    fmt = "B" if lut is not None else "<H"
    out = bytearray(lut.tobytes() if lut is not None else b"")
    for co0 in range(0, co_, 8):
        for wo in range(wo_):
            for ho in range(ho_):
                for co in range(co0, min(co0 + 8, co_)):
                    for ci0 in range(0, ci_, 8):
                        for wi in range(wi_):
                            for hi in range(hi_):
                                for ci in range(ci0, min(ci0 + 8, ci_)):
                                    out += struct.pack(fmt, int(w6[co, ho, wo, ci, hi, wi]))
    out += bytes(-len(out) % 16)
    for b in bias_bits:
        out += struct.pack("<H", int(b))
    out += bytes(-len(out) % 16)
    return bytes(out)


def _rand_fp16(rng: np.random.Generator, shape) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float16)


def _lut(rng: np.random.Generator) -> np.ndarray:
    t = _rand_fp16(rng, 256)
    t[0] = 0
    return t


KERNELS = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6), (7, 7), (3, 1), (1, 3), (2, 5),
           (5, 2), (7, 1), (1, 7), (6, 3), (4, 7), (2, 1)]


@pytest.mark.parametrize("kx, ky", KERNELS)
@pytest.mark.parametrize("c, m", [(1, 1), (3, 9), (13, 17), (70, 5)])
def test_conv_matches_naive(kx: int, ky: int, c: int, m: int) -> None:
    rng = np.random.default_rng(kx * 100 + ky * 10 + c)
    w = _rand_fp16(rng, (m, c, ky, kx))
    bias, prelu = _rand_fp16(rng, m), _rand_fp16(rng, m)
    for pr in (None, prelu):
        blob = W.pack_conv_weights(w, bias, pr)
        assert blob == naive_conv(w.view(np.uint16), bias.view(np.uint16),
                                  None if pr is None else pr.view(np.uint16), None)
        assert len(blob) == W.conv_weight_size(c, m, kx, ky, False, prelu=pr is not None)
    lut = _lut(rng)
    idx = rng.integers(0, 256, (m, c, ky, kx), dtype=np.uint8)
    blob = W.pack_conv_weights(idx, bias, prelu, table=lut)
    assert blob == naive_conv(idx, bias.view(np.uint16), prelu.view(np.uint16),
                              lut.view(np.uint16))


def test_conv_float32_input_rounds_to_fp16() -> None:
    rng = np.random.default_rng(5)
    w32 = rng.standard_normal((9, 11, 3, 3)).astype(np.float32)
    b32 = rng.standard_normal(9).astype(np.float32)
    assert W.pack_conv_weights(w32, b32) == W.pack_conv_weights(
        w32.astype(np.float16), b32.astype(np.float16))


@pytest.mark.parametrize("kx, ky", [(1, 1), (3, 3), (2, 3), (7, 7), (1, 4)])
@pytest.mark.parametrize("c, m", [(1, 1), (64, 16), (70, 9)])
def test_dilated_matches_naive(kx: int, ky: int, c: int, m: int) -> None:
    rng = np.random.default_rng(c + m + kx)
    w = _rand_fp16(rng, (m, c, ky, kx))
    bias = _rand_fp16(rng, m)
    blob = W.pack_dilated_weights(w, bias)
    assert blob == naive_dilated(w.view(np.uint16), bias.view(np.uint16), None)
    assert len(blob) == W.dilated_weight_size(c, m, kx, ky, False)
    lut = _lut(rng)
    idx = rng.integers(0, 256, (m, c, ky, kx), dtype=np.uint8)
    blob = W.pack_dilated_weights(idx, bias, table=lut)
    assert blob == naive_dilated(idx, bias.view(np.uint16), lut.view(np.uint16))
    assert len(blob) == W.dilated_weight_size(c, m, kx, ky, True)
    wb, bb = W.unpack_dilated_weights(blob, c, m, kx, ky, True)
    assert np.array_equal(wb, lut[idx].astype(np.float32))
    assert np.array_equal(bb, bias.astype(np.float32))


@pytest.mark.parametrize(
    "sin, sout",
    [((10, 1, 1), (7, 1, 1)), ((3, 2, 4), (5, 1, 1)), ((20, 3, 2), (9, 2, 3)),
     ((8, 1, 1), (17, 2, 1)), ((1, 5, 3), (16, 1, 2))],
)
def test_fc_matches_naive(sin: tuple, sout: tuple) -> None:
    rng = np.random.default_rng(sum(sin) + sum(sout))
    n_in, n_out = int(np.prod(sin)), int(np.prod(sout))
    w6 = _rand_fp16(rng, (*sout, *sin))
    bias = _rand_fp16(rng, n_out)
    expect = naive_fc(w6.view(np.uint16), bias.view(np.uint16), None)
    assert W.pack_fc_weights(w6, bias) == expect
    assert W.pack_fc_weights(w6.reshape(n_out, n_in), bias, sin, sout) == expect
    assert len(expect) == W.fc_weight_size(n_in, n_out, False)
    wb, bb = W.unpack_fc_weights(expect, sin, sout, False)
    assert np.array_equal(wb, w6.reshape(n_out, n_in).astype(np.float32))
    assert np.array_equal(bb, bias.astype(np.float32))
    lut = _lut(rng)
    idx = rng.integers(0, 256, (*sout, *sin), dtype=np.uint8)
    blob = W.pack_fc_weights(idx, bias, table=lut)
    assert blob == naive_fc(idx, bias.view(np.uint16), lut.view(np.uint16))
    wq, _ = W.unpack_fc_weights(blob, sin, sout, True)
    assert np.array_equal(wq, lut[idx].reshape(n_out, n_in).astype(np.float32))


def test_fc_flat_is_raw_copy() -> None:
    # §8.4: all spatial dims 1 -> raw output-major copy.
    w = np.arange(12, dtype=np.float16).reshape(3, 4)
    blob = W.pack_fc_weights(w, np.ones(3))
    assert blob[:24] == w.tobytes() and blob[24:32] == bytes(8)
    assert blob[32:38] == np.ones(3, np.float16).tobytes() and len(blob) == 48


# ------------------------------------------------------------------- roundtrips


@st.composite
def conv_cases(draw: st.DrawFn):
    kx, ky = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    depthwise = draw(st.booleans())
    c = 1 if depthwise else draw(st.sampled_from([1, 2, 7, 8, 9, 15, 16, 17, 63, 64, 65, 70]))
    m = draw(st.integers(1, 20))
    return kx, ky, c, m, depthwise, draw(st.booleans()), draw(st.booleans()), draw(st.integers())


@settings(max_examples=120, deadline=None)
@given(case=conv_cases())
def test_conv_roundtrip(case) -> None:
    kx, ky, c, m, dw, prelu, q, seed = case
    rng = np.random.default_rng(seed % 2**32)
    bias = _rand_fp16(rng, m)
    pr = _rand_fp16(rng, m) if prelu else None
    if q:
        lut = _lut(rng)
        idx = rng.integers(0, 256, (m, c, ky, kx), dtype=np.uint8)
        blob = W.pack_conv_weights(idx, bias, pr, table=lut)
        expect = lut[idx]
    else:
        expect = _rand_fp16(rng, (m, c, ky, kx))
        blob = W.pack_conv_weights(expect, bias, pr)
    assert len(blob) == W.conv_weight_size(c if not dw else 99, m, kx, ky, q, dw, prelu)
    padded = np.frombuffer(blob + bytes(64), dtype=np.uint8)  # longer buffers are fine
    wb, bb, pb = W.unpack_conv_weights(padded, 99 if dw else c, m, kx, ky, q, dw, prelu)
    assert wb.dtype == np.float32 and wb.shape == (m, c, ky, kx)
    assert np.array_equal(wb, expect.astype(np.float32))
    assert np.array_equal(bb, bias.astype(np.float32))
    assert (pb is None) != prelu
    if prelu:
        assert np.array_equal(pb, pr.astype(np.float32))


@settings(max_examples=60, deadline=None)
@given(kx=st.integers(1, 7), ky=st.integers(1, 7), c=st.integers(1, 80), m=st.integers(1, 20),
       q=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_dilated_roundtrip(kx: int, ky: int, c: int, m: int, q: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    bias = _rand_fp16(rng, m)
    if q:
        lut = _lut(rng)
        idx = rng.integers(0, 256, (m, c, ky, kx), dtype=np.uint8)
        blob = W.pack_dilated_weights(idx, bias, table=lut)
        expect = lut[idx]
    else:
        expect = _rand_fp16(rng, (m, c, ky, kx))
        blob = W.pack_dilated_weights(expect, bias)
    wb, bb = W.unpack_dilated_weights(blob, c, m, kx, ky, q)
    assert np.array_equal(wb, expect.astype(np.float32))
    assert np.array_equal(bb, bias.astype(np.float32))


# ------------------------------------------------------------------- bad inputs


def _err(fn, *args, **kw) -> WeightError:
    with pytest.raises(WeightError) as ei:
        fn(*args, **kw)
    return ei.value


def test_bad_inputs() -> None:
    w = np.zeros((2, 3, 3, 3), np.float16)
    b = np.zeros(2)
    e = _err(W.pack_conv_weights, np.zeros((2, 3, 8, 8), np.float16), b)
    assert e.field == "kx" and e.value == 8 and e.limit == "1..7"
    assert _err(W.pack_conv_weights, np.zeros((2, 3, 8, 1), np.float16), b).field == "ky"
    assert _err(W.pack_conv_weights, np.zeros((2, 3, 3)), b).field == "weights.ndim"
    assert _err(W.pack_conv_weights, np.zeros((2, 0, 3, 3)), b).field == "C"
    assert _err(W.pack_conv_weights, w, np.zeros(3)).field == "bias.shape"
    assert _err(W.pack_conv_weights, w, b, np.zeros(1)).field == "prelu.shape"
    assert _err(W.pack_conv_weights, w.astype(np.int16), b).field == "weights.dtype"
    assert _err(W.pack_conv_weights, w.astype(np.uint8), b).field == "weights.dtype"
    assert _err(W.pack_conv_weights, w + np.float32(1e6), b).field == "weights"
    assert _err(W.pack_conv_weights, w, b + np.nan).field == "bias"
    table = np.zeros(256, np.float16)
    assert _err(W.pack_conv_weights, w, b, table=table).field == "weights.dtype"
    idx = w.astype(np.uint8)
    assert _err(W.pack_conv_weights, idx, b, table=table[:255]).field == "table.shape"
    e = _err(W.pack_conv_weights, idx, b, table=table + 1)
    assert e.field == "table[0]" and e.value == 1.0
    assert _err(W.pack_dilated_weights, np.zeros((2, 3, 1, 8)), b).field == "kx"
    assert _err(W.pack_fc_weights, np.zeros((3, 4, 5)), b).field == "weights.ndim"
    assert _err(W.pack_fc_weights, np.zeros((2, 12)), b, (3, 2, 1)).field == "weights.shape"
    assert _err(W.pack_fc_weights, np.zeros((2, 12)), b, (12, 0, 1)).field == "in_shape"
    blob = W.pack_conv_weights(w, b)
    e = _err(W.unpack_conv_weights, blob[:-1], 3, 2, 3, 3, False)
    assert e.field == "blob.size" and e.value == len(blob) - 1
    assert _err(W.unpack_conv_weights, [0] * 999, 3, 2, 3, 3, False).field == "blob"
    assert _err(W.unpack_dilated_weights, b"", 3, 2, 3, 3, False).field == "blob.size"
    assert _err(W.conv_weight_size, 0, 2, 3, 3, False).field == "c"
    assert _err(W.conv_weight_size, 3, 2, 0, 3, False).field == "kx"


# ------------------------------------------------------------------- quantization


def test_quantize_gaussian_beats_uniform() -> None:
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    table, idx = W.quantize_weights(w, seed=3)
    assert table.dtype == np.float16 and table.shape == (256,) and table[0] == 0
    assert idx.dtype == np.uint8 and idx.shape == w.shape
    err = W.quantization_error(w, table, idx)
    # uniform 8-bit grid over [min, max], written here
    lo, hi = float(w.min()), float(w.max())
    step = (hi - lo) / 255
    uni = np.round((w - lo) / step) * step + lo
    uni_rms = float(np.sqrt(np.mean((uni.astype(np.float64) - w) ** 2)))
    assert err["rms"] < 0.8 * uni_rms
    manual = table.astype(np.float64)[idx] - w
    assert err["rms"] == pytest.approx(np.sqrt(np.mean(manual**2)))
    assert err["max_abs"] == pytest.approx(np.abs(manual).max())
    assert err["rel_rms"] == pytest.approx(err["rms"] / np.sqrt(np.mean(w.astype(float) ** 2)))
    # deterministic, and packable
    t2, i2 = W.quantize_weights(w, seed=3)
    assert np.array_equal(t2.view(np.uint16), table.view(np.uint16)) and np.array_equal(i2, idx)
    blob = W.pack_conv_weights(idx, np.zeros(64), table=table)
    wb, _, _ = W.unpack_conv_weights(blob, 64, 64, 3, 3, True)
    assert np.array_equal(wb, table[idx].astype(np.float32))


def test_quantize_zeros_and_few_values() -> None:
    z = np.zeros((4, 3, 3, 3), np.float32)
    table, idx = W.quantize_weights(z)
    assert not table.any() and not idx.any()
    assert W.quantization_error(z, table, idx) == {"max_abs": 0.0, "rms": 0.0, "rel_rms": 0.0}
    const = np.full((5, 7), 0.25, np.float32)
    table, idx = W.quantize_weights(const)
    assert np.all(table[idx] == 0.25) and table[0] == 0
    rng = np.random.default_rng(2)
    vals = rng.standard_normal(200).astype(np.float16)  # <= 255 distinct values
    w = rng.choice(vals, size=(30, 40)).astype(np.float32)
    w[::3] = 0.0
    table, idx = W.quantize_weights(w)
    assert np.array_equal(table[idx].astype(np.float32), w)  # exact
    assert np.all(idx[::3] == 0) and np.all(idx[w != 0] != 0)
    assert W.quantization_error(w, table, idx)["max_abs"] == 0.0


def test_quantize_zero_code_with_many_values() -> None:
    rng = np.random.default_rng(11)
    w = rng.standard_normal(20000).astype(np.float32)
    w[rng.random(20000) < 0.3] = 0.0
    table, idx = W.quantize_weights(w, seed=1)
    assert np.all(idx[w == 0] == 0) and table[0] == 0
    assert len(np.unique(table[1:])) > 200


def test_quantize_bad_inputs() -> None:
    assert _err(W.quantize_weights, np.array([1.0, np.inf])).field == "weights"
    assert _err(W.quantize_weights, np.array(["a"])).field == "weights.dtype"
    assert _err(W.quantization_error, np.zeros(3), np.zeros(256),
                np.zeros(3, np.int64)).field == "indices"


def test_quantize_dominant_value() -> None:
    # One value repeated many times plus a few hundred others: the repeated value must
    # stay exact and the rest must still get a reasonable codebook.
    rng = np.random.default_rng(4)
    w = np.concatenate([np.full(50000, 0.5), rng.standard_normal(400)]).astype(np.float32)
    table, idx = W.quantize_weights(w, seed=9)
    assert np.all(table[idx[:50000]] == np.float16(0.5))
    err = W.quantization_error(w, table, idx)
    assert err["max_abs"] < 0.05 and len(np.unique(table)) > 200
