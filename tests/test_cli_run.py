"""``dvsdk-run`` as people use it (issue 10 §3-§4): a terminal shared by the progress bar
and the results, a directory with a corrupt image, benchmarks without an input,
multi-input networks, readable profiles, traces of the device's own time, one-line
errors naming the user's paths, and non-finite outputs as an error of their own.

Through ``dvsdk.cli.run.run(argv)``, the installed console script in a subprocess, and a
real pseudo-terminal; references are numpy written here and the ONNX files themselves.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.cli import run as run_cli

from .conftest import DATA, ROOT

MODELS = ROOT / "examples" / "models"
DIGITS = MODELS / "digits.bin"
BIN = Path(sys.executable).parent
ENV = {**os.environ, "DVSDK_DEVICE": "sim://"}


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


def call(argv, capsys) -> tuple[int, str, str]:
    rc = run_cli.run([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _model(nodes, inputs, outputs, inits=()) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                                       for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                           for n, s in outputs], list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.fixture(scope="module")
def nets(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    two = _model([helper.make_node("Add", ["a", "b"], ["s"]),
                  helper.make_node("Relu", ["s"], ["y"])],
                 [("a", [1, 4, 6, 6]), ("b", [1, 4, 6, 6])], [("y", [1, 4, 6, 6])])
    dvsdk.compile(two, d / "two.bin", golden=False)
    big = numpy_helper.from_array(np.full((4, 3, 3, 3), 300.0, np.float32), "W")
    hot = _model([helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1],
                                   kernel_shape=[3, 3]),
                  helper.make_node("GlobalAveragePool", ["c"], ["p"]),
                  helper.make_node("Flatten", ["p"], ["f"]),
                  helper.make_node("Softmax", ["f"], ["y"], axis=1)],
                 [("x", [1, 3, 8, 8])], [("y", [1, 4])], [big])
    dvsdk.compile(hot, d / "hot.bin", golden=False)  # 255 * 300 * 27 overflows FP16
    imgs = d / "imgs"
    imgs.mkdir()
    for name in ("seven_1442.png", "two_1465.png", "zero_1445.png", "one_1457.png"):
        shutil.copy(MODELS / "samples" / name, imgs / name)
    (imgs / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n this is not an image")
    white = d / "white.png"
    from PIL import Image

    Image.fromarray(np.full((8, 8, 3), 255, np.uint8)).save(white)
    return {"dir": d, "two": d / "two.bin", "hot": d / "hot.bin", "imgs": imgs,
            "white": white}


# -- the terminal ------------------------------------------------------------------------------
def _screen(raw: str) -> list[str]:
    """What a terminal shows: ``\\r`` returns, ``ESC [ K`` erases to the end, text overwrites."""
    lines, cur, col, i = [], [], 0, 0
    while i < len(raw):
        if raw.startswith("\x1b[K", i):
            del cur[col:]
            i += 3
            continue
        ch = raw[i]
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(cur))
            cur, col = [], 0
        else:
            cur[col:col + 1] = [ch]
            col += 1
        i += 1
    return lines + ["".join(cur)]


def _both_on_a_tty(argv: list[str]) -> tuple[int, str]:
    """Run with stdout and stderr on one real pseudo-terminal; return status and bytes."""
    import pty
    import select

    main_fd, sub_fd = pty.openpty()
    proc = subprocess.Popen(argv, stdout=sub_fd, stderr=sub_fd, env=ENV)
    os.close(sub_fd)
    chunks = []
    while True:
        ready, _, _ = select.select([main_fd], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main_fd, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    rc = proc.wait(timeout=60)
    os.close(main_fd)
    return rc, b"".join(chunks).decode(errors="replace")


def _results_on_their_own_lines(raw: str, folder: Path, n: int) -> list[str]:
    assert "[#" in raw and f"{n}/{n}" in raw             # the bar was drawn
    lines = [ln for ln in _screen(raw) if ln.strip()]
    results = [ln for ln in lines if "(device" in ln]
    for ln in results:
        assert ln.startswith(str(folder)), ln            # nothing of the bar before it
    assert not any("[#" in ln or "[." in ln for ln in lines)  # erased at the end
    scores = [ln for ln in lines if "%" in ln]
    assert len(scores) == 5 * len(results)
    assert all(re.fullmatch(r"\s+\d+\.\d\d%\s+\w+", s) for s in scores)
    return lines


def test_progress_bar_and_results_never_share_a_line(nets, tmp_path):
    good = tmp_path / "good"
    shutil.copytree(nets["imgs"], good, ignore=shutil.ignore_patterns("bad.png"))
    rc, raw = _both_on_a_tty([str(BIN / "dvsdk-run"), str(DIGITS), str(good)])
    assert rc == 0
    lines = _results_on_their_own_lines(raw, good, 4)
    assert sum("(device" in ln for ln in lines) == 4
    rc, raw = _both_on_a_tty([str(BIN / "dvsdk-run"), str(DIGITS), str(nets["imgs"])])
    assert rc == 2                                      # bad.png failed, the rest ran
    lines = _results_on_their_own_lines(raw, nets["imgs"], 5)
    assert sum("(device" in ln for ln in lines) == 4
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1 and errors[0].startswith("dvsdk-run: error:")
    assert "bad.png" in errors[0]


def test_a_corrupt_image_is_reported_and_the_others_still_run(nets, capsys):
    rc, out, err = call([DIGITS, nets["imgs"], "--json", "-k", "1"], capsys)
    assert rc == 2
    res = json.loads(out)["results"]
    by_name = {Path(r["input"]).name: r for r in res}
    assert sorted(by_name) == ["bad.png", "one_1457.png", "seven_1442.png", "two_1465.png",
                               "zero_1445.png"]
    assert "cannot decode image" in by_name["bad.png"]["error"]
    assert by_name["bad.png"]["exit_code"] == 2
    for name, r in by_name.items():
        if name != "bad.png":
            assert r["top"][0]["label"] == name.split("_")[0]
    assert err.count("\n") == 1 and "bad.png" in err


# -- benchmarks --------------------------------------------------------------------------------
def test_bench_without_input_feeds_random_data_of_the_input_shape(nets, capsys):
    from dvsdk.cli.inputs import random_job

    rc, out, _ = call([DIGITS, "--bench", "4", "--json"], capsys)
    bench = json.loads(out)["bench"]
    assert rc == 0 and bench["runs"] == 4 and bench["input"] == "random image"
    for row in bench["stages"].values():
        assert row["min"] <= row["median"] <= row["p99"] <= row["max"]
        assert row["min"] <= row["mean"] <= row["max"]
    # shapes from the ONNX files themselves
    onnx_shape = [d.dim_value for d in onnx.load(str(MODELS / "digits.onnx")).graph.input[0]
                  .type.tensor_type.shape.dim]
    with dvsdk.load(DIGITS) as net:
        job = random_job(net)
        assert job.payload.shape == (onnx_shape[2], onnx_shape[3], 3)
        assert job.payload.std() > 50                       # random, not a constant
    rc, out, _ = call([nets["two"], "--bench", "2", "--json"], capsys)
    bench = json.loads(out)["bench"]
    assert rc == 0 and bench["runs"] == 2 and bench["input"] == "random data"
    with dvsdk.load(nets["two"]) as net:
        feed = random_job(net).payload
    assert {k: v.shape for k, v in feed.items()} == {"a": (1, 4, 6, 6), "b": (1, 4, 6, 6)}


class _Ticks:
    """The bench's clock: each reading 10 ms after the one before, on any machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.01
        return self.now


def test_bench_for_a_time_and_the_table(capsys, monkeypatch):
    from dvsdk.cli import bench as bench_module

    monkeypatch.setattr(bench_module, "time", _Ticks())  # 3 readings, 30 ms, a run
    rc, out, _ = call([DIGITS, "-t", "0.3", "--json"], capsys)
    bench = json.loads(out)["bench"]
    assert rc == 0 and bench["runs"] >= 1 and bench["seconds"] >= 0.3
    rc, out, _ = call([DIGITS, "-t", "0.2", "--bench", "100000", "--json"], capsys)
    assert 1 <= json.loads(out)["bench"]["runs"] < 100000     # the time limit came first
    rc, out, _ = call([DIGITS, "-t", "1000", "--bench", "2", "--json"], capsys)
    assert json.loads(out)["bench"]["runs"] == 2               # the count came first
    rc, out, _ = call([DIGITS, "--bench", "3"], capsys)
    head = out.splitlines()[1].split()
    assert head == ["stage", "mean", "us", "min", "us", "median", "us", "p99", "us", "max", "us",
                    "board", "us"]
    assert "3 runs" in out and "FPS sequential" in out
    assert "1 CPU step in 1 segment, 1 device<->CPU transition; CPU ops" in out


def test_bench_counts_the_cpu_steps_and_the_transfers_around_them(tmp_path, capsys):
    """conv -> Exp (CPU) -> conv: the Exp's input is synced and unpacked for it, its output
    packed and synced back; the bench says how long that took, apart from the input's
    upload and the output's download, which every run has."""
    w = numpy_helper.from_array(np.full((8, 8, 1, 1), 0.1, np.float32), "w")
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["a"]), helper.make_node("Exp", ["a"], ["e"]),
         helper.make_node("Conv", ["e", "w"], ["y"])], "mid",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "mid.bin"
    dvsdk.compile(model, path, golden=False)
    rc, out, _ = call([path, "--bench", "3", "--json"], capsys)
    bench = json.loads(out)["bench"]
    assert rc == 0 and bench["program"] == {"hw_segments": 2, "cpu_steps": 1,
                                            "cpu_segments": 1, "transitions": 2}
    assert 0 < bench["transfer_around_cpu_us"] < bench["transfer_us"]
    assert bench["cpu_us"] == bench["stages"]["cpu ops"]["median"] > 0


