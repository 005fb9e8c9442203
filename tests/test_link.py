"""The dvlink backend: wire format, retries, idempotency, real pty and TCP with a real agent.

``MemDevice`` is a small Device written for these tests (registers in a dict,
DMA with a separate "DRAM" behind a CPU view, a copy engine that raises an
interrupt), so the link is tested independently of the simulator; the
simulator tests at the end drive a real convolution through an agent process.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest

from dvsdk.driver.device import UNITS, WINDOWS, open_device
from dvsdk.errors import (
    AuthenticationError,
    CoherenceError,
    DeviceLost,
    DeviceNotFound,
    DeviceTimeout,
    InvalidArgument,
    InvalidURL,
    OutOfDeviceMemory,
)
from dvsdk.link import protocol as lp
from dvsdk.link.client import LinkDevice
from dvsdk.link.server import Limits, LinkServer
from dvsdk.link.transport import FaultSpec, PipeTransport, Transport

from .linkdev import (
    BUMP,
    COUNTER,
    DATA,
    DELAY_MS,
    DST,
    EXPECT,
    GO,
    LEN,
    SRC,
    MemDevice,
    copy_run,
    wait_until,
)


@pytest.fixture
def mem():
    dev = MemDevice()
    link = LinkDevice.loopback(dev, timeout=0.5)
    yield dev, link
    link.close()


# -- wire format ------------------------------------------------------------------------------


def test_spec_drives_header_and_messages():
    assert lp.HEADER.size == 12 and lp.FRAME_OVERHEAD == 16 and lp.VERSION == 4
    assert lp.MESSAGES["READ32"].code == 0x10 and lp.BY_CODE[0x22].name == "MEM_WRITE"
    assert lp.UNITS == WINDOWS  # the units and the R5 kick's ipi and shm (v3)
    sample = {"u8": 7, "u16": 513, "u32": 0xDEADBEEF, "u64": 1 << 40, "i64": -5, "f64": 2.5,
              "unit": "ipu", "bytes": b"\x00\xc0\xdb", "str": "näme", "json": {"a": [1, 2]},
              "b16": bytes(range(16)), "b32": bytes(range(32))}
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
        {"version": lp.VERSION, "max_payload": 4096, "nonce": 42, "client": "t"}))[1:-1])
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
    assert info.extra["link"]["protocol"] == lp.VERSION
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
    assert e.value.registers == {"GO": 0, "IRQ": 0}
    link.ping()  # the link is still fine after errors


def test_coherence_is_the_remote_backends(mem):
    dev, link = mem
    src, dst = link.alloc(64, name="src"), link.alloc(64, name="dst")
    assert dst.name == "dst" and dst.phys == dev.buffers[-1].phys
    src.write(0, np.arange(64, dtype=np.uint8))
    src.sync_for_device()
    for reg, val in ((SRC, src.phys), (DST, dst.phys), (LEN, 64), (DELAY_MS, 0)):
        link.write32("conv", reg, val)
    link.write32("conv", GO, 1)
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
    timed_out = _requests_timed_out(link)
    assert copy_run(link, DATA[:1000], delay_ms=400, timeout=3.0) == EXPECT[:1000]
    # the 400 ms wait was never taken for a lost request (another request may be, when a
    # loaded machine keeps the agent thread from answering within the 50 ms)
    assert "WAIT_IRQ" not in timed_out


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


def _requests_timed_out(link: LinkDevice) -> list[str]:
    """The messages ``link`` resends because their time ran out (a resend that is not a
    fast one: the engine's timeout path), as the engine decides them."""
    names: list[str] = []
    real = link.engine._resend

    def resend(q, pending, front, *, fast):
        if not fast:
            names.append(q.msg.name)
        return real(q, pending, front, fast=fast)

    link.engine._resend = resend
    return names


def test_lost_wait_irq_answer_is_recovered_by_a_probe_not_the_full_timeout():
    dev = MemDevice()
    client_end, agent_end = PipeTransport.pair()
    stop = threading.Event()
    agent_t = _DropFirstAnswer(agent_end, lp.MESSAGES["WAIT_IRQ"].code)
    t = threading.Thread(target=LinkServer(dev).serve, args=(agent_t, stop), daemon=True)
    t.start()
    link = LinkDevice(client_end, timeout=0.05)
    timed_out = _requests_timed_out(link)
    try:
        assert copy_run(link, DATA[:100], delay_ms=100, timeout=5.0) == EXPECT[:100]
        assert agent_t.dropped == 1
        assert link.stats["probes"] > 0 and dev.calls["kick"] == 1
        # the WAIT_IRQ was never declared overdue: its 5 s ran out on no resend
        assert "WAIT_IRQ" not in timed_out
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
    timed_out = _requests_timed_out(link)
    before = link.stats["timeouts"]
    with pytest.raises(DeviceLost, match="after 2 retries"):
        link.read32("conv", 0)
    # bounded by the retries, not the clock: two resends on timeout, the third timeout ends it
    assert timed_out == ["READ32", "READ32"] and link.stats["timeouts"] - before == 3
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




# -- timeouts from clients: NaN, negative, inf (issue 10 §5) ----------------------------------


@pytest.mark.parametrize("bad", [math.nan, -1.0, "soon"])
def test_client_refuses_nan_and_negative_timeouts_before_sending(mem, bad):
    dev, link = mem
    sent = link.stats["frames_out"]
    with pytest.raises(InvalidArgument) as e:
        link.wait_irq("conv", bad)
    assert e.value.field == "timeout" and link.stats["frames_out"] == sent


def _request(srv: LinkServer, seq: int, message: str, /, **fields) -> lp.Frame:
    msg = lp.MESSAGES[message]
    out = srv.handle(lp.encode_frame(msg.code, seq, msg.request.pack(fields))[1:-1])
    return lp.decode_frame(out[1:-1])


def _hello(srv: LinkServer) -> None:
    _request(srv, 1, "HELLO", version=lp.VERSION, max_payload=4096, nonce=7, client="t")


@pytest.mark.parametrize("timeout", [math.nan, -0.5])
def test_agent_refuses_nan_and_negative_timeouts(timeout):
    srv = LinkServer(MemDevice())
    _hello(srv)
    err = lp.error_from_payload(_request(srv, 2, "WAIT_IRQ", unit="conv",
                                         timeout=timeout).payload)
    assert isinstance(err, InvalidArgument) and err.field == "timeout"


@pytest.mark.parametrize("timeout", [math.inf, 1e300])
def test_infinite_timeouts_are_capped_not_overflow(timeout):
    # Event.wait(inf) raises OverflowError; the agent caps at max_wait, the client too.
    mem = MemDevice()
    waits: list[float] = []
    real_wait = mem.wait_irq
    mem.wait_irq = lambda unit, t: waits.append(t) or real_wait(unit, t)
    srv = LinkServer(mem, limits=Limits(max_wait=0.2))
    _hello(srv)
    err = lp.error_from_payload(_request(srv, 2, "WAIT_IRQ", unit="conv",
                                         timeout=timeout).payload)
    assert type(err) is DeviceTimeout and "0.2 s" in str(err)
    # the device was asked to wait 0.2 s in all, in slices (each one at most wait_slice)
    assert waits and max(waits) <= srv.limits.wait_slice and sum(waits) <= 0.2 + 1e-3
    dev = MemDevice()
    link = LinkDevice.loopback(dev, timeout=0.5)
    link.server.limits.max_wait = link.caps["max_wait"] = 0.2
    try:
        with pytest.raises(DeviceTimeout):
            link.wait_irq("conv", timeout)
        dev.regs["conv", LEN] = 0
        link.write32("conv", GO, 1)
        link.wait_irq("conv", timeout)  # an interrupt that comes is taken as usual
    finally:
        link.close()


# -- threads (issue 10 §5: the link device is shared by threads) -------------------------------


class _StoreDuringSend(Transport):
    """Client side: the first MEM_WRITE frame is "overtaken" by a CPU store from another
    thread, made while the frame is on its way."""

    def __init__(self, inner: Transport, store) -> None:
        self.inner, self.store, self.name, self.done = inner, store, "store-during-send", False

    def read(self, timeout: float) -> bytes:
        return self.inner.read(timeout)

    def write(self, data: bytes) -> None:
        self.inner.write(data)
        if not self.done and lp.decode_frame(data[1:-1]).code == lp.MESSAGES["MEM_WRITE"].code:
            self.done = True
            self.store()

    def peer_gone(self) -> bool:
        return self.inner.peer_gone()

    def close(self) -> None:
        self.inner.close()


def test_a_store_racing_with_a_push_is_sent_next_time():
    dev = MemDevice()
    client_end, agent_end = PipeTransport.pair()
    srv = LinkServer(dev)
    stop = threading.Event()
    t = threading.Thread(target=srv.serve, args=(agent_end, stop), daemon=True)
    t.start()
    holder = {}
    tr = _StoreDuringSend(client_end, lambda: holder["buf"].view.__setitem__(5, 99))
    link = LinkDevice(tr, timeout=0.5)
    try:
        buf = holder["buf"] = link.alloc(64)
        buf.view[:] = 7
        buf.sync_for_device()  # the store lands after the bytes were copied for sending
        buf.sync_for_device()  # ... so this sync must send it
        assert srv.buffers[buf.handle].view.tolist() == buf.view.tolist()
        assert srv.buffers[buf.handle].view[5] == 99
    finally:
        link.close()
        stop.set()
        agent_end.close()
        t.join(5)


def test_threads_share_one_link_device():
    dev = MemDevice()
    link = LinkDevice.loopback(dev, timeout=2.0)
    errors: list[BaseException] = []
    results: dict[int, bool] = {}

    def regs(k: int) -> None:
        try:
            for i in range(150):
                link.write32("ipu", 0x100 + 4 * k, i)
                assert link.read32("ipu", 0x100 + 4 * k) == i
        except BaseException as exc:
            errors.append(exc)

    def memory(k: int) -> None:
        try:
            rng = np.random.default_rng(k)
            buf = link.alloc(20_000)
            for _ in range(20):
                data = rng.integers(0, 256, buf.size, dtype=np.uint8)
                buf.write(0, data)
                buf.sync_for_device()
                buf.view[:] = 0
                buf.sync_for_cpu()
                assert np.array_equal(buf.view, data)
            results[k] = True
            buf.free()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=f, args=(k,)) for k in range(3) for f in (regs, memory)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads)
        assert not errors, errors[0]
        assert len(results) == 3
        assert link.stats["timeouts"] == 0
    finally:
        link.close()


