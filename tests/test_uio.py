"""The uio:// backend against a fake board made of real files (tests/fakeboard.py).

Real parts: sysfs-shaped trees in tmp_path, real mmaps of real files, a real
second process for the lock.  Only the board is fake (a thread playing the
hardware on the shared mappings).
"""

from __future__ import annotations

import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dvsdk.driver import discovery
from dvsdk.driver.device import open_device
from dvsdk.driver.discovery import UioNode, discover
from dvsdk.driver.irqline import IRQ_COUNT_OFFSET, IRQ_CTRL_OFFSET, IrqLine
from dvsdk.driver.mmio import MmioWindow
from dvsdk.driver.udmabuf import packed_sync_value
from dvsdk.driver.uio import UioDevice
from dvsdk.errors import (
    DeviceBusy,
    DeviceError,
    DeviceNotFound,
    DeviceTimeout,
    InvalidArgument,
    InvalidURL,
    OutOfDeviceMemory,
)

from .fakeboard import DEFAULT_BASE, DEFAULT_DMA_PHYS, load_engine, make_fake_board

REPO = Path(__file__).resolve().parent.parent
HAVE_ENGINE = load_engine() is not None


@pytest.fixture
def board(tmp_path):
    b = make_fake_board(tmp_path, core="stub")
    yield b
    b.close()


@pytest.fixture
def dev(board):
    d = UioDevice.from_url(board.url)
    yield d
    d.close()


def _sysfs_text(path: Path) -> str:
    return path.read_text().strip()


def _pread(path: Path, n: int, offset: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, n, offset)
    finally:
        os.close(fd)


