"""The dvlink backend: wire format, retries, idempotency, real pty and TCP with a real agent.

``MemDevice`` is a small Device written for these tests (registers in a dict,
DMA with a separate "DRAM" behind a CPU view, a copy engine that raises an
interrupt), so the link is tested independently of the simulator; the
simulator tests at the end drive a real convolution through an agent process.
"""

from __future__ import annotations

import collections
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dvsdk.driver.allocator import RegionAllocator
from dvsdk.driver.device import UNITS, Device, DeviceInfo, DmaBuffer, open_device
from dvsdk.errors import (
    CoherenceError,
    DeviceLost,
    DeviceNotFound,
    DeviceTimeout,
    InvalidArgument,
    InvalidURL,
    LinkError,
    OutOfDeviceMemory,
)
from dvsdk.link import protocol as lp
from dvsdk.link.agent import AgentProcess, LinkServer, main
from dvsdk.link.client import LinkDevice
from dvsdk.link.transport import FaultSpec, PipeTransport, Transport

ROOT = Path(__file__).resolve().parent.parent
FACTORY = "tests.test_link:MemDevice"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}

# MemDevice registers (conv window).  KICK is the conv unit's start register, so the
# client mirrors CPU writes before it, as for the real device.
SRC, DST, LEN, DELAY_MS, COUNTER, BUMP, KICK, IRQ = 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24, 0x408, 0x420


class MemBuffer(DmaBuffer):
    """CPU view and DRAM kept apart; device output must be synced before a checked read."""

    def __init__(self, dev: MemDevice, off: int, n: int, name: str) -> None:
        super().__init__(dev, dev.base + off, np.zeros(n, np.uint8), name or f"mem{off:#x}")
        self.mem, self.off, self.dirty = dev, off, False

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        self.mem.dram[self.off + offset:self.off + offset + nbytes] = \
            self.view[offset:offset + nbytes]

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        self.view[offset:offset + nbytes] = \
            self.mem.dram[self.off + offset:self.off + offset + nbytes]
        self.dirty = False

    def _check_cpu_read(self, offset: int, nbytes: int) -> None:
        if self.dirty:
            raise CoherenceError(f"read of {self.name} before sync_for_cpu", buffer=self.name,
                                 start=offset, end=offset + nbytes)

    def _free(self) -> None:
        self.mem.alloc_.free(self.off)


class MemDevice(Device):
    """Registers in a dict, 16 MiB of DMA, a copy engine (dst = src + 1) with an interrupt."""

    def __init__(self) -> None:
        self.url = "mem://"
        self.base = 0x1000_0000
        self.dram = np.zeros(16 << 20, np.uint8)
        self.alloc_ = RegionAllocator(self.dram.size, self.base)
        self.regs: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.calls: collections.Counter[str] = collections.Counter()
        self.irq = threading.Event()
        self.buffers: list[MemBuffer] = []

    def read32(self, unit: str, offset: int) -> int:
        self.check_reg(unit, offset)
        return self.regs[unit, offset]

    def write32(self, unit: str, offset: int, value: int) -> None:
        self.check_reg(unit, offset)
        self.calls["write32"] += 1
        self.regs[unit, offset] = value & 0xFFFFFFFF
        if (unit, offset) == ("conv", BUMP):
            self.regs["conv", COUNTER] += value
        if (unit, offset) == ("conv", KICK):
            self.calls["kick"] += 1
            delay = self.regs["conv", DELAY_MS] / 1000.0
            threading.Timer(delay, self._copy).start() if delay else self._copy()

    def _copy(self) -> None:
        src, dst = (self.regs["conv", r] - self.base for r in (SRC, DST))
        n = self.regs["conv", LEN]
        self.dram[dst:dst + n] = self.dram[src:src + n] + np.uint8(1)
        for b in self.buffers:
            if b.off < dst + n and dst < b.off + b.size and not b.freed:
                b.dirty = True
        self.irq.set()

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        self.calls["alloc"] += 1
        buf = MemBuffer(self, self.alloc_.alloc(nbytes, align), nbytes, name)
        self.buffers.append(buf)
        return buf

    def wait_irq(self, unit: str, timeout: float) -> None:
        self.check_reg(unit, 0)
        if not self.irq.wait(timeout):
            raise DeviceTimeout(f"{unit} interrupt did not arrive within {timeout:g} s",
                                registers={"KICK": self.regs["conv", KICK], "IRQ": 0},
                                field="timeout", value=timeout)
        self.irq.clear()

    def info(self) -> DeviceInfo:
        return DeviceInfo(mac_num=576, backend="mem", units=UNITS, dma_size=self.dram.size)

    def reset(self) -> None:
        self.calls["reset"] += 1
        self.irq.clear()


