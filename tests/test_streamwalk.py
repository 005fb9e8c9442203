"""The stream walker against streams the driver builds, with ranges worked out by hand.

Every expected range below is computed in the test from the reference (§1 tensor
sizes, §7.4 weight sizes, §4.1 output concatenation, §4.4 eltwise, §4.10 batch,
§10.4 chunk chaining, §10.6/§10.7 register programs), never from the walker.
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import (
    ConvCommand,
    ConvRun,
    FcCommand,
    IpuCommand,
    MaximizerCommand,
)
from dvsdk.driver.device import open_device
from dvsdk.driver.stream import jump_packet, write_packet
from dvsdk.driver.streamwalk import (
    Access,
    Controller,
    conv_kick_accesses,
    conv_register_accesses,
    ipu_accesses,
    maximizer_accesses,
)
from dvsdk.errors import InvalidCommand
from dvsdk.hw.spec import SPEC
from dvsdk.hw.weights import pack_conv_weights, pack_fc_weights

from .hw import upload


@pytest.fixture
def dev():
    with open_device("sim://") as d:
        yield d


def fetcher(dev):
    """What the agent does: read the CPU view of whichever buffer holds the range."""

    def fetch(addr: int, n: int) -> np.ndarray:
        for buf in dev.buffers.values():
            if buf.phys <= addr and addr + n <= buf.phys + buf.size:
                return buf.view[addr - buf.phys:addr - buf.phys + n]
        raise AssertionError(f"stream fetch outside every buffer: {addr:#x}+{n}")

    return fetch


def ranges(accesses):
    return sorted((a.what, a.address, a.nbytes, a.write) for a in accesses)


def walk(dev, cl):
    st = cl.stream
    acc, _ = conv_kick_accesses(fetcher(dev), st.address, st.length8)
    return acc


def stream_ranges(cl):
    return [("command stream", c.phys, n, False)
            for c, n in zip(cl.stream.chunks, cl.stream.lengths, strict=True)]


def fp16_weight_bytes(c: int, m: int, k: int) -> int:
    """§7.4: 144·m·c' + 16·⌈m/8⌉ with c' = ⌈c/8⌉ (3×3), ⌈c/64⌉ (1×1), ⌈c/2⌉ (5×5)."""
    groups = {1: -(-c // 64), 3: -(-c // 8), 5: -(-c // 2), 7: c}[k]
    return 144 * m * groups + 16 * -(-m // 8)


def conv_buffers(dev, w, h, c, m, k, batch=1, out_runs=1):
    rng = np.random.default_rng(0)
    wts = rng.standard_normal((m, c, k, k)).astype(np.float32)
    blob = pack_conv_weights(wts, np.zeros(m, np.float32))
    assert len(blob) == fp16_weight_bytes(c, m, k)
    ib = upload(dev, np.zeros(w * h * c * 2 * batch, np.uint8), name="input")
    wb = upload(dev, blob, name="weights")
    ob = dev.alloc(w * h * m * 2 * batch * out_runs, name="output")
    return ib, wb, ob


def test_single_conv_with_batch(dev):
    w, h, c, m, k, n = 15, 9, 9, 3, 3, 2
    ib, wb, ob = conv_buffers(dev, w, h, c, m, k, batch=n)
    run = ConvRun.make(m, conv="conv", kernel=k, weights=wb, pads=1)
    with CommandList(dev) as cl:
        cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run],
                           input_circular_offset=n))
        cl.commit()
        got = ranges(walk(dev, cl))
        want = sorted(stream_ranges(cl) + [
            ("input", ib.phys, w * h * c * 2 * n, False),
            ("weights of run 0", wb.phys, 144 * m * 2 + 16, False),
            ("output", ob.phys, w * h * m * 2 * n, True),
        ])
        assert got == want


def test_multi_run_concat_and_ubuf_chain(dev):
    # topo 0b101: run0 (1x1, 16 ch) -> ext; run1 (1x1, 8 ch) -> UBUF -> run2 (3x3 on it) -> ext
    w, h, c = 8, 6, 16
    rng = np.random.default_rng(1)
    ib = upload(dev, np.zeros(w * h * c * 2, np.uint8), name="input")

    def wbuf(m, cin, k):
        blob = pack_conv_weights(rng.standard_normal((m, cin, k, k)).astype(np.float32),
                                 np.zeros(m, np.float32))
        return upload(dev, blob, name=f"w{m}x{cin}x{k}")

    w0, w1, w2 = wbuf(16, c, 1), wbuf(8, c, 1), wbuf(8, 8, 3)
    ob = dev.alloc(w * h * (16 + 8) * 2, name="output")
    runs = [ConvRun.make(16, conv="conv", kernel=1, weights=w0),
            ConvRun.make(8, conv="conv", kernel=1, weights=w1),
            ConvRun.make(8, conv="conv", kernel=3, weights=w2, pads=1)]
    with CommandList(dev) as cl:
        cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=runs, topo=0b101))
        cl.commit()
        want = sorted(stream_ranges(cl) + [
            ("input", ib.phys, w * h * c * 2, False),
            ("weights of run 0", w0.phys, fp16_weight_bytes(c, 16, 1), False),
            ("weights of run 1", w1.phys, fp16_weight_bytes(c, 8, 1), False),
            ("weights of run 2", w2.phys, fp16_weight_bytes(8, 8, 3), False),
            ("output", ob.phys, w * h * 16 * 2 + w * h * 8 * 2, True),
        ])
        assert ranges(walk(dev, cl)) == want


def test_eltwise_addend_is_read_at_the_pre_pool_size(dev):
    w, h, c, m = 8, 8, 8, 8
    ib, wb, ob = conv_buffers(dev, w, h, c, m, 3)
    elt = upload(dev, np.zeros(w * h * m * 2, np.uint8), name="eltwise")
    run = ConvRun.make(m, conv="conv", kernel=3, weights=wb, pads=1, pool="max", pool_size=2,
                       pool_stride=2)
    with CommandList(dev) as cl:
        cl.add(ConvCommand(input_buf=ib, output_buf=ob, eltwise_buf=elt, w=w, h=h, c=c,
                           runs=[run], output_mode=1))
        cl.commit()
        got = {a.what: (a.address, a.nbytes) for a in walk(dev, cl)}
    assert got["eltwise"] == (elt.phys, w * h * m * 2)  # 8x8, before the 2x2 max-pool
    assert got["output"] == (ob.phys, (w // 2) * (h // 2) * m * 2)


def test_u8_input_reads_one_byte_per_element_and_the_table(dev):
    w, h, c, m = 6, 4, 3, 8
    ib, wb, ob = conv_buffers(dev, w, h, c, m, 3)
    table = upload(dev, np.zeros(1536, np.uint8), name="table")
    run = ConvRun.make(m, conv="conv", kernel=3, weights=wb, pads=1)
    with CommandList(dev) as cl:
        cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run],
                           u8tofp16_table=table))
        cl.commit()
        got = {a.what: (a.address, a.nbytes) for a in walk(dev, cl)}
    assert got["input"] == (ib.phys, w * h * c)
    assert got["u8 table"] == (table.phys, 6 * 256)


def test_chained_chunks_and_an_fc_command(dev):
    w, h, c, m = 4, 4, 8, 8
    ib, wb, ob = conv_buffers(dev, w, h, c, m, 1)
    n_in, n_out = 32, 10
    fw = upload(dev, pack_fc_weights(np.ones((n_out, n_in)), np.zeros(n_out), (n_in, 1, 1),
                                     (n_out, 1, 1)), name="fc")
    fx = upload(dev, np.zeros(n_in * 2, np.uint8), name="fc-in")
    fo = dev.alloc(n_out * 2, name="fc-out")
    run = ConvRun.make(m, conv="conv", kernel=1, weights=wb)
    with CommandList(dev, chunk_bytes=128) as cl:  # 96-byte commands: one per chunk
        for _ in range(4):
            cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run]))
        cl.add(FcCommand(weight_buf=fw, input_buf=fx, output_buf=fo, input_size=n_in,
                         output_size=n_out))
        cl.commit()
        assert len(cl.stream.chunks) == 5
        acc = walk(dev, cl)
        lowered = cl._owned[0]  # the FC's weights, re-packed as a 1x1 conv (§6.4)
        assert [r for r in ranges(acc) if r[0] == "command stream"] == sorted(stream_ranges(cl))
        assert ranges(acc).count(("output", ob.phys, w * h * m * 2, True)) == 4
        assert ("weights of run 0", lowered.phys, fp16_weight_bytes(n_in, n_out, 1),
                False) in ranges(acc)
        assert ("input", fx.phys, n_in * 2, False) in ranges(acc)
        assert ("output", fo.phys, n_out * 2, True) in ranges(acc)


def regs_of(cl, unit):
    return {off: val for off, val in cl._submission.reg_writes[0]}


def test_ipu_and_maximizer_programs(dev):
    tex = upload(dev, np.zeros(20 * 10 * 4, np.uint8), align=16, name="tex")
    rd = upload(dev, np.zeros(64 * 8 * 3, np.uint8), align=16, name="rd")
    wr = dev.alloc(64 * 8 * 6, align=16, name="wr")
    with CommandList(dev) as cl:
        cl.add(IpuCommand(wr=wr, rect_width=32, rect_height=8, fmt_wr=2, tex=tex, fmt_tex=0,
                          tex_width=20, tex_height=10, use_rd=1, rd=rd, fmt_rd=1,
                          stride_rd=64, stride_wr=64))
        cl.commit()
        got = ranges(ipu_accesses(regs_of(cl, "ipu")))
    assert got == sorted([("IPU output", wr.phys, 7 * 64 * 6 + 32 * 6, True),
                          ("IPU texture", tex.phys, 20 * 10 * 4, False),
                          ("IPU source", rd.phys, 7 * 64 * 3 + 32 * 3, False)])
    x = upload(dev, np.zeros(5 * 3 * 10 * 2, np.uint8), align=16, name="scores")
    out = dev.alloc(5 * 3, align=16, name="argmax")
    with CommandList(dev) as cl:
        cl.add(MaximizerCommand(input_buf=x, output_buf=out, width=5, height=3, nclass=10))
        cl.commit()
        got = ranges(maximizer_accesses(regs_of(cl, "maximizer")))
    assert got == sorted([("maximizer input", x.phys, 5 * 3 * 10 * 2, False),
                          ("maximizer output", out.phys, 15, True)])


def test_negative_ipu_stride_reads_rows_below_the_address():
    o = {n: SPEC.reg("ipu", n) for n in ("RECT", "MODE", "WR_ADDR", "WR_STRIDE", "USE_TEX")}
    regs = {o["RECT"]: 4 << 16 | 3, o["MODE"]: 1 << 1, o["WR_ADDR"]: 0x1000,
            o["WR_STRIDE"]: -10 & 0xFFFFFFFF, o["USE_TEX"]: 0}
    assert ipu_accesses(regs) == [Access(0x1000 - 2 * 10 * 3, 2 * 10 * 3 + 4 * 3, True,
                                         "IPU output")]
    del regs[o["MODE"]]
    with pytest.raises(InvalidCommand, match="MODE was not written"):
        ipu_accesses(regs)


# -- what the walker refuses -------------------------------------------------------------


def hand_stream(*packets: list[int]) -> tuple:
    words = np.array([w for p in packets for w in p], "<u4")
    if words.size % 2:
        words = np.append(words, np.uint32(0))
    mem = {0x8000: words.view(np.uint8)}

    def fetch(addr, n):
        for base, data in mem.items():
            if base <= addr and addr + n <= base + data.size:
                return data[addr - base:addr - base + n]
        raise AssertionError("outside")

    return fetch, 0x8000, words.size // 2, mem


IRQ = write_packet(SPEC.stream_reg("irq"), 1)


@pytest.mark.parametrize("packets,match", [
    ([[0x12345678]], "unknown packet"),
    ([jump_packet(8, 0x8000)], "loops"),
    ([write_packet(SPEC.reg("conv", "CMD_ADDR") // 4, 0x1000)], "cannot vet"),
    ([write_packet(SPEC.stream_reg("start"), 1)], "not written"),
    ([write_packet(SPEC.stream_reg("cfg_data"), 1)], "before CFG_ADDR"),
])
def test_refused_streams(packets, match):
    fetch, addr, n8, _ = hand_stream(*packets, IRQ)
    with pytest.raises(InvalidCommand, match=match) as e:
        conv_kick_accesses(fetch, addr, n8)
    assert e.value.field == "stream" and e.value.value.startswith("0x")


def test_image_of_an_earlier_kick_is_not_trusted_and_refusal_keeps_the_state(dev):
    w, h, c, m = 4, 4, 8, 8
    ib, wb, ob = conv_buffers(dev, w, h, c, m, 1)
    run = ConvRun.make(m, conv="conv", kernel=1, weights=wb)
    with CommandList(dev) as cl:
        cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run]))
        cl.commit()
        ctrl = Controller()
        acc, after = conv_kick_accesses(fetcher(dev), cl.stream.address, cl.stream.length8,
                                        ctrl)
        assert not ctrl.known.any() and not after.known.any()  # forgotten after the kick
        fetch, addr, n8, _ = hand_stream(write_packet(SPEC.stream_reg("start"), 1), IRQ)
        with pytest.raises(InvalidCommand, match="not written"):
            conv_kick_accesses(fetch, addr, n8, after)
    # CPU writes of CFG_ADDR/CFG_DATA then START: the image is decoded from them
    image = np.frombuffer(bytes(cl_image(ib, ob, wb, w, h, c, run)), "<u4")
    ctrl = Controller()
    _, ctrl = conv_register_accesses(ctrl, SPEC.reg("conv", "CFG_ADDR"), 0x2000)
    for word in image:
        _, ctrl = conv_register_accesses(ctrl, SPEC.reg("conv", "CFG_DATA"), int(word))
    acc, _ = conv_register_accesses(ctrl, SPEC.reg("conv", "START"), 1)
    assert ("output", ob.phys, w * h * m * 2, True) in ranges(acc)


def cl_image(ib, ob, wb, w, h, c, run):
    from dvsdk.driver.stream import config_image

    return config_image(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run]), 1)
