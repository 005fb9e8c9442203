"""FC (lowered to a 1x1 conv), maximizer and IPU against independent numpy references.

Reference §3.4/§6.3/§6.4 (FC), §9.2/§6.6 (maximizer), §9.1/§6.5 (IPU), §12 (DMP's
``test_fc`` and ``test_maximizer``), §13 (FC like conv with n = input size; maximizer
exact).  The IPU has no DMP test; its reference (refs.ipu_ref) is written from §9.1's
documented intent with the assumptions listed there.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import FcCommand, IpuCommand, MaximizerCommand
from dvsdk.errors import InvalidCommand
from dvsdk.hw.weights import pack_fc_weights

from .hw import upload
from .refs import (
    F16,
    Case,
    assert_no_failures,
    conv_tolerance,
    f16_bits,
    fc_act_ref,
    fp16,
    ipu_ref,
    maximizer_ref,
    mismatch,
    run_cases,
    to_whc8,
)

FC_VALUES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0])  # test_fc: {-2..2} including 0

# --------------------------------------------------------------------------------------
# FC
# --------------------------------------------------------------------------------------


def fc_case(name: str, rng, n_in: int, n_out: int, *, act: int = 0, param: float = 0.0,
            q8: bool = False, data: str = "int") -> Case:
    def vals(*shape):
        if data == "int":
            return rng.choice(FC_VALUES, size=shape)
        return fp16(rng.uniform(-1.0, 1.0, size=shape))

    x = vals(n_in)
    bias = vals(n_out)
    table = np.zeros(256)
    table[1:] = vals(255)
    idx = rng.integers(0, 256, size=(n_out, n_in), dtype=np.uint8)  # test_fc: 0..255
    wv = table[idx]
    blob = pack_fc_weights(idx, bias, (n_in, 1, 1), (n_out, 1, 1),
                           table=table.astype(np.float16)) if q8 else \
        pack_fc_weights(wv, bias, (n_in, 1, 1), (n_out, 1, 1))
    t = fp16(x @ wv.T + bias)
    ref = fp16(fc_act_ref(t, act, float(fp16(param))))
    if data == "int":
        tol = 1e-3 if act in (2, 4) else 1e-6
    else:
        tol = conv_tolerance(ref, n_in)

    def build(bref):
        return FcCommand(weight_buf=bref("w0"), input_buf=bref("x"), output_buf=bref("out"),
                         input_size=n_in, output_size=n_out, weight_fmt=1 if q8 else 0,
                         actfunc=act, actfunc_param=f16_bits(param))

    def check(raw):
        return mismatch(name, np.frombuffer(raw.tobytes(), F16).astype(np.float64), ref, tol)

    # a 1-D FC input/output is a plain FP16 vector (§1: W = H = 1)
    return Case(name, {"x": to_whc8(x.reshape(1, 1, -1)), "w0": blob}, n_out * 2, build, check)


def fc3d_case(name: str, rng, c: int, h: int, w: int, n_out: int, q8: bool) -> Case:
    """test_fc's 3-D inputs: a (C, H, W) input lies in memory in WHC8 order; the weights,
    packed with in_shape = (C, H, W), are reordered to match (§8.4), so the lowered 1x1
    conv over the raw vector equals the framework's NCHW-flattened InnerProduct."""
    n_in = c * h * w
    x = rng.choice(FC_VALUES, size=(h, w, c))
    table = np.zeros(256)
    table[1:] = rng.choice(FC_VALUES[FC_VALUES != 0], size=255)
    idx = rng.integers(0, 256, size=(n_out, n_in), dtype=np.uint8)
    wv = table[idx]  # rows in NCHW (c, y, x) input order
    bias = rng.choice(FC_VALUES, size=n_out)
    blob = pack_fc_weights(idx, bias, (c, h, w), (n_out, 1, 1),
                           table=table.astype(np.float16)) if q8 else \
        pack_fc_weights(wv, bias, (c, h, w), (n_out, 1, 1))
    ref = fp16(wv @ x.transpose(2, 0, 1).reshape(-1) + bias)

    def build(bref):
        return FcCommand(weight_buf=bref("w0"), input_buf=bref("x"), output_buf=bref("out"),
                         input_size=n_in, output_size=n_out, weight_fmt=int(q8))

    def check(raw):
        return mismatch(name, np.frombuffer(raw.tobytes(), F16).astype(np.float64), ref, 1e-6)

    return Case(name, {"x": to_whc8(x), "w0": blob}, n_out * 2, build, check)