def copy_run(dev: Device, data: np.ndarray, delay_ms: int = 0, timeout: float = 5.0) -> bytes:
    """The whole driver cycle on MemDevice: upload, kick, wait, download."""
    src, dst = dev.alloc(data.size, name="src"), dev.alloc(data.size, name="dst")
    src.write(0, data)
    src.sync_for_device()
    for reg, val in ((SRC, src.phys), (DST, dst.phys), (LEN, data.size), (DELAY_MS, delay_ms)):
        dev.write32("conv", reg, val)
    dev.write32("conv", KICK, 1)
    dev.wait_irq("conv", timeout)
    dst.sync_for_cpu()
    out = dst.read().tobytes()
    src.free()
    dst.free()
    return out


@pytest.fixture
def mem():
    dev = MemDevice()
    link = LinkDevice.loopback(dev, timeout=0.5)
    yield dev, link
    link.close()


RNG = np.random.default_rng(1234)
DATA = RNG.integers(0, 256, 300_000, dtype=np.uint8)
EXPECT = (DATA + np.uint8(1)).tobytes()


# -- wire format ------------------------------------------------------------------------------


def test_spec_drives_header_and_messages():
    assert lp.HEADER.size == 12 and lp.FRAME_OVERHEAD == 16 and lp.VERSION == 1
    assert lp.MESSAGES["READ32"].code == 0x10 and lp.BY_CODE[0x22].name == "MEM_WRITE"
    assert lp.UNITS == UNITS
    sample = {"u8": 7, "u16": 513, "u32": 0xDEADBEEF, "u64": 1 << 40, "i64": -5, "f64": 2.5,
              "unit": "ipu", "bytes": b"\x00\xc0\xdb", "str": "näme", "json": {"a": [1, 2]}}
    for msg in lp.MESSAGES.values():
        for layout in (msg.request, msg.response):
            names = [*layout.names] + ([layout.tail[0]] if layout.tail else [])
            kinds = [*layout.kinds] + ([layout.tail[1]] if layout.tail else [])
            values = {n: sample[k] for n, k in zip(names, kinds, strict=True)}
            got = layout.unpack(layout.pack(values))
            assert {k: bytes(v) if k == "data" else v for k, v in got.items()} == values
    with pytest.raises(InvalidArgument, match="unit"):
        lp.MESSAGES["READ32"].request.pack({"unit": "gpu", "offset": 0})


def test_slip_frames_survive_any_chunking():
    payload = bytes(range(256)) * 3 + b"\xc0\xdb\xdb\xdc\xc0"
    wire = lp.encode_frame(0x22, 0xFFFFFFFF, payload) + lp.encode_frame(0x10, 5, b"")
    assert wire.count(lp.END) == 4
    for step in (1, 7, 4096):
        d = lp.Deframer(1 << 16)
        raws = [r for i in range(0, len(wire), step) for r in d.feed(wire[i:i + step])]
        frames = [lp.decode_frame(r) for r in raws]
        assert [(f.code, f.seq, f.payload) for f in frames] == [
            (0x22, 0xFFFFFFFF, payload), (0x10, 5, b"")]


