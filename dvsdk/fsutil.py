"""Writing files atomically: nothing half-written is ever left where a user looks.

The data goes to a hidden temporary file beside the target (same file system, so the
final ``rename`` is atomic), named ``.<target>.<host>-<pid>-<random>.tmp``.  A process
killed mid-write cannot remove its temporary file; the next write to the same target
removes every such file whose writer was on this host and is gone, so they never pile
up.  After the rename the directory itself is fsynced, so the new name survives a power
cut, not only the data (``rename(2)``, ``fsync(2)``: a rename is durable once its
directory is synced).

Errors name the target, never the temporary file: an ``OSError`` raised here carries the
path the caller asked for as its ``filename``.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from pathlib import Path
from typing import IO

TMP_SUFFIX = ".tmp"


def _host() -> str:
    """This host's name as it appears in a temporary name: no '/', no '-' (the field
    separator), at most 32 characters (the whole name must stay under NAME_MAX)."""
    return (socket.gethostname().replace("/", "_").replace("-", "_") or "localhost")[:32]


def temp_name(target: Path) -> Path:
    """A fresh temporary name beside ``target`` that records who is writing it."""
    token = secrets.token_hex(4)
    return target.parent / f".{target.name}.{_host()}-{os.getpid()}-{token}{TMP_SUFFIX}"


def _writer_gone(host: str, pid: int) -> bool:
    if host != _host():
        return False          # another machine's writer (a shared file system): not ours
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:           # EPERM: alive, another user's
        return False
    return False


def stale_temp_files(target: str | os.PathLike) -> list[Path]:
    """Temporary files beside ``target`` left by writers of it that no longer run."""
    target = Path(target)
    parent = target.parent if str(target.parent) else Path(".")
    prefix = f".{target.name}."
    stale = []
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    for name in names:
        if not (name.startswith(prefix) and name.endswith(TMP_SUFFIX)):
            continue
        middle = name[len(prefix) : -len(TMP_SUFFIX)]
        parts = middle.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        if _writer_gone(parts[0], int(parts[1])):
            stale.append(parent / name)
    return stale


def remove_stale_temp_files(target: str | os.PathLike) -> list[Path]:
    """Remove what :func:`stale_temp_files` finds; returns what was removed."""
    removed = []
    for p in stale_temp_files(target):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass              # another cleaner got there first
        except OSError:
            pass              # not ours to remove (permissions): leave it
    return removed


def _sync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass                  # some file systems cannot sync a directory (EINVAL): best effort
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Call ``write(f)`` on a temporary file beside ``path``, fsync it, give it the
    ordinary permissions (0666 less the umask) and rename it over ``path``, then fsync
    the directory.  On any failure the temporary file is removed and ``path`` untouched;
    an ``OSError`` names ``path``."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    remove_stale_temp_files(target)
    tmp = temp_name(target)
    try:  # mode 0666: the kernel applies the umask, as for any new file
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0),
                     0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError as e:
        if e.filename in (None, str(tmp)) or e.filename2 == str(tmp):
            raise OSError(e.errno, e.strerror or str(e), str(target)) from e
        raise
    _sync_dir(parent)
