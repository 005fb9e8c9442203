"""The compiled conversions, layout moves and fused epilogues against numpy, bit for bit.

References: numpy's own float16 casts (every binary16 pattern, a sweep of float32 ones;
every NaN the canonical 0x7E00, firmware_spec/arithmetic.md),
``hw.layout``'s numpy paths (themselves tested against ``layout.offsets`` in
test_layout), and the simulator's stage-by-stage numpy ops (``ops._add_per_channel``,
the element-wise add, ``ops.activation``, ``hw.fp16.round_f16``) for the fused epilogue.
"""

import numpy as np
import pytest

from dvsdk import native
from dvsdk.hw import arith, layout
from dvsdk.hw.fp16 import f32_to_f16, round_f16, to_f16, to_f32
from dvsdk.sim import ops

from .refs import f16_cast
from .test_native import NATIVE, needs_native, same_bits, same_values, special_mix

pytestmark = [needs_native, pytest.mark.filterwarnings("ignore::RuntimeWarning")]
ALL_HALVES = np.arange(65536, dtype=np.uint16).view(np.float16)


@pytest.fixture
def numpy_only(monkeypatch):
    monkeypatch.setattr(native, "NATIVE", None)


def test_binary16_to_float32_for_every_pattern():
    out = np.empty(65536, np.float32)
    NATIVE.f16_to_f32(ALL_HALVES, out)
    assert same_bits(out, ALL_HALVES.astype(np.float32))   # NaN payloads and all
    assert same_bits(to_f32(ALL_HALVES), ALL_HALVES.astype(np.float32))


def test_float32_to_binary16_rounds_as_numpy_on_a_sweep_and_specials():
    u = np.arange(0, 1 << 32, 4093, dtype=np.uint64).astype(np.uint32)  # 1 M patterns
    around = ALL_HALVES.astype(np.float32).view(np.uint32).astype(np.int64)
    steps = np.array([-0x1001, -0x1000, -0xFFF, -1, 1, 0xFFF, 0x1000, 0x1001])
    u = np.concatenate([u, ((around[:, None] + steps) % (1 << 32)).astype(np.uint32)
                        .reshape(-1)])
    x = u.view(np.float32)
    ref = f16_cast(x)
    assert same_bits(to_f16(x), ref)                         # signalling NaNs included
    halves = ALL_HALVES.astype(np.float32)
    assert same_bits(f32_to_f16(halves), f16_cast(halves))  # (NaNs canonical)
    dma = np.zeros(2 * x.size + 6, np.uint8)   # into a view of other memory, as the runtime
    into = dma[2 : 2 + 2 * x.size].view(np.float16)
    assert to_f16(x, into) is into and same_bits(into, ref) and not dma[:2].any()
    with pytest.raises(ValueError, match="float16"):
        to_f16(x, np.empty(x.size, np.float32))


def test_to_f16_into_a_view_on_the_numpy_path(monkeypatch):
    monkeypatch.setattr(native, "NATIVE", None)
    x = np.array([1.0, 65520.0, -3e-8, np.nan, 0.1], np.float32)
    out = np.empty(5, np.float16)
    assert same_bits(to_f16(x, out), f16_cast(x))


@pytest.mark.parametrize("shape", [(56, 56, 64), (7, 9, 13), (1, 1, 20), (5, 3, 8),
                                   (4, 4, 3), (2, 6, 17, 19), (3, 5, 16)])
@pytest.mark.parametrize("transpose", [False, True])
def test_pack_unpack_and_chunks_equal_numpy(shape, transpose, monkeypatch):
    rng = np.random.default_rng(sum(shape))
    x = special_mix(rng, shape) * 100
    strided = np.ascontiguousarray(np.moveaxis(x, -1, 0))
    strided = np.moveaxis(strided, 0, -1)      # the NCHW-seen-as-HWC view the runtime packs
    runs = []
    for mod in (NATIVE, None):
        monkeypatch.setattr(native, "NATIVE", mod)
        p16 = layout.pack(x, transpose)
        runs.append((p16, layout.pack(strided, transpose), layout.unpack(p16, shape, transpose),
                     layout.to_chunks(x, transpose),
                     layout.from_chunks(layout.to_chunks(x, transpose), shape, transpose)))
    for fast, ref in zip(*runs):
        assert same_bits(fast, ref)
    chunks, back = runs[0][3], runs[0][4]
    assert same_bits(chunks.astype(np.float16), runs[0][0]) and same_bits(back, x)


