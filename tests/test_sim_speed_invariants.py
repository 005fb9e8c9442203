"""Invariants of the simulator's speed paths: they change wall time, never results.

References are independent of the code under test: numpy's own float16 casts for the
FP16 conversions, and for DRAM a plain byte array that packs every tensor at once.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from dvsdk.hw import layout
from dvsdk.hw.fp16 import f16_to_f32, f32_to_f16, round_f16
from dvsdk.sim.dram import Dram
from dvsdk.sim.status import HardwareError

from .refs import f16_cast

ALL_HALVES = np.arange(65536, dtype=np.uint16).view(np.float16)


def numpy_round(x: np.ndarray) -> np.ndarray:
    """numpy's cast there and back, every NaN the canonical one (arithmetic.md)."""
    return f16_cast(x).astype(np.float32)


def bits(a: np.ndarray) -> list[int]:
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16).tolist()


def test_f16_to_f32_matches_numpy_for_every_half():
    assert bits(f16_to_f32(ALL_HALVES)) == bits(ALL_HALVES.astype(np.float32))


def test_f32_to_f16_inverts_for_every_half():
    """Every binary16 value comes back; every NaN pattern as the canonical NaN."""
    assert bits(f32_to_f16(ALL_HALVES.astype(np.float32))) == bits(f16_cast(ALL_HALVES))


def test_conversions_fall_back_to_numpy_where_denormals_are_flushed(monkeypatch):
    import dvsdk.hw.fp16 as fp16
    monkeypatch.setattr(fp16, "denormals_work", lambda: False)
    assert bits(fp16.f16_to_f32(ALL_HALVES)) == bits(ALL_HALVES.astype(np.float32))
    assert bits(fp16.f32_to_f16(ALL_HALVES.astype(np.float32))) == bits(f16_cast(ALL_HALVES))


def test_round_f16_matches_numpy_around_every_half():
    # each binary16 value's float32 pattern and its neighbours at the rounding boundaries
    # (mantissa bit 13: ties, one below and above them), both signs, every exponent
    base = ALL_HALVES.astype(np.float32).view(np.uint32).astype(np.int64)
    steps = np.array([-0x1001, -0x1000, -0xFFF, -1, 0, 1, 0xFFF, 0x1000, 0x1001, 0x1FFF])
    u = (base[:, None] + steps[None, :]).reshape(-1) % (1 << 32)
    x = u.astype(np.uint32).view(np.float32)
    assert bits(round_f16(x)) == bits(numpy_round(x))


def test_round_f16_matches_numpy_on_a_sweep_of_all_float32_patterns():
    u = np.arange(0, 1 << 32, 1021, dtype=np.uint64).astype(np.uint32)  # 4.2 M patterns
    x = u.view(np.float32)
    assert np.array_equal(round_f16(x).view(np.uint32), numpy_round(x).view(np.uint32))


@pytest.mark.parametrize("case", ["relu", "tiny", "overflow", "nan", "denormal", "empty"])
def test_round_f16_special_mixes(case):
    rng = np.random.default_rng(3)
    x = np.maximum(rng.normal(size=(37, 41, 9)), 0).astype(np.float32)
    if case == "tiny":
        x[::3, ::5] = rng.uniform(-6.2e-5, 6.2e-5, x[::3, ::5].shape)
    if case == "overflow":
        x[1, ::2] = rng.uniform(65500, 70000, x[1, ::2].shape)
        x[2, 3, 4] = -np.inf
    if case == "nan":
        x[5, 5] = np.nan
        x[6, 6, 6] = np.array(0xFFC01234, np.uint32).view(np.float32)
    if case == "denormal":
        x[:, ::4] = np.array(0x0000F123, np.uint32).view(np.float32)
    if case == "empty":
        x = x[:0]
    assert bits(round_f16(x)) == bits(numpy_round(x))
    assert round_f16(x).shape == x.shape


@settings(max_examples=200, deadline=None)
@given(hnp.arrays(np.float32, hnp.array_shapes(max_dims=3, max_side=40),
                  elements=st.floats(width=32, allow_nan=True, allow_infinity=True)))
def test_round_f16_property(x):
    assert bits(round_f16(x)) == bits(numpy_round(x))


# -- DRAM tensor store ----------------------------------------------------------------

BASE = 0x1000


