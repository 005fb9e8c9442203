"""DMA memory for the board backend: one u-dma-buf, mapped once, sub-allocated.

linux-dma.md §5.2: the buffer is physically contiguous; ``phys_addr`` is what the
DV700 is programmed with.  We ``mmap`` ``/dev/udmabufN`` once and hand out
:class:`UdmaBuffer` slices through :class:`~dvsdk.driver.allocator.RegionAllocator`.

Cache maintenance (non-coherent buffers, the usual case on ZynqMP without the
CCI path): the packed one-shot value
``(offset & 0xFFFFFFFF) << 32 | (size & 0xFFFFFFF0) | (direction & 3) << 2 | 1``
goes first to the ioctls ``U_DMA_BUF_IOCTL_SET_SYNC_FOR_DEVICE`` (0x40085506) /
``..._FOR_CPU`` (0x40085505), which need only access to the device node (driver
4.7.0+), and otherwise is written as ``0x%016X`` to the sysfs files
``sync_for_device`` / ``sync_for_cpu``.  Ranges are rounded out to the 64-byte
cache line.  Nothing is done when ``dma_coherent`` is 1 or the buffer is mapped
uncached (``O_SYNC``).

dma-heap (§5.3) is discovered but refused here: userspace cannot learn a dma-buf's
physical address, so it needs a kernel helper that imports the fd (DMP's kernel module,
the ``dv://`` backend, :mod:`dvsdk.driver.dmabuf`).
"""

from __future__ import annotations

import errno
import fcntl
import mmap
import os
import struct
import warnings

import numpy as np

from ..errors import DeviceError, DeviceNotFound, InvalidArgument
from .allocator import RegionAllocator
from .device import Device, DmaBuffer
from .discovery import DmaHeapNode, UdmabufNode, open_node

IOCTL_SYNC_FOR_CPU = 0x40085505     # _IOW('U', 5, u64)
IOCTL_SYNC_FOR_DEVICE = 0x40085506  # _IOW('U', 6, u64)
DMA_BIDIRECTIONAL, DMA_TO_DEVICE, DMA_FROM_DEVICE = 0, 1, 2
CACHE_LINE = 64  # Cortex-A53
SYNC_METHODS = ("auto", "ioctl", "sysfs", "none")
#: errnos meaning "this fd does not do that ioctl" -> fall back to sysfs
_NO_IOCTL = {errno.ENOTTY, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP}


def packed_sync_value(offset: int, nbytes: int, direction: int) -> int:
    """The u-dma-buf one-shot sync word of linux-dma.md §5.2 (size 16-byte granular)."""
    if not 0 <= offset <= 0xFFFFFFFF or not 0 < nbytes <= 0xFFFFFFF0:
        raise InvalidArgument("sync range must lie below 4 GiB", field="offset+nbytes",
                              value=(offset, nbytes), limit="offset, size < 4 GiB")
    if direction not in (DMA_BIDIRECTIONAL, DMA_TO_DEVICE, DMA_FROM_DEVICE):
        raise InvalidArgument("bad DMA direction", field="direction", value=direction,
                              limit="0..2")
    size = (nbytes + 15) & ~15
    return ((offset & 0xFFFFFFFF) << 32) | (size & 0xFFFFFFF0) | ((direction & 3) << 2) | 1


