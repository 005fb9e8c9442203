"""Counting the runtime's Python work per event in bytecodes (``sys.settrace`` opcode
events), for ``benchmarks/bench_bytecodes.py`` and the test that holds
:mod:`dvsdk.runtime.board_model`'s constants to the code (``tests/test_board_model.py``).
The benchmark's docstring says what is charged to what."""

from __future__ import annotations

import collections
import fcntl
import sys
import time
from contextlib import contextmanager

from dvsdk.driver import irqline
from dvsdk.driver.device import DmaBuffer
from dvsdk.hw import layout
from dvsdk.runtime import cpusteps
from dvsdk.runtime.net import Net

#: the board model's constant each label is compared with
MODEL = {"segment": "segment_bytecodes", "sync": "sync_bytecodes",
         "convert": "convert_bytecodes", "step (fused)": "step_fused_bytecodes",
         "step (numpy)": "step_numpy_bytecodes"}


class Counter:
    """Opcodes per label (the innermost :meth:`label` open), and events per label."""

    def __init__(self) -> None:
        self.ops: collections.Counter = collections.Counter()
        self.events: collections.Counter = collections.Counter()
        self.stack = ["run"]
        self.on = False
        self.fused = False

    def trace(self, frame, event, arg):  # noqa: ANN001 - sys.settrace's signature
        frame.f_trace_opcodes = True
        if event == "opcode" and self.on:
            self.ops[self.stack[-1]] += 1
        return self.trace

    @contextmanager
    def label(self, name: str):
        """Charge what runs inside to ``name``.  A CPU step (``step``) is a fused one if it
        ran a fused plan (``fused``), else a numpy one: its opcodes go to either label."""
        if name == "fused":
            self.fused = True
            yield
            return
        if name == "step":
            self.fused = False
        self.stack.append(name)
        try:
            yield
        finally:
            self.stack.pop()
            if name == "step":
                kind = "step (fused)" if self.fused else "step (numpy)"
                self.ops[kind] += self.ops.pop("step", 0)
                name = kind
            if self.on:
                self.events[name] += 1


def _wrap(counter: Counter, owner, attr: str, name, patches: list) -> None:
    """Run ``owner.attr`` under ``counter.label(name(args))`` (``name`` None: unlabelled)."""
    original = getattr(owner, attr)

    def wrapper(*args, **kw):
        label = name(*args, **kw)
        if label is None:
            return original(*args, **kw)
        with counter.label(label):
            return original(*args, **kw)

    patches.append((owner, attr, original))
    setattr(owner, attr, wrapper)


def _patch(counter: Counter, patches: list) -> None:
    """Label the runtime's events, each patch into ``patches`` as it is made (undone by the
    caller, in reverse, even when a patch fails half-way)."""
    _wrap(counter, Net, "_step", lambda net, h, block: "segment"
          if net.steps[h.pc][0] == "hw" else None, patches)
    _wrap(counter, cpusteps, "step", lambda net, h: "step", patches)
    _wrap(counter, cpusteps, "run_fused", lambda *a, **k: "fused", patches)
    for fn in ("sync_for_cpu", "sync_for_device"):
        _wrap(counter, DmaBuffer, fn, lambda *a, **k: "sync", patches)
    for fn in ("pack", "unpack"):
        _wrap(counter, layout, fn, lambda *a, **k: "convert", patches)
    wait = irqline.IrqLine.wait

    def wait_once(line, deadline):  # (untraced) until the fake board raised it
        was, counter.on = counter.on, False
        line.unmask()
        while line.read_count() == line.seen and time.monotonic() < deadline:
            time.sleep(0.0002)
        counter.on = was
        return wait(line, deadline)

    patches.append((irqline.IrqLine, "wait", wait))
    irqline.IrqLine.wait = wait_once


def count(nf, x, url) -> Counter:
    """The counts of one steady run of ``nf`` on ``url``."""
    counter = Counter()
    with Net(nf, url) as net:
        for _ in range(2):
            net.run(x)
        patches: list = []
        previous = sys.gettrace()  # (a coverage tool's or a debugger's: put back after)
        try:
            _patch(counter, patches)
            # CPython 3.12 enables opcode events at settrace only if some frame has asked
            # for them before (else a process's first count is 0): this frame asks
            sys._getframe().f_trace_opcodes = True
            sys.settrace(counter.trace)
            counter.on = True
            net.run(x)
        finally:
            counter.on = False
            sys.settrace(previous)
            for owner, attr, original in reversed(patches):
                setattr(owner, attr, original)
        # events as the run records them: a kick may take two _step calls (one kicks,
        # one waits), and one cpusteps.step call runs a CPU segment's ops
        st = net.last_run
        counter.events["segment"] = len(st.segments)
        counter.events["step (numpy)"] = (sum(1 for e in st.events if e[0] == "cpu")
                                          - counter.events["step (fused)"])
    return counter


@contextmanager
def ioctl_sync(on: bool):
    """u-dma-buf >= 4.7 syncs with an ioctl on its fd; the fake board's fd is a regular file,
    which refuses it (the driver then falls back to sysfs).  With ``on``, the ioctl
    succeeds and does nothing (the kernel's work is not Python), so the counts are those of
    the ioctl path."""
    if not on:
        yield
        return
    real = fcntl.ioctl
    fcntl.ioctl = lambda fd, code, arg=0: 0
    try:
        yield
    finally:
        fcntl.ioctl = real
