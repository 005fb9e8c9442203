"""How a conv command stream is started and how its completion is taken (reference §10.4).

Two protocols, both described write by write in ``firmware_spec/registers.yaml`` (``kick``):

* ``r5`` (DMP's kernel since March 2019, what a board running DMP's current image
  expects): the first chunk's address, its length in 8-byte units and the start flag go
  into shared memory (``shm``), then ``IPI TRIG = 0x100`` wakes the Cortex-R5 control
  program.  The R5 runs the stream and answers with an IPI: the completion is bit 0x100 of
  the IPI's ``ISR``, acknowledged by writing 0x100 back (write-1-to-clear).  At open the IPI
  channel is masked, cleared and unmasked (``IDR``, ``ISR``, ``IER`` twice), as the
  kernel's probe does.  The stream's final interrupt write (word 0x108 = byte 0x420) is
  what the R5 firmware turns into that IPI ([INFER] §10.2, ``firmware_spec/README.md``).
* ``direct`` (the kernel before March 2019, bitstreams without the R5 firmware):
  ``CMDLIST_MODE`` (0x40C) = 1 at open, then ``CMD_ADDR``, ``CMD_LEN``, ``KICK`` in the conv
  window; the conv interrupt (0x420) is acknowledged by writing 0.

A protocol only touches registers through :meth:`Device.read32` / :meth:`Device.write32`
and waits through :meth:`Device.wait_irq`, so every register-level backend (``sim://``,
``uio://``, the link) speaks both; ``ipi`` and ``shm`` are register windows of the devices
that have them.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidArgument
from ..hw.spec import SPEC
from .device import Device

KICK_PROTOCOLS = ("r5", "direct")
#: what a stock board runs today (DMP's current kernel and R5 firmware, §10.4)
DEFAULT_KICK = "r5"
_SPEC = SPEC.registers["kick"]

Write = tuple[str, int, object]  # (window, byte offset, value or "address"/"length8")


def _writes(rows: list) -> tuple[Write, ...]:
    return tuple((w, SPEC.reg(w, name), value) for w, name, value in rows)


@dataclass(frozen=True)
class KickProtocol:
    """One protocol of ``registers.yaml`` ``kick``, with offsets resolved."""

    name: str
    open_writes: tuple[Write, ...]
    start_writes: tuple[Write, ...]
    irq_line: str
    pending: tuple[str, int, int]  # (window, offset, mask): a completion is pending
    ack: tuple[str, int, int]      # (window, offset, value): acknowledge it

    @property
    def windows(self) -> tuple[str, ...]:
        """The register windows this protocol uses (besides the command units)."""
        seen = dict.fromkeys(w for w, _, _ in self.open_writes + self.start_writes)
        return tuple(w for w in seen if w not in ("conv", "ipu", "maximizer"))

    def on_open(self, dev: Device) -> None:
        """The probe-time writes (performance counters, command-list mode or the IPI
        mask/clear/unmask sequence)."""
        for window, offset, value in self.open_writes:
            dev.write32(window, offset, int(value))  # type: ignore[call-overload]

    def acknowledge(self, dev: Device) -> bool:
        """If a completion is pending, acknowledge it as the kernel's handler does; True if
        one was."""
        window, offset, mask = self.pending
        if dev.read32(window, offset) & mask:
            dev.write32(*self.ack)
            return True
        return False

    def start(self, dev: Device, address: int, length8: int) -> None:
        """Start the stream whose first chunk is ``length8`` 8-byte units at ``address``.
        A completion left pending by an earlier kick (one that timed out) is acknowledged
        first, so it cannot end this kick's wait."""
        writes = self.start_plan(address, length8)
        self.acknowledge(dev)
        for window, offset, value in writes:
            dev.write32(window, offset, value)

    def start_plan(self, address: int, length8: int) -> tuple[tuple[str, int, int], ...]:
        """The register writes of :meth:`start` (after its acknowledge) for the stream at
        ``address``, checked and resolved once: a committed list kicks the same stream every
        time (:class:`~dvsdk.driver.submit.RegisterSubmission` keeps them)."""
        if not 0 <= address <= 0xFFFFFFFF or address % 8:
            raise InvalidArgument("stream address must be 8-byte aligned below 4 GiB",
                                  field="address", value=address, limit="8k < 2^32")
        if not 0 < length8 <= 0xFFFFFFFF:
            raise InvalidArgument("stream length out of range", field="length8",
                                  value=length8, limit="1..0xFFFFFFFF")
        values = {"address": address, "length8": length8}
        return tuple((window, offset, int(values[value]) if isinstance(value, str)
                      else int(value))  # type: ignore[call-overload]
                     for window, offset, value in self.start_writes)

    def wait(self, dev: Device, timeout: float) -> None:
        """Wait for the completion interrupt and acknowledge it (DeviceTimeout after
        ``timeout`` s)."""
        dev.wait_irq(self.irq_line, timeout)
        self.acknowledge(dev)


def _load(name: str) -> KickProtocol:
    d = _SPEC[name]
    pw, pname, pmask = d["pending"]
    aw, aname, aval = d["ack"]
    return KickProtocol(name, _writes(d["open"]), _writes(d["start"]), d["irq_line"],
                        (pw, SPEC.reg(pw, pname), int(pmask)), (aw, SPEC.reg(aw, aname),
                                                                int(aval)))


PROTOCOLS: dict[str, KickProtocol] = {name: _load(name) for name in KICK_PROTOCOLS}


def protocol(name: str) -> KickProtocol:
    """The :class:`KickProtocol` called ``name`` (``r5`` or ``direct``)."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise InvalidArgument("unknown kick protocol", field="kick", value=name,
                              limit=KICK_PROTOCOLS) from None
