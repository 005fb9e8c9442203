"""``dvsdk-run net.bin image.png``: run a compiled network on images or tensors."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from . import entry

EPILOG = """examples:
  dvsdk-run digits.bin seven.png                 classify one image (top-5 with labels)
  dvsdk-run digits.bin samples/ --json           a directory as a batch, JSON output
  dvsdk-run net.bin --input x.npy --save y.npz   raw tensors in and out
  dvsdk-run net.bin img.png --bench 50           stage timings and FPS
  dvsdk-run net.bin --selftest                   the golden pair stored in net.bin
  dvsdk-run net.bin img.png --profile            per-command cycles and MAC utilization
  dvsdk-run seg.bin street.png --save-mask m.png per-pixel classes as a colored PNG
  DVSDK_DEVICE=uio:// dvsdk-run net.bin img.png  on the board (default: the simulator)
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dvsdk-run", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Run a compiled network (net.bin) on the DV700.")
    p.add_argument("net", help="compiled network (net.bin)")
    p.add_argument("images", nargs="*", help="image files or directories (a batch)")
    p.add_argument("--input", action="append", default=[], metavar="X.npy",
                   help="raw input tensor (.npy, the model's own layout); repeatable")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("-k", "--top-k", type=int, default=5, help="classes to show")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait per run")
    p.add_argument("--json", action="store_true", help="machine-readable results")
    p.add_argument("--save", metavar="OUT.npz", help="save every output")
    p.add_argument("--bench", type=int, metavar="N", help="time N runs per stage")
    p.add_argument("--selftest", action="store_true", help="run the stored golden pair")
    p.add_argument("--profile", action="store_true", help="per-command cycles, MACs, bytes")
    p.add_argument("--trace", metavar="OUT.json", help="Chrome/Perfetto trace of the runs")
    p.add_argument("--save-mask", metavar="MASK.png",
                   help="segmentation: save the per-pixel class map as a colored PNG")
    p.add_argument("--ipu", action="store_true",
                   help="resize and convert the image on the device's IPU")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _collect_images(items: list[str]) -> list[Path]:
    from ..errors import ImageError
    from ..runtime.images import IMAGE_SUFFIXES

    paths: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES)
            if not found:
                raise ImageError("directory has no images", field="images", value=item,
                                 limit=IMAGE_SUFFIXES)
            paths += found
        elif p.exists():
            paths.append(p)
        else:
            raise ImageError("no such image file or directory", field="images", value=item)
    return paths


def _probabilities(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.float64).reshape(-1)
    if v.size and v.min() >= 0 and abs(v.sum() - 1) < 1e-2:
        return v
    e = np.exp(v - v.max())
    return e / e.sum()


def _classification(net, outputs: dict[str, np.ndarray], k: int) -> list[dict] | None:
    if len(outputs) != 1:
        return None
    (v,) = outputs.values()
    if v.size < 2 or int(np.prod(v.shape[1:])) != max(v.shape[1:], default=1) \
            or v.shape[0] != 1:
        return None
    probs = _probabilities(v)
    top = np.argsort(-probs, kind="stable")[:k]
    labels = net.labels or []
    return [{"class": int(i), "label": labels[i] if i < len(labels) else str(int(i)),
             "probability": float(probs[i])} for i in top]


