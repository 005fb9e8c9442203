"""Multi-run commands (§4.1, §7.3) and batch (§4.10) against independent references.

DMP's ``test_multirun`` only checks "does not hang"; here every output of the
SqueezeNet fire (topo 0x3) and GoogLeNet inception_3b (topo 0x55, 7 runs) configurations
is compared with a plain numpy chain of the runs: run i reads the command input when
i == 0 or bit i-1 of topo is set, else run i-1's FP16 result (kept in the UBUF); output
runs are appended one after another to the output buffer, each in its own chunked
layout.  The inception config needs 618272 bytes of UBUF (the §7.3 known answer, see
tests/test_dims.py), so it runs on a 1 MiB device and must be rejected by the default
512 KiB one.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.errors import InvalidCommand
from dvsdk.hw.weights import pack_conv_weights

from . import conftest
from .hw import upload
from .refs import (
    PURE_INTS,
    Case,
    act_ref,
    assert_no_failures,
    avg_pool_ref,
    conv_ref,
    conv_tolerance,
    fp16,
    from_whc8,
    max_pool_ref,
    mismatch,
    run_cases,
    to_whc8,
    upsample_ref,
)

BIG_UB = 1 << 20

# -- a 1 MiB-UBUF variant of the `device` fixture -----------------------------------------


def _open_big(kind: str):
    url = f"sim://?ub_size={BIG_UB}"
    if kind.startswith("sim-"):
        return dvsdk.open_device(f"{url}&kick={kind[4:]}")
    if kind.startswith("uio-"):
        from .fakeboard import open_fake_device

        return open_fake_device(ubuf_size=BIG_UB, kick=kind[4:])
    if kind == "dv":
        from .fakedv import open_fake_kmod

        return open_fake_kmod(ub_size=BIG_UB)
    from dvsdk.link.agent import AgentProcess

    port = {"link-tcp": "tcp:127.0.0.1:0", "link-pty": "pty"}[kind]
    key = f"{port} {url}"
    if key not in conftest._AGENTS:  # stopped by conftest's pytest_sessionfinish
        conftest._AGENTS[key] = AgentProcess(url, port=port)
    agent_url = conftest._AGENTS[key].url
    return dvsdk.open_device(agent_url + ("&" if "?" in agent_url else "?") + "timeout=5")


@pytest.fixture(params=sorted(conftest.BACKENDS))
def big_device(request):
    """The same backends as ``device``, with a 1 MiB unified buffer."""
    dev = _open_big(request.param)
    try:
        assert dev.info().ub_size == BIG_UB
        yield dev
    finally:
        dev.close()


# -- the multi-run reference and case builder -----------------------------------------------


def run_spec(m: int, k: int = 1, pad: int = 0, pool=None, conv: bool = True, act: int = 2,
             depthwise: bool = False, avg=None, upsample: bool = False):
    """One run: k x k conv (depthwise, or none) with ``pad`` -> [max-pool (size, stride,
    pad)] -> act; or, without conv, an average pool ``avg`` = (size, stride, pad) or a 2x
    upsample."""
    return dict(m=m, k=k, pad=pad, pool=pool, conv=conv, act=act, depthwise=depthwise,
                avg=avg, upsample=upsample)


def multirun_case(name: str, rng, *, w: int, h: int, c: int, topo: int, specs, data: str,
                  q8: bool = False, batch: int = 1) -> Case:
    def vals(*shape):
        if data == "int":
            return rng.choice(PURE_INTS, size=shape)
        return fp16(rng.uniform(-1.0, 1.0, size=shape))

    x = vals(batch, h, w, c)
    blobs = {"x": to_whc8(x)}
    table = np.zeros(256)
    table[1:] = vals(255)
    weights = []
    in_c = c
    for i, s in enumerate(specs):
        if not s["conv"]:
            weights.append(None)
            s_out = in_c
        else:
            cw = 1 if s["depthwise"] else in_c
            idx = rng.integers(1, 256, size=(s["m"], cw, s["k"], s["k"]), dtype=np.uint8)
            bias = vals(s["m"])
            weights.append((table[idx], bias))
            blobs[f"w{i}"] = pack_conv_weights(idx, bias, table=table.astype(np.float16)) \
                if q8 else pack_conv_weights(table[idx], bias)
            s_out = s["m"]
        if not topo >> i & 1:
            in_c = s_out
        else:
            in_c = c

    def chain(xn):
        outs, cur = [], None
        tols = []
        for i, s in enumerate(specs):
            src = xn if (i == 0 or topo >> (i - 1) & 1) else cur
            t = src
            if s["conv"]:
                wv, b = weights[i]
                t = fp16(conv_ref(src, wv, b, pads=(s["pad"],) * 4, depthwise=s["depthwise"]))
            if s["avg"] is not None:
                size, stride, pp = s["avg"]
                t = fp16(avg_pool_ref(t, (size, size), (stride, stride), (pp,) * 4))
            if s["upsample"]:
                t = upsample_ref(t)
            if s["pool"] is not None:
                size, stride, pp = s["pool"]
                t = max_pool_ref(t, (size, size), (stride, stride), (pp,) * 4)
            t = fp16(act_ref(t, s["act"]))
            if topo >> i & 1:
                outs.append(t)
                p = s["k"] | 1
                tols.append(1e-6 if data == "int" else
                            conv_tolerance(t, p * p * src.shape[2]))
            else:
                cur = t
        return outs, tols

    per_sample = [chain(x[n]) for n in range(batch)]
    shapes = [o.shape for o in per_sample[0][0]]
    sample_bytes = sum(int(np.prod(s)) * 2 for s in shapes)

    def build(bref):
        runs = []
        for i, s in enumerate(specs):
            kw = {}
            if s["conv"]:
                kw = dict(conv="depthwise" if s["depthwise"] else "conv", kernel=s["k"],
                          pads=s["pad"], weights=bref(f"w{i}"), quantized=q8)
            if s["avg"] is not None:
                size, stride, pp = s["avg"]
                kw.update(pool="avg", pool_size=size, pool_stride=stride, pool_pads=pp)
            if s["upsample"]:
                kw.update(pool="upsample")
            if s["pool"] is not None:
                size, stride, pp = s["pool"]
                kw.update(pool="max", pool_size=size, pool_stride=stride, pool_pads=pp)
            runs.append(ConvRun.make(s["m"], act=s["act"], **kw))
            assert runs[-1].pool_stride != 0  # §15.4: 0x0101 on runs without pooling
        return ConvCommand(input_buf=bref("x"), output_buf=bref("out"), w=w, h=h, c=c,
                           runs=runs, topo=topo, input_circular_offset=batch)

    def check(raw):
        for n, (outs, tols) in enumerate(per_sample):
            at = n * sample_bytes
            for j, (ref, tol) in enumerate(zip(outs, tols, strict=True)):
                nb = ref.size * 2
                msg = mismatch(f"{name} sample {n} output {j}", from_whc8(raw[at:at + nb],
                                                                         ref.shape), ref, tol)
                if msg:
                    return msg
                at += nb
        return None

    case = Case(name, blobs, batch * sample_bytes, build, check)
    case.meta.update(shapes=shapes, sample_bytes=sample_bytes)
    return case


def fire(m0=64, m1=64, pool=True, size=55):
    p = (3, 2, 0) if pool else None
    return dict(w=size, h=size, c=16, topo=0x3,
                specs=[run_spec(m0, 1, 0, p), run_spec(m1, 3, 1, p)])


def inception(pool=True):
    """inception_3b as tests/test_dims.py reproduces the 618272 known answer: every output
    run carries pool3's 3x3/2 max-pool with pad 1; without it (``pool=False``) it is the
    plain branch structure of the issue (peak 616224)."""
    p = (3, 2, 1) if pool else None
    return dict(w=28, h=28, c=256, topo=0x55, specs=[
        run_spec(128, 1, 0, p),  # 1x1                       -> out
        run_spec(128, 1, 0),  # 3x3_reduce                   -> UBUF
        run_spec(192, 3, 1, p),  # 3x3                        -> out
        run_spec(32, 1, 0),  # 5x5_reduce                     -> UBUF
        run_spec(96, 5, 2, p),  # 5x5                         -> out
        run_spec(256, 1, 0, (3, 1, 1), conv=False, act=0),  # pool 3x3/1 p1, no conv -> UBUF
        run_spec(64, 1, 0, p),  # pool_proj                   -> out
    ])


@cache
def fire_cases() -> tuple[Case, ...]:
    rng = np.random.default_rng(3)
    cases = []
    for pool in (True, False):
        for q8 in (False, True):
            for data in ("int", "float"):
                name = f"fire 55x55x16 pool={int(pool)} {'q8' if q8 else 'fp16'} {data}"
                cases.append(multirun_case(name, rng, **fire(pool=pool), data=data, q8=q8))
    # m not a multiple of 8: the outputs are two tensors one after the other, each in its
    # own chunked layout, not one channel-concatenated tensor
    cases.append(multirun_case("fire m=12+20 (not channel concat)", rng,
                               **fire(12, 20, pool=False, size=9), data="int"))
    return tuple(cases)


def test_squeezenet_fire(device):
    cases = fire_cases()
    res = run_cases(device, cases, per_list=50, seed=1, keep=True)
    assert_no_failures(res, len(cases))
    # with m = 64 (a multiple of 8) the two branch tensors are the channel concat
    c = cases[0]
    (h, w, m0), (_, _, m1) = c.meta["shapes"]
    y = from_whc8(res.outputs[c.name].tobytes(), (h, w, m0 + m1))
    first = from_whc8(res.outputs[c.name][:h * w * m0 * 2].tobytes(), (h, w, m0))
    np.testing.assert_array_equal(y[..., :m0], first)
    # the m = 12 + 20 case is not: reading it as 32 channels scrambles the channels
    odd = cases[-1]
    (h, w, a), (_, _, b) = odd.meta["shapes"]
    raw = res.outputs[odd.name].tobytes()
    joint = from_whc8(raw, (h, w, a + b))
    sep = from_whc8(raw[:h * w * a * 2], (h, w, a))
    assert not np.array_equal(joint[..., :a], sep)


@cache
def chain_cases() -> tuple[Case, ...]:
    """Other topologies: pure chains (one output bit: the ping-pong UBUF layout of §7.3),
    branches that mix UBUF and output runs, and UBUF runs that pool, average, upsample or
    are depthwise, so the next run reads a reshaped tensor from the UBUF."""
    rng = np.random.default_rng(21)
    r = run_spec
    specs = [
        ("chain 0x2", 0x2, (15, 9, 9), [r(16, 3, 1), r(8, 1, 0)], "int"),
        ("chain 0x4 with pools", 0x4, (16, 12, 9),
         [r(16, 3, 1, (2, 2, 0)), r(24, 3, 1, (3, 1, 1)), r(8, 5, 2, (2, 2, 0))], "int"),
        ("chain 0x8 of four 3x3", 0x8, (8, 8, 8), [r(8, 3, 1)] * 4, "float"),
        ("0x5", 0x5, (9, 9, 16), [r(8, 1, 0), r(16, 3, 1), r(8, 3, 1)], "float"),
        ("0xA", 0xA, (9, 9, 16), [r(8, 1, 0), r(16, 3, 1), r(8, 3, 1), r(8, 1, 0)], "float"),
        ("0x6 max-pool-only UBUF run", 0x6, (10, 10, 16),
         [r(16, pool=(2, 2, 0), conv=False, act=0), r(8, 3, 1), r(16, 1, 0)], "int"),
        ("0x2 avg-pool UBUF run", 0x2, (10, 8, 16),
         [r(16, conv=False, act=0, avg=(2, 2, 0)), r(8, 3, 1)], "int"),
        ("0x2 upsample UBUF run", 0x2, (6, 5, 8),
         [r(8, conv=False, act=1, upsample=True), r(16, 3, 1)], "float"),
        ("0x6 depthwise chain", 0x6, (9, 7, 16),
         [r(16, 3, 1, depthwise=True), r(16, 5, 2, depthwise=True, act=6), r(24, 1, 0)], "int"),
    ]
    cases = []
    for name, topo, (w, h, c), sp, data in specs:
        for q8 in (False, True):
            cases.append(multirun_case(f"{name} {'q8' if q8 else 'fp16'}", rng, w=w, h=h, c=c,
                                       topo=topo, specs=sp, data=data, q8=q8))
    return tuple(cases)


def test_multirun_topologies(device):
    cases = chain_cases()
    res = run_cases(device, cases, per_list=50, seed=6)
    assert_no_failures(res, len(cases))


@cache
def inception_cases() -> tuple[Case, ...]:
    rng = np.random.default_rng(35)
    cases = []
    for pool in (True, False):
        for q8 in (False, True):
            name = f"inception_3b pool={int(pool)} {'q8' if q8 else 'fp16'}"
            cases.append(multirun_case(name, rng, **inception(pool), data="float", q8=q8))
    return tuple(cases)


def test_googlenet_inception_3b_on_a_1mib_ubuf(big_device):
    cases = inception_cases()
    res = run_cases(big_device, cases, per_list=50, seed=2)
    assert_no_failures(res, len(cases))


@pytest.mark.parametrize("pool, need", [(True, 618272), (False, 616224)])
def test_inception_3b_rejected_by_512kib_ubuf(device, pool, need):
    assert device.info().ub_size == 524288
    case = inception_cases()[0 if pool else 2]
    bufs = {k: upload(device, v, name=k) for k, v in case.blobs.items()}
    bufs["out"] = device.alloc(case.out_bytes)
    cl = CommandList(device)
    with pytest.raises(InvalidCommand) as ei:
        cl.add(case.build(lambda n: bufs[n]))
    cl.close()
    e = ei.value
    assert e.field == "ub_size" and e.value == 524288 and e.limit == need, str(e)
    assert f"at least {need} bytes" in str(e)
    for b in bufs.values():
        b.free()


@cache
def aspp_case() -> Case:
    """DMP's Dense-ASPP case: 60x40x128 -> 64, 3x3, dilation 24 ('same' pads)."""
    from .test_ops_conv import conv_case

    return conv_case("aspp d24", np.random.default_rng(24), h=40, w=60, c=128, m=64, kx=3,
                     ky=3, dil=(24, 24), pads=(24, 24, 24, 24), data="float", act=2)


