"""The conv block's identity registers: unified-buffer size, MAC count, version (§10.9).

Two generations of DV700 bitstreams put them in different places, and each goes with one
kick (``firmware_spec/registers.yaml``, ``kick.<name>.map`` and ``identity``):

* ``r5`` (DMP's kernel since fd4fbba, 2019-03-28, with the R5 firmware): ``UBUF_SIZE``
  0x11C in bytes, ``MAC_GROUPS`` 0x120 in groups of 72, ``MAX_INPUT_SIZE`` 0x124,
  ``HW_VERSION`` 0x128; the byte counters are the 16 classified slots at 0x200/0x260;
* ``pre_r5`` (kernel 7.0.20190215, 2994b64, the direct kick): ``UBUF_SIZE_KB`` 0x148 in
  KiB, ``MAC_NUM`` 0x14C (the count itself), ``HW_VERSION_PRE_R5`` 0x140,
  ``SVN_VERSION`` 0x144 (where R5 bitstreams take the counter configuration),
  ``MAX_INPUT_SIZE_PRE_R5`` 0x150; the byte counters are three beat registers at
  0x180/0x184/0x188.

So the kick a board uses decides which registers tell its sizes: reading the R5 offsets of
a pre-R5 board would give every tile count from the wrong register.
"""

from __future__ import annotations

from collections.abc import Callable

from ..hw.spec import SPEC

IDENTITY: dict[str, dict] = SPEC.registers["identity"]
FIELDS = ("ub_size", "mac_num", "hw_version", "max_input_size", "svn_version")


def register_map(kick: str) -> str:
    """The conv register map of the bitstreams that kick so (``r5`` or ``pre_r5``)."""
    return str(SPEC.registers["kick"][kick]["map"])


def identity_registers(kick: str) -> dict[str, tuple[int, int]]:
    """``{field: (byte offset, scale)}`` of the identity registers for ``kick``."""
    ident = IDENTITY[register_map(kick)]
    return {f: (SPEC.reg("conv", ident[f][0]), int(ident[f][1])) for f in FIELDS
            if f in ident}


def read_identity(read32: Callable[[int], int], kick: str) -> dict[str, int]:
    """The identity as ``DeviceInfo`` fields, from the conv window (``read32(offset)``)."""
    out = {}
    for f, (off, scale) in identity_registers(kick).items():
        value = int(read32(off))
        out[f] = (value & 0xFFFF) if f == "hw_version" else value * scale
    return out


def identity_words(kick: str, **values: int) -> list[tuple[int, int]]:
    """``(offset, register value)`` that make a board (or the simulator) report
    ``values`` (``ub_size`` in bytes, ``mac_num``...) in the map of ``kick``."""
    regs = identity_registers(kick)
    return [(regs[f][0], int(v) // regs[f][1]) for f, v in values.items() if f in regs]


def counter_registers(kick: str) -> dict[str, int] | None:
    """The pre-R5 byte-counter registers ``{input, output, weights}`` (beats), or None
    where the counters are the 16 classified slots (§10.10)."""
    c = IDENTITY[register_map(kick)]["counters"]
    return None if c == "classified" else {k: SPEC.reg("conv", v) for k, v in c.items()}
