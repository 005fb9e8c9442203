#!/usr/bin/env python3
"""One DV700 conv command built by hand with the driver API, checked against numpy.

No compiler and no net.bin: the script packs a tensor and the weights itself, describes
one fused run (3x3 conv -> 2x2 max-pool -> ReLU, the hardware's order, §4.1), lets the
command list validate, encode and kick it, and compares the result with a plain numpy
implementation.  With ``--data ints`` (the default) every value is a small integer, so
every product and sum is exact in FP16 and the device must match numpy bit for bit
(max error 0).  ``--data floats`` shows the FP16 rounding instead.

    python3 examples/raw_commands.py
    python3 examples/raw_commands.py --size 32x24 --channels 16 --filters 8 --data floats
    DVSDK_DEVICE=uio:// python3 examples/raw_commands.py       # the same on a board
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

import dvsdk
from dvsdk.cli import entry
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.hw import layout
from dvsdk.hw.weights import pack_conv_weights


def conv_pool_relu(x: np.ndarray, w: np.ndarray, b: np.ndarray, pad: int,
                   pool: int) -> np.ndarray:
    """The reference: zero-padded correlation (HWC in), max-pool pool x pool / pool, ReLU."""
    h, wd, _ = x.shape
    m, _, ky, kx = w.shape
    xp = np.pad(x, ((pad, pad), (pad, pad), (0, 0)))
    oh, ow = h + 2 * pad - ky + 1, wd + 2 * pad - kx + 1
    y = np.zeros((oh, ow, m), np.float32)
    for dy in range(ky):
        for dx in range(kx):
            y += xp[dy : dy + oh, dx : dx + ow, :] @ w[:, :, dy, dx].T
    y += b
    ph, pw = oh // pool, ow // pool
    y = y[: ph * pool, : pw * pool].reshape(ph, pool, pw, pool, m).max(axis=(1, 3))
    return np.maximum(y, 0)


def make_data(kind: str, h: int, w: int, c: int, m: int, k: int, seed: int):
    rng = np.random.default_rng(seed)
    if kind == "ints":  # exact in FP16: every partial sum is a small integer
        vals = np.array([-2, -1, 0, 1, 2], np.float32)
        return (rng.choice(vals, (h, w, c)), rng.choice(vals, (m, c, k, k)),
                rng.choice(vals, m))
    return (rng.random((h, w, c), np.float32), rng.standard_normal((m, c, k, k), np.float32)
            * 0.2, rng.standard_normal(m, np.float32) * 0.1)


def parse_size(text: str) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError("size must look like HxW, e.g. 16x16") from None
    return h, w


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    p.add_argument("--device", default=os.environ.get("DVSDK_DEVICE", "sim://"),
                   help="device URL (default: $DVSDK_DEVICE, else sim://)")
    p.add_argument("--size", type=parse_size, default=(16, 16), metavar="HxW",
                   help="input height x width (default 16x16)")
    p.add_argument("--channels", type=int, default=8, help="input channels C (default 8)")
    p.add_argument("--filters", type=int, default=32, help="output channels M (default 32)")
    p.add_argument("--kernel", type=int, default=3, choices=(1, 3, 5, 7),
                   help="square kernel size (default 3)")
    p.add_argument("--data", choices=("ints", "floats"), default="ints",
                   help="small integers (exact, max error 0) or random floats")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    (h, w), c, m, k = args.size, args.channels, args.filters, args.kernel
    pad, pool = k // 2, 2
    x, wts, bias = make_data(args.data, h, w, c, m, k, args.seed)

    with dvsdk.open_device(args.device) as dev:
        info = dev.info()
        print(f"device {args.device}: {info.backend}, ub_size {info.ub_size} B, "
              f"mac_num {info.mac_num}, {info.conv_freq} MHz"
              + (" (simulated)" if info.simulated else ""))

        def upload(raw: np.ndarray, name: str):
            buf = dev.alloc(raw.nbytes, name=name)
            buf.write(0, raw)
            buf.sync_for_device()          # the device reads DRAM, not the CPU cache
            return buf

        packed_x = layout.pack(x)                               # 8-channel chunks, FP16
        blob = pack_conv_weights(wts, bias)                     # the libdmpdv byte stream
        inp = upload(packed_x, "input")
        wbuf = upload(np.frombuffer(blob, np.uint8), "weights")
        oh, ow = h // pool, w // pool
        out = dev.alloc(h * w * m * 2, name="output")
        try:
            run = ConvRun.make(m, conv="conv", kernel=k, weights=wbuf, pads=pad, act="relu",
                               pool="max", pool_size=pool, pool_stride=pool)
            cmd = ConvCommand(input_buf=inp, output_buf=out, w=w, h=h, c=c, runs=[run])
            print(f"command: input {h}x{w}x{c} ({packed_x.nbytes} B), conv {k}x{k} pad {pad} "
                  f"-> {m} channels, max-pool {pool}x{pool}/{pool}, ReLU; weights "
                  f"{len(blob)} B")
            with CommandList(dev) as cl:
                cl.add(cmd)                # validated against the DV700's rules (§6)
                cl.commit()                # encoded into a command stream in DMA memory
                us = cl.run()              # address, length, kick; wait for the interrupt
                out.sync_for_cpu()         # drop stale cache lines before reading
                y = layout.unpack(out.read(0, oh * ow * m * 2), (oh, ow, m))
                st = cl.last
            kind = "predicted" if info.simulated else "measured"
            cycles = f", {st.cycles} cycles" if st.cycles is not None else ""
            print(f"ran in {us:.1f} us ({kind}){cycles}; DMA in {st.input_bytes} B, "
                  f"weights {st.weight_bytes} B, out {st.output_bytes} B")
        finally:
            for buf in (inp, wbuf, out):
                buf.free()

    ref = conv_pool_relu(x, wts, bias, pad, pool)
    err = float(np.max(np.abs(y.astype(np.float32) - ref)))
    print(f"output {oh}x{ow}x{m}: max error vs numpy {err:g}")
    if args.data == "ints":
        ok = err == 0
        print("exact match: the device agrees with numpy bit for bit" if ok else
              "MISMATCH: integer data must match exactly")
    else:
        tol = 2e-3 * max(1.0, float(np.max(np.abs(ref))))   # a few FP16 ulps
        ok = err <= tol
        print(f"{'within' if ok else 'OUTSIDE'} the FP16 tolerance {tol:.3g}")
    return 0 if ok else 1


if __name__ == "__main__":
    # as dvsdk's own tools: an error is one line and a non-zero exit (--debug: traceback)
    sys.exit(entry(Path(__file__).name, main))
