"""The interrupt of one UIO node (linux-dma.md §5.1): unmask, wait for the count, remember it.

Writing the 4-byte value 1 unmasks, poll reports an event, reading 4 bytes returns the
u32 event count.  UIO ignores the file position, so we use ``os.pwrite``/``os.pread`` at
fixed offsets beyond the register maps (:data:`IRQ_CTRL_OFFSET`,
:data:`IRQ_COUNT_OFFSET`).  On the real device that is the same as write/read; on a fake
board made of regular files it keeps the unmask word and the event counter out of the
register maps (a plain ``write`` would land on register 0 at the file position).  A
regular file is always "readable", so the wait loop treats an unchanged count as "not
yet" and sleeps 100 us growing to 2 ms before retrying; real UIO blocks in ``poll``.
"""

from __future__ import annotations

import errno
import math
import os
import select
import struct
import threading
import time

from ..errors import DeviceError, DeviceLost
from .discovery import UioNode

#: fake-board layout: the unmask word and the event counter, past any register map
IRQ_CTRL_OFFSET = 0x100000
IRQ_COUNT_OFFSET = IRQ_CTRL_OFFSET + 8
IRQ_FILE_SIZE = IRQ_COUNT_OFFSET + 8
_UNMASK = struct.pack("<I", 1)
_SLEEP_MIN, _SLEEP_MAX = 100e-6, 2e-3
_POLL_BROKEN = select.POLLERR | select.POLLHUP | select.POLLNVAL


class IrqLine:
    """The interrupt of one UIO node: unmask, wait for the count to move, remember it."""

    def __init__(self, node: UioNode, fd: int) -> None:
        self.node = node
        self.fd = fd
        self.positional = True  # pread/pwrite; plain read/write if the file refuses offsets
        self.can_unmask = True
        self.poller = select.poll()
        self.poller.register(fd, select.POLLIN | select.POLLPRI)
        #: one waiter at a time: poll objects refuse concurrent use, and the count seen
        #: and the device's pending set change together
        self.lock = threading.Lock()
        #: a unit's interrupt register was seen non-zero on this (shared) line
        self.flags_read_back = False
        count = self.read_count()
        if count is None:
            count = node.event_count() or 0
        self.seen = count

    def read_count(self) -> int | None:
        """The u32 event count, or None if nothing new (real UIO, non-blocking)."""
        try:
            if self.positional:
                data = os.pread(self.fd, 4, IRQ_COUNT_OFFSET)
            else:
                data = os.read(self.fd, 4)
        except BlockingIOError:
            return None
        except OSError as e:
            if e.errno == errno.ESPIPE and self.positional:
                self.positional = False
                return self.read_count()
            raise DeviceError(f"reading interrupt count of {self.node.dev_path}: {e}",
                              field="irq", value=self.node.dev_path) from None
        return struct.unpack("<I", data)[0] if len(data) == 4 else None

    def unmask(self) -> None:
        if not self.can_unmask:
            return
        try:
            if self.positional:
                os.pwrite(self.fd, _UNMASK, IRQ_CTRL_OFFSET)
            else:
                os.write(self.fd, _UNMASK)
        except OSError as e:
            if e.errno == errno.ESPIPE and self.positional:
                self.positional = False
                self.unmask()
            elif e.errno == errno.ENOSYS:  # driver without irqcontrol: the line stays enabled
                self.can_unmask = False
            elif e.errno == errno.EIO:
                raise DeviceError(f"{self.node.dev_path} has no interrupt", field="irq",
                                  value=self.node.name,
                                  hint="give the DT node an 'interrupts' property") from None
            else:
                raise DeviceError(f"unmasking {self.node.dev_path}: {e}", field="irq") from None

    def consume(self) -> bool:
        """True (and remember it) if the count moved since last seen."""
        count = self.read_count()
        if count is not None and count != self.seen:
            self.seen = count
            return True
        return False

    def wait(self, deadline: float) -> bool:
        """Unmask, then wait until the count moves or ``deadline`` (monotonic) passes."""
        self.unmask()
        if self.consume():
            return True
        delay = _SLEEP_MIN
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready = self.poller.poll(max(1, math.ceil(remaining * 1000)))
            if any(ev & _POLL_BROKEN for _, ev in ready):
                raise DeviceLost(f"{self.node.dev_path} went away while waiting",
                                 field="irq", value=self.node.dev_path)
            if ready and self.consume():
                return True
            if ready:  # regular file (fake board) or spurious wake-up: back off briefly
                time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
                delay = min(delay * 2, _SLEEP_MAX)


