"""Convolution family against independent numpy references (issue 3; reference §4.2, §12, §13).

The matrix follows DMP's ``test_conv`` / ``generate_data.py``: kernels kx, ky in 1..7
(even and non-square included), W, H in {1, 9, 15}, C, M in {1, 3, 9, 64, 65}, strides
1 and 2, "same" (k_eff >> 1) or zero pads, every activation, depthwise, deconvolution,
dilation; each configuration as FP16 weights (weight_fmt 1) and as 8-bit quantized
weights (weight_fmt 3, a 256-entry table with entry 0 = 0 and indices 1..255).  Pure
integer data ({-2, -1, 1, 2}) must match exactly; uniform(-1, 1) data must be within the
§13 formula.  Configurations are grouped 50 per command list (depthwise: 1 per list, the
pure-integer matrix: all 882 in one list whose stream spans several chunks), outputs lie
at random offsets in a guard-filled buffer, and lists are re-run to the same SHA-256 (see
``refs.run_cases``).

To keep the 4-backend run short, the sampled matrices cap P^2*C*M at 9*65*65 (see
``MAX_WORK``): a 5x5 or 7x7 window never meets C and M both >= 64, while every kernel
still meets every C and every M value and all 25 (C, M) pairs occur.
"""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun, as_ref
from dvsdk.driver.validate import validate
from dvsdk.errors import InvalidCommand
from dvsdk.hw import layout
from dvsdk.hw.weights import pack_conv_weights, pack_dilated_weights

from .hw import download_tensor, upload
from .refs import (
    PURE_INTS,
    TRANSCENDENTAL,
    Case,
    act_ref,
    assert_no_failures,
    conv_ref,
    conv_tolerance,
    deconv_ref,
    fp16,
    from_whc8,
    max_pool_ref,
    mismatch,
    run_cases,
    to_whc8,
)

SIZES = (1, 9, 15)
CHANS = (1, 3, 9, 64, 65)
KERNELS = list(itertools.product(range(1, 8), repeat=2))  # (kx, ky), 49 incl. even/non-square
STRIDES = ((1, 1), (2, 2), (1, 2), (2, 1))
CONV_NAMES = {(False, False): "conv", (True, False): "depthwise", (False, True): "deconv",
              (True, True): "depthwise_deconv"}


