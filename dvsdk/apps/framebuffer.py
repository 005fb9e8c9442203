"""The Linux framebuffer, ``/dev/fbN``: the board's HDMI display without a window system.

Geometry comes from sysfs, ``/sys/class/graphics/fbN/`` (the fbdev core's attributes,
``Documentation/fb/api.rst`` and ``drivers/video/fbdev/core/fbsysfs.c``):

- ``virtual_size``  "W,H": the virtual screen in pixels (H may be twice the visible height
  for panning); ``modes``, when present, names the visible mode ("U:1920x1080p-60"), whose
  size is used when it fits inside the virtual one;
- ``bits_per_pixel`` 16, 24 or 32;
- ``stride``: bytes from one line to the next (at least W * bytes per pixel; a driver may
  pad lines).

On a real framebuffer (a character device) the channel layout comes from the driver:
the ``FBIOGET_VSCREENINFO`` ioctl (0x4600) fills ``struct fb_var_screeninfo``
(``include/uapi/linux/fb.h``: ``xres, yres, xres_virtual, yres_virtual, xoffset,
yoffset, bits_per_pixel, grayscale``, then the ``struct fb_bitfield {offset, length,
msb_right}`` of red, green, blue and transp, all ``__u32``), and each pixel is the
little-endian word ``sum(channel >> (8 - length) << offset)`` of that depth, the transp
field (if any) all ones: BGR panels, RGB565 or BGR565, XRGB8888 or XBGR8888 alike
(:class:`Layout`, :func:`parse_var_screeninfo`).  The visible ``xres`` x ``yres`` is the
screen; the stride still comes from sysfs.

A regular file (a test's stand-in for ``/dev/fb0``) has no ioctl: its geometry is sysfs'
and its layout the default of its depth below, or one given (``layout=``, a
:class:`Layout` or a name of :data:`LAYOUTS`).  The defaults are the DRM fourcc formats
of the same depth (``include/uapi/drm/drm_fourcc.h``), little-endian, red in the high
bits:

- 16 bits: RGB565, ``R[15:11] G[10:5] B[4:0]`` of a little-endian 16-bit word; each
  channel keeps its top bits (``r >> 3``, ``g >> 2``, ``b >> 3``);
- 24 bits: RGB888, ``R[23:16] G[15:8] B[7:0]``: bytes B, G, R in memory;
- 32 bits: XRGB8888, ``X[31:24] R G B``: bytes B, G, R, X with X written as 255 (opaque
  where a driver reads the byte as alpha).

Each frame is letterboxed into the screen (aspect kept, centered, black bars; bilinear
scaling as :func:`dvsdk.runtime.images.resize`) and written as one whole screen with one
``pwrite`` where the visible window starts: ``yoffset x stride + xoffset x bpp/8`` (the
driver's pan position, so a double-buffered console shows the frame; 0 for a regular
file).
"""

from __future__ import annotations

import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import FramebufferError

SYSFS_GRAPHICS = "/sys/class/graphics"
FORMATS = {16: "RGB565", 24: "RGB888", 32: "XRGB8888"}
FBIOGET_VSCREENINFO = 0x4600
#: bytes of ``struct fb_var_screeninfo`` (40 ``__u32``, linux/fb.h)
VAR_SCREENINFO_SIZE = 160
#: its first 20 ``__u32``: 8 geometry fields, then 4 ``fb_bitfield`` of 3 each
_VAR_HEAD = struct.Struct("=20I")


@dataclass(frozen=True)
class Layout:
    """Where each channel sits in a pixel's little-endian word: (offset, length) in bits
    of red, green, blue and transp (length 0: none), as ``struct fb_bitfield`` says."""

    red: tuple[int, int]
    green: tuple[int, int]
    blue: tuple[int, int]
    transp: tuple[int, int] = (0, 0)

    def name(self, bpp: int) -> str:
        """"RGB565", "BGR565", "XRGB8888", "XBGR8888", "RGB888" ... (the fourcc spelling,
        highest bits first), or the offsets when the layout has no such name."""
        fields = sorted(((o, ln, c) for c, (o, ln) in
                         zip("RGBX", (self.red, self.green, self.blue, self.transp)) if ln),
                        reverse=True)
        if sum(ln for _, ln, _ in fields) == bpp and \
                all(a[0] == b[0] + b[1] for a, b in zip(fields, fields[1:])):
            return "".join(c for *_, c in fields) + "".join(str(ln) for _, ln, _ in fields)
        return f"R{self.red} G{self.green} B{self.blue} T{self.transp}"


