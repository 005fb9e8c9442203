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

``--absolute`` measures instead the largest *absolute* error for inputs bounded by
``|x| <= B`` (the second table of firmware_spec/lrn.md, which decides fixed-point tensors
against the CTS tolerance of 8 raw units): for each B, the centre value v takes the top 64
steps of the Q7.8 grid below B and 64 more spread over [0, B], and its four neighbours in
the window one common value w over 129 grid values in [0, B] (so s = v^2 + 4 w^2 sweeps
[v^2, 5 B^2]), plus dense random tensors of Q7.8 values in [-B, B]; the error is taken
cumulatively (the row for B covers every input of magnitude up to B).

Usage::

    python3 tools/measure_lrn.py                 # the table, ~20 s
    python3 tools/measure_lrn.py --points 2000   # quicker, coarser
    python3 tools/measure_lrn.py --absolute      # |x| <= B -> largest absolute error
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


#: the bounds B the absolute table has a row for
ABS_BOUNDS = (1, 2, 4, 8, 12, 16, 18, 20, 22, 24, 26, 28, 32, 40, 48, 57.2, 64, 96, 112, 128,
              144, 160, 176, 192, 255)


def grid_inputs(bound: float) -> np.ndarray:
    """[W, H, 16, 1] float32 Q7.8-grid inputs: v at channel 7, w at channels 5, 6, 8, 9."""
    top = np.floor(bound * 256) / 256
    v = np.concatenate([top - np.arange(64) / 256, np.round(np.linspace(0, top, 64) * 256)
                        / 256])
    v = v[v >= 0]
    w = np.round(np.linspace(0, top, 129) * 256) / 256
    vv, ww = (a.reshape(-1) for a in np.meshgrid(v, w, indexing="ij"))
    h = -(-vv.size // 1024)
    x = np.zeros((1024 * h, 16), np.float32)
    x[: vv.size, 7] = vv
    for ch in (5, 6, 8, 9):
        x[: vv.size, ch] = ww
    return x.reshape(h, 1024, 16).transpose(1, 0, 2)[..., None]


def measure_abs(ctx: vx.Context, seed: int = 0) -> list[tuple[float, float]]:
    """(B, the largest absolute error of any output for inputs |x| <= B), cumulative."""
    rng = np.random.default_rng(seed)
    rows, worst = [], 0.0
    for bound in ABS_BOUNDS:
        x = grid_inputs(bound)
        got, want = run_unit(ctx, x), exact(x)
        worst = max(worst, float(np.abs(got - want)[:, :, 7].max()))
        dense = (np.round(rng.uniform(-bound, bound, (64, 16, 32, 1)) * 256) / 256)
        dense = np.clip(dense, -bound, bound).astype(np.float32)
        worst = max(worst, float(np.abs(run_unit(ctx, dense) - exact(dense)).max()))
        rows.append((bound, worst))
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--points", type=int, default=20000, help="s values per interval")
    p.add_argument("--device", default="sim://", help="device URL (default sim://)")
    p.add_argument("--absolute", action="store_true",
                   help="largest absolute error for |x| <= B (fixed-point tensors)")
    args = p.parse_args(argv)
    if args.absolute:
        with vx.Context(args.device) as ctx:
            rows = measure_abs(ctx)
        print("| \\|x\\| up to B | largest absolute error | in Q7.8 raw units (1/256) |")
        print("|---:|---:|---:|")
        for bound, err in rows:
            print(f"| {bound:g} | {err:.5f} | {err * 256:.2f} |")
        return 0
    with vx.Context(args.device) as ctx:
        rows = measure(ctx, args.points)
    print("| s = sum of squares up to | largest relative error |")
    print("|---:|---:|")
    for hi, err in rows:
        print(f"| 4^{int(round(np.log(hi) / np.log(4)))} = {hi:,.0f} | {err:.3%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