def test_every_single_bit_error_is_detected():
    wire = lp.encode_frame(0x23, 77, bytes(range(200)))
    rng = np.random.default_rng(0)
    for pos in rng.integers(1, len(wire) - 1, 300):
        bad = bytearray(wire)
        bad[pos] ^= 1 << int(rng.integers(8))
        for raw in lp.Deframer(1 << 16).feed(bytes(bad)):
            with pytest.raises(lp.FrameError):
                lp.decode_frame(raw)


def test_deframer_discards_runaway_garbage():
    d = lp.Deframer(100)
    assert d.feed(b"x" * 150) == [] and d.feed(b"y" * 50) == []
    good = lp.encode_frame(1, 1, b"ok")
    out = d.feed(b"zz" + good)
    assert out[0] == lp.Deframer.OVERFLOW and lp.decode_frame(out[1]).payload == b"ok"


def test_errors_cross_the_link_with_class_and_fields():
    e = DeviceTimeout("no irq", registers={"KICK": 1}, field="timeout", value=0.5)
    back = lp.error_from_payload(lp.error_payload(e))
    assert type(back) is DeviceTimeout and str(back) == str(e)
    assert back.registers == {"KICK": 1} and back.field == "timeout" and back.exit_code == 3
    oom = OutOfDeviceMemory("full", requested=9, largest_free=4, total=8)
    back = lp.error_from_payload(lp.error_payload(oom))
    assert (back.requested, back.largest_free, back.total) == (9, 4, 8)
    assert type(lp.error_from_payload(lp.error_payload(ValueError("v")))) is ValueError
    assert "agent raised" in str(lp.error_from_payload(lp.error_payload(OSError("x"))))


def test_fault_spec_parsing():
    s = FaultSpec.parse("corrupt=0.1, drop=0.2,delay_ms=3,seed=9")
    assert (s.corrupt, s.drop, s.delay, s.delay_ms, s.seed) == (0.1, 0.2, 1.0, 3.0, 9)
    assert not FaultSpec.parse("") and s
    for bad in ("corrupt=2", "nope=0.1", "drop"):
        with pytest.raises(InvalidArgument):
            FaultSpec.parse(bad)


def test_replay_cache_answers_a_retry_without_running_it_twice():
    dev = MemDevice()
    srv = LinkServer(dev)
    hello = lp.MESSAGES["HELLO"]
    srv.handle(lp.encode_frame(hello.code, 1, hello.request.pack(
        {"version": 1, "max_payload": 4096, "nonce": 42, "client": "t"}))[1:-1])
    wr = lp.MESSAGES["WRITE32"]
    req = lp.encode_frame(wr.code, 2, wr.request.pack({"unit": "conv", "offset": BUMP,
                                                       "value": 5}))[1:-1]
    first, second = srv.handle(req), srv.handle(req)
    assert first == second and dev.regs["conv", COUNTER] == 5
    assert srv.stats["replayed"] == 1
    assert lp.decode_frame(srv.handle(b"garbage")[1:-1]).code == lp.MESSAGES["NAK"].code


# -- the Device interface over an in-process link ------------------------------------------


def test_registers_memory_irq_info(mem):
    dev, link = mem
    link.write32("ipu", 0x100, 0x1234_5678)
    assert link.read32("ipu", 0x100) == 0x1234_5678 == dev.regs["ipu", 0x100]
    assert copy_run(link, DATA) == EXPECT
    info = link.info()
    assert info.backend == "link:mem" and info.mac_num == 576 and info.units == UNITS
    assert info.extra["link"]["protocol"] == 1
    link.reset()
    assert dev.calls["reset"] == 1 and link.ping(b"\xc0hi") == b"\xc0hi"


def test_remote_errors_are_the_same_classes(mem):
    dev, link = mem
    with pytest.raises(InvalidArgument, match="unknown register unit"):
        link.read32("gpu", 0)
    with pytest.raises(InvalidArgument, match="aligned") as e:
        link.write32("conv", 0x3, 1)
    assert e.value.field == "offset"
    with pytest.raises(OutOfDeviceMemory) as e:
        link.alloc(1 << 30)
    assert e.value.requested == 1 << 30 and e.value.total == dev.dram.size
    with pytest.raises(DeviceTimeout) as e:
        link.wait_irq("conv", 0.05)
    assert e.value.registers == {"KICK": 0, "IRQ": 0}
    link.ping()  # the link is still fine after errors