def cache_range(offset: int, nbytes: int, limit: int, line: int = CACHE_LINE) -> tuple[int, int]:
    """``(start, size)`` rounded out to whole cache lines, clipped to ``limit``."""
    start = offset - offset % line
    end = min(-(-(offset + nbytes) // line) * line, limit)
    return start, end - start


class UdmaBuffer(DmaBuffer):
    """A slice of a :class:`UdmaBufRegion`; syncs go to the whole region's driver."""

    def __init__(self, region: UdmaBufRegion, offset: int, nbytes: int, name: str,
                 device: Device | None) -> None:
        super().__init__(device, region.phys + offset, region.dram[offset:offset + nbytes], name)
        self.region = region
        self.offset = offset

    def _sync_for_device(self, offset: int, nbytes: int) -> None:
        self.region.sync(self.offset + offset, nbytes, DMA_TO_DEVICE)

    def _sync_for_cpu(self, offset: int, nbytes: int) -> None:
        self.region.sync(self.offset + offset, nbytes, DMA_FROM_DEVICE)

    def _free(self) -> None:
        self.region.release(self)


class UdmaBufRegion:
    """One u-dma-buf: ``fd``, the shared mapping, ``dram`` (uint8 view), the allocator.

    ``cached=False`` opens with ``O_SYNC`` (uncached / write-combined per
    ``sync_mode``; slower but needs no maintenance).  ``sync`` forces a method:
    ``auto`` (ioctl, then sysfs), ``ioctl``, ``sysfs`` or ``none``.
    """

    def __init__(self, node: UdmabufNode, *, cached: bool = True, sync: str = "auto") -> None:
        if sync not in SYNC_METHODS:
            raise InvalidArgument("unknown sync method", field="sync", value=sync,
                                  limit=SYNC_METHODS)
        if node.phys_addr is None or not node.size:
            raise DeviceNotFound(f"u-dma-buf {node.sys_name} has no phys_addr/size in sysfs",
                                 field="dma", value=node.sys_path)
        if node.phys_addr + node.size > 1 << 32:
            raise DeviceError(
                f"u-dma-buf {node.sys_name} lies above 4 GiB; the DV700 has 32-bit DMA (§10.11)",
                field="phys_addr", value=hex(node.phys_addr), limit="end <= 0x100000000",
                hint="reserve the CMA / memory-region below 4 GiB in the device tree")
        self.node = node
        self.name = node.sys_name
        self.phys = node.phys_addr
        self.size = node.size
        self.coherent = bool(node.dma_coherent)
        self.cached = cached
        flags = os.O_RDWR | os.O_CLOEXEC | (0 if cached else os.O_SYNC)
        self.fd = open_node(node.dev_path, flags)
        try:
            self.mm = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED,
                                mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            os.close(self.fd)
            raise DeviceError(f"cannot mmap {node.dev_path}: {e}", field="dev",
                              value=node.dev_path) from None
        self.dram: np.ndarray = np.frombuffer(self.mm, dtype=np.uint8)
        self.allocator = RegionAllocator(self.size, base=self.phys)
        self._buffers: dict[int, UdmaBuffer] = {}
        if self.coherent or not cached or sync == "none":
            self.sync_method = "coherent" if self.coherent else ("none" if sync == "none"
                                                                 else "uncached")
        else:
            self.sync_method = sync  # "auto" resolves to ioctl/sysfs on first use
        self.syncs = 0  # count of maintenance operations issued

    # -- allocation -----------------------------------------------------------
    def alloc(self, nbytes: int, align: int = 64, name: str = "",
              device: Device | None = None) -> UdmaBuffer:
        offset = self.allocator.alloc(nbytes, align)
        buf = UdmaBuffer(self, offset, nbytes, name or f"dma@{self.phys + offset:#x}", device)
        self._buffers[offset] = buf
        return buf

    def release(self, buf: UdmaBuffer) -> None:
        self.allocator.free(buf.offset)
        self._buffers.pop(buf.offset, None)

    def live(self) -> list[UdmaBuffer]:
        """Buffers not yet freed (leak accounting)."""
        return list(self._buffers.values())

    # -- cache maintenance -------------------------------------------------------
    def sync(self, offset: int, nbytes: int, direction: int) -> None:
        """Clean (``DMA_TO_DEVICE``) or invalidate (``DMA_FROM_DEVICE``) a region range."""
        if self.sync_method in ("coherent", "uncached", "none") or nbytes <= 0:
            return
        start, size = cache_range(offset, nbytes, self.size)
        value = packed_sync_value(start, size, direction)
        to_device = direction == DMA_TO_DEVICE
        if self.sync_method in ("auto", "ioctl"):
            code = IOCTL_SYNC_FOR_DEVICE if to_device else IOCTL_SYNC_FOR_CPU
            try:
                fcntl.ioctl(self.fd, code, struct.pack("<Q", value))
                self.sync_method = "ioctl"
                self.syncs += 1
                return
            except OSError as e:
                if self.sync_method == "ioctl" or e.errno not in _NO_IOCTL:
                    raise DeviceError(f"u-dma-buf sync ioctl failed: {e}", field="sync",
                                      value=hex(value)) from None
                self.sync_method = "sysfs"  # driver older than 4.7.0, or not a udmabuf fd
        self._sync_sysfs("sync_for_device" if to_device else "sync_for_cpu", value)

    def _sync_sysfs(self, attr: str, value: int) -> None:
        path = self.node.attr_path(attr)
        try:
            with open(path, "w") as f:
                f.write(f"0x{value:016X}")
        except PermissionError:
            raise DeviceError(
                f"cannot write {path}", field="sync", value=path,
                hint="u-dma-buf < 4.7.0 needs writable sysfs sync files: install "
                     "udev/99-dmp-dv700.rules (its RUN rule) or upgrade u-dma-buf") from None
        except OSError as e:
            raise DeviceError(f"u-dma-buf sysfs sync failed: {e}", field="sync",
                              value=path) from None
        self.syncs += 1

    # -- teardown ------------------------------------------------------------
    def close(self) -> list[tuple[str, int, int]]:
        """Free everything; returns ``(name, phys, size)`` of buffers that leaked."""
        leaks = [(b.name, b.phys, b.size) for b in self.live()]
        if leaks:
            warnings.warn(f"{len(leaks)} DMA buffer(s) not freed on close: "
                          + ", ".join(f"{n} ({s} B @ {p:#x})" for n, p, s in leaks),
                          ResourceWarning, stacklevel=3)
        for b in self.live():
            b.free()
        self.dram = np.zeros(0, np.uint8)
        try:
            self.mm.close()
        except BufferError:
            pass  # caller still holds views; unmapped when the last one goes away
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        return leaks


def open_dma_heap(node: DmaHeapNode) -> None:
    """dma-heap is the documented second choice (§5.3) and cannot work here alone.

    A heap hands out dma-buf fds; only a kernel component that imports the fd
    (``dma_buf_attach`` / ``dma_buf_map_attachment``) learns the bus address the
    DV700 must be programmed with.  Until such a helper exists, refuse clearly.
    """
    raise DeviceNotFound(
        f"dma-heap {node.name!r} cannot give the DV700 a physical address from userspace",
        field="dma",
        value=f"heap:{node.name}",
        limit="u-dma-buf (udmabufN)",
        hint="load u-dma-buf (modprobe u-dma-buf udmabuf0=<bytes>, or a DT node "
             "compatible 'ikwzm,u-dma-buf') and use dma=udmabuf0; a dma-heap needs a "
             "kernel helper that imports the dma-buf fd (DMP's kernel module: dv://)",
    )
