"""DMA memory as dma-bufs, for DMP's kernel module (``dv://``): dma-heap, else ION.

The DV700 needs physically contiguous memory below 4 GiB (§0, §6.8).  With DMP's module
the kernel resolves a buffer's bus address from its dma-buf fd (``dma_buf_attach``,
§6.8), so user space allocates dma-bufs and never learns physical addresses:

* ``/dev/dma_heap/<name>`` (linux-dma.md §5.3): ``DMA_HEAP_IOCTL_ALLOC`` with
  ``fd_flags = O_RDWR | O_CLOEXEC``; only a CMA or carveout heap is contiguous (the
  ``system`` heap is not, and the module refuses its buffers with EINVAL);
* else ``/dev/ion`` as libdmpdv does (§2.2, linux-dma.md §5.4): ``ION_IOC_HEAP_QUERY``
  twice (count, then the list), the heaps of type ``ION_HEAP_TYPE_DMA`` (4) form the mask,
  ``ION_IOC_ALLOC`` with ``ION_FLAG_CACHED``; the real size is ``lseek(fd, 0, SEEK_END)``.

Each buffer is ``mmap``-ed once (shared, cached).  Cache maintenance is what libdmpdv
does (§2.2, :mod:`dvsdk.driver.cacheline`), two parts:

* ``DMA_BUF_IOCTL_SYNC`` on the buffer's fd, as libdmpdv brackets CPU access:
  ``sync_for_device`` issues ``START|WRITE`` then ``END|WRITE`` (the end cleans the CPU's
  stores out to memory for the devices the exporter knows), ``sync_for_cpu``
  ``START|READ`` then ``END|READ`` (the start invalidates).  A dma-buf syncs whole;
* on aarch64, the CPU's own lines of the range, as ``dmp_dv_mem_to_device`` /
  ``dmp_dv_mem_to_cpu``: ``DC CVAC`` per 64-byte line then ``DSB SY`` after the ioctl for
  the device, ``DC CIVAC`` per line then ``DSB SY`` before the ioctl for the CPU.  DMP
  added these (dv-user-driver 5b3ebee, 2019-06) because the exporter's sync reaches only
  the devices attached at that moment: DMP's module attaches a buffer at commit, so the
  inputs written before a first commit are cleaned by nobody else.

``DmaBuffer.phys`` on these buffers is an address *token*: page aligned like the real
buffer, unique per live buffer, below 4 GiB, used for alignment checks and bookkeeping
only; the kernel module programs the real address.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
from collections.abc import Callable

import numpy as np

from ..errors import DeviceError, DeviceNotFound, InvalidArgument, OutOfDeviceMemory
from ..hw.spec import SPEC
from . import cacheline
from .allocator import RegionAllocator
from .device import Device, DmaBuffer

Ioctl = Callable[[int, int, bytearray], int]

KERNEL = SPEC.kernel
SYNC = KERNEL["dma_buf_sync"]
DMA_BUF_IOCTL_SYNC = SPEC.ioctl("DMA_BUF_IOCTL_SYNC")
DMA_HEAP_IOCTL_ALLOC = SPEC.ioctl("DMA_HEAP_IOCTL_ALLOC")
ION_IOC_ALLOC = SPEC.ioctl("ION_IOC_ALLOC")
ION_IOC_HEAP_QUERY = SPEC.ioctl("ION_IOC_HEAP_QUERY")
HEAP_ALLOC = SPEC.struct("dma_heap_allocation_data")
SYNC_ARG = SPEC.struct("dma_buf_sync")
ION_ALLOC = SPEC.struct("ion_allocation_data")
ION_QUERY = SPEC.struct("ion_heap_query")
ION_HEAP = SPEC.struct("ion_heap_data")
PAGE = mmap.PAGESIZE
#: where the address tokens live: page aligned, below 4 GiB (module docstring)
TOKEN_BASE, TOKEN_SPACE = 0x1000_0000, 0xE000_0000


def contiguous_heap(names: list[str]) -> str | None:
    """The dma-heap to allocate from: a CMA / reserved one, never ``system``."""
    good = [n for n in names if n != "system" and not n.startswith("system")]
    for preferred in ("linux,cma", "reserved"):
        if preferred in good:
            return preferred
    return good[0] if good else None


class KmodDmaBuffer(DmaBuffer):
    """One dma-buf: its fd, its shared mapping, and the address token (module docstring)."""

    def __init__(self, pool: DmaBufPool, fd: int, size: int, nbytes: int, token: int,
                 name: str, device: Device | None) -> None:
        try:
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            os.close(fd)
            raise DeviceError(f"cannot mmap dma-buf {name}: {e}", field="dma",
                              value=name) from None
        super().__init__(device, token, np.frombuffer(self.mm, np.uint8)[:nbytes], name)
        self.pool = pool
        self.fd = fd
        self.syncs = 0
        self.address = cacheline.mapping_address(self.mm)  # the mapping's virtual address

    def _sync(self, direction: int) -> None:
        for phase in (SYNC["start"], SYNC["end"]):
            arg = bytearray(SYNC_ARG.pack({"flags": phase | direction}))
            self.pool.ioctl(self.fd, DMA_BUF_IOCTL_SYNC, arg, f"sync of {self.name}")
        self.syncs += 1

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        self._sync(SYNC["write"])
        if self.pool.lines is not None:  # dmp_dv_mem_to_device: clean the lines
            self.pool.lines.apply("clean", self.address + offset, nbytes)

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        if self.pool.lines is not None:  # dmp_dv_mem_to_cpu: clean + invalidate the lines
            self.pool.lines.apply("clean_invalidate", self.address + offset, nbytes)
        self._sync(SYNC["read"])

    def _free(self) -> None:
        self.pool.release(self)


class DmaBufPool:
    """Allocates dma-bufs from a dma-heap (``heap``) or ION (``heap="ion"``)."""

    def __init__(self, dev_root: str, heap: str, ioctl: Ioctl,
                 lines: cacheline.LineOps | None | str = "auto") -> None:
        self.dev_root = dev_root
        self._ioctl = ioctl
        #: the CPU's line routines (aarch64), or None; ``lines_reason`` says which and why
        if lines == "auto":
            self.lines, self.lines_reason = cacheline.line_ops()
        else:
            self.lines = lines  # type: ignore[assignment]
            self.lines_reason = "given" if lines is not None else "none"
        self.tokens = RegionAllocator(TOKEN_SPACE, base=TOKEN_BASE)
        self.live: dict[int, KmodDmaBuffer] = {}
        self.ion_mask = 0
        if heap == "ion":
            self.source = os.path.join(dev_root, "ion")
            self.fd = self._open(self.source)
            self.ion_mask = self._ion_mask()
        else:
            self.source = os.path.join(dev_root, "dma_heap", heap)
            self.fd = self._open(self.source)
        self.name = heap

    @staticmethod
    def _open(path: str) -> int:
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except PermissionError:
            raise DeviceError(f"no permission to open {path}", field="dma", value=path,
                              hint="install udev/99-dmp-dv700.rules and join group dvsdk "
                                   "(run: dvsdk doctor)") from None
        except OSError as e:
            raise DeviceNotFound(f"cannot open {path}: {e.strerror}", field="dma",
                                 value=path) from None

    def ioctl(self, fd: int, request: int, arg: bytearray, what: str,
              nbytes: int = 0) -> int:
        try:
            return self._ioctl(fd, request, arg)
        except OSError as e:
            if e.errno == errno.ENOMEM:
                raise OutOfDeviceMemory(f"{what}: the kernel has no contiguous memory left",
                                        requested=nbytes, field="dma",
                                        value=self.source) from None
            raise DeviceError(f"{what} failed: {os.strerror(e.errno or 0)}", field="dma",
                              value=self.source) from None

    def _ion_mask(self) -> int:
        """libdmpdv's context: ``ION_IOC_HEAP_QUERY`` twice; DMA heaps form the mask."""
        arg = bytearray(ION_QUERY.pack({}))
        self.ioctl(self.fd, ION_IOC_HEAP_QUERY, arg, "ION heap query")
        count = ION_QUERY.unpack(arg)["cnt"]
        if not 1 <= count <= int(KERNEL["ion"]["max_heaps"]):
            raise DeviceNotFound("ION reports no usable heap count", field="dma",
                                 value=count, limit=f"1..{KERNEL['ion']['max_heaps']}")
        heaps = ctypes.create_string_buffer(count * ION_HEAP.size)
        arg = bytearray(ION_QUERY.pack({"cnt": count, "heaps": ctypes.addressof(heaps)}))
        self.ioctl(self.fd, ION_IOC_HEAP_QUERY, arg, "ION heap query")
        raw = np.frombuffer(heaps.raw, np.uint8)
        mask = 0
        for i in range(min(count, ION_QUERY.unpack(arg)["cnt"])):
            h = ION_HEAP.unpack(raw, i * ION_HEAP.size)
            if h["type"] == int(KERNEL["ion"]["heap_type_dma"]):
                mask |= 1 << h["heap_id"]
        if not mask:
            raise DeviceNotFound("ION has no DMA (CMA) heap", field="dma", value=self.source,
                                 limit="a heap of type ION_HEAP_TYPE_DMA (4)")
        return mask

    def alloc(self, nbytes: int, align: int, name: str, device: Device | None
              ) -> KmodDmaBuffer:
        if nbytes <= 0:
            raise InvalidArgument("allocation size must be positive", field="nbytes",
                                  value=nbytes, limit=">= 1")
        if align <= 0 or align & (align - 1) or align > PAGE:
            raise InvalidArgument("a dma-buf is page aligned: alignment must be a power of "
                                  "two up to the page size", field="align", value=align,
                                  limit=f"1..{PAGE}")
        size = -(-nbytes // PAGE) * PAGE
        if self.ion_mask:
            arg = bytearray(ION_ALLOC.pack({"len": size, "heap_id_mask": self.ion_mask,
                                            "flags": int(KERNEL["ion"]["flag_cached"])}))
            self.ioctl(self.fd, ION_IOC_ALLOC, arg, f"ION allocation of {nbytes} bytes",
                       nbytes)
            fd = ION_ALLOC.unpack(arg)["fd"]
            real = os.lseek(fd, 0, os.SEEK_END)
            if real < size:
                os.close(fd)
                raise DeviceError("ION returned a smaller buffer", field="dma", value=real,
                                  limit=size)
        else:
            arg = bytearray(HEAP_ALLOC.pack({"len": size,
                                             "fd_flags": os.O_RDWR | os.O_CLOEXEC}))
            self.ioctl(self.fd, DMA_HEAP_IOCTL_ALLOC, arg,
                       f"dma-heap allocation of {nbytes} bytes", nbytes)
            fd = HEAP_ALLOC.unpack(arg)["fd"]
        try:
            token = self.tokens.base + self.tokens.alloc(size, PAGE)
        except BaseException:
            os.close(fd)
            raise
        try:
            buf = KmodDmaBuffer(self, fd, size, nbytes, token, name or f"dmabuf{fd}", device)
        except BaseException:
            self.tokens.free(token - self.tokens.base)
            raise
        self.live[token] = buf
        return buf

    def release(self, buf: KmodDmaBuffer) -> None:
        self.live.pop(buf.phys, None)
        self.tokens.free(buf.phys - self.tokens.base)
        buf.view = np.zeros(0, np.uint8)
        try:
            buf.mm.close()
        except BufferError:
            pass  # a caller still holds a view: unmapped when it goes
        os.close(buf.fd)

    def close(self) -> None:
        for buf in list(self.live.values()):
            buf.free()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