def conv_case(name: str, rng: np.random.Generator, *, h: int, w: int, c: int, m: int,
              kx: int, ky: int, stride=(1, 1), pads=(0, 0, 0, 0), dil=(1, 1),
              depthwise: bool = False, deconv: bool = False, act: int = 0,
              act_param: float = 0.0, rectify: bool = False, q8: bool = False,
              pool=None, data: str = "int", batch: int = 1) -> Case:
    """One conv command and its reference.

    ``pads`` are (left, right, top, bottom); for ``deconv`` they are the *framework*
    pads, converted here to FPGA pads ``k_eff - 1 - pad`` with 180°-rotated kernels as a
    user would (§4.2).  ``pool`` = (size, stride, pads) fuses a max-pool.
    """
    if depthwise:
        m = c

    def vals(*shape):
        if data == "int":
            return rng.choice(PURE_INTS, size=shape)
        return fp16(rng.uniform(-1.0, 1.0, size=shape))

    x = vals(batch, h, w, c)
    bias = vals(m)
    table = np.zeros(256)
    table[1:] = vals(255)  # generate_data.py: quant[0] = 0, weights index 1..255
    if deconv:  # framework order (C_in, C_out, kh, kw); depthwise (C, 1, kh, kw)
        idx = rng.integers(1, 256, size=(c, 1 if depthwise else m, ky, kx), dtype=np.uint8)
        idx_hw = idx[:, :, ::-1, ::-1] if depthwise else idx.transpose(1, 0, 2, 3)[:, :, ::-1, ::-1]
        idx_hw = np.ascontiguousarray(idx_hw)
    else:
        idx = rng.integers(1, 256, size=(m, 1 if depthwise else c, ky, kx), dtype=np.uint8)
        idx_hw = idx
    wv, wv_hw = table[idx], table[idx_hw]
    prelu = vals(m) if act == 4 else None
    dilated = max(dil) > 1
    t16 = table.astype(np.float16)
    if dilated:
        blob = pack_dilated_weights(idx_hw, bias, table=t16) if q8 else \
            pack_dilated_weights(wv_hw, bias)
    else:
        blob = pack_conv_weights(idx_hw, bias, prelu, table=t16) if q8 else \
            pack_conv_weights(wv_hw, bias, prelu)
    kex, key = (kx - 1) * dil[0] + 1, (ky - 1) * dil[1] + 1
    hw_pads = pads
    if deconv:
        pl, pr, pt, pb = pads
        hw_pads = (kex - 1 - pl, kex - 1 - pr, key - 1 - pt, key - 1 - pb)

    refs = []
    for n in range(batch):
        if deconv:
            t = deconv_ref(x[n], wv, bias, stride, pads, dil, depthwise)
        else:
            t = conv_ref(x[n], wv, bias, stride, pads, dil, depthwise)
        t = fp16(t)  # the conv result is stored as FP16 before the fused stages
        if pool is not None:
            t = max_pool_ref(t, *pool)
        t = act_ref(t, act, float(fp16(act_param)), prelu)
        if rectify:
            t = np.abs(t)
        refs.append(fp16(t))
    ref = np.stack(refs)
    oshape = ref.shape
    assert min(oshape) >= 1, (name, oshape)
    if data == "int":
        tol = 1e-3 if act in TRANSCENDENTAL else 1e-6
    else:
        p = max(kx, ky) | 1
        tol = conv_tolerance(ref, p * p * (1 if depthwise else c))

    def build(bref):
        kw = {}
        if pool is not None:
            kw = dict(pool="max", pool_size=pool[0], pool_stride=pool[1], pool_pads=pool[2])
        run = ConvRun.make(m, conv=CONV_NAMES[depthwise, deconv], kernel=(kx, ky),
                           weights=bref("w0"), quantized=q8, pads=hw_pads, stride=stride,
                           dilation=dil, act=act, act_param=act_param, rectify=rectify, **kw)
        return ConvCommand(input_buf=bref("x"), output_buf=bref("out"), w=w, h=h, c=c,
                           runs=[run], input_circular_offset=batch)

    def check(raw):
        return mismatch(name, from_whc8(raw, oshape), ref, tol)

    return Case(name, {"x": to_whc8(x), "w0": blob}, int(np.prod(oshape)) * 2, build, check)


def _same(k: int) -> int:
    return k >> 1


#: the largest P^2*C*M in the sampled matrices: 3x3 with C = M = 65.  Bigger products
#: (5x5 / 7x7 windows with C and M both >= 64) cost ~0.3-0.6 MB of weights each and
#: dominate the runtime on the link backends without adding coverage: every kernel
#: still meets every C and every M value, and every (C, M) pair still occurs.
MAX_WORK = 9 * 65 * 65


def _capped(cm: tuple[int, int], kx: int, ky: int) -> tuple[int, int]:
    c, m = cm
    p = max(kx, ky) | 1
    while p * p * c * m > MAX_WORK:
        m = CHANS[CHANS.index(m) - 1]
    return c, m


def _label(**kw) -> str:
    return " ".join(f"{k}={v}" for k, v in kw.items())


# --------------------------------------------------------------------------------------
# the matrices (built once, shared by every backend)
# --------------------------------------------------------------------------------------


@cache
def conv_matrix_int() -> tuple[Case, ...]:
    """Every kernel (49) x every (W, H) (9) = 441 configurations, each FP16 and Q8.

    C x M cycles through all 25 pairs, strides through 1/2 on each axis, pads between
    "same" and 0 (0 only where the kernel fits), activations 0..6 (PReLU only with FP16
    weights; the Q8 twin uses leaky ReLU), leaky slopes 0 and 0.1, rectification on
    every fifth.
    """
    rng = np.random.default_rng(1234)
    cm = list(itertools.product(CHANS, CHANS))
    cases = []
    for i, ((kx, ky), (w, h)) in enumerate(itertools.product(KERNELS, itertools.product(SIZES,
                                                                                        SIZES))):
        c, m = _capped(cm[(i * 7) % 25], kx, ky)
        stride = STRIDES[i % 4]
        zero = (i // 4) % 2 == 1 and kx <= w and ky <= h
        pads = (0, 0, 0, 0) if zero else (_same(kx), _same(kx), _same(ky), _same(ky))
        act = i % 7
        for q8 in (False, True):
            a = 2 if (q8 and act == 4) else act
            param = 0.1 if (a == 2 and i % 2) else 0.0
            rect = a != 0 and i % 5 == 0
            name = _label(k=f"{kx}x{ky}", whc=f"{w}x{h}x{c}", m=m, s=stride, pads=pads,
                          act=a, p=param, abs=int(rect), fmt="q8" if q8 else "fp16")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=kx, ky=ky, stride=stride,
                                   pads=pads, act=a, act_param=param, rectify=rect, q8=q8))
    return tuple(cases)