# -- discovery -------------------------------------------------------------------------------
def test_walk_finds_per_unit_board_and_ignores_other_uio(tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub")
    try:
        inv = discover(str(b.sysfs), str(b.dev))
        assert inv.source == "sysfs"
        assert [n.name for n in inv.dv700_nodes] == ["dv700-conv", "dv700-maximizer", "dv700-ipu"]
        assert [n.name for n in inv.other_uio] == ["gpio"]
        (board,) = inv.boards()
        assert board.mode == "per-unit"
        assert {u: w.phys for u, w in board.units.items()} == {
            "conv": DEFAULT_BASE, "maximizer": DEFAULT_BASE + 0x1000, "ipu": DEFAULT_BASE + 0x2000}
        assert board.units["conv"].node.dev_path == str(b.dev / "uio0")
        assert board.units["conv"].node.compatible == ("dmp,dv700", "generic-uio")
        (ub,) = inv.udmabufs
        assert (ub.phys_addr, ub.size, ub.dma_coherent) == (DEFAULT_DMA_PHYS, 64 << 20, False)
        assert ub.dev_path == str(b.dev / "udmabuf0") and ub.version_tuple == (5, 5, 0)
    finally:
        b.close()


def test_combined_node_places_units_by_system_property(tmp_path):
    b = make_fake_board(tmp_path, mode="combined", start=False, core="stub")
    try:
        inv = discover(str(b.sysfs), str(b.dev))
        (node,) = inv.dv700_nodes
        assert node.system == ("CONV", "MX", "IPU") and node.unit is None
        (board,) = inv.boards()
        assert board.mode == "combined"
        assert {u: w.offset for u, w in board.units.items()} == {
            "conv": 0, "maximizer": 0x1000, "ipu": 0x2000}
        # without the property only conv exists (§10.11); the URL may override it
        (Path(node.sys_path) / discovery.SYSTEM_ATTR).unlink()
        inv = discover(str(b.sysfs), str(b.dev))
        assert list(inv.boards()[0].units) == ["conv"]
        assert list(inv.boards(("CONV", "FC", "IPU"))[0].units) == ["conv", "ipu"]
        assert inv.boards(("CONV", "FC", "IPU"))[0].units["ipu"].offset == 0x2000
    finally:
        b.close()


def test_compatible_only_node_and_unit_from_map_name(tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub")
    try:
        conv_dir = b.sysfs / "class" / "uio" / "uio0"
        (conv_dir / "name").write_text("accel\n")  # DT node with another name
        inv = discover(str(b.sysfs), str(b.dev))
        assert inv.dv700_nodes[0].name == "accel"  # recognized by its compatible
        assert inv.boards()[0].mode == "combined"
        (conv_dir / "maps" / "map0" / "name").write_text("conv\n")  # reg-names = "conv"
        inv = discover(str(b.sysfs), str(b.dev))
        assert inv.dv700_nodes[0].unit == "conv"
        assert inv.boards()[0].mode == "per-unit"
    finally:
        b.close()


def test_old_udmabuf_class_and_dma_heaps_are_found(tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub", udmabuf_class="udmabuf",
                        heaps=("system", "linux,cma"))
    try:
        inv = discover(str(b.sysfs), str(b.dev))
        assert inv.udmabufs[0].subsystem == "udmabuf"
        assert {h.name: h.contiguous for h in inv.heaps} == {"linux,cma": True, "system": False}
        assert inv.find_udmabuf("dv700-dma0") is inv.udmabufs[0]
        with pytest.raises(DeviceNotFound, match="physical address"):
            UioDevice.from_url(b.url.replace("dma=udmabuf0", "dma=heap:linux,cma"))
    finally:
        b.close()


def test_no_board_is_device_not_found_naming_what_was_seen(tmp_path):
    uio = tmp_path / "sys" / "class" / "uio" / "uio0"
    uio.mkdir(parents=True)
    (uio / "name").write_text("gpio\n")
    (tmp_path / "dev").mkdir()
    with pytest.raises(DeviceNotFound) as e:
        open_device(f"uio://?sysfs={tmp_path}/sys&dev={tmp_path}/dev")
    assert "gpio" in str(e.value) and "doctor" in str(e.value) and e.value.exit_code == 3


def test_pyudev_is_used_when_no_root_is_given():
    import pyudev

    try:
        pyudev.Context()
    except (ImportError, OSError) as e:  # libudev.so.1 missing: nothing to test here
        pytest.skip(f"libudev unavailable: {e}")
    inv = discover()
    assert inv.source == "pyudev" and inv.sysfs == "/sys" and not inv.notes


def test_missing_libudev_falls_back_to_the_walk(mocker):
    import pyudev

    mocker.patch.object(pyudev, "Context", side_effect=ImportError("libudev.so.1 not found"))
    inv = discover()
    assert inv.source == "sysfs" and "libudev" in inv.notes[0]
    mocker.patch.object(pyudev, "Context", side_effect=OSError("bad ELF"))
    assert discover().source == "sysfs"


def test_explicit_root_never_asks_pyudev(tmp_path, mocker):
    import pyudev

    ctx = mocker.patch.object(pyudev, "Context", side_effect=AssertionError("pyudev used"))
    inv = discover(str(tmp_path))
    assert inv.source == "sysfs" and not inv.uio and not ctx.called


# -- register windows ------------------------------------------------------------------------
def test_mmio_is_word_access_on_a_real_mapping(tmp_path):
    path = tmp_path / "regs"
    path.write_bytes(bytes(range(256)) * 16)  # 4 KiB of known bytes
    fd = os.open(path, os.O_RDWR)
    try:
        mm = mmap.mmap(fd, 4096)
        win = MmioWindow(mm, 0x100, 0x200, "conv")
        assert win.words.dtype == np.uint32 and win.words.size == 0x80
        assert win.read32(0) == struct.unpack("<I", bytes([0, 1, 2, 3]))[0]
        win.write32(0x1FC, 0xDEADBEEF)
        raw = os.pread(fd, 12, 0x100 + 0x1F8)
        assert raw[4:8] == struct.pack("<I", 0xDEADBEEF)  # exactly these 4 bytes changed
        assert raw[:4] == bytes([0xF8, 0xF9, 0xFA, 0xFB]) and raw[8:] == bytes([0, 1, 2, 3])
        for bad in (0x2, 0x1FD, 0x200, -4, 0x1000):
            with pytest.raises(InvalidArgument, match="aligned"):
                win.read32(bad)
        with pytest.raises(InvalidArgument, match="32-bit"):
            win.write32(0, 1 << 32)
        with pytest.raises(InvalidArgument):
            win.write32(0, -1)
        win.release()
        mm.close()
    finally:
        os.close(fd)


def test_register_constants_match_the_register_spec():
    spec = pytest.importorskip("dvsdk.hw.spec").SPEC
    from dvsdk.driver import mmio

    for name, unit, reg in (("CONV_KICK", "conv", "KICK"), ("CONV_CMD_ADDR", "conv", "CMD_ADDR"),
                            ("CONV_CMD_LEN", "conv", "CMD_LEN"), ("CONV_IRQ", "conv", "IRQ"),
                            ("CONV_CMDLIST_MODE", "conv", "CMDLIST_MODE"),
                            ("CONV_PERF_CFG", "conv", "PERF_CONFIG"),
                            ("CONV_UBUF_SIZE", "conv", "UBUF_SIZE"),
                            ("CONV_HW_VERSION", "conv", "HW_VERSION"),
                            ("IPU_START", "ipu", "START"),
                            ("MAXIMIZER_START", "maximizer", "START"),
                            ("UNIT_IRQ", "ipu", "IRQ")):
        assert getattr(mmio, name) == spec.reg(unit, reg), name


def test_device_registers_are_the_mapped_file(board, dev):
    dev.write32("ipu", 0x284, 0x12345678)
    assert _pread(board.dev / "uio2", 4, 0x284) == struct.pack("<I", 0x12345678)
    assert int(board.regs["ipu"][0x284 // 4]) == 0x12345678
    # the direct kick's probe writes (2994b64): command-list mode, ROM firmware; 0x144 is
    # the SVN revision there, not the R5 kernel's counter configuration
    assert dev.read32("conv", 0x44) == 1 and dev.read32("conv", 0x40C) == 1
    assert dev.read32("conv", 0x144) == 93
    with pytest.raises(InvalidArgument, match="aligned"):
        dev.read32("conv", 0x402)
    with pytest.raises(InvalidArgument, match="aligned"):
        dev.write32("conv", 0x1000, 0)
    with pytest.raises(InvalidArgument, match="unit"):
        dev.read32("dsp", 0)


def test_a_register_once_checked_is_still_the_file_and_bad_values_still_refused(board, dev):
    """After its first access a register goes straight to the mapped words: the same file
    bytes; a bad value at a checked offset, a bad offset and a closed device still raise."""
    regs = board.regs["ipu"]
    for value in (1, 0xFFFFFFFF, np.uint32(7), 0):  # (the first access checks, the rest not)
        dev.write32("ipu", 0x284, value)
        assert _pread(board.dev / "uio2", 4, 0x284) == struct.pack("<I", int(value))
        assert dev.read32("ipu", 0x284) == int(value) == int(regs[0x284 // 4])
    for bad in (-1, 1 << 32, 1.0, "1", None):
        with pytest.raises(InvalidArgument, match="32-bit"):
            dev.write32("ipu", 0x284, bad)
    assert int(regs[0x284 // 4]) == 0
    for offset in (0x286, 0x1000, -4, np.int64(0x1000)):
        with pytest.raises(InvalidArgument, match="aligned"):
            dev.read32("ipu", offset)
    assert dev.read32("ipu", np.int64(0x284)) == 0
    # a float equal to a checked offset is still refused (not a register offset)
    for call in (lambda: dev.read32("ipu", 644.0), lambda: dev.write32("ipu", 644.0, 1),
                 lambda: dev.read_words("ipu", 644.0, 1)):
        with pytest.raises(InvalidArgument, match="aligned"):
            call()
    # a block: each word an aligned load of the file's; out of the window, refused
    for i in range(4):
        dev.write32("conv", 0x300 + 4 * i, 0x1000 + i)
    for _ in range(2):
        assert dev.read_words("conv", 0x300, 4) == [0x1000, 0x1001, 0x1002, 0x1003]
    assert dev.read_words("conv", 0x300, 4) == [dev.read32("conv", 0x300 + 4 * i)
                                                for i in range(4)]
    with pytest.raises(InvalidArgument, match="aligned"):
        dev.read_words("conv", 0xFF8, 4)
    dev.close()
    with pytest.raises(DeviceError, match="closed"):
        dev.read32("ipu", 0x284)
    with pytest.raises(DeviceError, match="closed"):
        dev.write32("ipu", 0x284, 1)
    with pytest.raises(DeviceError, match="closed"):
        dev.read_words("conv", 0x300, 4)


def test_an_offset_equal_to_a_checked_one_but_not_an_int_is_still_refused(board, dev):
    """The checked-access cache is keyed by value: 0x284.0 equals (and hashes as) 0x284, so
    a float or array offset, or an unhashable unit, must not take the cached path (a
    TypeError from the shift or the hash); each is InvalidArgument as on the first access."""
    dev.write32("ipu", 0x284, 5)
    assert dev.read32("ipu", 0x284) == 5
    assert dev.read_words("conv", 0x300, 2) == [0, 0]
    bad_offsets = (float(0x284), np.float64(0x284), np.array(0x284))
    for offset in bad_offsets:
        with pytest.raises(InvalidArgument, match="aligned"):
            dev.read32("ipu", offset)
        with pytest.raises(InvalidArgument, match="aligned"):
            dev.write32("ipu", offset, 1)
    with pytest.raises(InvalidArgument, match="aligned"):
        dev.read_words("conv", float(0x300), 2)
    for unit in (["ipu"], {"ipu": 1}):
        with pytest.raises(InvalidArgument, match="unit"):
            dev.read32(unit, 0x284)
        with pytest.raises(InvalidArgument, match="unit"):
            dev.write32(unit, 0x284, 1)
        with pytest.raises(InvalidArgument, match="unit"):
            dev.wait_irq(unit, 0.01)
    assert int(board.regs["ipu"][0x284 // 4]) == 5       # nothing written by the refusals


def test_a_bool_register_value_is_refused_as_by_every_backend(board, dev):
    """Device.check_value's rule (an int, not a bool): sim:// refused True, uio:// wrote 1."""
    for _ in range(2):  # the first access (checked), then the cached register
        for value in (True, False):
            with pytest.raises(InvalidArgument, match="32-bit"):
                dev.write32("ipu", 0x284, value)
        dev.write32("ipu", 0x284, 3)
    assert _pread(board.dev / "uio2", 4, 0x284) == struct.pack("<I", 3)
    sim = open_device("sim://")
    try:
        with pytest.raises(InvalidArgument, match="32-bit"):
            sim.write32("ipu", 0x284, True)
    finally:
        sim.close()


def test_conv_only_board_has_no_ipu(tmp_path):
    b = make_fake_board(tmp_path, units=("conv",), core="stub")
    try:
        with UioDevice.from_url(b.url) as d:
            assert d.units == ("conv",) and d.info().units == ("conv",)
            with pytest.raises(DeviceNotFound, match="no ipu"):
                d.read32("ipu", 0)
    finally:
        b.close()


# -- DMA memory ------------------------------------------------------------------------------
def test_dma_suballocation_alignment_and_sharing(board, dev):
    a = dev.alloc(100, name="a")
    b = dev.alloc(5000, align=4096, name="b")
    c = dev.alloc(16, align=16)
    assert a.phys == DEFAULT_DMA_PHYS and b.phys % 4096 == 0 and c.phys % 16 == 0
    spans = sorted((x.phys, x.phys + x.size) for x in (a, b, c))
    assert all(e <= s for (_, e), (s, _) in zip(spans, spans[1:]))
    b.write(10, b"dv700")
    fd = os.open(board.dev / "udmabuf0", os.O_RDONLY)
    try:  # the buffer is the u-dma-buf file at phys - phys_addr
        assert os.pread(fd, 5, b.phys - DEFAULT_DMA_PHYS + 10) == b"dv700"
    finally:
        os.close(fd)
    assert board.dram[b.phys - DEFAULT_DMA_PHYS + 10] == ord("d")  # the board sees it too
    a.free()
    assert dev.alloc(64).phys == DEFAULT_DMA_PHYS  # first fit reuses the hole


def test_leaks_are_accounted_and_reported_on_close(board):
    d = UioDevice.from_url(board.url)
    keep = d.alloc(256, name="forgotten")
    d.alloc(64, name="freed").free()
    assert [x.name for x in d.leaks()] == ["forgotten"]
    with pytest.warns(ResourceWarning, match="forgotten"):
        d.close()
    assert keep.freed


def test_out_of_device_memory_names_the_sizes(dev):
    total = dev.info().dma_size
    first = dev.alloc(total // 2 + 4096)
    with pytest.raises(OutOfDeviceMemory) as e:
        dev.alloc(total // 2)
    err = e.value
    assert err.requested == total // 2 and err.total == total
    assert err.largest_free == total - first.size and str(total // 2) in str(err)


def test_packed_sync_value_is_the_u_dma_buf_format():
    # (offset << 32) | (size & ~15) | direction << 2 | 1   (linux-dma.md §5.2)
    assert packed_sync_value(0x40, 0x40, 1) == 0x0000004000000045
    assert packed_sync_value(0x1000, 17, 2) == 0x0000100000000029  # size rounds up to 32
    with pytest.raises(InvalidArgument):
        packed_sync_value(1 << 32, 16, 1)
    with pytest.raises(InvalidArgument):
        packed_sync_value(0, 16, 3)


def test_sync_falls_back_to_sysfs_with_the_packed_value(board, dev):
    attrs = board.sysfs / "class" / "u-dma-buf" / "udmabuf0"
    dev.alloc(4096)
    buf = dev.alloc(1000)  # at region offset 4096
    buf.sync_for_device(100, 10)  # region bytes 4196..4205 -> line 4160, 64 bytes
    assert _sysfs_text(attrs / "sync_for_device") == f"0x{(4160 << 32) | 64 | 1 << 2 | 1:016X}"
    buf.sync_for_cpu()  # 4096..5096 -> 4096, 1024 bytes
    assert _sysfs_text(attrs / "sync_for_cpu") == f"0x{(4096 << 32) | 1024 | 2 << 2 | 1:016X}"
    assert dev.info().extra["sync_method"] == "sysfs" and dev.dma.syncs == 2


def test_sync_uses_the_ioctl_when_the_driver_has_it(board, dev, mocker):
    calls = []
    mocker.patch("dvsdk.driver.udmabuf.fcntl.ioctl",
                 side_effect=lambda fd, code, arg: calls.append((fd, code, arg)))
    buf = dev.alloc(128)
    buf.sync_for_device()
    buf.sync_for_cpu(64, 64)
    assert calls == [(dev.dma.fd, 0x40085506, struct.pack("<Q", 128 | 1 << 2 | 1)),
                     (dev.dma.fd, 0x40085505, struct.pack("<Q", 64 << 32 | 64 | 2 << 2 | 1))]
    assert _sysfs_text(board.sysfs / "class/u-dma-buf/udmabuf0/sync_for_device") == "0"


def test_sync_is_skipped_on_coherent_memory_and_uncached_maps(tmp_path):
    b = make_fake_board(tmp_path, dma_coherent=True, core="stub")
    attrs = b.sysfs / "class" / "u-dma-buf" / "udmabuf0"
    try:
        with UioDevice.from_url(b.url) as d:
            buf = d.alloc(256)
            buf.sync_for_device()
            buf.sync_for_cpu()
            assert d.info().extra["sync_method"] == "coherent" and d.dma.syncs == 0
            buf.free()
        (attrs / "dma_coherent").write_text("0\n")
        with UioDevice.from_url(b.url + "&cache=0") as d:
            buf = d.alloc(256)
            buf.sync_for_device()
            assert d.dma.sync_method == "uncached" and d.dma.syncs == 0
            buf.free()
        assert _sysfs_text(attrs / "sync_for_device") == "0"
    finally:
        b.close()


# -- interrupts ------------------------------------------------------------------------------
def test_irq_round_trip(board, dev):
    dev.write32("conv", 0x408, 1)
    dev.wait_irq("conv", 2.0)
    assert board.events("conv") == 1 and dev.read32("conv", 0x420) == 0  # acked
    assert _sysfs_text(board.sysfs / "class/uio/uio0/event") == "1"
    raw = _pread(board.dev / "uio0", 12, IRQ_CTRL_OFFSET)
    assert struct.unpack("<I", raw[8:])[0] == 1 and IRQ_COUNT_OFFSET == IRQ_CTRL_OFFSET + 8


def test_the_unmask_protocol(tmp_path):
    """uio_pdrv_genirq masks the line when it fires; only our 4-byte write of 1 re-arms it."""
    b = make_fake_board(tmp_path, core="stub", start=False)  # we play the hardware by hand
    try:
        with UioDevice.from_url(b.url) as d:
            assert b.unmasked("conv")  # armed at open
            b.raise_irq("conv")
            assert b.events("conv") == 1 and not b.unmasked("conv")  # fired, now masked
            d.wait_irq("conv", 1.0)  # unmasks, then sees the event
            assert b.unmasked("conv")
            b.raise_irq("conv")
            b.raise_irq("conv")  # arrives while masked: held back
            assert b.events("conv") == 2
            d.wait_irq("conv", 1.0)  # consumes event 2; the line stays masked
            threading.Timer(0.02, b.step).start()  # the "kernel" replays after the unmask
            d.wait_irq("conv", 60.0)  # (without the unmask it would run out and raise)
            assert b.events("conv") == 3
    finally:
        b.close()


def test_an_interrupt_before_the_wait_is_not_lost(board, dev):
    dev.write32("maximizer", 0x008, 1)
    deadline = time.monotonic() + 60  # (a bound against a hang only)
    while board.events("maximizer") < 1 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert board.events("maximizer") == 1
    dev.wait_irq("maximizer", 0)  # taken at once: a zero timeout leaves no time to wait


def test_wait_latency_is_low(board, dev, monkeypatch):
    """Where poll cannot block (the fake board's regular files), a wait retries after
    100 us, backing off to 2 ms: checked on the sleeps each wait asks for, not on a clock
    (a design sleeping in fixed 10 ms steps fails it)."""
    import dvsdk.driver.irqline as irqline

    runs: list[list[float]] = []  # the sleeps of each wait

    class Clock:  # irqline's time module, its sleeps written down
        monotonic = staticmethod(time.monotonic)

        @staticmethod
        def sleep(seconds: float) -> None:
            runs[-1].append(seconds)
            time.sleep(seconds)

    real_wait = IrqLine.wait

    def wait(line: IrqLine, deadline: float) -> bool:
        runs.append([])
        return real_wait(line, deadline)

    monkeypatch.setattr(irqline, "time", Clock)
    monkeypatch.setattr(IrqLine, "wait", wait)
    for _ in range(30):
        dev.write32("ipu", 0x2A0, 1)
        dev.wait_irq("ipu", 60.0)
    assert board.events("ipu") == 30 and len(runs) >= 30
    for run in runs:
        assert run == [min(100e-6 * 2**k, 2e-3) for k in range(len(run))]


def test_timeout_raises_with_a_register_snapshot(tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub")  # nobody plays the hardware
    try:
        with UioDevice.from_url(b.url + "&timeout=0.05") as d:
            d.write32("conv", 0x400, DEFAULT_DMA_PHYS)
            d.write32("conv", 0x404, 3)
            d.write32("conv", 0x408, 1)
            t = time.monotonic()
            with pytest.raises(DeviceTimeout) as e:
                d.wait_irq("conv")
            # the URL's timeout, waited out (a lower bound: no machine is too slow for it)
            assert e.value.value == 0.05 and time.monotonic() - t >= 0.05
            regs = e.value.registers
            assert regs["conv:0x400"] == DEFAULT_DMA_PHYS and regs["conv:0x404"] == 3
            assert regs["conv:0x408"] == 1 and regs["conv:0x40c"] == 1 and "conv:0x420" in regs
            assert "conv:0x200" in regs and "conv:0x27c" in regs and regs["irq_events"] == 0
            assert e.value.exit_code == 3
            with pytest.raises(DeviceTimeout) as e:
                d.wait_irq("maximizer", 0.01)
            assert "maximizer:0x008" in e.value.registers
            b.step()  # the "hardware" finally runs the kick
            d.wait_irq("conv", 1.0)
            d.reset()
            assert d.read32("conv", 0x420) == 0
    finally:
        b.close()


def test_combined_node_attributes_the_shared_interrupt(tmp_path):
    b = make_fake_board(tmp_path, mode="combined", core="stub")
    try:
        with UioDevice.from_url(b.url) as d:
            assert d.info().extra["mode"] == "combined"
            d.write32("ipu", 0x2A0, 1)
            with pytest.raises(DeviceTimeout):  # the event is the IPU's, not conv's
                d.wait_irq("conv", 0.1)
            d.wait_irq("ipu", 0)  # already pending: taken with no time to wait
            assert d.read32("ipu", 0x020) == 0
            d.write32("conv", 0x408, 1)
            d.wait_irq("conv", 1.0)
    finally:
        b.close()


def test_a_leftover_event_on_a_shared_line_is_nobody_s(tmp_path):
    """Two units raise while the line is masked: UIO counts the first raise, the second
    comes as an event of its own once the line is unmasked, when both flags were seen and
    acknowledged already.  It must not complete the next wait (before: it completed a
    conv wait whose kick had not even run)."""
    b = make_fake_board(tmp_path, mode="combined", core="stub", start=False)
    try:
        with UioDevice.from_url(b.url) as d:
            d.write32("conv", 0x408, 1)
            d.write32("ipu", 0x2A0, 1)
            b.step()                      # both run: one event, one raise left pending
            d.wait_irq("conv", 1.0)       # sees both flags
            d.wait_irq("ipu", 0.01)       # already attributed
            b.step()                      # the leftover raise becomes an event
            d.write32("conv", 0x408, 1)   # not run until the next step
            with pytest.raises(DeviceTimeout):
                d.wait_irq("conv", 0.05)
            b.step()
            d.wait_irq("conv", 1.0)
            assert b.irqs == {"conv": 2, "maximizer": 0, "ipu": 1}
    finally:
        b.close()


def test_irq_line_blocks_in_poll_like_real_uio(tmp_path):
    """A socket behaves like /dev/uioN: poll blocks, read blocks or says EAGAIN, and it
    refuses file offsets (ESPIPE), so the plain read/write fallback is exercised."""
    (tmp_path / "event").write_text("7\n")
    node = UioNode("uio9", str(tmp_path), "/dev/uio9", "dv700-conv")
    uio, hw = socket.socketpair()
    uio.setblocking(False)
    try:
        line = IrqLine(node, uio.fileno())
        assert line.seen == 7 and not line.positional  # nothing readable: sysfs event count
        t = time.monotonic()
        assert not line.wait(t + 0.05) and time.monotonic() - t >= 0.05
        assert hw.recv(4) == struct.pack("<I", 1)  # the 4-byte unmask
        polls = []
        poller = line.poller
        line.poller = type("Poller", (), {"poll": staticmethod(
            lambda ms: polls.append(ms) or poller.poll(ms))})
        t = time.monotonic()
        threading.Timer(0.05, lambda: hw.send(struct.pack("<I", 8))).start()
        assert line.wait(t + 60.0) and line.seen == 8  # the event, not the deadline
        # one poll, blocking until the count came (no retries), at least the timer's 50 ms
        assert len(polls) == 1 and time.monotonic() - t >= 0.05
        hw.close()
        with pytest.raises(DeviceError):  # the device went away
            line.wait(time.monotonic() + 1.0)
    finally:
        uio.close()


def test_fake_board_thread_does_not_spin(board, monkeypatch):
    """Each poll of the board's thread is followed by its sleep (checked on the calls,
    not on CPU time, which other threads of the process count in too)."""
    from . import fakeboard

    calls: list[str] = []
    step = board.step
    monkeypatch.setattr(board, "step", lambda: calls.append("step") or step())
    monkeypatch.setattr(fakeboard, "time", type("Clock", (), {"sleep": staticmethod(
        lambda s: calls.append(f"sleep {s:g}") or time.sleep(s))}))
    deadline = time.monotonic() + 60  # (a bound against a hang only)
    while calls.count("step") < 20 and time.monotonic() < deadline:
        time.sleep(0.001)
    run = calls[calls.index("step"):]
    run = run[:len(run) - len(run) % 2]
    assert len(run) >= 20 and run == ["step", f"sleep {fakeboard.POLL_INTERVAL:g}"] * (
        len(run) // 2)


# -- exclusive access ----------------------------------------------------------------------------
HOLDER = """
import sys, time
from dvsdk.driver.uio import UioDevice
dev = UioDevice.from_url(sys.argv[1])
print("ready", flush=True)
time.sleep(60)
"""


def _spawn_holder(url: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])])}
    p = subprocess.Popen([sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=env)
    line = p.stdout.readline().decode().strip()
    if line != "ready":
        p.kill()
        raise AssertionError(f"holder failed: {line} {p.stderr.read().decode()}")
    return p


def test_second_opener_in_this_process_is_busy(board, dev):
    with pytest.raises(DeviceBusy) as e:
        UioDevice.from_url(board.url)
    assert e.value.pid == os.getpid() and "this process" in str(e.value)
    dev.close()
    UioDevice.from_url(board.url).close()  # released on close


def test_busy_across_processes_and_recovery_after_the_holder_is_killed(board):
    p = _spawn_holder(board.url)
    try:
        with pytest.raises(DeviceBusy) as e:
            UioDevice.from_url(board.url)
        assert e.value.pid == p.pid and f"pid {p.pid}" in str(e.value)
        lock = board.run / "dvsdk-uio0.lock"
        assert _sysfs_text(lock) == str(p.pid)
    finally:
        p.send_signal(signal.SIGKILL)  # a crash: no cleanup code runs
        p.wait(timeout=10)
    assert _sysfs_text(board.run / "dvsdk-uio0.lock") == str(p.pid)  # stale pid stays...
    with UioDevice.from_url(board.url) as d:  # ...but the kernel dropped the flock
        assert _sysfs_text(board.run / "dvsdk-uio0.lock") == str(os.getpid())
        d.write32("conv", 0x408, 1)
        d.wait_irq("conv", 2.0)


# -- URL ------------------------------------------------------------------------------------------
def test_url_options(tmp_path):
    b = make_fake_board(tmp_path, core="stub", conv_freq=250)
    try:
        with pytest.raises(InvalidURL, match="unknown option"):
            UioDevice.from_url(b.url + "&colour=blue")
        for bad in ("soon", "inf", "nan", "-1", "1e300"):
            with pytest.raises(InvalidURL):
                UioDevice.from_url(b.url + f"&timeout={bad}")
        with pytest.raises(DeviceNotFound, match="board"):
            UioDevice.from_url(b.url + "&board=1")
        with UioDevice.from_url(b.url + "&clock_mhz=100&init=0") as d:
            info = d.info()
            assert (info.conv_freq, info.extra["clock_source"]) == (250, "sysfs")  # sysfs wins
            assert d.read32("conv", 0x40C) == 0  # init=0 left the registers alone
        (b.sysfs / "class" / "dmp_dv" / "dv_conv" / "conv_freq").unlink()
        with UioDevice.from_url(b.url + "&clock_mhz=100") as d:
            assert d.clock() == (100, "url")
        with UioDevice.from_url(b.url) as d:
            assert d.clock() == (0, "unknown") and d.info().conv_freq == 0
    finally:
        b.close()


def test_info_reports_the_hardware_facts(tmp_path):
    b = make_fake_board(tmp_path, core="stub", ubuf_size=0, hw_version=0x1234)
    try:
        b.regs["conv"][0x148 // 4] = 0  # no UBUF register: the DT ubuf-size is used
        with UioDevice.from_url(b.url) as d:
            info = d.info()
            assert info.backend == "uio" and not info.simulated
            assert info.ub_size == 640 * 1024 and info.extra["ub_size_source"] == "device-tree"
            assert info.mac_num == 576 and info.hw_version == 0x1234
            assert info.dma_size == 64 << 20 and info.units == ("conv", "ipu", "maximizer")
    finally:
        b.close()


# -- end to end with the simulator core playing the hardware -------------------------------
needs_engine = pytest.mark.skipif(not HAVE_ENGINE, reason="dvsdk.sim.engine not available")


@needs_engine
def test_hand_written_stream_is_fetched_and_executed(tmp_path):
    """A two-chunk stream (§10.2-10.4): chunk A jumps to chunk B, B raises the interrupt."""
    b = make_fake_board(tmp_path)
    try:
        assert not b.stub
        with UioDevice.from_url(b.url) as d:
            chunk_b = d.alloc(16, align=8)
            chunk_b.write(0, np.array([0x0108F004, 1, 0, 0], "<u4"))  # irq write + pad
            chunk_a = d.alloc(8, align=8)
            chunk_a.write(0, np.array([16 | 1, chunk_b.phys], "<u4"))  # jump (len | 1, addr)
            for buf in (chunk_a, chunk_b):
                buf.sync_for_device()
            d.write32("conv", 0x420, 0)
            d.write32("conv", 0x400, chunk_a.phys)
            d.write32("conv", 0x404, 1)
            d.write32("conv", 0x408, 1)
            d.wait_irq("conv", 5.0)
            assert b.core.errors == [] and b.errors == []
            d.write32("conv", 0x44, 1)  # (the ROM firmware: the device's open wrote it)
            counters = [d.read32("conv", off) for off in (0x180, 0x184, 0x188)]
            assert counters[0] > 0  # the fetched stream was counted (pre-R5: 0x180 input)
    finally:
        b.close()


@needs_engine
def test_maximizer_computes_on_the_dma_buffer(tmp_path):
    """§10.7 register writes by hand; §9.2 argmax (x-major, lowest class wins ties)."""
    b = make_fake_board(tmp_path)
    try:
        rng = np.random.default_rng(0)
        w, h, nclass = 5, 3, 6
        scores = rng.integers(-4, 4, size=(w, h, nclass)).astype(np.float16)
        with UioDevice.from_url(b.url) as d:
            src = d.alloc(w * h * nclass * 2, align=16)
            dst = d.alloc(w * h, align=16)
            src.write(0, scores.reshape(-1))  # nclass <= 8: one block, x-major, class innermost
            src.sync_for_device()
            px = w * h
            last = src.phys + px * nclass
            block = px * min(nclass, 8) * 2
            for off, val in ((0x024, nclass << 24 | px), (0x028, src.phys), (0x02C, dst.phys),
                             (0x030, block), (0x034, (px % 128) * 2 * (nclass % 8)),
                             (0x038, last - (last % block if last % block else 0))):
                d.write32("maximizer", off, val)
            d.write32("maximizer", 0x008, 1)
            d.wait_irq("maximizer", 5.0)
            dst.sync_for_cpu()
            got = dst.read().reshape(w, h)
            want = np.argmax(scores.astype(np.float32), axis=2)  # first maximum wins
            np.testing.assert_array_equal(got, want)
            assert b.core.errors == []
    finally:
        b.close()
