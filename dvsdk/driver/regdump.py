"""Register snapshots in one line, for the messages of DeviceTimeout and DeviceFault.

A timeout or a fault is diagnosed from a few registers (dv700-interface.md §10.4-10.7):
the unit's interrupt flag, on conv the stream address and length of the kick, and on the
simulator its status code and fault address (``firmware_spec/registers.yaml``).  A wait
for the R5's completion IPI shows the conv block's, the shared memory's and the IPI's.  The
exceptions keep the whole snapshot in ``.registers``; the message carries these, so a
log line or a CLI's one-line error is enough to tell a hang from a lost interrupt.
"""

from __future__ import annotations

from ..hw.spec import SPEC

#: the registers a message shows, per unit, in this order (those the snapshot has)
KEY_REGISTERS: dict[str, tuple[str, ...]] = {
    "conv": ("SIM_STATUS", "SIM_FAULT_ADDR", "CMD_ADDR", "CMD_LEN", "KICK", "IRQ"),
    "ipu": ("SIM_STATUS", "SIM_FAULT_ADDR", "START", "IRQ"),
    "maximizer": ("SIM_STATUS", "SIM_FAULT_ADDR", "START", "IRQ"),
    "ipi": ("SIM_STATUS", "SIM_FAULT_ADDR", "CMD_ADDR", "CMD_LEN", "STREAM_ADDR",
            "STREAM_LEN8", "STREAM_START", "ISR", "IMR", "OBS"),
}
#: the windows whose registers describe a wait on ``unit`` (the R5's IPI: conv, shm, ipi)
RELATED = {"ipi": ("conv", "shm", "ipi")}
#: interrupt bookkeeping a backend may add to its snapshot (UIO event counts)
IRQ_STATE = ("irq_seen", "irq_events")

_NAME_BY_OFFSET = {unit: {SPEC.reg(unit, name): name for name in SPEC.unit(unit)["registers"]}
                   for unit in ("conv", "ipu", "maximizer", "ipi", "shm")}


def by_name(unit: str, registers: dict[str, int]) -> dict[str, int]:
    """``registers`` keyed by register name: accepts names (``CMD_ADDR``) and the
    ``"unit:0xOFF"`` keys of the UIO snapshot (other units' entries are dropped)."""
    out: dict[str, int] = {}
    for key, value in registers.items():
        if ":" in key:
            owner, _, off = key.partition(":")
            try:
                name = _NAME_BY_OFFSET.get(owner, {}).get(int(off, 16))
            except ValueError:
                name = None
            if owner in RELATED.get(unit, (unit,)) and name:
                out[name] = int(value)
        else:
            out[key] = int(value)
    return out


def _fmt(name: str, value: int) -> str:
    if name == "SIM_STATUS":
        return f"{name}={value} ({SPEC.status.name_of(value)})" if value else f"{name}=0"
    if name.endswith("ADDR"):
        return f"{name}={value:#010x}"
    if name in ("ISR", "IMR", "OBS"):
        return f"{name}={value:#x}"
    return f"{name}={value}"


def describe_registers(unit: str, registers: dict[str, int]) -> str:
    """``"SIM_STATUS=7 (hang) SIM_FAULT_ADDR=0x60000040 CMD_ADDR=... IRQ=0"``: the key
    registers of ``unit`` found in a snapshot, then the interrupt counts if any."""
    regs = by_name(unit, registers)
    keys = [k for k in KEY_REGISTERS.get(unit, ()) if k in regs]
    keys += [k for k in IRQ_STATE if k in regs]
    return " ".join(_fmt(k, regs[k]) for k in keys) or "no registers"