@cache
def conv_matrix_float() -> tuple[Case, ...]:
    """uniform(-1, 1) data (``--float``): every kernel twice with random W, H, C, M,
    stride, pads and activation, FP16 and Q8, checked with the §13 formula."""
    rng = np.random.default_rng(4321)
    cases = []
    for kx, ky in KERNELS:
        for _ in range(2):
            w, h = (int(v) for v in rng.choice(SIZES, 2))
            c, m = _capped(tuple(int(v) for v in rng.choice(CHANS, 2)), kx, ky)
            stride = STRIDES[int(rng.integers(4))]
            pads = tuple(int(v) for v in rng.integers(0, 4, size=4))
            pads = (min(pads[0], kx - 1), min(pads[1], kx - 1), min(pads[2], ky - 1),
                    min(pads[3], ky - 1))
            if kx > pads[0] + w + pads[1] or ky > pads[2] + h + pads[3]:
                pads = (_same(kx), _same(kx), _same(ky), _same(ky))
            act = int(rng.integers(0, 7))
            for q8 in (False, True):
                a = 3 if (q8 and act == 4) else act
                name = _label(k=f"{kx}x{ky}", whc=f"{w}x{h}x{c}", m=m, s=stride, pads=pads,
                              act=a, fmt="q8" if q8 else "fp16", data="float")
                cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=kx, ky=ky,
                                       stride=stride, pads=pads, act=a,
                                       act_param=0.1 if a == 2 else 0.0, q8=q8, data="float"))
    return tuple(cases)


