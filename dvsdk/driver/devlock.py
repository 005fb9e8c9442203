"""Exclusive access to a board: an ``flock`` per UIO node that records the holder's pid.

``flock(LOCK_EX|LOCK_NB)`` on ``<lock>/dvsdk-<uioN>.lock``; the kernel drops a flock
when its holder dies, so a crash never leaves the board locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
import time

from ..errors import DeviceBusy, DeviceError
from .discovery import parse_int, read_attr

DEFAULT_LOCK_DIRS = ("/run/lock", "/tmp")


def default_lock_dir() -> str:
    for d in DEFAULT_LOCK_DIRS:
        if os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK):
            return d
    return DEFAULT_LOCK_DIRS[-1]


def _process_name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


class DeviceLock:
    """An flock on ``path`` recording the holder's pid (released by the kernel on exit)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = -1

    def _open(self) -> int:
        # No O_CREAT on an existing file: fs.protected_regular refuses O_CREAT on
        # another user's file in a sticky world-writable directory such as /run/lock.
        for _ in range(5):
            try:
                return os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                pass
            except PermissionError:
                return os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)  # lock works read-only
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
                try:
                    os.fchmod(fd, 0o666)  # let the next user record their pid despite umask
                except OSError:
                    pass
                return fd
            except FileExistsError:
                continue
        raise DeviceError("cannot create lock file", field="lock", value=self.path)

    def holder(self) -> int | None:
        text = read_attr(self.path)
        return parse_int(text) if text else None

    def acquire(self) -> None:
        try:
            fd = self._open()
        except OSError as e:
            raise DeviceError(f"cannot open lock file {self.path}: {e}", field="lock",
                              value=self.path, hint="set lock=<writable dir> in the URL") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise DeviceError(f"flock failed on {self.path}: {e}", field="lock") from None
            pid = None
            for _ in range(20):  # the holder may not have written its pid yet
                pid = self.holder()
                if pid:
                    break
                time.sleep(0.005)
            who = f"pid {pid}" if pid else "another process"
            name = _process_name(pid) if pid else ""
            if pid == os.getpid():
                who += " (this process)"
            elif name:
                who += f" ({name})"
            raise DeviceBusy(f"DV700 is in use by {who}", pid=pid, field="lock",
                             value=self.path,
                             hint="wait for it or stop it; a crashed holder releases the lock"
                             ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # read-only lock file: exclusion still holds, only the pid is missing
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            try:
                os.ftruncate(self.fd, 0)
            except OSError:
                pass
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


