"""The two ways a conv stream starts (dv700-interface.md §10.4): the R5 kick through shared
memory and an IPI (DMP's stack since March 2019) and the direct kick of older bitstreams,
on the simulator, on the fake board and through the agent's guard.

Every expected register write is spelled out here with the reference's offsets (§10.4:
SHM +0x0 address, +0x4 length/8, +0x8 = 1, IPI TRIG +0x0 = 0x100, ISR +0x10, IER +0x18,
IDR +0x1C; the pre-2019 kick at conv 0x400/0x404/0x408, command-list mode 0x40C, the
interrupt 0x420), not taken from firmware_spec."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.discovery import discover
from dvsdk.errors import AccessViolation, DeviceNotFound, DeviceTimeout, InvalidArgument

from .fakeboard import make_fake_board, open_fake_device
from .hw import download_tensor, ones_conv, run_ones_conv

IPI_TRIG, IPI_ISR, IPI_IMR, IPI_IER, IPI_IDR = 0x0, 0x10, 0x14, 0x18, 0x1C
SHM_ADDR, SHM_LEN8, SHM_START = 0x0, 0x4, 0x8
CONV_CMD_ADDR, CONV_CMD_LEN, CONV_KICK, CONV_MODE, CONV_IRQ = 0x400, 0x404, 0x408, 0x40C, 0x420


def _recorded(dev):
    """Record every register write of ``dev`` (window, offset, value), passing it on."""
    log = []
    real = dev.write32

    def write32(unit, offset, value):
        log.append((unit, offset, value))
        real(unit, offset, value)

    dev.write32 = write32
    return log


@pytest.mark.parametrize("kick", ["r5", "direct"])
def test_each_protocol_sends_exactly_what_dmps_kernel_sends(kick):
    with dvsdk.open_device(f"sim://?kick={kick}") as dev:
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            log = _recorded(dev)
            cl.run()
            addr, len8 = cl.stream.address, cl.stream.length8
        if kick == "r5":
            assert log == [("shm", SHM_ADDR, addr), ("shm", SHM_LEN8, len8),
                           ("shm", SHM_START, 1), ("ipi", IPI_TRIG, 0x100),
                           ("ipi", IPI_ISR, 0x100)]  # the completion, acknowledged
        else:
            assert log == [("conv", CONV_CMD_ADDR, addr), ("conv", CONV_CMD_LEN, len8),
                           ("conv", CONV_KICK, 1), ("conv", CONV_IRQ, 0)]
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)


def test_the_probe_sequence_unmasks_the_ipi_and_without_it_nothing_arrives():
    with dvsdk.open_device("sim://") as dev:  # a stock board: the R5 kick
        assert dev.kick == "r5" and dev.info().kick == "r5"
        assert dev.read32("ipi", IPI_IMR) & 0x100 == 0  # the open did IDR, ISR, IER, IER
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            dev.write32("ipi", IPI_IDR, 0x100)  # masked again: the R5's IPI cannot arrive
            with pytest.raises(DeviceTimeout, match="ISR=0x100 IMR=0xffffffff"):
                cl.run(timeout=0.05)
            dev.write32("ipi", IPI_IER, 0x100)  # the pending completion is delivered now
            dev.wait_irq("ipi", 0.05)
            dev.write32("ipi", IPI_ISR, 0x100)
            assert dev.read32("ipi", IPI_ISR) == 0
            cl.run()
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)


def test_on_an_r5_board_a_direct_kick_never_interrupts_the_cpu():
    """The R5 owns the conv interrupt: the pre-2019 kick runs the stream but the CPU's
    wait on 0x420 times out (a stock board would "never see our kick" complete); the
    completion comes as the R5's IPI instead."""
    with dvsdk.open_device("sim://?kick=r5") as dev:
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            dev.write32("conv", CONV_CMD_ADDR, cl.stream.address)
            dev.write32("conv", CONV_CMD_LEN, cl.stream.length8)
            dev.write32("conv", CONV_KICK, 1)
            with pytest.raises(DeviceTimeout):
                dev.wait_irq("conv", 0.02)
            assert dev.read32("conv", CONV_IRQ) == 0 and dev.read32("ipi", IPI_ISR) == 0x100


def test_a_trigger_without_the_start_flag_does_nothing():
    with dvsdk.open_device("sim://") as dev:
        cmd, _ = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            dev.write32("shm", SHM_ADDR, cl.stream.address)
            dev.write32("shm", SHM_LEN8, cl.stream.length8)
            dev.write32("ipi", IPI_TRIG, 0x100)  # STREAM_START still 0
            with pytest.raises(DeviceTimeout):
                dev.wait_irq("ipi", 0.02)
            assert dev.core.stats["kicks"] == 0 and dev.core.r5.triggers == 1
            dev.write32("shm", SHM_START, 1)
            dev.write32("ipi", IPI_TRIG, 0x100)
            dev.wait_irq("ipi", 0.05)
            assert dev.read32("shm", SHM_START) == 0  # the firmware consumed the flag


def test_a_direct_board_has_no_r5_windows():
    with dvsdk.open_device("sim://?kick=direct") as dev:
        assert dev.windows == ("conv", "ipu", "maximizer")
        with pytest.raises(InvalidArgument, match="no such unit"):
            dev.write32("ipi", IPI_TRIG, 0x100)
    with pytest.raises(dvsdk.errors.InvalidURL, match="kick"):
        dvsdk.open_device("sim://?kick=r6")


# -- the board: discovery and the kick chosen by what it exposes ----------------------------

