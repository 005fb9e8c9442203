"""Shared by the link tests: a small Device with a copy engine, and how to reach agents.

``MemDevice`` keeps registers in a dict and DMA in a separate "DRAM" behind a CPU
view, and its copy engine (dst = src + 1) raises an interrupt, so the link is
tested independently of the simulator.  ``FACTORY`` lets an agent process serve it.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from dvsdk.driver.allocator import RegionAllocator
from dvsdk.driver.device import UNITS, Device, DeviceInfo, DmaBuffer, open_device
from dvsdk.errors import CoherenceError, DeviceTimeout

ROOT = Path(__file__).resolve().parent.parent
FACTORY = "tests.linkdev:MemDevice"
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}

# MemDevice registers (conv window).  GO starts the copy engine; it is no DV700 start
# register, so the agent's kick guard (which knows the DV700's) lets it through.
SRC, DST, LEN, DELAY_MS, COUNTER, BUMP, GO, IRQ = 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24, 0x100, 0x420


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
        if (unit, offset) == ("conv", GO):
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
                                registers={"GO": self.regs["conv", GO], "IRQ": 0},
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
    dev.write32("conv", GO, 1)
    dev.wait_irq("conv", timeout)
    dst.sync_for_cpu()
    out = dst.read().tobytes()
    src.free()
    dst.free()
    return out


RNG = np.random.default_rng(1234)
DATA = RNG.integers(0, 256, 300_000, dtype=np.uint8)
EXPECT = (DATA + np.uint8(1)).tobytes()




def wait_until(cond: Callable[[], object], what: str, limit: float = 60.0) -> None:
    """Poll ``cond`` until it holds.  ``limit`` only turns a hang into a failure: it is far
    above any wait it stands for, so no verdict depends on the machine's speed."""
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, f"{what}: not after {limit:g} s"
        time.sleep(0.005)


def connect(url: str, **opts: object) -> Device:
    """Open an agent's URL with link options added (timeout 2 s unless given)."""
    query = "&".join(f"{k}={v}" for k, v in {"timeout": 2, **opts}.items())
    return open_device(url + ("&" if "?" in url else "?") + query)


def sim_conv(dev: Device, seed: int = 3, *, sync_input: bool = True) -> np.ndarray:
    """A small 3x3 conv through a command list: the whole driver cycle on a DV700 device."""
    from dvsdk.driver.cmdlist import CommandList
    from dvsdk.driver.commands import ConvCommand, ConvRun
    from dvsdk.hw import layout
    from dvsdk.hw.weights import pack_conv_weights

    from .hw import download_tensor, upload

    rng = np.random.default_rng(seed)
    h, w, c, m, k = 9, 15, 9, 3, 3
    vals = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    x = rng.choice(vals, size=(1, h, w, c)).astype(np.float32)
    wts = rng.choice(vals, size=(m, c, k, k)).astype(np.float32)
    b = rng.choice(vals, size=m).astype(np.float32)
    packed = np.ascontiguousarray(layout.pack(x)).view(np.uint8).reshape(-1)
    ib = dev.alloc(packed.size, name="input")
    ib.write(0, packed)
    if sync_input:
        ib.sync_for_device()
    wb = upload(dev, pack_conv_weights(wts, b), name="weights")
    ob = dev.alloc(h * w * m * 2, name="output")
    run = ConvRun.make(m, conv="conv", kernel=k, weights=wb, pads=k // 2, act="relu")
    cmd = ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run],
                      input_circular_offset=1)
    try:
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            cl.run()
        return download_tensor(ob, (h, w, m))
    finally:
        for buf in (ib, wb, ob):
            buf.free()