FC_IN_SIZES = list(range(1, 17)) + [31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 511,
                                    512, 513, 1000, 1023, 1024]


@cache
def fc_cases() -> tuple[Case, ...]:
    rng = np.random.default_rng(1)
    cases = []
    for i, n in enumerate(FC_IN_SIZES):  # 1-D inputs 1..1024 -> 1
        for q8 in (False, True):
            cases.append(fc_case(f"fc {n}->1 {'q8' if q8 else 'fp16'}", rng, n, 1, q8=q8,
                                 act=i % 2))
    for act in range(5):  # 512 -> 512 with every FC activation code
        for q8 in (False, True):
            for data in ("int", "float"):
                param = 0.1 if act == 3 else 0.0
                cases.append(fc_case(f"fc 512->512 act={act} {'q8' if q8 else 'fp16'} {data}",
                                     rng, 512, 512, act=act, param=param, q8=q8, data=data))
    for n in (16383, 16384):  # the largest FC vector
        for q8 in (False, True):
            cases.append(fc_case(f"fc {n}->16 {'q8' if q8 else 'fp16'}", rng, n, 16, q8=q8,
                                 act=1))
    cases.append(fc_case("fc 1024->1000 float", rng, 1024, 1000, data="float"))
    for c, h, w, n_out, q8 in ((8, 8, 8, 256, False), (8, 16, 16, 64, True),
                               (128, 8, 8, 16, False), (3, 5, 7, 10, True)):
        cases.append(fc3d_case(f"fc 3-D {c}x{h}x{w}->{n_out} {'q8' if q8 else 'fp16'}", rng,
                               c, h, w, n_out, q8))
    return tuple(cases)


def test_fc(device):
    cases = fc_cases()
    res = run_cases(device, cases, per_list=50, seed=1)
    assert_no_failures(res, len(cases))


def _expect_invalid(device, cmd, field: str, text: str = "") -> None:
    cl = CommandList(device)
    try:
        with pytest.raises(InvalidCommand) as ei:
            cl.add(cmd)
    finally:
        cl.close()
    assert ei.value.field == field, str(ei.value)
    assert field in str(ei.value) and text in str(ei.value), str(ei.value)


def test_fc_validation(device):
    x = device.alloc(4096)
    out = device.alloc(4096)
    w = upload(device, pack_fc_weights(np.ones((8, 64)), np.zeros(8)), name="w")

    def fc(**kw):
        args = dict(weight_buf=w, input_buf=x, output_buf=out, input_size=64, output_size=8)
        args.update(kw)
        return FcCommand(**args)

    _expect_invalid(device, fc(actfunc=5), "actfunc", "PReLU")  # no conv equivalent
    _expect_invalid(device, fc(input_size=16385), "input_size")
    _expect_invalid(device, fc(input_size=128 * 16 * 16), "input_size")  # test_fc's 3-D max
    _expect_invalid(device, fc(output_size=0), "output_size")
    _expect_invalid(device, fc(weight_fmt=2), "weight_fmt")
    _expect_invalid(device, fc(output_size=9), "weight_buf", "too small")
    for b in (x, out, w):
        b.free()


# --------------------------------------------------------------------------------------
# maximizer
# --------------------------------------------------------------------------------------


