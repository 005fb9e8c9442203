"""``dvsdk-compile model.onnx -o net.bin``: a model to a self-describing net.bin.

The output defaults to the model's name with ``.bin``; an existing file is never replaced
unless ``--force`` says so (the default name beside a shipped model would otherwise
overwrite a net.bin compiled with other preprocessing and labels).
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

from . import Parser, entry, nonzero_number, parse_floats, parse_hw, positive_int

EPILOG = """examples:
  dvsdk-compile mobilenet.onnx -o mobilenet.bin --mean 123.7,116.3,103.5 --std 58.4,57.1,57.4
  dvsdk-compile detector.onnx -o det.bin --input-size 288x576 --quantize --report
  dvsdk-compile digits.onnx -o digits.bin --labels digits_labels.txt --scale 1/255
  dvsdk-compile classifier.onnx -o classifier4.bin --batch 4   net.run takes 4 images
  dvsdk-compile yolov8n.onnx --task detect --labels coco.txt --letterbox --scale 1/255
  dvsdk-compile crnn.onnx --task ocr --chars chars.txt

numbers may be written as fractions: --scale 1/255, --mean 255/2
an existing output file is replaced only with --force
"""


def build_parser() -> Parser:
    import argparse

    p = Parser(prog="dvsdk-compile", epilog=EPILOG,
               formatter_class=argparse.RawDescriptionHelpFormatter,
               description="Compile a model for the DMP DV700.")
    p.add_argument("model", help="model file or directory (the format from its name)")
    p.add_argument("--format", help="the model format, if its name does not say it")
    p.add_argument("-o", "--output",
                   help="net.bin to write (default: MODEL with .bin; never replaces an "
                        "existing file without --force)")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace the output file if it exists")
    p.add_argument("--quantize", action="store_true", help="8-bit weight tables (k-means)")
    p.add_argument("--quantize-skip", metavar="LAYER,...", default="",
                   help="with --quantize: keep these layers' weights FP16 (names as in "
                        "--report; see dvsdk analyze --quantize-candidates)")
    p.add_argument("--transpose", action="store_true", help="DHWC input layout")
    p.add_argument("--input-size", metavar="HxW", help="fix free spatial dimensions")
    p.add_argument("--batch", type=positive_int, metavar="N", default=None,
                   help="samples per run: every input's batch dimension (1 or free) set to "
                        "N, each DV700 command running N samples (default: the model's "
                        "own; free = 1)")
    p.add_argument("--mean", default="0", help="per-channel mean subtracted (R,G,B)")
    p.add_argument("--scale", type=nonzero_number, default=None,
                   help="multiply after the mean (e.g. 1/255)")
    p.add_argument("--std", default=None, help="per-channel std to divide by (R,G,B)")
    p.add_argument("--channel-order", choices=("RGB", "BGR"), default="RGB")
    p.add_argument("--resize", choices=("stretch", "letterbox", "crop"), default="stretch")
    p.add_argument("--resize-crop", nargs="?", const=0.875, type=float, metavar="RATIO",
                   default=None,
                   help="ImageNet-style preprocessing: scale so the input covers the image "
                        "at RATIO (default 0.875: the shorter side 256 for 224), then crop "
                        "the centre (the same as --resize crop)")
    p.add_argument("--labels", help="text file with one class label per line (as many as "
                                    "the model has classes)")
    p.add_argument("--ub-size", type=positive_int, default=524288, help="unified buffer bytes")
    p.add_argument("--hw-version", metavar="VERSION", default="",
                   help="the target's hardware version, HWMAJOR.HWMINOR.YYYYMMDD (or the "
                        "date): work it cannot do is split or left on the CPU; default: "
                        "the newest hardware")
    p.add_argument("--target", metavar="URL", default="",
                   help="read the hardware version from this device (dv://, uio://, sim://)")
    p.add_argument("--report", action="store_true", help="print where every op runs")
    p.add_argument("--no-golden", action="store_true", help="skip the self-test pair")
    p.add_argument("--no-chain", action="store_true",
                   help="one command per layer: keep every layer's output in DRAM instead of "
                        "chaining commands through the unified buffer (for dvsdk analyze)")
    p.add_argument("--no-tables", action="store_true",
                   help="keep element-wise tails such as SiLU's sigmoid and product as they "
                        "are instead of one CPU table lookup per tail (the same results)")
    p.add_argument("--fuse-adds", action="store_true",
                   help="schedule each conv just before the Add it feeds, so the add runs "
                        "inside the conv command (fewer commands and DRAM round trips; "
                        "one FP16 rounding instead of two, so results change within FP16 "
                        "tolerance)")
    add_task_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_version()
    return p


def add_task_arguments(p) -> None:
    """The task head flags (META ``task``, :mod:`dvsdk.tasks.spec`)."""
    from . import positive_int as _pos

    g = p.add_argument_group("task head (what dvsdk-run and net.run_image return)")
    g.add_argument("--task", choices=("classify", "detect", "segment", "ocr"),
                   help="record the post-processing: top-k labels, boxes after NMS, a class "
                        "map, CTC-decoded text")
    g.add_argument("--decoder", choices=("yolov8", "yolov11", "yolov5", "yolov3"),
                   help="detect: the YOLO head (default: from the output shapes)")
    g.add_argument("--conf", type=float, default=None, help="detect: lowest score kept (0.25)")
    g.add_argument("--iou", type=float, default=None, help="detect: NMS IoU threshold (0.45)")
    g.add_argument("--max-det", type=_pos, default=None, help="detect: most boxes kept (300)")
    g.add_argument("--anchors", metavar="W,H,...;W,H,...",
                   help="detect, yolov3: anchors per scale in input pixels, strides "
                        "ascending (default: YOLOv3's COCO anchors)")
    g.add_argument("--strides", metavar="S,S,...",
                   help="detect, yolov3: input pixels per grid cell of each scale (default: "
                        "input size / grid size)")
    g.add_argument("--chars", metavar="FILE",
                   help="ocr: the characters of classes 1.. (one a line; class 0 is the "
                        "CTC blank)")
    g.add_argument("--top-k", type=_pos, default=None, help="classify: classes reported (5)")
    g.add_argument("--letterbox", action="store_true",
                   help="the same as --resize letterbox (keep the aspect ratio, pad)")


def task_option(args) -> dict | None:
    """``--task`` and its flags as the ``task`` compile option (None without --task);
    flags that need --task are refused without it."""
    from ..errors import InvalidArgument

    extra = {"decoder": args.decoder, "conf": args.conf, "iou": args.iou,
             "max_det": args.max_det, "anchors": args.anchors, "chars": args.chars,
             "top_k": args.top_k}
    if args.strides:
        try:
            extra["strides"] = [int(v) for v in args.strides.split(",") if v.strip()]
        except ValueError:
            raise InvalidArgument("--strides must be integers S,S,...", field="--strides",
                                  value=args.strides) from None
    given = sorted(k for k, v in extra.items() if v is not None)
    if args.task is None:
        if given:
            raise InvalidArgument(f"--{given[0].replace('_', '-')} needs --task",
                                  field=f"--{given[0].replace('_', '-')}", value=None)
        return None
    return {"kind": args.task, **{k: v for k, v in extra.items() if v is not None}}


def default_output(model: Path) -> Path:
    """``MODEL`` with ``.bin`` for its format's suffix: ``m.onnx``, ``m.tar.gz``, ``m.nnef/``,
    ``m.xml`` → ``m.bin`` beside it."""
    from ..compiler.frontends import FRONTENDS

    name = model.name.rstrip("/")
    for suffix in sorted((s for fe in FRONTENDS.values() for s in fe.suffixes), key=len,
                         reverse=True):
        if name.lower().endswith(suffix) and len(name) > len(suffix):
            return model.with_name(name[: -len(suffix)] + ".bin")
    return model.with_name(name + ".bin") if model.is_dir() else model.with_suffix(".bin")


def _output_path(args) -> Path:
    """The net.bin to write: never one of the model's files or the labels file (symlinks
    and hard links count), a directory, or an existing file without --force."""
    from ..compiler.frontends import source_files
    from ..fsutil import check_outputs

    out = Path(args.output) if args.output else default_output(Path(args.model))
    inputs = source_files(args.model) + ([("the labels file", args.labels)]
                                         if args.labels else []) \
        + ([("the character file", args.chars)] if args.chars else [])
    check_outputs({"output": out}, inputs, force=args.force)
    return out


def main(argv: list[str]) -> int:
    from ..compiler.batch import BatchWarning
    from ..compiler.build import compile as compile_model
    from ..netfile import write

    args = build_parser().parse_args(argv)
    input_size = parse_hw(args.input_size) if args.input_size else None
    mean = parse_floats(args.mean, 3, "mean")
    std = parse_floats(args.std, 3, "std", nonzero=True) if args.std else None
    out = _output_path(args)
    t0 = time.perf_counter()
    tty = sys.stderr.isatty() and not args.quiet

    def progress(stage: str) -> None:  # one updating status line on a terminal only
        if tty:
            sys.stderr.write(f"\r\x1b[K[{time.perf_counter() - t0:5.1f}s] {stage}...")
            sys.stderr.flush()

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", BatchWarning)
            net = compile_model(
                args.model, None, quantize=args.quantize, transpose=args.transpose,
                quantize_skip=args.quantize_skip,
                input_size=input_size, batch=args.batch,
                mean=mean, scale=args.scale if args.scale is not None else 1.0, std=std,
                channel_order=args.channel_order,
                resize="letterbox" if args.letterbox else "crop" if args.resize_crop
                else args.resize, labels=args.labels,
                **({"crop_ratio": args.resize_crop} if args.resize_crop else {}),
                task=task_option(args),
                ub_size=args.ub_size, golden=not args.no_golden, format=args.format,
                hw_version=args.hw_version or _target_hw_date(args.target),
                chain=not args.no_chain, tables=not args.no_tables,
                fuse_adds=args.fuse_adds, progress=progress)
        for w in caught:  # the batch's CPU ops as one line; others as Python prints them
            if issubclass(w.category, BatchWarning):
                if tty:
                    sys.stderr.write("\r\x1b[K")
                print(f"dvsdk-compile: warning: {w.message}", file=sys.stderr)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
        meta = net.meta
        progress(f"writing {out}")
        write(net, out)
    finally:
        if tty:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
    if args.report:
        print_report(meta)
    if not args.quiet and meta.get("quantization"):
        q = meta["quantization"]
        worst = max(q, key=lambda r: r["rel_rms"])
        print(f"quantized {len(q)} layers to 8-bit tables: relative RMS error "
              f"{min(r['rel_rms'] for r in q):.2%}..{worst['rel_rms']:.2%} (worst "
              f"{worst['op']})")
    if not args.quiet:
        st = meta["stats"]
        print(f"wrote {out}: {st['hw_ops']} ops on the DV700 in {st['commands']} commands, "
              f"{st['cpu_ops']} on the CPU; weights {meta['weights']['size']} B, arena "
              f"{meta['arena']['size']} B; {time.perf_counter() - t0:.2f} s")
    return 0


def print_report(meta: dict) -> None:
    from ..netfile import program_shape

    report = meta["report"]
    width = max((len(r["op"]) for r in report), default=4)
    src = max((len(r.get("source", "")) for r in report), default=0)
    head = f"{'source layer':{src}s}  " if src else ""
    print(f"{head}{'op':{width}s}  {'type':18s} where  detail")
    for r in report:
        lead = f"{r.get('source', ''):{src}s}  " if src else ""
        print(f"{lead}{r['op']:{width}s}  {r['type']:18s} {r['where']:5s}  {r['detail']}")
    batches = sorted({d["device"].get("batch", 1) for d in meta["tensors"].values()
                      if d.get("device")})
    each = (f"; the DV700 runs {', '.join(map(str, batches))} samples a command "
            "(input_circular_offset)" if batches and batches != [1] else "")
    print(f"program: {program_shape(meta)}{each}")



def _target_hw_date(url: str) -> int:
    """The hardware date a device reports (``DeviceInfo.hw_date``; 0 if it cannot tell)."""
    if not url:
        return 0
    from ..driver.device import open_device

    with open_device(url) as dev:
        return int(dev.info().hw_date)

def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk-compile", main, argv)


if __name__ == "__main__":
    sys.exit(run())
