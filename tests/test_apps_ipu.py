"""The frame pipeline and ``dvsdk-run clip.mp4`` with the IPU preparing each frame (issue 31
item 4, §9.1 of dv700-interface.md), and frames whose outputs overflow FP16 on the video
path, on sim://.

* ``--ipu``: each frame's outputs are bit-equal to ``net.run_image(frame, ipu=True)`` run
  one by one, and equal (FP16 tolerance) to onnxruntime on the input an independent numpy
  model of the IPU's resize and conversion makes (:func:`ipu_bilinear_ref` below: §9.1's
  texture scaled to cover the rectangle with ``blf`` bilinear sampling -- what
  ``ipu_preprocess`` programs -- at pixel centres, clamped at the edges, rounded to u8,
  then x/255 in FP16; the sample positions are §9.1's [AMBIG], taken as the simulator
  documents them); the class map is taken back to the frame's size (stretch).
* a net whose preprocessing the IPU cannot do (letterbox, std, a batch) is refused in one
  line naming the field, before any output exists;
* NaN/inf outputs on the video path: flagged frames equal those a numpy bound predicts
  overflow (300 x 27 x pixel > 65504), one warning line, counted in the summary, exit 4.
"""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import dvsdk
from dvsdk.apps.pipeline import Pipeline
from dvsdk.apps.sources import ArraySource
from dvsdk.cli import run as run_cli
from dvsdk.errors import InvalidArgument
from dvsdk.tasks.results import Segmentation

from .apps_media import decode_all, write_clip
from .onnx_models import make_model
from .refs import fp16
from .task_models import segmenter

SIZE, H, W = 16, 24, 40


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


