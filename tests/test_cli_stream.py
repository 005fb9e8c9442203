"""``dvsdk-run`` on video, folders and cameras (issue 31 items 4 and 6): a clip made here
runs through the pipeline on sim://; ``--save-annotated out.mp4`` holds one frame per
input frame (decoded and counted by PyAV here) with the detector's box drawn where a
numpy mapping of its known box says; ``--json`` is one line a frame and a summary; the
refusals are one line each, and no output is left half-written."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

import dvsdk
from dvsdk.cli import run as run_cli

from .apps_media import decode_all, fixed_box_detector, square_frames, write_clip

GREEN = np.array([60, 180, 75])     # class 1's colour: the palette's entry 2


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    d = tmp_path_factory.mktemp("stream")
    # every anchor: (cx 16, cy 16, w 16, h 12) of a 32 x 32 input, class 1 at 0.9
    dvsdk.compile(fixed_box_detector(), d / "box.bin", golden=False, task="detect",
                  labels=["a", "b"])
    clip = write_clip(d / "clip.mp4", square_frames(12, 48, 64), fps=12)
    return {"net": d / "box.bin", "clip": clip}


def call(argv, capsys):
    rc = run_cli.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _box(width: int, height: int) -> list[float]:
    """The known box in a width x height frame (stretched from 32 x 32)."""
    sx, sy = width / 32, height / 32
    return [(16 - 8) * sx, (16 - 6) * sy, (16 + 8) * sx, (16 + 6) * sy]


def test_clip_to_annotated_video_and_json_lines(media, tmp_path, capsys):
    out = tmp_path / "out.mp4"
    rc, stdout, err = call([media["net"], media["clip"], "--save-annotated", out, "--json"],
                           capsys)
    assert rc == 0, err
    lines = [json.loads(s) for s in stdout.splitlines()]
    recs, summary = lines[:-1], lines[-1]["summary"]
    assert [r["frame"] for r in recs] == list(range(12))
    np.testing.assert_allclose([r["time"] for r in recs], np.arange(12) / 12, atol=1e-6)
    box = _box(64, 48)                                    # [16, 15, 48, 33]
    for r in recs:
        assert r["source"] == f"clip.mp4#{r['frame']}" and r["kind"] == "detect"
        assert [(d["box"], d["class"], d["label"]) for d in r["detections"]] == \
            [(box, 1, "b")]
    assert summary["frames"] == 12 and summary["dropped"] == 0
    assert summary["device"]["predicted"] is True and summary["device"]["fps"] > 0
    assert set(summary["stages"]) == {"source", "prepare", "run", "finish", "draw", "sink"}
    decoded = decode_all(out)
    assert len(decoded) == 12                             # one frame per input frame
    inputs = decode_all(media["clip"])
    x0, y0, x1, y1 = (int(v) for v in box)
    for got, src in zip(decoded, inputs):
        assert got.shape == (48, 64, 3)
        # the box's left edge (x0, 2 px) is green; far from it, the input frame shows
        edge = got[y0 + 4:y1 - 2, x0:x0 + 2].reshape(-1, 3).astype(int)
        assert np.abs(edge - GREEN).max(axis=1).mean() < 60
        assert np.abs(got[40:, :].astype(int) - src[40:, :]).mean() < 12


def test_image_folder_to_annotated_pngs(media, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    for name, (h, w) in {"wide.png": (40, 80), "tall.png": (64, 32)}.items():
        Image.fromarray(np.full((h, w, 3), 90, np.uint8)).save(src / name)
    outdir, jl = tmp_path / "annotated", tmp_path / "r.jsonl"
    rc, stdout, err = call([media["net"], src, "--save-annotated", outdir, "--save-json", jl,
                            "-q"], capsys)
    assert rc == 0, err
    assert stdout == ""
    assert sorted(p.name for p in outdir.iterdir()) == ["tall.png", "wide.png"]
    recs = [json.loads(s) for s in jl.read_text().splitlines()]
    assert [(r["frame"], r["source"]) for r in recs] == [(0, "tall.png"), (1, "wide.png")]
    for name, (h, w) in {"wide.png": (40, 80), "tall.png": (64, 32)}.items():
        img = np.asarray(Image.open(outdir / name))
        x0, y0, x1, y1 = _box(w, h)
        # PNG is lossless: the left edge is exactly the class colour, the middle untouched
        ys = slice(int(np.ceil(y0)) + 1, int(y1) - 1)
        np.testing.assert_array_equal(img[ys, int(round(x0))], np.broadcast_to(
            GREEN, img[ys, int(round(x0))].shape))
        assert (img[int((y0 + y1) / 2), int((x0 + x1) / 2)] == 90).all()


def test_summary_table_and_verbose_lines(media, capsys):
    rc, out, err = call([media["net"], media["clip"], "--max-frames", "3", "-v"], capsys)
    assert rc == 0, err
    assert out.count("1 box") + out.count("clip.mp4#") >= 3
    assert "3 frames in" in out and "FPS on this host (measured)" in out
    assert "predicted by the simulator's cycle model" in out
    for stage in ("source", "prepare", "run", "finish", "sink", "latency"):
        assert f"  {stage} " in out


@pytest.mark.parametrize("argv, message", [
    (["/dev/video0"], "no camera at this path"),
    (["{clip}", "--show", "--fb", "{tmp}/fb7"], "no framebuffer at this path"),
    (["{clip}", "--save", "{tmp}/y.npz"], "--save is for images and tensors"),
    (["{clip}", "--serve", "localhost:http"], "--serve takes [ADDR:]PORT"),
    (["{tmp}/missing.mp4"], "no such video file"),
    (["{clip}", "--save-annotated", "{tmp}/o.webm"], "cannot write this kind of video"),
    (["--save-annotated", "{tmp}/o.mp4"], "give a video file"),
    (["{clip}", "{clip}"], "a video or a camera runs alone"),
])
def test_refusals_are_one_line(media, tmp_path, capsys, argv, message):
    argv = [a.format(clip=media["clip"], tmp=tmp_path) for a in argv]
    rc, out, err = call([media["net"], *argv], capsys)
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and message in err, err
    assert list(p.name for p in tmp_path.iterdir()) == []   # nothing written


def test_existing_output_needs_force_and_a_failed_run_keeps_it(media, tmp_path, capsys):
    out = tmp_path / "out.mp4"
    out.write_bytes(b"precious")
    rc, _, err = call([media["net"], media["clip"], "--save-annotated", out], capsys)
    assert rc == 2 and "already exists" in err and out.read_bytes() == b"precious"
    bad = tmp_path / "frames"
    bad.mkdir()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(bad / "a.png")
    (bad / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n broken")
    rc, _, err = call([media["net"], bad, "--save-annotated", out, "-f"], capsys)
    assert rc == 2 and "cannot read the image" in err and "b.png" in err
    assert out.read_bytes() == b"precious"               # the failed run replaced nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["frames", "out.mp4"]
    rc, _, err = call([media["net"], media["clip"], "--save-annotated", out, "-f", "-q"],
                      capsys)
    assert rc == 0 and len(decode_all(out)) == 12


def test_single_image_without_pipeline_flags_runs_as_before(tmp_path, capsys):
    net = tmp_path / "raw.bin"
    dvsdk.compile(fixed_box_detector(), net, golden=False)
    img = tmp_path / "x.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(img)
    rc, out, err = call([net, img, "--json"], capsys)
    assert rc == 0, err
    report = json.loads(out)
    assert list(report) == ["results"] and report["results"][0]["input"] == str(img)