def test_dense_aspp_dilation_24_on_a_1mib_ubuf(big_device):
    """Two UBUF tiles with 1 MiB."""
    from dvsdk.hw.dims import conv_tiles

    assert conv_tiles(60, 40, 128, 64, 3, 3, (24,) * 4, (1, 1), (24, 24), BIG_UB)[0] == 2
    res = run_cases(big_device, [aspp_case()], per_list=1, seed=3, rerun=False)
    assert_no_failures(res, 1)


def test_dense_aspp_rejected_by_512kib_ubuf(device):
    """No tile of the Dense-ASPP case fits in 512 KiB."""
    case = aspp_case()
    bufs = {k: upload(device, v, name=k) for k, v in case.blobs.items()}
    bufs["out"] = device.alloc(case.out_bytes)
    cl = CommandList(device)
    with pytest.raises(InvalidCommand) as ei:
        cl.add(case.build(lambda n: bufs[n]))
    cl.close()
    assert ei.value.field == "run[0].ub_size", str(ei.value)
    for b in bufs.values():
        b.free()


# -- batch (§4.10) ---------------------------------------------------------------------


def test_multirun_batch_is_bit_identical_to_separate_runs(device):
    """input_circular_offset = N on a fire command: sample n's concatenated outputs are at
    n * OUT_BYTES and equal, bit for bit, N single-sample commands."""
    rng = np.random.default_rng(17)
    batched = []
    singles = []
    for n in (2, 5):
        c = multirun_case(f"fire batch {n}", rng, **fire(16, 24, size=15), data="float",
                          batch=n)
        batched.append(c)
        per = len(c.blobs["x"]) // n
        for s in range(n):
            blobs = dict(c.blobs, x=c.blobs["x"][s * per:(s + 1) * per])

            def build(bref, c=c):
                return c.build(bref).replace(input_circular_offset=1)

            singles.append(Case(f"{c.name}/{s}", blobs, c.meta["sample_bytes"], build,
                                lambda raw: None))
    rb = run_cases(device, batched, seed=4, keep=True)
    assert_no_failures(rb, len(batched))
    rs = run_cases(device, singles, seed=5, keep=True, rerun=False)
    for c in batched:
        n = int(c.name.split()[-1])
        joined = b"".join(rs.outputs[f"{c.name}/{s}"].tobytes() for s in range(n))
        assert joined == rb.outputs[c.name].tobytes(), c.name