def test_coherence_is_the_remote_backends(mem):
    dev, link = mem
    src, dst = link.alloc(64, name="src"), link.alloc(64, name="dst")
    assert dst.name == "dst" and dst.phys == dev.buffers[-1].phys
    src.write(0, np.arange(64, dtype=np.uint8))
    src.sync_for_device()
    for reg, val in ((SRC, src.phys), (DST, dst.phys), (LEN, 64), (DELAY_MS, 0)):
        link.write32("conv", reg, val)
    link.write32("conv", KICK, 1)
    link.wait_irq("conv", 1.0)
    with pytest.raises(CoherenceError) as e:
        dst.read()
    assert e.value.buffer == "dst"
    dst.sync_for_cpu(0, 64)
    assert dst.read().tolist() == list(range(1, 65))


def test_buffers_free_and_close(mem):
    dev, link = mem
    bufs = [link.alloc(4096) for _ in range(3)]
    bufs[0].free()
    assert len(dev.alloc_.live) == 2
    link.close()
    assert dev.alloc_.live == {}  # BYE freed the session's buffers
    bufs[1].free()  # harmless after close
    with pytest.raises(DeviceLost, match="closed"):
        link.read32("conv", 0)


def test_wait_longer_than_the_link_timeout(mem):
    dev, link = mem
    link.timeout = 0.05
    assert copy_run(link, DATA[:1000], delay_ms=400, timeout=3.0) == EXPECT[:1000]
    assert link.stats["timeouts"] == 0


class _DropFirstAnswer(Transport):
    """Agent side: loses the first answer to a given message, once."""

    def __init__(self, inner: Transport, code: int) -> None:
        self.inner, self.code, self.name, self.dropped = inner, code, "drop-first", 0

    def read(self, timeout: float) -> bytes:
        return self.inner.read(timeout)

    def write(self, data: bytes) -> None:
        if not self.dropped and lp.decode_frame(data[1:-1]).code == self.code:
            self.dropped += 1
            return
        self.inner.write(data)


def test_lost_wait_irq_answer_is_recovered_by_a_probe_not_the_full_timeout():
    dev = MemDevice()
    client_end, agent_end = PipeTransport.pair()
    stop = threading.Event()
    agent_t = _DropFirstAnswer(agent_end, lp.MESSAGES["WAIT_IRQ"].code)
    t = threading.Thread(target=LinkServer(dev).serve, args=(agent_t, stop), daemon=True)
    t.start()
    link = LinkDevice(client_end, timeout=0.05)
    try:
        t0 = time.monotonic()
        assert copy_run(link, DATA[:100], delay_ms=100, timeout=5.0) == EXPECT[:100]
        assert time.monotonic() - t0 < 2.0 and agent_t.dropped == 1
        assert link.stats["probes"] > 0 and dev.calls["kick"] == 1
    finally:
        link.close()
        stop.set()
        agent_end.close()
        t.join(5)


@pytest.mark.parametrize("faults", [
    "corrupt=0.05,seed=1",
    "drop=0.05,seed=2",
    "dropbyte=0.03,dup=0.05,seed=3",
    "corrupt=0.03,drop=0.03,dup=0.03,delay=0.2,delay_ms=3,seed=4",
])
def test_faulty_link_gives_bit_identical_results(faults):
    dev = MemDevice()
    spec = FaultSpec.parse(faults)
    link = LinkDevice.loopback(dev, inject=spec, timeout=0.05, retries=12, max_payload=8192)
    try:
        for _ in range(3):
            assert copy_run(link, DATA) == EXPECT
        for i in range(50):
            link.write32("conv", BUMP, 1)
            assert link.read32("conv", COUNTER) == i + 1
        assert dev.calls["kick"] == 3 and dev.calls["alloc"] == 6  # nothing ran twice
        assert sum(spec.counts.values()) > 5
        assert link.stats["fast_resends"] + link.stats["timeouts"] > 0
    finally:
        link.close()