@cache
def depthwise_cases() -> tuple[Case, ...]:
    """conv_enable 3 (m == c, one input channel per output): every kernel, every C."""
    rng = np.random.default_rng(77)
    cases = []
    for i, (kx, ky) in enumerate(KERNELS):
        w, h = SIZES[i % 3], SIZES[(i // 3) % 3]
        c = CHANS[i % 5]
        stride = STRIDES[(i // 5) % 4]
        pads = (_same(kx), _same(kx), _same(ky), _same(ky))
        act = (i * 3) % 7
        data = "float" if i % 6 == 5 else "int"
        for q8 in (False, True):
            a = 1 if (q8 and act == 4) else act
            name = _label(k=f"{kx}x{ky}", whc=f"{w}x{h}x{c}", s=stride, act=a, data=data,
                          fmt="q8" if q8 else "fp16", kind="depthwise")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=c, kx=kx, ky=ky, stride=stride,
                                   pads=pads, depthwise=True, act=a, q8=q8, data=data))
    return tuple(cases)


@cache
def deconv_cases() -> tuple[Case, ...]:
    """conv_enable 5 / 7: reference = scatter-form transposed convolution, then crop.

    Every kernel (even and non-square included) with random framework pads 0..k-1 per
    side, strides 1/2 per axis; the test rotates the kernels and passes pad_fpga.
    """
    rng = np.random.default_rng(99)
    cases = []
    cm = list(itertools.product(CHANS, CHANS))
    for i, (kx, ky) in enumerate(KERNELS):
        w, h = SIZES[(i // 3) % 3], SIZES[i % 3]
        c, m = _capped(cm[(i * 11) % 25], kx, ky)
        stride = STRIDES[i % 4]
        pads = tuple(int(v) for v in rng.integers(0, [kx, kx, ky, ky]))
        fw = (w - 1) * stride[0] + kx - pads[0] - pads[1]
        fh = (h - 1) * stride[1] + ky - pads[2] - pads[3]
        if fw < 1 or fh < 1:
            pads = (0, 0, 0, 0)
        act = i % 7
        dw = i % 5 == 4
        for q8 in (False, True):
            a = 5 if (q8 and act == 4) else act
            name = _label(k=f"{kx}x{ky}", whc=f"{w}x{h}x{c}", m=c if dw else m, s=stride,
                          fw_pads=pads, act=a, fmt="q8" if q8 else "fp16",
                          kind="dw-deconv" if dw else "deconv")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=kx, ky=ky, stride=stride,
                                   pads=pads, deconv=True, depthwise=dw, act=a, q8=q8,
                                   data="float" if i % 7 == 3 else "int"))
    # DMP-style "same" deconv (pad = k_eff >> 1) and a dilated deconv (stride 1, 'same')
    for q8 in (False, True):
        f = "q8" if q8 else "fp16"
        cases.append(conv_case(f"deconv same 4x4 s2 16x8x16->8 {f}", rng, h=8, w=16, c=16, m=8,
                               kx=4, ky=4, stride=(2, 2), pads=(1, 1, 1, 1), deconv=True,
                               q8=q8, act=2))
        cases.append(conv_case(f"deconv dil2 3x3 9x9x9->3 {f}", rng, h=9, w=9, c=9, m=3, kx=3,
                               ky=3, dil=(2, 2), pads=(2, 2, 2, 2), deconv=True, q8=q8))
    return tuple(cases)


@cache
def dilated_cases() -> tuple[Case, ...]:
    """Dilated conv (§4.2, §6.1 l): odd kernels, one run, 'same' output, no pooling,
    weights from pack_dilated_weights.  Dilations 2, 3 (and 2x3) over the odd kernels
    and sizes 9/15; stride 2 on even sizes; 6 and 12 on bigger inputs."""
    rng = np.random.default_rng(2024)
    cases = []
    odd = (1, 3, 5, 7)
    i = 0
    for kx, ky in itertools.product(odd, odd):
        for dil in ((2, 2), (3, 3), (2, 3)):
            w, h = (9, 15) if i % 2 else (15, 9)
            c, m = CHANS[i % 5], CHANS[(i * 2 + 1) % 5]
            kex, key = (kx - 1) * dil[0] + 1, (ky - 1) * dil[1] + 1
            pads = (kex // 2, kex // 2, key // 2, key // 2)
            act = (0, 1, 2, 3, 5, 6)[i % 6]
            q8 = i % 2 == 1
            name = _label(k=f"{kx}x{ky}", dil=dil, whc=f"{w}x{h}x{c}", m=m, act=act,
                          fmt="q8" if q8 else "fp16")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=kx, ky=ky, pads=pads,
                                   dil=dil, act=act, q8=q8, data="float" if i % 5 == 4 else "int"))
            i += 1
    big = [  # (w, h, c, m, k, dil, stride)
        (16, 16, 9, 8, 3, 2, 2), (16, 12, 16, 3, 5, 3, 2),
        (24, 24, 32, 16, 3, 6, 1), (32, 32, 16, 8, 3, 12, 1),
        (60, 40, 128, 64, 3, 12, 1),  # 3 UBUF tiles at 512 KiB (d=24 is in test_ops_multirun)
    ]
    for w, h, c, m, k, d, s in big:
        ke = (k - 1) * d + 1
        for q8 in (False, True):
            name = _label(k=f"{k}x{k}", dil=d, s=s, whc=f"{w}x{h}x{c}", m=m,
                          fmt="q8" if q8 else "fp16")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=k, ky=k, stride=(s, s),
                                   pads=(ke // 2,) * 4, dil=(d, d), q8=q8, act=2))
    return tuple(cases)


@cache
def conv_pool_act_cases() -> tuple[Case, ...]:
    """conv -> max-pool -> activation -> abs in one run (§4.1 order).  PReLU with
    negative slopes and rectification do not commute with max-pool, so these pin the
    order; pools cover 2..3 x 1..3 windows, strides 1/2 and ceil-mode pads."""
    rng = np.random.default_rng(5)
    pools = [((2, 2), (2, 2), (0, 0, 0, 0)), ((3, 3), (2, 2), (0, 1, 0, 1)),
             ((3, 3), (2, 2), (1, 1, 1, 1)), ((2, 1), (2, 1), (0, 0, 0, 0)),
             ((3, 2), (1, 1), (0, 0, 0, 0)), ((2, 3), (1, 2), (0, 1, 1, 1))]
    cases = []
    for i, (act, rect) in enumerate(itertools.product(range(7), (False, True))):
        pool = pools[i % len(pools)]
        kx, ky = ((3, 3), (1, 1), (2, 2), (3, 5))[i % 4]
        h, w, c, m = ((9, 15, 9, 16), (15, 9, 3, 9), (9, 9, 65, 3))[i % 3]
        pads = (_same(kx), _same(kx), _same(ky), _same(ky))
        for q8 in (False, True):
            if q8 and act == 4:
                continue
            name = _label(k=f"{kx}x{ky}", whc=f"{w}x{h}x{c}", m=m, pool=pool, act=act,
                          abs=int(rect), fmt="q8" if q8 else "fp16")
            cases.append(conv_case(name, rng, h=h, w=w, c=c, m=m, kx=kx, ky=ky, pads=pads,
                                   pool=pool, act=act, act_param=0.25 if act == 2 else 0.0,
                                   rectify=rect, q8=q8))
    return tuple(cases)


# --------------------------------------------------------------------------------------
# tests
# --------------------------------------------------------------------------------------


def test_conv_matrix_pure_int_is_exact(device):
    """All 882 commands in one list: its stream spans more than one 64 KiB chunk, so the
    chunk chaining (§10.1/§10.4) is exercised, and the re-run covers the whole chain (on
    dv:// the kernel module lays the stream out: one APPEND of 882 kernel structs)."""
    cases = conv_matrix_int()
    assert len(cases) == 882
    res = run_cases(device, cases, per_list=len(cases), seed=1)
    assert res.lists == 1 and (res.chunks[0] >= 2 or not device.has_registers)
    assert_no_failures(res, len(cases))


def test_conv_matrix_float_within_tolerance(device):
    cases = conv_matrix_float()
    res = run_cases(device, cases, per_list=50, seed=2)
    assert_no_failures(res, len(cases))


def test_depthwise(device):
    cases = depthwise_cases()
    res = run_cases(device, cases, per_list=1, seed=3, rerun=False)  # DMP's "1 per list"
    assert res.lists == len(cases)
    assert_no_failures(res, len(cases))


def test_deconv_equals_framework_transposed_conv(device):
    cases = deconv_cases()
    res = run_cases(device, cases, per_list=50, seed=4)
    assert_no_failures(res, len(cases))


def test_dilated(device):
    cases = dilated_cases()
    res = run_cases(device, cases, per_list=50, seed=5)
    assert_no_failures(res, len(cases))


def test_conv_pool_activation_order(device):
    cases = conv_pool_act_cases()
    res = run_cases(device, cases, per_list=50, seed=6)
    assert_no_failures(res, len(cases))


def test_order_pins_activation_after_pool():
    """Sanity of the reference itself: for PReLU with a negative slope and for abs,
    pool-then-activate differs from activate-then-pool on these data, so the ordered
    tests above could not pass with the other order."""
    x = np.array([[[-4.0], [1.0]]])
    pooled_first = np.abs(max_pool_ref(x, (2, 1), (2, 1)))
    act_first = max_pool_ref(np.abs(x), (2, 1), (2, 1))
    assert pooled_first.item() == 1.0 and act_first.item() == 4.0
    assert act_ref(max_pool_ref(x, (2, 1), (2, 1)), 4, prelu=[-2.0]).item() == 1.0
    assert max_pool_ref(act_ref(x, 4, prelu=[-2.0]), (2, 1), (2, 1)).item() == 8.0


@cache
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("bgr", [False, True])
def test_u8_input_through_its_tables(device, batch, bgr):
    """A v1 command's uint8 input (§3.3; our [AMBIG] reading: the chunked layout with one
    byte per element, channel c through table c % 3, to_bgr swapping the first and third)
    against a numpy lookup and product; a batch of two too.  (The simulator's common-case
    path must not take a u8 command as FP16.)"""
    rng = np.random.default_rng(7 + batch + 2 * bgr)
    h, w, c, m = 4, 5, 3, 8
    x = rng.integers(0, 256, size=(batch, h, w, c)).astype(np.uint8)
    table = rng.integers(-8, 9, size=(3, 256)).astype(np.float16)
    wts = rng.integers(-3, 4, size=(m, c, 1, 1)).astype(np.float32)
    bias = rng.integers(-3, 4, size=m).astype(np.float32)
    raw = np.concatenate([layout.pack(x[n].astype(np.float32)).astype(np.uint8)
                          for n in range(batch)])
    ib, tb = upload(device, raw), upload(device, table.view(np.uint8))
    wb = upload(device, pack_conv_weights(wts, bias))
    ob = device.alloc(batch * h * w * m * 2)
    cl = CommandList(device)
    cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, to_bgr=bgr,
                       runs=[ConvRun.make(m, conv="conv", kernel=1, weights=wb)],
                       u8tofp16_table=tb, input_circular_offset=batch))
    cl.commit()
    cl.run()
    pick = 2 - np.arange(c) % 3 if bgr else np.arange(c) % 3
    for n in range(batch):
        xf = table.astype(np.float32)[pick[None, None, :], x[n].astype(np.int64)]
        want = (xf @ wts[:, :, 0, 0].T + bias).astype(np.float16).astype(np.float32)
        assert np.array_equal(download_tensor(ob, (h, w, m), offset=n * h * w * m * 2),
                              want), n