def max_case(name: str, rng, w: int, h: int, nclass: int, kind: str) -> Case:
    shape = (h, w, nclass)
    if kind == "rand":
        s = fp16(rng.uniform(-100, 100, size=shape))
    elif kind == "ties":  # few distinct values: most pixels have tied maxima
        s = rng.choice([-1.0, 0.0, 0.5, 1.0], size=shape)
    elif kind == "inf":  # test_maximizer's rand() cast to __fp16 is mostly +inf
        s = np.where(rng.random(shape) < 0.8, np.inf, fp16(rng.uniform(0, 60000, size=shape)))
    else:  # "max-last": the winner is always the last class (every block is read)
        s = fp16(rng.uniform(-1, 0, size=shape))
        s[..., -1] = 1.0
    want = maximizer_ref(s).tobytes()

    def build(bref):
        return MaximizerCommand(input_buf=bref("x"), output_buf=bref("out"), width=w,
                                height=h, nclass=nclass)

    def check(raw):
        if raw.tobytes() == want:
            return None
        got = np.frombuffer(raw.tobytes(), np.uint8)
        exp = np.frombuffer(want, np.uint8)
        i = int(np.flatnonzero(got != exp)[0])
        return (f"{name}: {int((got != exp).sum())}/{got.size} pixels differ, e.g. x-major "
                f"index {i} (x={i // h}, y={i % h}): got class {got[i]}, want {exp[i]}")

    return Case(name, {"x": to_whc8(s)}, w * h, build, check, out_align=16, in_align=16)


@cache
def maximizer_cases() -> tuple[Case, ...]:
    rng = np.random.default_rng(9)
    cases = []
    sizes = [(1, 1), (7, 3), (3, 7), (32, 24), (100, 1), (1, 64), (19, 13)]
    for i, nclass in enumerate((2, 3, 8, 9, 16, 17, 64, 255)):
        for j, kind in enumerate(("rand", "ties", "inf", "max-last")):
            w, h = sizes[(i + j) % len(sizes)]
            if nclass == 255:
                w, h = min(w, 24), min(h, 16)
            cases.append(max_case(f"maximizer {w}x{h} nclass={nclass} {kind}", rng, w, h,
                                  nclass, kind))
    return tuple(cases)


def test_maximizer_bit_exact(device):
    cases = maximizer_cases()
    res = run_cases(device, cases, per_list=50, seed=2, guard=b"\xee")
    assert_no_failures(res, len(cases))


def test_maximizer_validation(device):
    x = device.alloc(1 << 16)
    out = device.alloc(1 << 12)

    def mx(**kw):
        args = dict(input_buf=x, output_buf=out, width=8, height=8, nclass=4)
        args.update(kw)
        return MaximizerCommand(**args)

    _expect_invalid(device, mx(nclass=1), "nclass", "2..255")
    _expect_invalid(device, mx(nclass=256), "nclass")
    _expect_invalid(device, mx(width=0), "width")
    _expect_invalid(device, mx(input_buf=(x, 8)), "input_buf.offs", "16-byte")
    _expect_invalid(device, mx(width=64, height=64, nclass=16), "input_buf", "too small")
    for b in (x, out):
        b.free()


# --------------------------------------------------------------------------------------
# IPU
# --------------------------------------------------------------------------------------


def ipu_case(name: str, rng, tw: int, th: int, rw: int, rh: int, *, swizzle=(0, 1, 2),
             transpose: bool = False, cnv: str = "div255", cnv_param=(0, 0, 0)) -> Case:
    tex = rng.integers(0, 256, size=(th, tw, 3), dtype=np.uint8)  # RGB888, row-major
    ref = ipu_ref(tex, rw, rh, swizzle=swizzle, transpose=transpose, cnv=cnv,
                  cnv_param=cnv_param)

    def build(bref):
        return IpuCommand(wr=bref("out"), rect_width=rw, rect_height=rh, fmt_wr=2,
                          tex=bref("tex"), fmt_tex=1, tex_width=tw, tex_height=th,
                          ridx=swizzle[0], gidx=swizzle[1], bidx=swizzle[2],
                          transpose=int(transpose), cnv_type=1 if cnv == "div255" else 0,
                          cnv_param=tuple(cnv_param))

    def check(raw):
        y = np.frombuffer(raw.tobytes(), F16).astype(np.float64).reshape(rh, rw, 3)
        return mismatch(name, y, ref, 1e-9)  # bit-exact: both are FP16 values

    return Case(name, {"tex": tex.tobytes()}, rw * rh * 6, build, check, out_align=16,
                in_align=16)


