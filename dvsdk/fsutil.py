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

:func:`check_outputs` is what every writer (a CLI's output flags, ``dvsdk.compile``) asks
before it starts: an output path must not be one of the command's own inputs (the same file
by ``os.stat``, so a symlink or a hard link to an input counts), nor a directory, nor in
a folder that is missing or not writable, nor name
the same file as another output, nor an existing file unless the user said ``--force``.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO

from .errors import InvalidArgument

#: an input of a command: (what it is, for messages, e.g. "the net.bin"; its path)
Input = tuple[str, "str | os.PathLike[str]"]

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


def _identity(path: str | os.PathLike[str]) -> tuple[int, int] | None:
    """(device, inode) of the file at ``path`` (symlinks followed), None if there is none."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino


def _check_folder(opt: str, path: Path) -> None:
    """The folder an output goes into must exist, be a folder and be writable: refused
    before any work (not as an ``OSError`` once the result is ready to be written)."""
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise InvalidArgument(f"{opt}: its folder does not exist", field=opt, value=str(path),
                              limit="a file in an existing folder",
                              hint=f"create {parent} first")
    if not parent.is_dir():
        raise InvalidArgument(f"{opt}: {parent} is not a folder", field=opt, value=str(path),
                              limit="a file in an existing folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InvalidArgument(f"{opt}: its folder is not writable", field=opt,
                              value=str(path), limit="a file in a writable folder")


def check_outputs(outputs: Mapping[str, str | os.PathLike[str] | None],
                  inputs: Iterable[Input], *, force: bool) -> None:
    """Refuse, before any work, an output that would destroy a file.

    ``outputs`` maps each output's option name (``--save``) to its path (None: not asked
    for); ``inputs`` are what the command reads, as (what, path) pairs, iterated only when
    an output already exists (so a dataset's many files cost nothing otherwise).  Raises
    :class:`~dvsdk.errors.InvalidArgument` naming the option and the path for an output
    that is one of the inputs (same device and inode: symlinks and hard links count), a
    directory, in a folder that is missing or not writable, the same file as another output,
    or an existing file without ``force``.
    """
    named = [(opt, Path(p)) for opt, p in outputs.items() if p is not None and str(p) != ""]
    existing = {opt: _identity(p) for opt, p in named if os.path.lexists(p)}
    if any(existing.values()):
        for what, path in inputs:
            ident = _identity(path)
            for opt, p in named:
                if ident is not None and existing.get(opt) == ident:
                    raise InvalidArgument(f"{opt} would replace {what}", field=opt,
                                          value=str(p), limit="a file this command does not "
                                          "read", hint=f"{path} is read by this command")
    seen: dict[object, str] = {}
    for opt, p in named:
        if p.is_dir():
            raise InvalidArgument(f"{opt} is a directory; name a file", field=opt,
                                  value=str(p))
        _check_folder(opt, p)
        key = existing.get(opt) or os.path.abspath(p)
        if key in seen:
            raise InvalidArgument(f"{opt} and {seen[key]} name the same file", field=opt,
                                  value=str(p), hint="give each output its own file")
        seen[key] = opt
        if opt in existing and not force:
            raise InvalidArgument("the output file already exists: not replaced", field=opt,
                                  value=str(p), hint="pass --force to replace it")


def read_utf8(path: str | os.PathLike, name: str, field: str, not_text: str,
              error: type[Exception] = InvalidArgument, refuse_nul: bool = False) -> str:
    """A small user text file (labels, characters) as str: UTF-8, a BOM dropped; every
    failure an ``error`` naming ``field`` and the file (``name`` says what it is, e.g.
    "labels file"; ``not_text`` is the message for undecodable bytes, and for a NUL byte
    when ``refuse_nul``)."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise error(f"{name} not found", field=field, value=str(path)) from None
    except IsADirectoryError:
        raise error(f"{name} is a directory", field=field, value=str(path)) from None
    except OSError as e:
        raise error(f"cannot read the {name}: {e.strerror}", field=field,
                    value=str(path)) from None
    try:
        if refuse_nul and b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, data.index(b"\0"),
                                     data.index(b"\0") + 1, "NUL byte")
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise error(not_text, field=field, value=str(path)) from None
