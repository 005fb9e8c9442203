"""dv:// against every generation of DMP's kernel module (issue 26 items 1, 2, 3, 7, 8).

The fake module (``tests/fakedv.py``) is built from DMP's header facts, not dvsdk's spec, and
behaves as the module of one commit of dv-kernel-driver: its MODULE_VERSION, its WAIT, its
alignment, u8 input, the pre-R5 kick, and the answer every generation gives to an ioctl
number it does not know (0, having done nothing)."""

from __future__ import annotations

import fcntl
import os

import numpy as np
import pytest

from dvsdk.driver import kmodver
from dvsdk.driver.cmdlist import CommandList
from dvsdk.errors import (
    DeviceError,
    DeviceTimeout,
    InvalidCommand,
    OutOfDeviceMemory,
    UnsupportedDevice,
)

from .abi_facts import IOCTLS
from .fakedv import open_fake_kmod
from .hw import download_tensor, ones_conv, run_ones_conv, upload_tensor

#: the generations the issue names, and the fake's commit for each
SUPPORTED = {"2019-02": "7.0.20190215", "2019-05": "7.1.20190410",
             "2019-07": "7.2.20190716", "7.2.x": "7.2.20190729"}


@pytest.mark.parametrize("generation", sorted(SUPPORTED))
def test_each_generation_runs_a_conv_with_its_own_abi(tmp_path, generation):
    """Item 2: the version from sysfs, the WAIT that generation knows (no ioctl the module
    answered 0 unhandled), the exec time only where the module reports it."""
    dev = open_fake_kmod(tmp_path, generation=generation)
    fake = dev.fake_kmod
    try:
        abi = dev.abi
        assert abi.version == SUPPORTED[generation] and abi.source.endswith("dmp_dv/version")
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            us = cl.run()
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
        assert fake.unknown == [] and fake.problems == []
        waits = {r for k, r in fake.calls if k == "conv"} - {IOCTLS["DMP_DV_IOC_APPEND_CMD"],
                                                          IOCTLS["DMP_DV_IOC_RUN"]}
        old = generation == "2019-02"
        assert waits == {IOCTLS["DMP_DV_IOC_WAIT_before_96130ca" if old
                                else "DMP_DV_IOC_WAIT"]}
        assert (us == 0) == old  # no exec time before 96130ca
        info = dev.info()
        assert info.extra["module"] == SUPPORTED[generation]
        assert info.extra["module_kick"] == ("direct" if old else "r5")
        assert info.io_align == (2 if generation in ("2019-07", "7.2.x") else 16)
    finally:
        dev.close()


def test_the_version_string_that_spans_both_waits_is_probed(tmp_path):
    """7.1.20190410 was the version of builds before and after 96130ca: dvsdk asks the
    module, with a WAIT only the newer build handles."""
    for generation, wait in (("2019-04", "v0"), ("2019-05", "kwait")):
        dev = open_fake_kmod(tmp_path / generation, generation=generation)
        try:
            assert (dev.abi.version, dev.abi.wait) == ("7.1.20190410", wait)
            run_ones_conv(dev)
        finally:
            dev.close()


def test_a_wait_the_module_did_not_handle_is_never_a_completion(tmp_path):
    """Item 2: told the module is 7.2.20190729 while it is a build from before 96130ca,
    dvsdk's WAIT is a number that module does not know: it returns 0 having done nothing.
    That must not pass for a completion (the outputs would be read too early)."""
    dev = open_fake_kmod(tmp_path, generation="2019-04", module="7.2.20190729")
    fake = dev.fake_kmod
    try:
        cmd, out = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            with pytest.raises(DeviceError, match="did not handle WAIT"):
                cl.run()
        assert IOCTLS["DMP_DV_IOC_WAIT"] in fake.unknown
    finally:
        dev.close()


@pytest.mark.parametrize("generation,version", [
    ("2018-12", "7.0.20181214"), ("dv740", "7.40.20200824")])
def test_older_and_dv740_modules_are_refused_by_name(tmp_path, generation, version):
    with pytest.raises(UnsupportedDevice, match=version.replace(".", r"\.")) as e:
        open_fake_kmod(tmp_path, generation=generation)
    assert e.value.value == version and "7.2.20190729" in e.value.limit


def test_an_unknown_or_unreadable_version_is_refused_unless_declared(tmp_path):
    with pytest.raises(UnsupportedDevice, match="cannot tell which version"):
        open_fake_kmod(tmp_path / "a", version_file=False)
    dev = open_fake_kmod(tmp_path / "b", version_file=False, module="7.2.20190729")
    try:
        assert dev.abi.source == "dv://?module=" and dev.abi.version == "7.2.20190729"
    finally:
        dev.close()
    with pytest.raises(UnsupportedDevice, match="does not know"):
        kmodver.identify("7.3.20210101", "sysfs")


