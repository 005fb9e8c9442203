"""``dvsdk eval net.bin DATASET``: accuracy over a dataset (top-1/top-5 or mIoU)."""

from __future__ import annotations

import argparse
import json
import sys

from . import Parser

EPILOG = """datasets:
  DIR/<class>/<image>          classification, one folder per class (names = the net's labels)
  DIR/images/ + DIR/masks/     segmentation, image and mask (class indices) with the same stem
  FILE.csv                     rows path,label (classification) or image,mask (segmentation)

examples:
  dvsdk eval digits.bin digits_test/
  dvsdk eval digits.bin test.csv --jobs 2 --confusion confusion.png
  dvsdk eval seg.bin voc/ --scheduler tcp://10.0.0.5:8786 --json
  dvsdk eval det.bin val/ --device socket://b1:7000 --device socket://b2:7000
"""


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
    p.add_argument("-f", "--force", action="store_true",
                   help="replace an existing --confusion file (never the net.bin or a file "
                        "of the dataset)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _progress(enabled: bool):
    def draw(done: int, total: int) -> None:
        width = 30
        fill = width * done // max(total, 1)
        sys.stderr.write(f"\r\x1b[K[{'#' * fill}{'.' * (width - fill)}] {done}/{total}")
        if done == total:
            sys.stderr.write("\r\x1b[K")
        sys.stderr.flush()
    return draw if enabled else None


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
    ds = open_dataset(args.dataset, labels, channels)
    _check_outputs(args, ds)
    tty = sys.stderr.isatty() and not args.quiet and not args.json
    result = evaluate(args.net, ds, devices=args.device, jobs=args.jobs,
                      scheduler=args.scheduler, output=args.output, progress=_progress(tty))
    if args.confusion:
        from ..qa.plots import confusion_image, save_png

        save_png(confusion_image(result.summary["confusion"], result.classes), args.confusion)
    if args.json:
        print(json.dumps(result.as_json(), indent=1))
    elif result.kind == CLASSIFY:
        _print_classification(result)
    else:
        _print_segmentation(result)
    for image, message in result.errors:
        print(f"dvsdk eval: {image}: {message}", file=sys.stderr)
    return 2 if result.errors else 0


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

    check_outputs({"--confusion": args.confusion}, inputs(), force=args.force)


def _print_classification(result) -> None:
    s = result.summary
    width = max([len(c) for c in result.classes] + [5])
    print(f"{'class':{width}s}  support  recall  precision")
    for name, row in zip(result.classes, s["per_class"]):
        if row["support"] or row["precision"] is not None:
            rec = "-" if row["recall"] is None else f"{row['recall']:.2%}"
            pre = "-" if row["precision"] is None else f"{row['precision']:.2%}"
            print(f"{name:{width}s}  {row['support']:7d}  {rec:>6s}  {pre:>9s}")
    print(f"top-1 {s['top1']:.2%}  top-5 {s['top5']:.2%}  on {s['samples']} images "
          f"({len(result.workers)} worker{'s' if len(result.workers) != 1 else ''})")


def _print_segmentation(result) -> None:
    s = result.summary
    width = max([len(c) for c in result.classes] + [5])
    print(f"{'class':{width}s}  IoU")
    for name, iou in zip(result.classes, s["iou"]):
        print(f"{name:{width}s}  {'-' if iou is None else f'{iou:.2%}'}")
    print(f"mIoU {s['miou']:.2%}  pixel accuracy {s['pixel_accuracy']:.2%}  on "
          f"{s['pixels']} pixels")
