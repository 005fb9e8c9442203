"""The framebuffer sink (issue 31 item 3) writing to a regular file laid out like
/dev/fb0, with its geometry in a fake sysfs directory; the bytes are checked against a
packing written here, pixel by pixel from the formats' definitions (RGB565, RGB888,
XRGB8888, little-endian, drm_fourcc.h)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from dvsdk.apps.framebuffer import FramebufferSink, read_geometry
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


def _expected(screen_rgb: np.ndarray, bpp: int, stride: int) -> bytes:
    out = bytearray()
    for row in screen_rgb:
        line = b"".join(_pixel_bytes(int(p[0]), int(p[1]), int(p[2]), bpp) for p in row)
        out += line + b"\0" * (stride - len(line))
    return bytes(out)


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
    assert dev.read_bytes() == _expected(screen, bpp, stride)


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
