"""A V4L2 camera, ``/dev/videoN``, through PyAV's ``v4l2`` input (FFmpeg's libavdevice).

Why PyAV rather than OpenCV or linuxpy: PyAV is already the video files' decoder (one
optional dependency, ``dvsdk[video]``, for files and cameras alike), it ships manylinux
aarch64 wheels with FFmpeg inside (the DV700 boards are Cortex-A53 Linux), and FFmpeg's
v4l2 input negotiates the camera's formats (MJPEG, YUYV, ...) and decodes them in C,
handing us RGB.  OpenCV's wheels are ten times larger and bring their own FFmpeg and GUI
toolkits; linuxpy gives the raw V4L2 buffers, leaving MJPEG and YUYV decoding to us, in
Python.

Before FFmpeg is asked, the node is checked where the kernel describes it, so a missing
camera is one clear line (:class:`~dvsdk.errors.CameraError`) rather than an FFmpeg
message: the path must exist, be a character device of the video4linux major (81,
``Documentation/admin-guide/devices.txt``), and have its entry in sysfs,
``/sys/class/video4linux/videoN`` (``name``: the driver's name for it; ``index``: 0 for
the node that captures frames, 1 and up for a UVC camera's metadata nodes).
:func:`list_cameras` lists them, and each refusal names the ones found.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import CameraError
from .frame import Frame, Source, import_av

#: the character-device major number of every V4L2 node (devices.txt)
V4L2_MAJOR = 81
SYSFS_V4L2 = "/sys/class/video4linux"


@dataclass(frozen=True)
class Camera:
    """A V4L2 node as sysfs describes it: ``node`` /dev/videoN, the driver's ``name``,
    ``index`` (0: a capture node), ``dev`` "major:minor"."""

    node: str
    name: str
    index: int
    dev: str


def _read(p: Path) -> str:
    try:
        return p.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def list_cameras(sysfs: str | os.PathLike = SYSFS_V4L2, capture_only: bool = True
                 ) -> list[Camera]:
    """The V4L2 nodes under ``sysfs`` (``/sys/class/video4linux``), ordered by number;
    ``capture_only`` keeps those whose ``index`` is 0 (a UVC camera's metadata nodes,
    index 1, stream no pictures)."""
    root = Path(sysfs)
    try:
        names = os.listdir(root)
    except OSError:
        return []
    found = []
    for n in names:
        m = re.fullmatch(r"video(\d+)", n)
        if not m:
            continue
        idx = _read(root / n / "index")
        index = int(idx) if idx.isdigit() else 0
        if capture_only and index != 0:
            continue
        found.append((int(m.group(1)), Camera(f"/dev/{n}", _read(root / n / "name") or n, index,
                                              _read(root / n / "dev"))))
    return [c for _, c in sorted(found)]


def _found(sysfs: str | os.PathLike) -> str:
    cams = list_cameras(sysfs)
    if not cams:
        return f"no camera is listed in {sysfs}"
    return "cameras here: " + ", ".join(f"{c.node} ({c.name})" for c in cams)


def check_camera(node: str, sysfs: str | os.PathLike = SYSFS_V4L2) -> None:
    """Refuse, in one line naming the node and the cameras there are, a ``node`` that is
    missing, not a character device, not of the V4L2 major, or absent from sysfs."""
    try:
        st = os.stat(node)
    except FileNotFoundError:
        raise CameraError("no camera at this path", field="camera", value=node,
                          hint=_found(sysfs)) from None
    except OSError as e:
        raise CameraError(f"cannot look at the camera: {e.strerror}", field="camera",
                          value=node) from None
    if not stat.S_ISCHR(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a regular file" \
            if stat.S_ISREG(st.st_mode) else "not a device"
        raise CameraError(f"not a camera: {what}, not a V4L2 character device",
                          field="camera", value=node, hint=_found(sysfs))
    major = os.major(st.st_rdev)
    if major != V4L2_MAJOR:
        raise CameraError("not a camera: a character device of another kind", field="camera",
                          value=node, limit=f"major {V4L2_MAJOR} (video4linux), not {major}",
                          hint=_found(sysfs))
    entry = Path(sysfs) / Path(node).name
    if not entry.exists():
        raise CameraError("the camera node has no entry in sysfs (a stale node?)",
                          field="camera", value=node, limit=str(entry), hint=_found(sysfs))


class CameraSource(Source):
    """Frames from a V4L2 camera, as RGB, each timed by this host's monotonic clock when
    it was decoded.  ``size`` ("640x480"), ``fps`` and ``input_format`` ("mjpeg",
    "yuyv422") are asked of the driver (FFmpeg's v4l2 options); None: its default."""

    live = True

    def __init__(self, node: str, size: str | None = None, fps: float | None = None,
                 input_format: str | None = None, sysfs: str | os.PathLike = SYSFS_V4L2
                 ) -> None:
        check_camera(node, sysfs)
        av = import_av()
        options = {}
        if size:
            if not re.fullmatch(r"\d{1,5}x\d{1,5}", size):
                raise CameraError("the camera size must be WIDTHxHEIGHT", field="size",
                                  value=size, limit="e.g. 640x480")
            options["video_size"] = size
        if fps:
            options["framerate"] = f"{fps:g}"
        if input_format:
            options["input_format"] = input_format
        self.name = node
        try:
            self.container = av.open(node, format="v4l2", options=options)
        except (av.error.FFmpegError, OSError) as e:
            raise CameraError(f"the camera refused to stream: {e}", field="camera",
                              value=node, hint=_found(sysfs)) from None
        self.stream = self.container.streams.video[0]
        rate = self.stream.average_rate or self.stream.guessed_rate
        self.fps = float(rate) if rate else fps

    def __iter__(self) -> Iterator[Frame]:
        av = import_av()
        try:
            for i, vf in enumerate(self.container.decode(self.stream)):
                yield Frame(i, vf.to_ndarray(format="rgb24"), time.monotonic(),
                            f"{Path(self.name).name}#{i}")
        except av.error.FFmpegError as e:
            raise CameraError(f"the camera stopped: {e}", field="camera",
                              value=self.name) from None

    def close(self) -> None:
        self.container.close()
