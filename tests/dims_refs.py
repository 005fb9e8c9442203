"""Independent reference formulas and DMP's test_multirun configurations for the dims
tests (restated from dv700-interface.md §4, §7; never imported from dvsdk.hw.dims)."""

from __future__ import annotations

import math
from fractions import Fraction

# --------------------------------------------------------------------------
# Independent reference formulas
# --------------------------------------------------------------------------


def c_div(a: int, b: int) -> int:
    """C integer division (truncation toward zero)."""
    return int(Fraction(a, b))


def ref_out(n: int, k: int, pa: int, pb: int, s: int, d: int = 1, deconv: bool = False) -> int:
    k_eff = (k - 1) * max(d, 1) + 1
    if deconv:
        return pa + (n - 1) * s + 1 + pb - k_eff + 1
    return c_div(pa + n + pb - k_eff, s) + 1


def blk(elems: int) -> int:
    """One 8-channel block in 16-byte units, forced to 2 mod 16."""
    x = math.ceil(elems / 8)
    while x % 16 != 2:
        x += 1
    return x


def blocks(elems_per_block: int, ch: int) -> int:
    """All ceil(ch/8) blocks in 16-byte units, rounded up to a multiple of 16 (x16 = bytes)."""
    return 16 * math.ceil(blk(elems_per_block) * math.ceil(ch / 8) / 16)


def ref_weight_size(c: int, m: int, kx: int, ky: int, q: bool, dw: bool, prelu: bool) -> int:
    """§7.4 get_weight_size."""
    k = max(kx, ky) | 1
    if dw:
        c = 1
    cp = {1: math.ceil(c / 64), 3: math.ceil(c / 8), 5: math.ceil(c / 2), 7: c}[k]
    hdr = 16 * math.ceil(m / 8)
    size = 16 * math.ceil((512 + 72 * m * cp + hdr) / 16) if q else 144 * m * cp + hdr
    return size + (hdr if prelu else 0)


def ref_weight_size_dil(c: int, m: int, kx: int, ky: int, q: bool) -> int:
    """§7.4 get_weight_size_dil."""
    res = 512 if q else 0
    for _ in range(kx * ky):
        res += ref_weight_size(c, m, 1, 1, q, False, False) - (512 if q else 0)
        res = 16 * math.ceil(res / 16)
    return res


def ref_tile_util(w, h, c, m, kx, ky, pads, strides, dil, t, is_conv=True):
    """§7.2 per-t quantities: returns (fits_geometry, ts_elems, os_elems, no_ob)."""
    dx, dy = (max(1, v) for v in dil)
    is_dil = dx > 1 or dy > 1
    if is_dil:
        ex, ey = (kx - 1) * dx + 1, (ky - 1) * dy + 1
        p = 1
    else:
        p = max(kx, ky) | 1
        ex = ey = p
    no_ob = is_conv and not is_dil and p <= 7 and c <= 8
    tw = math.ceil(w / t) + ex - 1
    if tw < ex or t > w:
        return False, 0, 0, no_ob
    ow = c_div(pads[0] + tw + pads[1] - ex, strides[0]) + 1
    oh = c_div(pads[2] + h + pads[3] - ey, strides[1]) + 1
    os_ = ow * oh * min(m, 8)
    ts = blocks(tw * h * min(c, 8), c) * 8
    return True, ts, os_, no_ob


def ref_tiles(w, h, c, m, kx, ky, pads=(0, 0, 0, 0), strides=(1, 1), dil=(1, 1), ub=524288):
    """Smallest t whose utilisation fits, by the §7.2 rules (0 if none)."""
    u = (ub // 1024) * 512
    is_dil = max(dil) > 1
    if not is_dil and (max(kx, ky) | 1) <= 7 and c <= 8 and m <= 8:
        return 1
    for t in range(1, w + 2):
        ok, ts, os_, no_ob = ref_tile_util(w, h, c, m, kx, ky, pads, strides, dil, t)
        if not ok:
            return 0
        if ts + (0 if no_ob else os_) <= u:
            return t
    return 0


# --------------------------------------------------------------------------
# The test_multirun configurations (§4.1, §7.3), raw §3.2 fields
# --------------------------------------------------------------------------


def conv_run(m, k, pad=0, pool=False, pool_pad=0, **extra):
    """A conv run (conv_enable 1, stride 1, leaky-ReLU 0 = ReLU), optionally with
    max-pool 3×3/2.  Runs without pooling carry pool_stride 0x0101 (§15.4)."""
    run = dict(
        m=m, conv_enable=1, p=k, pz=1, conv_pad=pad * 0x01010101, conv_stride=0x0101,
        conv_dilation=0, weight_fmt=1, actfunc=2, pool_enable=0, pool_size=0,
        pool_stride=0x0101, pool_pad=0, lrn=0,
    )  # fmt: skip
    if pool:
        run.update(pool_enable=1, pool_size=0x0303, pool_stride=0x0202, pool_pad=pool_pad)
    run.update(extra)
    return run


# SqueezeNet fire3 + pool3 of test_multirun: the known answer 150816 is reproduced
# by a **56×56×16** input (not 55×55: that gives 145440, see below), run0 = 1×1
# conv m=64 → ReLU → max-pool 3×3/2 pad 0, run1 = 3×3 conv pad 1 m=64 → ReLU →
# max-pool 3×3/2 pad 0, topo 0x3.  The p field is written as DMP writes it: 1 and
# 3 (ky byte 0 → ky = kx).
FIRE_CMD = dict(w=56, h=56, z=1, c=16, topo=0x3)
FIRE_RUNS = [conv_run(64, 1, 0, pool=True), conv_run(64, 3, 1, pool=True)]

# GoogLeNet inception_3b + pool3/3x3_s2 of test_multirun, topo 0x55, input
# 28×28×256.  Every output run carries the following max-pool 3×3/2 with
# pool_pad 1 on all four sides (0x01010101); UBUF runs have no pool and
# pool_stride 0x0101; the branch pool is a conv-less max-pool 3×3/1 pad 1, m=256,
# p=1.  This reproduces 618272 exactly (the peak is run 2, the 3×3 conv reading
# the 3×3_reduce output from UBUF: 402432 + 201216 + 16·914).
GOOGLENET_CMD = dict(w=28, h=28, z=1, c=256, topo=0x55)
GOOGLENET_RUNS = [
    conv_run(128, 1, 0, pool=True, pool_pad=0x01010101),  # 1x1            -> ext
    conv_run(128, 1, 0),  # 3x3_reduce                                       -> UBUF
    conv_run(192, 3, 1, pool=True, pool_pad=0x01010101),  # 3x3            -> ext
    conv_run(32, 1, 0),  # 5x5_reduce                                        -> UBUF
    conv_run(96, 5, 2, pool=True, pool_pad=0x01010101),  # 5x5             -> ext
    dict(m=256, conv_enable=0, p=1, pz=1, conv_stride=0x0101, pool_enable=1,
         pool_size=0x0303, pool_stride=0x0101, pool_pad=0x01010101),  # pool -> UBUF
    conv_run(64, 1, 0, pool=True, pool_pad=0x01010101),  # pool_proj       -> ext
]  # fmt: skip

LRN_CMD = dict(w=56, h=56, z=1, c=192, topo=1)
LRN_RUN = dict(m=192, conv_enable=0, p=0x0101, pz=1, conv_stride=0x0101, pool_stride=0x0101,
               lrn=0x503)  # fmt: skip