def test_dead_link_is_device_lost_not_a_hang():
    dev = MemDevice()
    link = LinkDevice.loopback(dev, timeout=0.05, retries=2)
    link.transport.write = lambda data: None  # a cable pulled out: nothing arrives
    t0 = time.monotonic()
    with pytest.raises(DeviceLost, match="after 2 retries"):
        link.read32("conv", 0)
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(DeviceLost, match="down"):
        link.read32("conv", 0)
    link.close()


# -- URLs -------------------------------------------------------------------------------------


def test_url_errors():
    with pytest.raises(InvalidURL, match="unknown option") as e:
        open_device("serial:///dev/null-nope?speed=9600")
    assert e.value.field == "speed"
    with pytest.raises(InvalidURL):
        open_device("loop://?timeout=fast")
    with pytest.raises(InvalidURL, match="fault"):
        open_device("loop://?inject=corrupt=7")
    with pytest.raises(DeviceNotFound):
        open_device("serial:///dev/does-not-exist?baud=9600")
    with pytest.raises(DeviceNotFound):
        open_device("socket://127.0.0.1:1?timeout=0.2")
    with pytest.raises(InvalidURL, match="socket://") as e:
        open_device("socket://127.0.0.1:1?bogus=1")
    assert e.value.field == "bogus"


def test_loop_url_serves_an_in_process_simulator():
    with open_device("loop://?device=sim://&timeout=2") as dev:
        assert dev.info().backend == "link:sim" and dev.read32("conv", 0x128) & 0xFFFF


# -- real agent processes, real pty and TCP -----------------------------------------------


def _connect(url: str, **opts: object) -> Device:
    query = "&".join(f"{k}={v}" for k, v in {"timeout": 2, **opts}.items())
    return open_device(url + ("&" if "?" in url else "?") + query)


@pytest.fixture(scope="module", params=["tcp:127.0.0.1:0", "pty"])
def mem_agent(request):
    with AgentProcess(factory=FACTORY, port=request.param, env=ENV) as agent:
        yield agent


def test_agent_announces_a_url(mem_agent):
    assert mem_agent.url.startswith(("socket://127.0.0.1:", "serial:///dev/"))


def test_agent_process_full_cycle(mem_agent):
    with _connect(mem_agent.url) as dev:
        assert dev.info().backend == "link:mem"
        assert copy_run(dev, DATA) == EXPECT
        big = RNG.integers(0, 256, 3 << 20, dtype=np.uint8)
        assert copy_run(dev, big) == (big + np.uint8(1)).tobytes()
    with _connect(mem_agent.url) as dev:  # a second session on the same agent
        assert dev.read32("conv", LEN) == 3 << 20


def test_version_mismatch_names_both_versions(mem_agent, monkeypatch):
    monkeypatch.setattr(lp, "VERSION", 7)
    with pytest.raises(LinkError, match="client speaks v7, agent speaks v1") as e:
        _connect(mem_agent.url)
    assert e.value.value == 7 and e.value.limit == 1


def test_agent_with_injected_faults_both_ways():
    with AgentProcess(factory=FACTORY, port="tcp:127.0.0.1:0", env=ENV,
                      args=["--inject", "corrupt=0.03,drop=0.03,dup=0.02,seed=5"]) as agent:
        with _connect(agent.url, timeout=0.1, retries=12, max_payload=16384,
                      inject="corrupt=0.03,drop=0.03,dropbyte=0.02,seed=6") as dev:
            for _ in range(2):
                assert copy_run(dev, DATA) == EXPECT
            for _ in range(30):
                dev.write32("conv", BUMP, 2)
            assert dev.read32("conv", COUNTER) == 60
            assert dev.stats["fast_resends"] + dev.stats["timeouts"] > 0


