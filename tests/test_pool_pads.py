"""Pooling with asymmetric pads (left != top, right != bottom) on the simulator, against a
numpy reference written here, through the compiled loops and through numpy alone.

The compiled fast path (``dvsdk.sim.kernels._pool``) passes only the left and top pads to
its loop (right and bottom set the output size); a max-pool after a conv and a pool-only
average run each take it.  Every value is a small integer, so the conv, the max and the
window sum are exact and the comparison is bit for bit.  ``numpy`` runs with
``native.NATIVE`` off, which is what ``DVSDK_NATIVE=0`` selects at import.
"""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
from dvsdk import native
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.hw.weights import pack_conv_weights

from .hw import download_tensor, upload, upload_tensor

COMPILED = native.NATIVE

#: (pool size (x, y), stride (x, y), pads (left, right, top, bottom)): left != top each time
CASES = [((3, 3), (2, 2), (2, 0, 0, 1)),
         ((3, 3), (1, 1), (0, 2, 1, 0)),
         ((2, 3), (2, 1), (1, 0, 2, 1)),
         ((3, 2), (1, 2), (1, 2, 0, 1)),
         ((3, 1), (3, 1), (2, 1, 0, 0))]


def _padded(x: np.ndarray, pads, fill: float) -> np.ndarray:
    l, r, t, b = pads
    return np.pad(x, ((t, b), (l, r), (0, 0)), constant_values=fill)


def _windows(xp: np.ndarray, size, stride) -> np.ndarray:
    """(OH, OW, C, ky, kx): every window of the padded HWC tensor at the stride."""
    (kx, ky), (sx, sy) = size, stride
    win = np.lib.stride_tricks.sliding_window_view(xp, (ky, kx), axis=(0, 1))
    return win[::sy, ::sx]


def max_pool_numpy(x: np.ndarray, size, stride, pads) -> np.ndarray:
    """Padded positions are -inf: they never win (§4.3)."""
    return _windows(_padded(x, pads, -np.inf), size, stride).max(axis=(-2, -1))


def sum_pool_numpy(x: np.ndarray, size, stride, pads) -> np.ndarray:
    """Average pooling with multiplier 1: the window sum, padded positions 0 (§4.3)."""
    return _windows(_padded(x, pads, 0.0), size, stride).sum(axis=(-2, -1))


@pytest.fixture(params=["compiled", "numpy"])
def loops(request, monkeypatch):
    """Which implementation the simulator runs; for ``compiled``, the calls of the compiled
    pooling loops (so the test knows it went through them)."""
    calls: list[str] = []
    if request.param == "numpy":
        monkeypatch.setenv("DVSDK_NATIVE", "0")  # (chosen: no fallback warning)
        monkeypatch.setattr(native, "NATIVE", None)
        return request.param, calls
    if COMPILED is None:
        pytest.skip("dvsdk._native not built")

    class Counting:
        def __getattr__(self, name):
            real = getattr(COMPILED, name)
            if name not in ("maxpool", "avgpool"):
                return real
            return lambda *a: calls.append(name) or real(*a)

    monkeypatch.setattr(native, "NATIVE", Counting())
    return request.param, calls


def _run(x: np.ndarray, run_for, out_shape) -> np.ndarray:
    """One command over the batch ``x`` (N, H, W, C) on sim://; its output as float32."""
    n, h, w, c = x.shape
    dev = dvsdk.open_device("sim://")
    try:
        ib = upload_tensor(dev, x)
        wb = upload(dev, pack_conv_weights(np.eye(c).reshape(c, c, 1, 1), np.zeros(c)),
                    name="weights")
        ob = dev.alloc(n * int(np.prod(out_shape)) * 2, name="output")
        cmd = ConvCommand(input_buf=ib, output_buf=ob, w=w, h=h, c=c, runs=[run_for(wb)],
                          input_circular_offset=n)
        with CommandList(dev) as cl:
            cl.add(cmd)
            cl.commit()
            cl.run()
        return download_tensor(ob, (n, *out_shape))
    finally:
        dev.close()


def _input(seed: int, batch: int) -> np.ndarray:
    """Distinct integers of both signs (every shifted window differs), below 2048 as are
    the sums of their windows: exact in FP16."""
    h, w, c = 7, 9, 5
    rng = np.random.default_rng(seed)
    x = rng.permutation(np.arange(batch * h * w * c) - 150).reshape(batch, h, w, c)
    return x.astype(np.float32)


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("size,stride,pads", CASES)
def test_max_pool_after_a_conv_with_asymmetric_pads(loops, size, stride, pads, batch):
    """An identity 1x1 conv, then the max-pool: the conv engine's fused max-pool stage."""
    mode, calls = loops
    x = _input(sum(pads), batch)
    ref = np.stack([max_pool_numpy(s, size, stride, pads) for s in x])
    c = x.shape[3]
    y = _run(x, lambda wb: ConvRun.make(c, conv="conv", kernel=1, weights=wb, pool="max",
                                        pool_size=size, pool_stride=stride, pool_pads=pads),
             ref.shape[1:])
    np.testing.assert_array_equal(y, ref)
    assert calls.count("maxpool") == (batch if mode == "compiled" else 0)


@pytest.mark.parametrize("size,stride,pads", CASES)
def test_sum_pool_with_asymmetric_pads(loops, size, stride, pads):
    """A pool-only average run with multiplier 1 (window sums of integers: exact)."""
    mode, calls = loops
    x = _input(7 + sum(pads), 1)
    ref = sum_pool_numpy(x[0], size, stride, pads)[None]
    c = x.shape[3]
    y = _run(x, lambda wb: ConvRun.make(c, pool="avg", pool_size=size, pool_stride=stride,
                                        pool_pads=pads, pool_scale=1.0), ref.shape[1:])
    np.testing.assert_array_equal(y, ref)
    assert calls.count("avgpool") == (1 if mode == "compiled" else 0)
