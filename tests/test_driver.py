"""Driver lifecycle on every backend: allocation, command lists, exec/wait, errors, recovery."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun, MaximizerCommand
from dvsdk.driver.device import MAX_TIMEOUT
from dvsdk.errors import (
    CoherenceError,
    DeviceError,
    DeviceFault,
    DeviceTimeout,
    InvalidArgument,
    InvalidCommand,
    InvalidURL,
    OutOfDeviceMemory,
)
from dvsdk.hw.weights import pack_conv_weights

from .hw import download_tensor, kick_stream, upload, upload_tensor, wait_stream

VALUES = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)


def _pure_ints(rng, *shape):
    return rng.choice(VALUES, size=shape).astype(np.float32)


def _conv_ref(x, w, b, pad):
    """Plain correlation with zero padding, written for the test (HWC in, HWC out)."""
    h, wd, _ = x.shape
    m, _, ky, kx = w.shape
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    oh, ow = h + 2 * pad - ky + 1, wd + 2 * pad - kx + 1
    out = np.zeros((oh, ow, m), np.float32)
    for dy in range(ky):
        for dx in range(kx):
            out += xp[dy : dy + oh, dx : dx + ow, :] @ w[:, :, dy, dx].T
    return out + b


def _conv_setup(dev, rng, h=9, w=15, c=9, m=3, k=3, batch=1):
    x = _pure_ints(rng, batch, h, w, c)
    wts = _pure_ints(rng, m, c, k, k)
    b = _pure_ints(rng, m)
    ib = upload_tensor(dev, x)
    wb = upload(dev, pack_conv_weights(wts, b), name="weights")
    ob = dev.alloc(batch * h * w * m * 2, name="output")
    run = ConvRun.make(m, conv="conv", kernel=k, weights=wb, pads=k // 2, act="relu")
    cmd = ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run],
                      input_circular_offset=batch)
    ref = np.stack([np.maximum(_conv_ref(x[n], wts, b, k // 2), 0) for n in range(batch)])
    return cmd, ob, ref


def test_info_has_the_sysfs_keys(device):
    info = device.info()
    for key in ("ub_size", "mac_num", "max_kernel_size", "conv_freq", "hw_version",
                "svn_version"):
        assert isinstance(getattr(info, key), int)
    assert info.ub_size > 0 and info.mac_num % 72 == 0


def test_registers_read_back_the_hardware_facts(device):
    info = device.info()
    if not device.has_registers:  # dv://: DMP's kernel module owns them (sysfs has the facts)
        with pytest.raises(DeviceError, match="kernel module owns the registers"):
            device.read32("conv", 0x11C)
        assert info.kick == "kernel" and info.backend == "dv"
        return
    assert info.kick in ("r5", "direct") and device.kick == info.kick
    if info.kick == "r5":  # DMP's R5 kernel: bytes, groups of 72
        assert device.read32("conv", 0x11C) == info.ub_size
        assert device.read32("conv", 0x120) * 72 == info.mac_num
    else:  # the pre-R5 kernel (2994b64): KiB at 0x148, the MAC count at 0x14C
        assert device.read32("conv", 0x148) << 10 == info.ub_size
        assert device.read32("conv", 0x14C) == info.mac_num
        assert device.read32("conv", 0x11C) == 0
    with pytest.raises(InvalidArgument, match="aligned"):
        device.read32("conv", 0x402)
    with pytest.raises(InvalidArgument, match="unit"):
        device.write32("dsp", 0x0, 1)
    # a block of registers reads as the same words one by one, with the same checks
    assert device.read_words("conv", 0x11C, 2) == [device.read32("conv", 0x11C),
                                                   device.read32("conv", 0x120)]
    with pytest.raises(InvalidArgument):
        device.read_words("conv", 0xFFC, 2)
    with pytest.raises(InvalidArgument, match="unit"):
        device.read_words("dsp", 0x0, 1)
    # offsets and counts that are not integers stay refused once the integer equal to
    # them has been checked (the backends keep the registers they checked)
    for bad in (0x11C + 0.0, 0x11C + 0j, "0x11c", None):
        for call, args in ((device.read32, ("conv", bad)), (device.write32, ("conv", bad, 0)),
                           (device.read_words, ("conv", bad, 2))):
            with pytest.raises(InvalidArgument, match="offset"):
                call(*args)
    for count in (2.0, -1, True, "2"):
        with pytest.raises(InvalidArgument, match="count"):
            device.read_words("conv", 0x11C, count)
    assert device.read_words("conv", 0x11C, np.int64(2)) == device.read_words("conv", 0x11C, 2)
    # a unit that cannot be hashed (the caches' keys) is refused as an unknown unit too
    for unit in (["conv"], {"conv": 0}):
        for call, args in ((device.read32, (unit, 0x11C)), (device.write32, (unit, 0x11C, 0)),
                           (device.read_words, (unit, 0x11C, 2)), (device.wait_irq, (unit, 0.01))):
            with pytest.raises(InvalidArgument, match="unit"):
                call(*args)


def test_conv_runs_exactly_and_reruns_identically(device):
    rng = np.random.default_rng(1)
    cmd, ob, ref = _conv_setup(device, rng)
    with CommandList(device) as cl:
        cl.add(cmd)
        cl.commit()
        digests = set()
        for _ in range(3):
            t = cl.run()
            assert t > 0
            y = download_tensor(ob, ref.shape[1:])
            np.testing.assert_array_equal(y, ref[0])
            digests.add(hashlib.sha256(ob.read().tobytes()).hexdigest())
        assert len(digests) == 1


def test_write_with_stores_in_place_as_write_does(device):
    """A producer that fills the buffer itself (the fused CPU steps): the device sees what
    it stored once synced, on every backend (the link stages it and sends it)."""
    rng = np.random.default_rng(11)
    cmd, ob, ref = _conv_setup(device, rng)
    ib = cmd.input_buf.buffer
    packed = ib.read().copy()
    ib.write(0, np.zeros_like(packed))  # then overwritten through write_with only
    ib.sync_for_device()

    def fill(view):
        assert view.dtype == np.uint8 and view.size == packed.size and view.flags.writeable
        view[:] = packed

    ib.write_with(0, packed.size, fill)
    ib.sync_for_device()
    with CommandList(device) as cl:
        cl.add(cmd)
        cl.commit()
        cl.run()
        np.testing.assert_array_equal(download_tensor(ob, ref.shape[1:]), ref[0])
    with pytest.raises(InvalidArgument):
        ib.write_with(1, packed.size, fill)  # past the end


def test_write_with_without_sync_is_caught(sim):
    rng = np.random.default_rng(12)
    cmd, _, _ = _conv_setup(sim, rng)
    ib = cmd.input_buf.buffer
    ib.write_with(16, 4, lambda view: view.__setitem__(slice(None), 7))  # no sync_for_device
    with CommandList(sim) as cl:
        cl.add(cmd)
        cl.commit()
        with pytest.raises(CoherenceError) as e:
            cl.run()
    assert e.value.buffer == "input" and e.value.start == 16


def test_batch_equals_separate_runs(device):
    rng = np.random.default_rng(2)
    cmd, ob, ref = _conv_setup(device, rng, batch=3)
    with CommandList(device) as cl:
        cl.add(cmd)
        cl.commit()
        cl.run()
    y = download_tensor(ob, ref.shape)
    np.testing.assert_array_equal(y, ref)


def test_list_state_errors(device):
    rng = np.random.default_rng(3)
    cmd, _, _ = _conv_setup(device, rng)
    cl = CommandList(device)
    with pytest.raises(InvalidCommand, match="commit"):
        cl.exec()
    with pytest.raises(InvalidCommand, match="nothing"):
        cl.commit()
    cl.add(cmd)
    px = device.alloc(64)
    with pytest.raises(InvalidCommand, match="one unit"):
        cl.add(MaximizerCommand(input_buf=px, output_buf=px, width=2, height=2, nclass=2))
    cl.commit()
    with pytest.raises(InvalidCommand, match="already"):
        cl.add(cmd)
    eid = cl.exec()
    with pytest.raises(InvalidCommand, match="waited"):
        cl.exec()
    cl.wait(eid)
    cl.close()


def test_validation_names_run_field_value_limit(device):
    rng = np.random.default_rng(4)
    cmd, _, _ = _conv_setup(device, rng)
    bad = cmd.replace(runs=[ConvRun(**{**cmd.runs[0].__dict__, "p": 0x0808})])
    with pytest.raises(InvalidCommand) as e:
        CommandList(device).add(bad)
    assert e.value.field == "run[0].p" and e.value.value == (8, 8) and "1..7" in str(e.value)
    with pytest.raises(InvalidCommand, match="output_buf"):
        CommandList(device).add(cmd.replace(output_buf=device.alloc(16)))
    with pytest.raises(InvalidCommand, match="aligned"):
        CommandList(device).add(cmd.replace(input_buf=(cmd.input_buf.buffer, 1)))


def test_out_of_device_memory_names_sizes(device):
    total = device.info().dma_size or (1 << 40)
    with pytest.raises(OutOfDeviceMemory) as e:
        device.alloc(total + 4096)
    assert e.value.requested == total + 4096 and e.value.largest_free <= total


def test_dma_buffer_range_checks(device):
    buf = device.alloc(100)
    assert buf.phys % 64 == 0
    with pytest.raises(InvalidArgument, match="outside"):
        buf.write(90, np.zeros(20, np.uint8))
    buf.free()
    with pytest.raises(InvalidArgument, match="freed"):
        buf.read()


# -- simulator-only behaviour --------------------------------------------------------------

def _committed(sim, seed):
    cmd, ob, ref = _conv_setup(sim, np.random.default_rng(seed))
    cl = CommandList(sim)
    cl.add(cmd)
    cl.commit()
    return cl, ob, ref


@pytest.mark.parametrize("fault", ["hang", "lost_irq"])
def test_timeout_carries_a_register_snapshot_and_reset_recovers(sim, fault):
    cl, ob, ref = _committed(sim, 5)
    sim.inject(fault)
    with pytest.raises(DeviceTimeout) as e:
        cl.run(timeout=0.05)
    assert e.value.registers["CMD_ADDR"] != 0 and e.value.exit_code == 3
    sim.reset()
    cl.run()
    np.testing.assert_array_equal(download_tensor(ob, ref.shape[1:]), ref[0])


def test_dma_error_is_a_device_fault(sim):
    cl, _, _ = _committed(sim, 7)
    sim.inject("dma_error")
    with pytest.raises(DeviceFault) as e:
        cl.run()
    assert e.value.reason == "dma_error"
    cl.run()  # the fault was consumed; the device works again


def test_bitflip_changes_the_output(sim):
    cl, ob, ref = _committed(sim, 8)
    sim.inject("bitflip")
    cl.run()
    assert not np.array_equal(download_tensor(ob, ref.shape[1:]), ref[0])


def test_cpu_write_without_sync_is_caught(sim):
    rng = np.random.default_rng(9)
    cmd, _, _ = _conv_setup(sim, rng)
    cmd.input_buf.buffer.write(10, np.array([1, 2], np.uint8))  # no sync_for_device
    cl = CommandList(sim)
    cl.add(cmd)
    cl.commit()
    with pytest.raises(CoherenceError) as e:
        cl.run()
    assert e.value.buffer == "input" and e.value.start == 10


def test_device_output_read_without_sync_is_caught(sim):
    rng = np.random.default_rng(10)
    cmd, ob, _ = _conv_setup(sim, rng)
    cl = CommandList(sim)
    cl.add(cmd)
    cl.commit()
    cl.run()
    with pytest.raises(CoherenceError, match="sync_for_cpu"):
        ob.read()
    with pytest.raises(CoherenceError, match="sync_for_cpu"):
        ob.read(copy=False)  # a view is checked as a copy is
    ob.sync_for_cpu()
    view = ob.read(0, 64, copy=False)
    assert not view.flags.writeable and np.array_equal(view, ob.read(0, 64))


def test_stream_garbage_sets_status_not_crash(sim):
    junk = upload(sim, np.array([0xFFFF0002, 0x12345678], "<u4"))
    kick_stream(sim, junk.phys, 1)
    wait_stream(sim, 0.1)
    assert sim.read32("conv", 0x308) == 1  # unknown_packet
    assert "unknown packet" in sim.errors[-1]
    kick_stream(sim, 0x7FFF0000, 1)  # outside DRAM
    wait_stream(sim, 0.1)
    assert sim.read32("conv", 0x308) == 2 and "outside DRAM" in sim.errors[-1]


def test_exec_time_comes_from_cycles_on_the_simulator():
    fast = dvsdk.open_device("sim://?clock_mhz=400")
    slow = dvsdk.open_device("sim://?clock_mhz=100")
    times = []
    for dev in (fast, slow):
        cmd, _, _ = _conv_setup(dev, np.random.default_rng(11))
        cl = CommandList(dev)
        cl.add(cmd)
        cl.commit()
        times.append(cl.run())
        assert cl.last.cycles > 0 and cl.last.output_bytes >= 9 * 15 * 3 * 2
    assert times[1] == pytest.approx(4 * times[0])


@pytest.mark.parametrize("url,field", [
    ("sim://?ub_size=abc", "ub_size"), ("sim://?colour=1", "colour"), ("warp://x", "scheme"),
    ("sim://?coherence=maybe", "coherence"), ("sim://?units=conv,dsp", "units"),
    ("no-scheme", "url"), ("sim://?mac_num=100", "mac_num"),
])
def test_bad_urls(url, field):
    with pytest.raises(InvalidURL) as e:
        dvsdk.open_device(url)
    assert e.value.field == field


def test_default_device_from_environment(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://?ub_size=655360")
    with dvsdk.open_device() as dev:
        assert dev.info().ub_size == 655360
    monkeypatch.delenv("DVSDK_DEVICE")
    with dvsdk.open_device() as dev:
        assert dev.info().backend == "sim"


def test_rewriting_a_stale_value_still_reaches_the_device(sim):
    """A CPU store dirties the line whatever the value: writing back the stale value the
    CPU view still holds must overwrite what the device wrote there."""
    buf = sim.alloc(64)
    buf.write(0, np.zeros(64, np.uint8))
    buf.sync_for_device()
    sim.dram[buf.dram_off : buf.dram_off + 64] = 7   # the device wrote 7s
    buf.write(0, np.zeros(64, np.uint8))             # the CPU stores 0s (its stale view)
    buf.sync_for_device()
    assert not sim.dram[buf.dram_off : buf.dram_off + 64].any()


def test_dilated_depthwise_is_rejected(device):
    """§8.2: the dilated weight stream has no depthwise form."""
    buf = device.alloc(1 << 16)
    run = ConvRun.make(16, conv="depthwise", kernel=3, weights=buf, pads=2, dilation=2)
    cmd = ConvCommand(input_buf=buf, output_buf=buf, w=8, h=8, c=16, runs=[run])
    with pytest.raises(InvalidCommand, match="cannot be depthwise"):
        CommandList(device).add(cmd)


# -- timeouts ------------------------------------------------------------------------------
BAD_TIMEOUTS = [float("inf"), -float("inf"), 1e300, float("nan"), -1.0, -1e-9,
                MAX_TIMEOUT * 1.001, True, "1", None, 1j]


def _timeout_calls(dev, digits_path):
    """Every public call of the driver and the runtime that takes a timeout."""
    cl, _, _ = _committed(dev, 12)
    net = dvsdk.load(digits_path, dev)
    x = np.zeros((1, 1, 16, 16), np.float32)
    calls = {
        "wait_irq": lambda t: dev.wait_irq("conv", t),
        "CommandList.exec": lambda t: cl.exec(t),
        "CommandList.wait": lambda t: cl.wait(1, t),
        "CommandList.run": lambda t: cl.run(t),
        "Net.run": lambda t: net.run(x, t),
        "Net.run_async": lambda t: net.run_async(x, t),
        "Net.run_image": lambda t: net.run_image(np.zeros((8, 8, 3), np.uint8), t),
    }
    return calls, cl, net


@pytest.mark.parametrize("backend", ["sim", "uio"])
def test_every_timeout_is_validated(backend):
    """inf / 1e300 raised a raw OverflowError, NaN and negatives were accepted: now each
    is an InvalidArgument naming the limit, before anything is started."""
    from .conftest import ROOT

    if backend == "sim":
        dev = dvsdk.open_device("sim://")
    else:
        from .fakeboard import open_fake_device

        dev = open_fake_device()
    try:
        calls, cl, net = _timeout_calls(dev, ROOT / "examples" / "models" / "digits.bin")
        for name, call in calls.items():
            for bad in BAD_TIMEOUTS:
                if bad is None and name == "wait_irq" and backend == "uio":
                    continue  # None means the URL's default timeout there
                with pytest.raises(InvalidArgument) as e:
                    call(bad)
                assert e.value.field == "timeout" and f"{MAX_TIMEOUT:g}" in str(e.value), name
                assert cl._pending is None and not net._pending, name  # nothing started
        # the limits themselves are accepted
        cl.run(MAX_TIMEOUT)
        cl.wait(cl.exec(0), 2)
        assert net.run(np.zeros((1, 1, 16, 16), np.float32), np.float32(5.0))
        net.close()
    finally:
        dev.close()


# -- what a timeout or a fault says ----------------------------------------------------------

def test_timeout_and_fault_messages_carry_the_key_registers(sim):
    cl, _, _ = _committed(sim, 13)
    sim.inject("hang")
    with pytest.raises(DeviceTimeout) as e:
        cl.run(timeout=0.01)
    msg = str(e.value)
    addr = e.value.registers["CMD_ADDR"]
    assert "\n" not in msg and f"CMD_ADDR={addr:#010x}" in msg and "CMD_LEN=" in msg
    # a hung kick: no interrupt pending (on an R5 board the IPI's, with the shared memory)
    pending = "IRQ=0" if sim.kick == "direct" else "STREAM_START=0 ISR=0x0"
    assert pending in msg and "SIM_STATUS=0" in msg
    sim.reset()
    sim.inject("dma_error")
    with pytest.raises(DeviceFault) as e:
        cl.run()
    msg = str(e.value)
    # the conv interrupt reads 1 until acknowledged; on an R5 board the R5 acknowledged it
    irq = "IRQ=1" if sim.kick == "direct" else "IRQ=0"
    assert "\n" not in msg and "SIM_STATUS=6 (dma_error)" in msg and irq in msg
    assert f"CMD_ADDR={addr:#010x}" in msg and f"SIM_FAULT_ADDR={addr:#010x}" in msg
    assert e.value.registers["SIM_STATUS"] == 6


def test_uio_timeout_message_carries_the_key_registers(tmp_path):
    from dvsdk.driver.uio import UioDevice

    from .fakeboard import DEFAULT_DMA_PHYS, make_fake_board

    b = make_fake_board(tmp_path, start=False, core="stub")  # nobody plays the hardware
    try:
        with UioDevice.from_url(b.url) as d:
            d.write32("conv", 0x400, DEFAULT_DMA_PHYS + 0x40)
            d.write32("conv", 0x404, 3)
            d.write32("conv", 0x408, 1)
            with pytest.raises(DeviceTimeout) as e:
                d.wait_irq("conv", 0.02)
            msg = str(e.value)
            assert f"CMD_ADDR={DEFAULT_DMA_PHYS + 0x40:#010x} CMD_LEN=3 KICK=1 IRQ=0" in msg
            assert "irq_seen=0 irq_events=0" in msg
            with pytest.raises(DeviceTimeout, match="START=0 IRQ=0 irq_seen=0"):
                d.wait_irq("maximizer", 0.01)
    finally:
        b.close()
