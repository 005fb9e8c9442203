"""Seeded command-stream fuzzing of the simulator, bounded in work and memory.

Random and mutated streams (jump loops, huge counts and lengths, bad packets, mutated
configuration images of a real compiled network and of a multi-run command) each end in
an interrupt with a status, or in the driver's timeout with SIM_STATUS = hang, within the
watchdog's budgets (conv commands, simulated cycles), and the whole run stays within a
memory bound (tracemalloc peak).
Before the watchdog, jump loops hung the Python process and memory grew without bound.

The watchdog is tightened here (``Watchdog`` below) so that each runaway stream costs
milliseconds; ``tests/test_sim_faults.py`` checks the default limits.
"""

from __future__ import annotations

import tracemalloc
from collections import Counter

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.driver.stream import jump_packet, write_header
from dvsdk.errors import DeviceTimeout
from dvsdk.hw.spec import SPEC
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.sim.core import SimParams, Watchdog
from dvsdk.sim.device import SimDevice

from .conftest import ROOT
from .hw import download_tensor, kick_stream, upload, upload_tensor, wait_stream

STATUS = SPEC.status
CONFIG_WORDS = SPEC.struct("conv_config").size // 4
RUN_WORDS = SPEC.struct("conv_config_run").size // 4
KINDS = ("random", "headers", "mutated", "loop", "huge", "image")
STREAMS = 360
MEMORY_PEAK = 96 << 20  # bytes traced over the whole run (DRAM itself is 16 MiB)


def _reg(name: str) -> int:
    return SPEC.reg("conv", name)