def tensor(rng, shape):
    return round_f16(rng.normal(scale=3, size=shape).astype(np.float32))


def packed_bytes(values):
    return layout.pack(values.astype(np.float16)).view(np.uint8)


@pytest.mark.parametrize("lazy", [False, True])
def test_stored_values_are_returned_only_while_valid(lazy):
    rng = np.random.default_rng(1)
    mem = Dram(np.zeros(1 << 16, np.uint8), BASE, lazy=lazy)
    y = tensor(rng, (5, 7, 19))
    nb = y.size * 2
    mem.write_tensor(BASE, y)
    got = mem.read_tensor(BASE, y.shape)
    assert got.tobytes() == y.tobytes() and not got.flags.writeable
    # lazy: nothing packed yet; a raw read writes the bytes out first
    assert mem.array[:nb].any() != lazy
    assert mem.read(BASE, nb).tobytes() == packed_bytes(y).tobytes()
    # a write behind the Dram's back (the fake board's CPU, a test) is seen once written
    # (eager); lazy mode's contract has every writer clip through the Dram (release),
    # which then drops the values
    mem.array[10] ^= 0x40
    if lazy:
        assert mem.read_tensor(BASE, y.shape).tobytes() == y.tobytes()
        mem.release(BASE + 10, 1, whole=True)
    stale = mem.read_tensor(BASE, y.shape)
    assert stale.tobytes() == layout.unpack(mem.array[:nb], y.shape).tobytes() != y.tobytes()
    # another shape at the address never hits
    mem.write_tensor(BASE, y)
    other = mem.read_tensor(BASE, (7, 5, 19))
    assert other.tobytes() == layout.unpack(packed_bytes(y), (7, 5, 19)).tobytes()


def test_lazy_partial_overwrite_keeps_the_rest_of_the_older_tensor():
    rng = np.random.default_rng(2)
    mem = Dram(np.zeros(1 << 16, np.uint8), BASE, lazy=True)
    a, b = tensor(rng, (8, 8, 16)), tensor(rng, (4, 4, 16))   # 2048 and 512 bytes
    mem.write_tensor(BASE, a)
    mem.write_tensor(BASE + 1000, b)            # inside a: a keeps [0,1000) + [1512,2048)
    mem.write(BASE + 1800, np.full(8, 0xAB, np.uint8))
    expect = packed_bytes(a).copy()
    expect[1000:1512] = packed_bytes(b)
    expect[1800:1808] = 0xAB
    assert mem.read(BASE, 2048).tobytes() == expect.tobytes()
    assert mem.read_tensor(BASE + 1000, b.shape).tobytes() == b.tobytes()


def test_release_writes_out_unless_the_dma_stores_every_byte():
    rng = np.random.default_rng(4)
    mem = Dram(np.zeros(1 << 16, np.uint8), BASE, lazy=True)
    a = tensor(rng, (4, 4, 8))
    mem.write_tensor(BASE, a)
    mem.release(BASE + 16, 32)                   # some bytes: a is written out first
    mem.array[16:20] = 7                         # the DMA's store
    expect = packed_bytes(a).copy()
    expect[16:20] = 7
    assert mem.read(BASE, a.size * 2).tobytes() == expect.tobytes()
    mem.write_tensor(BASE, a)
    mem.release(BASE, 64, whole=True)            # every byte: a's first 64 bytes are gone
    mem.array[:64] = 9
    expect = packed_bytes(a).copy()
    expect[:64] = 9
    assert mem.read(BASE, a.size * 2).tobytes() == expect.tobytes()


def test_a_tensor_range_read_raw_is_packed_at_its_next_stores():
    """Lazy mode packs a store at once where a tensor of the same range was read raw (a
    runtime's CPU step reads the same device output every run), and nowhere else."""
    rng = np.random.default_rng(3)
    mem = Dram(np.zeros(1 << 14, np.uint8), BASE, lazy=True)
    a, b = tensor(rng, (4, 6, 16)), tensor(rng, (4, 6, 16))
    nb = a.size * 2
    mem.write_tensor(BASE, a)
    mem.write_tensor(BASE, b)
    mem.write_tensor(BASE + 4096, a)
    assert not mem.array.any()  # never read: nothing packed
    assert mem.read(BASE + 8, 2).tobytes() == packed_bytes(b)[8:10].tobytes()  # b written out
    mem.write_tensor(BASE, a)
    assert mem.array[:nb].tobytes() == packed_bytes(a).tobytes()  # at once, unread
    assert mem.read_tensor(BASE, a.shape) is a  # and its values still serve the device
    mem.write_tensor(BASE + 4096, b)
    assert not mem.array[4096:].any()  # the range never read raw stays lazy
    mem.write_tensor(BASE, round_f16(np.ones((2, 6, 16), np.float32)))  # another range
    assert mem.array[:nb].tobytes() == packed_bytes(a).tobytes()  # lazy again
    assert mem.read(BASE, nb // 2).tobytes() == packed_bytes(np.ones((2, 6, 16)))[:nb // 2
                                                                            ].tobytes()


