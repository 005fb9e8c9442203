"""Bad input never crashes: damaged net.bin metadata, garbage command streams and
configuration images end in a dvsdk error or a device status, never a raw exception."""

from __future__ import annotations

import copy
import random

import numpy as np
import pytest

import dvsdk
from dvsdk.errors import DvsdkError
from dvsdk.hw.spec import SPEC
from dvsdk.netfile import NetFile, decode, encode
from dvsdk.runtime.net import Net

from . import onnx_models as M

JUNK = [None, -1, -(2**40), 2**40, "x", "", [], {}, [1, 2], {"a": 1}, 1.5, True, "hw", 0]


@pytest.fixture(scope="module")
def net_file() -> NetFile:
    return dvsdk.compile(M.conv_add_relu())


def _paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


def _set(node, path, value):
    """Replace the value at ``path``; a path a previous mutation removed is skipped."""
    try:
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    except (KeyError, IndexError, TypeError):
        pass


def test_damaged_metadata_gives_dvsdk_errors_only(net_file):
    """200 random leaf/subtree replacements in META, CRCs valid: load and run either work
    or raise a dvsdk error naming what is wrong."""
    rng = random.Random(7)
    paths = list(_paths(net_file.meta))
    golden = {n: net_file.array(e, "GOLD") for n, e in net_file.meta["golden"]["inputs"].items()}
    outcomes = {"ok": 0, "error": 0}
    for _ in range(200):
        meta = copy.deepcopy(net_file.meta)
        for _ in range(rng.choice((1, 1, 2))):
            _set(meta, rng.choice(paths), rng.choice(JUNK))
        raw = encode(NetFile(meta=meta, commands=net_file.commands, weights=net_file.weights,
                             constants=net_file.constants, golden=net_file.golden))
        try:
            with Net(decode(raw), "sim://?dram_mb=64") as n:
                n.run(golden, timeout=1.0)
            outcomes["ok"] += 1
        except DvsdkError as e:
            assert str(e)  # one line with the reason
            outcomes["error"] += 1
    assert outcomes["error"] > 50 and outcomes["ok"] > 10, outcomes


def _kick(sim, words: np.ndarray) -> int:
    buf = sim.alloc(max(words.nbytes, 8) + 8, align=64)
    buf.write(0, words.astype("<u4"))
    buf.sync_for_device()
    sim.write32("conv", SPEC.reg("conv", "IRQ"), 0)
    sim.write32("conv", SPEC.reg("conv", "SIM_STATUS"), 0)
    sim.write32("conv", SPEC.reg("conv", "CMD_ADDR"), buf.phys)
    sim.write32("conv", SPEC.reg("conv", "CMD_LEN"), -(-words.nbytes // 8))
    sim.write32("conv", SPEC.reg("conv", "KICK"), 1)
    status = sim.read32("conv", SPEC.reg("conv", "SIM_STATUS"))
    buf.free()
    return status


def test_garbage_streams_set_a_status(sim):
    rng = np.random.default_rng(3)
    statuses = set()
    for i in range(300):
        n = int(rng.integers(1, 64))
        words = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)
        if i % 2:  # plausible write headers with random targets and counts
            words[0] = (words[0] & 0xFFFF0FF8) | 0xF004
        statuses.add(_kick(sim, words))
    assert statuses - {0}, "garbage should be reported"
    assert statuses <= set(SPEC.status.codes.values())


def test_garbage_configuration_images_set_a_status(sim):
    """A valid stream that loads a random configuration image and starts it: the conv
    engine reports bad_config / bad_address (or runs); it never raises or runs away."""
    from dvsdk.driver.stream import write_header, write_packet

    rng = np.random.default_rng(11)
    seen = set()
    for _ in range(150):
        nruns = int(rng.integers(1, 5))
        image = rng.integers(0, 2**32, 8 + 11 * nruns, dtype=np.uint64).astype(np.uint32)
        image[0] = int(rng.integers(1, 1 << nruns))          # topo with 1..nruns runs
        if rng.random() < 0.5:                                # small dimensions sometimes
            image[1] = int(rng.integers(1, 16)) | int(rng.integers(1, 16)) << 16
            image[2] = 1 | int(rng.integers(1, 40)) << 16
        words = np.concatenate([
            np.array(write_packet(SPEC.stream_reg("cfg_addr"), 0x2000), np.uint32),
            np.array([write_header(SPEC.stream_reg("cfg_data"), image.size)], np.uint32),
            image,
            np.array(write_packet(SPEC.stream_reg("start"), 1), np.uint32),
            np.array(write_packet(SPEC.stream_reg("irq"), 1), np.uint32)])
        seen.add(_kick(sim, words))
    assert seen - {0}
    assert seen <= set(SPEC.status.codes.values())
