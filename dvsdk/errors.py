"""Every error dvsdk raises on purpose.

Each exception names what was wrong (``field``), the offending ``value`` and the
``limit`` it broke, so a message reads like "kernel width 8 out of range: p.kx=8,
limit 1..7".  CLIs map ``exit_code`` to the process status: 2 for bad input, 3
for device problems.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DvsdkError",
    "InvalidArgument",
    "LayoutError",
    "WeightError",
    "SpecError",
    "InvalidCommand",
    "InvalidURL",
    "DeviceError",
    "DeviceNotFound",
    "DeviceBusy",
    "DeviceTimeout",
    "DeviceLost",
    "DeviceFault",
    "OutOfDeviceMemory",
    "CoherenceError",
    "LinkError",
    "AuthenticationError",
    "AccessViolation",
    "NetFileError",
    "ModelError",
    "UnsupportedOps",
    "ImageError",
    "DatasetError",
    "RecordError",
    "SourceError",
    "CameraError",
    "SinkError",
    "FramebufferError",
]

_UNSET = object()


class DvsdkError(Exception):
    """Base class.  ``str(e)`` is one line: the message, then field/value/limit."""

    exit_code = 2

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        value: Any = _UNSET,
        limit: Any = _UNSET,
        hint: str | None = None,
    ) -> None:
        self.message = message
        self.field = field
        self.value = None if value is _UNSET else value
        self.limit = None if limit is _UNSET else limit
        self.hint = hint
        parts = []
        if field is not None:
            parts.append(f"field={field}")
        if value is not _UNSET:
            parts.append(f"value={value!r}")
        if limit is not _UNSET:
            parts.append(f"limit={limit}")
        text = message
        if parts:
            text += " (" + ", ".join(parts) + ")"
        if hint:
            text += f"; {hint}"
        super().__init__(text)


class InvalidArgument(DvsdkError, ValueError):
    """A pure function got an argument outside what the hardware math accepts."""


class LayoutError(InvalidArgument):
    """A tensor shape or buffer does not fit the 8-channel-chunked layout."""


class WeightError(InvalidArgument):
    """Weights, biases or a quantization table cannot be packed."""


class SpecError(DvsdkError):
    """``firmware_spec/`` is malformed or inconsistent (a bug in the spec files)."""


class InvalidCommand(DvsdkError, ValueError):
    """A DV700 command breaks a validation rule (reference §6).

    ``run`` is the index of the offending run, or None for command-level fields.
    """

    def __init__(self, message: str, *, run: int | None = None, **kw: Any) -> None:
        self.run = run
        if run is not None and kw.get("field") is not None:
            kw["field"] = f"run[{run}].{kw['field']}"
        super().__init__(message, **kw)


class InvalidURL(DvsdkError, ValueError):
    """A device URL has an unknown scheme or bad options."""


class DeviceError(DvsdkError):
    """Something went wrong talking to a device (hardware, simulator or link)."""

    exit_code = 3


class DeviceNotFound(DeviceError):
    """No DV700 (or no DMA memory) was found where we looked."""


class UnsupportedDevice(DeviceError):
    """The device (or DMP's kernel module) is of a version dvsdk does not speak, or whose
    version it cannot tell; the message names the version and the ones it speaks."""


class DeviceBusy(DeviceError):
    """Another process holds the device.  ``pid`` is the holder."""

    def __init__(self, message: str, *, pid: int | None = None, **kw: Any) -> None:
        self.pid = pid
        super().__init__(message, **kw)


class DeviceTimeout(DeviceError):
    """The completion interrupt did not arrive.  ``registers`` is a snapshot."""

    def __init__(self, message: str, *, registers: dict | None = None, **kw: Any) -> None:
        self.registers = registers or {}
        super().__init__(message, **kw)


class DeviceLost(DeviceError):
    """The device (or the agent serving it) went away mid-operation."""


class DeviceFault(DeviceError):
    """The device reported an error status for a command (``reason`` says why).
    ``registers`` is a snapshot of the unit's status registers."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "",
                 registers: dict | None = None, **kw: Any) -> None:
        self.status = status
        self.reason = reason
        self.registers = registers or {}
        super().__init__(message, **kw)


class OutOfDeviceMemory(DeviceError):
    """A DMA allocation does not fit.  Carries the sizes involved."""

    def __init__(
        self, message: str, *, requested: int = 0, largest_free: int = 0, total: int = 0, **kw: Any
    ) -> None:
        self.requested = requested
        self.largest_free = largest_free
        self.total = total
        super().__init__(message, **kw)


class CoherenceError(DeviceError):
    """CPU and device disagree about a DMA range because a sync was missing."""

    def __init__(
        self, message: str, *, buffer: str = "", start: int = 0, end: int = 0, **kw: Any
    ) -> None:
        self.buffer = buffer
        self.start = start
        self.end = end
        super().__init__(message, **kw)


class LinkError(DeviceError):
    """The hardware-in-the-loop link failed (framing, CRC, protocol version)."""


class AuthenticationError(LinkError):
    """A dvlink peer did not prove it holds the shared secret (or none was configured)."""


class AccessViolation(InvalidCommand):
    """A command would make the device read or write memory the caller does not own.

    ``address`` and ``nbytes`` give the range, ``access`` is ``"read"`` or ``"write"``
    and ``what`` names the operand (``"input"``, ``"command stream"``, ...).
    """

    def __init__(self, message: str, *, address: int = 0, nbytes: int = 0, access: str = "",
                 what: str = "", **kw: Any) -> None:
        self.address = address
        self.nbytes = nbytes
        self.access = access
        self.what = what
        super().__init__(message, **kw)


class NetFileError(DvsdkError):
    """A net.bin is truncated, corrupt, of an unknown version or for other hardware."""

    @classmethod
    def cpu_step(cls, op_type: str, name: str, cause: BaseException) -> NetFileError:
        """A CPU step of the program that cannot run (a damaged record: sizes, types)."""
        return cls(f"CPU op {op_type} {name} cannot run: {cause}", field=f"program.{name}",
                   value=op_type)


class ModelError(DvsdkError):
    """A model cannot be compiled (bad file, dynamic shapes, bad attributes)."""


class UnsupportedOps(ModelError):
    """The model uses ops with neither a hardware mapping nor a CPU kernel."""

    def __init__(self, ops: list[tuple[str, str]]) -> None:
        self.ops = list(ops)
        listing = ", ".join(f"{op_type} ({name})" for op_type, name in self.ops)
        super().__init__(f"unsupported ops: {listing}", field="op_type")


class ImageError(DvsdkError):
    """An input image cannot be read or converted."""


class DatasetError(DvsdkError):
    """A dataset for ``dvsdk eval`` is malformed: layout, labels, CSV rows or masks."""


class RecordError(DvsdkError):
    """A ``.dvrec`` recording is missing, truncated, damaged or of another version."""


class TaskError(InvalidArgument):
    """A task head (``--task``: classify, detect, segment, ocr) cannot be set up or
    applied: an unknown decoder, output shapes no decoder fits or several fit, a bad
    anchor list or character file, outputs that disagree with the recorded head."""


class SourceError(DvsdkError):
    """A frame source (an image folder, a video file, raw frames) cannot be opened or read."""


class CameraError(SourceError):
    """A V4L2 camera (``/dev/videoN``) is missing, is not a camera, or refuses to stream."""


class SinkError(DvsdkError):
    """An output of a frame pipeline (annotated images or video, JSON lines, a preview
    server) cannot be written or opened."""


class FramebufferError(SinkError):
    """A Linux framebuffer (``/dev/fbN``) is missing or has a geometry dvsdk cannot fill."""