def conv_edge_cases() -> tuple[Case, ...]:
    """Beyond DMP's value grid: fused pooling after depthwise/deconv and after a
    multi-tile conv, pads larger than the kernel, strides 3 and 4, more than 64 input
    channels (two 1x1 blocks) and output channels (several 8-kernel chunks)."""
    rng = np.random.default_rng(13)
    p2 = ((2, 2), (2, 2), (0, 0, 0, 0))
    specs = [
        ("dw 3x3 + max 3x3/2 ceil + prelu", dict(h=9, w=15, c=9, m=9, kx=3, ky=3,
         pads=(1, 1, 1, 1), depthwise=True, pool=((3, 3), (2, 2), (0, 1, 0, 1)), act=4)),
        ("deconv 4x4/2 + max 2x2/2 + tanh", dict(h=9, w=9, c=9, m=8, kx=4, ky=4, stride=(2, 2),
         pads=(1, 1, 1, 1), deconv=True, pool=p2, act=1)),
        ("multi-tile 128x64x64 + max 2x2/2", dict(h=64, w=128, c=64, m=32, kx=3, ky=3,
         pads=(1, 1, 1, 1), pool=p2, act=2, data="float")),
        ("pads 4/0/0/5 on 1x1", dict(h=1, w=1, c=3, m=4, kx=3, ky=3, pads=(4, 0, 0, 5))),
        ("2x5 s2 pads 6/3/2/7", dict(h=9, w=15, c=3, m=4, kx=2, ky=5, stride=(2, 2),
         pads=(6, 3, 2, 7))),
        ("3x5 stride 3", dict(h=15, w=15, c=9, m=9, kx=3, ky=5, stride=(3, 3),
         pads=(1, 1, 2, 2))),
        ("7x7 stride 4x3", dict(h=15, w=15, c=9, m=9, kx=7, ky=7, stride=(4, 3),
         pads=(3, 3, 3, 3))),
        ("1x1 C130 M70", dict(h=9, w=9, c=130, m=70, kx=1, ky=1, act=6)),
        ("3x3 C70 M130 q8", dict(h=9, w=9, c=70, m=130, kx=3, ky=3, pads=(1, 1, 1, 1), q8=True)),
        ("5x5 C70 M20", dict(h=9, w=9, c=70, m=20, kx=5, ky=5, pads=(2, 2, 2, 2))),
        ("7x6 C130 M12", dict(h=9, w=9, c=130, m=12, kx=7, ky=6, pads=(3, 3, 3, 2))),
        ("dw 5x5 C130", dict(h=9, w=9, c=130, m=130, kx=5, ky=5, pads=(2, 2, 2, 2),
         depthwise=True, q8=True)),
        ("deconv 5x3 stride 3x2", dict(h=5, w=7, c=9, m=9, kx=5, ky=3, stride=(3, 2),
         pads=(1, 2, 0, 1), deconv=True)),
        ("dilated 3x3 d2 C130 M70", dict(h=9, w=9, c=130, m=70, kx=3, ky=3, dil=(2, 2),
         pads=(2, 2, 2, 2))),
        ("dw deconv 3x3/2 C65 prelu", dict(h=9, w=9, c=65, m=65, kx=3, ky=3, stride=(2, 2),
         pads=(1, 1, 1, 1), deconv=True, depthwise=True, act=4)),
    ]
    return tuple(conv_case(name, rng, **kw) for name, kw in specs)


