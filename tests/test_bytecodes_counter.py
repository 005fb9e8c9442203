"""tests/bytecodes.py leaves the process as it found it: the tracer that was set before
(a coverage tool's, a debugger's) and every method it labels, also when the counted run
fails half-way (it patches the runtime's classes, which later tests use)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from dvsdk.driver import irqline
from dvsdk.driver.device import DmaBuffer
from dvsdk.hw import layout
from dvsdk.runtime import cpusteps
from dvsdk.runtime.net import Net

from .bytecodes import count, ioctl_sync
from .conftest import ROOT
from .fakeboard import open_fake_device

DIGITS = str(ROOT / "examples" / "models" / "digits.bin")
LABELLED = [(Net, "_step"), (cpusteps, "step"), (cpusteps, "run_fused"),
            (DmaBuffer, "sync_for_cpu"), (DmaBuffer, "sync_for_device"), (layout, "pack"),
            (layout, "unpack"), (irqline.IrqLine, "wait")]


def _originals() -> list:
    return [owner.__dict__[attr] for owner, attr in LABELLED]


@pytest.mark.parametrize("fail", [False, True])
def test_counting_puts_back_the_tracer_and_the_methods(tmp_path, monkeypatch, fail):
    before = _originals()
    if fail:  # the counted (third) run raises inside the traced region
        real, calls = Net.run, []

        def third_fails(self, *a, **k):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("the counted run failed")
            return real(self, *a, **k)

        monkeypatch.setattr(Net, "run", third_fails)

    def tracer(frame, event, arg):  # noqa: ANN001 - sys.settrace's signature
        return None

    previous = sys.gettrace()
    with ioctl_sync(True):
        dev = open_fake_device(tmp_path, kick="r5")
        try:
            sys.settrace(tracer)
            try:
                if fail:
                    with pytest.raises(RuntimeError, match="counted run"):
                        count(DIGITS, np.zeros((1, 1, 16, 16), np.float32), dev)
                else:
                    c = count(DIGITS, np.zeros((1, 1, 16, 16), np.float32), dev)
                    assert c.events["segment"] == 1 and c.ops["run"] > 0
                after = sys.gettrace()
            finally:
                sys.settrace(previous)
        finally:
            dev.close()
    assert after is tracer
    assert _originals() == before
