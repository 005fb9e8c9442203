"""dv://: DMP's kernel module as the backend, against the fake module of tests/fakedv.py
(the ioctl and mmap level), and the kernel ABI it speaks (dv700-interface.md §2, §5, §10).

The ioctl numbers and struct sizes are checked against the values the reference states
(§5.1, the sizes ``test_context`` asserts in §12, linux-dma.md §5.3), and the ION numbers
against the asm-generic _IOC formula written out here."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

import dvsdk
from dvsdk.cli.main import run as dvsdk_main
from dvsdk.driver import kabi
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvRun, IpuCommand, MaximizerCommand
from dvsdk.driver.unitregs import ipu_writes
from dvsdk.errors import DeviceTimeout, InvalidArgument, InvalidCommand
from dvsdk.hw.spec import SPEC

from .fakedv import open_fake_kmod
from .hw import download_tensor, ones_conv, run_ones_conv, upload
from .refs import maximizer_ref, to_whc8


def _ioc(direction: int, kind: int, nr: int, size: int) -> int:
    return direction << 30 | size << 16 | kind << 8 | nr


def test_ioctl_numbers_derive_from_the_struct_sizes():
    ioc = {name: SPEC.ioctl(name) for name in SPEC.kernel["ioctls"]}
    assert ioc["DMP_DV_IOC_APPEND_CMD"] == 0x40108201  # §5.1
    assert ioc["DMP_DV_IOC_RUN"] == 0x80088202
    assert ioc["DMP_DV_IOC_WAIT"] == 0x40108203
    assert ioc["DMA_HEAP_IOCTL_ALLOC"] == 0xC0184800  # linux-dma.md §5.3
    assert ioc["DMA_BUF_IOCTL_SYNC"] == 0x40086200
    assert ioc["ION_IOC_ALLOC"] == _ioc(3, ord("I"), 0, 24)
    assert ioc["ION_IOC_HEAP_QUERY"] == _ioc(3, ord("I"), 8, 24)
    sizes = {n: SPEC.struct(n).size for n in ("kcmd", "kwait", "kbuf", "kconv_run", "kconv_v0",
                                               "kconv_v1", "kipu_v0", "kmaximizer_v0")}
    assert sizes == {"kcmd": 16, "kwait": 16, "kbuf": 16, "kconv_run": 56, "kconv_v0": 1864,
                     "kconv_v1": 1888, "kipu_v0": 232, "kmaximizer_v0": 48}


@pytest.fixture
def dv(tmp_path):
    dev = open_fake_kmod(tmp_path)
    try:
        yield dev
    finally:
        dev.close()


def _conv(dev, dilation=0x0000):
    """:func:`ones_conv` with dilation 0 (the field libdmpdv patches to 1, 1)."""
    return ones_conv(dev, dilation=dilation)


def test_the_kernel_struct_is_what_libdmpdv_fills(dv):
    """§5.2: header {72 + 56 runs, 0}, kbufs {fd, 0, offs} (fd -1 for none), dilation 0
    patched to 1 per axis, the dummy 1x1 average pool on a run with neither conv nor pool."""
    cmd, out = _conv(dv)
    act = ConvRun(m=8, conv_enable=0, actfunc=2, p=0x0101)  # an activation-only run
    two = cmd.replace(topo=0b10, runs=[cmd.runs[0], act])
    raw = kabi.pack_conv(two, lambda b: b.fd)
    assert len(raw) == 72 + 56 * 2
    assert int.from_bytes(raw[0:4], "little") == 184 and raw[4:8] == bytes(4)
    assert int.from_bytes(raw[8:12], "little", signed=True) == cmd.input_buf.buffer.fd
    assert int.from_bytes(raw[40:44], "little", signed=True) == -1  # no eltwise buffer
    run0, run1 = raw[72:128], raw[128:184]
    assert int.from_bytes(run0[34:36], "little") == 0x0101  # dilation 0 -> 1, 1
    assert int.from_bytes(run1[38:40], "little") == 2  # pool_enable: the dummy average
    assert int.from_bytes(run1[40:42], "little") == 0x3C00  # x 1.0
    assert (int.from_bytes(run1[42:44], "little"), int.from_bytes(run1[44:46], "little")) == \
        (0x0101, 0x0101)


def test_ipu_scale_registers_without_a_texture_are_fp24_of_one_over_zero(dv):
    """libdmpdv computes FP24(1.0f / tex_width) whatever use_tex says: 1/0 = inf gives
    0x7F0000 (§9.1 FP24 of an infinite value), on the register path and in kipu_v0."""
    rd = upload(dv, np.zeros(8 * 4 * 3, np.uint8), align=16)
    wr = dv.alloc(8 * 4 * 6, align=16)
    cmd = IpuCommand(wr=wr, rect_width=8, rect_height=4, use_tex=0, use_rd=1, rd=rd,
                     stride_rd=8, tex_width=0, tex_height=0)
    regs = dict(ipu_writes(cmd))
    assert regs[0x0C4] == regs[0x0C8] == 0x7F0000
    raw = kabi.pack_ipu(cmd, lambda b: b.fd)
    assert len(raw) == 232
    assert int.from_bytes(raw[68:72], "little") == int.from_bytes(raw[72:76], "little") \
        == 0x7F0000


def test_conv_runs_through_append_run_wait_and_syncs_pair_up(dv):
    fake = dv.fake_kmod
    cmd, out = _conv(dv)
    with CommandList(dv) as cl:
        cl.add(cmd)
        cl.commit()
        assert cl.stream is None  # the module lays out the stream
        us = cl.run()
        assert us > 0 and cl.last.cycles is None
        # the module's byte counters are shared by every process and reset by any
        # reader: dv:// attributes none of them to a run (issue 26 item 7)
        assert (cl.last.input_bytes, cl.last.output_bytes, cl.last.weight_bytes) == (0, 0, 0)
        assert (fake.sys / "class/dmp_dv/dv_conv/output_bytes").read_text() == "256\n"
        cl.run()
    np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
    assert fake.problems == []
    kinds = [k for k, _ in fake.calls]
    assert kinds.count("conv") == 5  # APPEND, RUN, WAIT, RUN, WAIT on one fd
    assert fake.kicks == 2 and (fake.sys / "class/dmp_dv/dv_conv/conv_kick_count"
                                ).read_text() == "2\n"


def test_a_cpu_write_without_sync_never_reaches_the_device(dv):
    """dma-bufs are not coherent: what the CPU stores stays in its cache until
    DMA_BUF_IOCTL_SYNC END|WRITE (sync_for_device)."""
    cmd, out = _conv(dv)
    cmd.input_buf.buffer.view[:] = 0  # stores to the CPU mapping, no sync
    with CommandList(dv) as cl:
        cl.add(cmd)
        cl.commit()
        cl.run()
        np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)  # stale ones
        cmd.input_buf.buffer.sync_for_device()
        cl.run()
    np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 0.0)


def test_wait_retries_ebusy_and_erestartsys_until_done(tmp_path):
    dev = open_fake_kmod(tmp_path, wait_timeout=0.02, hw_wait=0.3, timeout=0)  # shortened
    fake = dev.fake_kmod
    try:
        cmd, out = _conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            fake.restart_next_wait = 2
            original = fake._run_conv

            def slow(words):  # the job takes longer than one WAIT
                import time
                time.sleep(0.1)
                return original(words)

            fake._run_conv = slow
            cl.run(timeout=5)
            np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
            assert fake.restart_next_wait == 0
            fake._run_conv = original
            fake.hang_next = 1  # the job never completes: WAIT stays EBUSY
            with pytest.raises(DeviceTimeout, match="did not complete conv command id 2"):
                cl.run(timeout=0.1)
    finally:
        dev.close()


def test_ipu_and_maximizer_lists_take_one_fd_per_command(dv):
    fake = dv.fake_kmod
    rng = np.random.default_rng(4)
    w, h, nclass = 6, 5, 11
    scores = rng.standard_normal((h, w, nclass)).astype(np.float16)
    ins = [upload(dv, to_whc8(scores * s), align=16) for s in (1, -1)]
    outs = [dv.alloc(w * h, align=16) for _ in ins]
    with CommandList(dv) as cl:
        for i, o in zip(ins, outs, strict=True):
            cl.add(MaximizerCommand(input_buf=i, output_buf=o, width=w, height=h,
                                    nclass=nclass))
        cl.commit()
        cl.run()
    for s, o in zip((1, -1), outs, strict=True):
        o.sync_for_cpu()
        np.testing.assert_array_equal(o.read(), maximizer_ref(scores * s))
    assert sum(1 for k, r in fake.calls if k == "maximizer"
               and r == SPEC.ioctl("DMP_DV_IOC_APPEND_CMD")) == 2
    assert len([s for s in fake.sessions.values() if s.unit == "maximizer"]) == 2


def test_the_fake_module_holds_one_ipu_command_per_fd(dv):
    """A second IPU APPEND on one fd is EBUSY (§15.8), so the backend never sends one."""
    fd = dv.open_unit("ipu")
    try:
        wr = dv.alloc(64 * 6, align=16)
        rd = upload(dv, np.zeros(64 * 3, np.uint8), align=16)
        cmd = IpuCommand(wr=wr, rect_width=8, rect_height=8, use_tex=0, use_rd=1, rd=rd,
                         stride_rd=8)
        import ctypes
        raw = kabi.pack_ipu(cmd, lambda b: b.fd) * 2
        data = ctypes.create_string_buffer(raw)
        arg = bytearray(kabi.KCMD.pack({"cmd_num": 2, "cmd_pointer": ctypes.addressof(data)}))
        with pytest.raises(OSError) as e:
            dv.ioctl(fd, kabi.APPEND_CMD, arg)
        assert e.value.errno == errno.EBUSY
    finally:
        os.close(fd)


def test_ion_when_there_is_no_dma_heap(tmp_path):
    dev = open_fake_kmod(tmp_path, ion=True, heaps=())
    try:
        assert dev.info().extra["heap"] == "ion"
        run_ones_conv(dev, dilation=0)
        assert dev.fake_kmod.ion_flags == 1  # ION_FLAG_CACHED, as libdmpdv allocates
    finally:
        dev.close()


def test_the_module_refuses_a_non_contiguous_heap(tmp_path):
    dev = open_fake_kmod(tmp_path, heap="system")
    try:
        cmd, _ = _conv(dev)
        with CommandList(dev) as cl:
            cl.add(cmd)
            with pytest.raises(InvalidCommand, match=r"kernel module \(7.2.20190729\) refused"):
                cl.commit()
    finally:
        dev.close()


def test_no_registers_and_the_facts_from_sysfs(dv):
    info = dv.info()
    assert (info.ub_size, info.mac_num, info.conv_freq, info.hw_version, info.kick) == \
        (524288, 576, 300, 0x700, "kernel")
    assert not dv.has_registers and dv.windows == ()
    with pytest.raises(dvsdk.errors.DeviceError, match="no interrupt"):
        dv.wait_irq("conv", 0.1)


def test_clock_through_the_module(dv, capsys):
    url = dv.url
    assert dv.set_clock(200) == 200
    with pytest.raises(InvalidArgument, match="50..333 MHz"):  # DMP's set_ai_freq.sh
        dv.set_clock(334)
    with pytest.raises(InvalidArgument, match="50..333 MHz"):
        dv.set_clock(49)
    assert dvsdk_main(["clock", "--device", url]) == 0
    assert capsys.readouterr().out.strip() == "conv clock 200 MHz (sysfs conv_freq)"
    assert dvsdk_main(["clock", "333", "--device", url]) == 0
    assert "conv clock 333 MHz (was 200 MHz" in capsys.readouterr().out
    assert dvsdk_main(["clock", "20", "--device", url]) == 2
    assert "50..333" in capsys.readouterr().err
    assert dvsdk_main(["info", "--device", url]) == 0
    out = capsys.readouterr().out
    assert "conv clock       333 MHz (sysfs conv_freq)" in out and "kick             kernel" \
        in out
    assert dvsdk_main(["clock", "300", "--device", "sim://"]) == 3


def test_doctor_checks_dmps_module(dv, capsys):
    from dvsdk.cli import doctor

    rc = doctor.main(["--device", dv.url])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "[INFO] board: DMP's kernel module (dv://)" in out
    assert "[ OK ] dma: dma-heap linux,cma" in out and "conv_freq is writable" in out
    assert "kick kernel" in out
    assert "[ OK ] module: DMP's module 7.2.20190729 (4a04f54): R5 kick, WAIT with exec " \
        "time, 2-byte input/output alignment" in out and "(50..333)" in out
    (dv.fake_kmod.sys / "module/dmp_dv/version").write_text("7.40.20200824\n")
    rc = doctor.main(["--device", dv.url])
    out = capsys.readouterr().out
    assert rc == 3 and "[FAIL] module: DMP's kernel module 7.40.20200824 is not supported" \
        in out
    (dv.fake_kmod.sys / "module/dmp_dv/version").write_text("7.2.20190729\n")
    (dv.fake_kmod.sys / "class/dmp_dv/dv_conv/ub_size").write_text("0\n")
    rc = doctor.main(["--device", dv.url])
    out = capsys.readouterr().out
    assert rc == 3 and "[FAIL] sysfs: ub_size is '0'" in out


def test_the_link_cannot_serve_dmps_module(dv):
    """The link carries register accesses (link.md §6); dv:// has none to carry."""
    from dvsdk.link.server import LinkServer

    with pytest.raises(dvsdk.errors.DeviceError, match="cannot be served"):
        LinkServer(dv)