@cache
def ipu_cases() -> tuple[Case, ...]:
    rng = np.random.default_rng(12)
    mean = (123, 117, 104)
    return (
        ipu_case("identity 16x8 div255", rng, 16, 8, 16, 8),
        ipu_case("identity 13x9 sub", rng, 13, 9, 13, 9, cnv="sub", cnv_param=mean),
        ipu_case("identity 1x1", rng, 1, 1, 1, 1),
        ipu_case("swizzle BGR 16x8", rng, 16, 8, 16, 8, swizzle=(2, 1, 0)),
        ipu_case("swizzle GBR 10x6 sub", rng, 10, 6, 10, 6, swizzle=(1, 2, 0), cnv="sub",
                 cnv_param=(10, 200, 255)),
        ipu_case("swizzle BRG 9x5", rng, 9, 5, 9, 5, swizzle=(2, 0, 1)),
        ipu_case("2x down 32x16 -> 16x8", rng, 32, 16, 16, 8),
        ipu_case("2x up 8x4 -> 16x8 BGR", rng, 8, 4, 16, 8, swizzle=(2, 1, 0)),
        ipu_case("2x down in x only 20x7 -> 10x7", rng, 20, 7, 10, 7),
        ipu_case("2x up in y only 5x3 -> 5x6 sub", rng, 5, 3, 5, 6, cnv="sub",
                 cnv_param=mean),
        ipu_case("transpose 12x7 -> 7x12", rng, 12, 7, 7, 12, transpose=True),
        ipu_case("transpose + 2x down 16x10 -> 5x8 BGR", rng, 16, 10, 5, 8, transpose=True,
                 swizzle=(2, 1, 0)),
        ipu_case("4x up 1x1 -> 4x4", rng, 1, 1, 4, 4),
        ipu_case("224x224 application pre-processing (BGR, sub mean)", rng, 224, 224, 224, 224,
                 swizzle=(2, 1, 0), cnv="sub", cnv_param=mean),
    )


def test_ipu_rgb888_to_rgbfp16(device):
    cases = ipu_cases()
    res = run_cases(device, cases, per_list=50, seed=3, guard=b"\x11\x22")
    assert_no_failures(res, len(cases))


def test_ipu_validation(device):
    tex = device.alloc(1 << 12)
    wr = device.alloc(1 << 12)

    def ipu(**kw):
        args = dict(wr=wr, rect_width=8, rect_height=8, tex=tex, tex_width=8, tex_height=8)
        args.update(kw)
        return IpuCommand(**args)

    _expect_invalid(device, ipu(ridx=0, gidx=0, bidx=2), "ridx..bidx", "permutation")
    _expect_invalid(device, ipu(rect_width=0), "rect_width")
    _expect_invalid(device, ipu(tex_width=4096), "tex_width")
    _expect_invalid(device, ipu(fmt_wr=3), "fmt_wr")
    _expect_invalid(device, ipu(cnv_type=2), "cnv_type")
    _expect_invalid(device, ipu(use_tex=0), "use_tex")
    _expect_invalid(device, ipu(wr=(wr, 8)), "wr.offs", "16-byte")
    _expect_invalid(device, ipu(rect_width=32, rect_height=32), "wr", "too small")
    for b in (tex, wr):
        b.free()
