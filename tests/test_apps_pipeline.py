"""The frame pipeline (issue 31 items 3 and 6) on sim://: a synthetic clip made here
through a YOLOv8-like detector, every frame's outputs equal to onnxruntime's on the same
decoded frame (FP16 tolerance) and in order; a live source keeps the newest frames; an
error in any stage stops every thread and leaves no half-written output."""

from __future__ import annotations

import threading

import numpy as np
import onnxruntime as ort
import pytest

import dvsdk
from dvsdk.apps.pipeline import Pipeline, _Mailbox, _Queue, run_pipeline
from dvsdk.apps.sinks import JsonLinesSink, VideoSink
from dvsdk.apps.sources import ArraySource
from dvsdk.errors import SinkError, SourceError

from .apps_media import decode_all, square_frames, write_clip
from .task_models import yolov8_like


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipe")
    model = yolov8_like(classes=3, size=32, seed=4)
    dvsdk.compile(model, d / "det.bin", golden=False, task="detect", scale=1 / 255)
    return model, d / "det.bin"


def test_clip_through_the_pipeline_matches_onnxruntime(detector, tmp_path):
    model, path = detector
    clip = write_clip(tmp_path / "clip.mp4", square_frames(12, 32, 32, side=8, step=2))
    frames = decode_all(clip)                              # PyAV here, not dvsdk.apps
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    seen = []
    with dvsdk.load(path, "sim://") as net:
        report = run_pipeline(net, str(clip), [JsonLinesSink(tmp_path / "out.jsonl")],
                              on_result=lambda f, r: seen.append((f, r)))
        devices = []
        for f in frames[:2]:       # the simulator's predicted device time of a lone run
            net.run((f.astype(np.float32) / 255).transpose(2, 0, 1)[None])
            devices.append(net.last_run.device_us)
    assert [f.index for f, _ in seen] == list(range(12))
    for (frame, result), ref in zip(seen, frames):
        np.testing.assert_array_equal(frame.rgb, ref)
        x = (ref.astype(np.float32) / 255).transpose(2, 0, 1)[None]   # 32 x 32: no resize
        (want,) = sess.run(None, {"images": x})
        got = result.outputs["output0"]
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-2)
        assert result.kind == "detect"
    lines = (tmp_path / "out.jsonl").read_text().splitlines()
    import json

    recs = [json.loads(s) for s in lines]
    assert [r["frame"] for r in recs] == list(range(12))
    np.testing.assert_allclose([r["time"] for r in recs], np.arange(12) / 12, atol=1e-6)
    assert [r["detections"] for r in recs] == [r.to_json()["detections"] for _, r in seen]
    # the report: a time per frame and stage, device times as predicted for lone runs
    assert report.frames == 12 and report.dropped == 0
    for stage in ("source", "prepare", "run", "finish", "sink"):
        assert len(report.stages[stage]) == 12
    assert report.stages["draw"] == []                      # no sink wanted a drawing
    assert len(report.latency) == 12 and report.device_predicted
    assert report.device_us[:2] == devices
    d = report.as_dict()
    assert d["device"]["fps"] == pytest.approx(1e6 / np.median(report.device_us))
    assert d["stages"]["run"]["median_ms"] == pytest.approx(
        np.median(report.stages["run"]) * 1e3)
    text = "\n".join(report.lines())
    assert "FPS on this host (measured)" in text
    assert "predicted by the simulator's cycle model" in text


def test_live_source_keeps_the_newest(detector):
    """Frames offered faster than the sink takes them: those shown are in order, the last
    one is always shown, and shown + dropped = offered (whatever the timing)."""
    _, path = detector
    gate = threading.Event()
    shown = []

    class SlowSink:
        needs_annotated = False

        def write(self, frame, result, annotated):
            shown.append(frame.index)
            gate.wait(0.05)       # a sink slower than the source

        def close(self):
            pass

    frames = [np.full((32, 32, 3), i * 8, np.uint8) for i in range(30)]
    with dvsdk.load(path, "sim://") as net:
        report = run_pipeline(net, ArraySource(frames, live=True), [SlowSink()])
    assert shown == sorted(set(shown)) and shown[-1] == 29
    assert report.frames == len(shown) and report.frames + report.dropped == 30


def test_mailbox_and_queue():
    stop = threading.Event()
    box = _Mailbox()
    for i in range(3):
        box.put(i, stop)
    assert box.get(stop) == 2 and box.dropped == 2
    q = _Queue(1)
    q.put("a", stop)
    stop.set()
    q.put("b", stop)             # full and stopping: gives up instead of blocking
    assert q.q.qsize() == 1 and box.get(stop) is not None


def test_a_failing_stage_stops_everything(detector, tmp_path):
    _, path = detector

    class Breaks:
        needs_annotated = True

        def write(self, frame, result, annotated):
            if frame.index == 3:
                raise SinkError("disk full", field="sink", value=frame.index)

        def close(self):
            pass

    before = threading.active_count()
    out = tmp_path / "out.mp4"
    frames = [np.zeros((32, 32, 3), np.uint8)] * 10
    with dvsdk.load(path, "sim://") as net:
        with pytest.raises(SinkError, match="disk full"):
            run_pipeline(net, frames, [VideoSink(out, fps=10), Breaks()])
        assert threading.active_count() == before
        assert not out.exists() and list(tmp_path.iterdir()) == []   # no temporary left
        bad = [np.zeros((32, 32, 3), np.uint8)] * 4 + [np.full((32, 32), np.nan)]
        with pytest.raises(SourceError, match="frame 4"):
            Pipeline(net, bad).run()
        assert threading.active_count() == before


def test_ctrl_c_stops_cleanly_and_keeps_the_count(detector):
    """Ctrl-C (how a camera run ends) in the last stage: every thread stops, the report
    holds the frames finished before it; sinks with ``progress`` saw each count."""
    _, path = detector
    counts = []

    class Interrupted:
        needs_annotated = False

        def write(self, frame, result, annotated):
            if frame.index == 3:
                raise KeyboardInterrupt

        def progress(self, running):
            counts.append(running["frames"])

        def close(self):
            pass

    before = threading.active_count()
    frames = (np.zeros((32, 32, 3), np.uint8) for _ in range(1000))   # endless enough
    with dvsdk.load(path, "sim://") as net:
        pipe = Pipeline(net, ArraySource(frames), [Interrupted()])
        with pytest.raises(KeyboardInterrupt):
            pipe.run()
    assert threading.active_count() == before
    assert pipe.report.frames == 3 and counts == [1, 2, 3]
    assert pipe.report.wall_s > 0