# -- authentication, in process ------------------------------------------------------------


class _Tap(Transport):
    """Records every byte written through it."""

    def __init__(self, inner: Transport, log: bytearray) -> None:
        self.inner, self.log, self.name = inner, log, "tap"

    def read(self, timeout: float) -> bytes:
        return self.inner.read(timeout)

    def write(self, data: bytes) -> None:
        self.log += data
        self.inner.write(data)

    def peer_gone(self) -> bool:
        return self.inner.peer_gone()

    def close(self) -> None:
        self.inner.close()


def test_the_secret_is_proved_never_sent():
    secret = b"not-on-the-wire-" + bytes(range(65, 91))
    wire = bytearray()
    client_end, agent_end = PipeTransport.pair()
    srv = LinkServer(MemDevice(), secret=secret)
    stop = threading.Event()
    t = threading.Thread(target=srv.serve, args=(_Tap(agent_end, wire), stop), daemon=True)
    t.start()
    try:
        link = LinkDevice(_Tap(client_end, wire), timeout=0.5, secret=secret)
        assert link.ping(b"x") == b"x" and srv.authenticated
        link.close()
        assert wire and b"not-on-the-wire" not in wire and secret[-16:] not in wire
    finally:
        stop.set()
        agent_end.close()
        t.join(5)


