"""``dvsdk-compile model.onnx -o net.bin``: a model to a self-describing net.bin."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import entry, parse_floats, parse_hw

EPILOG = """examples:
  dvsdk-compile mobilenet.onnx -o mobilenet.bin --mean 123.7,116.3,103.5 --std 58.4,57.1,57.4
  dvsdk-compile detector.onnx -o det.bin --input-size 288x576 --quantize --report
  dvsdk-compile digits.onnx -o digits.bin --labels labels.txt --scale 0.0625
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dvsdk-compile", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Compile a model for the DMP DV700.")
    p.add_argument("model", help="model file or directory (the format from its name)")
    p.add_argument("--format", help="the model format, if its name does not say it")
    p.add_argument("-o", "--output", help="net.bin to write (default: MODEL with .bin)")
    p.add_argument("--quantize", action="store_true", help="8-bit weight tables (k-means)")
    p.add_argument("--transpose", action="store_true", help="DHWC input layout")
    p.add_argument("--input-size", metavar="HxW", help="fix free spatial dimensions")
    p.add_argument("--mean", default="0", help="per-channel mean subtracted (R,G,B)")
    p.add_argument("--scale", type=float, default=None, help="multiply after the mean")
    p.add_argument("--std", default=None, help="per-channel std to divide by (R,G,B)")
    p.add_argument("--channel-order", choices=("RGB", "BGR"), default="RGB")
    p.add_argument("--resize", choices=("stretch", "letterbox"), default="stretch")
    p.add_argument("--labels", help="text file with one class label per line")
    p.add_argument("--ub-size", type=int, default=524288, help="unified buffer bytes")
    p.add_argument("--report", action="store_true", help="print where every op runs")
    p.add_argument("--no-golden", action="store_true", help="skip the self-test pair")
    p.add_argument("-q", "--quiet", action="store_true")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str]) -> int:
    from ..compiler.build import compile as compile_model

    args = build_parser().parse_args(argv)
    out = Path(args.output or Path(args.model).with_suffix(".bin"))
    t0 = time.perf_counter()
    tty = sys.stderr.isatty() and not args.quiet

    def progress(stage: str) -> None:  # one updating status line on a terminal only
        if tty:
            sys.stderr.write(f"\r\x1b[K[{time.perf_counter() - t0:5.1f}s] {stage}...")
            sys.stderr.flush()

    net = compile_model(
        args.model, out, quantize=args.quantize, transpose=args.transpose,
        input_size=parse_hw(args.input_size) if args.input_size else None,
        mean=parse_floats(args.mean, 3, "mean"),
        scale=args.scale if args.scale is not None else 1.0,
        std=parse_floats(args.std, 3, "std") if args.std else None,
        channel_order=args.channel_order, resize=args.resize, labels=args.labels,
        ub_size=args.ub_size, golden=not args.no_golden, format=args.format,
        progress=progress)
    if tty:
        sys.stderr.write("\r\x1b[K")
    meta = net.meta
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
    report = meta["report"]
    width = max((len(r["op"]) for r in report), default=4)
    src = max((len(r.get("source", "")) for r in report), default=0)
    head = f"{'source layer':{src}s}  " if src else ""
    print(f"{head}{'op':{width}s}  {'type':18s} where  detail")
    for r in report:
        lead = f"{r.get('source', ''):{src}s}  " if src else ""
        print(f"{lead}{r['op']:{width}s}  {r['type']:18s} {r['where']:5s}  {r['detail']}")


def run(argv: list[str] | None = None) -> int:
    return entry("dvsdk-compile", main, argv)


if __name__ == "__main__":
    sys.exit(run())
