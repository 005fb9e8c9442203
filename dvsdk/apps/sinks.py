"""Where a pipeline's frames and results go: annotated images in a folder, an annotated
video file, JSON lines (one record a frame); the framebuffer and the HTTP preview are
their own modules (:mod:`.framebuffer`, :mod:`.preview`).

A sink has ``write(frame, result, annotated)`` (``annotated``: the frame with the result
drawn, or None when no sink asked for one: ``needs_annotated``) and ``close()``.  Files
are written atomically (:mod:`dvsdk.fsutil`): a video or a JSON-lines file appears under
its name only once it is whole, at ``close()``; before, it is a hidden temporary file
beside it, removed if the pipeline fails.
"""

from __future__ import annotations

import json
import os
from fractions import Fraction
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..errors import SinkError
from ..fsutil import atomic_write, remove_stale_temp_files, temp_name

#: container format by suffix (FFmpeg's muxer names) and the codec each one gets
VIDEO_FORMATS = {".mp4": "mp4", ".m4v": "mp4", ".mov": "mov", ".mkv": "matroska",
                 ".avi": "avi"}


def record(frame: Any, result: Any) -> dict[str, Any]:
    """The JSON-lines record of one frame: its index, time (s) and source name,
    ``"nonfinite": true`` when the network's outputs held NaN/inf, then the result's own
    keys (``Result.to_json()``)."""
    rec: dict[str, Any] = {"frame": int(frame.index), "time": round(float(frame.time), 6),
                           "source": frame.name}
    if getattr(frame, "nonfinite", False):
        rec["nonfinite"] = True
    if result is not None:
        rec.update(result.to_json())
    return rec


class ImageFolderSink:
    """Each annotated frame as a PNG in ``folder`` (created if missing), named after the
    input image (``photo.png``) or the frame index (``clip.mp4#12`` -> ``000012.png``); an
    existing file is refused unless ``force``."""

    needs_annotated = True

    def __init__(self, folder: str | os.PathLike, force: bool = False) -> None:
        self.folder, self.force = Path(folder), force
        if self.folder.exists() and not self.folder.is_dir():
            raise SinkError("--save-annotated names a file; for images name a folder",
                            field="--save-annotated", value=str(folder))
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise SinkError(f"cannot create the folder: {e.strerror}", field="--save-annotated",
                            value=str(folder)) from None
        self.written: list[Path] = []

    def path_for(self, frame: Any) -> Path:
        if "#" in frame.name:          # a frame of a video, a camera or arrays
            return self.folder / f"{frame.index:06d}.png"
        return self.folder / f"{Path(frame.name).stem}.png"

    def write(self, frame: Any, result: Any, annotated: np.ndarray | None) -> None:
        from PIL import Image

        path = self.path_for(frame)
        if path.exists() and not self.force and path not in self.written:
            raise SinkError("the output image already exists: not replaced",
                            field="--save-annotated", value=str(path),
                            hint="pass --force to replace it")
        img = Image.fromarray(annotated if annotated is not None else frame.rgb)
        atomic_write(path, lambda f: img.save(f, format="PNG"))
        self.written.append(path)

    def close(self) -> None:
        pass


def _codec(av: Any, suffix: str) -> str:
    """H.264 (libx264) where this FFmpeg has it and the container takes it, else MPEG-4
    part 2, which every FFmpeg build encodes."""
    if suffix != ".avi":
        try:
            av.codec.Codec("libx264", "w")
            return "libx264"
        except Exception:  # noqa: BLE001 - PyAV raises several kinds for a missing codec
            pass
    return "mpeg4"


