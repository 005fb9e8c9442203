"""CPU cache-line maintenance over a dma-buf mapping, as libdmpdv does it (§2.2).

libdmpdv brackets CPU access with ``DMA_BUF_IOCTL_SYNC`` (``dmp_dv_mem_sync_start/end``)
and, since June 2019 (dv-user-driver 5b3ebee, ``include/mem.hpp``), also offers
``dmp_dv_mem_to_device`` / ``dmp_dv_mem_to_cpu``, documented in ``dmp_dv.h`` as
*behaving differently* from the sync ioctl: they act on the CPU's own cache lines of the
mapping, by virtual address, whatever the kernel's dma-buf exporter does on a sync (ION's
sync only reaches the devices attached at that moment; DMP's module attaches a buffer
when a list that uses it is committed).  On aarch64, per 64-byte line of
``[map + offs, map + offs + size)``, the start rounded down to a line:

* to the device: ``DC CVAC`` (clean to the point of coherency), or ``DC CIVAC`` (clean
  and invalidate) when the CPU will not read the range before the device is done;
* to the CPU: ``DC CIVAC``;
* then ``DSB SY``.

On other CPUs libdmpdv calls ``__builtin___clear_cache``; dvsdk issues no line operation
there (x86-64 keeps DMA coherent with its caches; no 32-bit ARM board is in scope).

dvsdk does both, as libdmpdv's users do: the sync ioctl (what the exporter needs) and the
line operations (what the CPU needs).  Python has no instruction for a cache line, so the
two routines are AArch64 machine code, hand-assembled from the Armv8-A encodings below and
mapped executable from a memfd (the kernel makes a freshly written page's instructions
visible when it maps it for execution).  Where that cannot be had (another CPU, a kernel
refusing executable memfds), :func:`line_ops` says why and only the ioctl is used.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass

LINE = 64  # libdmpdv's CACHE_LINE_SIZE (Cortex-A53: 64-byte lines)

#: ``f(start, end)``: ``loop: DC <op>, X0; ADD X0, X0, #64; CMP X0, X1; B.LO loop;
#: DSB SY; RET`` (x0 = start, rounded down to a line, x1 = end; at least one line)
_ADD_X0_64, _CMP_X0_X1, _B_LO_BACK3 = 0x91010000, 0xEB01001F, 0x54FFFFA3
_DSB_SY, _RET = 0xD5033F9F, 0xD65F03C0
DC_CVAC, DC_CIVAC = 0xD50B7A20, 0xD50B7E20  # SYS #3, C7, C10|C14, #1, X0
ROUTINES = {op: [dc, _ADD_X0_64, _CMP_X0_X1, _B_LO_BACK3, _DSB_SY, _RET]
            for op, dc in (("clean", DC_CVAC), ("clean_invalidate", DC_CIVAC))}
_SLOT = 32  # bytes per routine in the code page

LineFn = Callable[[int, int], None]


@dataclass
class LineOps:
    """The two line routines (``clean``, ``clean_invalidate``) as ``f(start, end)``."""

    clean: LineFn
    clean_invalidate: LineFn

    def apply(self, op: str, address: int, size: int) -> None:
        """``op`` over every line of ``[address, address + size)`` (nothing for size 0)."""
        if size <= 0:
            return
        start = address & ~(LINE - 1)
        getattr(self, op)(start, address + size)


def _machine_code() -> bytes:
    code = bytearray(_SLOT * len(ROUTINES))
    for i, words in enumerate(ROUTINES.values()):
        for j, w in enumerate(words):
            code[i * _SLOT + 4 * j: i * _SLOT + 4 * j + 4] = w.to_bytes(4, "little")
    return bytes(code)


def _load_native() -> LineOps:
    """Map :data:`ROUTINES` executable (raises OSError where the kernel will not)."""
    try:
        fd = os.memfd_create("dvsdk-dcache", 0x10)  # MFD_EXEC (Linux 6.3+)
    except OSError:
        fd = os.memfd_create("dvsdk-dcache", 0)
    try:
        code = _machine_code()
        os.write(fd, code.ljust(mmap.PAGESIZE, b"\0"))
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        base = libc.mmap(None, mmap.PAGESIZE, mmap.PROT_READ | mmap.PROT_EXEC,
                         mmap.MAP_SHARED, fd, 0)
        if base in (None, ctypes.c_void_p(-1).value):
            err = ctypes.get_errno()
            raise OSError(err, f"cannot map code executable: {os.strerror(err)}")
    finally:
        os.close(fd)  # the mapping stays (for the life of the process)
    proto = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
    fns = [proto(base + i * _SLOT) for i in range(len(ROUTINES))]
    return LineOps(*fns)


_cache: dict[str, tuple[LineOps | None, str]] = {}


def line_ops(machine: str | None = None) -> tuple[LineOps | None, str]:
    """The line routines for this CPU and why: ``(ops, "DC CVAC/CIVAC + DSB SY")`` on
    aarch64, ``(None, reason)`` elsewhere or where they cannot be mapped."""
    machine = machine or platform.machine()
    if machine in _cache:
        return _cache[machine]
    if machine not in ("aarch64", "arm64"):
        result: tuple[LineOps | None, str] = (None, f"{machine}: DMA is cache-coherent or no "
                                              "line operation is issued (dma-buf sync only)")
    else:
        try:
            result = (_load_native(), "DC CVAC / DC CIVAC per 64-byte line + DSB SY")
        except OSError as e:
            result = (None, f"line operations unavailable ({e}): dma-buf sync only")
    _cache[machine] = result
    return result


def mapping_address(mm: mmap.mmap) -> int:
    """The virtual address of a (writable) mmap, without keeping an export of it."""
    view = ctypes.c_char.from_buffer(mm)
    try:
        return ctypes.addressof(view)
    finally:
        del view
