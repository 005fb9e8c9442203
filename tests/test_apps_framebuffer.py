"""The framebuffer sink (issue 31 item 3) writing to a regular file laid out like
/dev/fb0, with its geometry in a fake sysfs directory; the bytes are checked against a
packing written here, pixel by pixel from the formats' definitions (RGB565, RGB888,
XRGB8888, little-endian, drm_fourcc.h).  A real framebuffer's layout comes from the
FBIOGET_VSCREENINFO ioctl: faked at the lowest level (``fcntl.ioctl`` returns a
``struct fb_var_screeninfo`` packed here from linux/fb.h's field order, for /dev/null, a
real character device, whose writes ``os.pwrite`` captures), and the bytes of BGR
layouts checked against a per-pixel packing of the driver's offsets written here."""

from __future__ import annotations

import fcntl
import os
import struct

import numpy as np
import pytest
from PIL import Image

from dvsdk.apps.framebuffer import FramebufferSink, parse_var_screeninfo, read_geometry
from dvsdk.apps.sources import Frame
from dvsdk.errors import FramebufferError


def _fb(tmp_path, width, height, bpp, stride, modes=None):
    sysfs = tmp_path / "fb0"
    sysfs.mkdir()
    (sysfs / "virtual_size").write_text(f"{width},{height}\n")
    (sysfs / "bits_per_pixel").write_text(f"{bpp}\n")
    (sysfs / "stride").write_text(f"{stride}\n")
    if modes:
        (sysfs / "modes").write_text(modes)
    dev = tmp_path / "fb0.dev"
    dev.write_bytes(b"\xaa" * (height * stride))  # what the screen held before
    return dev, sysfs


def _pixel_bytes(r: int, g: int, b: int, bpp: int) -> bytes:
    """One pixel, from the format's definition, with Python integers."""
    if bpp == 16:
        word = ((r >> 3) << 11) | ((g >> 2) << 5) | (b >> 3)
        return word.to_bytes(2, "little")
    if bpp == 24:
        return ((r << 16) | (g << 8) | b).to_bytes(3, "little")
    return ((0xFF << 24) | (r << 16) | (g << 8) | b).to_bytes(4, "little")


def _expected(screen_rgb: np.ndarray, bpp: int, stride: int, pad: bytes = b"\0") -> bytes:
    """The screen's bytes; ``pad``: what a line's bytes past the visible width hold (the
    sink never writes them: the previous contents, 0xaa in these tests)."""
    out = bytearray()
    for row in screen_rgb:
        line = b"".join(_pixel_bytes(int(p[0]), int(p[1]), int(p[2]), bpp) for p in row)
        out += line + pad * (stride - len(line))
    return bytes(out)


def _memory(writes, size: int) -> bytes:
    """What a screen memory of ``size`` bytes, 0xaa before, holds after ``writes``."""
    memory = bytearray(b"\xaa" * size)
    for data, offset in writes:
        assert offset + len(data) <= size, "a write past the screen memory"
        memory[offset:offset + len(data)] = data
    return bytes(memory)


@pytest.mark.parametrize("bpp", [16, 24, 32])
def test_exact_bytes_letterboxed_without_scaling(tmp_path, bpp):
    # screen 12 x 6, lines padded to 4 extra bytes; a 4-wide, 6-high frame fits at scale 1,
    # centred: columns 4..7, black bars either side
    width, height = 12, 6
    stride = width * bpp // 8 + 4
    dev, sysfs = _fb(tmp_path, width, height, bpp, stride)
    rgb = np.random.default_rng(bpp).integers(0, 256, (6, 4, 3), dtype=np.uint8)
    sink = FramebufferSink(dev, sysfs)
    assert (sink.geometry.width, sink.geometry.height) == (12, 6)
    sink.write(Frame(0, rgb, 0.0, "f"), None, None)
    sink.close()
    screen = np.zeros((height, width, 3), np.uint8)
    screen[:, 4:8] = rgb
    assert dev.read_bytes() == _expected(screen, bpp, stride, pad=b"\xaa")


