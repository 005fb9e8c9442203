"""``dvsdk-run`` shows the run on the board, predicted, next to this machine's own times
(issue 27 item 3): ``--profile``, ``--bench``, ``--trace``, ``-v`` and ``--json`` each show
the three predicted parts (the device, the CPU's work on the board's Cortex-A53, the DMA
syncs), labelled as predictions, and never fold the host's measured stages and the
predicted device time into one figure without saying so.

The figures checked are the model's (deterministic); nothing here depends on how fast
this machine is.
"""

from __future__ import annotations

import json
import re

import pytest

import dvsdk
from dvsdk.runtime import board_model as bm

from .test_cli_run import DIGITS, MODELS, call

IMG = MODELS / "samples" / "seven_1442.png"


@pytest.fixture(autouse=True)
def _sim(monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")


def _board_of_a_normal_run() -> bm.BoardEstimate:
    from dvsdk.runtime.images import preprocess

    with dvsdk.load(DIGITS) as net:
        spec = net.inputs[0]
        net.run(preprocess(str(IMG), tuple(spec["shape"]), spec.get("preprocess", {})))
        return net.last_run.board


def test_profile_shows_the_three_predicted_parts(capsys):
    rc, out, _ = call([DIGITS, IMG, "--profile", "-q"], capsys)
    assert rc == 0
    b = _board_of_a_normal_run()
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["board", "us"]
    row = next(line for line in lines if re.match(r"^ +\d+ cpu ", line))
    assert float(row.split()[-1]) == pytest.approx(b.cpu_steps_us, abs=0.05)  # the Softmax
    i = next(i for i, line in enumerate(lines) if line.startswith("on the board, predicted:"))
    assert lines[i - 1].startswith("us: hw rows the device's, predicted by the simulator's "
                                   "cycle model at 300 MHz; cpu rows this machine's, measured")
    assert lines[i] == f"on the board, predicted: {b.lines()[0]}"
    assert lines[i + 1:i + 4] == b.lines()[1:]
    assert lines[i + 1] == "  device 15.3 us (the simulator's cycle model)"
    assert lines[i + 2].startswith(f"  + CPU {bm.format_us(b.cpu_us)} on one Cortex-A53 at "
                                   "1200 MHz (CPU steps 167.1 us, ")
    assert lines[i + 2].endswith(", run 116.7 us)")            # 1400 bytecodes, once
    assert lines[i + 3] == "  + DMA syncs 40.1 us (2 syncs, 532 bytes)"
    assert lines[i + 4].startswith("measured on this host, the same run: CPU steps ")


def test_profile_without_input_and_as_json(capsys):
    rc, out, _ = call([DIGITS, "--profile", "-q"], capsys)   # the golden input, then a run
    assert rc == 0 and "on the board, predicted: " in out and "  + DMA syncs" in out
    rc, out, _ = call([DIGITS, IMG, "--profile", "--json"], capsys)
    report = json.loads(out)
    board = report["board"]
    assert board == report["results"][0]["board"]            # the same input's normal run
    assert board["total_us"] == pytest.approx(board["device_us"] + board["cpu_us"]
                                              + board["sync_us"])
    assert board["device_predicted"] is True and board["cpu_mhz"] == 1200
    cpu = [r for r in report["profile"] if r["where"] == "cpu"]
    assert [r["board_us"] for r in cpu] == [pytest.approx(board["cpu_steps_us"])]
    assert cpu[0]["board_work"]["op"] == "Softmax"


def test_verbose_results_add_the_prediction(capsys):
    rc, out, _ = call([DIGITS, IMG, "-v", "-k", "1"], capsys)
    assert rc == 0
    line = next(line for line in out.splitlines() if "on the board, predicted:" in line)
    assert line.strip() == f"on the board, predicted: {_board_of_a_normal_run().summary()}"
    assert "device 15.3 us (simulator) + CPU " in line and " + DMA syncs " in line


def test_bench_predicts_the_board_apart_from_the_host(capsys):
    rc, out, _ = call([DIGITS, IMG, "--bench", "3", "--json"], capsys)
    bench = json.loads(out)["bench"]
    board = bench["board"]
    b = _board_of_a_normal_run()
    for key in ("device_us", "cpu_steps_us", "pack_us", "unpack_us", "kick_us", "sync_us",
                "run_us", "total_us", "fps"):
        assert board[key] == pytest.approx(getattr(b, key)), key   # every run the same
    assert board["cpu_us"] == pytest.approx(board["cpu_steps_us"] + board["pack_us"]
                                            + board["unpack_us"] + board["kick_us"]
                                            + board["run_us"])
    assert board["run_us"] == pytest.approx(bm.run_us()) and bm.run_us() > 0
    assert set(bench["stages"]) == {"preprocess", "pack", "sync", "device", "unpack",
                                    "cpu ops", "total"}             # the host's, as before
    rc, out, _ = call([DIGITS, IMG, "--bench", "3", "-q"], capsys)
    lines = out.splitlines()
    assert lines[1].split()[-2:] == ["board", "us"]
    rows = {line[:12].strip(): line[12:].split() for line in lines[2:11]}
    assert list(rows) == ["preprocess", "pack", "sync", "device", "unpack", "cpu ops",
                          "kick/wait", "run", "total"]
    assert rows["preprocess"][-1] == "-" and rows["kick/wait"][:5] == ["-"] * 5
    assert rows["run"][:5] == ["-"] * 5
    for name, key in (("pack", "pack_us"), ("sync", "sync_us"), ("device", "device_us"),
                      ("unpack", "unpack_us"), ("cpu ops", "cpu_steps_us"),
                      ("kick/wait", "kick_us"), ("run", "run_us"), ("total", "total_us")):
        assert float(rows[name][-1]) == pytest.approx(getattr(b, key), abs=0.05), name
    assert lines[11] == ("columns mean..max: measured on this host, but device: predicted by "
                         "the simulator's cycle model at 300 MHz (so total mixes both)")
    assert lines[12].startswith("board us: one run on the board, predicted: ")
    host = next(line for line in lines if line.startswith("this host: "))
    assert host.endswith("(host stages measured, device time predicted: not a board figure)")
    assert lines[-1] == (f"on the board, predicted: {b.fps:,.1f} FPS sequential, "
                         f"{bm.format_us(b.total_us)} per run = device 15.3 us + CPU "
                         f"{bm.format_us(b.cpu_us)} + DMA syncs {bm.format_us(b.sync_us)}")


def test_trace_has_the_predicted_board_tracks(tmp_path, capsys):
    trace = tmp_path / "t.json"
    rc, _, _ = call([DIGITS, IMG, IMG, "--trace", trace, "-q"], capsys)
    assert rc == 0
    doc = json.loads(trace.read_text())["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in doc
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tid = {n: t for t, n in names.items()}
    assert {"runs", "host", "board, predicted: runs", "board, predicted: DMA syncs"} <= set(tid)
    assert "board, predicted: DV700 (the simulator's cycle model)" in tid
    cpu_tid = tid["board, predicted: Cortex-A53 at 1200 MHz (dvsdk/runtime/board_model.py)"]
    slices = [e for e in doc if e["ph"] == "X"]
    runs = [e for e in slices if e["tid"] == tid["board, predicted: runs"]]
    b = _board_of_a_normal_run()
    assert len(runs) == 2
    for run, after in zip(runs, runs[1:] + [None]):
        inside = [e for e in slices if e["cat"].startswith("board ") and e is not run
                  and run["ts"] <= e["ts"] and (after is None or e["ts"] < after["ts"])]
        assert run["dur"] == pytest.approx(run["args"]["predicted"]["total_us"])
        assert sum(e["dur"] for e in inside) == pytest.approx(run["dur"])   # end to end
        on = {t: sum(e["dur"] for e in inside if e["tid"] == t) for t in names}
        assert on[tid["board, predicted: DMA syncs"]] == pytest.approx(b.sync_us)
        assert on[cpu_tid] == pytest.approx(b.cpu_us)
        assert on[tid["board, predicted: DV700 (the simulator's cycle model)"]] == \
            pytest.approx(b.device_us)
        assert [(e["cat"], e["name"]) for e in inside] == [
            ("board cpu", "run bookkeeping"), ("board pack", "image"), ("board sync", "image"),
            ("board cpu", "kick + interrupt segment0"), ("board device", "segment0"),
            ("board sync", "logits"), ("board unpack", "logits"),
            ("board cpu", "Softmax softmax")]
        for e, nxt in zip(inside, inside[1:]):   # one after the other, in the run's order
            assert nxt["ts"] == pytest.approx(e["ts"] + e["dur"])
        assert inside[0]["ts"] == run["ts"]
    # the host's tracks are as they were: the device track still the simulator's
    assert any(n.startswith("device") for n in names.values())


def test_bench_on_a_board_says_what_it_measured(capsys):
    """The table as a board shows it (device measured): no mix to warn of, the board's
    prediction still labelled."""
    from dvsdk.cli.bench import format_bench

    rc, out, _ = call([DIGITS, "--bench", "2", "--json"], capsys)
    res = json.loads(out)["bench"]
    res["device_time"] = "measured"
    res["board"]["device_predicted"] = False
    text = format_bench(res)
    assert "columns mean..max: measured on this board (device: kick to interrupt)" in text
    assert "this board: " in text and "not a board figure" not in text
    assert text.splitlines()[-1].startswith("on the board, predicted: ")