# -- validation ------------------------------------------------------------------------


def _fire_cmd(dev, bufs, **changes):
    w = bufs["w"]
    r0 = ConvRun.make(64, conv="conv", kernel=1, weights=w, act="relu")
    r1 = ConvRun.make(64, conv="conv", kernel=3, pads=1, weights=w, act="relu")
    for k, v in changes.items():
        setattr(r0, k, v)
    return ConvCommand(input_buf=bufs["x"], output_buf=bufs["o"], w=55, h=55, c=16,
                       runs=[r0, r1], topo=0x3)


@pytest.fixture
def fire_bufs(device):
    bufs = {"x": device.alloc(1 << 20), "w": device.alloc(1 << 20), "o": device.alloc(1 << 20)}
    yield bufs
    for b in bufs.values():
        b.free()


def test_multirun_validation(device, fire_bufs):
    def expect(cmd, field, text=""):
        cl = CommandList(device)
        with pytest.raises(InvalidCommand) as ei:
            cl.add(cmd)
        cl.close()
        assert ei.value.field == field and text in str(ei.value), str(ei.value)

    # dilation is single-run only (§6.1 l / p)
    expect(_fire_cmd(device, fire_bufs, conv_dilation=0x0202, conv_pad=0x02020202),
           "run[0].conv_dilation", "single run")
    # a run kept in the UBUF must fit in one tile: a 1x1 run on 256x256x256 does not
    big = ConvCommand(input_buf=fire_bufs["x"], output_buf=fire_bufs["o"], w=256, h=256, c=16,
                      topo=0x2, runs=[
                          ConvRun.make(256, conv="conv", kernel=3, pads=1,
                                       weights=fire_bufs["w"]),
                          ConvRun.make(8, conv="conv", kernel=1, weights=fire_bufs["w"])])
    expect(big, "run[0].tiles", "one tile")
    # fewer runs than topo selects
    cmd = _fire_cmd(device, fire_bufs)
    cmd.runs = cmd.runs[:1]
    expect(cmd, "runs")


def test_zero_pool_stride_names_its_run(device, fire_bufs):
    cmd = _fire_cmd(device, fire_bufs, pool_stride=0)
    cl = CommandList(device)
    with pytest.raises(InvalidCommand) as ei:
        cl.add(cmd)
    cl.close()
    assert "pool_stride" in str(ei.value)  # it is rejected ...
    assert ei.value.field == "run[0].pool_stride" and ei.value.run == 0  # ... and named