# -- several inputs ---------------------------------------------------------------------------
def test_two_input_network_by_name_and_by_npz(nets, tmp_path, capsys):
    rng = np.random.default_rng(4)
    a = rng.uniform(-2, 2, (1, 4, 6, 6)).astype(np.float32)
    b = rng.uniform(-2, 2, (1, 4, 6, 6)).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    np.savez(tmp_path / "feeds.npz", a=a, b=b)
    ref = np.maximum(a.astype(np.float16).astype(np.float32)
                     + b.astype(np.float16).astype(np.float32), 0)
    for inputs in (["--input", f"a={tmp_path / 'a.npy'}", "--input", f"b={tmp_path / 'b.npy'}"],
                   ["--input", tmp_path / "feeds.npz"]):
        rc, out, err = call([nets["two"], *inputs, "--save", tmp_path / "y.npz", "--json",
                             "--force"], capsys)   # the second run replaces the first's
        assert rc == 0, err
        assert len(json.loads(out)["results"]) == 1
        np.testing.assert_allclose(np.load(tmp_path / "y.npz")["y"], ref, atol=4e-3)
    np.savez(tmp_path / "wrong.npz", a=a, c=b)
    for inputs, needle in (([tmp_path / "a.npy"], "2 inputs"),
                           ([f"a={tmp_path / 'a.npy'}"], "missing"),
                           ([f"c={tmp_path / 'a.npy'}"], "no input of that name"),
                           ([tmp_path / "wrong.npz"], "keyed by input name"),
                           ([f"a={tmp_path / 'a.npy'}", f"a={tmp_path / 'b.npy'}"], "twice")):
        argv = [nets["two"]] + [x for i in inputs for x in ("--input", i)]
        rc, _, err = call(argv, capsys)
        assert rc == 2 and err.count("\n") == 1 and needle in err, err