def _frames(n: int, seed: int = 5) -> list[np.ndarray]:
    """Smooth frames (a gradient per channel plus a moving bright block) with some noise."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:H, 0:W]
    out = []
    for i in range(n):
        f = np.stack([xx * 6, yy * 10, (xx + yy) * 4], -1).astype(np.int64)
        f[4:14, 2 + 3 * i:14 + 3 * i] = (240, 200, 30)
        f += rng.integers(-12, 13, f.shape)
        out.append(np.clip(f, 0, 255).astype(np.uint8))
    return out


@pytest.fixture(scope="module")
def seg(tmp_path_factory):
    d = tmp_path_factory.mktemp("ipu")
    model = segmenter(classes=4, size=SIZE)
    dvsdk.compile(model, d / "seg.bin", golden=False, task="segment", scale=1 / 255)
    dvsdk.compile(model, d / "box.bin", golden=False, task="segment", scale=1 / 255,
                  resize="letterbox")
    dvsdk.compile(model, d / "std.bin", golden=False, task="segment", mean=(1, 2, 3),
                  std=[58.4, 57.1, 57.4])
    return {"model": model, "seg": d / "seg.bin", "box": d / "box.bin", "std": d / "std.bin",
            "dir": d}


def ipu_bilinear_ref(rgb: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
    """(out_h, out_w, 3) FP16 x/255 of ``rgb`` resized bilinearly between texel centres:
    source coordinate (X + 0.5) * tw / rw - 0.5 clamped to the texture, rounded half up."""
    th, tw = rgb.shape[:2]
    u = np.clip((np.arange(out_w) + 0.5) * tw / out_w - 0.5, 0, tw - 1)
    v = np.clip((np.arange(out_h) + 0.5) * th / out_h - 0.5, 0, th - 1)
    x0, y0 = np.floor(u).astype(int), np.floor(v).astype(int)
    x1, y1 = np.minimum(x0 + 1, tw - 1), np.minimum(y0 + 1, th - 1)
    fx, fy = (u - x0)[None, :, None], (v - y0)[:, None, None]
    t = rgb.astype(np.float64)
    top = t[y0][:, x0] * (1 - fx) + t[y0][:, x1] * fx
    bot = t[y1][:, x0] * (1 - fx) + t[y1][:, x1] * fx
    u8 = np.clip(np.floor(top * (1 - fy) + bot * fy + 0.5), 0, 255)
    return fp16(u8 / 255.0)


def _ort(model, x: np.ndarray) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x.astype(np.float32)})[0]


def test_pipeline_with_the_ipu_equals_run_image_and_the_ipu_model(seg):
    frames = _frames(6)
    got = []
    with dvsdk.load(seg["seg"]) as net:
        rep = Pipeline(net, ArraySource(frames), ipu=True,
                       on_result=lambda f, r: got.append((f.index, r))).run()
        one_by_one = [net.run_image(f, ipu=True) for f in frames]
        raw = [net.run_image(f, ipu=True, raw=True)["scores"] for f in frames]
        cpu = [net.run_image(f, raw=True)["scores"] for f in frames]
    assert rep.frames == 6 and [i for i, _ in got] == list(range(6)) and rep.nonfinite == 0
    assert rep.device_us and "prepare" in rep.as_dict()["stages"]
    for (_, res), want, want_raw, frame, c in zip(got, one_by_one, raw, frames, cpu):
        assert isinstance(res, Segmentation) and res.class_map.shape == (H, W)
        np.testing.assert_array_equal(res.outputs["scores"], want_raw)        # bits
        np.testing.assert_array_equal(res.class_map, want.class_map)
        # independent: the IPU's bilinear resize + x/255 in FP16, then onnxruntime
        x = ipu_bilinear_ref(frame, SIZE, SIZE).astype(np.float32).transpose(2, 0, 1)[None]
        ref = _ort(seg["model"], x)
        np.testing.assert_allclose(res.outputs["scores"], ref, rtol=1e-2, atol=2e-2)
        # the stretch is undone: pixel (y, x) of the frame shows the cell under its centre,
        # ((y + 0.5) * 16 / 24, (x + 0.5) * 16 / 40)
        am = res.outputs["scores"][0].argmax(axis=0)
        iy = (((2 * np.arange(H) + 1) * SIZE) // (2 * H))[:, None]
        ix = (((2 * np.arange(W) + 1) * SIZE) // (2 * W))[None, :]
        np.testing.assert_array_equal(res.class_map, am[iy, ix])
        # the CPU-prepared path (Pillow's bilinear resize) differs from the IPU's nearest
        # sampling by the resize alone: the same scores up to the frames' local variation
        assert np.abs(res.outputs["scores"] - c).mean() < 0.1 * np.abs(c).mean() + 0.05


def test_cli_clip_with_ipu_matches_run_image_frame_by_frame(seg, tmp_path, capsys):
    clip = write_clip(tmp_path / "c.mp4", _frames(5), fps=10)
    rc = run_cli.run([str(seg["seg"]), str(clip), "--ipu", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    lines = [json.loads(s) for s in out.splitlines()]
    recs, summary = lines[:-1], lines[-1]["summary"]
    assert summary["frames"] == 5 and summary["nonfinite"] == 0
    with dvsdk.load(seg["seg"]) as net:
        want = [net.run_image(f, ipu=True).to_json() for f in decode_all(clip)]
    assert [{k: r[k] for k in w} for r, w in zip(recs, want)] == want


@pytest.mark.parametrize("net, field", [("box", "resize"), ("std", "preprocess")])
def test_ipu_refusal_is_one_line_naming_the_field(seg, tmp_path, capsys, net, field):
    clip = write_clip(tmp_path / "c.mp4", _frames(2), fps=10)
    out = tmp_path / "o.jsonl"
    rc = run_cli.run([str(seg[net]), str(clip), "--ipu", "--save-json", str(out)])
    _, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and field in err, err
    assert not out.exists()
    with dvsdk.load(seg[net]) as n, pytest.raises(InvalidArgument) as e:
        Pipeline(n, ArraySource(_frames(1)), ipu=True)
    assert e.value.field == field


def test_ipu_refuses_a_batch(tmp_path):
    model = segmenter(classes=4, size=SIZE)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    dvsdk.compile(model, tmp_path / "b.bin", golden=False, scale=1 / 255)
    from dvsdk.runtime.ipu import check_ipu

    with dvsdk.load(tmp_path / "b.bin") as net, pytest.raises(InvalidArgument) as e:
        check_ipu(net)
    assert e.value.field == "batch"


def test_nonfinite_frames_on_the_video_path_exit_4(tmp_path, capsys):
    big = np.full((4, 3, 3, 3), 300.0, np.float32)
    hot = make_model([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1],
                                       kernel_shape=[3, 3]),
                      helper.make_node("GlobalAveragePool", ["c"], ["p"]),
                      helper.make_node("Flatten", ["p"], ["f"]),
                      helper.make_node("Softmax", ["f"], ["y"], axis=1)],
                     [("x", [1, 3, 8, 8])], ["y"], {"W": big})
    dvsdk.compile(hot, tmp_path / "hot.bin", golden=False)
    bright = {1, 4}
    frames = [np.full((16, 16, 3), 255 if i in bright else 0, np.uint8) for i in range(6)]
    clip = write_clip(tmp_path / "c.mp4", frames, fps=6)
    # independent: the conv's interior output is 300 x 27 x the (uniform) pixel value, which
    # overflows FP16 (65504) above 8.09; each decoded frame is far from that bound
    decoded = decode_all(clip)
    peak = [300 * 27 * float(f.max()) for f in decoded]
    low = [300 * 27 * float(f.min()) for f in decoded]
    want = {i for i, (lo, hi) in enumerate(zip(low, peak)) if lo > 65504}
    assert want == bright and all(hi < 65504 for i, hi in enumerate(peak) if i not in want)
    rc = run_cli.run([str(tmp_path / "hot.bin"), str(clip), "--json"])
    out, err = capsys.readouterr()
    assert rc == 4, err
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["frames"] == 6 and summary["nonfinite"] == len(want)
    assert err.count("\n") == 1 and "c.mp4#1" in err and "non-finite" in err
    assert "Warning" not in err
    rc = run_cli.run([str(tmp_path / "hot.bin"), str(clip), "--save-json",
                      str(tmp_path / "r.jsonl")])
    out, err = capsys.readouterr()
    assert rc == 4 and "2 frames with non-finite outputs (NaN/inf), the first c.mp4#1" in out
    records = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(records) == 6
    assert {r["frame"] for r in records if r.get("nonfinite")} == want   # flagged per frame
