"""Simulator speed and timing model on two reference convolutions (issue 3).

For each case: wall time of one committed command on sim:// (median of runs),
the simulator's predicted cycles, the MAC-bound lower bound (MACs / mac_num)
and the bandwidth bound (bytes / 16).  Goal: the whole 56x56x64->64 3x3 conv in
under 20 ms of wall time.

    python benchmarks/bench_sim.py
"""

from __future__ import annotations

import statistics
import time

import numpy as np

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.hw import layout
from dvsdk.hw.weights import pack_conv_weights

CASES = [
    # name, (h, w, c), m, k, stride, pad
    ("56x56x64->64 3x3", (56, 56, 64), 64, 3, 1, 1),
    ("224x224x3->32 3x3 s2", (224, 224, 3), 32, 3, 2, 1),
]


def _buf(dev, raw: np.ndarray):
    buf = dev.alloc(raw.nbytes)
    buf.write(0, raw)
    buf.sync_for_device()
    return buf


def bench(name, hwc, m, k, stride, pad, repeats=20):
    dev = dvsdk.open_device("sim://")
    rng = np.random.default_rng(0)
    h, w, c = hwc
    x = rng.uniform(-1, 1, hwc).astype(np.float32)
    wts = rng.uniform(-0.1, 0.1, (m, c, k, k)).astype(np.float32)
    bias = rng.uniform(-0.1, 0.1, m).astype(np.float32)
    ib = _buf(dev, layout.pack(x))
    wb = _buf(dev, np.frombuffer(pack_conv_weights(wts, bias), np.uint8))
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    ob = dev.alloc(oh * ow * m * 2)
    run = ConvRun.make(m, conv="conv", kernel=k, weights=wb, pads=pad, stride=stride,
                       act="relu")
    cl = CommandList(dev)
    cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run]))
    cl.commit()
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        cl.run()
        walls.append(time.perf_counter() - t0)
    info = dev.info()
    macs = oh * ow * m * c * k * k
    moved = cl.last.input_bytes + cl.last.weight_bytes + cl.last.output_bytes
    mac_bound = -(-macs // info.mac_num)
    bw_bound = -(-moved // 16)
    cycles = cl.last.cycles
    wall_ms = statistics.median(walls) * 1e3
    print(f"{name:24s} wall {wall_ms:7.2f} ms/command | predicted {cycles:9d} cycles "
          f"= {cycles / info.conv_freq:8.1f} us @ {info.conv_freq} MHz | MAC bound "
          f"{mac_bound:9d} ({cycles / mac_bound:4.2f}x) | bandwidth bound {bw_bound:8d} "
          f"({moved} B) | MAC utilisation {mac_bound / cycles:5.1%}")
    return wall_ms


def main() -> None:
    print(f"dvsdk {dvsdk.__version__} simulator benchmark (numpy {np.__version__})")
    walls = [bench(*case) for case in CASES]
    goal = 20.0
    print(f"goal: 56x56x64->64 3x3 under {goal} ms wall -> {walls[0]:.2f} ms "
          f"({'met' if walls[0] < goal else 'MISSED'}, {goal / walls[0]:.1f}x headroom)")


if __name__ == "__main__":
    main()