#: the default layout of each depth (module docstring) and the usual others, by name
LAYOUTS = {
    "RGB565": Layout((11, 5), (5, 6), (0, 5)), "BGR565": Layout((0, 5), (5, 6), (11, 5)),
    "RGB888": Layout((16, 8), (8, 8), (0, 8)), "BGR888": Layout((0, 8), (8, 8), (16, 8)),
    "XRGB8888": Layout((16, 8), (8, 8), (0, 8), (24, 8)),
    "XBGR8888": Layout((0, 8), (8, 8), (16, 8), (24, 8)),
}
DEFAULT_LAYOUT = {bpp: LAYOUTS[name] for bpp, name in FORMATS.items()}


@dataclass(frozen=True)
class VarScreenInfo:
    """The fields of ``struct fb_var_screeninfo`` this module uses (linux/fb.h)."""

    xres: int
    yres: int
    xres_virtual: int
    yres_virtual: int
    xoffset: int
    yoffset: int
    bits_per_pixel: int
    grayscale: int
    layout: Layout
    msb_right: tuple[int, int, int, int]


def parse_var_screeninfo(buf: bytes) -> VarScreenInfo:
    """``struct fb_var_screeninfo`` as ``FBIOGET_VSCREENINFO`` returns it (native byte order,
    at least its first 80 bytes)."""
    if len(buf) < _VAR_HEAD.size:
        raise FramebufferError("struct fb_var_screeninfo is too short", field="ioctl",
                               value=len(buf), limit=f">= {_VAR_HEAD.size} bytes")
    v = _VAR_HEAD.unpack_from(buf)
    fields = [(v[8 + 3 * i], v[9 + 3 * i]) for i in range(4)]
    return VarScreenInfo(*v[:8], layout=Layout(*fields),
                         msb_right=tuple(v[10 + 3 * i] for i in range(4)))


def read_var_screeninfo(fd: int) -> VarScreenInfo:
    """``FBIOGET_VSCREENINFO`` on an open framebuffer."""
    import fcntl

    try:
        buf = fcntl.ioctl(fd, FBIOGET_VSCREENINFO, bytes(VAR_SCREENINFO_SIZE))
    except OSError as e:
        raise FramebufferError(f"FBIOGET_VSCREENINFO failed: {e.strerror}", field="--show",
                               value="ioctl 0x4600") from None
    return parse_var_screeninfo(buf)


def check_layout(layout: Layout, bpp: int) -> Layout:
    """``layout`` if this module can pack it at ``bpp``: red, green and blue 1..8 bits,
    every field inside the pixel; else FramebufferError naming the field."""
    for name, (off, ln) in zip(("red", "green", "blue", "transp"),
                               (layout.red, layout.green, layout.blue, layout.transp)):
        if (name != "transp" and not 1 <= ln <= 8) or ln > 8 or off + ln > bpp:
            raise FramebufferError("a channel layout this module cannot pack", field=name,
                                   value={"offset": off, "length": ln},
                                   limit=f"length 1..8, inside {bpp} bits")
    return layout


@dataclass(frozen=True)
class Geometry:
    """A framebuffer's visible ``width`` x ``height`` in pixels, ``bpp`` bits per pixel and
    ``stride`` bytes per line."""

    width: int
    height: int
    bpp: int
    stride: int
    layout: Layout | None = None     # None: the default of the depth
    offset: int = 0                  # byte where the visible window starts (pan position)

    @property
    def channels(self) -> Layout:
        return self.layout if self.layout is not None else DEFAULT_LAYOUT[self.bpp]

    @property
    def format(self) -> str:
        return self.channels.name(self.bpp)

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


def pack(rgb: np.ndarray, bpp: int, layout: Layout | None = None) -> np.ndarray:
    """RGB uint8 (H, W, 3) as (H, W * bpp/8) bytes of the format of that depth, or of
    ``layout`` (module docstring)."""
    if layout is not None and bpp in FORMATS:
        return _pack_fields(rgb, bpp, check_layout(layout, bpp))
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


def _pack_fields(rgb: np.ndarray, bpp: int, layout: Layout) -> np.ndarray:
    """Each channel's top ``length`` bits at its ``offset`` of a little-endian word of
    ``bpp`` bits; the transp field all ones."""
    word = np.zeros(rgb.shape[:2], np.uint32)
    for c, (off, ln) in enumerate((layout.red, layout.green, layout.blue)):
        word |= (rgb[..., c].astype(np.uint32) >> (8 - ln)) << off
    off, ln = layout.transp
    if ln:
        word |= np.uint32(((1 << ln) - 1) << off)
    nbytes = bpp // 8
    return word.astype("<u4").view(np.uint8).reshape(*rgb.shape[:2], 4)[..., :nbytes] \
        .reshape(rgb.shape[0], -1)


