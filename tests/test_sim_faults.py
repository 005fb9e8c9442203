"""The simulator under bad register programs and runaway command streams.

Every unit checks its limits before it reads or allocates anything and reports what it
cannot run through SIM_STATUS / SIM_FAULT_ADDR and its interrupt; the watchdog
(``firmware_spec/stream.yaml``, ``simulator_watchdog``) stops a kick that loops or runs
too long with SIM_STATUS = hang and no interrupt, so the driver's wait times out with
that state.  Nothing reaches the host as an exception, a hang or a big allocation.
References: §6.5/§6.6 (unit limits), §9.1/§9.2 via ``tests/refs.py``, §10.2 (packets).
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.driver.stream import jump_packet, write_header, write_packet
from dvsdk.errors import DeviceTimeout
from dvsdk.hw.fp16 import fp24
from dvsdk.hw.spec import SPEC
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.sim import units
from dvsdk.sim.core import SimParams, Watchdog
from dvsdk.sim.device import SimDevice

from .hw import kick_stream, upload, upload_tensor, wait_stream
from .refs import ipu_ref, maximizer_ref, to_whc8

STATUS = SPEC.status
WATCHDOG = SPEC.stream["simulator_watchdog"]


def _r(unit: str, name: str) -> int:
    return SPEC.reg(unit, name)


class Peak:
    """tracemalloc peak of a block."""

    def __enter__(self) -> Peak:
        tracemalloc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


class Traffic:
    """The device's DRAM reads and writes during a block, ``(address, bytes)`` each, seen
    through the memory's ``on_read``/``on_write`` hooks (still passed on to the simulator's
    own): what a unit did, where a clock would only say how long it took."""

    def __init__(self, sim) -> None:
        self.mem = sim.core.mem
        self.reads: list[tuple[int, int]] = []
        self.writes: list[tuple[int, int]] = []

    def __enter__(self) -> Traffic:
        self.saved = on_read, on_write = self.mem.on_read, self.mem.on_write

        def read(addr: int, n: int) -> None:
            self.reads.append((addr, n))
            if on_read:
                on_read(addr, n)

        def write(addr: int, n: int) -> None:
            self.writes.append((addr, n))
            if on_write:
                on_write(addr, n)

        self.mem.on_read, self.mem.on_write = read, write
        return self

    def __exit__(self, *exc: object) -> None:
        self.mem.on_read, self.mem.on_write = self.saved

    @staticmethod
    def within(accesses: list[tuple[int, int]], buf) -> list[tuple[int, int]]:
        return [(a, n) for a, n in accesses if a < buf.phys + buf.size and buf.phys < a + n]


def _start(sim, unit: str, writes: dict[str, int]) -> None:
    sim.write32(unit, _r(unit, "IRQ"), 0)
    for name, value in writes.items():
        sim.write32(unit, _r(unit, name), value & 0xFFFFFFFF)
    sim.write32(unit, _r(unit, "START"), 1)


def _status(sim, unit: str) -> tuple[str, int]:
    sim.wait_irq(unit, 1.0)  # a fault is reported with the interrupt
    return (STATUS.name_of(sim.read32(unit, _r(unit, "SIM_STATUS"))),
            sim.read32(unit, _r(unit, "SIM_FAULT_ADDR")))


# -- IPU and maximizer limits ----------------------------------------------------------------

def _ipu_regs(wr: int, rw: int, rh: int, **kw: int) -> dict[str, int]:
    regs = {name: 0 for name in ("USE_TEX", "TEX_ADDR", "TEX_SIZE", "TEX_FMT", "TEX_FILTER",
                                 "SCALE_W", "SCALE_H", "RD_ADDR", "RD_STRIDE", "WR_STRIDE",
                                 "TRANSPOSE")}
    regs.update({"RECT": rw << 16 | rh, "WR_ADDR": wr, "MODE": 2 << 1,
                 "CONVERSION": 0x01000000})
    regs.update(kw)
    return regs


def test_ipu_out_of_range_programs_are_a_status_before_any_allocation(sim):
    """The issue's program: a 40377x12072 rectangle read bottom-up with a negative stride
    ran 4.4 s and allocated 1.85 GiB before a host exception; a 0xFFFF x 0xFFFF texture
    asked for 16 GiB.  Now each is a status, at once, in a few KiB."""
    buf = sim.alloc(1 << 16)
    wr = buf.phys
    cases = [
        ("bad_config", wr, _ipu_regs(wr, 40377, 12072, MODE=0x08 | 1 << 1,
                                     RD_ADDR=wr, RD_STRIDE=-40377)),
        ("bad_config", wr, _ipu_regs(wr, 4095, 1, USE_TEX=0x00FF0002)),
        ("bad_config", wr + 64, _ipu_regs(wr, 8, 8, USE_TEX=0x00FF0002, TEX_ADDR=wr + 64,
                                          TEX_SIZE=0xFFFFFFFF, TEX_FMT=0x1B << 16)),
        ("bad_config", wr, _ipu_regs(wr, 8, 8, MODE=0x08, RD_ADDR=wr, RD_STRIDE=40000)),
        ("bad_config", wr, _ipu_regs(wr, 8, 8)),                        # no tex, no rd
        ("bad_config", wr, _ipu_regs(wr, 8, 8, MODE=3 << 1 | 0x08, RD_ADDR=wr)),  # fmt_wr 3
        ("misaligned", wr + 8, _ipu_regs(wr, 8, 8, MODE=0x08, RD_ADDR=wr + 8)),
        ("bad_address", wr - (1 << 20), _ipu_regs(wr, 8, 8, MODE=0x08, RD_ADDR=wr,
                                                  WR_ADDR=wr - (1 << 20))),
        # bottom-up rows that start below DRAM
        ("bad_address", wr - 7 * 8 * 3, _ipu_regs(wr, 8, 8, MODE=0x08 | 1, RD_ADDR=wr,
                                                  RD_STRIDE=-8)),
        # a swizzle that is not a permutation, a LUT texture without a palette
        ("bad_config", wr, _ipu_regs(wr, 8, 8, USE_TEX=0x00FF0002, TEX_ADDR=wr,
                                     TEX_SIZE=8 << 16 | 8, TEX_FMT=0,
                                     SCALE_W=fp24(1 / 8), SCALE_H=fp24(1 / 8))),
        ("bad_config", wr, _ipu_regs(wr, 8, 8, USE_TEX=0x00FF0002, TEX_ADDR=wr,
                                     TEX_SIZE=8 << 16 | 8, TEX_FMT=0x1B << 16 | 7,
                                     SCALE_W=fp24(1 / 8), SCALE_H=fp24(1 / 8))),
    ]
    for want, fault, regs in cases:
        sim.reset()
        with Peak() as p, Traffic(sim) as t:
            _start(sim, "ipu", regs)
        assert _status(sim, "ipu") == (want, fault & 0xFFFFFFFF), (regs, sim.errors[-1])
        assert t.reads == t.writes == [] and p.bytes < 1 << 20, (regs, t.reads, p.bytes)
        assert sim.errors[-1].startswith(f"ipu: {want}")
    buf.free()


def test_maximizer_out_of_range_programs_are_a_status_before_any_allocation(sim):
    buf = sim.alloc(1 << 16)
    a = buf.phys
    px = (1 << 24) - 1  # the largest SIZE can say: 255 classes of it are 8.5 GB
    cases = [
        ("bad_address", a, {"SIZE": 255 << 24 | px, "IN_ADDR": a, "OUT_ADDR": a,
                            "BLOCK_SIZE": px * 16}),
        ("bad_config", a, {"SIZE": 1 << 24 | 64, "IN_ADDR": a, "OUT_ADDR": a,
                           "BLOCK_SIZE": 128}),
        ("bad_config", a, {"SIZE": 4 << 24 | 64, "IN_ADDR": a, "OUT_ADDR": a,
                           "BLOCK_SIZE": 7}),
        ("misaligned", a + 2, {"SIZE": 4 << 24 | 64, "IN_ADDR": a + 2, "OUT_ADDR": a,
                               "BLOCK_SIZE": 512}),
    ]
    for want, fault, regs in cases:
        sim.reset()
        with Peak() as p, Traffic(sim) as t:
            _start(sim, "maximizer", regs)
        assert _status(sim, "maximizer") == (want, fault), regs
        assert t.reads == t.writes == [] and p.bytes < 1 << 20, (regs, t.reads, p.bytes)
    buf.free()


def test_a_legal_ipu_program_runs_in_bands_of_rows(sim, monkeypatch):
    """Rendered a band of rows at a time (here 3 rows, so 5 bands), the result is the
    reference's; with the largest legal texture the memory follows the rectangle."""
    monkeypatch.setattr(units, "CHUNK_BYTES", 3 * 16 * 4 * 4 * 6)
    rng = np.random.default_rng(4)
    tw, th, rw, rh = 21, 13, 16, 14
    tex = rng.integers(0, 256, (th, tw, 3), np.uint8)
    tb = upload(sim, tex.tobytes())
    out = sim.alloc(rw * rh * 6)
    regs = _ipu_regs(out.phys, rw, rh, USE_TEX=0x00FF0002, TEX_ADDR=tb.phys,
                     TEX_SIZE=tw << 16 | th, TEX_FMT=(2 << 6 | 1 << 4 | 0 << 2 | 3) << 16 | 1,
                     TEX_FILTER=1, SCALE_W=fp24(1 / tw), SCALE_H=fp24(1 / th),
                     CONVERSION=0x01000000)
    _start(sim, "ipu", regs)
    assert _status(sim, "ipu") == ("ok", 0)
    out.sync_for_cpu()
    got = out.read().view(np.float16).reshape(rh, rw, 3)
    np.testing.assert_array_equal(got, ipu_ref(tex, rw, rh, swizzle=(2, 1, 0)))
    monkeypatch.undo()
    # the largest texture (4095 x 4095 RGBA, 67 MB in DRAM) into a 4094 x 8 rectangle
    big = sim.alloc(4095 * 4095 * 4)
    wr = sim.alloc(4094 * 8 * 4)
    regs = _ipu_regs(wr.phys, 4094, 8, USE_TEX=0x00FF0002, TEX_ADDR=big.phys,
                     TEX_SIZE=4095 << 16 | 4095, TEX_FMT=0x1B << 16, TEX_FILTER=7,
                     SCALE_W=fp24(1 / 4095), SCALE_H=fp24(1 / 4095), MODE=0)
    with Peak() as p:
        _start(sim, "ipu", regs)
    assert _status(sim, "ipu") == ("ok", 0)
    assert p.bytes < 8 << 20, p.bytes  # before: the texture copied and decoded, > 300 MB


