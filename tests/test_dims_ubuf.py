"""§7.3: the multi-run unified-buffer peak, against DMP's known answers and hand-worked
configurations."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from dvsdk.errors import InvalidArgument
from dvsdk.hw import dims
from dvsdk.hw.dims import ubuf_single_tile_usage

from .dims_refs import (
    FIRE_CMD,
    FIRE_RUNS,
    GOOGLENET_CMD,
    GOOGLENET_RUNS,
    blk,
    blocks,
    conv_run,
)

# --------------------------------------------------------------------------
# §7.3 multi-run UBUF peak
# --------------------------------------------------------------------------


def test_ubuf_squeezenet_fire_known_answer():
    assert ubuf_single_tile_usage(FIRE_CMD, FIRE_RUNS, 524288) == 150816
    # decomposition: input 56x56x16 (two blocks) + one output block of 56x56 (1x1 conv
    # tile, and the 3x3 conv with pad 1 keeps 56x56); the pool does not enter the tile
    assert 16 * blocks(56 * 56 * 8, 16) + 16 * blk(56 * 56 * 8) == 150816
    # fits the ZIA-C2 UBUF
    assert 150816 <= 524288
    # the pooling does not change the peak (only the conv tile is stored)
    no_pool = [dict(r, pool_enable=0, pool_size=0, pool_stride=0x0101) for r in FIRE_RUNS]
    assert ubuf_single_tile_usage(FIRE_CMD, no_pool, 524288) == 150816


def test_ubuf_squeezenet_fire_55_does_not_give_known_answer():
    # The 55x55 fire2/fire3 geometry of CaffeSqueezeNet gives a different number,
    # hand-computed: in = 16*roundup16(2*3026) = 97024, out = 16*3026 = 48416.
    cmd = dict(FIRE_CMD, w=55, h=55)
    assert 16 * blocks(55 * 55 * 8, 16) == 97024 and 16 * blk(55 * 55 * 8) == 48416
    assert ubuf_single_tile_usage(cmd, FIRE_RUNS, 524288) == 145440


def test_ubuf_googlenet_inception_3b_known_answer():
    assert ubuf_single_tile_usage(GOOGLENET_CMD, GOOGLENET_RUNS, 1048576) == 618272
    # ub_size only positions ping-pong buffers, which do not apply here (node_w = 4)
    assert ubuf_single_tile_usage(GOOGLENET_CMD, GOOGLENET_RUNS, 524288) == 618272
    # decomposition of the peak (run 2): input 28x28x256, 3x3_reduce output 28x28x128
    # in UBUF, then one output block of the 3x3 conv tile widened by the pool pads:
    # core 1+1+28+1+1 = 32 -> 30x30.
    in0 = 16 * blocks(28 * 28 * 8, 256)
    reduce_out = 16 * blocks(28 * 28 * 8, 128)
    assert (in0, reduce_out) == (402432, 201216)
    assert in0 + reduce_out + 16 * blk(30 * 30 * 8) == 618272
    # the pool pads are what makes the number: without them the peak is 616224
    no_pad = [dict(r, pool_pad=0) if r["pool_enable"] else r for r in GOOGLENET_RUNS[:5]]
    no_pad += GOOGLENET_RUNS[5:6] + [dict(GOOGLENET_RUNS[6], pool_pad=0)]
    assert ubuf_single_tile_usage(GOOGLENET_CMD, no_pad, 1048576) == (
        in0 + reduce_out + 16 * blk(28 * 28 * 8))  # fmt: skip


def test_ubuf_conv_pad_masks():
    # bits 7 and 23 of conv_pad (left/top) are ignored: 0x81 reads as a pad of 1
    runs = [FIRE_RUNS[0], dict(FIRE_RUNS[1], conv_pad=0x01810181)]
    assert ubuf_single_tile_usage(FIRE_CMD, runs, 524288) == 150816
    # right/bottom use all 8 bits: l=1, r=0x81, t=1, b=0 -> tile 184 x 55
    runs = [FIRE_RUNS[0], dict(FIRE_RUNS[1], conv_pad=0x00018101)]
    tile = (1 + 56 + 0x81 - 3 + 1) * (1 + 56 + 0 - 3 + 1)
    assert ubuf_single_tile_usage(FIRE_CMD, runs, 524288) == (
        16 * blocks(56 * 56 * 8, 16) + 16 * blk(tile * 8))  # fmt: skip


def test_ubuf_attribute_objects_and_runs_in_command():
    ns = SimpleNamespace(**FIRE_CMD, runs=[SimpleNamespace(**r) for r in FIRE_RUNS])
    assert ubuf_single_tile_usage(ns, None, 524288) == 150816
    assert ubuf_single_tile_usage(dict(GOOGLENET_CMD, run=GOOGLENET_RUNS), None, 0) == 618272


def test_ubuf_topo_zero():
    assert ubuf_single_tile_usage(dict(w=8, h=8, z=1, c=8, topo=0), [], 524288) == 0


def test_ubuf_single_run_and_chain():
    # topo 1, 1x1 conv 16x16x16 -> 32: node_w == 1, peak = in_size + one output block
    cmd = dict(w=16, h=16, z=1, c=16, topo=1)
    in_size = 16 * blocks(256 * 8, 16)
    assert in_size == 8448
    assert ubuf_single_tile_usage(cmd, [conv_run(32, 1)], 0) == 8448 + 16 * blk(256 * 8)
    # chain topo 0x2: run0 (-> UBUF, all 4 blocks of 32 channels), run1 1x1 -> 8 out
    run0_out = 16 * blocks(256 * 8, 32)  # 16 * roundup16(258 * 4) = 16640
    assert run0_out == 16640
    expect = max(8448 + run0_out, run0_out + 16 * blk(256 * 8))
    got = ubuf_single_tile_usage(dict(cmd, topo=0x2), [conv_run(32, 1), conv_run(8, 1)], 524288)
    assert got == expect == 25088


def test_ubuf_chain_uses_pooled_dims_of_ubuf_runs():
    # topo 0x4 on 16x16x16: run0 1x1 conv m=16 + max-pool 2x2/2 -> UBUF (8x8x16),
    # run1 1x1 conv m=128 -> UBUF (8x8x128), run2 1x1 conv m=8 -> ext.  A pure chain
    # (node_w 1): peak = input footprint + output slot; the stored tile of a conv run is
    # its pre-pool conv output, but the next run's input dims are the pooled ones.
    cmd = dict(w=16, h=16, z=1, c=16, topo=0x4)
    run0 = dict(conv_run(16, 1), pool_enable=1, pool_size=0x0202, pool_stride=0x0202)
    runs = [run0, conv_run(128, 1), conv_run(8, 1)]
    out0 = 16 * blocks(16 * 16 * 8, 16)  # all blocks of the 16x16 conv tile
    out1 = 16 * blocks(8 * 8 * 8, 128)  # 8x8 (pooled) input dims for run 1
    peaks = [
        16 * blocks(16 * 16 * 8, 16) + out0,
        out0 + out1,
        out1 + 16 * blk(8 * 8 * 8),
    ]
    assert ubuf_single_tile_usage(cmd, runs, 524288) == max(peaks) == 25344
    # the same with a 2x upsample (conv-less) first: run 1 then sees 32x32
    ups = dict(m=16, conv_enable=0, p=1, pool_enable=4, pool_stride=0x0101)
    peaks = [
        16 * blocks(16 * 16 * 8, 16) + 16 * blocks(32 * 32 * 8, 16),
        16 * blocks(32 * 32 * 8, 16) + 16 * blocks(32 * 32 * 8, 128),
        16 * blocks(32 * 32 * 8, 128) + 16 * blk(32 * 32 * 8),
    ]
    got = ubuf_single_tile_usage(cmd, [ups, conv_run(128, 1), conv_run(8, 1)], 524288)
    assert got == max(peaks)


def test_ubuf_in_place_last_branch():
    # topo 0x3 on 16x16x8: run0 1x1 conv m=8 -> ext; run1 conv-less 2x upsample
    # -> ext.  Run 1 is the last output branch without conv: in place (offset 0).
    cmd = dict(w=16, h=16, z=1, c=8, topo=0x3)
    conv = conv_run(8, 1)
    ups = dict(m=8, conv_enable=0, p=1, pz=1, pool_enable=4, pool_size=0x0202,
               pool_stride=0x0101)  # fmt: skip
    in_size = 16 * blocks(256 * 8, 8)
    assert in_size == 4352
    run0 = in_size + 16 * blk(256 * 8)  # 4352 + 4128
    run1 = 0 + 16 * blk(32 * 32 * 8)  # in place: 16416
    assert ubuf_single_tile_usage(cmd, [conv, ups], 524288) == max(run0, run1) == 16416
    # swapped: the upsample is not the last branch, so it sits after the input
    assert ubuf_single_tile_usage(cmd, [ups, conv], 524288) == in_size + 16416


def test_ubuf_avg_pool_rewritten_as_conv():
    # avg pool 3x3 stride 2 pad 1 on 16x16x16 (m = 16): runs as a conv with P = 3,
    # pads 1, stride 2 -> tile (1+16+1-3)/2 + 1 = 8 -> 8x8.
    cmd = dict(w=16, h=16, z=1, c=16, topo=1)
    run = dict(m=16, conv_enable=0, p=1, pz=1, pool_enable=2, pool_size=0x0303,
               pool_stride=0x0202, pool_pad=0x01010101)  # fmt: skip
    expect = 16 * blocks(256 * 8, 16) + 16 * blk(8 * 8 * 8)
    assert expect == 8448 + 1056
    assert ubuf_single_tile_usage(cmd, [run], 524288) == expect
    # the same numbers as a max pool would differ (pool tile 7x7 of the unpadded input)
    run_max = dict(run, pool_enable=1, pool_pad=0)
    assert ubuf_single_tile_usage(cmd, [run_max], 524288) == 8448 + 16 * blk(7 * 7 * 8)


def test_ubuf_pool_tile_unsigned_wrap():
    # conv-less, pool-less run whose pool_size (3) exceeds the 2-wide tile: the pool
    # tile width (2 - 3) / sx + 1 is computed in uint32, so it becomes huge.
    cmd = dict(w=2, h=1, z=1, c=8, topo=1)
    in_size = 16 * blocks(2 * 8, 8)
    assert in_size == 256

    def expect(sx):
        ptw = ((2 - 3) % 2**32) // sx + 1
        o16 = (ptw * 1) * 1 % 2**32  # pool tile x min(m, 8) with m = 1
        peak = (in_size + 16 * blk(o16)) % 2**32
        peak = peak - 2**32 if peak >= 2**31 else peak  # compared as a C int
        return max(0, peak)

    run = dict(m=1, conv_enable=0, p=1, pz=1, pool_enable=0, pool_size=0x0103)
    got7 = ubuf_single_tile_usage(cmd, [dict(run, pool_stride=0x0107)], 0)
    assert got7 == expect(7) > 10**9  # huge unsigned value, still a positive int
    # with sx = 3 the sum passes 2**31 and turns negative as an int: the max stays 0
    assert expect(3) == 0
    assert ubuf_single_tile_usage(cmd, [dict(run, pool_stride=0x0103)], 0) == 0
    # a signed (floor or trunc) computation would have given a tiny tile instead
    assert in_size + 16 * blk(((2 - 3) // 7 + 1) * 1) < 1000


def test_ubuf_uint16_pad_and_size_wrap():
    # 4-wide input, conv 1x1 with a 0xFF right pad and pool pads: nothing raises and
    # the result stays a multiple of 16 (all footprints are 16-byte units)
    cmd = dict(w=65535, h=4, z=1, c=8, topo=0x3)
    run = conv_run(8, 1, 0, pool=True, pool_pad=0xFFFFFFFF, conv_pad=0xFF00FF00)
    got = ubuf_single_tile_usage(cmd, [run, run], 524288)
    assert isinstance(got, int) and got % 16 == 0


@pytest.mark.parametrize("which", range(7))
def test_ubuf_zero_pool_stride_trap(which):
    runs = [dict(r) for r in GOOGLENET_RUNS]
    runs[which]["pool_stride"] = 0
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(GOOGLENET_CMD, runs, 1048576)
    assert e.value.field == "pool_stride"


@pytest.mark.parametrize("stride", [0x0000, 0x0100, 0x0001])
def test_ubuf_zero_pool_stride_trap_variants(stride):
    # a zero X or Y byte, in a run without pooling, and in an average-pool run
    runs = [dict(FIRE_RUNS[0], pool_enable=0, pool_stride=stride), FIRE_RUNS[1]]
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(FIRE_CMD, runs, 524288)
    assert e.value.field == "pool_stride"
    avg = dict(m=16, conv_enable=0, p=1, pool_enable=2, pool_size=0x0303, pool_stride=stride)
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(dict(FIRE_CMD, topo=1), [avg], 524288)
    assert e.value.field == "pool_stride"


def test_ubuf_bad_input():
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(FIRE_CMD, FIRE_RUNS[:1], 524288)  # topo 0x3 needs 2 runs
    assert e.value.field == "runs"
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(GOOGLENET_CMD, [dict(r, conv_stride=0) for r in GOOGLENET_RUNS],
                               1048576)  # fmt: skip
    assert e.value.field == "conv_stride"
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(dict(FIRE_CMD, topo=1 << 32), FIRE_RUNS, 524288)
    assert e.value.field == "topo"
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(dict(FIRE_CMD, c=-16), FIRE_RUNS, 524288)
    assert e.value.field == "c"
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(FIRE_CMD, [dict(FIRE_RUNS[0], m=1.5), FIRE_RUNS[1]], 524288)
    assert e.value.field == "m"
    with pytest.raises(InvalidArgument) as e:
        ubuf_single_tile_usage(FIRE_CMD, FIRE_RUNS, -1)
    assert e.value.field == "ub_size"


def _single_run_ref(W, H, C, m, kx, ky, pads, s):
    """topo 1, one conv run without pooling: in_size + one output block (§7.3 16)."""
    P = max(kx, ky) | 1
    pl, pr, pt, pb = pads
    core_w = pl + W + pr + (P - kx)  # P - px extra columns on the right
    core_h = pt + (P - ky) + H + pb  # P - py extra rows on the top
    tow = (core_w - P) // s[0] + 1
    toh = (core_h - P) // s[1] + 1
    return 16 * blocks(W * H * min(C, 8), C) + 16 * blk(tow * toh * min(m, 8))


@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 200), st.integers(1, 200), st.integers(1, 300), st.integers(1, 300),
    st.integers(1, 7), st.integers(0, 7), st.tuples(*[st.integers(0, 3)] * 4),
    st.tuples(st.integers(1, 4), st.integers(1, 4)),
)  # fmt: skip
def test_ubuf_single_conv_run_matches_formula(W, H, C, m, kx, ky_field, pads, s):
    ky = ky_field or kx
    P = max(kx, ky) | 1
    assume(W + pads[0] + pads[1] >= kx and H + pads[2] + pads[3] >= ky)
    assume(W + pads[0] + pads[1] + P - kx >= P and H + pads[2] + pads[3] + P - ky >= P)
    run = dict(m=m, conv_enable=1, p=kx | (ky_field << 8), pz=1,
               conv_pad=pads[0] | pads[1] << 8 | pads[2] << 16 | pads[3] << 24,
               conv_stride=s[0] | s[1] << 8, pool_stride=0x0101)  # fmt: skip
    cmd = dict(w=W, h=H, z=1, c=C, topo=1)
    assert ubuf_single_tile_usage(cmd, [run], 524288) == _single_run_ref(W, H, C, m, kx, ky,
                                                                         pads, s)  # fmt: skip


u32s = st.integers(0, 2**32 - 1)
run_strategy = st.fixed_dictionaries(
    {
        "m": st.integers(1, 300),
        "conv_enable": st.sampled_from([0, 1, 3, 5]),
        "p": st.integers(1, 7) | st.integers(0, 0xFFFF),
        "conv_pad": u32s,
        "conv_stride": st.integers(1, 3).map(lambda v: v * 0x0101),
        "pool_enable": st.sampled_from([0, 1, 2, 4]),
        "pool_size": st.integers(0, 0xFFFF),
        "pool_stride": st.integers(1, 255).map(lambda v: v * 0x0101),
        "pool_pad": u32s,
    }
)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 0xFF), st.lists(run_strategy, min_size=8, max_size=8),
       st.integers(0, 512), st.integers(0, 512), st.integers(0, 600))  # fmt: skip
def test_ubuf_random_commands_are_well_behaved(topo, runs, w, h, c):
    """Any field values with non-zero strides: an int, a multiple of 16, 0 <= x < 2**31."""
    got = ubuf_single_tile_usage(dict(w=w, h=h, z=1, c=c, topo=topo), runs, 524288)
    assert isinstance(got, int)
    assert 0 <= got < 2**31 and got % 16 == 0


def test_public_names():
    for name in dims.__all__:
        assert hasattr(dims, name)



# --------------------------------------------------------------------------
# runs walked by topo, and the whole tensors of a kept run
# --------------------------------------------------------------------------


def test_run_shapes_and_output_of_inception_3b():
    """Branch runs read the command input again after an output run; a kept run feeds the
    next; the outputs (pooled 3x3/2, pad 1: 14x14) are appended: 128+192+96+64 channels."""
    shapes = dims.run_shapes(GOOGLENET_CMD, GOOGLENET_RUNS)
    ins = [i for i, _ in shapes]
    assert ins == [(28, 28, 1, 256), (28, 28, 1, 256), (28, 28, 1, 128), (28, 28, 1, 256),
                   (28, 28, 1, 32), (28, 28, 1, 256), (28, 28, 1, 256)]
    assert dims.command_output_shape(GOOGLENET_CMD, GOOGLENET_RUNS) == (14, 14, 480)
    # kept runs: 3x3_reduce (256 in, 128 out), 5x5_reduce (256, 32), the pool (256, 256)
    assert dims.ubuf_kept_bytes(GOOGLENET_CMD, GOOGLENET_RUNS) == 28 * 28 * (256 + 256) * 2


def test_kept_bytes_of_a_chain_counts_what_the_peak_misses():
    """A stride-2 2x2 deconv kept in the UBUF: 120x120x8 in, 240x240x8 out = 1,152,000
    bytes, where §7.3's peak (the deconv taken for a strided conv) stays under 512 KiB."""
    deconv = conv_run(8, 2, 1, conv_enable=5, conv_stride=0x0202)  # FPGA pads k-1-0 = 1
    cmd = dict(w=120, h=120, z=1, c=8, topo=0x2)
    runs = [deconv, conv_run(8, 3, 1)]
    assert dims.run_shapes(cmd, runs)[1][0] == (240, 240, 1, 8)
    assert dims.ubuf_kept_bytes(cmd, runs) == (120 * 120 + 240 * 240) * 8 * 2
    assert ubuf_single_tile_usage(cmd, runs, 524288) < 524288 < 1_152_000
    # channels count in 8-channel blocks; a single run keeps nothing
    assert dims.ubuf_kept_bytes(dict(w=4, h=4, z=1, c=3, topo=0x2),
                                [conv_run(5, 1), conv_run(8, 1)]) == 2 * 4 * 4 * 8 * 2
    assert dims.ubuf_kept_bytes(dict(w=4, h=4, z=1, c=3, topo=0x1), [conv_run(5, 1)]) == 0
