"""dvsdk eval under faults (issue 29 item 2): killed --jobs processes, killed and lost Dask
workers on 127.0.0.1, a dead board in a farm of real agents, huge and corrupt images,
--resume after a real SIGKILL. Every run must end with every image scored or failed with
its reason; scored numbers are checked against onnxruntime (the ``digits`` fixture)."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from dvsdk.link.agent import AgentProcess
from dvsdk.qa.dataset import open_dataset
from dvsdk.qa.evallog import read_log
from dvsdk.qa.evalpools import chunk_size
from dvsdk.qa.evaluate import evaluate

from .conftest import ROOT
from .test_qa_eval import LABELS, NET, _same, make_digits

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    return make_digits(tmp_path_factory.mktemp("digits"))


@pytest.fixture(scope="module")
def digits160(digits, tmp_path_factory):
    """The 40 digits four times over (160 images): a run long enough to be killed
    mid-way, or for dead boards to fail their 3 times while live ones still work;
    its reference is four times that of ``digits``."""
    root, ref = digits
    out = tmp_path_factory.mktemp("digits160") / "ds"
    for copy in range(4):
        for d in (root / "folders").iterdir():
            (out / d.name).mkdir(parents=True, exist_ok=True)
            for f in d.iterdir():
                shutil.copy(f, out / d.name / f"{copy}_{f.name}")
    return out, {**ref, "confusion": ref["confusion"] * 4}


def _same160(result, ref) -> None:
    s = result.summary
    assert (s["images"], s["scored"], s["failed"]) == (160, 160, 0)
    assert s["top1"] == pytest.approx(ref["top1"]) and s["top5"] == pytest.approx(ref["top5"])
    assert np.array_equal(s["confusion"], ref["confusion"])


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _png_header_only(path: Path, width: int, height: int) -> None:
    """A PNG that declares width x height pixels (and holds one empty row): decoders
    learn its size from the header, before any pixel memory."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                     + chunk(b"IDAT", zlib.compress(b"\0" * (width + 1)))
                     + chunk(b"IEND", b""))


def test_chunk_size_follows_the_dataset_and_the_workers():
    """ceil(n / (4 workers)) clamped to 1..64: 40 images on 2 workers are 8 chunks of 5
    (the fixed 16 left 12 images idle at the end); 50,000 on 2 are chunks of 64."""
    assert [chunk_size(n, w) for n, w in [(40, 2), (40, 1), (3, 8), (50_000, 2), (0, 4),
                                          (1797, 3)]] == [5, 10, 1, 64, 1, 64]


def test_a_killed_process_is_replaced_and_its_chunk_resubmitted(digits):
    """--jobs 2: the worker processes are SIGKILLed mid-run (again until one was holding a
    chunk); the chunk is resubmitted, every image scored, the numbers onnxruntime's."""
    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    warnings: list[str] = []
    kills = [0]

    def progress(done: int, total: int) -> None:
        if kills[0] < 6 and not any("while scoring" in w for w in warnings):
            kills[0] += 1
            for child in multiprocessing.active_children():
                if child.name.startswith("dvsdk-eval process "):   # ours, not pytest's
                    os.kill(child.pid, signal.SIGKILL)

    result = evaluate(NET, ds, jobs=2, progress=progress, max_failures=10,
                      warn=warnings.append)
    assert kills[0] >= 1
    lost = [w for w in warnings if "killed by SIGKILL while scoring" in w]
    assert lost and all("resubmitted" in w for w in lost), warnings
    assert not result.errors and result.summary["scored"] == 40
    _same(result, ref)


def test_a_chunk_sent_to_a_process_that_just_died_is_resubmitted(digits, monkeypatch):
    """A process can die between saying it is ready and being sent a chunk: the send meets
    a broken pipe (once raised out of evaluate as BrokenPipeError). The pipe's send fails
    here as it does then (the first two chunks sent); the chunks are resubmitted and every
    image scored."""
    from multiprocessing.connection import Connection

    root, ref = digits
    ds = open_dataset(root / "folders", LABELS)
    real, broken = Connection.send, [0]

    def send(self, obj):
        if isinstance(obj, list) and broken[0] < 2:   # a chunk, not the None that ends
            broken[0] += 1
            raise BrokenPipeError(32, "Broken pipe")
        return real(self, obj)

    monkeypatch.setattr(Connection, "send", send)
    warnings: list[str] = []
    result = evaluate(NET, ds, jobs=2, warn=warnings.append)
    assert broken[0] == 2
    assert sum("while scoring" in w and "resubmitted" in w for w in warnings) == 2, warnings
    assert not result.errors and result.summary["scored"] == 40
    _same(result, ref)


