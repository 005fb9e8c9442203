"""Frame sources (issue 31 item 2): image files and folders, arrays, video files decoded
by PyAV, and the V4L2 camera tested at the lowest level that exists here: a fake sysfs
tree for discovery, a regular file, /dev/null and a real character-device node of the
video4linux major with no driver behind it.  References: numpy written here, and frames
encoded and decoded by PyAV in the test."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from PIL import Image

from dvsdk.apps import camera
from dvsdk.apps.sources import (
    ArraySource,
    ImageSource,
    VideoSource,
    is_camera,
    open_source,
)
from dvsdk.errors import CameraError, SourceError

from .apps_media import GREY, YELLOW, decode_all, square_frames, write_clip


def test_image_folder_in_name_order(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {n: rng.integers(0, 256, (5, 7, 3), dtype=np.uint8) for n in ("b", "a", "c")}
    for n, a in arrays.items():
        Image.fromarray(a).save(tmp_path / f"{n}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    src = open_source(str(tmp_path))
    assert isinstance(src, ImageSource) and not src.live and src.count == 3
    frames = list(src)
    assert [f.name for f in frames] == ["a.png", "b.png", "c.png"]
    assert [f.index for f in frames] == [0, 1, 2]
    for f in frames:
        np.testing.assert_array_equal(f.rgb, arrays[f.name[0]])


def test_image_errors_are_one_line(tmp_path):
    with pytest.raises(SourceError, match="no such image file"):
        open_source(str(tmp_path / "missing.png"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="directory has no images"):
        open_source(str(tmp_path / "empty"))
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not an image")
    with pytest.raises(SourceError, match="cannot read the image") as e:
        list(open_source(str(bad)))
    assert "\n" not in str(e.value) and str(bad) in str(e.value)


def test_array_source_converts_like_a_viewer():
    gray16 = np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000
    unit = np.linspace(0, 1, 3 * 4 * 3, dtype=np.float32).reshape(3, 4, 3)
    frames = list(ArraySource([gray16, unit], fps=10))
    want16 = ((gray16.astype(np.uint32) + 128) // 257).astype(np.uint8)   # 0..65535 -> 0..255
    np.testing.assert_array_equal(frames[0].rgb, np.repeat(want16[..., None], 3, axis=2))
    np.testing.assert_array_equal(frames[1].rgb, (unit * 255).astype(np.uint8))
    assert [f.time for f in frames] == [0.0, 0.1]
    with pytest.raises(SourceError, match="frame 1"):
        list(ArraySource([gray16, np.full((2, 2), np.nan)]))
    with pytest.raises(SourceError, match="frame rate"):
        ArraySource([], fps=0)


def test_video_file_every_frame_in_order(tmp_path):
    frames = square_frames(12)
    clip = write_clip(tmp_path / "clip.mp4", frames, fps=12)
    src = open_source(str(clip))
    assert isinstance(src, VideoSource) and src.fps == 12
    got = list(src)
    src.close()
    ref = decode_all(clip)                       # PyAV's own decode, here
    assert len(got) == len(ref) == 12
    assert [f.index for f in got] == list(range(12))
    np.testing.assert_allclose([f.time for f in got], np.arange(12) / 12)
    for i, f in enumerate(got):
        np.testing.assert_array_equal(f.rgb, ref[i])
        # the square is where frame i put it (MPEG-4 at its default quality: within 40)
        x = 4 + 4 * i
        assert np.abs(f.rgb[14:22, x + 4:x + 12].astype(int) - YELLOW).max() < 40
        assert np.abs(f.rgb[34:44, :].astype(int) - GREY).max() < 40


def test_video_errors(tmp_path):
    with pytest.raises(SourceError, match="no such video file"):
        open_source(str(tmp_path / "none.mp4"))
    junk = tmp_path / "junk.mp4"
    junk.write_bytes(b"\0" * 100)
    with pytest.raises(SourceError, match="cannot open the video") as e:
        open_source(str(junk))
    assert str(junk) in str(e.value)


# -- the camera ----------------------------------------------------------------------------
def _sysfs(root, nodes):
    """A fake /sys/class/video4linux: {name: (driver name, index)}."""
    for n, (name, index) in nodes.items():
        d = root / n
        d.mkdir(parents=True)
        (d / "name").write_text(name + "\n")
        (d / "index").write_text(f"{index}\n")
        (d / "dev").write_text(f"81:{n[5:]}\n")
    return root


def test_camera_discovery_from_sysfs(tmp_path):
    root = _sysfs(tmp_path / "v4l", {"video10": ("UVC Camera", 0), "video2": ("UVC Camera", 0),
                                     "video3": ("UVC Camera", 1), "video0": ("vivid", 0)})
    (root / "v4l-subdev0").mkdir()
    cams = camera.list_cameras(root)
    assert [c.node for c in cams] == ["/dev/video0", "/dev/video2", "/dev/video10"]
    assert [(c.name, c.index, c.dev) for c in cams][:2] == [("vivid", 0, "81:0"),
                                                            ("UVC Camera", 0, "81:2")]
    assert [c.node for c in camera.list_cameras(root, capture_only=False)] == \
        ["/dev/video0", "/dev/video2", "/dev/video3", "/dev/video10"]
    assert camera.list_cameras(tmp_path / "absent") == []


def test_camera_refusals_are_one_typed_line(tmp_path):
    root = _sysfs(tmp_path / "v4l", {"video0": ("vivid", 0)})
    with pytest.raises(CameraError) as e:
        camera.check_camera(str(tmp_path / "video7"), root)
    msg = str(e.value)
    assert "\n" not in msg and "no camera at this path" in msg and "video7" in msg
    assert "cameras here: /dev/video0 (vivid)" in msg
    plain = tmp_path / "video1"
    plain.write_bytes(b"")
    with pytest.raises(CameraError, match="a regular file, not a V4L2 character device"):
        camera.check_camera(str(plain), root)
    with pytest.raises(CameraError, match=r"major 81 \(video4linux\), not 1"):
        camera.check_camera("/dev/null", tmp_path / "nothing")
    with pytest.raises(CameraError, match="no camera is listed"):
        camera.check_camera(str(tmp_path / "video9"), tmp_path / "nothing")


def test_camera_node_without_a_driver(tmp_path):
    """A real character device of the V4L2 major (81) with nothing behind it (ENXIO): the
    checks pass on its sysfs entry, and FFmpeg's refusal is one CameraError line."""
    node = tmp_path / "video5"
    try:
        os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(camera.V4L2_MAJOR, 5))
    except PermissionError:
        pytest.skip("creating a device node needs root (CAP_MKNOD)")
    with pytest.raises(CameraError, match="no entry in sysfs"):
        camera.check_camera(str(node), tmp_path / "v4l")
    root = _sysfs(tmp_path / "v4l", {"video5": ("ghost", 0)})
    camera.check_camera(str(node), root)        # what sysfs and the node say is consistent
    with pytest.raises(CameraError, match="refused to stream") as e:
        camera.CameraSource(str(node), sysfs=root)
    assert "\n" not in str(e.value) and str(node) in str(e.value)
    with pytest.raises(CameraError, match="WIDTHxHEIGHT"):
        camera.CameraSource(str(node), size="big", sysfs=root)


def test_what_names_a_camera():
    assert is_camera("/dev/video0") and is_camera("v4l2:/tmp/x")
    assert not is_camera("video0.mp4") and not is_camera("/tmp/video0")
    with pytest.raises(CameraError, match="no camera"):
        open_source("/dev/video99")
