"""Link throughput and latency, on a clean line and on noisy ones (the HIL link issue).

For each transport (TCP loopback and a pty, each to a ``dvsdk-agent`` child
process serving sim://, plus the in-process ``loop://`` for reference):

* write: ``sync_for_device`` of a 4 MiB buffer whose every byte changed
  (4 MiB of MEM_WRITE frames, then SYNC), in MB/s;
* read: ``sync_for_cpu`` of the same buffer (SYNC, then 4 MiB of MEM_READ), MB/s;
* read32: round trip of one register read, median and p99 in microseconds.

Then the same write/read over TCP with every byte damaged with probability 0.1 %
and 1 % in both directions (``--inject noise=P`` on the agent, ``inject=noise=P``
on the client), each repeat on a fresh connection and seed: min/median/max MB/s,
the median as a ratio of the clean line's in the same run, and how many repeats
ended in DeviceLost.  Every transfer is checked bit for bit.

    python benchmarks/bench_link.py [--size-mib 4] [--noise-kib 64] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import numpy as np

from dvsdk.driver.device import Device, open_device
from dvsdk.errors import DeviceLost, DeviceNotFound
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


def transfer_once(url: str, size: int, seed: int) -> tuple[float, float] | None:
    """One connection: write then read back ``size`` changed bytes; (write, read) MB/s,
    or None if the link was declared lost."""
    rng = np.random.default_rng(seed)
    try:
        with open_device(url) as dev:
            buf = dev.alloc(size, name="bench")
            data = rng.integers(0, 256, size, dtype=np.uint8)
            buf.write(0, data)
            t0 = time.perf_counter()
            buf.sync_for_device()
            t1 = time.perf_counter()
            buf.sync_for_cpu()  # pulls the whole range back over the line
            t2 = time.perf_counter()
            assert np.array_equal(buf.view, data), "read back differs"
            return size / (t1 - t0) / MB, size / (t2 - t1) / MB
    except (DeviceLost, DeviceNotFound):
        return None


def bench_noise(device: str, size: int, repeats: int, levels: tuple[float, ...]) -> dict:
    """Write/read over TCP at each byte error rate; repeats on fresh connections."""
    out: dict[str, dict] = {}
    for p in levels:
        args = ["--inject", f"noise={p},seed=1"] if p else []
        writes, reads, lost = [], [], 0
        with AgentProcess(device, port="tcp:127.0.0.1:0", args=args) as agent:
            for r in range(repeats):
                url = agent.url + (f"?timeout=1&inject=noise={p},seed={r + 10}" if p else "")
                got = transfer_once(url, size, r)
                if got is None:
                    lost += 1
                    continue
                writes.append(got[0])
                reads.append(got[1])
        out[f"{p:.1%}"] = {"write": writes, "read": reads, "lost": lost}
    return out


def _mmm(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{min(xs):.2f}/{statistics.median(xs):.2f}/{max(xs):.2f}"


def main() -> None:
    """Run every transport and print a table (or JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mib", type=float, default=4.0)
    ap.add_argument("--noise-kib", type=float, default=64.0,
                    help="bytes per transfer on the noisy lines")
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
    noise = bench_noise(args.device, int(args.noise_kib * 1024), args.repeats,
                        (0.0, 0.001, 0.01))
    if args.json:
        print(json.dumps({"clean": results, "noise": noise}, indent=2))
        return
    print(f"dvlink over {args.device}, {args.size_mib:g} MiB transfers, "
          f"median of {args.repeats}; read32 over {args.reads} calls")
    print(f"{'link':<18} {'write MB/s':>11} {'read MB/s':>10} {'read32 us':>10} {'p99 us':>8}")
    for name, r in results.items():
        print(f"{name:<18} {r['write_MBps']:>11.1f} {r['read_MBps']:>10.1f} "
              f"{r['read32_us_median']:>10.1f} {r['read32_us_p99']:>8.1f}")
    print(f"\nTCP with every byte damaged with probability P, both ways; "
          f"{args.noise_kib:g} KiB per transfer, {args.repeats} connections each")
    print(f"{'P':<6} {'write MB/s min/med/max':>24} {'ratio':>7} {'read MB/s min/med/max':>24} "
          f"{'ratio':>7} {'lost':>5}")
    base = noise["0.0%"]
    for level, r in noise.items():
        rw = (statistics.median(r["write"]) / statistics.median(base["write"])
              if r["write"] and base["write"] else float("nan"))
        rr = (statistics.median(r["read"]) / statistics.median(base["read"])
              if r["read"] and base["read"] else float("nan"))
        print(f"{level:<6} {_mmm(r['write']):>24} {rw:>7.3f} {_mmm(r['read']):>24} {rr:>7.3f} "
              f"{r['lost']:>5}")


if __name__ == "__main__":
    main()