def test_version_changes_with_writes_to_the_range_only():
    mem = Dram(np.zeros(1 << 16, np.uint8), BASE, lazy=True)
    assert Dram(np.zeros(256, np.uint8), BASE).version(BASE, 64) is None  # eager: unknown
    v0 = mem.version(BASE + 4096, 1000)
    mem.write(BASE + 4096 + 1024, np.zeros(4, np.uint8))      # the next 64-byte line
    mem.write_tensor(BASE, round_f16(np.ones((1, 1, 8), np.float32)))
    assert mem.version(BASE + 4096, 1000) == v0
    mem.write(BASE + 4096 + 999, np.zeros(1, np.uint8))
    v1 = mem.version(BASE + 4096, 1000)
    assert v1 != v0
    mem.release(BASE + 4096, 8)
    assert mem.version(BASE + 4096, 1000) != v1


def test_version_memo_sees_stores_through_each_of_its_clocks():
    """version()'s three clocks (64 KiB pages, 4 KiB pages, 64-byte lines): a store in
    the same 64 KiB page but another 4 KiB page, in the same 4 KiB page but another line,
    then in the range, each after the range's version was asked."""
    mem = Dram(np.zeros(1 << 17, np.uint8), BASE, lazy=True)
    weights = (BASE + 8192 + 512, 1024)  # in the 3rd 4 KiB page of the first 64 KiB
    v = mem.version(*weights)
    for addr, inside in [(BASE + 60000, False), (BASE + 100, False), (BASE + 8192, False),
                         (BASE + 8192 + 1600, False), (BASE + 8192 + 1535, True),
                         (BASE + 70000, False), (BASE + 8192 + 512, True)]:
        mem.write(addr, np.ones(1, np.uint8))
        now = mem.version(*weights)
        assert (now != v) == inside, addr
        assert mem.version(*weights) == now  # (asked again: the memo)
        v = now
    big = (BASE, 1 << 17)  # more 4 KiB pages than the middle clock is asked for
    v = mem.version(*big)
    mem.write_tensor(BASE + (1 << 17) - 64, round_f16(np.ones((1, 2, 16), np.float32)))
    assert mem.version(*big) != v


def test_version_after_repeated_and_overlapping_stores_asked_late():
    """Stores of one range run after run and of an overlapping one, the version asked only
    after several of them (the line clocks take pending stores when version() needs them):
    a range's version changes exactly when a store since the last ask touched it."""
    mem = Dram(np.zeros(1 << 16, np.uint8), BASE, lazy=True)
    a, b = (BASE + 256, 512), (BASE + 512, 512)  # overlapping in [BASE+512, BASE+768)
    ranges = {"a only": (BASE + 300, 8), "both": (BASE + 700, 8), "b only": (BASE + 900, 8),
              "neither": (BASE + 2048, 8)}
    touched_by = {"a only": "a", "both": "ab", "b only": "b", "neither": ""}
    for stores in ["aba", "b", "a", "ab", "bb", ""]:
        before = {k: mem.version(*r) for k, r in ranges.items()}
        for which in stores:
            start, n = a if which == "a" else b
            mem.write(start, np.full(n, len(stores), np.uint8))
        for k, r in ranges.items():
            changed = mem.version(*r) != before[k]
            assert changed == any(w in stores for w in touched_by[k]), (stores, k)


