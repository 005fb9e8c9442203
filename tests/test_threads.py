"""Threads: one Net, one CommandList or one device used from several threads gives the
answers a single thread gets (the hardware is serial: work takes turns), or a clear error.

References: the bundled digits model (examples/models/) run by onnxruntime on the same
inputs, and, bit for bit, the same net run from one thread.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import ConvCommand, ConvRun
from dvsdk.errors import DeviceBusy, InvalidCommand
from dvsdk.hw.weights import pack_conv_weights

from .conftest import ROOT
from .hw import download_tensor, upload, upload_tensor

DIGITS = ROOT / "examples" / "models" / "digits.bin"
DIGITS_ONNX = ROOT / "examples" / "models" / "digits.onnx"
THREADS, RUNS = 4, 100


@pytest.fixture(scope="module")
def inputs() -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    return [rng.random((1, 1, 16, 16), dtype=np.float32) for _ in range(8)]


@pytest.fixture(scope="module")
def onnx_probs(inputs) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(DIGITS_ONNX), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    return [sess.run(None, {name: x})[0] for x in inputs]


def _hammer(work, threads: int = THREADS) -> Counter:
    """Run ``work(thread_index)`` in ``threads`` threads; count outcomes and errors."""
    outcomes: Counter = Counter()
    lock = threading.Lock()

    def body(t: int) -> None:
        for result in work(t):
            with lock:
                outcomes[result] += 1

    ts = [threading.Thread(target=body, args=(t,)) for t in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a thread hung"
    return outcomes


def _net_runs(net, inputs, expected, t: int):
    for i in range(RUNS):
        k = (3 * t + i) % len(inputs)
        try:
            (probs,) = net.run(inputs[k]).values()
            yield "ok" if np.array_equal(probs, expected[k]) else "wrong"
        except Exception as e:  # noqa: BLE001 - every failure is counted and shown
            yield f"{type(e).__name__}: {e}"[:120]


@pytest.mark.parametrize("backend", ["sim", "uio", "uio-r5", "dv"])
def test_one_net_shared_by_four_threads_gives_400_correct_outputs(backend, inputs, onnx_probs):
    if backend == "sim":
        dev = dvsdk.open_device("sim://")
    elif backend == "dv":
        from .fakedv import open_fake_kmod

        dev = open_fake_kmod()
    else:
        from .fakeboard import open_fake_device

        dev = open_fake_device(kick="r5" if backend == "uio-r5" else "direct")
    try:
        with dvsdk.load(DIGITS, dev) as net:
            expected = [next(iter(net.run(x).values())) for x in inputs]  # one thread
            for got, ref in zip(expected, onnx_probs):  # ... agrees with onnxruntime
                np.testing.assert_allclose(got, ref, atol=2e-2)
                assert got.argmax() == ref.argmax()
            outcomes = _hammer(lambda t: _net_runs(net, inputs, expected, t))
    finally:
        dev.close()
    assert outcomes == {"ok": THREADS * RUNS}, outcomes


def test_two_nets_on_one_device_from_threads(inputs, onnx_probs):
    """Two nets share a device; two threads each: the nets take turns on the conv unit,
    including run_async's pipelined kick, which waits when the other net holds the unit."""
    with dvsdk.open_device("sim://") as dev, dvsdk.load(DIGITS, dev) as a, \
            dvsdk.load(DIGITS, dev) as b:
        expected = [next(iter(a.run(x).values())) for x in inputs]

        def work(t: int):
            net = (a, b)[t % 2]
            for i in range(25):
                k = (t + i) % len(inputs)
                h1 = net.run_async(inputs[k])
                h2 = net.run_async(inputs[(k + 1) % len(inputs)])
                for h, kk in ((h1, k), (h2, (k + 1) % len(inputs))):
                    (probs,) = h.wait().values()
                    yield "ok" if np.array_equal(probs, expected[kk]) else "wrong"

        outcomes = _hammer(work)
    assert outcomes == {"ok": THREADS * 50}, outcomes


