#!/usr/bin/env python3
"""Measure the DV700 LRN unit's error on the simulator (the table in firmware_spec/lrn.md).

The unit (reference §4.7) approximates Caffe's LRN with n = 5, alpha = 1e-4, beta = 0.75,
k = 1 by a piecewise-linear curve in s, the sum of squares over the 5-channel window.  This
script builds, with ``dvsdk.vx``, a graph with one ACROSS_MAPS normalization layer placed
on the unit (node target DV700), feeds it inputs that sweep s from 0 to 4**12, runs it on
the simulated device, and compares every output with the exact formula computed in float64
from the float32 input the host gave (so the FP16 rounding of the input and of the output
is part of the error).

Sampling: 16 channels, nonzero values only in channels 2, 7 and 12, whose windows (0-4,
5-9, 10-14) do not overlap, so each of them sees ``s = v**2`` exactly; v = sqrt(s) with s
on a uniform grid of each interval [4**(i-1), 4**i] (dense near every knot) plus random
dense tensors (all channels nonzero) scaled to each bound.  Outputs below FP16's smallest
normal number (6.1e-5) are left out of the relative error.

Usage::

    python3 tools/measure_lrn.py                 # the table, ~20 s
    python3 tools/measure_lrn.py --points 2000   # quicker, coarser
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import dvsdk.vx as vx

FP16_MIN_NORMAL = 2.0 ** -14
WIDTH = 128


def exact(x: np.ndarray) -> np.ndarray:
    """Caffe LRN, n=5, alpha=1e-4, beta=0.75, k=1, across dimension 2 (OpenVX order)."""
    x = np.asarray(x, np.float64)
    sq = np.pad(x * x, ((0, 0), (0, 0), (2, 2), (0, 0)))
    s = sum(sq[:, :, d: d + x.shape[2]] for d in range(5))
    return x / (1 + 1e-4 / 5 * s) ** 0.75


def run_unit(ctx: vx.Context, x: np.ndarray) -> np.ndarray:
    """The LRN unit's output for ``x`` ([W, H, 16k, 1] float32) on the context's device."""
    g = ctx.graph()
    t = vx.Tensor(ctx, x.shape, vx.Type.FLOAT32)
    t.copy_patch(x, vx.Accessor.WRITE_ONLY)
    y = vx.Tensor(ctx, x.shape, vx.Type.FLOAT32)
    node = vx.normalization_layer(g, t, vx.NormType.ACROSS_MAPS, 5, 1e-4, 0.75, y)
    node.set_target(vx.Target.DV700)
    if g.process() != vx.Status.SUCCESS:
        raise SystemExit(f"graph failed: {g.error}")
    if node.where != "DV700":
        raise SystemExit(f"the normalization did not run on the LRN unit: {node.placement}")
    out = y.copy_patch()
    g.release()
    return out


def sweep(lo: float, hi: float, points: int, rng: np.random.Generator) -> np.ndarray:
    """Inputs whose isolated windows see s on a grid of [lo, hi] (3 samples per pixel)."""
    s = np.linspace(lo, hi, points)
    v = np.sqrt(s) * rng.choice([-1.0, 1.0], points)
    n = -(-points // 3)
    v = np.concatenate([v, np.zeros(3 * n - points)])
    h = -(-n // WIDTH)
    x = np.zeros((WIDTH, h, 16, 1), np.float32)
    flat = np.zeros(WIDTH * h * 3)
    flat[: v.size] = v
    cols = flat.reshape(3, -1)
    for k, ch in enumerate((2, 7, 12)):
        x[:, :, ch, 0] = cols[k].reshape(h, WIDTH).T
    return x


def rel_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    mask = np.abs(want) >= FP16_MIN_NORMAL
    return np.abs(got[mask] / want[mask] - 1.0)


def measure(ctx: vx.Context, points: int, seed: int = 0) -> list[tuple[float, float]]:
    """(upper end of s, the largest relative error for s up to it), for 4**3 .. 4**12."""
    rng = np.random.default_rng(seed)
    rows, worst = [], 0.0
    for i in range(0, 13):
        lo, hi = (0.0 if i == 0 else 4.0 ** (i - 1)), 4.0 ** i
        x = sweep(lo, hi, points, rng)
        worst = max(worst, float(rel_error(run_unit(ctx, x), exact(x)).max(initial=0)))
        bound = np.sqrt(hi / 5)          # every |x| <= bound: any window's s <= hi
        dense = (rng.uniform(-1, 1, (32, 16, 32, 1)) * bound).astype(np.float32)
        worst = max(worst, float(rel_error(run_unit(ctx, dense), exact(dense)).max(initial=0)))
        if i >= 3:
            rows.append((hi, worst))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=20000, help="s values per interval")
    p.add_argument("--device", default="sim://", help="device URL (default sim://)")
    args = p.parse_args(argv)
    with vx.Context(args.device) as ctx:
        rows = measure(ctx, args.points)
    print("| s = sum of squares up to | largest relative error |")
    print("|---:|---:|")
    for hi, err in rows:
        print(f"| 4^{int(round(np.log(hi) / np.log(4)))} = {hi:,.0f} | {err:.3%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
