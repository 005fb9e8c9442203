"""``dvsdk eval net.bin DATASET``: accuracy over a dataset (top-1/top-5 or mIoU)."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import TextIO

from . import Parser

EPILOG = """datasets:
  DIR/<class>/<image>          classification, one folder per class (names = the net's labels)
  DIR/images/ + DIR/masks/     segmentation, image and mask (class indices) with the same stem
  FILE.csv                     rows path,label (classification) or image,mask (segmentation)
  instances.json               COCO detection ground truth (a net compiled with --task detect)
  DIR/Annotations/*.xml        Pascal VOC detection ground truth (--task detect)
  FILE.txt                     lines image<TAB>text (a net compiled with --task ocr)

examples:
  dvsdk eval digits.bin digits_test/
  dvsdk eval digits.bin test.csv --jobs 2 --confusion confusion.png
  dvsdk eval seg.bin voc/ --scheduler tcp://10.0.0.5:8786 --json
  dvsdk eval cls.bin val/ --device socket://b1:7000 --device socket://b2:7000
  dvsdk eval cls.bin val/ --top-k 3 --expect top1>=0.9 --expect failed<=0
  dvsdk eval cls.bin val/ --jobs 2 --resume run.jsonl     (again after a kill: continues)
  dvsdk eval det.bin coco/instances_val.json --expect map50>=0.5
  dvsdk eval ocr.bin words/labels.txt --expect char_accuracy>=0.95

Faults: a lost --jobs process or Dask worker has its images resubmitted; a --device that
fails --max-failures times in a row leaves the rotation (one warning) and its images run
on the others; an image that cannot be scored (undecodable, over the pixel limit, lost
--max-failures times) is listed as failed with its reason. The report gives scored/total
and accuracy over the scored images; exit 2 when any image failed (unless an --expect on
"failed" judges it).

--expect METRIC>=VALUE or METRIC<=VALUE (repeatable): after the report, exit 6 when any is
missed (one line each), 0 when all are met. Metrics: top1, top<k>, samples, failed, scored,
images (classification); miou, pixel_accuracy, pixels, failed, scored, images
(segmentation); map (mAP@[.5:.95]), map50, map75, objects, detections, failed, scored,
images (detection); char_accuracy, cer, word_accuracy, failed, scored, images (ocr).
"""

#: exit status when an --expect floor or ceiling is missed
EXIT_EXPECT = 6


def build_parser() -> Parser:
    p = Parser(prog="dvsdk eval", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Evaluate a net.bin on a dataset.")
    p.add_argument("net", help="the net.bin")
    p.add_argument("dataset", help="a folder or a .csv (see below)")
    p.add_argument("--device", action="append", default=[], metavar="URL",
                   help="device URL; repeat for a board farm (one worker per device)")
    p.add_argument("--jobs", type=int, default=1, help="local simulator processes")
    p.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="a Dask cluster")
    p.add_argument("--output", help="which net output holds the scores (default: the first)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--confusion", metavar="PNG", help="write the confusion matrix image")
    p.add_argument("--confusion-top", type=_positive, default=30, metavar="N",
                   help="with more than N classes, --confusion shows the N most confused "
                        "(default 30)")
    p.add_argument("--per-image", metavar="FILE",
                   help="each image's result (path, label, prediction, top-k and scores, "
                        "device us, or its error) as .jsonl or .csv, written as images "
                        "complete (a killed run leaves the completed ones: see --resume)")
    p.add_argument("--resume", metavar="FILE",
                   help="continue from a per-image log (.jsonl or .csv, as --per-image "
                        "writes it): images scored there are not run again; the log goes "
                        "on being written to FILE (or to --per-image)")
    p.add_argument("--max-failures", type=int, default=3, metavar="N",
                   help="a device failing N times in a row leaves the rotation; an image "
                        "lost N times fails (default 3)")
    p.add_argument("--worker-timeout", type=float, default=120.0, metavar="S",
                   help="with --scheduler: give up after S seconds without any Dask "
                        "worker; the remaining images fail (default 120)")
    p.add_argument("--top-k", type=int, default=5, metavar="K",
                   help="report top-1 and top-K accuracy (default 5)")
    p.add_argument("--expect", action="append", default=[], metavar="METRIC>=VALUE",
                   type=_expectation, help="a floor (>=) or ceiling (<=) a metric must meet; "
                   f"exit {EXIT_EXPECT} when one is missed (repeatable)")
    p.add_argument("--resize-crop", nargs="?", const=0.875, type=float, metavar="RATIO",
                   default=None,
                   help="evaluate with ImageNet-style preprocessing instead of the net's "
                        "recorded resize: scale so the input covers the image at RATIO "
                        "(default 0.875: 256 for 224), crop the centre")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace an existing --confusion or --per-image file (never the "
                        "net.bin or a file of the dataset)")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress (a bar with rate and ETA on a terminal, otherwise a "
                        "line every 10 s)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _eta(seconds: float) -> str:
    m, sec = divmod(int(round(seconds)), 60)
    return f"{m // 60}h{m % 60:02d}m" if m >= 60 else f"{m}m{sec:02d}s" if m else f"{sec}s"


def _progress(mode: str, clock: Callable[[], float] = time.monotonic, every: float = 10.0,
              stream: TextIO | None = None) -> Callable[[int, int], None] | None:
    """The progress of a run: ``"bar"`` redraws one line on a terminal, ``"lines"`` writes a
    line every ``every`` seconds (a log, a CI job), ``"off"`` nothing; each with the rate
    and the time left at that rate."""
    if mode == "off":
        return None
    t0 = clock()
    last = [t0]

    def draw(done: int, total: int) -> None:
        out = stream or sys.stderr
        now = clock()
        rate = done / max(now - t0, 1e-9)
        left = f"ETA {_eta((total - done) / rate)}" if rate > 0 and done < total else ""
        if mode == "bar":
            width = 30
            fill = width * done // max(total, 1)
            out.write(f"\r\x1b[K[{'#' * fill}{'.' * (width - fill)}] {done}/{total} "
                      f"{rate:.1f}/s {left}")
            if done == total:
                out.write("\r\x1b[K")
        elif now - last[0] >= every and done < total:
            last[0] = now
            out.write(f"dvsdk eval: {done}/{total} images, {rate:.1f}/s, {left}\n")
        out.flush()
    return draw


def main(argv: list[str]) -> int:
    from ..netfile import read
    from ..qa.dataset import CLASSIFY, open_dataset
    from ..qa.evaluate import evaluate

    args = build_parser().parse_args(argv)
    net = read(args.net)
    labels = net.meta.get("labels")
    outputs = net.meta["outputs"]
    channels = None
    for o in outputs:
        if args.output in (None, o["name"]) and len(o["shape"]) == 4:
            channels = o["shape"][1]
            break
    from ..qa.task_datasets import open_task_dataset

    ds = open_task_dataset(args.dataset, net.meta) or open_dataset(args.dataset, labels,
                                                                    channels)
    if args.confusion and ds.kind not in ("classify", "segment"):
        from ..errors import InvalidArgument

        raise InvalidArgument("--confusion is for classification and segmentation",
                              field="confusion", value=ds.kind)
    _check_outputs(args, ds)
    mode = "off" if args.quiet or args.json else "bar" if sys.stderr.isatty() else "lines"
    done = {}
    if args.resume:
        from ..qa.evallog import read_log

        done = read_log(args.resume, ds, args.top_k)
    bar = mode == "bar"

    def warn(text: str) -> None:
        print(f"{chr(13) + chr(27) + '[K' if bar else ''}dvsdk eval: warning: {text}",
              file=sys.stderr, flush=True)

    source = args.net if args.resize_crop is None else _with_crop(net, args.resize_crop)
    result = evaluate(source, ds, devices=args.device, jobs=args.jobs,
                      scheduler=args.scheduler, output=args.output, top=args.top_k,
                      progress=_progress(mode), max_failures=args.max_failures,
                      worker_timeout=args.worker_timeout, done=done,
                      log=args.per_image or args.resume, warn=warn)
    if args.confusion:
        from ..qa.plots import save_confusion

        save_confusion(result.summary["confusion"], result.classes, args.confusion,
                       args.confusion_top)
    if args.json:
        print(json.dumps(result.as_json(), indent=1))
    elif result.kind in ("detect", "ocr"):
        from ..qa.eval_tasks import print_report

        print_report(result)
    elif result.kind == CLASSIFY:
        _print_classification(result)
    else:
        _print_segmentation(result)
    _print_failures(result.errors)
    missed = _missed(args.expect, result)
    for line in missed:
        print(f"dvsdk eval: {line}", file=sys.stderr)
    judged = any(name == "failed" for name, _, _ in args.expect)
    return EXIT_EXPECT if missed else 2 if result.errors and not judged else 0


#: failed images listed one a line; beyond, a count per reason
SHOW_FAILURES = 20


def _print_failures(errors: list[tuple[str, str]]) -> None:
    from collections import Counter

    for image, message in errors[:SHOW_FAILURES]:
        print(f"dvsdk eval: {image}: {message}", file=sys.stderr)
    if len(errors) > SHOW_FAILURES:
        rest = Counter(m for _, m in errors[SHOW_FAILURES:])
        for message, count in rest.most_common(5):
            print(f"dvsdk eval: ... {count} more: {message}", file=sys.stderr)
        if len(rest) > 5:
            print(f"dvsdk eval: ... {sum(rest.values()) - sum(c for _, c in rest.most_common(5))}"
                  " more (see --per-image)", file=sys.stderr)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 200:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number in 1..200")
    return value


def _with_crop(net, ratio: float) -> bytes:
    """The net.bin's bytes with every image input's resize set to ``crop`` at ``ratio``
    (``--resize-crop``; the file itself is left as it is)."""
    from ..errors import InvalidArgument
    from ..netfile import encode

    if not 0 < ratio <= 1:
        raise InvalidArgument("--resize-crop RATIO must be in (0, 1]", field="resize_crop",
                              value=ratio, limit="(0, 1]")
    for spec in net.meta["inputs"]:
        pre = dict(spec.get("preprocess") or {})
        pre.update(resize="crop", crop_ratio=float(ratio))
        spec["preprocess"] = pre
    return encode(net)


def _expectation(text: str) -> tuple[str, str, float]:
    """``METRIC>=VALUE`` / ``METRIC<=VALUE`` as (metric, op, value)."""
    for op in (">=", "<="):
        name, sep, value = text.partition(op)
        if sep:
            try:
                number = float(value)
            except ValueError:
                break
            if not math.isfinite(number):   # nan: every comparison fails; inf: meaningless
                raise argparse.ArgumentTypeError(f"{text!r}: the value must be a finite "
                                                 "number")
            return name.strip(), op, number
    raise argparse.ArgumentTypeError(f"{text!r} is not METRIC>=VALUE or METRIC<=VALUE")


def _missed(expect: list[tuple[str, str, float]], result) -> list[str]:
    """The expectations ``result`` does not meet, as lines; a metric the report does not
    have is an InvalidArgument naming the ones it has."""
    from ..errors import InvalidArgument

    values = {k: float(v) for k, v in result.summary.items()
              if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out = []
    for name, op, bound in expect:
        if name not in values:
            raise InvalidArgument("--expect names a metric the report does not have",
                                  field="expect", value=name, limit=sorted(values))
        got = values[name]
        if not (got >= bound if op == ">=" else got <= bound):
            out.append(f"expected {name}{op}{bound:g}, got {got:.6g}")
    return out


def _check_outputs(args, ds) -> None:
    """--confusion never names the net.bin, the dataset's CSV or one of its images or masks
    (nor a directory, nor an existing file without --force)."""
    from ..fsutil import check_outputs

    def inputs():
        yield "the net.bin", args.net
        yield "the dataset", args.dataset
        for s in ds.samples:
            yield "an image of the dataset", s.image
            if s.mask:
                yield "a mask of the dataset", s.mask

    import os

    from ..errors import InvalidArgument

    log = args.per_image or args.resume
    continued = args.resume and os.path.abspath(log) == os.path.abspath(args.resume)
    check_outputs({"--confusion": args.confusion,
                   "--per-image": None if continued else args.per_image}, inputs(),
                  force=args.force)
    for flag, path in (("--per-image", args.per_image), ("--resume", args.resume)):
        if path and not path.lower().endswith((".jsonl", ".csv")):
            raise InvalidArgument(f"{flag} writes .jsonl or .csv", field=flag[2:].replace(
                "-", "_"), value=path, limit=[".jsonl", ".csv"])


def _print_classification(result) -> None:
    s = result.summary
    width = max([len(c) for c in result.classes] + [5])
    print(f"{'class':{width}s}  support  recall  precision")
    for name, row in zip(result.classes, s["per_class"]):
        if row["support"] or row["precision"] is not None:
            rec = "-" if row["recall"] is None else f"{row['recall']:.2%}"
            pre = "-" if row["precision"] is None else f"{row['precision']:.2%}"
            print(f"{name:{width}s}  {row['support']:7d}  {rec:>6s}  {pre:>9s}")
    k = next((key for key in s if key.startswith("top") and key != "top1"), "top1")
    workers = f"{len(result.workers)} worker{'s' if len(result.workers) != 1 else ''}"
    top1, topk = (f"{s['top1']:.2%}", f"{s[k]:.2%}") if s["scored"] else ("-", "-")
    print(f"top-1 {top1}  top-{k[3:]} {topk}  {_denominator(s, workers)}")


def _denominator(s: dict, more: str = "") -> str:
    """``on 40 images (40/42 scored, 2 failed: accuracy is over the scored; 2 workers)``."""
    failed = f", {s['failed']} failed: accuracy is over the scored" if s["failed"] else ""
    return (f"on {s['scored']} images ({s['scored']}/{s['images']} scored{failed}"
            f"{'; ' + more if more else ''})")


def _print_segmentation(result) -> None:
    s = result.summary
    width = max([len(c) for c in result.classes] + [5])
    print(f"{'class':{width}s}  IoU")
    for name, iou in zip(result.classes, s["iou"]):
        print(f"{name:{width}s}  {'-' if iou is None else f'{iou:.2%}'}")
    print(f"mIoU {s['miou']:.2%}  pixel accuracy {s['pixel_accuracy']:.2%}  on "
          f"{s['pixels']} pixels of {_denominator(s)[3:]}")