def test_scaled_frame_matches_pillow_letterbox(tmp_path):
    dev, sysfs = _fb(tmp_path, 16, 8, 32, 64)
    rgb = np.random.default_rng(5).integers(0, 256, (4, 4, 3), dtype=np.uint8)
    annotated = rgb[::-1].copy()                       # the sink shows the annotated frame
    sink = FramebufferSink(dev, sysfs)
    sink.write(Frame(0, rgb, 0.0, "f"), None, annotated)
    scaled = np.asarray(Image.fromarray(annotated).resize((8, 8), Image.BILINEAR))
    screen = np.zeros((8, 16, 3), np.uint8)
    screen[:, 4:12] = scaled
    assert dev.read_bytes() == _expected(screen, 32, 64)
    sink.write(Frame(1, rgb, 0.0, "f"), None, None)    # the next frame replaces it whole
    screen[:, 4:12] = np.asarray(Image.fromarray(rgb).resize((8, 8), Image.BILINEAR))
    assert dev.read_bytes() == _expected(screen, 32, 64)
    sink.close()


def test_visible_mode_inside_a_double_height_virtual_screen(tmp_path):
    dev, sysfs = _fb(tmp_path, 8, 8, 16, 16, modes="U:8x4p-60\n")
    geo = read_geometry(sysfs)
    assert (geo.width, geo.height, geo.stride, geo.format) == (8, 4, 16, "RGB565")
    sink = FramebufferSink(dev, sysfs)
    sink.write(Frame(0, np.full((4, 8, 3), 255, np.uint8), 0.0, "f"), None, None)
    sink.close()
    data = dev.read_bytes()
    assert data[:64] == b"\xff" * 64 and data[64:] == b"\xaa" * 64   # the hidden half kept


def test_refusals(tmp_path):
    with pytest.raises(FramebufferError, match="no framebuffer at this path") as e:
        FramebufferSink(tmp_path / "fb9")
    assert "\n" not in str(e.value)
    dev, sysfs = _fb(tmp_path, 8, 4, 8, 8)
    with pytest.raises(FramebufferError, match="unsupported framebuffer depth"):
        FramebufferSink(dev, sysfs)
    (sysfs / "bits_per_pixel").write_text("32")
    with pytest.raises(FramebufferError, match="stride does not hold a line"):
        FramebufferSink(dev, sysfs)
    (sysfs / "virtual_size").write_text("wide")
    with pytest.raises(FramebufferError, match="virtual_size is not W,H"):
        read_geometry(sysfs)
    with pytest.raises(FramebufferError, match="no sysfs entry"):
        FramebufferSink(dev, tmp_path / "nowhere")


def _var_screeninfo_panned(xoffset: int, yoffset: int, *args, **kw) -> bytes:
    """:func:`_var_screeninfo` with the visible window panned to (xoffset, yoffset)."""
    fields = list(struct.unpack("=40I", _var_screeninfo(*args, **kw)))
    fields[4:6] = [xoffset, yoffset]
    return struct.pack("=40I", *fields)


def _var_screeninfo(xres, yres, bpp, red, green, blue, transp=(0, 0), grayscale=0,
                    msb_right=0) -> bytes:
    """struct fb_var_screeninfo (linux/fb.h): 8 __u32 (xres, yres, xres_virtual,
    yres_virtual, xoffset, yoffset, bits_per_pixel, grayscale), 4 fb_bitfield {offset,
    length, msb_right}, then 20 __u32 more (nonstd ... reserved), all native order."""
    head = [xres, yres, xres, 2 * yres, 0, 0, bpp, grayscale]
    for off, ln in (red, green, blue, transp):
        head += [off, ln, msb_right]
    return struct.pack("=40I", *head, *range(100, 120))


