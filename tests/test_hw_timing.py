"""Cycle model (dvsdk.hw.timing, reference §11 and §10.10)."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dvsdk.driver.submit import counter_beats
from dvsdk.errors import InvalidArgument
from dvsdk.hw import timing as T

P = T.DEFAULT_PARAMS


def run(out_w=56, out_h=56, m=64, c=64, kx=3, ky=3, kind="conv", tiles=1, in_bytes=0,
        out_bytes=0, weight_bytes=0, params=P):
    return T.conv_run_cycles(out_w, out_h, m, c, kx, ky, kind, tiles, in_bytes, out_bytes,
                             weight_bytes, params)


def test_defaults_are_zia_c2():
    assert (P.clock_mhz, P.mac_num, P.ub_size, P.bus_bytes_per_cycle) == (300, 576, 524288, 16)
    assert P.lanes == 8
    with pytest.raises(dataclasses.FrozenInstanceError):
        P.mac_num = 1152  # type: ignore[misc]


def test_3x3_is_exactly_mac_bound():
    r = run()
    assert r.compute_cycles == 56 * 56 * 8 * 8
    assert r.macs == 56 * 56 * 64 * 64 * 9
    assert r.compute_cycles == T.mac_bound_cycles(r.macs)


def test_1x1_uses_64_of_72_slots():
    r = run(kx=1, ky=1)
    assert r.compute_cycles == 56 * 56 * 8 * 1
    assert r.macs / (r.compute_cycles * 576) == pytest.approx(64 / 72)


@pytest.mark.parametrize("k,blocks,util", [(1, 1, 64 / 72), (3, 8, 1.0), (5, 32, 50 / 72),
                                           (7, 64, 49 / 72)])
def test_block_counts_and_utilization(k, blocks, util):
    assert T.blocks_per_output_channel(64, k, k) == blocks
    r = run(kx=k, ky=k)
    assert r.macs / (r.compute_cycles * 576) == pytest.approx(util)


def test_even_and_non_square_kernels_use_odd_window():
    assert T.blocks_per_output_channel(64, 2, 2) == 8  # P = 3
    assert T.blocks_per_output_channel(9, 4, 1) == 5  # P = 5: ceil(9/2)
    assert T.blocks_per_output_channel(3, 6, 7) == 3  # P = 7
    r = run(kx=2, ky=2)
    assert r.macs / (r.compute_cycles * 576) == pytest.approx(32 / 72)
    with pytest.raises(InvalidArgument):
        T.blocks_per_output_channel(8, 9, 9)


def test_depthwise_dilated_deconv():
    dw = run(m=32, c=32, kind="depthwise")
    assert dw.compute_cycles == 56 * 56 * 4 * 1
    assert dw.macs == 56 * 56 * 32 * 9
    dil = run(kind="dilated")
    assert dil.compute_cycles == 56 * 56 * 8 * 9 * 1  # 9 passes of 1x1, 64 ch = 1 block
    assert dil.macs == run().macs
    de = run(kind="deconv")
    assert de.compute_cycles == run().compute_cycles


def test_non_mac_kinds():
    assert run(kind="pool", kx=3, ky=3).compute_cycles == 56 * 56 * 8
    assert run(kind="pool", kx=7, ky=7).compute_cycles == 56 * 56 * 8 * 6
    assert run(kind="upsample").compute_cycles == 56 * 56 * 8
    assert run(kind="eltwise", kx=1, ky=1).compute_cycles == 56 * 56 * 8
    assert run(kind="lrn", kx=1, ky=1).compute_cycles == 56 * 56 * 8 * 2
    assert run(kind="pool").macs == 0
    with pytest.raises(InvalidArgument):
        run(kind="fc")


def test_more_macs_scale_output_groups():
    p2 = T.TimingParams(mac_num=1152)
    assert p2.lanes == 16
    assert run(params=p2).compute_cycles == 56 * 56 * 4 * 8
    assert run(m=65, params=p2).compute_cycles == 56 * 56 * 5 * 8
    with pytest.raises(InvalidArgument):
        T.TimingParams(mac_num=500)
    with pytest.raises(InvalidArgument):
        T.TimingParams(clock_mhz=0)


def test_dma_overlap_and_overheads():
    r = run(in_bytes=416000, out_bytes=401408, weight_bytes=73856, tiles=1)
    dma = math.ceil(416000 / 16) + math.ceil(73856 / 16) + math.ceil(401408 / 16)
    assert r.dma_cycles == dma
    assert r.overhead_cycles == P.run_overhead + P.tile_overhead
    assert r.total_cycles == max(r.compute_cycles, dma) + r.overhead_cycles
    assert r.bound == "compute"
    # a 1x1 conv with a big input is bandwidth bound
    r1 = run(kx=1, ky=1, in_bytes=10_000_000)
    assert r1.bound == "dma" and r1.total_cycles == r1.dma_cycles + r1.overhead_cycles
    r4 = run(tiles=4)
    assert r4.overhead_cycles == P.run_overhead + 4 * P.tile_overhead
    assert T.command_cycles([r, r4]) == P.command_overhead + r.total_cycles + r4.total_cycles


def test_bounds_helpers():
    assert T.mac_bound_cycles(0) == 0
    assert T.mac_bound_cycles(577) == 2
    assert T.bandwidth_bound_cycles(17) == 2
    assert T.bandwidth_bound_cycles(32, T.TimingParams(bus_bytes_per_cycle=8)) == 4
    with pytest.raises(InvalidArgument):
        T.bandwidth_bound_cycles(-1)


def test_time_is_monotonic_in_clock():
    cyc = run().total_cycles
    times = [T.cycles_to_us(cyc, T.TimingParams(clock_mhz=f)) for f in (50, 100, 300, 400)]
    assert times == sorted(times, reverse=True)
    assert T.cycles_to_us(300, P) == pytest.approx(1.0)


@settings(max_examples=100, deadline=None)
@given(w=st.integers(1, 64), h=st.integers(1, 64), m=st.integers(1, 300), c=st.integers(1, 300),
       k=st.integers(1, 7), kind=st.sampled_from(["conv", "deconv", "dilated"]),
       lanes=st.integers(1, 4))
def test_never_faster_than_mac_bound(w, h, m, c, k, kind, lanes):
    params = T.TimingParams(mac_num=72 * 8 * lanes)
    r = run(out_w=w, out_h=h, m=m, c=c, kx=k, ky=k, kind=kind, params=params)
    assert r.compute_cycles >= T.mac_bound_cycles(r.macs, params)
    bigger = run(out_w=w, out_h=h, m=m + 8 * lanes, c=c, kx=k, ky=k, kind=kind, params=params)
    assert bigger.compute_cycles > r.compute_cycles
    doubled = T.TimingParams(mac_num=params.mac_num * 2)
    assert run(out_w=w, out_h=h, m=m, c=c, kx=k, ky=k, kind=kind,
               params=doubled).compute_cycles <= r.compute_cycles


def test_conv_run_bytes():
    inb, wb, outb = T.conv_run_bytes(56, 56, 64, 56, 56, 64, 3, 1, 73856)
    assert (inb, wb, outb) == (56 * 56 * 64 * 2, 73856, 56 * 56 * 64 * 2)
    inb, wb, _ = T.conv_run_bytes(256, 256, 256, 256, 256, 256, 3, 256, 1000)
    assert inb == (256 + 255 * 2) * 256 * 256 * 2 and wb == 256 * 1000
    inb, _, _ = T.conv_run_bytes(1, 4, 8, 1, 4, 8, 7, 1, 0)
    assert inb == 1 * 4 * 8 * 2
    assert T.conv_run_bytes(4, 4, 8, 4, 4, 8, 1, 1, 0, in_from_ubuf=True,
                            out_to_ubuf=True) == (0, 0, 0)


def test_byte_counters_round_trip_through_kernel_rule():
    vals = T.byte_counter_values(416000, 73857, 401408)
    assert len(vals) == 16
    assert sum(1 for v in vals if v) == 3
    # the kernel's classification, written out independently
    inp = sum(v for i, v in enumerate(vals) if i & 8)
    wts = sum(v for i, v in enumerate(vals) if i & 4)
    out = sum(v for i, v in enumerate(vals) if (i & 3) == 3)
    assert (inp, wts, out) == (26000, 4617, 25088)
    assert counter_beats(vals) == (inp, wts, out)  # what the driver reads back
    assert T.byte_counter_values(0, 0, 0) == [0] * 16


def test_maximizer_and_ipu_models():
    assert T.maximizer_cycles(8, 8, 8) == P.command_overhead + 64 + 4
    assert T.ipu_cycles(4, 4, 0, 0) == P.command_overhead + 16
    assert T.ipu_cycles(1, 1, 1600, 0) == P.command_overhead + 100