def screen_bytes(rgb: np.ndarray, geo: Geometry) -> np.ndarray:
    """The whole screen for ``rgb``: letterboxed, packed, lines ``stride`` bytes apart
    (padding bytes 0; :meth:`FramebufferSink.write` leaves them out); (height, stride)
    uint8."""
    from ..runtime.images import resize

    boxed = resize(rgb, geo.height, geo.width, "letterbox")
    out = np.zeros((geo.height, geo.stride), np.uint8)
    line = pack(boxed, geo.bpp, geo.layout)
    out[:, : line.shape[1]] = line
    return out


class FramebufferSink:
    """Show each annotated frame on ``/dev/fbN``; ``sysfs`` defaults to
    ``/sys/class/graphics/fbN``.  A character device's visible size, depth and channel
    layout come from ``FBIOGET_VSCREENINFO``; a regular file's from sysfs, its layout
    ``layout`` (a :class:`Layout` or a name of :data:`LAYOUTS`; default: the depth's).  A
    missing node is one line naming the framebuffers there are."""

    needs_annotated = True

    def __init__(self, path: str | os.PathLike = "/dev/fb0",
                 sysfs: str | os.PathLike | None = None,
                 layout: Layout | str | None = None) -> None:
        self.path = os.fspath(path)
        sys_dir = Path(sysfs) if sysfs is not None else \
            Path(SYSFS_GRAPHICS) / Path(self.path).name
        if not os.path.exists(self.path):
            raise FramebufferError("no framebuffer at this path", field="--show",
                                   value=self.path, hint=_found())
        if not sys_dir.is_dir():
            raise FramebufferError("the framebuffer has no sysfs entry", field="--show",
                                   value=self.path, limit=str(sys_dir), hint=_found())
        if isinstance(layout, str):
            if layout not in LAYOUTS:
                raise FramebufferError("unknown channel layout", field="layout",
                                       value=layout, limit=sorted(LAYOUTS))
            layout = LAYOUTS[layout]
        geo = read_geometry(sys_dir)
        try:
            self.fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as e:
            raise FramebufferError(f"cannot open the framebuffer: {e.strerror}",
                                   field="--show", value=self.path) from None
        try:
            if stat.S_ISCHR(os.fstat(self.fd).st_mode):
                geo = _from_driver(read_var_screeninfo(self.fd), geo)
            elif layout is not None:
                geo = Geometry(geo.width, geo.height, geo.bpp, geo.stride,
                               check_layout(layout, geo.bpp))
        except BaseException:
            os.close(self.fd)
            raise
        self.geometry = geo

    def write(self, frame, result, annotated: np.ndarray | None) -> None:
        """Write the visible window only: a line's bytes past the visible width belong to
        the virtual screen's off-screen part (another buffer of a double-buffered console,
        or, panned sideways, the next line's left part), so when lines are longer than the
        visible width each line is written alone; otherwise the frame is one write."""
        geo = self.geometry
        lines = screen_bytes(annotated if annotated is not None else frame.rgb, geo)
        visible = geo.width * geo.bpp // 8
        if visible == geo.stride:
            os.pwrite(self.fd, lines.tobytes(), geo.offset)
            return
        for y in range(geo.height):   # one system call a line, not a Python loop a pixel
            os.pwrite(self.fd, lines[y, :visible].tobytes(), geo.offset + y * geo.stride)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _from_driver(var: VarScreenInfo, sysfs: Geometry) -> Geometry:
    """The geometry of a real framebuffer: the driver's visible size, depth and layout,
    sysfs' stride."""
    if var.bits_per_pixel not in FORMATS:
        raise FramebufferError("unsupported framebuffer depth", field="bits_per_pixel",
                               value=var.bits_per_pixel, limit=sorted(FORMATS))
    if var.grayscale:
        raise FramebufferError("a grayscale or FOURCC framebuffer mode", field="grayscale",
                               value=var.grayscale, limit=0)
    if any(var.msb_right):
        raise FramebufferError("a channel stored most significant bit right",
                               field="msb_right", value=list(var.msb_right), limit=0)
    width, height, bpp = var.xres, var.yres, var.bits_per_pixel
    if width < 1 or height < 1 or sysfs.stride < width * bpp // 8:
        raise FramebufferError("the stride does not hold a line of the screen",
                               field="stride", value=sysfs.stride,
                               limit=f">= {width} x {bpp // 8} bytes")
    return Geometry(width, height, bpp, sysfs.stride, check_layout(var.layout, bpp),
                    var.yoffset * sysfs.stride + var.xoffset * bpp // 8)


def _found() -> str:
    try:
        fbs = sorted(n for n in os.listdir(SYSFS_GRAPHICS) if re.fullmatch(r"fb\d+", n))
    except OSError:
        fbs = []
    return ("framebuffers here: " + ", ".join(f"/dev/{n}" for n in fbs)) if fbs else \
        "this machine has no framebuffer (no display, or no fbdev driver)"
