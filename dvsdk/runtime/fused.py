"""One CPU step between two hardware segments, from the arena's binary16 bytes to binary16
bytes in one compiled pass (:class:`FusedPlan`, ``native.ew_f16``; a table lookup,
``hw.fp16.lookup``): the fast case of :mod:`.cpusteps` (its module docstring), without the
float32 tensors of the general path (same operations, same rounding, the same bits).
The plans depend on the net.bin alone and are made when the net is loaded.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import native
from ..errors import NetFileError
from ..hw.fp16 import lookup, to_f16, to_f32
from . import board_model
from .spans import device_nbytes, read_spans, sync_spans_for_cpu

TABLE = "Fp16Table"  # (dvsdk.compiler.table): the table is its second operand
_now = time.perf_counter


#: ops the compiled loop computes as :mod:`dvsdk.cpu.ops` does (``native.ew_f16`` codes)
FUSED = {"HardSwish": 0, "Mul": 1, "Add": 2}


@dataclass(frozen=True)
class FusedPlan:
    """A CPU segment of one element-wise op whose operands and result are device tensors
    and whose result the device reads next: computed from the arena's FP16 bytes into FP16
    bytes in one compiled pass (``native.ew_f16``), without the float32 tensors of the
    general path (same operations, same rounding, the same bits)."""

    code: int
    x: str                    # the full-size operand
    y: str | None             # the other: full-size, or one value per channel
    per_channel: bool
    y_first: bool             # y is the op's first operand
    out: str
    hwc: tuple[int, int, int]
    syncs: tuple = ()         # the operands' merged arena ranges (_read_spans)
    label: str = ""           # the step's name in RunStats
    in_place: bool = True     # the result may be written straight into the arena (its
    #                           range meets no operand's: the planner's never does)
    table: np.ndarray | None = None  # Fp16Table: the table rounded to binary16, as bits
    #: arena (offset, bytes) of x, y (or None) and the result, and what the step does for
    #: board_model: worked out once with the plan, not on every run
    ranges: tuple = ()
    work: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        hh, ww, c = self.hwc
        n = hh * ww * c
        object.__setattr__(self, "work", board_model.fused_work(
            self.label.split(" ")[0], n, None if self.y is None else
            c if self.per_channel else n))


#: FusedPlan.code of a table lookup (a gather, hw.fp16.lookup: runs without the compiled
#: loops too)
TABLE_CODE = -1


def prepare(net: Any) -> None:
    """Make every CPU step's :class:`FusedPlan` when the net is loaded (what a first run
    made on its way: the plans depend on the file alone).  A step whose record is damaged
    is left to be planned by its run, which reports the damage as before."""
    for index in net._segments:
        try:
            fused_plan(net, index)
        except Exception:  # noqa: BLE001 - (reported by the run that reaches the step)
            net._fused.pop(index, None)


def fused_plan(net: Any, index: int) -> FusedPlan | bool:
    """The :class:`FusedPlan` of CPU step ``index`` of ``net`` (made by :func:`prepare`, or
    on first use), or False where the general path runs it."""
    plan = net._fused.get(index)
    if plan is None:
        plan = _fused_plan(net, net._segments[index])
        if plan:
            plan = dataclasses.replace(plan, ranges=tuple(
                None if t is None else _arena_range(net, t) for t in (plan.x, plan.y,
                                                                      plan.out)))
        net._fused[index] = plan
    return plan


def _arena_range(net: Any, name: str) -> tuple[int, int]:
    """(offset, bytes) of a device tensor in the arena (NetFileError if it has none)."""
    d = net._dev(name)
    if d is None:
        raise NetFileError("tensor has no value at this point", field="tensor", value=name)
    return int(d["offset"]), device_nbytes(d)


def plan_work(plan: FusedPlan) -> dict:
    """What a step on the compiled path does, for :mod:`.board_model` (a fresh dict: it
    goes into the run's events)."""
    return dict(plan.work)


def _fused_plan(net: Any, seg: Any) -> FusedPlan | bool:
    """The step's :class:`FusedPlan`, or False where the general path must run it
    (``seg``: a :class:`.cpusteps.Segment`)."""
    op_type, _, inputs, outputs, _ = net.steps[seg.start][1]
    if (seg.end - seg.start != 1 or seg.end >= len(net.steps)
            or (op_type not in FUSED and op_type != TABLE) or len(outputs) != 1
            or not outputs[0]):
        return False  # (a segment at the program's end leaves unrounded outputs)
    out, d_out = outputs[0], net._dev(outputs[0])
    shape = net.tensors[out]["shape"]
    if d_out is None or len(shape) != 4 or shape[0] != 1:
        return False  # (N > 1 samples: the chunked path, which loops over none of them)
    _, c, hh, ww = shape
    key = ((hh, ww, c), bool(d_out.get("transpose")))
    if tuple(d_out["hwc"]) != key[0]:
        return False
    if op_type == TABLE:
        x, t = inputs if len(inputs) == 2 else ("", "")
        d, table = net._dev(x) if x else None, net.constants.get(t)
        if d is None or x in net.constants or table is None or \
                (tuple(d["hwc"]), bool(d.get("transpose"))) != key or table.size != 1 << 16:
            return False
        syncs = tuple(read_spans(net, seg.reads))
        a = d_out["offset"]
        b = a + 2 * hh * ww * c
        tables = vars(net).setdefault("_table_bits", {})  # (one table serves many steps)
        bits = tables.get(t)
        if bits is None:
            bits = tables[t] = to_f16(np.asarray(table, np.float32).reshape(-1)).view(np.uint16)
        return FusedPlan(TABLE_CODE, x, None, False, False, out, key[0], syncs,
                         f"{op_type} {net.steps[seg.start][1][4]}",
                         not any(s < b and a < e for s, e, _ in syncs), bits)
    full, channel = [], []
    for name in inputs:
        d = net._dev(name) if name and name not in net.constants else None
        if d is None:
            return False
        if (tuple(d["hwc"]), bool(d.get("transpose"))) == key:
            full.append(name)
        elif tuple(d["hwc"]) == (1, 1, c) and len(net.tensors[name]["shape"]) == 4:
            channel.append(name)
        else:
            return False
    arity = 1 if op_type == "HardSwish" else 2
    if len(inputs) != arity or not full:
        return False
    x = full[0]
    y = None if arity == 1 else (full + channel)[1]
    syncs = tuple(read_spans(net, seg.reads))
    a = d_out["offset"]
    b = a + 2 * hh * ww * c
    return FusedPlan(FUSED[op_type], x, y, bool(channel), y is not None and inputs[0] != x,
                     out, key[0], syncs, f"{op_type} {net.steps[seg.start][1][4]}",
                     not any(s < b and a < e for s, e, _ in syncs))


def run_fused(net: Any, h: Any, plan: FusedPlan) -> None:
    """Run CPU step ``h.pc`` of ``net`` by ``plan``: its operands synced, the result written
    into the arena and synced for the device, the events in ``h.stats``."""
    sync_spans_for_cpu(h, plan.syncs)  # (its operands are not held by the host: step())
    hh, ww, c = plan.hwc
    arena, st = h.ctx.arena, h.stats
    (x_off, x_n), y_range, (out_off, _) = plan.ranges
    n = hh * ww * c
    t = _now()
    try:
        # views (synced above; converted at once): the arena's bytes, no copy
        x = arena.read(x_off, x_n, copy=False)
        y = None if y_range is None else arena.read(y_range[0], y_range[1], copy=False)
        if plan.per_channel:
            y = to_f32(y.view(np.float16))
        y = None if y is None else y if plan.per_channel else y.view(np.uint16)

        def fill(view: np.ndarray) -> None:  # the result straight into the arena
            if plan.table is not None:  # binary16 in, binary16 out: a gather
                lookup(plan.table, x.view(np.uint16), view.view(np.uint16))
                return
            native.NATIVE.ew_f16(plan.code, x.view(np.uint16), view.view(np.uint16), y,
                                 c if plan.per_channel else 0, hh * ww, plan.y_first)

        try:
            if plan.in_place:
                arena.write_with(out_off, 2 * n, fill)
            else:  # (a hand-made net.bin whose result overlaps an operand)
                result = np.empty(2 * n, np.uint8)
                fill(result)
                arena.write(out_off, result)
        except (ValueError, TypeError) as e:  # sizes a damaged record gets wrong
            raise NetFileError.cpu_step(*plan.label.split(" ", 1), e) from e
    finally:
        st.add("cpu", plan.label, t, dict(plan.work))
    t = _now()
    try:
        arena.sync_for_device(out_off, 2 * n)
    finally:
        st.add("sync", plan.out, t, {"bytes": 2 * n})
