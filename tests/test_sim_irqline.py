"""The simulator's interrupt line (dvsdk.sim.irqline) behaves as threading.Event does: a
raise before the wait, a raise from another thread while one blocks, a timeout, a clear."""

from __future__ import annotations

import threading

from dvsdk.sim.irqline import IrqLine


def test_a_line_raised_before_the_wait_is_there_at_once():
    line = IrqLine()
    assert not line.is_set()
    line.set()
    assert line.is_set() and line.wait(0.0)
    line.clear()
    assert not line.is_set()
    assert line.wait(0.01) is False  # cleared: the wait times out


def test_a_raise_from_another_thread_wakes_every_waiter():
    line = IrqLine()
    results: list[bool] = []
    started = threading.Barrier(4)

    def waiter() -> None:
        started.wait()
        results.append(line.wait(10.0))

    threads = [threading.Thread(target=waiter) for _ in range(3)]
    for t in threads:
        t.start()
    started.wait()
    line.set()
    for t in threads:
        t.join(10.0)
    assert results == [True, True, True]


def test_the_same_answers_as_threading_event():
    line, event = IrqLine(), threading.Event()
    for op in ("set", "set", "clear", "clear", "set", "clear"):
        getattr(line, op)()
        getattr(event, op)()
        assert line.is_set() == event.is_set()
        assert line.wait(0.0) == event.wait(0.0)