def test_processes_that_can_never_run_fail_the_images_with_the_reason(digits, tmp_path):
    """--jobs 2 on a device nobody serves: each process slot gives up after 3 failures in
    a row, and every image is listed as failed naming the device, not 'internal error'."""
    root, _ = digits
    ds = open_dataset(root / "folders", LABELS)
    url = f"socket://127.0.0.1:{_closed_port()}"
    result = evaluate(NET, ds, jobs=2, devices=[url])
    assert result.summary["failed"] == 40 and result.summary["scored"] == 0
    assert all(url.split("//")[1] in e for _, e in result.errors), result.errors[:2]
    assert sum("given up" in w for w in result.warnings) == 2


def test_a_dead_board_leaves_the_farm_and_its_images_run_on_the_other(digits160, capsys):
    """A farm of two agents and a URL nobody serves, then one agent killed mid-run: each
    dead board leaves with one warning naming it; every image is scored on the live one."""
    from dvsdk.cli.main import run

    root, ref = digits160
    ds = open_dataset(root, LABELS)
    dead = f"socket://127.0.0.1:{_closed_port()}"
    with AgentProcess("sim://") as a, AgentProcess("sim://") as b:
        killed = []

        def progress(done: int, total: int) -> None:
            if not killed:
                killed.append(b.url)
                b.kill()

        result = evaluate(NET, ds, devices=[a.url, b.url, dead], progress=progress)
        _same160(result, ref)
        assert len(result.warnings) == 2, result.warnings
        assert any(w.startswith(f"{b.url} failed 3 times in a row (DeviceNotFound")
                   and "it leaves the rotation, its images run on the other devices" in w
                   for w in result.warnings)
        assert any(w.startswith(f"{dead} failed 3 times in a row (DeviceNotFound")
                   for w in result.warnings)
        # the CLI: one warning line for the dead URL, all scored, exit 0
        assert run(["eval", str(NET), str(root), "--device", a.url,
                    "--device", dead, "-q"]) == 0
        captured = capsys.readouterr()
        assert [line for line in captured.err.splitlines() if dead in line] == [
            line for line in captured.err.splitlines() if "warning" in line]
        assert len([line for line in captured.err.splitlines() if dead in line]) == 1
        assert "on 160 images (160/160 scored; 2 workers)" in captured.out


def test_when_every_board_is_dead_the_images_fail_with_the_reason(digits, capsys):
    from dvsdk.cli.main import run

    root, _ = digits
    dead = [f"socket://127.0.0.1:{_closed_port()}" for _ in range(2)]
    assert run(["eval", str(NET), str(root / "folders"), "--device", dead[0], "--device",
                dead[1], "--json", "--max-failures", "2"]) == 2
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert (doc["images"], doc["scored"], doc["failed"]) == (40, 0, 40)
    assert all("no device left to run it" in e["error"] and "cannot connect" in e["error"]
               for e in doc["errors"])
    assert sum("failed 2 times in a row" in w for w in doc["warnings"]) == 2
    # 20 lines for the first failures, then one count per reason
    assert "... 20 more: no device left to run it" in captured.err