def test_a_legal_maximizer_program_runs_in_chunks_of_pixels(sim, monkeypatch):
    monkeypatch.setattr(units, "CHUNK_BYTES", 8 * 19 * 50)  # 50 pixels a chunk
    rng = np.random.default_rng(6)
    h, w, nclass = 13, 17, 19
    s = rng.choice([-1.0, 0.0, 0.5, 1.0, np.inf], size=(h, w, nclass))
    xb = upload(sim, to_whc8(s))
    ob = sim.alloc(256)
    px = w * h
    _start(sim, "maximizer", {"SIZE": nclass << 24 | px, "IN_ADDR": xb.phys,
                              "OUT_ADDR": ob.phys, "BLOCK_SIZE": px * 8 * 2})
    assert _status(sim, "maximizer") == ("ok", 0)
    ob.sync_for_cpu()
    np.testing.assert_array_equal(ob.read(0, px), maximizer_ref(s))


# -- the watchdog ---------------------------------------------------------------------------

def _kick(sim, words, length8: int | None = None, timeout: float = 0.01):
    """Kick a stream; ('irq', status) or ('timeout', DeviceTimeout)."""
    words = np.asarray(words, np.uint32)
    buf = sim.alloc(max(words.nbytes, 8) + 8, align=64)
    buf.write(0, words.astype("<u4"))
    buf.sync_for_device()
    try:
        kick_stream(sim, buf.phys, -(-words.nbytes // 8) if length8 is None else length8)
        try:
            wait_stream(sim, timeout)
        except DeviceTimeout as e:
            return "timeout", e
        return "irq", STATUS.name_of(sim.read32("conv", _r("conv", "SIM_STATUS")))
    finally:
        buf.free()


def _self_loop(sim, body=()) -> tuple[np.ndarray, object]:
    """A chunk whose last packet jumps back to its own start (a stream that never ends)."""
    body = np.asarray(body, np.uint32)
    n = body.size + 2 + body.size % 2
    buf = sim.alloc(4 * n, align=64)
    words = np.concatenate([body, np.zeros(n - body.size - 2, np.uint32),
                            np.array(jump_packet(4 * n, buf.phys), np.uint32)])
    buf.write(0, words.astype("<u4"))
    buf.sync_for_device()
    return words, buf


def test_watchdog_limits_are_the_documented_ones():
    wd = Watchdog()
    assert (wd.stream_words, wd.stream_steps, wd.commands, wd.kick_seconds, wd.work_bytes) == (
        WATCHDOG["max_stream_words"], WATCHDOG["max_stream_steps"], WATCHDOG["max_commands"],
        WATCHDOG["max_kick_seconds"], WATCHDOG["max_work_bytes"])
    core = SimDevice(SimParams(clock_mhz=100), dram_mb=16).core
    assert core.kick_cycle_limit == int(WATCHDOG["max_kick_seconds"] * 100e6)
    assert core.work_limit == min(WATCHDOG["max_work_bytes"], 4 * (16 << 20))


def test_a_jump_loop_is_a_hang_the_driver_times_out_on(sim):
    """At the default limits: the loop that hung the Python process ends in a fraction of
    a second; the driver's wait times out showing hang and where the stream was."""
    words, loop = _self_loop(sim)
    with Traffic(sim) as t:
        kick_stream(sim, loop.phys, words.size // 2)  # (memory: see test_sim_fuzz.py)
    with pytest.raises(DeviceTimeout) as e:
        wait_stream(sim, 0.01)
    assert f"SIM_STATUS=7 (hang) SIM_FAULT_ADDR={loop.phys:#010x}" in str(e.value)
    assert e.value.registers["IRQ"] == 0
    # stopped by the watchdog's packet budget, having fetched the looping chunk (a packet
    # at least each time) no more often than that, and once to find it spent
    steps = WATCHDOG["max_stream_steps"]
    assert f"watchdog: {steps} packets decoded" in sim.errors[-1]
    assert t.reads and {a for a, _ in t.reads} == {loop.phys} and len(t.reads) <= steps + 1
    sim.reset()
    assert sim.read32("conv", _r("conv", "SIM_STATUS")) == 0


def _tiny_conv(sim):
    """The cheapest conv command: 1x1x8 input, one 1x1 filter."""
    x = upload_tensor(sim, np.ones((1, 1, 8), np.float32))
    w = upload(sim, pack_conv_weights(np.ones((1, 8, 1, 1), np.float32),
                                      np.zeros(1, np.float32)))
    out = sim.alloc(64)
    cmd = ConvCommand(input_buf=x, output_buf=out, w=1, h=1, c=8,
                      runs=[ConvRun.make(1, conv="conv", kernel=1, weights=w)])
    cl = CommandList(sim)
    cl.add(cmd)
    cl.commit()
    chunk = cl.stream.chunks[0]
    chunk.sync_for_cpu()
    return cl, chunk.read(0, cl.stream.lengths[0]).view("<u4")[:-2].copy()  # no irq write


def test_watchdog_bounds_commands_words_and_cycles_of_a_kick():
    wd = Watchdog(commands=50)
    sim = SimDevice(SimParams(clock_mhz=1.0, watchdog=wd), dram_mb=32)
    try:
        cl, command = _tiny_conv(sim)
        # a loop around a valid command: stopped after `commands` commands
        words, loop = _self_loop(sim, command)
        kind, err = _kick(sim, np.array(jump_packet(4 * words.size, loop.phys), np.uint32))
        assert kind == "timeout" and "SIM_STATUS=7 (hang)" in str(err)
        assert "more than 50 conv commands" in sim.errors[-1]
        assert sim.core.kick_commands == 51
        # a stream longer than the word budget: refused before it is copied
        huge = (wd.stream_words * 4 + 8) // 8
        with Peak() as p:
            kind, err = _kick(sim, write_packet(SPEC.stream_reg("irq"), 1), length8=huge)
        assert kind == "timeout" and "stream words fetched" in sim.errors[-1]
        assert p.bytes < 1 << 20
        # simulated time: a batch whose cycles pass 2 s at 1 MHz is not computed at all
        batch = 10000  # ~260 cycles a sample
        xin, yout = upload(sim, np.zeros(batch * 16, np.uint8)), sim.alloc(batch * 2)
        slow = cl.commands[0].replace(input_circular_offset=batch, input_buf=xin,
                                      output_buf=yout)
        cl2 = CommandList(sim)
        cl2.add(slow)
        cl2.commit()
        with Traffic(sim) as t, pytest.raises(DeviceTimeout,
                                              match="SIM_STATUS=7 \\(hang\\)"):
            cl2.run(timeout=0.01)
        assert "take the kick past 2000000 cycles" in sim.errors[-1]
        assert t.reads and Traffic.within(t.reads, xin) == Traffic.within(t.writes, yout) == []
        sim.reset()
        cl.run()  # the device works again
    finally:
        sim.close()


def test_host_memory_of_one_command_is_bounded_before_allocation():
    """A deconv with stride 255 whose max-pool shrinks it back: its output fits in DRAM,
    its intermediate would be 255^2 times the input.  Reported as bad_config."""
    from dvsdk.driver.stream import config_image

    sim = SimDevice(SimParams(), dram_mb=16)
    try:
        x = sim.alloc(64 * 64 * 8 * 2)
        w = sim.alloc(1 << 16)
        out = sim.alloc(1 << 20)
        run = ConvRun.make(8, conv="conv", kernel=1, weights=w)
        run = ConvRun(**{**run.__dict__, "conv_enable": 5, "conv_stride": 0xFFFF,
                         "pool_enable": 1, "pool_size": 0xFFFF, "pool_stride": 0xFFFF})
        cmd = ConvCommand(input_buf=x, output_buf=out, w=64, h=64, c=8, runs=[run])
        image = np.frombuffer(config_image(cmd, 1), "<u4")
        words = np.concatenate([
            write_packet(SPEC.stream_reg("cfg_addr"), 0x2000),
            [write_header(SPEC.stream_reg("cfg_data"), image.size)], image,
            write_packet(SPEC.stream_reg("start"), 1), write_packet(SPEC.stream_reg("irq"), 1),
        ]).astype(np.uint32)
        with Peak() as p:
            kind, status = _kick(sim, words)
        assert (kind, status) == ("irq", "bad_config"), sim.errors[-1:]
        assert "bytes of host memory" in sim.errors[-1] and p.bytes < 4 << 20
    finally:
        sim.close()