def test_injected_bit_flip_is_written_at_once_and_misses_the_values():
    mem = Dram(np.zeros(4096, np.uint8), 0, lazy=True)
    y = np.arange(2 * 3 * 16, dtype=np.float32).reshape(2, 3, 16)
    mem.flip_next_write = True
    mem.write_tensor(0, y)
    got = mem.read_tensor(0, y.shape)
    assert got.tobytes() == layout.unpack(mem.array[:y.size * 2], y.shape).tobytes()
    assert got.tobytes() != y.tobytes()


def test_out_of_range_tensor_is_a_hardware_error():
    mem = Dram(np.zeros(4096, np.uint8), 0, lazy=True)
    with pytest.raises(HardwareError):
        mem.write_tensor(4000, np.zeros((1, 8, 8), np.float32))
    with pytest.raises(HardwareError):
        mem.read_tensor(4000, (1, 8, 8))


@pytest.mark.parametrize("seed", range(24))
def test_lazy_dram_equals_a_plain_byte_array_under_random_traffic(seed):
    """Random device stores, raw writes, DMA stores and reads against a byte array that
    packs every tensor at once; the kept-bytes limit is small so flushes happen too (in
    half the seeds); and ``version`` of a few ranges changes whenever a byte there did."""
    rng = np.random.default_rng(seed)
    size = 1 << 18 if seed % 2 else 1 << 14  # (over several of version()'s 64 KiB pages)
    mem = Dram(np.zeros(size, np.uint8), BASE, lazy=True)
    if seed % 2 == 0:
        mem.tensor_limit = 6000
    ref = np.zeros(size, np.uint8)
    shapes = {}
    watched = []  # (addr, n, version, bytes then)
    for _ in range(8):
        a = int(rng.integers(0, size - 1))
        n = int(rng.integers(1, min(size - a, 1 << 17) + 1))
        watched.append((a, n, mem.version(BASE + a, n), ref[a:a + n].copy()))
    for _ in range(300):
        for k, (a, n, v, then) in enumerate(watched):
            now = mem.version(BASE + a, n)
            if not np.array_equal(ref[a:a + n], then):
                assert now != v, (a, n)
            watched[k] = (a, n, now, ref[a:a + n].copy())
        op = rng.integers(6)
        if op <= 1:      # device stores a tensor: anywhere, or again where it stored one
            if shapes and rng.integers(2):  # (the same layer run after run: once read
                addr = list(shapes)[int(rng.integers(len(shapes)))]  # raw, packed at once)
                shape = shapes[addr]
            else:
                shape = tuple(int(v) for v in rng.integers(1, 9 if size < 1 << 16 else 48, 3))
                addr = int(rng.integers(0, size - 2 * int(np.prod(shape))) // 2 * 2)
            nb = 2 * int(np.prod(shape))
            y = tensor(rng, shape)
            mem.write_tensor(BASE + addr, y)
            ref[addr:addr + nb] = packed_bytes(y)
            shapes[addr] = shape
        elif op == 2:    # device stores raw bytes (another unit)
            addr, n = int(rng.integers(0, size - 64)), int(rng.integers(1, 64))
            data = rng.integers(0, 256, n).astype(np.uint8)
            mem.write(BASE + addr, data)
            ref[addr:addr + n] = data
        elif op == 3:    # the DMA stores some or all bytes of a range
            addr, n = int(rng.integers(0, size - 256)), int(rng.integers(1, 256))
            whole = bool(rng.integers(2))
            mask = np.ones(n, bool) if whole else rng.integers(0, 2, n).astype(bool)
            data = rng.integers(0, 256, n).astype(np.uint8)
            mem.release(BASE + addr, n, whole=whole)
            mem.array[addr:addr + n][mask] = data[mask]
            ref[addr:addr + n][mask] = data[mask]
        elif op == 4 and shapes:   # device loads a tensor it may have stored
            addr = list(shapes)[int(rng.integers(len(shapes)))]
            got = mem.read_tensor(BASE + addr, shapes[addr])
            nb = 2 * int(np.prod(shapes[addr]))
            assert got.tobytes() == layout.unpack(ref[addr:addr + nb], shapes[addr]).tobytes()
        else:            # a raw read (another unit, or materialize before a CPU read)
            addr, n = int(rng.integers(0, size - 512)), int(rng.integers(1, 512))
            assert mem.read(BASE + addr, n).tobytes() == ref[addr:addr + n].tobytes()
    mem.materialize(BASE, size)
    assert mem.array.tobytes() == ref.tobytes()