def test_conv_edge_cases(device):
    cases = conv_edge_cases()
    res = run_cases(device, cases, per_list=50, seed=12)
    assert_no_failures(res, len(cases))


@cache
def multi_tile_case() -> Case:
    rng = np.random.default_rng(11)
    return conv_case("128x64x64->32 3x3 s2 (DMP's multi-tile case)", rng, h=64, w=128, c=64,
                     m=32, kx=3, ky=3, stride=(2, 2), pads=(1, 1, 1, 1), data="float")


def test_multi_tile_conv(device):
    """DMP's 128x64x64 -> 32 stride-2 case needs several UBUF tiles on a 512 KiB device."""
    case = multi_tile_case()
    info = device.info()
    if info.ub_size == 524288:
        wb = upload(device, case.blobs["w0"], name="w")
        ib = upload(device, case.blobs["x"], name="x")
        ob = device.alloc(case.out_bytes)
        refs = {"w0": wb, "x": ib, "out": ob}
        plan = validate(case.build(lambda n: refs[n]), info)
        assert plan.tiles > 1
        for b in (wb, ib, ob):
            b.free()
    res = run_cases(device, [case], per_list=1, seed=7)
    assert_no_failures(res, 1)


def test_batch_is_bit_identical_to_separate_runs(device):
    """input_circular_offset = N (2..5): one command over N samples equals N commands,
    bit for bit, with sample n's output at n * OUT_BYTES (§4.10)."""
    rng = np.random.default_rng(8)
    kinds = [dict(kx=3, ky=3, pads=(1, 1, 1, 1), act=2),
             dict(kx=2, ky=3, stride=(2, 1), pads=(0, 1, 1, 1), q8=True),
             dict(kx=3, ky=3, depthwise=True, pads=(1, 1, 1, 1), act=6),
             dict(kx=4, ky=4, stride=(2, 2), pads=(1, 1, 1, 1), deconv=True)]
    batched, single = [], []
    for i, kw in enumerate(kinds):
        n = 2 + i  # 2..5
        seed = int(rng.integers(1 << 30))
        c = conv_case(f"batch N={n} {kw}", np.random.default_rng(seed), h=9, w=15, c=9, m=16,
                      batch=n, **kw)
        batched.append(c)
        # the same data, one sample per command: slice the batch blobs apart
        per = len(c.blobs["x"]) // n
        obytes = c.out_bytes // n
        for s in range(n):
            single.append(Case(f"{c.name} sample {s}",
                               {"x": c.blobs["x"][s * per:(s + 1) * per], "w0": c.blobs["w0"]},
                               obytes, _single_builder(c), lambda raw: None))
    rb = run_cases(device, batched, per_list=50, seed=9, keep=True)
    assert_no_failures(rb, len(batched))
    rs = run_cases(device, single, per_list=50, seed=10, keep=True, rerun=False)
    for c in batched:
        n = int(c.name.split("=")[1].split()[0])
        joined = b"".join(rs.outputs[f"{c.name} sample {s}"].tobytes() for s in range(n))
        assert joined == rb.outputs[c.name].tobytes(), c.name


