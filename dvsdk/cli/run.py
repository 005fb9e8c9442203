"""``dvsdk-run net.bin image.png``: run a compiled network on images or tensors.

Each input runs on its own: one that cannot be read (a corrupt image) or whose outputs
are not finite is reported on stderr and in ``--json``, the others still run, and the
exit status says that something failed (that of the first failure).  A network compiled
for a batch of N (``dvsdk-compile --batch N``) runs the images N at a time
(:func:`.inputs.runs`); each still gets its own result, with its share of the device time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

from . import (
    EXIT_BAD_INPUT,
    EXIT_NONFINITE,
    Parser,
    entry,
    nonfinite,
    positive_float,
    positive_int,
)

EPILOG = """examples:
  dvsdk-run digits.bin seven.png                 classify one image (top-5 with labels)
  dvsdk-run digits.bin samples/ --json           a directory as a batch, JSON output
  dvsdk-run net.bin --input x.npy --save y.npz   raw tensors in and out
  dvsdk-run net.bin --input a=a.npy --input b=b.npy   a network with inputs a and b
  dvsdk-run net.bin --input feeds.npz            the same, arrays keyed by input name
  dvsdk-run net.bin --bench 50                   stage timings and FPS on random input
  dvsdk-run net.bin img.png -t 10                the same for 10 seconds, on img.png
  dvsdk-run net.bin --selftest                   the golden pair stored in net.bin
  dvsdk-run net.bin img.png --profile            per-command cycles and MAC utilization
  dvsdk-run seg.bin street.png --save-mask m.png per-pixel classes as a colored PNG
  dvsdk-run yolo.bin photo.png --json            boxes of a net compiled with --task detect
  DVSDK_DEVICE=uio:// dvsdk-run net.bin img.png  on the board (default: the simulator)
  dvsdk-run yolo.bin clip.mp4 --save-annotated out.mp4 --json   a video, one line a frame
  dvsdk-run yolo.bin /dev/video0 --show          a camera onto the framebuffer /dev/fb0
  dvsdk-run yolo.bin /dev/video0 --serve 8080    live preview at http://127.0.0.1:8080/

exit status:
  0 all ran, 1 internal error, 2 bad input (an argument, or an input that could not be
  read: the others still run), 3 device problem, 4 a run produced non-finite outputs
  (NaN or inf: values beyond FP16's +-65504 on the device; check the input scaling the
  net.bin was compiled with)
"""


def build_parser() -> Parser:
    p = Parser(prog="dvsdk-run", epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Run a compiled network (net.bin) on the DV700.")
    p.add_argument("net", help="compiled network (net.bin)")
    p.add_argument("images", nargs="*", help="image files or directories (a batch)")
    p.add_argument("--input", action="append", default=[], metavar="[NAME=]X.npy|X.npz",
                   help="raw input tensor (the model's own layout): X.npy for a single-input "
                        "network, NAME=X.npy per input, or an .npz keyed by input name; "
                        "repeatable")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("-k", "--top-k", type=positive_int, default=5, help="classes to show")
    p.add_argument("--timeout", type=positive_float, default=10.0,
                   help="seconds to wait per run")
    p.add_argument("--json", action="store_true", help="machine-readable results")
    p.add_argument("--save", metavar="OUT.npz", help="save every output")
    p.add_argument("--record", metavar="RUN.dvrec",
                   help="record every kick (commands, stream, inputs, outputs, timing) for "
                        "dvsdk replay")
    p.add_argument("--bench", type=positive_int, metavar="N",
                   help="time N runs per stage (random input if none is given)")
    p.add_argument("-t", "--time", type=positive_float, metavar="SECONDS",
                   help="benchmark for SECONDS (with --bench: whichever limit comes first)")
    p.add_argument("--selftest", action="store_true", help="run the stored golden pair")
    p.add_argument("--profile", action="store_true", help="per-command cycles, MACs, bytes")
    p.add_argument("--trace", metavar="OUT.json", help="Chrome/Perfetto trace of the runs")
    p.add_argument("--save-mask", metavar="MASK.png",
                   help="segmentation: save the per-pixel class map as a colored PNG")
    p.add_argument("--ipu", action="store_true",
                   help="resize and convert the image on the device's IPU")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace existing output files (--save, --trace, --record, "
                        "--save-mask); an input is never replaced")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("-v", "--verbose", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_version()
    from . import stream

    stream.add_arguments(p)   # video, camera and annotated output: dvsdk/cli/stream.py
    return p


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
    args = build_parser().parse_intermixed_args(argv)  # images may follow options
    # Overflowing values are reported per input (exit 4), never as numpy warnings.
    with np.errstate(all="ignore"):
        return _main(args)


def _check_outputs(args) -> None:
    """No output flag may name an input (the net.bin, an image, an --input file), a
    directory, another output's file, or an existing file without --force."""
    from pathlib import Path

    from ..fsutil import check_outputs
    from ..runtime.images import IMAGE_SUFFIXES

    def inputs():
        yield "the net.bin", args.net
        for item in args.images:
            p = Path(item)
            if p.is_dir():
                yield from (("an input image", q) for q in p.iterdir()
                            if q.suffix.lower() in IMAGE_SUFFIXES)
            else:
                yield "an input image", p
        for item in args.input:
            name, sep, path = item.partition("=")
            yield "an --input file", path if sep and not Path(item).exists() else item

    check_outputs({"--save": args.save, "--trace": args.trace, "--record": args.record,
                   "--save-mask": args.save_mask}, inputs(), force=args.force)


