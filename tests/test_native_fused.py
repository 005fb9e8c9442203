"""The compiled conversions, layout moves and fused epilogues against numpy, bit for bit.

References: numpy's own float16 casts (every binary16 pattern, a sweep of float32 ones),
``hw.layout``'s numpy paths (themselves tested against ``layout.offsets`` in
test_layout), and the simulator's stage-by-stage numpy ops (``ops._add_per_channel``,
the element-wise add, ``ops.activation``, ``hw.fp16.round_f16``) for the fused epilogue.
"""

import numpy as np
import pytest

from dvsdk import native
from dvsdk.hw import layout
from dvsdk.hw.fp16 import f16_to_f32, f32_to_f16, round_f16, to_f16
from dvsdk.sim import ops

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
    assert same_bits(f16_to_f32(ALL_HALVES), ALL_HALVES.astype(np.float32))


def test_float32_to_binary16_rounds_as_numpy_on_a_sweep_and_specials():
    u = np.arange(0, 1 << 32, 4093, dtype=np.uint64).astype(np.uint32)  # 1 M patterns
    around = ALL_HALVES.astype(np.float32).view(np.uint32).astype(np.int64)
    steps = np.array([-0x1001, -0x1000, -0xFFF, -1, 1, 0xFFF, 0x1000, 0x1001])
    u = np.concatenate([u, ((around[:, None] + steps) % (1 << 32)).astype(np.uint32)
                        .reshape(-1)])
    x = u.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        ref = x.astype(np.float16)
    assert same_bits(to_f16(x), ref)                         # signalling NaNs included
    halves = ALL_HALVES.astype(np.float32)
    assert same_bits(f32_to_f16(halves), ALL_HALVES)


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
@pytest.mark.parametrize("m", [3, 16, 4100])
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
@pytest.mark.parametrize("c", [5, 16, 24, 40, 71])
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
