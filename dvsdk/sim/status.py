"""What the simulated hardware reports when it cannot execute: SIM_STATUS codes.

:class:`HardwareError` is internal to the simulator: the unit that meets the condition
raises it, and :class:`~dvsdk.sim.engine.Dv700Core` turns it into ``SIM_STATUS`` /
``SIM_FAULT_ADDR`` and an interrupt.  It never reaches the host.
"""

from __future__ import annotations

from ..hw.spec import SPEC

STATUS = SPEC.status


class HardwareError(Exception):
    """Internal: a condition the hardware reports through SIM_STATUS."""

    def __init__(self, status: str, address: int, reason: str) -> None:
        super().__init__(reason)
        self.status = STATUS[status]
        self.address = address
        self.reason = reason


class Hang(HardwareError):
    """Internal: the watchdog stopped a kick (``firmware_spec/stream.yaml``
    ``simulator_watchdog``).  The unit reports ``hang`` and raises no interrupt."""

    def __init__(self, address: int, reason: str) -> None:
        super().__init__("hang", address, reason)
