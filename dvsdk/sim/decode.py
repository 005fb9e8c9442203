"""A chunk of the conv command stream, decoded once into what the processor does with it.

The command processor (§10.2-10.4) reads a chunk of 32-bit words: write packets (a
header, then N data words for N registers, or for one register N times), pad words and
a jump to the next chunk.  :func:`decode` turns one chunk into a list of operations,
the same whatever was executed before, so :class:`dvsdk.sim.engine.Dv700Core` keeps it per
chunk content and, on the next kick of the same stream, replays it without looking at a
word again.  Decoding stops where the processor would: at a jump (the rest of the chunk
is never read) or at the first word it cannot execute, which becomes an operation that
raises the hardware error at that point, after everything before it has run.

Operations (tuples, the kind first):

* ``(CFG, data, here)``: a packet writing ``CFG_DATA`` N times (a configuration image),
  ``data`` its N words as little-endian bytes (uint8, what controller memory stores);
* ``(REG, reg, value, here)``: one register write of a packet (``START`` runs a command);
* ``(JUMP, addr, nbytes, here)``: continue with the chunk at ``addr``;
* ``(ERROR, status, address, reason)``: the hardware error raised there (``status``
  ``hang``: the watchdog's step limit, when :func:`decode` is given one).

:attr:`Decoded.steps` counts what the watchdog counts (packets, pad words, the jump).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .core import PACKET, WRITE_MAGIC, R

CFG, REG, JUMP, ERROR = range(4)
_CFG_DATA = R["conv"]["CFG_DATA"]
_FIELDS = {p: PACKET.parts[p] for p in ("reg_index", "magic", "count_minus_1", "write",
                                       "increment")}


@dataclass(frozen=True)
class Decoded:
    """One chunk's operations and the watchdog steps decoding it took; ``plans``: the
    configuration plans of the images its CFG packets write whole (kept by the conv unit,
    :func:`dvsdk.sim.conv_unit.run_configuration`), by packet address and u8-input flag."""

    ops: tuple
    steps: int
    plans: dict = field(default_factory=dict, compare=False)


def _part(word: int, name: str) -> int:
    lsb, width = _FIELDS[name]
    return (word >> lsb) & ((1 << width) - 1)


def decode(chunk: np.ndarray, addr: int, max_steps: int | None = None,
           hang_reason: str = "") -> Decoded:
    """The operations of the chunk ``chunk`` (``<u4`` words, a copy) fetched from ``addr``;
    with ``max_steps``, the watchdog stops it at the step past them (``hang_reason``)."""
    ops: list[tuple] = []
    words = chunk.tolist()
    size = len(words)
    pos = steps = 0
    while pos < size:
        word = words[pos]
        here = addr + 4 * pos
        steps += 1
        if max_steps is not None and steps > max_steps:
            ops.append((ERROR, "hang", here, hang_reason))
            break
        if word == 0:  # pad word
            pos += 1
            continue
        if word & 1:  # jump
            if pos + 1 >= size:
                ops.append((ERROR, "stream_overrun", here, "jump packet cut by chunk end"))
                break
            nlen, naddr = word & ~1, words[pos + 1]
            if nlen % 8 or nlen == 0:
                ops.append((ERROR, "misaligned", here, f"jump length {nlen} not 8k"))
            elif naddr % 8:
                ops.append((ERROR, "misaligned", naddr, "jump target not 8-byte aligned"))
            else:
                ops.append((JUMP, naddr, nlen, here))
            break
        if not _part(word, "write") or _part(word, "magic") != WRITE_MAGIC:
            ops.append((ERROR, "unknown_packet", here, f"unknown packet word {word:#010x}"))
            break
        n = _part(word, "count_minus_1") + 1
        if pos + 1 + n > size:
            ops.append((ERROR, "stream_overrun", here, "write packet cut by chunk end"))
            break
        index = _part(word, "reg_index")
        if not _part(word, "increment") and index * 4 == _CFG_DATA:
            ops.append((CFG, chunk[pos + 1 : pos + 1 + n].astype("<u4").view(np.uint8), here))
        else:
            inc = _part(word, "increment")
            for k in range(n):
                ops.append((REG, index + k if inc else index, words[pos + 1 + k], here))
        pos += 1 + n
    return Decoded(tuple(ops), steps)