def test_parse_var_screeninfo_reads_the_fields_in_order():
    var = parse_var_screeninfo(_var_screeninfo(1280, 720, 32, (0, 8), (8, 8), (16, 8),
                                               (24, 8)))
    assert (var.xres, var.yres, var.xres_virtual, var.yres_virtual) == (1280, 720, 1280, 1440)
    assert (var.bits_per_pixel, var.grayscale, var.msb_right) == (32, 0, (0, 0, 0, 0))
    assert (var.layout.red, var.layout.green, var.layout.blue, var.layout.transp) == \
        ((0, 8), (8, 8), (16, 8), (24, 8))
    with pytest.raises(FramebufferError, match="too short"):
        parse_var_screeninfo(b"\0" * 40)


def _bgr_pixel(r: int, g: int, b: int, bpp: int) -> bytes:
    """One pixel of the BGR layouts, from their definitions: BGR565 is B[15:11] G[10:5]
    R[4:0]; BGR888 bytes R, G, B in memory; XBGR8888 bytes R, G, B, X (X = 255)."""
    if bpp == 16:
        return (((b >> 3) << 11) | ((g >> 2) << 5) | (r >> 3)).to_bytes(2, "little")
    if bpp == 24:
        return bytes([r, g, b])
    return bytes([r, g, b, 255])


BGR_FIELDS = {16: ((0, 5), (5, 6), (11, 5), (0, 0)), 24: ((0, 8), (8, 8), (16, 8), (0, 0)),
              32: ((0, 8), (8, 8), (16, 8), (24, 8))}


@pytest.fixture
def fake_fb(monkeypatch, tmp_path):
    """/dev/null as the framebuffer: ioctl 0x4600 answers ``var``; pwrite is captured."""
    state: dict = {"writes": []}
    real_ioctl, real_pwrite = fcntl.ioctl, os.pwrite

    def ioctl(fd, request, arg=0, *rest):
        if request == 0x4600 and fd == state.get("fd"):
            assert len(arg) == 160                 # sizeof(struct fb_var_screeninfo)
            return state["var"]
        return real_ioctl(fd, request, arg, *rest)

    def pwrite(fd, data, offset):
        if fd == state.get("fd"):
            state["writes"].append((bytes(data), offset))
            return len(data)
        return real_pwrite(fd, data, offset)

    real_open = os.open

    def open_(path, flags, *a):
        fd = real_open(path, flags, *a)
        if os.fspath(path) == os.devnull:
            state["fd"] = fd
        return fd

    monkeypatch.setattr(fcntl, "ioctl", ioctl)
    monkeypatch.setattr(os, "pwrite", pwrite)
    monkeypatch.setattr(os, "open", open_)
    return state


@pytest.mark.parametrize("bpp", [16, 24, 32])
def test_char_device_packs_the_drivers_bgr_layout(tmp_path, fake_fb, bpp):
    # sysfs says a 12 x 12 virtual screen; the driver's visible mode is 12 x 6
    width, height = 12, 6
    stride = width * bpp // 8 + 4
    _, sysfs = _fb(tmp_path, width, 2 * height, bpp, stride)
    fake_fb["var"] = _var_screeninfo(width, height, bpp, *BGR_FIELDS[bpp])
    sink = FramebufferSink(os.devnull, sysfs)
    assert (sink.geometry.width, sink.geometry.height, sink.geometry.stride) == \
        (width, height, stride)
    assert sink.geometry.format == {16: "BGR565", 24: "BGR888", 32: "XBGR8888"}[bpp]
    rgb = np.random.default_rng(bpp).integers(0, 256, (6, 4, 3), dtype=np.uint8)
    sink.write(Frame(0, rgb, 0.0, "f"), None, None)
    sink.close()
    want = bytearray()
    for y in range(height):
        line = b"".join(_bgr_pixel(*(int(v) for v in rgb[y, x - 4]), bpp) if 4 <= x < 8
                        else _bgr_pixel(0, 0, 0, bpp) for x in range(width))
        want += line + b"\xaa" * (stride - len(line))   # the padding left as it was
    size = 2 * height * stride
    assert _memory(fake_fb["writes"], size) == bytes(want) + b"\xaa" * (size - len(want))