class VideoSink:
    """The annotated frames as a video file (PyAV): one encoded frame per input frame, at
    the source's frame rate (``fps``, default 25), frame n at time n / fps, yuv420p.  The
    size is the first frame's, rounded up to even (4:2:0 chroma needs it; the extra line
    or column repeats the edge); later frames of another size are scaled to it."""

    needs_annotated = True

    def __init__(self, path: str | os.PathLike, fps: float | None = None,
                 force: bool = False) -> None:
        from .sources import import_av

        self.av = import_av()
        self.path = Path(path)
        fmt = VIDEO_FORMATS.get(self.path.suffix.lower())
        if fmt is None:
            raise SinkError("unknown video file type", field="--save-annotated",
                            value=str(path), limit=sorted(VIDEO_FORMATS))
        if self.path.exists() and not force:
            raise SinkError("the output file already exists: not replaced",
                            field="--save-annotated", value=str(path),
                            hint="pass --force to replace it")
        remove_stale_temp_files(self.path)
        self.tmp = temp_name(self.path)
        self.rate = Fraction(fps or 25).limit_denominator(1001)
        try:
            self.container = self.av.open(str(self.tmp), "w", format=fmt)
        except (self.av.error.FFmpegError, OSError) as e:
            raise SinkError(f"cannot create the video: {e}", field="--save-annotated",
                            value=str(path)) from None
        self.codec = _codec(self.av, self.path.suffix.lower())
        self.stream = None
        self.frames = 0

    def _open_stream(self, h: int, w: int) -> None:
        s = self.container.add_stream(self.codec, rate=self.rate)
        s.width, s.height = w + w % 2, h + h % 2
        s.pix_fmt = "yuv420p"
        s.time_base = 1 / self.rate
        self.stream = s

    def write(self, frame: Any, result: Any, annotated: np.ndarray | None) -> None:
        rgb = annotated if annotated is not None else frame.rgb
        if self.stream is None:
            self._open_stream(*rgb.shape[:2])
        s = self.stream
        if rgb.shape[:2] != (s.height - s.height % 2, s.width - s.width % 2) and \
                rgb.shape[:2] != (s.height, s.width):
            from ..runtime.images import resize

            rgb = resize(rgb, s.height, s.width)
        pad = ((0, s.height - rgb.shape[0]), (0, s.width - rgb.shape[1]), (0, 0))
        if any(p[1] for p in pad):
            rgb = np.pad(rgb, pad, mode="edge")
        vf = self.av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
        vf.pts = self.frames
        vf.time_base = s.time_base
        try:
            self.container.mux(s.encode(vf))
        except (self.av.error.FFmpegError, OSError) as e:   # a full disk, say
            raise SinkError(f"cannot write the video: {e}", field="--save-annotated",
                            value=str(self.path)) from None
        self.frames += 1

    def close(self, ok: bool = True) -> None:
        """Flush the encoder and rename the file into place (``ok``), or remove it."""
        if self.container is None:
            return
        try:
            if ok and self.stream is not None:
                self.container.mux(self.stream.encode(None))
            self.container.close()
            self.container = None
            if ok and self.frames:
                os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.unlink(self.tmp)


class JsonLinesSink:
    """One JSON object a line and a frame (:func:`record`), to ``path`` (written whole at
    ``close()``, atomically) or to a stream such as stdout (each line flushed as it comes,
    for a reader following a camera)."""

    needs_annotated = False

    def __init__(self, target: str | os.PathLike | IO[str], force: bool = False) -> None:
        self.stream: IO[str] | None = None
        self.lines: list[str] = []
        if isinstance(target, (str, os.PathLike)):
            self.path: Path | None = Path(target)
            if self.path.exists() and not force:
                raise SinkError("the output file already exists: not replaced",
                                field="--save-json", value=str(target),
                                hint="pass --force to replace it")
        else:
            self.path, self.stream = None, target

    def write(self, frame: Any, result: Any, annotated: np.ndarray | None) -> None:
        line = json.dumps(record(frame, result), default=_jsonable)
        if self.stream is not None:
            self.stream.write(line + "\n")
            self.stream.flush()
        else:
            self.lines.append(line)

    def close(self, ok: bool = True) -> None:
        if self.path is not None and ok:
            data = "".join(f"{line}\n" for line in self.lines).encode()
            atomic_write(self.path, lambda f: f.write(data))


def _jsonable(v: Any) -> Any:
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, np.ndarray):
        return v.tolist()
    return str(v)
