"""The pre-R5 register map (issue 26 item 4): a bitstream kicked directly (before DMP's R5
kernel, fd4fbba) is one whose identity registers sit elsewhere, in other units, and whose
controller runs its ROM firmware only once the driver selects it.

The expected offsets are DMP's 2019-02 kernel's (src/dmp-dv.c at 2994b64), from the header
facts in ``tests/data/dmp_abi_facts.json``, not from firmware_spec: probe writes 0x40C = 1
and 0x44 = 1; UBUF size in KiB at 0x148, the MAC count at 0x14C, the version at 0x140, the
SVN revision at 0x144, max input size at 0x150, byte counters at 0x180/0x184/0x188."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.errors import DeviceFault
from dvsdk.sim.core import SimParams
from dvsdk.sim.device import SimDevice

from .abi_facts import FACTS
from .fakeboard import make_fake_board
from .hw import download_tensor, ones_conv, run_ones_conv
from .test_kick import _recorded

PRE = FACTS["pre_r5_conv_registers"]
R5 = FACTS["r5_conv_registers"]


def test_the_direct_kick_opens_as_the_2019_02_kernel_probes():
    """0x40C = 1 and 0x44 = 1 (ROM firmware), nothing at 0x144 (read-only SVN there)."""
    dev = SimDevice.__new__(SimDevice)  # record the probe of a fresh device
    log = _recorded(dev)
    SimDevice.__init__(dev, SimParams(kick="direct"))
    try:
        assert [(u, o, v) for u, o, v in log if u == "conv"] == \
            [("conv", off, value) for off, value in PRE["probe_writes"]]
        assert dev.read32("conv", PRE["svn_version"]) != R5["perf_config_value"]
    finally:
        dev.close()


@pytest.mark.parametrize("kick", ["direct", "r5"])
def test_sim_identity_registers_are_where_that_kernel_reads_them(kick):
    with dvsdk.open_device(f"sim://?kick={kick}&ub_size={640 << 10}&mac_num=1152") as dev:
        info = dev.info()
        assert (info.ub_size, info.mac_num) == (640 << 10, 1152)
        rd = dev.read32
        if kick == "direct":
            assert rd("conv", PRE["ubuf_size_kib"]) == 640
            assert rd("conv", PRE["mac_num"]) == 1152
            assert rd("conv", PRE["hw_version"]) & 0xFFFF == info.hw_version
            for r5_only in (R5["ubuf_size_bytes"], R5["mac_groups_x72"], R5["hw_version"]):
                assert rd("conv", r5_only) == 0  # nothing there on such a bitstream
        else:
            assert rd("conv", R5["ubuf_size_bytes"]) == 640 << 10
            assert rd("conv", R5["mac_groups_x72"]) * 72 == 1152
            assert rd("conv", R5["perf_config"]) == R5["perf_config_value"]
            assert rd("conv", PRE["ubuf_size_kib"]) == 0


def test_without_the_rom_firmware_a_pre_r5_controller_runs_nothing():
    with dvsdk.open_device("sim://?kick=direct") as dev:
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            dev.write32("conv", PRE["firmware_select"], 0)  # what kick=direct used to omit
            with pytest.raises(DeviceFault, match="bad_config"):
                cl.run()
            assert "has no firmware" in dev.core.errors[-1]
            dev.reset()
            dev.write32("conv", PRE["firmware_select"], 1)
            cl.run()
            # the byte counters of a pre-R5 bitstream: three beat registers
            assert dev.read32("conv", PRE["output_beats"]) * 16 == 4 * 4 * 8 * 2
            assert cl.last.output_bytes == 256 and cl.last.input_bytes > 0
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)


@pytest.mark.parametrize("kick", ["direct", "r5"])
def test_the_fake_board_and_uio_agree_on_each_map(tmp_path, kick):
    """The fake board puts the identity where DMP's kernel of that kick reads it (facts);
    uio:// reads it back from the map of the kick it detects."""
    b = make_fake_board(tmp_path, kick=kick, ubuf_size=256 << 10, mac_groups=4,
                        hw_version=0x0721)
    try:
        with dvsdk.open_device(b.url) as d:
            info = d.info()
            assert info.kick == kick
            assert info.extra["register_map"] == ("pre_r5" if kick == "direct" else "r5")
            assert (info.ub_size, info.mac_num, info.hw_version) == (256 << 10, 288, 0x0721)
            run_ones_conv(d)
    finally:
        b.close()
