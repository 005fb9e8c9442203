"""A committed stream is worked out ahead of its first kick (``dvsdk/sim/warm.py``): the
first run of a loaded net decodes no weights and plans no configuration, and nothing the
warm-up does is observable (outputs, registers, counters, coherence reports), including
when the weights change after the commit."""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.compiler.build import compile as compile_model
from dvsdk.errors import CoherenceError
from dvsdk.runtime.net import Net
from dvsdk.sim import conv_unit, warm
from dvsdk.sim.device import SimDevice

from .onnx_models import NetBuilder


@pytest.fixture(scope="module")
def netfile():
    """Conv, depthwise, max-pool, FC: every kind of weight block and a two-run command."""
    b = NetBuilder(21)
    h = b.node("Relu", [b.conv("x", 8, 16, k=3)])
    h = b.node("Relu", [b.conv(h, 16, 16, k=3, group=16)])
    h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.conv(h, 16, 24, k=1)
    y = b.node("Gemm", [b.node("Flatten", [h]), b.const(np.random.default_rng(2).standard_normal(
        (24 * 8 * 8, 10)).astype(np.float32) * 0.05)])
    return compile_model(b.model([("x", (1, 8, 16, 16))], [y], "warm"), golden=False)


X = np.random.default_rng(5).uniform(-1, 1, (1, 8, 16, 16)).astype(np.float32)


def _bits(out: dict) -> list:
    return [np.ascontiguousarray(v).view(np.uint32).tolist() for v in out.values()]


def _no_warm(monkeypatch):
    monkeypatch.setattr(SimDevice, "stream_committed", lambda self, a, n: None)


def test_the_first_run_decodes_and_plans_nothing_and_gives_the_same_bits(netfile,
                                                                        monkeypatch):
    def state(core) -> list:
        return [core.cfg_mem.tolist(), dict(core.stats)] + [
            r.tolist() for _, r in sorted(core.regs.items())]

    with monkeypatch.context() as m:
        _no_warm(m)
        with Net(netfile, "sim://") as net:
            cold_loaded = state(net.device.core)
            cold = _bits(net.run(X))
            cold_ran = state(net.device.core)
    with Net(netfile, "sim://") as net:
        core = net.device.core
        assert core.weight_cache and core.conv_plans  # worked out at load
        assert state(core) == cold_loaded  # registers, controller memory, counters

        def refuse(*args):
            raise AssertionError("worked out at the kick")

        with monkeypatch.context() as m:
            m.setattr(conv_unit, "_decode_weights", refuse)
            m.setattr(conv_unit, "_plan", refuse)
            assert _bits(net.run(X)) == cold
        assert state(core) == cold_ran


def test_weights_changed_after_the_commit_are_decoded_at_the_kick(netfile, monkeypatch):
    def run_changed(net: Net) -> list:
        blob = net.weights.read(0, 64)
        net.weights.write(0, blob[::-1].copy())  # the first run's weights and bias
        net.weights.sync_for_device()
        return _bits(net.run(X))

    with monkeypatch.context() as m:
        _no_warm(m)
        with Net(netfile, "sim://") as net:
            want = run_changed(net)
    with Net(netfile, "sim://") as net:
        first = _bits(net.run(X))
        got = run_changed(net)
    assert got == want and got != first


def test_weights_stored_without_sync_after_the_commit_are_still_reported(netfile):
    with Net(netfile, "sim://") as net:
        blob = net.weights.read(0, 64)
        net.weights.write(0, blob[::-1].copy())   # no sync_for_device
        with pytest.raises(CoherenceError, match="weights"):
            net.run(X)


def test_a_stream_the_hardware_cannot_run_is_left_to_the_kick():
    sim = SimDevice(dram_mb=8)
    try:
        core = sim.core
        cfg, regs = core.cfg_mem.copy(), {u: r.copy() for u, r in core.regs.items()}
        buf = sim.alloc(64)
        buf.write(0, np.full(16, 0xFFFFFFFF, np.uint32))  # no packet the processor knows
        buf.sync_for_device()
        for addr, n8 in ((buf.phys, 8), (buf.phys + 4, 8), (sim.dram_base - 64, 8),
                         (buf.phys, 1 << 30)):
            warm.warm_stream(core, addr, n8)
        assert np.array_equal(cfg, core.cfg_mem) and not core.conv_plans
        assert all(np.array_equal(regs[u], r) for u, r in core.regs.items())
        assert core.stats["kicks"] == 0 and not core.errors
    finally:
        sim.close()