def _single_builder(case: Case):
    def build(bref):
        cmd = case.build(bref)
        return cmd.replace(input_circular_offset=1)
    return build


# --------------------------------------------------------------------------------------
# validation (§6.1): each bad field is named with its run
# --------------------------------------------------------------------------------------


def _expect_invalid(device, cmd, field: str, run: int | None = 0, text: str = "") -> None:
    cl = CommandList(device)
    try:
        with pytest.raises(InvalidCommand) as ei:
            cl.add(cmd)
    finally:
        cl.close()
    e = ei.value
    want = f"run[{run}].{field}" if run is not None else field
    assert e.field == want, (e.field, want, str(e))
    assert want in str(e)
    assert e.run == run
    if text:
        assert text in str(e), str(e)


def test_conv_validation_rejects(device):
    x = upload(device, np.zeros(2 * 16 * 16 * 64, np.uint8), name="x")
    wbuf = upload(device, np.zeros(1 << 20, np.uint8), name="w")
    out = device.alloc(1 << 20)

    def cmd(run, c=16, w=16, h=16, topo=1, runs=None):
        return ConvCommand(input_buf=x, output_buf=out, w=w, h=h, c=c, runs=runs or [run],
                           topo=topo)

    conv = dict(conv="conv", weights=wbuf, pads=1)
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=8, **conv)), "p", text="kernel size")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=(3, 8), **conv)), "p")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, pool="max", pool_size=4,
                                             pool_stride=2, **conv)), "pool_size")
    _expect_invalid(device, cmd(ConvRun.make(16, pool="max", pool_size=(1, 2))), "pool_size")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, pool="avg", pool_size=2,
                                             pool_stride=2, **conv)), "pool_enable",
                    text="cannot be combined")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, conv="depthwise", weights=wbuf,
                                             pads=1)), "m", text="depthwise")
    _expect_invalid(device, cmd(ConvRun.make(24, lrn=True), c=24), "c", text="multiple of 16")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, dilation=2, pool="max",
                                             pool_size=2, pool_stride=2, conv="conv",
                                             weights=wbuf, pads=2)), "conv_dilation")
    # odd in both directions (the pads would give 'same' output: the kernel is all that's wrong)
    for kernel, pads in ((2, 1), ((3, 2), (2, 2, 1, 1)), ((2, 3), (1, 1, 2, 2))):
        _expect_invalid(device, cmd(ConvRun.make(8, kernel=kernel, dilation=2, conv="conv",
                                                 weights=wbuf, pads=pads)), "p", text="odd")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, dilation=2, conv="conv",
                                             weights=wbuf, pads=0)), "conv_pad", text="same")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, act="prelu", quantized=True,
                                             **conv)), "weight_fmt", text="PReLU")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=5, conv="conv", weights=wbuf), w=3,
                                h=3), "p", text="padded input")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, conv="conv", weights=None,
                                             pads=1)), "weight_buf")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, dilation=2, act="prelu", conv="conv",
                                             weights=wbuf, pads=2)), "actfunc", text="PReLU")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, dilation=2, stride=2, conv="deconv",
                                             weights=wbuf, pads=4)), "conv_stride")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, conv="depthwise_deconv",
                                             weights=wbuf, pads=1)), "m")
    _expect_invalid(device, cmd(ConvRun(m=8, conv_enable=1, p=0x0303, pz=0, weight_fmt=1,
                                        weight_buf=as_ref(wbuf))), "pz")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, act=7, **conv)), "actfunc")
    _expect_invalid(device, cmd(ConvRun(m=8, conv_enable=1, p=0x0303, pz=1, conv_pad=0x01010101,
                                        weight_fmt=2, weight_buf=as_ref(wbuf))), "weight_fmt")
    # command-level fields carry no run index
    good1 = ConvRun.make(8, kernel=3, **conv)
    _expect_invalid(device, cmd(None, topo=0, runs=[good1]), "topo", run=None)
    _expect_invalid(device, ConvCommand(input_buf=x, output_buf=out, w=16, h=16, c=16, z=2,
                                        runs=[good1]), "z", run=None)
    _expect_invalid(device, ConvCommand(input_buf=x, output_buf=out, w=16, h=16, c=16,
                                        runs=[good1], input_circular_offset=40000),
                    "input_circular_offset", run=None)
    # the input buffer must hold the whole batch (the C drivers check one sample, §15.2)
    _expect_invalid(device, ConvCommand(input_buf=x, output_buf=out, w=16, h=16, c=64,
                                        runs=[ConvRun.make(8, kernel=3, **conv)],
                                        input_circular_offset=2), "input_buf", run=None,
                    text="too small")
    # ... and so must the output buffer: 16x16x8 FP16 is 4096 bytes a sample
    one, two = device.alloc(4096), device.alloc(2 * 4096)
    batch2 = dict(input_buf=x, w=16, h=16, c=16, runs=[ConvRun.make(8, kernel=3, **conv)],
                  input_circular_offset=2)
    _expect_invalid(device, ConvCommand(output_buf=one, **batch2), "output_buf", run=None,
                    text="too small")
    with CommandList(device) as cl:
        cl.add(ConvCommand(output_buf=two, **batch2))
    # a bad field in the second run of a multi-run command is reported as run[1]
    good = ConvRun.make(16, kernel=1, conv="conv", weights=wbuf, act="relu")
    _expect_invalid(device, cmd(None, topo=0x3, runs=[good, ConvRun.make(8, kernel=8, **conv)]),
                    "p", run=1)
    # a weight buffer too small for the packed size (§6.1 n)
    small = upload(device, np.zeros(64, np.uint8), name="small-w")
    _expect_invalid(device, cmd(ConvRun.make(8, kernel=3, conv="conv", weights=small, pads=1)),
                    "weight_buf", text="too small")
    for b in (x, wbuf, out, small, one, two):
        b.free()