def main(argv: list[str]) -> int:
    from ..errors import InvalidArgument
    from ..runtime.net import load

    args = build_parser().parse_intermixed_args(argv)  # images may follow options
    if not os.path.exists(args.net):
        raise InvalidArgument("net.bin not found", field="net", value=args.net)
    with load(args.net, args.device) as net:
        if args.selftest:
            res = net.selftest()
            if args.json:
                print(json.dumps(res))
            else:
                print(f"selftest {'PASS' if res['passed'] else 'FAIL'}: max error "
                      f"{res['max_abs_error']:.3g} (tolerance "
                      f"{max(res['tolerance'].values()):.3g})")
            return 0 if res["passed"] else 1
        jobs: list[tuple[str, object]] = []
        for path in _collect_images(args.images):
            jobs.append((str(path), ("image", path)))
        for path in args.input:
            jobs.append((path, ("tensor", _load_npy(path))))
        if not jobs:
            raise InvalidArgument("give an image, a directory, --input X.npy or --selftest",
                                  field="inputs", value=None)
        results, saved, traces = [], {}, []
        report: dict = {"results": results}
        progress = Progress(len(jobs), enabled=not args.quiet and not args.json and
                            len(jobs) > 1)
        for name, (kind, payload) in jobs:
            if kind == "image":
                outs = net.run_image(payload, timeout=args.timeout, ipu=args.ipu)
            else:
                if args.ipu:
                    raise InvalidArgument("--ipu needs an image input", field="--ipu")
                outs = net.run(payload, timeout=args.timeout)
            traces.append((name, net.last_run))
            progress.step(name)
            entry_ = {"input": name, "device_us": net.last_run.device_us,
                      "cycles": net.last_run.cycles, "wall_us": net.last_run.total_us}
            top = _classification(net, outs, args.top_k)
            if top is not None:
                entry_["top"] = top
            else:
                entry_["outputs"] = {k: list(v.shape) for k, v in outs.items()}
            results.append(entry_)
            for k, v in outs.items():
                saved[k if len(jobs) == 1 else f"{Path(name).stem}/{k}"] = v
            if not args.json and not args.quiet:
                _print_result(entry_, args.verbose, net.last_run)
        progress.close()
        if args.save_mask:
            save_mask(args.save_mask, net.class_map())
            if not args.quiet and not args.json:
                print(f"saved class map to {args.save_mask}")
        if args.save:
            _save_npz(args.save, saved)
        if args.profile:
            from ..runtime.profile import format_profile

            rows = net.profile(_first_input(net, jobs))
            if args.json:
                report["profile"] = rows
            else:
                print(format_profile(rows, net.device.info().mac_num))
        if args.trace:
            write_trace(args.trace, traces)
        if args.bench:
            name, (kind, payload) = jobs[0]
            bench = _bench(net, kind, payload, args.bench, args.json,
                           not args.quiet and not args.json)
            if bench is not None:
                report["bench"] = bench
        if args.json:
            print(json.dumps(report, default=_jsonable))
    return 0


def _load_npy(path: str) -> np.ndarray:
    from ..errors import InvalidArgument

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"cannot read tensor: {e}", field="input", value=path) from None


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    from ..fsutil import atomic_write

    atomic_write(path, lambda f: np.savez(f, **{k.replace("/", "__"): v
                                                for k, v in arrays.items()}))


def _print_result(entry_: dict, verbose: bool = False, stats=None) -> None:
    print(f"{entry_['input']}:  (device {entry_['device_us']:.0f} us)")
    if verbose and stats is not None:
        for seg in stats.segments:
            print(f"    {seg.name}: {seg.commands} commands, {seg.device_us:.1f} us device, "
                  f"{seg.cycles} cycles")
        print(f"    cpu ops {stats.cpu_us:.0f} us, pack {stats.pack_us:.0f} us, sync "
              f"{stats.sync_us:.0f} us, unpack {stats.unpack_us:.0f} us")
    for t in entry_.get("top", []):
        print(f"  {t['probability']:7.2%}  {t['label']}")
    for k, shape in entry_.get("outputs", {}).items():
        print(f"  {k}: {tuple(shape)}")


