"""The simulator's host memory: ``close()`` returns the DRAM at once, and host memory it
cannot get is a typed error (issue 25, item 6).

A ``sim://`` device holds 256 MiB of simulated DRAM (by default).  Its watchers are
bound methods of the device, a reference cycle, so without an explicit release the
array lived until the garbage collector ran: 8 open/close cycles added 1.7 GB of address
space.  Each test runs in a child process with the collector off (what the cycles would
cost between two collections) and reads the address space from ``/proc/self/status``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dvsdk.errors import DeviceError
from dvsdk.sim.device import SimDevice

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}

pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(),
                                reason="needs /proc/self/status (Linux)")

_PRELUDE = """
import gc, json, resource, sys
import dvsdk
from dvsdk.driver.device import open_device

def vm_bytes():
    for line in open("/proc/self/status"):
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no VmSize")

gc.disable()
open_device("sim://").close()   # imports and one-off caches: not part of the growth
"""


def _child(body: str) -> dict:
    code = _PRELUDE + body
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=ENV, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_eight_open_close_cycles_add_under_300_mb():
    r = _child("""
before = vm_bytes()
for _ in range(8):
    dev = open_device("sim://")
    dev.close()
print(json.dumps({"growth": vm_bytes() - before, "dram": dev.info().dma_size}))
""")
    assert r["dram"] == 256 << 20
    assert r["growth"] < 300 << 20, f"{r['growth'] >> 20} MiB after 8 cycles"


def test_eight_loads_closed_add_under_300_mb():
    r = _child("""
before = vm_bytes()
for _ in range(8):
    with dvsdk.load("examples/models/digits.bin") as net:
        assert net.selftest()["passed"]
print(json.dumps({"growth": vm_bytes() - before}))
""")
    assert r["growth"] < 300 << 20, f"{r['growth'] >> 20} MiB after 8 loads"


def test_no_host_memory_is_a_typed_error():
    """Under an address-space limit below 256 MiB of headroom, opening the simulator is
    an OutOfDeviceMemory naming dram_mb (it was numpy's raw MemoryError); a smaller DRAM
    still opens, and the limit is not leaked into a later failure."""
    r = _child("""
from dvsdk.errors import OutOfDeviceMemory
limit = vm_bytes() + (96 << 20)
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
try:
    open_device("sim://")
except OutOfDeviceMemory as e:
    err = {"type": type(e).__name__, "field": e.field, "value": e.value,
           "requested": e.requested, "text": str(e)}
small = open_device("sim://?dram_mb=16")
buf = small.alloc(1 << 20)
buf.free()
small.close()
print(json.dumps(err))
""")
    assert r["type"] == "OutOfDeviceMemory"
    assert r["field"] == "dram_mb" and r["value"] == 256
    assert r["requested"] == 256 << 20
    assert "ulimit" in r["text"]


def test_closed_device_refuses_use():
    dev = SimDevice(dram_mb=1)
    buf = dev.alloc(64)
    dev.close()
    assert buf.freed
    assert dev.dram.size == 0 and dev.core.mem.array.size == 0
    assert dev.info().dma_size == 1 << 20
    for call in (lambda: dev.alloc(64), lambda: dev.write32("conv", 0, 0),
                 lambda: dev.read32("conv", 0), lambda: dev.wait_irq("conv", 0)):
        with pytest.raises(DeviceError, match="closed"):
            call()
    dev.close()  # a second close does nothing
