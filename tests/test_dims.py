"""Tests for dvsdk.hw.dims against the known answers of dv700-interface.md §7 and
against formulas written out independently here (never against the module's own
output).

Reference formulas used below (restated from the fact sheet, not imported):

* C ``/`` truncates toward zero: ``int(Fraction(a, b))``.
* §4.2 conv: ``(pa + n + pb - k_eff) / s + 1``; deconv:
  ``pa + (n-1)·s + 1 + pb - k_eff + 1``; ``k_eff = (k-1)·d + 1``.
* §7.2/§7.3 one 8-channel block in 16-byte units: ``ceil(elems/8)`` bumped up to the
  next value ``≡ 2 (mod 16)``; all blocks: that times ``ceil(ch/8)`` rounded up to 16.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dvsdk.errors import InvalidArgument
from dvsdk.hw.dims import (
    cdiv,
    ceil8,
    command_tiles,
    conv_out_size,
    conv_tiles,
    deconv_out_size,
    divup,
    lrn_tiles,
    pool_out_size,
    pool_tiles,
    popcount,
    run_output_shape,
    run_weight_size,
    topo_num_runs,
    upsample_out_size,
)

from .dims_refs import (
    FIRE_RUNS,
    GOOGLENET_CMD,
    GOOGLENET_RUNS,
    LRN_CMD,
    LRN_RUN,
    c_div,
    conv_run,
    ref_out,
    ref_tile_util,
    ref_tiles,
    ref_weight_size,
    ref_weight_size_dil,
)

# --------------------------------------------------------------------------
# §7.1 helpers
# --------------------------------------------------------------------------


def test_helpers_known_values():
    assert topo_num_runs(0) == 0
    assert topo_num_runs(1) == 1
    assert topo_num_runs(0x3) == 2
    assert topo_num_runs(0x55) == 7
    assert topo_num_runs(0x80000000) == 32
    assert popcount(0x55) == 4 and popcount(0) == 0 and popcount(0xFFFFFFFF) == 32
    assert ceil8(0) == 0 and ceil8(1) == 1 and ceil8(8) == 1 and ceil8(9) == 2
    assert divup(7, 2) == 4 and divup(8, 2) == 4 and divup(0, 5) == 0
    assert cdiv(-2, 3) == 0 and -2 // 3 == -1  # the C/Python difference
    assert cdiv(-7, 2) == -3 and cdiv(7, -2) == -3 and cdiv(-7, -2) == 3


@given(st.integers(-(10**6), 10**6), st.integers(-1000, 1000).filter(bool))
def test_cdiv_truncates(a, b):
    assert cdiv(a, b) == c_div(a, b)
    assert divup(a, b) == c_div(a, b) + (1 if a - c_div(a, b) * b else 0)


@given(st.integers(0, 2**32 - 1))
def test_topo_helpers_property(topo):
    assert topo_num_runs(topo) == (0 if topo == 0 else math.floor(math.log2(topo)) + 1)
    assert popcount(topo) == sum((topo >> i) & 1 for i in range(32))


def test_helpers_bad_input():
    with pytest.raises(InvalidArgument) as e:
        topo_num_runs(1 << 32)
    assert e.value.field == "topo"
    with pytest.raises(InvalidArgument):
        topo_num_runs(-1)
    with pytest.raises(InvalidArgument):
        popcount(-1)
    with pytest.raises(InvalidArgument):
        ceil8(-8)
    with pytest.raises(InvalidArgument):
        cdiv(1, 0)


# --------------------------------------------------------------------------
# §4.2 / §4.3 output sizes
# --------------------------------------------------------------------------


def test_conv_out_size_examples():
    assert conv_out_size(224, 7, 3, 3, 2) == 112
    assert conv_out_size(55, 3, 1, 1, 1) == 55
    assert conv_out_size(28, 5, 2, 2, 1) == 28
    assert conv_out_size(64, 3, 1, 1, 2) == 32  # 65/2 + 1
    # dilated 3x3, dilation 2, pad 2: "same" (k_eff = 5)
    assert conv_out_size(80, 3, 2, 2, 1, dilation=2) == 80
    assert conv_out_size(80, 3, 1, 1, 1, dilation=0) == 80  # 0 means 1
    # deconv 4x4 stride 2, framework pad 1 -> FPGA pads k-1-pad = 2: 14 -> 28
    assert deconv_out_size(14, 4, 2, 2, 2) == 28
    assert conv_out_size(14, 4, 2, 2, 2, deconv=True) == 28
    assert deconv_out_size(7, 3, 1, 1, 2) == 13  # (7-1)*2 + 3 - 1 - 1


def test_conv_out_size_c_truncation():
    # (0 + 1 + 0 - 3) / 1 + 1 = -2 + 1 = -1
    assert conv_out_size(1, 3, 0, 0, 1) == -1
    # (1 - 3) / 2 + 1 = -1 + 1 = 0 (floor would give the same here)
    assert conv_out_size(1, 3, 0, 0, 2) == 0
    # (1 - 3) / 3 + 1: C truncates -2/3 to 0 -> 1; Python floor would give 0
    assert conv_out_size(1, 3, 0, 0, 3) == 1
    assert (1 - 3) // 3 + 1 == 0
    assert pool_out_size(1, 3, 0, 0, 3) == 1
    assert pool_out_size(0, 2, 0, 0, 5) == 1  # -2/5 -> 0


def test_pool_and_upsample_examples():
    assert pool_out_size(56, 3, 0, 0, 2) == 27
    assert pool_out_size(28, 3, 1, 1, 2) == 14
    assert pool_out_size(28, 3, 1, 1, 1) == 28
    assert pool_out_size(7, 7, 0, 0, 1) == 1
    # ceil mode via a bigger right pad (§4.3): w=55, s=2, k=3 -> pad_r = 2
    assert pool_out_size(55, 3, 0, 2, 2) == 28
    assert upsample_out_size(0) == 0 and upsample_out_size(37) == 74


@given(
    st.integers(0, 4096), st.integers(1, 7), st.integers(0, 255), st.integers(0, 255),
    st.integers(1, 255), st.integers(0, 30), st.booleans(),
)  # fmt: skip
def test_conv_out_size_matches_formula(n, k, pa, pb, s, d, deconv):
    assert conv_out_size(n, k, pa, pb, s, d, deconv) == ref_out(n, k, pa, pb, s, d, deconv)


@given(st.integers(0, 4096), st.integers(1, 7), st.integers(0, 255), st.integers(0, 255),
       st.integers(1, 255))  # fmt: skip
def test_pool_out_size_matches_formula(n, k, pa, pb, s):
    assert pool_out_size(n, k, pa, pb, s) == c_div(pa + n + pb - k, s) + 1


@pytest.mark.parametrize(
    "args, field",
    [
        ((-1, 3, 0, 0, 1), "in_size"),
        ((10, 0, 0, 0, 1), "k"),
        ((10, 8, 0, 0, 1), "k"),
        ((10, 3, -1, 0, 1), "pad_a"),
        ((10, 3, 0, -1, 1), "pad_b"),
        ((10, 3, 0, 0, 0), "stride"),
        ((10.0, 3, 0, 0, 1), "in_size"),
        ((True, 3, 0, 0, 1), "in_size"),
    ],
)
def test_out_size_bad_input(args, field):
    with pytest.raises(InvalidArgument) as e:
        conv_out_size(*args)
    assert e.value.field == field
    with pytest.raises(InvalidArgument) as e:
        pool_out_size(*args)
    assert e.value.field == field


def test_out_size_bad_dilation_and_upsample():
    with pytest.raises(InvalidArgument) as e:
        conv_out_size(10, 3, 1, 1, 1, dilation=-1)
    assert e.value.field == "dilation"
    with pytest.raises(InvalidArgument):
        upsample_out_size(-1)


# --------------------------------------------------------------------------
# §7.5 run output shape and weight size
# --------------------------------------------------------------------------


def test_run_output_shape_fire_and_googlenet():
    for run in FIRE_RUNS:
        shape, size = run_output_shape(run, (56, 56, 1, 16))
        assert shape == (27, 27, 1, 64)  # (56 - 3)/2 + 1
        assert size == 27 * 27 * 64 * 2
    expect = {0: (14, 14, 1, 128), 1: (28, 28, 1, 128), 2: (14, 14, 1, 192),
              3: (28, 28, 1, 32), 4: (14, 14, 1, 96), 5: (28, 28, 1, 256),
              6: (14, 14, 1, 64)}  # fmt: skip
    ins = {0: 256, 1: 256, 2: 128, 3: 256, 4: 32, 5: 256, 6: 256}
    total = 0
    for i, run in enumerate(GOOGLENET_RUNS):
        shape, size = run_output_shape(run, (28, 28, 1, ins[i]))
        assert shape == expect[i]
        assert size == math.prod(shape) * 2
        if GOOGLENET_CMD["topo"] >> i & 1:
            total += size
    # concat of the four branches: 14x14x(128+192+96+64)
    assert total == 14 * 14 * 480 * 2


def test_run_output_shape_variants():
    # non-square kernel 3x1 (p = 0x0103), pads l1 r1, stride 2x1
    run = dict(conv_enable=1, m=8, p=0x0103, pz=1, conv_pad=0x00000101, conv_stride=0x0102)
    assert run_output_shape(run, (10, 6, 1, 4))[0] == (ref_out(10, 3, 1, 1, 2), 6, 1, 8)
    # dilated 3x3, dilation 2x3 via conv_dilation 0x0302
    run = dict(conv_enable=1, m=16, p=3, pz=1, conv_pad=0x02020202, conv_stride=0x0101,
               conv_dilation=0x0302)  # fmt: skip
    assert run_output_shape(run, (20, 20, 1, 8))[0] == (
        ref_out(20, 3, 2, 2, 1, 2), ref_out(20, 3, 2, 2, 1, 3), 1, 16)  # fmt: skip
    # deconv (conv_enable 5), 3x3 stride 2, FPGA pads 1
    run = dict(conv_enable=5, m=4, p=3, pz=1, conv_pad=0x01010101, conv_stride=0x0202)
    assert run_output_shape(run, (7, 5, 1, 4))[0] == (13, 9, 1, 4)
    # 3-D: z - (pz & 0x7F) + 1, the high bit of pz ignored
    run = dict(conv_enable=1, m=8, p=1, pz=0x83, conv_stride=0x0101)
    assert run_output_shape(run, (4, 4, 5, 8)) == ((4, 4, 3, 8), 4 * 4 * 3 * 8 * 2)
    # conv_pad left/top bit 7 is ignored (mask 0x7F)
    run = dict(conv_enable=1, m=8, p=3, pz=1, conv_pad=0x00800080, conv_stride=0x0101)
    assert run_output_shape(run, (8, 8, 1, 8))[0] == (6, 6, 1, 8)
    # upsample: no pool size/stride checks, 2x
    run = dict(conv_enable=0, pool_enable=4, pool_size=0x0202, pool_stride=0x0101)
    assert run_output_shape(run, (5, 3, 1, 24)) == ((10, 6, 1, 24), 10 * 6 * 24 * 2)
    # average pool 7x7 global
    run = dict(conv_enable=0, pool_enable=2, pool_size=0x0707, pool_stride=0x0101)
    assert run_output_shape(run, (7, 7, 1, 1024))[0] == (1, 1, 1, 1024)
    # pooling with C truncation: (0 + 1 + 0 - 3) / 3 + 1 = 1 (floor would say 0)
    run = dict(conv_enable=0, pool_enable=1, pool_size=0x0303, pool_stride=0x0303)
    assert run_output_shape(run, (1, 1, 1, 8))[0] == (1, 1, 1, 8)
    # no conv, no pool: passthrough
    assert run_output_shape({}, (3, 4, 1, 5)) == ((3, 4, 1, 5), 120)
    # attribute object accepted
    obj = SimpleNamespace(**FIRE_RUNS[1])
    assert run_output_shape(obj, (56, 56, 1, 16))[0] == (27, 27, 1, 64)
    # raw C ints: a 3x3 kernel on a 1x1 input without padding
    run = dict(conv_enable=1, m=8, p=3, pz=1, conv_stride=0x0101)
    assert run_output_shape(run, (1, 1, 1, 8))[0] == (-1, -1, 1, 8)


def test_run_output_shape_size_wraps_uint32():
    run = dict(conv_enable=0, pool_enable=4)
    (w, h, z, c), size = run_output_shape(run, (65535, 65535, 1, 8))
    assert (w, h) == (131070, 131070)
    assert size == (131070 * 131070 * 8 * 2) % 2**32


@pytest.mark.parametrize(
    "run, in_shape, field",
    [
        (dict(conv_enable=1, p=0, conv_stride=0x0101), (8, 8, 1, 8), "p"),
        (dict(conv_enable=1, p=8, conv_stride=0x0101), (8, 8, 1, 8), "p"),
        (dict(conv_enable=1, p=0x0803, conv_stride=0x0101), (8, 8, 1, 8), "p"),
        (dict(conv_enable=1, p=3, conv_stride=0x0100), (8, 8, 1, 8), "conv_stride"),
        (dict(pool_enable=1, pool_size=0x0303, pool_stride=0), (8, 8, 1, 8), "pool_stride"),
        (dict(m=-1, conv_enable=1, p=1, conv_stride=0x0101), (8, 8, 1, 8), "m"),
        (dict(m=0x10000, conv_enable=1, p=1, conv_stride=0x0101), (8, 8, 1, 8), "m"),
        ({}, (8, -8, 1, 8), "h"),
        ({}, (8, 8, 1), "in_shape"),
        ({}, 8, "in_shape"),
    ],
)
def test_run_output_shape_bad_input(run, in_shape, field):
    run = dict(run)
    run.setdefault("m", 8)
    with pytest.raises(InvalidArgument) as e:
        run_output_shape(run, in_shape)
    assert e.value.field == field


def test_run_output_shape_conv_pad_too_wide():
    with pytest.raises(InvalidArgument) as e:
        run_output_shape(dict(conv_enable=1, m=8, p=1, conv_stride=0x0101, conv_pad=1 << 32),
                         (8, 8, 1, 8))  # fmt: skip
    assert e.value.field == "conv_pad"


@pytest.mark.parametrize(
    "c, m, kx, ky, q, prelu, expect",
    [  # §8 golden sizes (test_weights.cpp)
        (256, 512, 1, 1, True, False, 148992),
        (256, 512, 1, 1, False, False, 295936),
        (256, 512, 1, 1, True, True, 150016),
        (256, 512, 1, 1, False, True, 296960),
        (128, 256, 3, 3, True, False, 295936),
        (128, 256, 3, 3, False, False, 590336),
        (64, 128, 5, 5, True, False, 295680),
        (64, 128, 7, 7, False, False, 1179904),
        (70, 130, 3, 3, False, True, 169024),
        (260, 510, 1, 1, True, False, 185136),
    ],
)
def test_run_weight_size_known(c, m, kx, ky, q, prelu, expect):
    run = dict(conv_enable=1, m=m, p=kx | (ky << 8), pz=1, conv_stride=0x0101,
               weight_fmt=3 if q else 1, actfunc=4 if prelu else 2)  # fmt: skip
    assert ref_weight_size(c, m, kx, ky, q, False, prelu) == expect
    assert run_weight_size(run, c) == expect


def test_run_weight_size_dilated_and_depthwise():
    # §7.4 example: (c=64, m=16, 3x3) dilated: FP16 21024, Q8 11168
    for q, expect in ((False, 21024), (True, 11168)):
        run = dict(conv_enable=1, m=16, p=3, pz=1, conv_stride=0x0101, conv_dilation=0x0202,
                   weight_fmt=3 if q else 1)  # fmt: skip
        assert ref_weight_size_dil(64, 16, 3, 3, q) == expect
        assert run_weight_size(run, 64) == expect
    # dilation on one axis only still selects the dilated packer
    run = dict(conv_enable=1, m=16, p=3, pz=1, conv_stride=0x0101, conv_dilation=0x0201)
    assert run_weight_size(run, 64) == ref_weight_size_dil(64, 16, 3, 3, False)
    # depthwise: c treated as 1
    run = dict(conv_enable=3, m=32, p=3, pz=1, conv_stride=0x0101, weight_fmt=1)
    assert run_weight_size(run, 32) == ref_weight_size(32, 32, 3, 3, False, True, False)
    assert run_weight_size(run, 32) == 144 * 32 + 16 * 4
    # no conv: 0 (pool, LRN, eltwise runs)
    assert run_weight_size(dict(pool_enable=2, pool_size=0x0303), 64) == 0
    assert run_weight_size(LRN_RUN, 192) == 0


@settings(max_examples=60)
@given(st.integers(1, 300), st.integers(1, 300), st.integers(1, 7), st.integers(0, 7),
       st.booleans(), st.booleans(), st.booleans())  # fmt: skip
def test_run_weight_size_matches_formula(c, m, kx, ky_field, q, dw, prelu):
    ky = ky_field or kx
    assume(not (q and prelu))  # rejected by §6.1 m; still computable, but keep it legal
    run = dict(conv_enable=3 if dw else 1, m=m, p=kx | (ky_field << 8), pz=1,
               conv_stride=0x0101, weight_fmt=3 if q else 1, actfunc=4 if prelu else 0)  # fmt: skip
    assert run_weight_size(run, c) == ref_weight_size(c, m, kx, ky, q, dw, prelu)


def test_run_weight_size_bad_input():
    with pytest.raises(InvalidArgument):
        run_weight_size(dict(conv_enable=1, m=8, p=9, conv_stride=0x0101), 8)
    with pytest.raises(InvalidArgument):
        run_weight_size(dict(conv_enable=1, m=8, p=3, conv_stride=0x0101), -1)


# --------------------------------------------------------------------------
# §7.2 tile counts
# --------------------------------------------------------------------------

# (w, h, c, m, ub_size, tiles, in_bytes, out_bytes): 3x3 pad 1 stride 1
TILE_TABLE = [
    (256, 256, 256, 256, 524288, 256, 394240, 12288),
    (256, 256, 256, 256, 655360, 128, 525312, 16384),
    (256, 256, 256, 256, 1048576, 52, 918528, 28672),
    (128, 64, 64, 32, 524288, 3, 368896, 46080),
    (128, 64, 64, 32, 655360, 2, 540928, 67584),
    (56, 56, 64, 64, 524288, 1, 416000, 51968),
    (56, 56, 64, 64, 655360, 1, 416000, 51968),
    (56, 56, 64, 64, 1048576, 1, 416000, 51968),
    (56, 56, 64, 64, 1 << 30, 1, 416000, 51968),
]


@pytest.mark.parametrize("w, h, c, m, ub, tiles, inb, outb", TILE_TABLE)
def test_conv_tiles_known_answers(w, h, c, m, ub, tiles, inb, outb):
    assert conv_tiles(w, h, c, m, 3, 3, (1, 1, 1, 1), (1, 1), (1, 1), ub) == (tiles, inb, outb)
    assert ref_tiles(w, h, c, m, 3, 3, (1, 1, 1, 1), ub=ub) == tiles
    # the same through the raw command fields (§7.2 get_conv_tiles_v0)
    cmd = dict(w=w, h=h, z=1, c=c, topo=1)
    run = dict(m=m, conv_enable=1, p=0x0303, pz=1, conv_pad=0x01010101, conv_stride=0x0101,
               pool_stride=0x0101)  # fmt: skip
    assert command_tiles(cmd, [run], ub) == tiles


def test_conv_tiles_other_known_answers():
    # 224x224x3 -> 64 with 7x7: 1 tile, in 309504, out 0 (no output buffer, c <= 8)
    assert conv_tiles(224, 224, 3, 64, 7, 7, (3, 3, 3, 3), (2, 2)) == (1, 309504, 0)
    assert conv_tiles(224, 224, 3, 64, 7, 7) == (1, 309504, 0)
    # 1x1x16384 -> 512 with 1x1: 1 tile, in 65536, out 16
    assert conv_tiles(1, 1, 16384, 512, 1, 1) == (1, 65536, 16)
    # LRN 56x56x192 with 640 KB: 2 tiles
    assert lrn_tiles(56, 56, 192, 655360)[0] == 2
    assert command_tiles(LRN_CMD, [LRN_RUN], 655360) == 2


def test_conv_tiles_hand_computed():
    # c <= 8 and m <= 8: no UBUF at all
    assert conv_tiles(4096, 4096, 8, 8, 3, 3, ub_size=0) == (1, 0, 0)
    # dilated 3x3 (dil 2, pads 2) on 16x16x16 -> 16: k_eff 5, tile width 16 + 4 = 20;
    # out 20*16*8 = 2560 elements; in: ceil(20*16*8/8) = 320 -> 322 (2 mod 16), x2 blocks
    # = 644 -> 656, x8 = 5248 elements.
    got = conv_tiles(16, 16, 16, 16, 3, 3, (2, 2, 2, 2), (1, 1), (2, 2), 524288)
    assert got == (1, 2 * 5248, 2 * 2560)
    # ub_size below 1 KiB counts as 0 (u_kb = ub_size >> 10)
    assert conv_tiles(56, 56, 64, 64, 3, 3, (1, 1, 1, 1), ub_size=1023)[0] == 0
    # w == 0 never fits
    assert conv_tiles(0, 8, 16, 16, 3, 3)[0] == 0
    # even / non-square kernels use the odd square window max(kx, ky) | 1
    assert conv_tiles(56, 56, 64, 64, 2, 3, (1, 1, 1, 1)) == conv_tiles(
        56, 56, 64, 64, 3, 3, (1, 1, 1, 1))  # fmt: skip


def test_conv_tiles_no_output_buffer_rule():
    # c <= 8 (and a kernel <= 7) means no output buffer: 224x224x5 -> 64 with 7x7.
    # tile width 224 + 6 = 230; ceil(230*224*5/8) = 32200 -> 32210 (2 mod 16)
    # -> 32224 (x16) -> 257792 elements <= 262144: one tile, out 0.
    assert conv_tiles(224, 224, 5, 64, 7, 7) == (1, 2 * 257792, 0)
    # c = 9 needs the output buffer too: 2 blocks, (7x7 conv out 218 rows) -> more tiles
    t, inb, outb = conv_tiles(224, 224, 9, 64, 7, 7)
    assert t > 1 and outb > 0
    ok, ts, os_, no_ob = ref_tile_util(224, 224, 9, 64, 7, 7, (0,) * 4, (1, 1), (1, 1), t)
    assert (inb, outb) == (2 * ts, 2 * os_) and not no_ob


def test_conv_tiles_ub_size_is_bytes_rounded_to_kib():
    a = conv_tiles(256, 256, 256, 256, 3, 3, (1, 1, 1, 1), ub_size=524288)
    b = conv_tiles(256, 256, 256, 256, 3, 3, (1, 1, 1, 1), ub_size=524288 + 1023)
    assert a == b


def test_pool_tiles():
    assert pool_tiles(56, 56, 64) == (1, 0, 0)
    assert pool_tiles(0, 56, 64) == (0, 0, 0)
    # 65535 x 65535 x 8: the first t with total // t <= 2**26
    total = 65535 * 65535 * 8
    expect = next(t for t in range(1, 65536) if total // t <= 2**26)
    assert pool_tiles(65535, 65535, 8) == (expect, 0, 0)
    assert expect > 1
    # boundary: 8192*8192*8 = 2**29, and 2**29 // 8 == 2**26 exactly -> 8 tiles ("<=")
    assert pool_tiles(8192, 8192, 8) == (8, 0, 0)
    assert pool_tiles(8192, 8192, 64) == (8, 0, 0)  # min(c, 8)


def test_command_tiles_dispatch():
    cmd = dict(w=256, h=256, z=1, c=256, topo=1)
    big = conv_run(256, 3, 1)
    assert command_tiles(cmd, [big], 524288) == 256
    # more than one run -> 1
    assert command_tiles(dict(cmd, topo=0x3), [big, big], 524288) == 1
    assert command_tiles(dict(cmd, topo=0x2), [big, big], 524288) == 1
    # depthwise is not a 2-D conv -> 1
    assert command_tiles(cmd, [dict(big, conv_enable=3)], 524288) == 1
    # conv off: pool tiles if pooling else 1
    assert command_tiles(cmd, [dict(big, conv_enable=0, pool_enable=1)], 524288) == 1
    assert command_tiles(cmd, [dict(big, conv_enable=0)], 524288) == 1
    # runs may also come from the command itself, or attribute objects
    assert command_tiles(dict(cmd, runs=[big]), None, 524288) == 256
    ns = SimpleNamespace(**cmd, run=[SimpleNamespace(**big)])
    assert command_tiles(ns, None, 524288) == 256
    # the 0x80 bit of the left/top pad byte is ignored (7-bit mask)
    assert command_tiles(cmd, [dict(big, conv_pad=0x01810181)], 524288) == 256
    # dilated conv (dilation field 0x0202): goes through the dilated tile path
    run = conv_run(16, 3, 2, conv_dilation=0x0202)
    assert command_tiles(dict(cmd, w=16, h=16, c=16), [run], 524288) == 1


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(w=-1), "w"),
        (dict(w=65536), "w"),
        (dict(c=-8), "c"),
        (dict(kx=0), "kx"),
        (dict(ky=8), "ky"),
        (dict(strides=(0, 1)), "stride_x"),
        (dict(strides=(1, 0)), "stride_y"),
        (dict(strides=(1,)), "strides"),
        (dict(pads=(1, 1, 1)), "pads"),
        (dict(pads=(1, 1, -1, 1)), "pad_t"),
        (dict(dilation=(-1, 1)), "dilation_x"),
        (dict(ub_size=-1), "ub_size"),
        (dict(ub_size=2**31), "ub_size"),
    ],
)
def test_conv_tiles_bad_input(kwargs, field):
    args = dict(w=56, h=56, c=64, m=64, kx=3, ky=3)
    args.update(kwargs)
    with pytest.raises(InvalidArgument) as e:
        conv_tiles(**args)
    assert e.value.field == field


def test_command_tiles_bad_input():
    cmd = dict(w=56, h=56, z=1, c=64, topo=1)
    with pytest.raises(InvalidArgument) as e:
        command_tiles(cmd, [conv_run(64, 3, 1, conv_stride=0)], 524288)
    assert e.value.field == "conv_stride"
    with pytest.raises(InvalidArgument) as e:
        command_tiles(cmd, [conv_run(64, 9, 1)], 524288)
    assert e.value.field == "p"
    with pytest.raises(InvalidArgument) as e:
        command_tiles(cmd, [], 524288)
    assert e.value.field == "runs"
    with pytest.raises(InvalidArgument) as e:
        command_tiles(cmd, None, 524288)
    assert e.value.field == "runs"
    with pytest.raises(InvalidArgument) as e:
        command_tiles(dict(cmd, w=-3), [conv_run(64, 3, 1)], 524288)
    assert e.value.field == "w"
    with pytest.raises(InvalidArgument):
        lrn_tiles(56, 56, 192, -1)
    with pytest.raises(InvalidArgument):
        pool_tiles(-1, 1, 1)


small_or_big = st.integers(1, 17) | st.integers(1, 300)
tile_case = st.tuples(
    st.integers(1, 300), st.integers(1, 300), small_or_big, small_or_big,
    st.integers(1, 7), st.integers(1, 7), st.tuples(*[st.integers(0, 3)] * 4),
    st.tuples(st.integers(1, 3), st.integers(1, 3)),
    st.sampled_from([(1, 1), (0, 0), (2, 2), (1, 3), (4, 1)]),
)  # fmt: skip


@settings(max_examples=150, deadline=None)
@given(tile_case, st.integers(0, 2**21), st.integers(0, 2**21))
def test_tiles_monotone_in_ub_size(case, ub1, ub2):
    w, h, c, m, kx, ky, pads, strides, dil = case
    ub1, ub2 = sorted((ub1, ub2))
    t1, in1, out1 = conv_tiles(w, h, c, m, kx, ky, pads, strides, dil, ub1)
    t2, in2, out2 = conv_tiles(w, h, c, m, kx, ky, pads, strides, dil, ub2)
    if t1 > 0:
        assert 0 < t2 <= t1
    for t, inb, outb, ub in ((t1, in1, out1, ub1), (t2, in2, out2, ub2)):
        assert 0 <= t <= w
        if t > 0:
            assert inb + outb <= (ub >> 10) << 10 <= ub


@settings(max_examples=150, deadline=None)
@given(tile_case, st.integers(0, 2**21))
def test_tiles_match_independent_formula(case, ub):
    w, h, c, m, kx, ky, pads, strides, dil = case
    t, inb, outb = conv_tiles(w, h, c, m, kx, ky, pads, strides, dil, ub)
    assert t == ref_tiles(w, h, c, m, kx, ky, pads, strides, dil, ub)
    if t > 0 and (inb or outb):
        ok, ts, os_, no_ob = ref_tile_util(w, h, c, m, kx, ky, pads, strides, dil, t)
        assert ok and (inb, outb) == (2 * ts, 0 if no_ob else 2 * os_)


