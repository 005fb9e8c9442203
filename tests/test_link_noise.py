"""A noisy line (issue 10 §5): per-byte corruption, frames sized to it, selective resends.

At 1 % byte errors a 64 KiB frame never arrives intact, so the v1 link ended every run in
DeviceLost.  Frames are now sized from the measured error rate and only what is lost is
sent again: 0.1 % completes every run bit-identically, 1 % completes or fails cleanly.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from dvsdk.driver.device import open_device
from dvsdk.errors import DeviceLost, DeviceNotFound
from dvsdk.link import protocol as lp
from dvsdk.link.client import LinkDevice
from dvsdk.link.engine import EXCHANGE_OVERHEAD
from dvsdk.link.transport import FaultSpec, FaultyTransport, PipeTransport

from .linkdev import DATA, EXPECT, MemDevice, copy_run, sim_conv


def test_noise_damages_bytes_at_the_given_rate():
    a, b = PipeTransport.pair()
    spec = FaultSpec.parse("noise=0.01,seed=3")
    t = FaultyTransport(a, spec)
    data = bytes(200_000)
    t.write(data)
    got = np.frombuffer(b.read(0.1), np.uint8)
    assert got.size == len(data) and spec.counts["noise"] == np.count_nonzero(got)
    assert 1700 < spec.counts["noise"] < 2300  # 1 % of 200 000, within ~4.5 sigma


def test_frame_size_follows_the_error_rate():
    link = LinkDevice.loopback(MemDevice())
    try:
        eng = link.engine
        assert eng.chunk_bytes() == eng.max_data  # a clean line: whole payloads
        h = EXCHANGE_OVERHEAD
        for p in (1e-3, 1e-4):
            eng._noise_bytes, eng._noise_errors = 1e6, 1e6 * p
            n = eng.chunk_bytes()
            # the useful fraction n/(n+h)·(1-p)^(n+h) is largest here: check neighbours
            frac = [k / (k + h) * (1 - p) ** (k + h) for k in (n, n * 0.8, n * 1.25)]
            assert frac[0] >= max(frac[1:])
        eng._noise_bytes, eng._noise_errors = 1e6, 1e5
        assert eng.chunk_bytes() == lp.RELIABILITY["min_chunk"]
    finally:
        link.close()


def test_big_frames_are_recut_on_a_noisy_line():
    dev = MemDevice()
    link = LinkDevice.loopback(dev, inject=FaultSpec.parse("noise=0.002,seed=11"),
                               timeout=0.5, retries=8)
    try:
        assert copy_run(link, DATA[:60_000]) == EXPECT[:60_000]
        assert link.stats["recut"] > 0 and link.stats["timeouts"] < 10
        assert 0.0005 < link.engine.error_rate < 0.005
        assert link.engine.chunk_bytes() < 1000
    finally:
        link.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_one_in_a_thousand_bytes_damaged_every_run_is_bit_identical(seed):
    with open_device("sim://") as local:
        want = sim_conv(local, seed=seed)
    url = f"loop://?device=sim://&timeout=1&inject=noise=0.001,seed={seed}"
    with open_device(url) as dev:
        for _ in range(3):
            assert sim_conv(dev, seed=seed).tobytes() == want.tobytes()
        assert dev.stats["naks"] + dev.stats["corrupt"] > 0


def test_one_in_a_hundred_bytes_damaged_completes_or_fails_cleanly():
    with open_device("sim://") as local:
        want = sim_conv(local, seed=5)
    outcomes = []
    for seed in (1, 2):
        url = f"loop://?device=sim://&timeout=1&inject=noise=0.01,seed={seed}"
        try:
            with open_device(url) as dev:
                for _ in range(2):
                    assert sim_conv(dev, seed=5).tobytes() == want.tobytes()
                    outcomes.append("ok")
        except (DeviceLost, DeviceNotFound) as e:
            # cleanly: the retries or the handshake's deadline ran out, which bound it
            assert re.search(r"after \d+ retries|within [\d.]+ s", str(e)), str(e)
            outcomes.append("lost")
    assert "ok" in outcomes  # it does make progress, and never a wrong result


def test_at_one_in_a_hundred_bytes_damaged_every_load_succeeds():
    """Issue 25 §4: the INFO answer (about 330 bytes of JSON, which a 1 % line delivers
    intact 1 time in 30) went out in one frame, so 1 load in 10 ran out of resends on it
    (seed 4 here did, deterministically).  It now comes in chunks sized to the line like
    memory transfers, and every load of these ten completes, with INFO cut in pieces."""
    import dvsdk

    from .conftest import ROOT

    for seed in range(1, 11):
        url = f"loop://?device=sim://&timeout=1&inject=noise=0.01,seed={seed}"
        with open_device(url) as dev:
            with dvsdk.load(ROOT / "examples" / "models" / "digits.bin", dev):
                pass
            assert dev.info().backend == "link:sim"
            assert dev.stats["info_chunks"] > 1
