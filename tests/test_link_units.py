"""The agent's raw register accesses take part in the device's unit gate (issue 25 §5).

Command lists hold their unit from exec to wait; the agent's READ32 / WRITE32 / WAIT_IRQ
did not, so a second client (or the agent's own process) could write a unit's registers
in the middle of a run.  Two in-process agents (``LinkDevice.loopback``) serve one
simulator here, as two clients of one device would be served.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.device import open_device
from dvsdk.errors import DeviceBusy, InvalidCommand
from dvsdk.hw.spec import SPEC
from dvsdk.link.client import LinkDevice

from .hw import upload, upload_tensor
from .test_link_guard import _conv

CMD_ADDR, CMD_LEN, KICK = (SPEC.reg("conv", n) for n in ("CMD_ADDR", "CMD_LEN", "KICK"))
IPU_REG = SPEC.reg("ipu", SPEC.unit("ipu")["start"]) - 4  # any IPU register but START


@pytest.fixture
def shared():
    """One simulator (direct kick) and two clients, each through its own agent."""
    sim = open_device("sim://?kick=direct")
    a, b = LinkDevice.loopback(sim), LinkDevice.loopback(sim)
    yield sim, a, b
    a.close()
    b.close()
    sim.close()


def _list(dev):
    x = np.ones((4, 4, 8), np.float32)
    cl = CommandList(dev)
    cl.add(_conv(dev, upload_tensor(dev, x), dev.alloc(4 * 4 * 8 * 2, name="out")))
    cl.commit()
    return cl


def test_another_client_cannot_touch_a_unit_in_the_middle_of_a_run(shared):
    sim, a, b = shared
    cl = _list(a)
    exec_id = cl.exec()  # a's kick: a's session holds conv until a's wait
    for access in (lambda: b.write32("conv", CMD_ADDR, 0x1000),
                   lambda: b.read32("conv", CMD_LEN),
                   lambda: b.wait_irq("conv", 0.0)):
        with pytest.raises(DeviceBusy, match="the conv unit is held by dvsdk-agent client") \
                as e:
            access()
        assert e.value.field == "unit" and "session 0x" in e.value.holder
    b.write32("ipu", IPU_REG, 5)  # another unit: free
    cl.wait(exec_id)
    b.write32("conv", CMD_ADDR, 0x1000)  # a's run is over: free again
    assert b.read32("conv", CMD_ADDR) == 0x1000


def test_a_local_exec_and_a_remote_session_take_turns(shared):
    sim, a, _ = shared
    local = _list(sim)
    exec_id = local.exec()  # the agent's own process holds conv
    with pytest.raises(DeviceBusy, match=r"held by a conv command list \(exec 1, not waited"):
        a.write32("conv", CMD_ADDR, 0x1000)
    local.wait(exec_id)
    remote = _list(a)
    rid = remote.exec()  # now the remote session holds it ...
    errors: list[BaseException] = []

    def other() -> None:  # ... and a local exec waits its timeout out, told who holds it
        try:
            local.exec(timeout=0.05)
        except DeviceBusy as exc:
            errors.append(exc)

    th = threading.Thread(target=other)
    th.start()
    th.join(60)  # (a bound against a hang only)
    assert len(errors) == 1 and "held by dvsdk-agent client" in str(errors[0])
    remote.wait(rid)
    local.run()


def test_registers_someone_else_rewrote_are_not_taken_for_the_sessions(shared):
    """The guard vets a kick against the registers the session wrote; a local run between
    those writes and the kick rewrote CMD_ADDR, so the kick would have started the other
    run's stream, unvetted.  Now the session's registers count as unknown: refused."""
    sim, a, _ = shared
    stream = upload(a, np.zeros(64, np.uint8), name="stream")
    a.write32("conv", CMD_ADDR, stream.phys)
    a.write32("conv", CMD_LEN, 8)
    _list(sim).run()  # the agent's process runs a list: CMD_ADDR is its stream's now
    with pytest.raises(InvalidCommand, match="CMD_ADDR was not written in this session"):
        a.write32("conv", KICK, 1)
