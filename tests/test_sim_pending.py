"""sim://'s device reads look at a DMA buffer only while the CPU has stores in it that were
not synced (or its raw view was handed out): ``SimDevice.cpu_pending``.  Every way a CPU
store can be left unsynced must still be caught at the device read, and a buffer whose
stores were all synced must compute what a plain numpy convolution gives."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.errors import CoherenceError
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.sim.device import SimDevice

from .hw import download_tensor, upload, upload_tensor

H, W, C, M = 6, 7, 8, 3


def _setup(sim: SimDevice, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, (1, H, W, C)).astype(np.float32)
    wts = rng.integers(-2, 3, (M, C, 1, 1)).astype(np.float32)
    b = rng.integers(-2, 3, M).astype(np.float32)
    ib = upload_tensor(sim, x)
    wb = upload(sim, pack_conv_weights(wts, b), name="weights")
    ob = sim.alloc(H * W * M * 2, name="output")
    run = ConvRun.make(M, conv="conv", kernel=1, weights=wb, pads=0)
    cmd = ConvCommand(input_buf=ib, output_buf=ob, w=W, h=H, c=C, runs=[run])
    ref = np.einsum("hwc,mc->hwm", x[0], wts[:, :, 0, 0]) + b  # (small ints: exact)
    cl = CommandList(sim)
    cl.add(cmd)
    cl.commit()
    return cl, ib, ob, ref


@pytest.fixture
def sim():
    dev = SimDevice.from_url("sim://")
    yield dev
    dev.close()


def _output(ob, ref) -> np.ndarray:
    ob.sync_for_cpu()
    return download_tensor(ob, ref.shape)


def test_synced_buffers_leave_nothing_pending_and_compute_the_reference(sim):
    cl, ib, ob, ref = _setup(sim, 1)
    assert not sim.cpu_pending  # (upload syncs)
    cl.run()
    np.testing.assert_array_equal(_output(ob, ref), ref)
    packed = ib.read().copy()
    ib.write(0, packed)  # the same bytes, stored again: pending until synced
    assert list(sim.cpu_pending.values()) == [ib]
    ib.sync_for_device()
    assert not sim.cpu_pending
    cl.run()
    np.testing.assert_array_equal(_output(ob, ref), ref)


def test_a_partial_sync_leaves_the_rest_pending_and_caught(sim):
    cl, ib, ob, ref = _setup(sim, 2)
    ib.write(0, np.zeros(4, np.uint8))
    ib.write(100, np.zeros(4, np.uint8))
    ib.sync_for_device(0, 50)  # the first store synced, the second not
    assert list(sim.cpu_pending.values()) == [ib]
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.buffer, e.value.start, e.value.end) == ("input", 100, 104)
    ib.sync_for_device(50, 100)
    assert not sim.cpu_pending


def test_write_with_and_raw_views_are_caught_at_the_device_read(sim):
    cl, ib, ob, ref = _setup(sim, 3)
    ib.write_with(8, 2, lambda v: v.__setitem__(slice(None), 1))
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.start, e.value.end) == (8, 10)
    ib.sync_for_device()
    assert not sim.cpu_pending
    raw = ib.view  # from now on stores are found by comparison
    assert list(sim.cpu_pending.values()) == [ib]
    raw[20] ^= 0x40
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert (e.value.start, e.value.end) == (20, 21)


def test_a_freed_buffer_is_no_longer_pending(sim):
    cl, ib, ob, ref = _setup(sim, 4)
    scratch = sim.alloc(256, name="scratch")
    scratch.write(0, np.ones(16, np.uint8))  # never synced
    assert list(sim.cpu_pending.values()) == [scratch]
    cl.run()  # the kick does not read it: nothing to report
    np.testing.assert_array_equal(_output(ob, ref), ref)
    scratch.free()
    assert not sim.cpu_pending