def _bench(net, kind: str, payload, n: int, as_json: bool, progress_ok: bool) -> dict | None:
    """Stage table (mean, p50, p99) and FPS; on the simulator the device column is the
    predicted time at the configured clock."""
    from ..runtime.images import preprocess

    names = ("preprocess", "pack", "sync", "device", "unpack", "cpu ops", "total")
    stages: dict[str, list[float]] = {k: [] for k in names}
    spec = net.inputs[0]
    progress = Progress(n, enabled=progress_ok)
    for _ in range(n):
        t0 = time.perf_counter()
        x = preprocess(payload, spec["shape"], spec["preprocess"], spec.get("layout", "NCHW")) \
            if kind == "image" else payload
        t1 = time.perf_counter()
        net.run(x)
        st = net.last_run
        host = st.total_us - sum(s.wall_us for s in st.segments)
        for key, val in (("preprocess", (t1 - t0) * 1e6), ("pack", st.pack_us),
                         ("sync", st.sync_us), ("device", st.device_us),
                         ("unpack", st.unpack_us), ("cpu ops", st.cpu_us),
                         ("total", (t1 - t0) * 1e6 + host + st.device_us)):
            stages[key].append(val)
        progress.step("bench")
    progress.close()
    rows = {k: {"mean": statistics.fmean(v), "p50": _pct(v, 50), "p99": _pct(v, 99)}
            for k, v in stages.items()}
    dev = rows["device"]["mean"]
    cpu = rows["total"]["mean"] - dev
    fps = 1e6 / rows["total"]["mean"]
    fps_pipe = 1e6 / max(cpu, dev, 1e-9)
    simulated = net.device.info().simulated
    if as_json:
        return {"stages": rows, "fps": fps, "fps_double_buffered": fps_pipe, "runs": n,
                "device_time": "predicted" if simulated else "measured"}
    print(f"{'stage':12s} {'mean us':>10s} {'p50 us':>10s} {'p99 us':>10s}")
    for k, r in rows.items():
        print(f"{k:12s} {r['mean']:10.1f} {r['p50']:10.1f} {r['p99']:10.1f}")
    note = (" (device time predicted by the simulator at "
            f"{net.device.info().conv_freq} MHz; host stages measured)") if simulated else ""
    print(f"{fps:.1f} FPS sequential, {fps_pipe:.1f} FPS with double buffering "
          f"(x{fps_pipe / fps:.2f}) over {n} runs{note}")
    return None


class Progress:
    """A one-line progress bar on a terminal (stderr); silent in pipes and with -q."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done = total, 0
        self.on = enabled and total > 1 and sys.stderr.isatty()
        self.t0 = time.perf_counter()

    def step(self, label: str = "") -> None:
        self.done += 1
        if self.on:
            width = 30
            fill = int(width * self.done / self.total)
            rate = self.done / max(time.perf_counter() - self.t0, 1e-9)
            sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {self.done}/{self.total}"
                             f" {rate:.1f}/s {label[-30:]:30s}")
            sys.stderr.flush()

    def close(self) -> None:
        if self.on:
            sys.stderr.write("\r" + " " * 80 + "\r")
            sys.stderr.flush()


PALETTE = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
                    [210, 245, 60], [250, 190, 212], [0, 128, 128], [220, 190, 255],
                    [170, 110, 40], [255, 250, 200], [128, 0, 0]], np.uint8)


def save_mask(path: str, classes: np.ndarray) -> None:
    """A colored PNG of a (H, W) class map, written atomically."""
    from PIL import Image

    from ..fsutil import atomic_write

    rgb = PALETTE[classes.astype(np.int64) % len(PALETTE)]
    atomic_write(path, lambda f: Image.fromarray(rgb).save(f, format="PNG"))


def write_trace(path: str, runs: list) -> None:
    """Chrome/Perfetto trace (JSON array format) of every run's stages and commands."""
    events = []
    offset = 0.0
    for name, st in runs:
        events.append({"name": f"run {name}", "ph": "X", "pid": 1, "tid": 0, "ts": offset,
                       "dur": st.total_us, "cat": "run"})
        for kind, label, start, dur, extra in st.events:
            tid = 2 if kind == "device" else 1
            events.append({"name": label, "cat": kind, "ph": "X", "pid": 1, "tid": tid,
                           "ts": offset + start, "dur": dur, "args": extra})
        offset += st.total_us + 10.0
    events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t, "args": {"name": n}}
               for t, n in ((0, "runs"), (1, "host"), (2, "device"))]
    from ..fsutil import atomic_write

    doc = json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}).encode()
    atomic_write(path, lambda f: f.write(doc))


def _first_input(net, jobs):
    from ..runtime.images import preprocess

    name, (kind, payload) = jobs[0]
    if kind == "image":
        spec = net.inputs[0]
        return preprocess(payload, spec["shape"], spec["preprocess"], spec.get("layout", "NCHW"))
    return payload


def _jsonable(v):
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return str(v)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk-run", main, argv)


if __name__ == "__main__":
    sys.exit(run())