def _main(args) -> int:
    from . import stream

    if stream.wanted(args):   # a video, a camera, or annotated output: the frame pipeline
        return stream.main(args)
    _check_outputs(args)
    if not args.record:
        return _run(args, args.device)
    from ..driver.device import open_device
    from ..errors import RecordError
    from ..fsutil import remove_stale_temp_files
    from ..qa.record import Recorder

    # a recording whose writer was killed (SIGKILL) mid-save left a temporary file beside it
    remove_stale_temp_files(args.record)
    with open_device(args.device) as dev:
        recorder = Recorder().attach(dev)
        # a run that fails raises past this: nothing is saved, an existing file stays
        status = _run(args, dev)
        if not recorder.execs:
            raise RecordError("the run made no kick: nothing to record", field="--record",
                              value=args.record, limit="at least one kick",
                              hint="an existing recording there is left as it was")
        recorder.save(args.record)   # atomic: the old file until the new one is whole
        if not args.quiet and not args.json:
            print(f"recorded {len(recorder.execs)} kicks to {args.record}", file=sys.stderr)
        return status


def _run(args, device) -> int:
    from ..errors import ImageError, InvalidArgument
    from ..runtime.net import load
    from .inputs import check_image_input, image_jobs, random_job, runs, tensor_jobs
    from .term import Console

    if not os.path.exists(args.net):
        raise InvalidArgument("net.bin not found", field="net", value=args.net)
    benching = args.bench is not None or args.time is not None
    with load(args.net, device) as net:
        if args.selftest:
            res = net.selftest()
            if args.json:
                print(json.dumps(res))
            else:
                print(f"selftest {'PASS' if res['passed'] else 'FAIL'}: max error "
                      f"{res['max_abs_error']:.3g} (tolerance "
                      f"{max(res['tolerance'].values()):.3g})")
            return 0 if res["passed"] else 1
        jobs = image_jobs(args.images)
        if jobs:
            check_image_input(net)
        if args.input and args.ipu:
            raise InvalidArgument("--ipu needs an image input", field="--ipu")
        jobs += tensor_jobs(net, args.input)
        if not jobs and not benching and not args.profile:
            raise InvalidArgument("give an image, a directory, --input X.npy, --bench N or "
                                  "--selftest", field="inputs", value=None)
        chatty = not args.quiet and not args.json
        head = None
        if net.meta.get("task") is not None:
            from ..tasks import head_for

            head = head_for(net)
        console = Console("dvsdk-run", len(jobs), bar=chatty)
        results: list[dict] = []
        report: dict = {"results": results}
        saved: dict[str, np.ndarray] = {}
        traces: list = []
        status = 0
        last = 0
        for job, outs, st, (index, n) in runs(net, jobs, args.timeout, args.ipu):
            if isinstance(outs, ImageError):  # this input only: report it and go on
                console.step(job.name)
                console.error(str(outs))
                results.append({"input": job.name, "error": str(outs),
                                "exit_code": EXIT_BAD_INPUT})
                status = status or EXIT_BAD_INPUT
                continue
            if index == 0:
                traces.append((job.name, st))
            last = index
            console.step(job.name)
            # one run of a batch-N net ran N images: a share of its device time each (the
            # board's prediction is the whole run's)
            item = {"input": job.name, "device_us": st.device_us / n, "cycles": st.cycles // n,
                    "wall_us": st.total_us / n, "board": st.board.as_dict()}
            if n > 1:
                item["batch"] = n
            bad = nonfinite(outs)
            if bad is not None:
                item.update(error=bad, exit_code=EXIT_NONFINITE,
                            outputs={k: list(v.shape) for k, v in outs.items()})
                console.error(f"{job.name}: {bad}")
                status = status or EXIT_NONFINITE
            else:
                top = _classification(net, outs, args.top_k)
                if top is not None:
                    item["top"] = top
                else:
                    item["outputs"] = {k: list(v.shape) for k, v in outs.items()}
                if head is not None and job.size is not None:
                    item["result"] = task_result(net, head, outs, job.size).to_json()
                    item.pop("top", None)
                    item.pop("outputs", None)
                if chatty:
                    _print_result(console, item, args.verbose, st)
            results.append(item)
            for k, v in outs.items():
                saved[k if len(jobs) == 1 else f"{job.stem}/{k}"] = v
        console.close()
        if args.save_mask and traces:
            maps = net.class_map()
            save_mask(args.save_mask, maps if maps.ndim == 2 else maps[last])
            if chatty:
                print(f"saved class map to {args.save_mask}")
        if args.save and saved:
            _save_npz(args.save, saved)
        profile_rows = None
        if args.profile or args.trace:
            from ..runtime.profile import default_input
            from .inputs import preprocessed

            ok = [j for j in jobs if any(t[0] == j.name for t in traces)]
            x0 = preprocessed(net, ok[0]) if ok else default_input(net)
            profile_rows = net.profile(x0)
        if args.profile:
            from ..runtime.profile import format_profile

            # the board's prediction is that of a normal run of the profiled input
            run = dict(traces)[ok[0].name] if ok else None
            if run is None:
                net.run(x0, timeout=args.timeout)
                run = net.last_run
            info = net.device.info()
            if args.json:
                report["profile"] = profile_rows
                report["board"] = run.board.as_dict()
            else:
                print(format_profile(profile_rows, info.mac_num, run, info.conv_freq))
        if benching:
            from .bench import bench, format_bench

            ok = [j for j in jobs if any(t[0] == j.name for t in traces)]
            job = ok[0] if ok else random_job(net)
            console.restart(args.bench or 0, bar=chatty)
            res, bench_stats = bench(net, job, args.bench, args.time, console)
            console.close()
            if not traces:
                traces = [(f"{job.name} {i}", s) for i, s in enumerate(bench_stats)]
            if args.json:
                report["bench"] = res
            else:  # -q silences the per-input results, not what --bench was asked for
                print(format_bench(res))
        if args.trace:
            from .trace import write_trace

            write_trace(args.trace, traces, profile_rows, net.device.info().simulated)
        if args.json:
            print(json.dumps(report, default=_jsonable))
    return status


