"""Clients without the key against dvsdk-agent (issue 25 §1): is a client with it served?

``--attackers`` keyless clients each connect to a ``dvsdk-agent`` (TCP loopback, sim://,
default handshake timeout) and send nothing; every ``--period`` seconds (4.5, just under
the old 5 s handshake timeout) each closes its connection and connects again.  Meanwhile
a client with the key tries ``--attempts`` times, ``--gap`` seconds apart: open the
device (HELLO, AUTH, CAPS), one PING, close.  Prints how many attempts were served and
how long each took (median, max), and why the others failed.

The agent and the client share a fresh config folder (``$XDG_CONFIG_HOME``), where the
agent creates its key and the client finds it.

    python benchmarks/bench_link_lockout.py [--attempts 15] [--period 4.5] [--attackers 1]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import socket
import statistics
import tempfile
import threading
import time

from dvsdk.driver.device import open_device
from dvsdk.errors import DvsdkError
from dvsdk.link.agent import AgentProcess


def _attacker(host: str, port: int, period: float, stop: threading.Event,
              counts: collections.Counter) -> None:
    while not stop.is_set():
        try:
            sock = socket.create_connection((host, port), timeout=5)
        except OSError:
            counts["connect_failed"] += 1
            stop.wait(0.1)
            continue
        counts["connections"] += 1
        stop.wait(period)
        sock.close()


def run(attempts: int, period: float, gap: float, attackers: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="dvsdk-lockout-") as config:
        os.environ["XDG_CONFIG_HOME"] = config
        for name in ("DVSDK_LINK_SECRET", "DVSDK_LINK_SECRET_FILE"):
            os.environ.pop(name, None)
        with AgentProcess("sim://", port="tcp:127.0.0.1:0", env=dict(os.environ)) as agent:
            host, port = agent.url[len("socket://"):].rsplit(":", 1)
            stop = threading.Event()
            counts: collections.Counter = collections.Counter()
            threads = [threading.Thread(target=_attacker, args=(host, int(port), period, stop,
                                                                counts), daemon=True)
                       for _ in range(attackers)]
            for t in threads:
                t.start()
            time.sleep(0.2)  # the attackers are in first
            served: list[float] = []
            failed: collections.Counter = collections.Counter()
            for _ in range(attempts):
                t0 = time.perf_counter()
                try:
                    with open_device(agent.url + "?timeout=5") as dev:
                        dev.ping()
                    served.append(time.perf_counter() - t0)
                except DvsdkError as exc:
                    failed[f"{type(exc).__name__}: {exc.message[:60]}"] += 1
                time.sleep(gap)
            stop.set()
            for t in threads:
                t.join(period + 5)
    return {"attempts": attempts, "served": len(served), "attackers": attackers,
            "period_s": period, "attacker_connections": counts["connections"],
            "median_s": statistics.median(served) if served else None,
            "max_s": max(served) if served else None, "failed": dict(failed)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attempts", type=int, default=15)
    ap.add_argument("--period", type=float, default=4.5)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between attempts")
    ap.add_argument("--attackers", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = run(args.attempts, args.period, args.gap, args.attackers)
    if args.json:
        print(json.dumps(r, indent=2))
        return
    print(f"{r['served']} of {r['attempts']} attempts with the key served while "
          f"{r['attackers']} keyless client(s) reconnected every {r['period_s']:g} s "
          f"({r['attacker_connections']} connections)")
    if r["served"]:
        print(f"  time to be served: median {r['median_s'] * 1e3:.1f} ms, "
              f"max {r['max_s'] * 1e3:.1f} ms")
    for why, n in r["failed"].items():
        print(f"  {n} x {why}")


if __name__ == "__main__":
    main()