def test_runs_start_in_order_when_another_net_held_the_unit(inputs):
    """run_async could not kick its run while another net's exec held the unit; the next
    run_async must kick that older run first (before: it kicked the newer one, and the
    older one's wait then met its own thread's exec on the unit)."""
    with dvsdk.open_device("sim://") as dev, dvsdk.load(DIGITS, dev) as a, \
            dvsdk.load(DIGITS, dev) as b:
        expected = [next(iter(a.run(x).values())) for x in inputs[:2]]
        other = b._contexts[0].lists[0]
        held = threading.Event()
        go = threading.Event()

        def hold() -> None:  # another thread: b's exec holds the conv unit a while
            exec_id = other.exec()
            held.set()
            go.wait(5)
            other.wait(exec_id)

        t = threading.Thread(target=hold)
        t.start()
        held.wait(5)
        h1 = a.run_async(inputs[0])
        assert h1.exec_id is None          # the unit is busy: not kicked
        go.set()
        t.join(5)
        h2 = a.run_async(inputs[1])
        assert h1.exec_id is not None and h2.exec_id is None  # the older run goes first
        for h, want in ((h1, expected[0]), (h2, expected[1])):
            np.testing.assert_array_equal(next(iter(h.wait().values())), want)


def _conv_list(dev, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.choice([-1.0, 1.0, 2.0], (6, 7, 8)).astype(np.float32)
    w = rng.choice([-1.0, 1.0], (4, 8, 1, 1)).astype(np.float32)
    ib = upload_tensor(dev, x)
    wb = upload(dev, pack_conv_weights(w, np.zeros(4, np.float32)))
    ob = dev.alloc(6 * 7 * 4 * 2)
    cl = CommandList(dev)
    cl.add(ConvCommand(input_buf=ib, output_buf=ob, w=7, h=6, c=8,
                       runs=[ConvRun.make(4, conv="conv", kernel=1, weights=wb)]))
    cl.commit()
    ref = x @ w[:, :, 0, 0].T  # 1x1 conv written for the test
    return cl, ob, ref


@pytest.mark.parametrize("backend", ["sim", "uio"])
def test_command_lists_of_one_device_take_turns(backend):
    """Each thread runs its own list and, every third time, a list shared by all."""
    if backend == "sim":
        dev = dvsdk.open_device("sim://")
    else:
        from .fakeboard import open_fake_device

        dev = open_fake_device()
    try:
        lists = [_conv_list(dev, s) for s in range(THREADS + 1)]
        shared = lists[-1][0]

        def work(t: int):
            cl, ob, ref = lists[t]
            for i in range(30):
                if i % 3 == 0:
                    shared.run(timeout=5.0)
                    yield "shared"
                    continue
                cl.run(timeout=5.0)
                got = download_tensor(ob, ref.shape)
                yield "ok" if np.array_equal(got, ref) else "wrong"

        outcomes = _hammer(work)
        _, ob, ref = lists[-1]
        np.testing.assert_array_equal(download_tensor(ob, ref.shape), ref)
    finally:
        dev.close()
    assert outcomes == {"ok": THREADS * 20, "shared": THREADS * 10}, outcomes


def test_a_second_exec_on_a_busy_unit_is_refused_or_waits():
    with dvsdk.open_device("sim://") as dev:
        (a, _, _), (b, _, _) = _conv_list(dev, 1), _conv_list(dev, 2)
        ida = a.exec()
        # this thread would wait for itself: refused at once
        with pytest.raises(InvalidCommand, match="wait\\(\\) for it first"):
            b.exec()
        assert b.try_exec() is None
        # another thread waits for the unit, and gives up after its timeout
        errors = []

        def other() -> None:
            try:
                b.exec(timeout=0.05)
            except DeviceBusy as e:
                errors.append(e)

        t0 = time.monotonic()
        th = threading.Thread(target=other)
        th.start()
        th.join(60)  # (a bound against a hang only)
        # it waited its timeout out (a lower bound: no machine is too slow for it), then
        # gave up with DeviceBusy
        assert not th.is_alive() and len(errors) == 1 and time.monotonic() - t0 >= 0.05
        assert "conv unit stayed busy" in str(errors[0]) and errors[0].exit_code == 3
        # ... and gets it as soon as the holder's wait ends
        th = threading.Thread(target=lambda: b.wait(b.exec(timeout=5.0), 5.0))
        th.start()
        time.sleep(0.05)
        assert th.is_alive()  # still waiting for the unit
        a.wait(ida)
        th.join(60)
        assert not th.is_alive() and b.last.cycles
        # a list closed with an exec in flight gives the unit back
        a.exec()
        a.close()
        b.run()


def test_waiters_on_a_shared_uio_line(tmp_path):
    """Combined node: conv and IPU share one interrupt line; a waiter for each unit in
    its own thread (before: RuntimeError concurrent poll() invocation)."""
    from dvsdk.driver.uio import UioDevice

    from .fakeboard import make_fake_board

    b = make_fake_board(tmp_path, mode="combined", core="stub")
    try:
        with UioDevice.from_url(b.url) as d:
            errors: list[BaseException] = []

            def waiter(unit: str, start: int) -> None:
                try:
                    for _ in range(20):
                        d.gate.acquire(unit, threading.current_thread(), 5.0)
                        try:
                            d.write32(unit, start, 1)
                            d.wait_irq(unit, 5.0)
                        finally:
                            d.gate.release(unit, threading.current_thread())
                except BaseException as e:  # noqa: BLE001
                    errors.append(e)

            ts = [threading.Thread(target=waiter, args=a)
                  for a in (("conv", 0x408), ("ipu", 0x2A0))]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            assert not errors, errors
            assert b.irqs["conv"] == 20 and b.irqs["ipu"] == 20
    finally:
        b.close()


# -- issue 25 §5: a dropped run_async handle, and who holds a unit ---------------------------


def test_a_dropped_run_async_handle_gives_its_unit_back(inputs):
    """Before: the dropped handle's exec kept the conv unit, so the other net failed at once
    in this thread (InvalidCommand) and, in another, waited its whole timeout for a wait
    that never came, then got DeviceBusy."""
    with dvsdk.open_device("sim://") as dev, dvsdk.load(DIGITS, dev) as a, \
            dvsdk.load(DIGITS, dev) as b:
        want = [next(iter(a.run(x).values())) for x in inputs[:2]]
        a.run_async(inputs[1])  # kicked, and the handle dropped at once
        np.testing.assert_array_equal(next(iter(b.run(inputs[0]).values())), want[0])
        a.run_async(inputs[1])
        got: list = []
        th = threading.Thread(target=lambda: got.append(b.run(inputs[0], timeout=0.05)))
        th.start()
        th.join(60)  # (a bound against a hang only)
        assert len(got) == 1  # served, not DeviceBusy after its timeout
        np.testing.assert_array_equal(next(iter(got[0].values())), want[0])
        # the net that dropped them completes them in order and answers right after
        np.testing.assert_array_equal(next(iter(a.run(inputs[1]).values())), want[1])


def test_a_unit_kept_too_long_names_its_holder(inputs):
    with dvsdk.open_device("sim://") as dev, dvsdk.load(DIGITS, dev) as a, \
            dvsdk.load(DIGITS, dev) as b:
        h = a.run_async(inputs[0])  # kept, never waited for (yet)
        errors: list = []

        def other() -> None:
            try:
                b.run(inputs[0], timeout=0.05)
            except DeviceBusy as e:
                errors.append(e)

        th = threading.Thread(target=other, name="other-net")
        th.start()
        th.join(60)
        assert len(errors) == 1, errors
        text = str(errors[0])
        assert "conv unit stayed busy for 0.05 s: held by net 'digits.bin' segment" in text
        assert "not waited for yet" in text and "thread 'MainThread'" in text
        assert errors[0].holder in text
        h.wait()
        b.run(inputs[0])  # free again