def test_nothing_but_the_handshake_before_auth():
    srv = LinkServer(MemDevice(), secret=b"k" * 16)
    _hello(srv)
    for seq, (message, fields) in enumerate((("READ32", {"unit": "conv", "offset": 0}),
                                             ("CAPS", {}),
                                             ("ALLOC", {"nbytes": 64, "align": 64,
                                                        "name": ""})), start=2):
        err = lp.error_from_payload(_request(srv, seq, message, **fields).payload)
        assert isinstance(err, AuthenticationError) and err.value == message
    err = lp.error_from_payload(_request(srv, 9, "AUTH", proof=bytes(32),
                                         challenge=bytes(16)).payload)
    assert isinstance(err, AuthenticationError) and not srv.authenticated


class _AgentClock:
    """The agent's ``time`` module with a monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleep, self.time = time.sleep, time.time

    def monotonic(self) -> float:
        return self.now


def test_a_session_older_than_the_limit_is_ended_with_the_reason(monkeypatch):
    from dvsdk.link import server as server_module

    clock = _AgentClock()
    monkeypatch.setattr(server_module, "time", clock)
    dev = MemDevice()
    client_end, agent_end = PipeTransport.pair()
    srv = LinkServer(dev, limits=Limits(session_timeout=0.4))
    stop = threading.Event()
    t = threading.Thread(target=srv.serve, args=(agent_end, stop), daemon=True)
    t.start()
    link = LinkDevice(client_end, timeout=0.5)
    try:
        buf = link.alloc(64)
        for _ in range(2):  # busy, not idle: the session limit still applies
            clock.now += 0.15
            link.ping()
        clock.now += 0.3
        wait_until(lambda: srv.session is None, "the agent ends the session")
        with pytest.raises(DeviceLost, match="ended the session: session longer than 0.4 s"):
            link.ping()
        assert srv.session is None and not dev.alloc_.live and buf.handle
    finally:
        link.close()
        stop.set()
        agent_end.close()
        t.join(5)


# -- register values (issue 25 §3) ------------------------------------------------------------


@pytest.mark.parametrize("url", ["sim://", "loop://?device=sim://"])
@pytest.mark.parametrize("value", [1 << 32, (1 << 32) + 5, -1, 1 << 40])
def test_a_register_value_outside_32_bits_is_refused_not_truncated(url, value):
    """sim:// stored ``value & 0xFFFFFFFF`` (2^32 + 5 became 5), locally and over the link;
    now both refuse it as the board's mmio does, and the register keeps its value."""
    with open_device(url) as dev:
        dev.write32("ipu", 0x100, 7)
        with pytest.raises(InvalidArgument) as e:
            dev.write32("ipu", 0x100, value)
        assert (e.value.field, e.value.value, e.value.limit) == ("value", value,
                                                                 "0..0xFFFFFFFF")
        assert dev.read32("ipu", 0x100) == 7


def test_the_agent_refuses_a_value_outside_32_bits_whatever_its_device_does(mem):
    dev, link = mem  # MemDevice masks values itself: the agent checks before it
    raw = lp.encode_frame(lp.MESSAGES["WRITE32"].code, 1, lp.MESSAGES["WRITE32"].request.pack(
        {"unit": "conv", "offset": BUMP, "value": 1 << 33}))
    srv = LinkServer(dev)
    srv.handle(lp.encode_frame(lp.MESSAGES["HELLO"].code, 0, lp.MESSAGES["HELLO"].request.pack(
        {"version": lp.VERSION, "max_payload": 4096, "nonce": 1, "client": "t"}))[1:-1])
    err = lp.decode_frame(srv.handle(raw[1:-1])[1:-1])
    assert err.is_error and "32-bit" in lp.error_from_payload(err.payload).message
    assert dev.regs["conv", COUNTER] == 0