def _reference_epilogue(y, bias, addend, act, slope, prelu):
    """The stages as the numpy path runs them."""
    t = y.copy()
    if bias is not None:
        ops._add_per_channel(t.reshape(1, *t.shape), bias)
    if addend is not None:
        t = t + addend
    if act < 0:
        return t
    t = ops.activation(t, act, slope, prelu)
    return round_f16(t)


@pytest.mark.parametrize("act,slope", [(-1, 0.0), (0, 0.0), (2, 0.0), (2, 0.125), (4, 0.0),
                                       (6, 0.0)])
@pytest.mark.parametrize("bias,addend", [(True, False), (True, True), (False, True),
                                         (False, False)])
@pytest.mark.parametrize("m", [3, 16, 2047, 2049, 4100])  # (rows tiled up to 2048)
def test_epilogue_equals_the_stages(act, slope, bias, addend, m):
    rng = np.random.default_rng(m + act)
    y = special_mix(rng, (max(1, 9000 // m), m))
    b = special_mix(rng, (m,)) if bias else None
    a = special_mix(rng, y.shape) if addend else None
    p = rng.normal(size=m).astype(np.float32) if act == 4 else None
    got = y.copy()
    NATIVE.epilogue(got, b, a, act, slope, p)
    assert same_values(got, _reference_epilogue(y, b, a, act, slope, p))


@pytest.mark.parametrize("act,slope", [(0, 0.0), (2, 0.25), (4, 0.0), (6, 0.0)])
@pytest.mark.parametrize("c", [5, 16, 24, 40, 71, 700])  # (700: a pixel at a time)
def test_depthwise_with_its_epilogue_equals_depthwise_then_finish(act, slope, c):
    rng = np.random.default_rng(c * 7 + act)
    x = special_mix(rng, (9, 11, c)) if c == 40 else rng.normal(size=(9, 11, c)).astype(
        np.float32)
    taps = rng.normal(size=(3, 5, c)).astype(np.float32)
    b = rng.normal(size=c).astype(np.float32)
    p = rng.normal(size=c).astype(np.float32) if act == 4 else None
    plain, fused = np.empty((9, 6, c), np.float32), np.empty((9, 6, c), np.float32)
    NATIVE.depthwise(x, taps, b, plain, 2, 1, 1, 1, 2, 1)
    NATIVE.depthwise(x, taps, b, fused, 2, 1, 1, 1, 2, 1, act, slope, p)
    assert same_values(fused, round_f16(ops.activation(plain, act, slope, p)))


def test_bad_arguments_to_the_new_loops_raise():
    y = np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError):
        NATIVE.epilogue(y, np.zeros(4, np.float32), None, 0, 0.0, None)   # bias size
    with pytest.raises(ValueError):
        NATIVE.epilogue(y, None, None, 4, 0.0, None)                      # PReLU slopes
    with pytest.raises(ValueError):
        NATIVE.epilogue(y, None, None, 3, 0.0, None)                      # sigmoid: numpy's
    with pytest.raises(ValueError):
        NATIVE.epilogue(y, None, y, 0, 0.0, None)                         # addend is y
    with pytest.raises(ValueError):
        NATIVE.pack(np.zeros((1, 2, 2, 3), np.float32), np.zeros(11, np.float16), False)
    with pytest.raises(TypeError):
        NATIVE.pack(np.zeros((1, 2, 2, 3), np.float32), np.zeros(12, np.int32), False)
    with pytest.raises(ValueError):
        NATIVE.unpack(np.zeros(12, np.float16), np.zeros((2, 2, 3), np.float32), False)
    with pytest.raises(ValueError):
        NATIVE.f16_to_f32(np.zeros(3, np.float16), np.zeros(4, np.float32))
    x = np.zeros((3, 3, 2), np.float32)
    with pytest.raises(ValueError):
        NATIVE.depthwise(x, np.zeros((1, 1, 2), np.float32), np.zeros(2, np.float32), x,
                         1, 1, 1, 1, 0, 0)                                # out is x


@pytest.mark.parametrize("k,s,d,pads,up", [((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (1, 1)),
                                           ((2, 3), (2, 1), (1, 2), (0, 1, 2, 0), (1, 1)),
                                           ((1, 1), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1)),
                                           ((5, 5), (1, 1), (2, 2), (4, 4, 4, 4), (1, 1)),
                                           ((2, 2), (1, 1), (1, 1), (1, 1, 1, 1), (2, 2)),
                                           ((3, 2), (1, 1), (1, 1), (2, 0, 1, 1), (3, 2))])
def test_im2col_builds_the_matrix_of_the_padded_window_view(k, s, d, pads, up):
    from numpy.lib.stride_tricks import sliding_window_view

    rng = np.random.default_rng(sum(k) + sum(pads))
    x = special_mix(rng, (9, 11, 6))
    (kx, ky), (sx, sy), (dx, dy), (pl, pr, pt, pb) = k, s, d, pads
    z = np.zeros(((9 - 1) * up[1] + 1, (11 - 1) * up[0] + 1, 6), np.float32)
    z[::up[1], ::up[0]] = x                       # a deconvolution's zero-inserted input
    xp = np.pad(z, ((pt, pb), (pl, pr), (0, 0)))
    oh = (xp.shape[0] - (ky - 1) * dy - 1) // sy + 1
    ow = (xp.shape[1] - (kx - 1) * dx - 1) // sx + 1
    win = sliding_window_view(xp, ((ky - 1) * dy + 1, (kx - 1) * dx + 1), axis=(0, 1))
    ref = win[::sy, ::sx][:oh, :ow, :, ::dy, ::dx].transpose(0, 1, 3, 4, 2).reshape(
        oh, ow, -1)
    got = np.full((oh - 2, ow, ky * kx * 6), np.nan, np.float32)  # rows 2.. only
    NATIVE.im2col(x, got, 2, kx, ky, sx, sy, dx, dy, pl, pt, *up)
    assert same_bits(got, np.ascontiguousarray(ref[2:]))


@pytest.mark.parametrize("size,stride,pads,param", [((3, 3), (2, 2), (1, 1, 1, 1), 1 / 9),
                                                    ((1, 1), (1, 1), (0, 0, 0, 0), 1.0),
                                                    ((1, 1), (1, 1), (0, 0, 0, 0), 0.333),
                                                    ((7, 5), (1, 1), (0, 0, 0, 0), 0.03)])
def test_avgpool_equals_numpy(size, stride, pads, param, monkeypatch):
    x = special_mix(np.random.default_rng(3), (7, 9, 21))
    ref = ops.avg_pool(x, size, stride, pads, param)   # the numpy reference
    got = np.empty_like(ref)
    NATIVE.avgpool(x, got, *size, *stride, pads[0], pads[2], float(np.float32(param)))
    assert same_values(got, ref)


@pytest.mark.parametrize("seed", range(6))
def test_maxpool_equals_numpy_bit_for_bit(seed):
    """Random windows, steps and pads (windows wholly in the padding included) over
    values with both zeros, NaNs with payloads (signalling ones too) and infinities: the
    same bits as ops.max_pool (the total order: +0 over -0, any NaN the canonical one)."""
    rng = np.random.default_rng(seed)
    for trial in range(60):
        h, w, c = (int(v) for v in rng.integers(1, 12, 3))
        kx, ky = (int(v) for v in rng.integers(1, 4, 2))
        sx, sy = (int(v) for v in rng.integers(1, 3, 2))
        pads = tuple(int(v) for v in rng.integers(0, 3, 4))
        if trial == 0:  # one tap per output: the flat copy
            kx = ky = sx = sy = 1
            pads = (0, 0, 0, 0)
        if w + pads[0] + pads[1] < kx or h + pads[2] + pads[3] < ky:
            continue
        x = special_mix(rng, (h, w, c))
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, max(1, flat.size // 5))] = rng.choice(
            np.array([0.0, -0.0], np.float32), max(1, flat.size // 5))
        ref = ops.max_pool(x, (kx, ky), (sx, sy), pads)
        got = np.full_like(ref, 7.0)
        NATIVE.maxpool(x, got, kx, ky, sx, sy, pads[0], pads[2])
        assert same_bits(got, ref), (h, w, c, kx, ky, sx, sy, pads)
    with pytest.raises(ValueError):
        NATIVE.maxpool(x, np.empty((1, 1, c + 1), np.float32), 1, 1, 1, 1, 0, 0)


@pytest.mark.parametrize("act,param", [(1, 0.0), (3, 0.0), (5, 0.0), (5, 0.25)])
def test_tanh_sigmoid_and_elu_equal_the_numpy_activation(act, param):
    """act_elem (the float64 functions of _native_elem.h) against ops.activation's numpy
    ones (dvsdk.hw.elementary), special values included, bit for bit."""
    t = special_mix(np.random.default_rng(act), (40, 130))
    t.reshape(-1)[:12] = [88.7, -88.7, 103.9, -103.9, 3e38, -3e38, 1e-40, -1e-40, 20.0,
                          -20.0, 0.5, -0.5]
    ref = round_f16(ops.activation(t, act, param))
    got = t.copy()
    NATIVE.act_elem(got, act, ops.elu_alpha(param))
    assert same_bits(got, ref)
    # binary16 inputs (a standalone activation command's): every block a table lookup,
    # the table built from the same function; every binary16 pattern, then blocks mixing
    # normal values with zeros, subnormals, infinities and NaNs (computed instead)
    halves = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    for h in (halves[np.isfinite(halves) & ((np.abs(halves) >= 2.0 ** -14) | (halves == 0))],
              halves):
        got = h.copy()
        NATIVE.act_elem(got, act, ops.elu_alpha(param))
        assert same_bits(got, round_f16(ops.activation(h, act, param)))
        # out of place (x read, y written): the same bits, x unchanged
        src = h.copy()
        out = np.full_like(h, 7.0)
        NATIVE.act_elem(out, act, ops.elu_alpha(param), src)
        assert same_bits(out, got) and same_bits(src, h)
    # float32 NaNs whose payload is a binary16 one, and ones whose is not
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F802000, 0xFFFFE000, 0x7F800001, 0x7FC00001],
                    np.uint32).view(np.float32)
    got = nans.copy()
    NATIVE.act_elem(got, act, ops.elu_alpha(param))
    assert same_bits(got, round_f16(ops.activation(nans, act, param)))
    with pytest.raises(ValueError):
        NATIVE.act_elem(np.empty(4, np.float32), act, 1.0, np.empty(5, np.float32))
    both = np.zeros(8, np.float32)
    with pytest.raises(ValueError):
        NATIVE.act_elem(both[:6], act, 1.0, both[2:])


# -- ew_f16: one CPU step from FP16 bytes to FP16 bytes (runtime/cpusteps.py) ---------------
ALL_F16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)  # every binary16 pattern


def _numpy_step(op: str, args: list) -> np.ndarray:
    """The reference: the CPU kernel on float32 operands, then numpy's cast to binary16
    (NaNs canonical)."""
    from dvsdk.cpu import ops as cpu_ops

    return f16_cast(cpu_ops.run_op(op, args, {})[0]).view(np.uint16)


def test_ew_hardswish_equals_the_cpu_kernel_on_every_binary16():
    out = np.empty_like(ALL_F16)
    NATIVE.ew_f16(0, ALL_F16, out)
    assert same_bits(out, _numpy_step("HardSwish", [to_f32(ALL_F16.view(np.float16))]))


@pytest.mark.parametrize("op,code", [("Mul", 1), ("Add", 2)])
@pytest.mark.parametrize("y_first", [False, True])
def test_ew_binary_ops_equal_the_cpu_kernel_with_nans(op, code, y_first):
    """Every pattern against a shuffled every pattern: NaN meets NaN (signalling and quiet,
    both orders), inf meets 0, overflow to inf, subnormals."""
    rng = np.random.default_rng(code + 2 * y_first)
    y = rng.permutation(ALL_F16)
    out = np.empty_like(ALL_F16)
    NATIVE.ew_f16(code, ALL_F16, out, y, 0, 0, y_first)
    a, b = to_f32(ALL_F16.view(np.float16)), to_f32(y.view(np.float16))
    assert same_bits(out, _numpy_step(op, [b, a] if y_first else [a, b]))


@pytest.mark.parametrize("c,wh", [(20, 81), (8, 7), (3, 50), (13, 1)])
@pytest.mark.parametrize("y_first", [False, True])
def test_ew_per_channel_operand_follows_the_chunked_layout(c, wh, y_first):
    """A (1, C, 1, 1) operand against a chunked tensor: element p*cs + j of chunk k is
    channel 8k + j (cs: 8, or what is left for the last chunk), as the layout tests'
    own index formula gives it."""
    rng = np.random.default_rng(c * wh)
    x = rng.choice(ALL_F16, c * wh)
    vec = to_f32(rng.choice(ALL_F16, c).view(np.float16))
    out = np.empty_like(x)
    NATIVE.ew_f16(1, x, out, vec, c, wh, y_first)
    hwc = (1, wh, c)
    ch = np.empty(c * wh, np.int64)
    ch[layout.offsets(hwc).reshape(-1)] = np.tile(np.arange(c), wh)
    a, b = to_f32(x.view(np.float16)), vec[ch]
    assert same_bits(out, _numpy_step("Mul", [b, a] if y_first else [a, b]))


def test_ew_refuses_bad_arguments():
    x = np.zeros(16, np.uint16)
    with pytest.raises(ValueError, match="unknown op"):
        NATIVE.ew_f16(7, x, x.copy())
    with pytest.raises(ValueError, match="one operand"):
        NATIVE.ew_f16(1, x, x.copy())
    with pytest.raises(ValueError, match="sizes"):
        NATIVE.ew_f16(0, x, np.zeros(8, np.uint16))
    with pytest.raises(ValueError, match="c \\* wh"):
        NATIVE.ew_f16(1, x, x.copy(), np.zeros(3, np.float32), 3, 4)
    with pytest.raises(TypeError):
        NATIVE.ew_f16(0, np.zeros(16, np.float32), x.copy())


def test_lookup16_is_numpys_take_of_the_binary16_bits():
    """lookup16 (Fp16Table's compiled gather) against numpy's take, for a binary16 table
    (the runtime's FP16-to-FP16 step) and a float32 one (the CPU op), in place too; sizes
    that do not fit and an output partly over the input are refused."""
    rng = np.random.default_rng(16)
    bits = rng.integers(0, 1 << 16, 70001).astype(np.uint16)
    bits[:4] = [0, 0x7C00, 0xFE00, 0xFFFF]
    for table in (rng.integers(0, 1 << 16, 1 << 16).astype(np.uint16),
                  rng.standard_normal(1 << 16).astype(np.float32)):
        out = np.empty(bits.size, table.dtype)
        NATIVE.lookup16(table, bits, out)
        assert out.tobytes() == np.take(table, bits).tobytes()
    table = rng.integers(0, 1 << 16, 1 << 16).astype(np.uint16)
    inplace = bits.copy()
    NATIVE.lookup16(table, inplace, inplace)
    assert np.array_equal(inplace, table[bits])
    for args in ((table[:100], bits, np.empty_like(bits)), (table, bits, bits[:-1].copy()),
                 (table, bits, np.empty(bits.size, np.float32)), (table, bits[:50], bits[10:60])):
        with pytest.raises(ValueError):
            NATIVE.lookup16(*args)


@pytest.mark.parametrize("act,slope", [(-1, 0.0), (0, 0.0), (2, 0.125), (4, 0.0), (6, 0.0)])
@pytest.mark.parametrize("m", [1, 4, 16, 40, 48, 72])  # (up to 48: a tile of every column)
@pytest.mark.parametrize("parts", [1, 2])
def test_gemm_with_its_epilogue_equals_gemm_then_epilogue(act, slope, m, parts):
    """The product's epilogue on each finished tile (for a narrow output, a tile's rows in
    one pass with the bias and slopes repeated) against the product, then the epilogue on
    the whole: the same bits, with and without an addend, in one part and in two (NaN
    payloads aside where nothing rounds, act -1: see same_values)."""
    rng = np.random.default_rng(m * 10 + act)
    n, k = 203, 27
    a = rng.standard_normal((n, k)).astype(np.float16).astype(np.float32)
    bp = arith.pack_b(rng.standard_normal((k, m)).astype(np.float16).astype(np.float32))
    b = special_mix(rng, (m,))
    p = rng.normal(size=m).astype(np.float32) if act == 4 else None
    for addend in (None, special_mix(rng, (n, m))):
        want = np.empty((n, m), np.float32)
        NATIVE.gemm(a, bp, want, True, 0, -1, 0, -1)
        NATIVE.epilogue(want, b, addend, act, slope, p)
        got = np.full((n, m), 7.0, np.float32)
        NATIVE.gemm(a, bp, got, True, 0, -1, 0, -1, b, addend, act, slope, p, parts)
        assert (same_bits if act >= 0 else same_values)(got, want)
