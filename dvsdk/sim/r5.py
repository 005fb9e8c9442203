"""The Cortex-R5 control program and its IPI channel, as the simulator models them (§10.4).

Since March 2019 DMP's kernel does not kick the conv block itself: it writes the first
stream chunk's address, its length in 8-byte units and a start flag into shared memory
(``shm``) and triggers the R5 through the Zynq UltraScale+ IPI (``TRIG = 0x100``).  The R5
firmware runs the stream on the conv block and, once the stream's final interrupt write
(word 0x108 = byte 0x420) has happened, acknowledges the conv interrupt and raises the
IPI back (``ISR`` bit 0x100), which the kernel acknowledges by writing 0x100 to ``ISR``.

What the firmware does in between is not published; this model is our reading
([INFER], ``firmware_spec/README.md`` "Kick and interrupt"):

* a trigger with ``STREAM_START == 1`` consumes the flag (writes 0), puts the address and
  length into the conv block's ``CMD_ADDR``/``CMD_LEN`` and starts it (the pre-R5 kick);
  a trigger without it does nothing;
* the conv interrupt line belongs to the R5: every conv completion (also of a stream the
  CPU kicked directly) is acknowledged by the R5 and becomes the IPI, so a CPU waiting on
  the conv interrupt of an R5 board waits for ever;
* the IPI channel starts masked (``IMR`` all ones): a driver that skips the probe-time
  ``IDR``/``ISR``/``IER`` sequence never hears the completion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..hw.spec import SPEC

IPI = {n: SPEC.reg("ipi", n) // 4 for n in SPEC.unit("ipi")["registers"]}
SHM = {n: SPEC.reg("shm", n) // 4 for n in SPEC.unit("shm")["registers"]}
CHANNEL = int(SPEC.registers["kick"]["r5"]["pending"][2])  # 0x100: the R5 channel bit
CONV_CMD_ADDR = SPEC.reg("conv", "CMD_ADDR") // 4
CONV_CMD_LEN = SPEC.reg("conv", "CMD_LEN") // 4
CONV_IRQ = SPEC.reg("conv", "IRQ") // 4
#: words of each window the simulator keeps (the SHM window is 16 MiB; the kick uses 12 B)
_TRIG, _ISR, _IER, _IDR = IPI["TRIG"], IPI["ISR"], IPI["IER"], IPI["IDR"]
_IMR, _OBS = IPI["IMR"], IPI["OBS"]
_STREAM_START, _STREAM_ADDR = SHM["STREAM_START"], SHM["STREAM_ADDR"]
_STREAM_LEN8 = SHM["STREAM_LEN8"]
WINDOW_WORDS = {"ipi": int(SPEC.unit("ipi")["size"]) // 4,
                "shm": int(SPEC.unit("shm")["map_bytes"]) // 4}


class R5Firmware:
    """The R5 and the IPI channel of one simulated DV700 (module docstring)."""

    def __init__(self, core: Any, cpu_irq: Callable[[str], None] | None) -> None:
        self.core = core
        self.cpu_irq = cpu_irq  # the CPU's interrupt controller (the device's on_irq)
        self.triggers = 0

    @property
    def ipi(self) -> Any:
        return self.core.regs["ipi"]

    def power_on(self) -> None:
        self.ipi[IPI["IMR"]] = 0xFFFFFFFF

    def reset(self) -> None:
        """Device reset: no pending trigger or completion; the mask stays as programmed."""
        self.ipi[IPI["ISR"]] = 0
        self.ipi[IPI["OBS"]] = 0

    def route(self, unit: str) -> None:
        """The core's interrupt output: conv goes to the R5, the other units to the CPU."""
        if unit == "conv":
            self.conv_done()
        elif self.cpu_irq is not None:
            self.cpu_irq(unit)

    def write(self, offset: int, value: int) -> None:
        """A CPU write to the IPI channel."""
        ipi, word = self.core.regs["ipi"], offset >> 2
        if word == _TRIG:
            if value & CHANNEL:
                ipi[_OBS] |= CHANNEL
                self._trigger()
        elif word == _ISR:
            ipi[word] &= ~value & 0xFFFFFFFF  # write 1 to clear
        elif word == _IER:
            ipi[_IMR] &= ~value & 0xFFFFFFFF
            self._deliver()
        elif word == _IDR:
            ipi[_IMR] |= value
        # OBS and IMR are read-only; other offsets of the channel hold nothing

    def _trigger(self) -> None:
        self.triggers += 1
        core = self.core
        regs = core.regs
        shm = regs["shm"]
        regs["ipi"][_OBS] &= ~CHANNEL & 0xFFFFFFFF  # the R5 took the trigger
        if shm[_STREAM_START] != 1:
            return
        shm[_STREAM_START] = 0
        conv = regs["conv"]
        conv[CONV_CMD_ADDR] = shm[_STREAM_ADDR]
        conv[CONV_CMD_LEN] = shm[_STREAM_LEN8]
        core.start("conv")

    def conv_done(self) -> None:
        """The conv block interrupted: acknowledge it there and raise the IPI."""
        regs = self.core.regs
        regs["conv"][CONV_IRQ] = 0
        ipi = regs["ipi"]
        ipi[_ISR] |= CHANNEL
        if ipi[_ISR] & ~ipi[_IMR] & CHANNEL and self.cpu_irq is not None:  # (_deliver)
            self.cpu_irq("ipi")

    def _deliver(self) -> None:
        ipi = self.core.regs["ipi"]
        if ipi[_ISR] & ~ipi[_IMR] & CHANNEL and self.cpu_irq is not None:
            self.cpu_irq("ipi")