def test_char_device_with_the_default_layout_packs_as_before(tmp_path, fake_fb):
    _, sysfs = _fb(tmp_path, 12, 6, 16, 24)
    fake_fb["var"] = _var_screeninfo(12, 6, 16, (11, 5), (5, 6), (0, 5))
    sink = FramebufferSink(os.devnull, sysfs)
    assert sink.geometry.format == "RGB565"
    rgb = np.random.default_rng(1).integers(0, 256, (6, 4, 3), dtype=np.uint8)
    sink.write(Frame(0, rgb, 0.0, "f"), None, None)
    sink.close()
    screen = np.zeros((6, 12, 3), np.uint8)
    screen[:, 4:8] = rgb
    assert _memory(fake_fb["writes"], 6 * 24) == _expected(screen, 16, 24, pad=b"\xaa")


@pytest.mark.parametrize("xoffset, yoffset", [(0, 6), (2, 1), (4, 0)])
def test_char_device_writes_where_the_driver_has_panned(tmp_path, fake_fb, xoffset, yoffset):
    """A double-buffered console shows the buffer at (xoffset, yoffset) of a 16 x 12
    virtual screen: the frame goes there, yoffset x stride + xoffset x 2 bytes into the
    memory, each line stride apart, and nothing else changes: not the other buffer, not the
    off-screen columns either side of the window."""
    width, height, stride = 12, 6, 32
    _, sysfs = _fb(tmp_path, 16, 2 * height, 16, stride)
    fake_fb["var"] = _var_screeninfo_panned(xoffset, yoffset, width, height, 16,
                                            (11, 5), (5, 6), (0, 5))
    sink = FramebufferSink(os.devnull, sysfs)
    rgb = np.random.default_rng(3).integers(0, 256, (6, 4, 3), dtype=np.uint8)
    sink.write(Frame(0, rgb, 0.0, "f"), None, None)
    sink.close()
    assert min(offset for _, offset in fake_fb["writes"]) == yoffset * stride + xoffset * 2
    screen = np.zeros((height, width, 3), np.uint8)
    screen[:, 4:8] = rgb
    whole = _expected(screen, 16, stride)
    want = bytearray(b"\xaa" * (2 * height * stride))    # the memory before, 0xaa
    for y in range(height):
        start = (yoffset + y) * stride + xoffset * 2
        want[start:start + width * 2] = whole[y * stride:y * stride + width * 2]
    assert _memory(fake_fb["writes"], len(want)) == bytes(want)


def test_regular_file_takes_an_explicit_layout(tmp_path):
    dev, sysfs = _fb(tmp_path, 4, 2, 16, 8)
    rgb = np.random.default_rng(2).integers(0, 256, (2, 4, 3), dtype=np.uint8)
    sink = FramebufferSink(dev, sysfs, layout="BGR565")
    assert sink.geometry.format == "BGR565"
    sink.write(Frame(0, rgb, 0.0, "f"), None, None)
    sink.close()
    assert dev.read_bytes() == b"".join(_bgr_pixel(*(int(v) for v in p), 16)
                                        for row in rgb for p in row)
    with pytest.raises(FramebufferError) as e:
        FramebufferSink(dev, sysfs, layout="GRB565")
    assert e.value.field == "layout"


@pytest.mark.parametrize("kw, field", [({"grayscale": 1}, "grayscale"),
                                       ({"msb_right": 1}, "msb_right"),
                                       ({"red": (20, 12)}, "red")])
def test_driver_layouts_that_cannot_be_packed_are_refused(tmp_path, fake_fb, kw, field):
    _, sysfs = _fb(tmp_path, 8, 4, 32, 32)
    fields = dict(zip(("red", "green", "blue", "transp"), BGR_FIELDS[32]))
    fields.update({k: v for k, v in kw.items() if k in fields})
    fake_fb["var"] = _var_screeninfo(8, 4, 32, **fields,
                                     **{k: v for k, v in kw.items() if k not in fields})
    with pytest.raises(FramebufferError) as e:
        FramebufferSink(os.devnull, sysfs)
    assert e.value.field == field and "\n" not in str(e.value)
