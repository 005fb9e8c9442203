"""Where frames come from: image files and folders, video files, a V4L2 camera, arrays.

Every source yields :class:`~.frame.Frame` objects and says whether it is ``live``
(:mod:`.frame`).

:func:`open_source` picks the source from what the user gave: a directory (its images,
sorted by name), an image file, ``/dev/videoN`` (:mod:`.camera`), a video file (by
suffix, decoded by PyAV: FFmpeg's demuxers and decoders, ``pip install "dvsdk[video]"``)
or, from Python, any iterable of arrays (:class:`ArraySource`).  A file that cannot be
read is a :class:`~dvsdk.errors.SourceError` naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ImageError, SourceError
from .frame import Frame, Source, import_av

__all__ = ["Frame", "Source", "import_av", "ImageSource", "ArraySource", "VideoSource",
           "open_source", "is_camera", "is_video", "VIDEO_SUFFIXES"]

VIDEO_SUFFIXES = (".mp4", ".m4v", ".mkv", ".mov", ".avi", ".webm", ".mpg", ".mpeg", ".ts",
                  ".mjpeg", ".mjpg", ".gif", ".y4m", ".flv")


class ImageSource(Source):
    """Image files, in the order given (a directory: its images sorted by name); decoded
    by :func:`dvsdk.runtime.images.load_image` (EXIF orientation, 16-bit scaled)."""

    def __init__(self, paths: Iterable[str | os.PathLike]) -> None:
        from ..runtime.images import IMAGE_SUFFIXES

        self.paths: list[Path] = []
        for item in paths:
            p = Path(item)
            if p.is_dir():
                found = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES)
                if not found:
                    raise SourceError("directory has no images", field="source", value=str(p),
                                      limit=IMAGE_SUFFIXES)
                self.paths += found
            elif p.is_file():
                self.paths.append(p)
            else:
                raise SourceError("no such image file or directory", field="source",
                                  value=str(p))
        self.count = len(self.paths)
        self.name = str(self.paths[0].parent) if len(self.paths) > 1 else str(self.paths[0])

    def __iter__(self) -> Iterator[Frame]:
        from ..runtime.images import load_image

        for i, p in enumerate(self.paths):
            try:
                rgb = load_image(p)
            except ImageError as e:
                raise SourceError(f"cannot read the image: {e.message}", field="source",
                                  value=str(p)) from None
            yield Frame(i, rgb, 0.0, p.name)


class ArraySource(Source):
    """Frames from Python: any iterable of (H, W), (H, W, 1|3|4) arrays (uint8, uint16,
    float in [0, 1] ...; :func:`dvsdk.runtime.images.as_rgb`).  ``fps`` sets the frame
    times (index / fps); ``live=True`` treats it as a camera (stale frames dropped)."""

    def __init__(self, frames: Iterable[Any], fps: float | None = None, live: bool = False,
                 name: str = "frames") -> None:
        if fps is not None and not (fps > 0 and np.isfinite(fps)):
            raise SourceError("the frame rate must be a positive number", field="fps",
                              value=fps, limit="> 0")
        self.frames, self.fps, self.live, self.name = frames, fps, live, name
        self.count = len(frames) if hasattr(frames, "__len__") else None  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Frame]:
        from ..runtime.images import as_rgb

        for i, arr in enumerate(self.frames):
            try:
                rgb = as_rgb(arr)
            except ImageError as e:
                raise SourceError(f"frame {i}: {e.message}", field=e.field, value=e.value,
                                  limit=e.limit) from None
            yield Frame(i, rgb, i / self.fps if self.fps else 0.0, f"{self.name}#{i}")


class VideoSource(Source):
    """A video file decoded by PyAV (FFmpeg): its first video stream, every frame in
    presentation order, as RGB; ``time`` is the frame's presentation time in seconds."""

    def __init__(self, path: str | os.PathLike) -> None:
        av = import_av()
        self.path = Path(path)
        self.name = str(path)
        if not self.path.is_file():
            raise SourceError("no such video file", field="source", value=str(path))
        try:
            self.container = av.open(str(self.path))
        except (av.error.FFmpegError, OSError, ValueError) as e:
            raise SourceError(f"cannot open the video: {e}", field="source",
                              value=str(path)) from None
        if not self.container.streams.video:
            self.container.close()
            raise SourceError("the file has no video stream", field="source", value=str(path))
        self.stream = self.container.streams.video[0]
        self.stream.thread_type = "AUTO"   # FFmpeg's own decoder threads
        rate = self.stream.average_rate or self.stream.guessed_rate
        self.fps = float(rate) if rate else None
        self.count = int(self.stream.frames) or None

    def __iter__(self) -> Iterator[Frame]:
        av = import_av()
        stem = self.path.name
        try:
            for i, vf in enumerate(self.container.decode(self.stream)):
                t = float(vf.time) if vf.time is not None else (i / self.fps if self.fps else 0.0)
                yield Frame(i, vf.to_ndarray(format="rgb24"), t, f"{stem}#{i}")
        except av.error.FFmpegError as e:
            raise SourceError(f"cannot decode the video: {e}", field="source",
                              value=self.name) from None

    def close(self) -> None:
        self.container.close()


def is_camera(spec: str) -> bool:
    """``/dev/videoN`` (or ``v4l2:/dev/videoN``) names a camera."""
    return spec.startswith("v4l2:") or os.path.basename(spec).startswith("video") and \
        os.path.dirname(os.path.abspath(spec)) == "/dev"


def is_video(spec: str) -> bool:
    return Path(spec).suffix.lower() in VIDEO_SUFFIXES


def open_source(spec: Any, **options: Any) -> Source:
    """A source for ``spec``: a Source (as it is), a camera path (:func:`is_camera`;
    ``options`` go to :class:`~.camera.CameraSource`), a video file by suffix, an image
    file or directory, a list of paths (images), or any other iterable of arrays."""
    if isinstance(spec, Source):
        return spec
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if is_camera(text):
            from .camera import CameraSource

            return CameraSource(text.removeprefix("v4l2:"), **options)
        if is_video(text) and not Path(text).is_dir():
            return VideoSource(text)
        return ImageSource([text])
    if isinstance(spec, (list, tuple)) and spec and all(isinstance(s, (str, os.PathLike))
                                                        for s in spec):
        if len(spec) == 1:
            return open_source(spec[0], **options)
        return ImageSource(spec)
    if isinstance(spec, np.ndarray) and spec.ndim in (2, 3) and spec.dtype != object:
        return ArraySource([spec])
    if isinstance(spec, Iterable):
        return ArraySource(spec, **options)
    raise SourceError("not a frame source", field="source", value=type(spec).__name__,
                      limit="a path, a camera, a video or an iterable of arrays")