# -- profile and trace --------------------------------------------------------------------------
def test_profile_rows_tell_torch_ops_apart(tmp_path, capsys):
    net = tmp_path / "t.bin"
    # (a command per layer, each a row: chained, a row names its first op)
    dvsdk.compile(str(DATA / "torch_mbv2_tiny.onnx"), net, golden=False, chain=False)
    rc, out, _ = call([net, "--profile", "-q"], capsys)   # no input: the profile runs zeros
    assert rc == 0
    shown = {int(m.group(1)): m.group(2) for m in
             re.finditer(r"^\s*(\d+) hw\s+(.*?)\s+\d+x\d+x\d+\s", out, re.M)}
    with dvsdk.load(net) as n:
        rows = [r for r in n.profile() if r["where"] == "hw" and r["sources"]]
    assert len(rows) > 10 and {r["index"] for r in rows} <= set(shown)
    names = {r["index"]: shown[r["index"]].split(" ")[0] for r in rows}
    sources = {r["index"]: r["sources"][0] for r in rows}
    assert len(set(names.values())) == len(set(sources.values()))  # one name per op
    for i, src in sources.items():
        assert src.endswith(names[i].split("/")[-1])     # the tail is kept
        block = re.search(r"blocks\.\d+", src)
        assert block is None or block.group(0) in names[i]  # and what tells blocks apart
    assert "blocks.1/block.3/Conv depthwise conv 3x3 +relu6" in out


def test_short_names():
    from dvsdk.runtime.profile import short_names

    names = ["/features/features.0/features.0.0/Conv",
             "/features/features.1/conv/conv.0/conv.0.0/Conv", "Softmax_12", ""]
    assert short_names(names) == ["features.0.0/Conv", "features.1/conv.0.0/Conv",
                                  "Softmax_12", ""]
    assert short_names(["/m/a/x", "/m/b/x"]) == ["a/x", "b/x"]      # shared scopes dropped
    long = [f"/net{k}/" + "/".join(f"part{i}" for i in range(12)) + f"/op{k}"
            for k in range(2)]
    short = short_names(long, width=20)
    assert short == ["net0/...0/part11/op0", "net1/...0/part11/op1"]
    short = short_names(["/a/" + "x" * 40 + "/op", "/b/" + "y" * 40 + "/op"], width=20)
    assert short == ["a/...xxxxxxxxxxxx/op", "b/...yyyyyyyyyyyy/op"]
    assert short_names(["/" + "h" * 30 + "/" + "t" * 30], width=20) == ["..." + "t" * 17]