@pytest.mark.parametrize("generation,ok", [("2019-05", False), ("2019-07", True)])
def test_io_alignment_is_the_generations(tmp_path, generation, ok):
    """Item 3: an input 2 bytes into its buffer: refused before it reaches a module older
    than 107f6a2 (which would refuse it, 16-byte alignment), taken by a newer one."""
    dev = open_fake_kmod(tmp_path, generation=generation)
    try:
        cmd, out = ones_conv(dev, in_offset=2)
        with CommandList(dev) as cl:
            if not ok:
                with pytest.raises(InvalidCommand, match="16-byte aligned") as e:
                    cl.add(cmd)
                assert e.value.limit == "multiple of 16"
                return
            cl.add(cmd)
            cl.commit()
            cl.run()
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
    finally:
        dev.close()


def test_the_fake_module_itself_enforces_the_old_alignment(tmp_path):
    """The check is the module's too: declared as 7.2.20190716, a 2019-05 module refuses."""
    dev = open_fake_kmod(tmp_path, generation="2019-05", module="7.2.20190716")
    try:
        cmd, _ = ones_conv(dev, in_offset=2)
        with CommandList(dev) as cl:
            cl.add(cmd)
            with pytest.raises(InvalidCommand, match="refused the conv APPEND_CMD"):
                cl.commit()
    finally:
        dev.close()


def test_u8_input_on_a_module_without_it_is_refused_before_sending(tmp_path):
    dev = open_fake_kmod(tmp_path, generation="2019-02")
    try:
        cmd, _ = ones_conv(dev)
        table = upload_tensor(dev, np.zeros((1, 1, 768), np.float32))
        v1 = cmd.replace(u8tofp16_table=table)
        assert v1.version == 1
        from dvsdk.driver.kmod import KernelSubmission
        with pytest.raises(InvalidCommand, match="predates u8 input"):
            KernelSubmission(dev, "conv", [v1])
    finally:
        dev.close()


def test_default_wait_is_the_kernel_workers_budget_and_close_is_bounded(tmp_path):
    """Item 7: dv:// waits what the module's worker waits (10 x 2 s); after a timeout
    the kernel's release blocks in flush_workqueue until the worker gives up, so the
    fds close on a thread and close() returns after close_timeout, naming them."""
    from dvsdk.driver.kmod import KmodDevice
    dev = open_fake_kmod(tmp_path, timeout=0, close_timeout=0.05, wait_timeout=0.01,
                         hw_wait=3600)
    fake = dev.fake_kmod
    try:
        cmd, _ = ones_conv(dev)
        cl = CommandList(dev)
        cl.add(cmd)
        cl.commit()
        fake.hang_next = 1
        with pytest.raises(DeviceTimeout):
            cl.run(timeout=0.05)
        cl.close()  # returns: the close itself went to a thread
        fds = list(fake.released)
        KmodDevice.close(dev)  # bounded by close_timeout while the worker still waits
        assert dev.still_closing and fake.released == fds
        fake.give_up.set()  # the worker gives up (20 s on a board): the release ends
        for t in dev.closing:
            t.join(10)
        assert len(fake.released) > len(fds)
    finally:
        fake.give_up.set()
        dev.close()


def test_dv_url_defaults_are_the_kernels(tmp_path):
    from dvsdk.driver.kmod import DEFAULT_TIMEOUT, WORKER_BUDGET
    assert DEFAULT_TIMEOUT == WORKER_BUDGET == 20.0
    dev = open_fake_kmod(tmp_path)
    try:
        assert dev.timeout == 20.0 and dev.close_timeout == 20.0
    finally:
        dev.close()


def test_nodes_are_opened_read_only_and_high_memory_is_a_typed_error(tmp_path):
    """Item 8: libdmpdv opens the nodes O_RDONLY; a buffer ending above 4 GiB makes the
    module answer EPERM (-1), which is an error naming the limit."""
    dev = open_fake_kmod(tmp_path, high_memory=True)
    fake = dev.fake_kmod
    try:
        cmd, _ = ones_conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            with pytest.raises(OutOfDeviceMemory, match="above 4 GiB") as e:
                cl.commit()
        assert e.value.limit == "dma_addr + size <= 0x100000000"
        assert not [p for p in fake.problems if "O_RDONLY" in p]
        fd = dev.open_unit("conv")
        try:
            assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
        finally:
            os.close(fd)
    finally:
        dev.close()


def test_a_pre_r5_module_has_a_read_only_clock(tmp_path):
    dev = open_fake_kmod(tmp_path, generation="2019-02")
    try:
        with pytest.raises(DeviceError, match="read-only"):
            dev.set_clock(200)
    finally:
        dev.close()
