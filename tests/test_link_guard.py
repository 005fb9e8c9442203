"""What one client of dvsdk-agent may make the device touch (issue 10 §5): its own zeroed
buffers, and nothing of anyone else's."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.driver.commands import ConvCommand, ConvRun, IpuCommand, MaximizerCommand
from dvsdk.driver.device import DmaBuffer, open_device
from dvsdk.driver.stream import build_stream, conv_words, write_packet
from dvsdk.driver.unitregs import ipu_writes, maximizer_writes
from dvsdk.errors import AccessViolation, InvalidCommand
from dvsdk.hw.spec import SPEC
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.link.client import LinkDevice

from .hw import upload
from .linkdev import MemDevice, sim_conv

CMD_ADDR, CMD_LEN, KICK = (SPEC.reg("conv", n) for n in ("CMD_ADDR", "CMD_LEN", "KICK"))


def test_a_new_session_never_sees_the_previous_sessions_data():
    dev = MemDevice()  # its allocator hands out DRAM as it was left
    first = LinkDevice.loopback(dev)
    buf = first.alloc(4096)
    buf.view[:] = 0xA5
    buf.sync_for_device()
    phys = buf.phys
    first.close()  # BYE frees the buffer; the bytes stay in DRAM
    second = LinkDevice.loopback(dev)
    try:
        again = second.alloc(4096)
        assert again.phys == phys  # the same memory ...
        again.sync_for_cpu()
        assert not again.view.any()  # ... zeroed for its new owner
        assert not dev.dram[phys - dev.base:phys - dev.base + 4096].any()
    finally:
        second.close()


@pytest.fixture
def sim_link():
    with open_device("loop://?device=sim://?kick=direct") as dev:
        yield dev


def _conv(dev, ib, ob, wb=None):
    c, m = 8, 8
    wb = wb or upload(dev, pack_conv_weights(np.ones((m, c, 1, 1), np.float32),
                                             np.zeros(m, np.float32)), name="weights")
    run = ConvRun.make(m, conv="conv", kernel=1, weights=wb)
    return ConvCommand(input_buf=ib, output_buf=ob, w=4, h=4, c=c, runs=[run])


def _kick(dev, cmd):
    stream = build_stream(dev, [conv_words(cmd, 1)])
    dev.write32("conv", CMD_ADDR, stream.address)
    dev.write32("conv", CMD_LEN, stream.length8)
    try:
        dev.write32("conv", KICK, 1)
    finally:
        stream.free()
    return stream


def _foreign(phys: int, n: int) -> DmaBuffer:
    """Somebody else's memory, as an address in a command."""
    return DmaBuffer(None, phys, np.zeros(n, np.uint8), "foreign")


def test_a_kick_on_memory_of_a_former_session_is_refused():
    with open_device("loop://?device=sim://?kick=direct") as a:
        a.alloc(1 << 20, name="spacer")
        old = a.alloc(4096, name="old")  # above what the next session allocates
        phys = old.phys
    with open_device("loop://?device=sim://?kick=direct") as b:
        ib = upload(b, np.zeros(4 * 4 * 8 * 2, np.uint8), name="input")
        ob = b.alloc(4 * 4 * 8 * 2, name="output")
        b.write32("conv", SPEC.reg("conv", "IRQ"), 0)
        _kick(b, _conv(b, ib, ob))  # its own buffers: runs
        b.wait_irq("conv", 2.0)
        with pytest.raises(AccessViolation) as e:
            _kick(b, _conv(b, _foreign(0x6F00_0000, 256), ob))
        assert e.value.what == "input" and e.value.access == "read"
        assert e.value.address == 0x6F00_0000 and "0x6f000000" in str(e.value)
        with pytest.raises(AccessViolation, match="output write"):
            _kick(b, _conv(b, ib, _foreign(phys, 4096)))


def test_stream_outside_the_session_and_self_overwrite_are_refused(sim_link):
    dev = sim_link
    ib = upload(dev, np.zeros(256, np.uint8), name="input")
    dev.write32("conv", CMD_ADDR, 0x6F00_0000)
    dev.write32("conv", CMD_LEN, 8)
    with pytest.raises(AccessViolation) as e:
        dev.write32("conv", KICK, 1)
    assert e.value.what == "command stream"
    # a command whose output lands on its own stream
    arena = dev.alloc(4096, name="arena")
    words = np.concatenate([conv_words(_conv(dev, ib, arena), 1),
                            np.array(write_packet(SPEC.stream_reg("irq"), 1), "<u4")])
    arena.write(0, words)
    arena.sync_for_device()
    dev.write32("conv", CMD_ADDR, arena.phys)
    dev.write32("conv", CMD_LEN, -(-words.size // 2))
    with pytest.raises(AccessViolation, match="overwrite the command stream"):
        dev.write32("conv", KICK, 1)
    # the CMD registers must come from this session
    with open_device("loop://?device=sim://?kick=direct") as fresh:
        with pytest.raises(InvalidCommand, match="CMD_ADDR was not written"):
            fresh.write32("conv", KICK, 1)


def test_ipu_and_maximizer_starts_are_vetted(sim_link):
    dev = sim_link
    wr = dev.alloc(8 * 8 * 6, align=16, name="wr")
    tex = upload(dev, np.zeros(8 * 8 * 3, np.uint8), align=16, name="tex")
    ok = IpuCommand(wr=wr, rect_width=8, rect_height=8, tex=tex, tex_width=8, tex_height=8)
    for off, val in ipu_writes(ok):
        dev.write32("ipu", off, val)
    dev.write32("ipu", SPEC.reg("ipu", "START"), 1)
    dev.wait_irq("ipu", 2.0)
    big = IpuCommand(wr=wr, rect_width=8, rect_height=16, tex=tex, tex_width=8, tex_height=8)
    for off, val in ipu_writes(big):
        dev.write32("ipu", off, val)
    with pytest.raises(AccessViolation) as e:
        dev.write32("ipu", SPEC.reg("ipu", "START"), 1)
    assert e.value.what == "IPU output" and e.value.nbytes == 8 * 16 * 6
    src = upload(dev, np.zeros(4 * 4 * 10 * 2, np.uint8), align=16, name="scores")
    mx = MaximizerCommand(input_buf=src, output_buf=_foreign(0x6F00_0000, 16), width=4,
                          height=4, nclass=10)
    for off, val in maximizer_writes(mx):
        dev.write32("maximizer", off, val)
    with pytest.raises(AccessViolation, match="maximizer output"):
        dev.write32("maximizer", SPEC.reg("maximizer", "START"), 1)


def test_legitimate_work_passes_the_guard(sim_link):
    with open_device("sim://") as local:
        want = sim_conv(local)
    assert sim_conv(sim_link).tobytes() == want.tobytes()
