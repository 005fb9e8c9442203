"""Invariants of the simulator's speed paths: they change wall time, never results."""

import numpy as np

from dvsdk import layout
from dvsdk.sim.engine import Dram


def test_f16_to_f32_matches_numpy_for_every_half():
    h = np.arange(65536, dtype=np.uint16).view(np.float16)
    assert layout._f16_to_f32(h).view(np.uint32).tolist() == \
        h.astype(np.float32).view(np.uint32).tolist()


def test_tensor_shadow_is_used_only_while_dram_bytes_are_unchanged():
    rng = np.random.default_rng(1)
    mem = Dram(np.zeros(1 << 16, np.uint8), 0x1000)
    y = np.maximum(rng.normal(size=(5, 7, 19)), 0).astype(np.float32)
    nb = y.size * 2
    mem.write_tensor(0x1000, y)
    expect = layout.unpack(layout.pack(y), y.shape)
    got = mem.read_tensor(0x1000, y.shape)
    assert got.tobytes() == expect.tobytes() and not got.flags.writeable
    # a write behind the Dram's back (DMA sync, a test, the fake board's CPU) is seen
    mem.array[10] ^= 0x40
    stale = mem.read_tensor(0x1000, y.shape)
    assert stale.tobytes() == layout.unpack(mem.array[:nb], y.shape).tobytes()
    assert stale.tobytes() != expect.tobytes()
    # an overlapping write drops the entry; another shape at the address never hits
    mem.write_tensor(0x1000, y)
    mem.write(0x1000 + 6, np.zeros(4, np.uint8))
    assert 0x1000 not in mem.shadow
    mem.write_tensor(0x1000, y)
    other = mem.read_tensor(0x1000, (7, 5, 19))
    assert other.tobytes() == layout.unpack(mem.array[:nb], (7, 5, 19)).tobytes()


def test_injected_bit_flip_misses_the_shadow():
    mem = Dram(np.zeros(4096, np.uint8), 0)
    y = np.arange(2 * 3 * 16, dtype=np.float32).reshape(2, 3, 16)
    mem.flip_next_write = True
    mem.write_tensor(0, y)
    got = mem.read_tensor(0, y.shape)
    assert got.tobytes() == layout.unpack(mem.array[:y.size * 2], y.shape).tobytes()
    assert got.tobytes() != y.tobytes()
