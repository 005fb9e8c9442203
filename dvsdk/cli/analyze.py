"""``dvsdk analyze net.bin --reference MODEL``: per-layer error of the device against the
source model in float32 (see :mod:`dvsdk.qa.analyze`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import Parser

EPILOG = """examples:
  dvsdk analyze digits.bin --reference digits.onnx --input seven.png
  dvsdk analyze classifier.bin --reference classifier.xml --device socket://board:7000 --json
  dvsdk analyze net.bin --reference model.onnx --plot errors.png
  dvsdk analyze net.bin --reference model.onnx --isolate --top 10

Each layer's "contrib" is the final output's error (max |error| / range, the largest
over the outputs) when that layer alone runs on the device, fed the reference's own
inputs, and the rest of the model in float32; the worst layers are the ones it ranks
first.  --isolate shows every layer's own error (its inputs from the reference) instead
of the error carried along the device's run.
"""


def build_parser() -> Parser:
    p = Parser(prog="dvsdk analyze", epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                description="Per-layer accuracy of a net.bin against its "
                                            "source model.")
    p.add_argument("net", help="the net.bin")
    p.add_argument("--reference", required=True, metavar="MODEL",
                   help="the source model (ONNX, NNEF, OpenVINO IR, Keras .h5)")
    p.add_argument("--format", help="the reference's format, if its name does not say it")
    p.add_argument("--input", metavar="IMG|x.npy|x.npz",
                   help="an image (the net's preprocessing applies) or raw tensors; "
                        "default: the net's golden input")
    p.add_argument("--device", default=None, metavar="URL", help="default: sim://")
    p.add_argument("--top", type=int, default=5, help="highlight the N worst layers")
    p.add_argument("--isolate", action="store_true",
                   help="feed each DV700 command (and CPU step) the reference's own input "
                        "tensors, so each layer's own error shows (RKNN's 'single' mode)")
    p.add_argument("--no-contribution", action="store_true",
                   help="skip the isolation pass and the per-layer output runs (about "
                        "half the time); the worst layers are then ranked by 'added'")
    p.add_argument("--tolerance", type=float, default=0.01, metavar="REL",
                   help="output error (share of its range) drawn as the line on --plot "
                        "(default 0.01)")
    p.add_argument("--plot-layers", type=int, default=30, metavar="N",
                   help="layers shown on --plot, by contribution (default 30)")
    p.add_argument("--quantize-candidates", action="store_true",
                   help="compile with each weighted layer alone 8-bit and report the "
                        "accuracy/size trade per layer")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--plot", metavar="PNG", help="error per layer along the network "
                   "(needs matplotlib: pip install 'dvsdk[plot]')")
    p.add_argument("-f", "--force", action="store_true",
                   help="replace an existing --plot file (never an input)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def _check_outputs(args) -> None:
    """--plot never names the net.bin, a file of the reference model or the --input (nor
    a directory, nor an existing file without --force)."""
    from ..compiler.frontends import source_files
    from ..fsutil import check_outputs

    inputs = [("the net.bin", args.net), *source_files(args.reference)]
    if args.input:
        inputs.append(("the --input file", args.input))
    check_outputs({"--plot": args.plot}, inputs, force=args.force)


def load_input(net, path: str | None):
    """The analysis input: an image, a .npy, an .npz keyed by input name, or the golden one."""
    from ..errors import InvalidArgument
    from ..runtime.images import IMAGE_SUFFIXES, preprocess

    if path is None:
        gold = net.meta.get("golden")
        if gold:
            return {n: net.file.array(e, "GOLD") for n, e in gold["inputs"].items()}
        rng = np.random.default_rng(0)
        return {i["name"]: rng.uniform(0, 1, i["shape"]).astype(np.float32)
                for i in net.inputs}
    suffix = Path(path).suffix.lower()
    try:
        if suffix == ".npy":
            return np.load(path, allow_pickle=False)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise InvalidArgument(f"cannot read the input: {e}", field="input", value=path) from None
    if suffix in IMAGE_SUFFIXES:
        spec = net.inputs[0]
        return preprocess(path, tuple(spec["shape"]), spec.get("preprocess", {}),
                          spec.get("layout", "NCHW"))
    raise InvalidArgument("the input must be an image, a .npy or an .npz", field="input",
                          value=path)


def main(argv: list[str]) -> int:
    from ..errors import InvalidArgument
    from ..qa.analyze import analyze, worst
    from ..runtime.net import load

    args = build_parser().parse_args(argv)
    if args.top < 0:
        raise InvalidArgument("--top must be >= 0", field="top", value=args.top, limit=">= 0")
    if not (args.tolerance > 0 and np.isfinite(args.tolerance)):
        raise InvalidArgument("--tolerance must be a finite number > 0", field="tolerance",
                              value=args.tolerance, limit="> 0")
    if args.plot_layers < 1:
        raise InvalidArgument("--plot-layers must be >= 1", field="plot_layers",
                              value=args.plot_layers, limit=">= 1")
    _check_outputs(args)
    with load(args.net, args.device) as net:
        x = load_input(net, args.input)
        if args.quantize_candidates:
            return _candidates(net, args, x)
        rows = analyze(net, args.reference, x, args.format, isolate=args.isolate,
                       contribution=not args.no_contribution)
    bad = {r.index for r in worst(rows, args.top)}
    if args.plot:
        from ..qa.plots import error_plot

        error_plot(rows, bad, args.plot, tolerance=args.tolerance, top=args.plot_layers,
                   isolated=args.isolate)
    if args.json:
        print(json.dumps([r.as_dict() | {"worst": r.index in bad} for r in rows], indent=1))
        return 0
    print_table(rows, bad, sys.stdout.isatty(), args.isolate)
    return 0


def print_table(rows, bad: set[int], color: bool, isolated: bool = False) -> None:
    width = min(max(len(r.tensor) for r in rows), 32)
    print(f"{'#':>3s}  {'where':8s} {'produced by':28s} {'tensor':{width}s} {'shape':>16s} "
          f"{'max abs':>10s} {'rel':>8s} {'added':>8s} {'cosine':>9s} {'own':>8s} "
          f"{'contrib':>8s}")
    for r in rows:
        where = f"hw #{r.command}" if r.where == "hw" else "cpu"
        own, contrib = _share(r.own), _share(r.contribution)
        line = (f"{r.index:3d}  {where:8s} {r.producer[:28]:28s} {r.tensor[-width:]:{width}s} "
                f"{'x'.join(map(str, r.shape)):>16s} {r.max_abs:10.4g} {r.rel:8.2%} "
                f"{r.added:8.2%} {r.cosine:9.6f} {own:>8s} {contrib:>8s}")
        if r.index in bad:
            line = f"\x1b[1;31m{line}\x1b[0m" if color else line + "  <- worst"
        print(line)
    last = rows[-1]
    mode = "each fed the reference's inputs (--isolate)" if isolated else "compared"
    print(f"{len(rows)} tensors {mode}; output {last.tensor}: max abs {last.max_abs:.4g} "
          f"({last.rel:.2%} of its range), cosine {last.cosine:.6f}")
    print("own: the layer's error fed the reference's inputs; contrib: the output's error "
          "with that layer alone on the device (worst = largest)")


def _share(v: float | None) -> str:
    """A share as a percentage, or in e-notation below 0.01% (the ranking stays visible)."""
    if v is None:
        return ""
    return f"{v:.2%}" if v == 0 or v >= 1e-4 else f"{v:.1e}"


def _candidates(net, args, x) -> int:
    from ..qa.quantcands import quantize_candidates

    def progress(done: int, total: int) -> None:
        if sys.stderr.isatty() and not args.json:
            sys.stderr.write(f"\r\x1b[Kcompiling layer {done}/{total}")
            sys.stderr.flush()

    cands, summary = quantize_candidates(net, args.reference, x, args.format, progress)
    if sys.stderr.isatty() and not args.json:
        sys.stderr.write("\r\x1b[K")
    if args.json:
        print(json.dumps({**summary, "layers": [c.as_dict() for c in cands]}, indent=1))
        return 0
    width = max([len(c.layer) for c in cands] + [5])
    print(f"FP16: output error {summary['fp16_error']:.3%}, weights {summary['fp16_bytes']} B;"
          f" all 8-bit: {summary['q8_error']:.3%}, {summary['q8_bytes']} B")
    print(f"{'layer':{width}s} {'params':>9s} {'saves B':>9s} {'error':>9s} {'added':>9s}")
    for c in cands:
        print(f"{c.layer:{width}s} {c.weights:9d} {c.saved_bytes:9d} {c.rel_error:9.3%} "
              f"{c.added:9.3%}")
    keep = [c.layer for c in cands[: args.top] if c.added > 0]
    if keep:
        print(f"to keep the costliest {len(keep)} in FP16: dvsdk-compile ... --quantize "
              f"--quantize-skip {','.join(keep)}")
    return 0