def test_trace_draws_the_device_time_per_command(tmp_path, capsys):
    trace = tmp_path / "t.json"
    img = MODELS / "samples" / "seven_1442.png"
    rc, out, _ = call([DIGITS, img, img, "--trace", trace, "--json"], capsys)
    assert rc == 0
    results = json.loads(out)["results"]
    doc = json.loads(trace.read_text())
    events = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    names = {e["tid"]: e["args"]["name"] for e in doc["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    dev_tid = next(t for t, n in names.items() if n.startswith("device"))
    host_tid = next(t for t, n in names.items() if n == "host")
    segs = [e for e in events if e["cat"] == "device"]
    cmds = [e for e in events if e["cat"] == "command"]
    with dvsdk.load(DIGITS) as net:
        n_cmds = sum(s["commands"][1] for s in net.meta["program"] if s["kind"] == "hw")
    assert len(segs) == 2 and len(cmds) == 2 * n_cmds
    for seg, res in zip(segs, results):
        assert seg["tid"] == dev_tid
        assert seg["dur"] == pytest.approx(res["device_us"], rel=1e-9)
        assert seg["dur"] == pytest.approx(seg["args"]["cycles"] / 300)   # 300 MHz
        assert "wall_us" in seg["args"]  # the simulator's wall time, apart from "dur"
        inside = [c for c in cmds if seg["ts"] - 1e-6 <= c["ts"] < seg["ts"] + seg["dur"]]
        assert len(inside) == n_cmds and all(c["tid"] == dev_tid for c in inside)
        assert sum(c["dur"] for c in inside) == pytest.approx(seg["dur"])
        assert inside[-1]["ts"] + inside[-1]["dur"] <= seg["ts"] + seg["dur"] + 1e-6
    host = [e for e in events if e["tid"] == host_tid]
    assert {"pack", "sync", "cpu", "wait"} <= {e["cat"] for e in host}
    assert not any(e["cat"] in ("device", "command") for e in host)


# -- arguments and errors ------------------------------------------------------------------------
@pytest.mark.parametrize("extra,needle", [
    (["-k", "0"], "--top-k"), (["-k", "-3"], "--top-k"), (["--bench", "0"], "--bench"),
    (["--bench", "-5"], "--bench"), (["--timeout", "-1"], "--timeout"),
    (["--timeout", "0"], "--timeout"), (["-t", "0"], "--time"), (["-k", "two"], "--top-k"),
])
def test_bad_values_are_one_line_exit_2(capsys, extra, needle):
    rc, out, err = call([DIGITS, MODELS / "samples" / "seven_1442.png", *extra], capsys)
    assert rc == 2 and out == "" and err.count("\n") == 1 and needle in err
    assert "usage:" not in err


def test_errors_name_the_users_paths(tmp_path, capsys):
    img = MODELS / "samples" / "seven_1442.png"
    for opt in ("--save", "--trace", "--save-mask"):
        target = tmp_path / "nonexistent" / "o.npz"
        rc, _, err = call([DIGITS, img, opt, target, "-q"], capsys)
        assert rc == 2 and err.count("\n") == 1, err  # the missing folder: said first
        assert f"value='{target}'" in err and "does not exist" in err and ".tmp" not in err
    rc, _, err = call([DIGITS, "--input", img], capsys)
    assert rc == 2 and err.count("\n") == 1 and "not a .npy" in err and str(img) in err
    rc, _, err = call([DIGITS, "--input", tmp_path], capsys)
    assert rc == 2 and "is a directory" in err


def test_non_finite_outputs_exit_4_without_numpy_warnings(nets):
    proc = subprocess.run([str(BIN / "dvsdk-run"), str(nets["hot"]), str(nets["white"])],
                          capture_output=True, text=True, timeout=120, env=ENV)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.count("\n") == 1 and "non-finite" in proc.stderr
    assert "Warning" not in proc.stderr and "nan" not in proc.stdout.lower()
    proc = subprocess.run([str(BIN / "dvsdk-run"), str(nets["hot"]), str(nets["white"]),
                           "--json"], capture_output=True, text=True, timeout=120, env=ENV)
    (res,) = json.loads(proc.stdout)["results"]
    assert proc.returncode == 4 and res["exit_code"] == 4 and "FP16" in res["error"]
    helptext = subprocess.run([str(BIN / "dvsdk-run"), "--help"], capture_output=True,
                              text=True, timeout=60).stdout
    assert re.search(r"\b4 a run produced non-finite outputs", helptext)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Command line"):]
    section = section[: section.index("\n## ", 3)]
    assert "4" in section and "non-finite" in section