@pytest.mark.parametrize("port", ["tcp:127.0.0.1:0", "pty"])
def test_killing_the_agent_gives_device_lost(port):
    agent = AgentProcess(factory=FACTORY, port=port, env=ENV)
    dev = _connect(agent.url, timeout=0.5, retries=3)
    buf = dev.alloc(1 << 20)
    errors: list[BaseException] = []
    started = threading.Event()

    def work() -> None:
        try:
            while True:
                buf.view[:] += 1  # every sync pushes the whole buffer
                buf.sync_for_device()
                started.set()
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        assert started.wait(10)
        agent.kill()
        t.join(10)
        assert not t.is_alive(), "client hung after the agent died"
        assert errors and isinstance(errors[0], DeviceLost)
        with pytest.raises(DeviceLost):
            dev.read32("conv", 0)
    finally:
        agent.kill()
        dev.close()


def test_agent_cli_rejects_a_bad_device(capsys):
    assert main(["--device", "bogus://", "--port", "pty"]) == 2
    assert "unknown device URL scheme" in capsys.readouterr().err


# -- the simulator behind an agent process ------------------------------------------------


def _sim_conv(dev: Device, seed: int = 3) -> np.ndarray:
    from dvsdk.driver.cmdlist import CommandList
    from dvsdk.driver.commands import ConvCommand, ConvRun
    from dvsdk.hw.weights import pack_conv_weights

    from .hw import download_tensor, upload, upload_tensor

    rng = np.random.default_rng(seed)
    h, w, c, m, k = 9, 15, 9, 3, 3
    vals = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    x = rng.choice(vals, size=(1, h, w, c)).astype(np.float32)
    wts = rng.choice(vals, size=(m, c, k, k)).astype(np.float32)
    b = rng.choice(vals, size=m).astype(np.float32)
    ib = upload_tensor(dev, x)
    wb = upload(dev, pack_conv_weights(wts, b), name="weights")
    ob = dev.alloc(h * w * m * 2, name="output")
    run = ConvRun.make(m, conv="conv", kernel=k, weights=wb, pads=k // 2, act="relu")
    cmd = ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run],
                      input_circular_offset=1)
    with CommandList(dev) as cl:
        cl.add(cmd)
        cl.commit()
        cl.run()
    return download_tensor(ob, (h, w, m))


@pytest.fixture(scope="module", params=["tcp:127.0.0.1:0", "pty"])
def sim_agent(request):
    pytest.importorskip("dvsdk.sim.device")
    with AgentProcess("sim://", port=request.param, env=ENV) as agent:
        yield agent


def test_conv_through_an_agent_matches_the_local_simulator(sim_agent):
    with open_device("sim://") as local:
        want = _sim_conv(local)
    with _connect(sim_agent.url) as dev:
        assert dev.info().backend == "link:sim"
        got = _sim_conv(dev)
    assert got.tobytes() == want.tobytes() and np.abs(want).sum() > 0


def test_conv_over_a_faulty_link_is_bit_identical(sim_agent):
    with open_device("sim://") as local:
        want = _sim_conv(local, seed=4)
    with _connect(sim_agent.url, timeout=0.1, retries=12,
                  inject="corrupt=0.05,drop=0.05,dup=0.05,seed=8") as dev:
        got = _sim_conv(dev, seed=4)
        assert dev.stats["fast_resends"] + dev.stats["timeouts"] > 0
    assert got.tobytes() == want.tobytes()


def test_cpu_write_without_sync_is_caught_through_the_link(sim_agent):
    from .hw import upload

    with _connect(sim_agent.url) as dev:
        src = upload(dev, np.zeros(64, np.uint8), name="input")
        src.write(10, np.array([1, 2], np.uint8))  # no sync_for_device
        cmd = upload(dev, np.array([0x12345678], "<u4"))  # garbage stream reading `input`
        # point the stream at `input` so the device reads the dirty bytes
        dev.write32("conv", 0x400, src.phys)
        dev.write32("conv", 0x404, 8)
        dev.write32("conv", 0x408, 1)
        with pytest.raises(CoherenceError) as e:
            dev.wait_irq("conv", 2.0)
        assert e.value.buffer == "input" and e.value.start == 10
        cmd.free()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
