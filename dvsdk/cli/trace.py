"""``dvsdk-run --trace OUT.json``: the runs as a Chrome trace (JSON object format), which
Perfetto (ui.perfetto.dev) and chrome://tracing open.

Three tracks in one process, as this machine ran it:

* ``runs``: each run, its wall time;
* ``host``: pack, sync, unpack and CPU ops as measured, and the wait for each hardware
  segment (on the simulator that wait is the simulation, not the device);
* ``device``: each hardware segment for its device time (on the simulator: predicted
  from its cycles at the configured clock, not the simulator's wall time), starting at
  its kick, with its commands nested inside.  The segment runs as one command list, so
  the device reports no per-command time: each command gets the share of the segment's
  time that its own time has when it runs alone (``net.profile``), and carries that
  time in its arguments.

Then the same runs on the board, predicted (``RunStats.board``), each laid from the
start of its run, its steps one after the other as the runtime does them:

* ``board, predicted: runs``: each run's predicted total;
* ``board, predicted: DV700``: each hardware segment for its device time (as above);
* ``board, predicted: Cortex-A53``: the CPU steps, packs, unpacks and each segment's
  kick and interrupt, for their time on one Cortex-A53 (:mod:`dvsdk.runtime.board_model`);
* ``board, predicted: DMA syncs``: each cache sync, likewise.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ..runtime import board_model
from ..runtime.profile import short_names

RUNS, HOST, DEVICE, BOARD_RUNS, BOARD_DEVICE, BOARD_CPU, BOARD_SYNC = range(7)


def _commands_by_segment(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    hw = [r for r in rows if r["where"] == "hw"]
    names = short_names([r["sources"][0] if r["sources"] else "" for r in hw])
    by_seg: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r, name in zip(hw, names):
        by_seg[r.get("segment") or ""].append({**r, "short": name})
    return by_seg


def trace_events(runs: list[tuple[str, Any]], profile_rows: list[dict[str, Any]] | None,
                 simulated: bool) -> list[dict[str, Any]]:
    """Chrome trace events for ``runs`` (name, RunStats) laid end to end."""
    by_seg = _commands_by_segment(profile_rows or [])
    dev_name = "device (predicted by the simulator)" if simulated else "device"
    events: list[dict[str, Any]] = []
    offset = 0.0
    for name, st in runs:
        events.append({"name": f"run {name}", "cat": "run", "ph": "X", "pid": 1,
                       "tid": RUNS, "ts": offset, "dur": st.total_us})
        for kind, label, start, dur, extra in st.events:
            ts = offset + start
            if kind != "device":
                events.append({"name": label, "cat": kind, "ph": "X", "pid": 1, "tid": HOST,
                               "ts": ts, "dur": dur, "args": extra})
                continue
            predicted = float(extra.get("predicted_us", dur))
            wait = f"wait for {label}" + (" (simulating)" if simulated else "")
            events.append({"name": wait, "cat": "wait", "ph": "X", "pid": 1, "tid": HOST,
                           "ts": ts, "dur": dur, "args": {"wall_us": dur}})
            events.append({"name": label, "cat": "device", "ph": "X", "pid": 1, "tid": DEVICE,
                           "ts": ts, "dur": predicted,
                           "args": {**extra, "device_us": predicted, "wall_us": dur}})
            cmds = by_seg.get(label, [])
            alone = sum(c["us"] for c in cmds)
            t = ts
            for c in cmds:
                share = predicted * (c["us"] / alone if alone > 0 else 1 / len(cmds))
                events.append({"name": f"{c['short']} {c['kind']}".strip(), "cat": "command",
                               "ph": "X", "pid": 1, "tid": DEVICE, "ts": t, "dur": share,
                               "args": {"sources": c["sources"], "kind": c["kind"],
                                        "us_alone": c["us"], "cycles_alone": c["cycles"],
                                        "macs": c["macs"]}})
                t += share
        board = _board_events(name, st, offset)
        events += board
        offset += max(st.total_us, sum(e["dur"] for e in board[1:])) + 10.0
    board_dev = ("board, predicted: DV700 (the simulator's cycle model)" if simulated else
                 "board: DV700 (measured)")
    tracks = ((RUNS, "runs"), (HOST, "host"), (DEVICE, dev_name),
              (BOARD_RUNS, "board, predicted: runs"), (BOARD_DEVICE, board_dev),
              (BOARD_CPU, f"board, predicted: Cortex-A53 at {board_model.DEFAULT.cpu_mhz:g} MHz"
                          " (dvsdk/runtime/board_model.py)"),
              (BOARD_SYNC, "board, predicted: DMA syncs"))
    events += [{"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "dvsdk-run"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": n}}
               for t, n in tracks]
    events += [{"name": "thread_sort_index", "ph": "M", "pid": 1, "tid": t,
                "args": {"sort_index": t}} for t, _ in tracks]
    return events


def _board_events(name: str, st: Any, offset: float) -> list[dict[str, Any]]:
    """Run ``st`` on the board, predicted: its total, then each step for its predicted
    time, one after the other from ``offset`` (what the model does not know is left out)."""
    est = st.board
    out = [{"name": f"run {name}", "cat": "board run", "ph": "X", "pid": 1, "tid": BOARD_RUNS,
            "ts": offset, "dur": est.total_us, "args": {"predicted": est.as_dict()}}]
    t = offset
    if est.run_us:
        out.append({"name": "run bookkeeping", "cat": "board cpu", "ph": "X", "pid": 1,
                    "tid": BOARD_CPU, "ts": t, "dur": est.run_us,
                    "args": {"predicted_us": est.run_us}})
        t += est.run_us
    for kind, label, _, dur, extra in st.events:
        us = board_model.event_us(kind, extra)
        if us is None:
            continue
        if kind == "device":
            out.append({"name": f"kick + interrupt {label}", "cat": "board cpu", "ph": "X",
                        "pid": 1, "tid": BOARD_CPU, "ts": t, "dur": us,
                        "args": {"predicted_us": us}})
            t += us
            us = float(extra.get("predicted_us", dur))
            out.append({"name": label, "cat": "board device", "ph": "X", "pid": 1,
                        "tid": BOARD_DEVICE, "ts": t, "dur": us, "args": {"device_us": us}})
        else:
            out.append({"name": label, "cat": f"board {kind}", "ph": "X", "pid": 1,
                        "tid": BOARD_SYNC if kind == "sync" else BOARD_CPU, "ts": t,
                        "dur": us, "args": {"predicted_us": us, **extra}})
        t += us
    return out


def write_trace(path: str, runs: list[tuple[str, Any]],
                profile_rows: list[dict[str, Any]] | None = None,
                simulated: bool = False) -> None:
    from ..fsutil import atomic_write

    doc = json.dumps({"traceEvents": trace_events(runs, profile_rows, simulated),
                      "displayTimeUnit": "ms"}).encode()
    atomic_write(path, lambda f: f.write(doc))