def test_dv_urls_and_missing_pieces(tmp_path):
    with pytest.raises(dvsdk.errors.InvalidURL):
        dvsdk.open_device("dv://board")
    with pytest.raises(dvsdk.errors.InvalidURL, match="unknown option"):
        dvsdk.open_device("dv://?kick=r5")
    with pytest.raises(dvsdk.errors.DeviceNotFound, match="module is not loaded"):
        dvsdk.open_device(f"dv://?dev={tmp_path}&sysfs={tmp_path}")
    (tmp_path / "dv_conv").write_bytes(b"")
    with pytest.raises(dvsdk.errors.UnsupportedDevice, match="cannot tell which version"):
        dvsdk.open_device(f"dv://?dev={tmp_path}&sysfs={tmp_path}")
    (tmp_path / "module" / "dmp_dv").mkdir(parents=True)
    (tmp_path / "module" / "dmp_dv" / "version").write_text("7.2.20190729\n")
    (tmp_path / "dma_heap").mkdir()
    (tmp_path / "dma_heap" / "system").write_bytes(b"")
    with pytest.raises(dvsdk.errors.DeviceNotFound, match="no contiguous dma-heap") as e:
        dvsdk.open_device(f"dv://?dev={tmp_path}&sysfs={tmp_path}")
    assert "found: system" in str(e.value)
