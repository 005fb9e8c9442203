"""Link throughput and latency (issue: hardware-in-the-loop link).

For each transport (TCP loopback and a pty, each to a ``dvsdk-agent`` child
process serving sim://, plus the in-process ``loop://`` for reference):

* write: ``sync_for_device`` of a 4 MiB buffer whose every byte changed
  (4 MiB of MEM_WRITE frames, then SYNC), in MB/s;
* read: ``sync_for_cpu`` of the same buffer (SYNC, then 4 MiB of MEM_READ), MB/s;
* read32: round trip of one register read, median and p99 in microseconds.

    python benchmarks/bench_link.py [--size-mib 4] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from dvsdk.driver.device import Device, open_device
from dvsdk.link.agent import AgentProcess

MB = 1e6


def _median_time(fn: Callable[[], None], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_device(dev: Device, size: int, repeats: int, reads: int) -> dict[str, float]:
    """Write/read throughput of ``size`` bytes and read32 latency on an open device."""
    buf = dev.alloc(size, name="bench")
    buf.view[:] = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8)
    buf.sync_for_device()

    def write() -> None:
        np.bitwise_xor(buf.view, 0xFF, out=buf.view)  # every byte differs from the agent's
        buf.sync_for_device()

    def read() -> None:
        buf.sync_for_cpu()

    t_write = _median_time(write, repeats)
    want = buf.view.copy()
    t_read = _median_time(read, repeats)
    assert np.array_equal(buf.view, want), "read back differs"
    for _ in range(20):
        dev.read32("conv", 0x128)
    lat = []
    for _ in range(reads):
        t0 = time.perf_counter()
        dev.read32("conv", 0x128)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    buf.free()
    return {
        "write_MBps": size / t_write / MB,
        "read_MBps": size / t_read / MB,
        "read32_us_median": statistics.median(lat) * 1e6,
        "read32_us_p99": lat[int(len(lat) * 0.99) - 1] * 1e6,
    }


def main() -> None:
    """Run every transport and print a table (or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=float, default=4.0)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--reads", type=int, default=2000)
    ap.add_argument("--device", default="sim://", help="what the agent serves")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    size = int(args.size_mib * (1 << 20))
    results: dict[str, dict[str, float]] = {}
    for name, port in (("tcp", "tcp:127.0.0.1:0"), ("pty", "pty")):
        with AgentProcess(args.device, port=port) as agent, open_device(agent.url) as dev:
            results[name] = bench_device(dev, size, args.repeats, args.reads)
    with open_device(f"loop://?device={args.device}") as dev:
        results["loop (in-process)"] = bench_device(dev, size, args.repeats, args.reads)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"dvlink over {args.device}, {args.size_mib:g} MiB transfers, "
          f"median of {args.repeats}; read32 over {args.reads} calls")
    print(f"{'link':<18} {'write MB/s':>11} {'read MB/s':>10} {'read32 us':>10} {'p99 us':>8}")
    for name, r in results.items():
        print(f"{name:<18} {r['write_MBps']:>11.1f} {r['read_MBps']:>10.1f} "
              f"{r['read32_us_median']:>10.1f} {r['read32_us_p99']:>8.1f}")


if __name__ == "__main__":
    main()
