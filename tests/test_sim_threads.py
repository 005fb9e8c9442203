"""The simulator and the runtime's CPU steps call no BLAS (firmware_spec/arithmetic.md: a
BLAS library's sums depend on its kernel and thread count), so the user's numpy threading
is never touched and cannot change a result.

A network with convolutions, an FC layer and CPU steps (including a MatMul and a Softmax)
runs on sim:// while every numpy function that reaches BLAS raises; its output must still
come, and equal the run with BLAS allowed, and the BLAS thread count is what the user set.
"""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from dvsdk.compiler.build import compile as compile_model
from dvsdk.runtime.net import Net

from .onnx_models import NetBuilder

BLAS_ENTRY_POINTS = ("matmul", "dot", "vdot", "inner", "tensordot", "einsum", "outer")


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


def _net():
    b = NetBuilder(5)
    h = b.node("Relu", [b.conv("x", 8, 16, k=3)])
    h = b.conv(h, 16, 16, k=3, group=16)
    h = b.node("HardSwish", [h])                              # a CPU step
    h = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    h = b.node("MatMul", [h, b.const(np.random.default_rng(1).standard_normal(
        (16, 10)).astype(np.float32))])                        # a CPU matrix product
    y = b.node("Softmax", [h], axis=1)
    return compile_model(b.model([("x", (1, 8, 20, 20))], [y], "no_blas"), golden=False)


def test_the_simulator_and_the_cpu_steps_call_no_blas(monkeypatch):
    netfile = _net()
    assert any(s["kind"] == "cpu" for s in netfile.meta["program"])
    x = np.random.default_rng(2).standard_normal((1, 8, 20, 20)).astype(np.float32)
    with Net(netfile, "sim://") as net:
        allowed = next(iter(net.run(x).values()))

    def trap(*args, **kwargs):
        raise AssertionError("BLAS was called")

    for name in BLAS_ENTRY_POINTS:
        monkeypatch.setattr(np, name, trap)
    with Net(netfile, "sim://") as net:
        trapped = next(iter(net.run(x).values()))
    assert np.array_equal(allowed.view(np.uint32), trapped.view(np.uint32))


@pytest.mark.skipif(not _blas_threads(), reason="numpy has no BLAS threadpool")
def test_the_users_blas_threads_stay_as_set():
    netfile = _net()
    x = np.random.default_rng(3).standard_normal((1, 8, 20, 20)).astype(np.float32)
    with threadpool_limits(2, user_api="blas"):
        before = _blas_threads()
        with Net(netfile, "sim://") as net:
            net.run(x)
            assert _blas_threads() == before
        assert _blas_threads() == before == [2] * len(before)
