"""The apps examples (issue 31 item 5) as users run them, in a subprocess on sim://:
detect.py on its synthetic scene and on a clip made here, camera.py falling back to its
generated clip when there is no camera; outputs decoded here with Pillow and PyAV."""

from __future__ import annotations

import re

import numpy as np
from PIL import Image

from .apps_media import decode_all, square_frames, write_clip
from .test_examples import EXAMPLES, ok, run


def test_help():
    for name in ("detect", "camera"):
        src = (EXAMPLES / f"{name}.py").read_text()
        assert "def main(argv: list[str] | None = None) -> int:" in src
        assert ok(run(EXAMPLES / f"{name}.py", "--help")).startswith("usage:")


def test_detect_on_the_synthetic_scene(tmp_path):
    out = ok(run(EXAMPLES / "detect.py", "-o", tmp_path / "boxes.png", cwd=tmp_path))
    m = re.search(r"^(\d+) detections, device ([\d.]+) us \(predicted\)$", out, re.M)
    assert m and int(m.group(1)) > 0, out
    boxes = [[int(v) for v in b.split(", ")] for b in re.findall(r"\[([\d, ]+)\]$", out, re.M)]
    assert len(boxes) == int(m.group(1))
    drawn = np.asarray(Image.open(tmp_path / "boxes.png"))
    assert drawn.shape == (240, 320, 3)
    import sys

    sys.path.insert(0, str(EXAMPLES))
    from detect import synthetic_scene

    scene = synthetic_scene()
    # each box's outline changed the scene on its left edge (the drawing is there)
    for x0, y0, x1, y1 in boxes:
        ys = slice(max(y0, 0) + 2, max(min(y1, 240) - 2, max(y0, 0) + 3))
        x = min(max(x0, 0), 319)
        assert (drawn[ys, x] != scene[ys, x]).any(), (x0, y0, x1, y1)


def test_detect_on_a_clip_writes_a_frame_per_frame(tmp_path):
    clip = write_clip(tmp_path / "clip.mp4", square_frames(10))
    out = ok(run(EXAMPLES / "detect.py", clip, "-o", tmp_path / "out.mp4", cwd=tmp_path))
    assert "wrote" in out and "10 annotated frames" in out
    assert "FPS on this host (measured)" in out and "(predicted by the simulator" in out
    assert len(decode_all(tmp_path / "out.mp4")) == 10


def test_camera_falls_back_to_its_clip(tmp_path):
    proc = run(EXAMPLES / "camera.py", "--camera", tmp_path / "video0", "-o",
               tmp_path / "cam.mp4", cwd=tmp_path)
    out = ok(proc)
    assert proc.stderr.count("\n") == 1 and "no camera at this path" in proc.stderr
    assert "running on a generated fallback.mp4" in out and "30 frames in" in out
    assert len(decode_all(tmp_path / "cam.mp4")) == 30
