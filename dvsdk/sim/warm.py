"""Work a committed conv stream's commands out ahead of its first kick (wall time only).

The conv engine keeps what it works out per configuration image and per weight block
(:mod:`.conv_unit`: the image's :class:`~.conv_unit.ConvPlan`, the decoded weights and
what the compiled loops derive from them, such as the packed matrix operand), and the
command processor keeps each decoded stream chunk (:mod:`.decode`).  A first kick built
all of it: EfficientNet-Lite0's first run took 5-6x a steady one, most of it decoding
weights.  When a command list is committed (:meth:`SimDevice.stream_committed
<dvsdk.sim.device.SimDevice.stream_committed>`) its stream lies in DRAM, synced, as do the
weights it reads; :func:`warm_stream` walks the stream as the command processor will
(§10.2-10.4: write packets, the configuration images written through ``CFG_DATA`` from
``CFG_ADDR``, ``START``, jumps) and fills those caches.

Nothing here is observable: it runs no command, writes no register, DRAM byte or
controller memory (the images are followed in a copy), moves no byte or cycle counter
and checks no coherence.  The caches are keyed as the kick looks them up (a chunk by its
address and bytes, a plan by the image's bytes, weights by their DRAM range and its write
clock, :meth:`Dram.version <dvsdk.sim.dram.Dram.version>`), so what changes before the
kick is simply not found, and a kick of a cached block still checks coherence as the
hardware's read would.  What the simulated hardware refuses is left for the kick to
report: the walk stops at the first thing it cannot work out.
"""

from __future__ import annotations

import numpy as np

from .. import native
from . import conv_unit, kernels
from .core import CFG_MEM_BYTES, U8_TABLE_INDEX, CoreState, R
from .decode import CFG, JUMP, REG

_CFG_ADDR, _CFG_DATA = R["conv"]["CFG_ADDR"] // 4, R["conv"]["CFG_DATA"] // 4
_START = R["conv"]["START"] // 4
#: a walk follows at most this many chunks (a stream that jumps in a loop ends the walk)
MAX_CHUNKS = 256


def warm_stream(core: CoreState, addr: int, length8: int) -> None:
    """Fill the caches the kick of the stream at ``addr`` (``length8`` 8-byte units) will
    look up (module docstring); never raises for a stream the hardware cannot run."""
    try:
        _walk(core, addr, 8 * length8)
    except Exception:  # noqa: BLE001 - best effort: the kick reports what cannot run
        return


def _walk(core: CoreState, addr: int, nbytes: int) -> None:
    cfg = core.cfg_mem.copy()
    ptr = int(core.regs["conv"][_CFG_ADDR])
    table_word = conv_unit.NO_BUFFER
    for _ in range(MAX_CHUNKS):
        raw = core.mem.peek(addr, nbytes)
        if raw is None or addr % 8 or not nbytes:
            return
        dec = core._decoded(raw, addr)  # type: ignore[attr-defined]  # (Dv700Core's)
        jump = None
        for op in dec.ops:
            if op[0] == CFG:
                ptr = _store(cfg, ptr, op[1])
            elif op[0] == REG:
                reg, value = op[1], op[2]
                if reg == U8_TABLE_INDEX:
                    table_word = value
                elif reg == _CFG_ADDR:
                    ptr = value
                elif reg == _CFG_DATA:
                    ptr = _store(cfg, ptr, np.array([value], "<u4").view(np.uint8))
                elif reg == _START and value & 1:
                    _command(core, cfg, table_word)
                    table_word = conv_unit.NO_BUFFER
            elif op[0] == JUMP:
                jump = op
            else:
                return  # (an error the kick will raise)
        if jump is None:
            return
        addr, nbytes = jump[1], jump[2]


def _store(cfg: np.ndarray, ptr: int, data: np.ndarray) -> int:
    """``Dv700Core._cfg_data`` on the copy ``cfg``: the words that fit, then the pointer."""
    nwords = data.size // 4
    fit = 0 if ptr % 4 else max(0, min(nwords, (CFG_MEM_BYTES - ptr) // 4))
    cfg[ptr : ptr + 4 * fit] = data[: 4 * fit]
    return ptr + 4 * fit


def _command(core: CoreState, cfg: np.ndarray, table_word: int) -> None:
    """The plan of the image in ``cfg``, its runs' steps, their weights and derived
    operands, as :func:`.conv_unit.run_configuration` and ``_execute`` will want them."""
    plan = conv_unit.plan_of(core, cfg, table_word)
    mode = native.NATIVE is not None
    steps = plan.steps.get(mode)
    if steps is None:
        steps = plan.steps[mode] = [kernels.make_step(run, conv_unit._run)
                                    for run in plan.runs]
    for run, key in zip(plan.runs, plan.weight_keys):
        if not key[1]:
            continue
        wb = conv_unit.warm_weights(core, run, key)
        if wb is None:
            return
        kernels.warm(run, wb)