def test_uio_picks_the_kick_by_the_windows_the_board_exposes(tmp_path):
    r5 = open_fake_device(tmp_path / "r5", kick="r5")
    direct = open_fake_device(tmp_path / "direct", kick="direct")
    try:
        assert r5.kick == "r5" and "ipi = UIO uio3 named 'ipi'" in r5.kick_reason
        assert r5.info().extra["r5_windows"]["shm"] == "UIO uio4 named 'shm'"
        assert direct.kick == "direct" and "no ipi or shm window" in direct.kick_reason
        # the probe sequence reached the board's IPI: the channel is unmasked
        ipi = r5.fake_board.core.regs["ipi"]
        assert ipi[IPI_IMR // 4] & 0x100 == 0
        # open() put the direct board in command-list mode, and left the R5 board's alone
        assert direct.fake_board.regs["conv"][CONV_MODE // 4] == 1
        assert r5.fake_board.regs["conv"][CONV_MODE // 4] == 0
        for dev in (r5, direct):
            run_ones_conv(dev)
        assert r5.fake_board.irqs["ipi"] == 1 and r5.fake_board.irqs["conv"] == 0
        assert direct.fake_board.irqs["conv"] == 1
    finally:
        r5.close()
        direct.close()


def test_uio_kick_overrides(tmp_path):
    board = make_fake_board(tmp_path / "direct", kick="direct")
    try:
        with pytest.raises(DeviceNotFound, match="no ipi and no shm window") as e:
            dvsdk.open_device(board.url + "&kick=r5")
        assert e.value.field == "kick" and "0xff340000" in str(e.value)
    finally:
        board.close()
    board = make_fake_board(tmp_path / "r5", kick="r5")
    try:
        with dvsdk.open_device(board.url + "&kick=direct") as dev:  # forced: no R5 windows
            assert dev.kick == "direct" and dev.windows == ("conv", "ipu", "maximizer")
            cmd, _ = ones_conv(dev)
            with CommandList(dev) as cl:
                cl.add(cmd)
                cl.commit()
                with pytest.raises(DeviceTimeout):  # the R5 swallows the conv interrupt
                    cl.run(timeout=0.1)
    finally:
        board.close()


def test_r5_windows_at_the_default_addresses_and_shm_as_reserved_memory(tmp_path):
    board = make_fake_board(tmp_path, kick="r5", start=False)
    try:
        sysfs = board.sysfs / "class" / "uio"
        for node in ("uio3", "uio4"):  # renamed: found by address (§10.11 defaults) instead
            (sysfs / node / "name").write_text("generic\n")
            (sysfs / node / "maps" / "map0" / "name").write_text("region\n")
        inv = discover(str(board.sysfs), str(board.dev))
        found = inv.r5_windows()
        assert found["ipi"][1] == "UIO uio3 at the default address 0xff340000"
        assert found["shm"][1] == "UIO uio4 at the default address 0x7ed00000"
        assert not any(n.sys_name in ("uio3", "uio4") for n in inv.other_uio)
        # the shared memory as a u-dma-buf of reserved memory instead of a UIO node
        (sysfs / "uio4" / "maps" / "map0" / "addr").write_text("0x0000000090000000\n")
        shm = board.sysfs / "devices" / "virtual" / "u-dma-buf" / "dv700-shm"
        shm.mkdir(parents=True)
        (shm / "phys_addr").write_text("0x000000007ed00000\n")
        (shm / "size").write_text("16777216\n")
        (board.sysfs / "class" / "u-dma-buf" / "dv700-shm").symlink_to(shm)
        inv = discover(str(board.sysfs), str(board.dev))
        assert inv.r5_windows()["shm"][1].startswith("u-dma-buf dv700-shm (reserved memory")
        assert inv.find_udmabuf("").sys_name == "udmabuf0"  # never the R5's memory
    finally:
        board.close()


# -- the agent's guard: an IPI trigger is a kick ----------------------------------------------

def test_the_agent_vets_the_r5_trigger_like_a_kick():
    with dvsdk.open_device("loop://?device=sim://") as dev:  # the agent serves an R5 board
        assert dev.kick == "r5"
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            cl.run()  # its own buffers: runs
            np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
            dev.write32("shm", SHM_ADDR, 0x6F00_0000)  # a stream the session does not own
            dev.write32("shm", SHM_LEN8, 8)
            dev.write32("shm", SHM_START, 1)
            with pytest.raises(AccessViolation) as e:
                dev.write32("ipi", IPI_TRIG, 0x100)
            assert e.value.what == "command stream"


def test_doctor_says_which_kick_it_found_and_why(tmp_path):
    import io

    from dvsdk.cli import doctor

    for kick, expect in (("r5", "[ OK ] kick: R5 kick (SHM + IPI, DMP's current firmware): "
                                "the R5 kick's windows are there: ipi = UIO uio3 named 'ipi'"),
                         ("direct", "[WARN] kick: direct kick (conv 0x400-0x40C, bitstreams "
                                    "before March 2019): no ipi or shm window")):
        board = make_fake_board(tmp_path / kick, kick=kick)
        try:
            out = io.StringIO()
            rc = doctor.main(["--device", board.url], out=out)
            text = out.getvalue()
            assert rc == 0 and expect in text, text
            if kick == "r5":
                assert "ipi node: " in text and "shm node: " in text
            else:
                assert "fix: a board running DMP's current image needs the R5 kick" in text
            out = io.StringIO()
            assert doctor.main(["--device", board.url + "&kick=r5"], out=out) == \
                (0 if kick == "r5" else 3)
        finally:
            board.close()