def test_a_huge_and_a_corrupt_image_are_two_failed_images(digits, tmp_path, capsys):
    """A 196-megapixel PNG (only its header is stored) and a corrupt one: each fails alone
    with its reason, the 40 others are scored, and the report says 40/42 and accuracy over
    the scored images."""
    from dvsdk.cli.main import run

    root, ref = digits
    shutil.copytree(root / "folders", tmp_path / "ds")
    _png_header_only(tmp_path / "ds" / "five" / "huge.png", 14_000, 14_000)
    (tmp_path / "ds" / "two" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    per = tmp_path / "per.csv"
    assert run(["eval", str(NET), str(tmp_path / "ds"), "--jobs", "2", "--per-image",
                str(per)]) == 2
    captured = capsys.readouterr()
    assert f"top-1 {ref['top1']:.2%}" in captured.out
    assert "on 40 images (40/42 scored, 2 failed: accuracy is over the scored; 2 workers)" \
        in captured.out
    assert "huge.png: image too large: 196,000,000 pixels" in captured.err
    import csv
    rows = {Path(r["path"]).name: r for r in csv.DictReader(per.open())}
    assert "image too large" in rows["huge.png"]["error"]
    assert "cannot decode image" in rows["corrupt.png"]["error"]
    assert sum(1 for r in rows.values() if r["error"]) == 2
    assert run(["eval", str(NET), str(tmp_path / "ds"), "-q", "--expect", "failed<=2"]) == 0
    assert run(["eval", str(NET), str(tmp_path / "ds"), "-q", "--expect", "failed<=1"]) == 6


def test_dask_workers_killed_mid_run_come_back_and_every_image_is_scored(digits160):
    """A LocalCluster on 127.0.0.1 with two nanny-kept workers: both are SIGKILLed after
    the first chunk (every worker lost), the nannies bring them back, the scheduler
    resubmits their tasks, and the numbers are onnxruntime's."""
    root, ref = digits160
    ds = open_dataset(root, LABELS)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  host="127.0.0.1", dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        pids = list(client.run(os.getpid).values())
        killed = []

        def progress(done: int, total: int) -> None:
            if not killed:
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                killed.extend(pids)

        result = evaluate(NET, ds, scheduler=cluster.scheduler_address, progress=progress)
    assert len(killed) == 2
    _same160(result, ref)
    assert any("left; its tasks are resubmitted" in w for w in result.warnings)


def _dask_worker(address: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address,
                             "--no-nanny", "--nthreads", "1", "--host", "127.0.0.1",
                             "--no-dashboard"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def test_dask_with_no_worker_left_fails_the_rest_after_the_timeout(digits, digits160):
    """A scheduler on 127.0.0.1 with one worker process (no nanny), SIGKILLed after the
    first chunk: first another worker comes back and the run completes; then (that one
    killed too) none does, and after --worker-timeout the images not scored are failed
    with the reason while the scored ones are kept."""
    folders, _ = digits
    root, ref = digits160
    ds = open_dataset(root, LABELS)
    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None,
                                  processes=True) as cluster:
        address = cluster.scheduler_address
        procs = [_dask_worker(address)]
        try:
            with distributed.Client(address) as client:
                client.wait_for_workers(1, timeout=60)
            for comes_back in (True, False):
                state = {"killed": False}

                def progress(done: int, total: int, comes_back: bool = comes_back,
                             state: dict = state) -> None:
                    if not state["killed"]:
                        state["killed"] = True
                        procs[-1].kill()
                        procs[-1].wait()
                        if comes_back:
                            procs.append(_dask_worker(address))

                result = evaluate(NET, ds, scheduler=address, progress=progress,
                                  worker_timeout=60.0 if comes_back else 2.0)
                s = result.summary
                assert s["images"] == 160 and s["scored"] + s["failed"] == 160
                if comes_back:
                    _same160(result, ref)
                    continue
                assert 0 < s["scored"] < 160, s
                assert all(e == f"no Dask worker for 2 s at {address}"
                           for _, e in result.errors)
                assert "no Dask worker for 2 s; giving up" in result.warnings
                for r in result.per_image:     # the scored ones: onnxruntime's top class
                    if "error" not in r:
                        p = Path(r["path"])
                        src = folders / "folders" / p.parent.name / p.name.split("_", 1)[1]
                        assert LABELS[ref["order"][str(src)][0]] == r["prediction"]
        finally:
            for p in procs:
                p.kill()
                p.wait()


def test_resume_after_a_killed_run_equals_a_full_run(digits160, tmp_path):
    """A CLI run writing --per-image is SIGKILLed part-way (a real kill, so the log may
    end in a cut line); --resume scores only the rest and the report and the log equal
    those of a full run."""
    ds_dir, ref = digits160
    full_log, log = tmp_path / "full.jsonl", tmp_path / "run.jsonl"
    base = [sys.executable, "-m", "dvsdk.cli.main", "eval", str(NET), str(ds_dir)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([*base, "--per-image", str(log), "-q"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if log.exists() and log.read_bytes().count(b"\n") >= 20:
                break
            time.sleep(0.01)
        proc.kill()
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read()
    ds = open_dataset(ds_dir, LABELS)
    kept = read_log(log, ds)
    assert 20 <= len(kept) < 160
    count = [0]

    def progress(done: int, total: int) -> None:
        count[0] += 1

    from dvsdk.cli.main import run

    full = evaluate(NET, ds, log=str(full_log))
    resumed = evaluate(NET, ds, done=kept, progress=progress)
    assert count[0] >= 1
    _same160(resumed, ref)
    assert json.dumps(resumed.as_json()) == json.dumps(full.as_json())
    assert run(["eval", str(NET), str(ds_dir), "--resume", str(log), "-q"]) == 0
    assert log.read_text() == full_log.read_text()
    assert len(log.read_text().splitlines()) == 160


def test_resume_from_a_csv_log_and_a_segmentation_log(digits, tmp_path, capsys):
    """The CSV log resumes to the same numbers; a segmentation log keeps each image's
    non-zero confusion cells, so a resumed run's confusion equals the full one (which was
    summed per chunk on the workers: the client keeps no matrix per image)."""
    from dvsdk.cli.main import run

    from .test_qa_eval import seg_data

    root, ref = digits
    per = tmp_path / "per.csv"
    assert run(["eval", str(NET), str(root / "folders"), "--per-image", str(per), "-q"]) == 0
    lines = per.read_text().splitlines(keepends=True)
    per.write_text("".join(lines[:13]) + lines[13][:25])          # 12 rows and a cut one
    capsys.readouterr()
    assert run(["eval", str(NET), str(root / "folders"), "--resume", str(per), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["top1"] == pytest.approx(ref["top1"]) and doc["confusion"] == \
        ref["confusion"].tolist()
    assert len(per.read_text().splitlines()) == 41
    net, data, conf = seg_data(tmp_path / "seg")
    ds = open_dataset(data, ["r", "g", "b"], 3)
    log = tmp_path / "seg.jsonl"
    full = evaluate(net, ds, log=str(log), jobs=2)
    assert np.array_equal(full.summary["confusion"], conf)
    assert all("confusion" not in r and "cells" in r for r in full.per_image)
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:4]))
    kept = read_log(log, ds)
    assert len(kept) == 4
    resumed = evaluate(net, ds, done=kept)
    assert np.array_equal(resumed.summary["confusion"], conf)
    assert resumed.summary["miou"] == full.summary["miou"]


def test_resume_with_a_larger_top_k_than_the_log_is_one_clear_error(digits, tmp_path, capsys):
    """A log written with --top-k 2 cannot give top-5: one line naming the log row, the
    count it holds and the one asked for; resumed with --top-k 2 it is complete (exit 0,
    nothing run again, the top-2 onnxruntime's)."""
    from dvsdk.cli.main import run

    root, ref = digits
    log = tmp_path / "run.jsonl"
    assert run(["eval", str(NET), str(root / "folders"), "--per-image", str(log), "-q",
                "--top-k", "2"]) == 0
    capsys.readouterr()
    assert run(["eval", str(NET), str(root / "folders"), "--resume", str(log)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the log holds fewer classes per image than --top-k" in err[0]
    assert "value=2, limit=5" in err[0]
    count = [0]
    ds = open_dataset(root / "folders", LABELS)
    result = evaluate(NET, ds, top=2, done=read_log(log, ds, 2),
                      progress=lambda d, t: count.__setitem__(0, count[0] + 1))
    assert count[0] == 0 and result.summary["scored"] == 40
    top2 = np.mean([LABELS.index(Path(p).parent.name) in o[:2]
                    for p, o in ref["order"].items()])
    assert result.summary["top2"] == pytest.approx(top2)


def test_help_examples_name_no_detection_net_without_its_metrics(capsys):
    """Issue 29 item 3: no --help example suggests detection metrics that do not exist:
    analyze's examples are a classifier's; eval's detection example names the metric
    (map50) its report gives (issue 29 item 4)."""
    from dvsdk.cli.main import run

    assert run(["analyze", "--help"]) == 0
    out = capsys.readouterr().out
    assert "det.bin" not in out and "det.xml" not in out and "examples:" in out
    assert run(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "det.xml" not in out
    assert all("--expect map" in line for line in out.splitlines() if "det.bin" in line)


def test_a_csv_log_resumes_class_names_holding_a_semicolon(tmp_path):
    """The top-k class names and scores are JSON lists in a CSV cell: a name with ";" (or a
    comma) reads back as written (they were joined by ";" and split apart again)."""
    from dvsdk.qa.dataset import Dataset, Sample
    from dvsdk.qa.evallog import PerImageLog, image_row

    classes = ["cat", "dog; hound", "bird, small"]
    ds = Dataset("classify", [Sample(str(tmp_path / f"{i}.png"), label=i) for i in range(3)],
                 classes, str(tmp_path))
    results = {0: {"top": [1, 0], "scores": [0.75, 0.25], "device_us": 10.0},
               1: {"top": [2, 1], "scores": [0.5, 0.5], "device_us": 11.0},
               2: {"top": [0, 2], "scores": [1.0, 0.0], "device_us": 12.0}}
    for suffix in (".csv", ".jsonl"):
        log = PerImageLog(tmp_path / f"log{suffix}")
        for i, r in results.items():
            log.add(image_row(ds.samples[i], r, "", classes))
        log.close()
        assert read_log(tmp_path / f"log{suffix}", ds, top=2) == results, suffix
