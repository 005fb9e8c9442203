"""The simulator decides its own BLAS threads (dvsdk.sim.ops.blas_threads), and only inside
its kernels: the user's numpy threading outside a run is what it was."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.hw import layout
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.sim import ops


def _blas_threads() -> list[int]:
    return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]


pytestmark = pytest.mark.skipif(not _blas_threads(), reason="numpy has no BLAS threadpool")


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[list[int]]:
    """Record the BLAS thread counts seen by every np.matmul the simulator makes."""
    seen: list[list[int]] = []
    real = np.matmul

    def matmul(*args, **kwargs):
        seen.append(_blas_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(ops.np, "matmul", matmul)
    return seen


def _upload(dev, raw: np.ndarray):
    buf = dev.alloc(raw.nbytes)
    buf.write(0, raw)
    buf.sync_for_device()
    return buf


def test_a_kick_runs_its_matmuls_on_one_thread_and_restores_the_users_setting(monkeypatch):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (12, 12, 8)).astype(np.float32)
    w = rng.uniform(-1, 1, (16, 8, 3, 3)).astype(np.float32)
    with threadpool_limits(2, user_api="blas"), dvsdk.open_device("sim://") as dev:
        before = threadpool_info()
        inp = _upload(dev, layout.pack(x))
        wts = _upload(dev, np.frombuffer(pack_conv_weights(w, np.zeros(16)), np.uint8))
        out = dev.alloc(12 * 12 * 16 * 2)
        seen = _spy(monkeypatch)
        with CommandList(dev) as cl:
            cl.add(ConvCommand(input_buf=inp, output_buf=out, w=12, h=12, c=8,
                               runs=[ConvRun.make(16, conv="conv", kernel=3, weights=wts,
                                                  pads=1)]))
            cl.commit()
            cl.run()
        assert seen and all(t == [ops.BLAS_THREADS] * len(t) for t in seen), seen
        assert threadpool_info() == before
        assert _blas_threads() == [2] * len(_blas_threads())


def test_nested_blocks_restore_the_setting_once():
    with threadpool_limits(2, user_api="blas"):
        with ops.blas_threads():
            with ops.blas_threads():
                inner = _blas_threads()
            outer = _blas_threads()  # the inner block's exit must not restore yet
        assert inner == outer == [ops.BLAS_THREADS] * len(inner)
        assert _blas_threads() == [2] * len(inner)


def test_other_threads_leave_blas_threads_alone():
    """OpenBLAS misapplies settings made outside the main thread: a kick from a worker
    thread runs with the user's setting, which stays what it was."""
    with threadpool_limits(2, user_api="blas"):
        before = threadpool_info()
        seen: list[list[int]] = []

        def worker() -> None:
            with ops.blas_threads():
                seen.append(_blas_threads())
            x = ops.fp16(np.ones((6, 6, 8), np.float32))
            ops.conv2d(x, np.ones((8, 8, 3, 3), np.float32), None, pads=1)

        t = threading.Thread(target=worker)
        t.start()
        t.join(timeout=10)
        assert seen == [[2] * len(seen[0])]
        assert threadpool_info() == before


def test_conv_results_do_not_depend_on_the_users_threads():
    rng = np.random.default_rng(1)
    x = ops.fp16(rng.uniform(-1, 1, (20, 20, 16)))
    w = ops.fp16(rng.uniform(-1, 1, (24, 16, 3, 3)))
    with threadpool_limits(1, user_api="blas"):
        a = ops.conv2d(x, w, None, pads=1)
    with threadpool_limits(2, user_api="blas"):
        b = ops.conv2d(x, w, None, pads=1)
    assert np.array_equal(a, b)
