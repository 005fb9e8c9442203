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
    p.add_argument("--json", action="store_true", help="machine-readable results")
    p.add_argument("--save", metavar="OUT.npz", help="save every output")
    p.add_argument("--bench", type=int, metavar="N", help="time N runs per stage")
    p.add_argument("--selftest", action="store_true", help="run the stored golden pair")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _collect_images(items: list[str]) -> list[Path]:
    from ..errors import ImageError
    from ..images import IMAGE_SUFFIXES

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
    from ..runtime import load

    args = build_parser().parse_args(argv)
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
        results, saved = [], {}
        for name, (kind, payload) in jobs:
            outs = net.run_image(payload) if kind == "image" else net.run(payload)
            entry_ = {"input": name, "device_us": net.last_run.device_us,
                      "cycles": net.last_run.cycles}
            top = _classification(net, outs, args.top_k)
            if top is not None:
                entry_["top"] = top
            else:
                entry_["outputs"] = {k: list(v.shape) for k, v in outs.items()}
            results.append(entry_)
            for k, v in outs.items():
                saved[k if len(jobs) == 1 else f"{Path(name).stem}/{k}"] = v
            if not args.json and not args.quiet:
                _print_result(entry_)
        if args.save:
            _save_npz(args.save, saved)
        if args.bench:
            name, (kind, payload) = jobs[0]
            _bench(net, kind, payload, args.bench, args.json)
        if args.json:
            print(json.dumps({"results": results}, indent=None))
    return 0


def _load_npy(path: str) -> np.ndarray:
    from ..errors import InvalidArgument

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"cannot read tensor: {e}", field="input", value=path) from None


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    import tempfile

    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".npz",
                               dir=target.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **{k.replace("/", "__"): v for k, v in arrays.items()})
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _print_result(entry_: dict) -> None:
    print(f"{entry_['input']}:  (device {entry_['device_us']:.0f} us)")
    for t in entry_.get("top", []):
        print(f"  {t['probability']:7.2%}  {t['label']}")
    for k, shape in entry_.get("outputs", {}).items():
        print(f"  {k}: {tuple(shape)}")


def _bench(net, kind: str, payload, n: int, as_json: bool) -> None:
    stages: dict[str, list[float]] = {k: [] for k in ("preprocess", "pack", "device",
                                                       "unpack", "cpu ops", "total")}
    from ..images import preprocess

    spec = net.inputs[0]
    for _ in range(n):
        t0 = time.perf_counter()
        x = preprocess(payload, spec["shape"], spec["preprocess"]) if kind == "image" \
            else payload
        t1 = time.perf_counter()
        net.run(x)
        st = net.last_run
        stages["preprocess"].append((t1 - t0) * 1e6)
        stages["pack"].append(st.pack_us)
        stages["device"].append(st.device_us)
        stages["unpack"].append(st.unpack_us)
        stages["cpu ops"].append(st.cpu_us)
        stages["total"].append((t1 - t0) * 1e6 + st.total_us)
    rows = {k: {"mean": statistics.fmean(v), "p50": _pct(v, 50), "p99": _pct(v, 99)}
            for k, v in stages.items()}
    fps = 1e6 / rows["total"]["mean"]
    if as_json:
        print(json.dumps({"bench": rows, "fps": fps, "runs": n}))
        return
    print(f"{'stage':12s} {'mean us':>10s} {'p50 us':>10s} {'p99 us':>10s}")
    for k, r in rows.items():
        print(f"{k:12s} {r['mean']:10.1f} {r['p50']:10.1f} {r['p99']:10.1f}")
    sim = " (device time predicted by the simulator)" if net.device.info().simulated else ""
    print(f"{fps:.1f} FPS over {n} runs{sim}")


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk-run", main, argv)


if __name__ == "__main__":
    sys.exit(run())