def _save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    from ..fsutil import atomic_write

    atomic_write(path, lambda f: np.savez(f, **{k.replace("/", "__"): v
                                                for k, v in arrays.items()}))


def _print_result(console, item: dict, verbose: bool = False, stats=None) -> None:
    each = f" per image, {item['batch']} a run" if item.get("batch") else ""
    lines = [f"{item['input']}:  (device {item['device_us']:.0f} us{each})"]
    if verbose and stats is not None:
        for seg in stats.segments:
            lines.append(f"    {seg.name}: {seg.commands} commands, {seg.device_us:.1f} us "
                         f"device, {seg.cycles} cycles")
        lines.append(f"    cpu ops {stats.cpu_us:.0f} us, pack {stats.pack_us:.0f} us, sync "
                     f"{stats.sync_us:.0f} us, unpack {stats.unpack_us:.0f} us (measured)")
        lines.append(f"    on the board, predicted: {stats.board.summary()}")
    for t in item.get("top", []):
        lines.append(f"  {t['probability']:7.2%}  {t['label']}")
    if "result" in item:
        lines += ["  " + ln for ln in result_summary(item["result"]).splitlines()]
    for k, shape in item.get("outputs", {}).items():
        lines.append(f"  {k}: {tuple(shape)}")
    console.say("\n".join(lines))


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


def task_result(net, head, outs: dict, size: tuple[int, int]):
    """The task head's result of one image's outputs; a segmenter's class map from the
    maximizer when these are the outputs of the net's last run (:mod:`dvsdk.tasks.heads`)."""
    ctx = head.geometry(*size)
    if head.kind == "segment" and outs is getattr(net, "_last_result", None) \
            and head.output_names[0] == net.outputs[0]["name"]:
        from ..errors import InvalidArgument

        try:
            return head.finish(outs, ctx, net.class_map(head.output_names[0]))
        except InvalidArgument:
            pass
    return head.finish(outs, ctx)


def result_summary(res: dict) -> str:
    """A few human lines of a result's JSON (:mod:`dvsdk.tasks.results`)."""
    kind = res.get("kind")
    if kind == "classify":
        return "\n".join(f"{t['score']:7.2%}  {t['label']}" for t in res["top"])
    if kind == "detect":
        d = res["detections"]
        return "\n".join([f"{len(d)} detection{'s' if len(d) != 1 else ''}"] + [
            f"{x['score']:5.2f}  {x['label']:16s} [{', '.join(f'{v:.0f}' for v in x['box'])}]"
            for x in d])
    if kind == "segment":
        total = max(1, res["height"] * res["width"])
        return ", ".join(f"{c['label']} {c['pixels'] / total:.1%}" for c in res["classes"][:8])
    if kind == "ocr":
        return f"{res['text']!r} (score {res['score']:.2f})"
    return json.dumps(res)


def _jsonable(v):
    if isinstance(v, (np.integer, np.floating)):
        return v.item()
    if isinstance(v, tuple):
        return list(v)
    return str(v)


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk-run", main, argv)


if __name__ == "__main__":
    sys.exit(run())
