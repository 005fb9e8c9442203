#!/usr/bin/env python3
"""Classify images with a compiled network and print the top-k classes with their labels.

Defaults to the bundled digits model (``examples/models/digits.bin``, 16x16 grayscale
digits, ten classes) and one of its sample images, on the default device
(``$DVSDK_DEVICE``, else the simulator):

    python3 examples/classify.py
    python3 examples/classify.py examples/models/samples/          # every sample
    python3 examples/classify.py --net my.bin cat.jpg dog.jpg -k 5
    DVSDK_DEVICE=uio:// python3 examples/classify.py                # on a board

The preprocessing (resize, channel order, mean, scale, std) is the one recorded in
the net.bin, so images go in as they are.  When a file name starts with a label
(``seven_1442.png``) the script also reports whether the prediction matches.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import dvsdk
from dvsdk.cli import entry
from dvsdk.runtime.images import IMAGE_SUFFIXES

MODELS = Path(__file__).resolve().parent / "models"
DEFAULT_NET = MODELS / "digits.bin"
DEFAULT_IMAGE = MODELS / "samples" / "seven_1442.png"


def probabilities(scores: np.ndarray) -> np.ndarray:
    """Scores as probabilities: kept if they already are (a Softmax output), else softmax."""
    v = np.asarray(scores, np.float64).reshape(-1)
    if v.min() >= 0 and abs(v.sum() - 1) < 1e-2:
        return v
    e = np.exp(v - v.max())
    return e / e.sum()


def expand(items: list[str]) -> list[Path]:
    """Files as given; directories as their images, sorted."""
    paths: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            paths += sorted(q for q in p.iterdir() if q.suffix.lower() in IMAGE_SUFFIXES)
        else:
            paths.append(p)
    return paths


def expected_label(path: Path, labels: list[str]) -> str | None:
    """``seven_1442.png`` -> ``seven`` when that is one of the labels."""
    head = path.stem.split("_")[0].split("-")[0]
    return head if head in labels else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("images", nargs="*", help="image files or directories "
                   f"(default: {DEFAULT_IMAGE.relative_to(MODELS.parent.parent)})")
    p.add_argument("--net", default=str(DEFAULT_NET), help="compiled network (default: the "
                   "bundled digits model)")
    p.add_argument("-k", "--top-k", type=int, default=3, help="classes to show (default 3)")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    args = p.parse_intermixed_args(argv)     # options may sit between the images

    paths = expand(args.images) if args.images else [DEFAULT_IMAGE]
    if not paths:
        p.error("no images found")
    with dvsdk.load(args.net, args.device) as net:
        shapes = [tuple(o["shape"]) for o in net.outputs]
        if len(shapes) != 1 or int(np.prod(shapes[0])) != max(shapes[0]):
            print(f"{args.net} has outputs {shapes}; classify.py expects one vector of "
                  "class scores (segment.py handles per-pixel scores)", file=sys.stderr)
            return 2
        labels = list(net.labels or [])
        info = net.device.info()
        kind = "predicted by the simulator" if info.simulated else "measured"
        shape = "x".join(str(d) for d in net.inputs[0]["shape"])
        print(f"{Path(args.net).name}: input {shape}, {len(labels) or 'no'} labels, "
              f"device {info.backend}")
        right = checked = 0
        for path in paths:
            out = net.run_image(path, raw=True)   # tensors, also for a net with --task
            (scores,) = out.values()
            probs = probabilities(scores)
            top = np.argsort(-probs, kind="stable")[: max(1, args.top_k)]
            names = [labels[i] if i < len(labels) else str(i) for i in top]
            want = expected_label(path, labels)
            verdict = ""
            if want is not None:
                checked += 1
                right += names[0] == want
                verdict = "  [correct]" if names[0] == want else f"  [WRONG, expected {want}]"
            print(f"{path}: {names[0]} ({probs[top[0]]:.1%}), device "
                  f"{net.last_run.device_us:.1f} us{verdict}")
            for i, name in zip(top, names):
                print(f"  {probs[i]:7.2%}  {i:3d}  {name}")
        print(f"device time is {kind}")
        if checked:
            print(f"{right}/{checked} correct")
    return 0


if __name__ == "__main__":
    # as dvsdk's own tools: an error is one line and a non-zero exit (--debug: traceback)
    sys.exit(entry(Path(__file__).name, main))