class Fuzzer:
    def __init__(self, sim: SimDevice, seed: int) -> None:
        self.sim = sim
        self.rng = np.random.default_rng(seed)
        self.scratch = sim.alloc(1 << 16, name="scratch")
        self.net = dvsdk.load(ROOT / "examples" / "models" / "digits.bin", sim)
        self.net.run(np.zeros((1, 1, 16, 16), np.float32))
        self.sources = [self._words(cl) for cl in self.net._lists] + [self._multirun()]
        self.work: list[tuple[int, int]] = []  # (conv commands, cycles) of each kick
        self.hangs: list[str] = []  # why each hang was stopped

    def _words(self, cl: CommandList) -> np.ndarray:
        chunk, n = cl.stream.chunks[0], cl.stream.lengths[0]
        chunk.sync_for_cpu(0, n)
        return chunk.read(0, n).view("<u4").copy()

    def _multirun(self) -> np.ndarray:
        rng = np.random.default_rng(1)
        x = upload_tensor(self.sim, rng.choice([-1.0, 1.0], (12, 10, 8)).astype(np.float32))
        w = upload(self.sim, pack_conv_weights(rng.choice([-1.0, 1.0], (8, 8, 3, 3)),
                                               np.zeros(8, np.float32)))
        out = self.sim.alloc(12 * 10 * 8 * 2 * 2)
        runs = [ConvRun.make(8, conv="conv", kernel=3, weights=w, pads=1, act="relu"),
                ConvRun.make(8, pool="max", pool_size=2, pool_stride=2)]
        cl = CommandList(self.sim)
        cl.add(ConvCommand(input_buf=x, output_buf=out, w=10, h=12, c=8, runs=runs, topo=2))
        cl.commit()
        return self._words(cl)

    # -- generators ----------------------------------------------------------------------
    def _u32(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)

    def random(self) -> tuple[np.ndarray, int | None]:
        return self._u32(int(self.rng.integers(1, 96))), None

    def headers(self) -> tuple[np.ndarray, int | None]:
        words = self._u32(int(self.rng.integers(2, 96)))
        for i in self.rng.integers(0, words.size, 4):
            words[i] = (words[i] & 0xFFFF0FFA) | 0xF004   # plausible write packets
        return words, None

    def mutated(self) -> tuple[np.ndarray, int | None]:
        words = self.sources[int(self.rng.integers(len(self.sources)))].copy()
        for _ in range(int(self.rng.integers(1, 4))):
            i = int(self.rng.integers(words.size))
            op = int(self.rng.integers(5))
            if op == 0:
                words[i] = self._u32(1)[0]
            elif op == 1:
                words[i] ^= np.uint32(1 << int(self.rng.integers(32)))
            elif op == 2:  # another word count in a header
                words[i] = (words[i] & 0xFFFF0007) | 0xF000 | int(self.rng.integers(512)) << 3
            elif op == 3:
                words = np.delete(words, i)
            else:
                words = np.insert(words, i, self._u32(1))
        return words, None

    def loop(self) -> tuple[np.ndarray, int | None]:
        base = self.scratch.phys
        body = self.sources[int(self.rng.integers(len(self.sources)))][:-2]
        kind = int(self.rng.integers(4))
        if kind == 0:    # a chunk jumping to itself
            return np.array(jump_packet(8, base), np.uint32), None
        if kind == 1:    # a loop around valid commands
            n = body.size + 2 + body.size % 2
            return np.concatenate([body, np.zeros(n - body.size - 2, np.uint32),
                                   np.array(jump_packet(4 * n, base), np.uint32)]), None
        if kind == 2:    # two chunks jumping to each other
            return np.array(jump_packet(16, base + 16) + [0, 0] + jump_packet(16, base),
                            np.uint32), None
        target = int(self.rng.integers(0, 2**32)) & ~7  # anywhere, any length
        return np.array(jump_packet(8 * int(self.rng.integers(1, 2**28)), target),
                        np.uint32), None

    def huge(self) -> tuple[np.ndarray, int | None]:
        body = self.sources[int(self.rng.integers(len(self.sources)))].copy()
        kind = int(self.rng.integers(3))
        if kind == 0:    # a stream length far past the buffer, or past DRAM
            return body, int(self.rng.choice([1 << 20, 0xFFFFFFFF, int(self.rng.integers(
                1, 2**32))]))
        if kind == 1:    # a 512-word packet that runs past the chunk
            return np.concatenate([body[:-2], [write_header(0x21, 512)]]).astype(np.uint32), \
                None
        words = body.copy()  # the biggest batch and dimensions in the first image
        words[3 + 1] = 0xFFFF_FFFF
        words[3 + 4] = (words[3 + 4] & 0xFFFF0000) | int(self.rng.choice([0x7FFF, 0xFFFF]))
        return words, None

    def image(self) -> tuple[np.ndarray, int | None]:
        words = self.sources[int(self.rng.integers(len(self.sources)))].copy()
        starts = [i + 1 for i in range(words.size - 1)
                  if words[i] & 0xFFFF0007 == (0x21 << 16 | 4)]   # CFG_DATA packet headers
        start = starts[int(self.rng.integers(len(starts)))]
        n = ((int(words[start - 1]) >> 3) & 0x1FF) + 1
        for _ in range(int(self.rng.integers(1, 4))):
            i = start + int(self.rng.integers(min(n, CONFIG_WORDS + 2 * RUN_WORDS)))
            half = int(self.rng.integers(2)) * 16
            value = int(self.rng.choice([0, 1, 2, 3, 0xFF, 0x101, 0x7FFF, 0xFFFF,
                                         int(self.rng.integers(0, 2**16))]))
            words[i] = (int(words[i]) & ~(0xFFFF << half) | value << half) & 0xFFFFFFFF
        return words, None

    # -- running ---------------------------------------------------------------------
    def kick(self, words: np.ndarray, length8: int | None) -> str:
        sim = self.sim
        self.scratch.write(0, words[: self.scratch.size // 4].astype("<u4"))
        self.scratch.sync_for_device()
        kick_stream(sim, self.scratch.phys,
                    -(-words.nbytes // 8) if length8 is None else length8)
        core = sim.core  # what the kick did, within the watchdog's budgets
        self.work.append((core.kick_commands, core.totals.cycles if core.totals else 0))
        status = STATUS.name_of(sim.read32("conv", _reg("SIM_STATUS")))
        try:
            wait_stream(sim, 0.001)
        except DeviceTimeout as e:
            assert status == "hang" and "SIM_STATUS=7 (hang)" in str(e), (status, str(e))
            self.hangs.append(sim.errors[-1])
            sim.reset()
            return "timeout: hang"
        return f"irq: {status}"


@pytest.mark.parametrize("seed", [10])
def test_streams_end_in_a_status_or_a_timeout_within_bounds(seed):
    wd = Watchdog(stream_words=1 << 16, stream_steps=1024, commands=32, kick_seconds=0.002)
    sim = SimDevice(SimParams(watchdog=wd), dram_mb=16, coherence="off")
    try:
        fuzz = Fuzzer(sim, seed)
        outcomes: Counter = Counter()
        tracemalloc.start()
        for i in range(STREAMS):
            kind = KINDS[i % len(KINDS)]
            words, length8 = getattr(fuzz, kind)()
            outcome = fuzz.kick(words, length8)
            outcomes[kind, outcome] += 1
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # each kick's work stayed within the watchdog's budgets: at most one command past
        # its count (the one it stops) and no computed command past its simulated time
        assert len(fuzz.work) == STREAMS
        assert max(n for n, _ in fuzz.work) <= wd.commands + 1
        assert max(c for _, c in fuzz.work) <= sim.core.kick_cycle_limit
        assert sum(n for n, _ in fuzz.work) > 0  # (and the fuzzer does reach commands)
        # every runaway stream was stopped by one of the watchdog's budgets
        assert fuzz.hangs and all(h.startswith("conv: hang: watchdog: ") for h in fuzz.hangs)
        assert peak < MEMORY_PEAK, f"tracemalloc peak {peak >> 20} MiB"
        by_outcome = Counter(o for (_, o) in outcomes.elements())
        assert set(by_outcome) <= {f"irq: {s}" for s in STATUS.codes} | {"timeout: hang"}
        # the generators reach every ending: success, each kind of fault, and hangs
        for want in ("irq: ok", "irq: unknown_packet", "irq: bad_address", "irq: misaligned",
                     "irq: bad_config", "irq: stream_overrun", "timeout: hang"):
            assert by_outcome[want], (want, dict(outcomes))
        # and the device still computes: a fresh conv on it is exact
        rng = np.random.default_rng(2)
        x = rng.choice([-1.0, 1.0], (5, 6, 8)).astype(np.float32)
        w = rng.choice([-1.0, 1.0], (3, 8, 1, 1)).astype(np.float32)
        ob = sim.alloc(5 * 6 * 3 * 2)
        cl = CommandList(sim)
        cl.add(ConvCommand(input_buf=upload_tensor(sim, x), output_buf=ob, w=6, h=5, c=8,
                           runs=[ConvRun.make(3, conv="conv", kernel=1, weights=upload(
                               sim, pack_conv_weights(w, np.zeros(3, np.float32))))]))
        cl.commit()
        cl.run()
        np.testing.assert_array_equal(download_tensor(ob, (5, 6, 3)), x @ w[:, :, 0, 0].T)
    finally:
        sim.close()
