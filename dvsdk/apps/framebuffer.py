"""The Linux framebuffer, ``/dev/fbN``: the board's HDMI display without a window system.

Geometry comes from sysfs, ``/sys/class/graphics/fbN/`` (the fbdev core's attributes,
``Documentation/fb/api.rst`` and ``drivers/video/fbdev/core/fbsysfs.c``):

- ``virtual_size``  "W,H": the virtual screen in pixels (H may be twice the visible height
  for panning); ``modes``, when present, names the visible mode ("U:1920x1080p-60"), whose
  size is used when it fits inside the virtual one;
- ``bits_per_pixel`` 16, 24 or 32;
- ``stride``: bytes from one line to the next (at least W * bytes per pixel; a driver may
  pad lines).

The pixels are packed as the DRM fourcc formats of the same depth describe them
(``include/uapi/drm/drm_fourcc.h``), little-endian, red in the high bits, which is what
the fbdev drivers of these boards report as their red/green/blue offsets:

- 16 bits: RGB565, ``R[15:11] G[10:5] B[4:0]`` of a little-endian 16-bit word; each
  channel keeps its top bits (``r >> 3``, ``g >> 2``, ``b >> 3``);
- 24 bits: RGB888, ``R[23:16] G[15:8] B[7:0]``: bytes B, G, R in memory;
- 32 bits: XRGB8888, ``X[31:24] R G B``: bytes B, G, R, X with X written as 255 (opaque
  where a driver reads the byte as alpha).

Each frame is letterboxed into the screen (aspect kept, centered, black bars; bilinear
scaling as :func:`dvsdk.runtime.images.resize`) and written as one whole screen from
byte 0 with ``pwrite`` (the first buffer of a panning screen).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import FramebufferError

SYSFS_GRAPHICS = "/sys/class/graphics"
FORMATS = {16: "RGB565", 24: "RGB888", 32: "XRGB8888"}


@dataclass(frozen=True)
class Geometry:
    """A framebuffer's visible ``width`` x ``height`` in pixels, ``bpp`` bits per pixel and
    ``stride`` bytes per line."""

    width: int
    height: int
    bpp: int
    stride: int

    @property
    def format(self) -> str:
        return FORMATS[self.bpp]

    @property
    def nbytes(self) -> int:
        return self.height * self.stride


def _attr(d: Path, name: str) -> str:
    try:
        return (d / name).read_text().strip()
    except OSError as e:
        raise FramebufferError(f"cannot read the framebuffer's {name} from sysfs: {e.strerror}",
                               field=name, value=str(d / name)) from None


def read_geometry(sysfs_dir: str | os.PathLike) -> Geometry:
    """The geometry in ``sysfs_dir`` (``/sys/class/graphics/fbN``), checked: a format this
    module packs, and a stride that holds a line."""
    d = Path(sysfs_dir)
    m = re.fullmatch(r"(\d+),(\d+)", _attr(d, "virtual_size"))
    if not m:
        raise FramebufferError("virtual_size is not W,H", field="virtual_size",
                               value=_attr(d, "virtual_size"))
    width, height = int(m.group(1)), int(m.group(2))
    try:
        bpp, stride = int(_attr(d, "bits_per_pixel")), int(_attr(d, "stride"))
    except ValueError:
        raise FramebufferError("bits_per_pixel and stride must be numbers", field="sysfs",
                               value=str(d)) from None
    if bpp not in FORMATS:
        raise FramebufferError("unsupported framebuffer depth", field="bits_per_pixel",
                               value=bpp, limit=sorted(FORMATS))
    modes = (d / "modes").read_text().split() if (d / "modes").is_file() else []
    mm = re.match(r"\w:(\d+)x(\d+)", modes[0]) if modes else None
    if mm and int(mm.group(1)) <= width and int(mm.group(2)) <= height:
        width, height = int(mm.group(1)), int(mm.group(2))
    if width < 1 or height < 1 or stride < width * bpp // 8:
        raise FramebufferError("the stride does not hold a line of the screen", field="stride",
                               value=stride, limit=f">= {width} x {bpp // 8} bytes")
    return Geometry(width, height, bpp, stride)


def pack(rgb: np.ndarray, bpp: int) -> np.ndarray:
    """RGB uint8 (H, W, 3) as (H, W * bpp/8) bytes of the format of that depth (module
    docstring)."""
    if bpp == 16:
        r, g, b = (rgb[..., i].astype(np.uint16) for i in range(3))
        word = (r >> 3) << 11 | (g >> 2) << 5 | (b >> 3)
        return word.astype("<u2").view(np.uint8).reshape(rgb.shape[0], -1)
    if bpp == 24:
        return np.ascontiguousarray(rgb[..., ::-1]).reshape(rgb.shape[0], -1)
    if bpp == 32:
        out = np.full((*rgb.shape[:2], 4), 255, np.uint8)
        out[..., :3] = rgb[..., ::-1]
        return out.reshape(rgb.shape[0], -1)
    raise FramebufferError("unsupported framebuffer depth", field="bits_per_pixel",
                           value=bpp, limit=sorted(FORMATS))


def screen_bytes(rgb: np.ndarray, geo: Geometry) -> np.ndarray:
    """The whole screen for ``rgb``: letterboxed, packed, lines ``stride`` bytes apart
    (padding bytes 0); (height, stride) uint8."""
    from ..runtime.images import resize

    boxed = resize(rgb, geo.height, geo.width, "letterbox")
    out = np.zeros((geo.height, geo.stride), np.uint8)
    line = pack(boxed, geo.bpp)
    out[:, : line.shape[1]] = line
    return out


class FramebufferSink:
    """Show each annotated frame on ``/dev/fbN``; ``sysfs`` defaults to
    ``/sys/class/graphics/fbN``.  A missing node is one line naming the framebuffers there
    are."""

    needs_annotated = True

    def __init__(self, path: str | os.PathLike = "/dev/fb0",
                 sysfs: str | os.PathLike | None = None) -> None:
        self.path = os.fspath(path)
        sys_dir = Path(sysfs) if sysfs is not None else \
            Path(SYSFS_GRAPHICS) / Path(self.path).name
        if not os.path.exists(self.path):
            raise FramebufferError("no framebuffer at this path", field="--show",
                                   value=self.path, hint=_found())
        if not sys_dir.is_dir():
            raise FramebufferError("the framebuffer has no sysfs entry", field="--show",
                                   value=self.path, limit=str(sys_dir), hint=_found())
        self.geometry = read_geometry(sys_dir)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise FramebufferError(f"cannot open the framebuffer: {e.strerror}",
                                   field="--show", value=self.path) from None

    def write(self, frame, result, annotated: np.ndarray | None) -> None:
        data = screen_bytes(annotated if annotated is not None else frame.rgb, self.geometry)
        os.pwrite(self.fd, data.tobytes(), 0)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _found() -> str:
    try:
        fbs = sorted(n for n in os.listdir(SYSFS_GRAPHICS) if re.fullmatch(r"fb\d+", n))
    except OSError:
        fbs = []
    return ("framebuffers here: " + ", ".join(f"/dev/{n}" for n in fbs)) if fbs else \
        "this machine has no framebuffer (no display, or no fbdev driver)"
