"""Cache maintenance of dv:// buffers (issue 26 item 6): what is issued on each path.

libdmpdv (dv-user-driver ``include/mem.hpp``, 5b3ebee) cleans / cleans-and-invalidates the
CPU's 64-byte lines of a mapping with ``DC CVAC`` / ``DC CIVAC`` and ``DSB SY`` on aarch64,
besides the dma-buf sync ioctl.  The fake module records the ioctls; a recording pair of
line routines stands in for the machine code (the lowest level: the routine's call with
its start and end addresses).  Where an aarch64 assembler is installed, the machine code
is compared with what it assembles; under an aarch64 CPU (``tools/aarch64-check``) the
routines are run for real."""

from __future__ import annotations

import mmap
import platform
import shutil
import subprocess

import pytest

from dvsdk.driver import cacheline

from .fakedv import open_fake_kmod

SYNC_IOCTL = 0x40086200  # linux/dma-buf.h DMA_BUF_IOCTL_SYNC
START, END, READ, WRITE = 0, 4, 1, 2


def _recording(tmp_path, lines, events=None):
    """A dv:// device on the fake module whose sync ioctls are logged into ``events``."""
    events = [] if events is None else events
    dev = open_fake_kmod(tmp_path, cache_lines=lines)
    real = dev._ioctl

    def ioctl(fd, request, arg):
        if request == SYNC_IOCTL:
            events.append(("sync", int.from_bytes(arg[:8], "little")))
        return real(fd, request, arg)

    dev._ioctl = ioctl
    return dev, events


def test_aarch64_path_cleans_lines_after_the_ioctl_and_invalidates_before_it(tmp_path):
    log = []  # the ioctls and the line routines' calls, in call order
    lines = cacheline.LineOps(clean=lambda s, e: log.append(("DC CVAC", s, e)),
                              clean_invalidate=lambda s, e: log.append(("DC CIVAC", s, e)))
    dev, _ = _recording(tmp_path, lines, log)
    try:
        buf = dev.alloc(4096, name="x")
        log.clear()
        base = buf.address
        assert base % mmap.PAGESIZE == 0
        buf.sync_for_device(100, 200)
        assert log == [("sync", START | WRITE), ("sync", END | WRITE),
                       ("DC CVAC", base + 64, base + 300)]  # from the line holding byte 100
        log.clear()
        buf.sync_for_cpu(0, 4096)
        assert log == [("DC CIVAC", base, base + 4096),
                       ("sync", START | READ), ("sync", END | READ)]
        assert dev.info().extra["cache_lines"] == "given"
    finally:
        dev.close()


def test_other_cpus_use_the_ioctl_alone(tmp_path):
    assert cacheline.line_ops("x86_64")[0] is None
    dev, log = _recording(tmp_path, None)
    try:
        buf = dev.alloc(4096, name="x")
        log.clear()
        buf.sync_for_device()
        buf.sync_for_cpu()
        assert log == [("sync", START | WRITE), ("sync", END | WRITE),
                       ("sync", START | READ), ("sync", END | READ)]
    finally:
        dev.close()


def test_a_line_range_covers_every_line_it_touches():
    calls = []
    ops = cacheline.LineOps(clean=lambda s, e: calls.append((s, e)),
                            clean_invalidate=lambda s, e: calls.append((s, e)))
    ops.apply("clean", 0x1003F, 2)  # two bytes across a line boundary
    ops.apply("clean", 0x10000, 0)  # nothing: the routine runs at least one line
    assert calls == [(0x10000, 0x10041)]


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-as") is None,
                    reason="no aarch64 assembler (binutils-aarch64-linux-gnu)")
def test_the_machine_code_is_what_an_assembler_makes(tmp_path):
    src = tmp_path / "lines.s"
    src.write_text("".join(f"l{i}: dc {op}, x0\n add x0, x0, #64\n cmp x0, x1\n b.lo l{i}\n"
                           " dsb sy\n ret\n .balign 32, 0\n"
                           for i, op in enumerate(("cvac", "civac"))))
    obj, out = tmp_path / "lines.o", tmp_path / "lines.bin"
    subprocess.run(["aarch64-linux-gnu-as", str(src), "-o", str(obj)], check=True)
    subprocess.run(["aarch64-linux-gnu-objcopy", "-O", "binary", "-j", ".text", str(obj),
                    str(out)], check=True)
    assert cacheline._machine_code() == out.read_bytes()


@pytest.mark.skipif(platform.machine() != "aarch64", reason="runs the routines: aarch64 only")
def test_the_routines_run_on_this_cpu():
    ops, why = cacheline.line_ops()
    assert ops is not None, why
    mm = mmap.mmap(-1, 3 * 4096)
    mm[:] = b"\x5a" * len(mm)
    base = cacheline.mapping_address(mm)
    ops.apply("clean", base + 10, 5000)
    ops.apply("clean_invalidate", base, len(mm))
    assert mm[:] == b"\x5a" * len(mm)  # maintenance never changes what the CPU sees
    mm.close()
