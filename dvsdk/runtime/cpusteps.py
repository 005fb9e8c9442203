"""CPU steps in the device's layout: element-wise ops on the chunked tensors, one sync per
segment boundary.

Between two hardware segments the runtime runs the program's CPU steps (netbin.md,
``program``).  The reference path (``Net(cpu_steps="unpack")``) syncs and unpacks every
device tensor a step reads into float32 NCHW, and packs and syncs every result the device
reads back, tensor by tensor and op by op.  This path (``cpu_steps="device"``, the
default) treats the CPU steps between two hardware segments as one *segment*:

* on entering it, one ``sync_for_cpu`` per contiguous byte range of the device tensors
  the segment reads (only those bytes); on leaving it, the results the device reads are
  written and one ``sync_for_device`` per contiguous range is issued;
* element-wise ops (:data:`ELEMENTWISE`: activations such as SiLU's Sigmoid and Mul,
  HardSwish, HardSigmoid, Clip; Add/Mul/... of two tensors; a per-channel scale as in
  squeeze-excitation) run on the tensors in the chunked order of dv700-interface.md §1
  (:class:`Chunked`): FP16 becomes float32 in place of an unpack, float32 becomes FP16 in
  place of a pack, and no element moves.  An element-wise op does not care where an
  element sits as long as its operands line up: same shape, same layout; a (1, C, 1, 1)
  operand is laid along the chunks' channel index (8 channels a chunk, the last one
  partial), of every sample of an (N, C, H, W) tensor, and an (N, C, 1, 1) one along the
  channel index of its own sample (N samples lie back to back, §1);
* every other op gets float32 NCHW, converted once per segment and tensor;
* a segment of one element-wise op (HardSwish, or Mul/Add of two device tensors or of a
  device tensor and a per-channel one, as in squeeze-excitation) whose result the device
  reads next runs from the arena's FP16 bytes to FP16 bytes in one compiled pass
  (:class:`.fused.FusedPlan`, ``native.ew_f16``), where the compiled loops exist.

The results are the reference path's bits: each element goes through the same numpy
kernel (:mod:`dvsdk.cpu.ops`) with the same operands; values pass between CPU ops of a
segment unrounded and are rounded to FP16 exactly where the reference packs them (for
the device).  A tensor only goes the chunked way when the reference would have held it
in the same memory order (an HWC array seen as NCHW: every device tensor, and what
element-wise ops make of them), so stride-sensitive kernels that follow (reductions,
matrix products) receive the very arrays the reference gives them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import native
from ..cpu import ops as cpu_ops
from ..errors import DeviceError, NetFileError
from ..hw import layout
from ..hw.fp16 import to_f16, to_f32
from . import board_model
from .fused import FUSED, TABLE, FusedPlan, fused_plan, plan_work, prepare, run_fused  # noqa: F401
from .spans import (  # noqa: F401 - device_shape: net.py reads it here
    device_nbytes,
    device_shape,
    merge_spans,
    read_spans,
    sync_spans_for_cpu,
)

#: ops whose kernels compute each output element from the same element of each operand
ELEMENTWISE = frozenset({
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Clip", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal",
    "Floor", "Ceil", "Round", "Sign", "Identity", "Dropout", "Add", "Sub", "Mul", "Div",
    "Max", "Min", "Sum", "Mean", "Fp16Table",
})
MODES = ("device", "unpack")
_F32 = np.dtype(np.float32)
_now = time.perf_counter


class Chunked:
    """A float32 (N, C, H, W) tensor held in the chunked order of an (H, W, C) device
    tensor of N samples (``layout.to_chunks``); converts to NCHW on demand (and as
    ``np.asarray``)."""

    __slots__ = ("flat", "hwc", "transpose", "n", "_nchw")

    def __init__(self, flat: np.ndarray, hwc: tuple[int, int, int], transpose: bool,
                 n: int = 1) -> None:
        self.flat, self.hwc, self.transpose, self.n = flat, tuple(hwc), bool(transpose), n
        self._nchw: np.ndarray | None = None

    @property
    def key(self) -> tuple:
        return self.hwc, self.transpose, self.n

    @property
    def shape(self) -> tuple[int, int, int, int]:
        h, w, c = self.hwc
        return self.n, c, h, w

    @property
    def dtype(self) -> np.dtype:
        return _F32

    def nchw(self) -> np.ndarray:
        """As the reference holds it: the (N, H, W, C) array seen as (N, C, H, W)."""
        if self._nchw is None:
            nhwc = layout.from_chunks(self.flat, (self.n, *self.hwc), self.transpose)
            self._nchw = nhwc.transpose(0, 3, 1, 2)
        return self._nchw

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = self.nchw()
        return a if dtype is None else a.astype(dtype, copy=False)


def hwc_ordered(v: np.ndarray) -> bool:
    """Whether ``v`` is a float32 (N, C, H, W) view of a contiguous (N, H, W, C) array: how
    the reference holds device tensors and what element-wise kernels make of them."""
    if v.dtype != _F32 or v.ndim != 4:
        return False
    n, c, h, w = v.shape
    want = (4 * h * w * c, 4, 4 * w * c, 4 * c)
    return all(s == t or k == 1 for s, t, k in zip(v.strides, want, (n, c, h, w)))


@dataclass
class Segment:
    """Consecutive CPU steps ``[start, end)`` of a program and the tensors they read that
    no step of theirs produces (in order of first use)."""

    start: int
    end: int
    reads: list[str] = field(default_factory=list)


def segments(steps: list[tuple[str, Any]]) -> dict[int, Segment]:
    """The segment of every CPU step index."""
    out: dict[int, Segment] = {}
    i = 0
    while i < len(steps):
        if steps[i][0] != "cpu":
            i += 1
            continue
        seg = Segment(i, i)
        made: set[str] = set()
        seen: set[str] = set()  # seg.reads as a set (a list lookup grows with the segment)
        while seg.end < len(steps) and steps[seg.end][0] == "cpu":
            _, _, inputs, outputs, _ = steps[seg.end][1]
            for t in inputs:
                if t and t not in made and t not in seen:
                    seg.reads.append(t)
                    seen.add(t)
            made.update(t for t in outputs if t)
            out[seg.end] = seg
            seg.end += 1
        i = seg.end
    return out


@dataclass
class SegmentState:
    """A segment in progress on one run: the device tensors it has synced and the
    results to write back when it ends."""

    segment: Segment
    pending: list[str] = field(default_factory=list)


def step(net: Any, h: Any) -> None:
    """Run CPU step ``h.pc`` of ``net`` (one op), syncing on entering and leaving its
    segment; with ``h.segment_loop`` (``Run.advance``) the following steps of its segment
    too (they run back to back: the loop is here, not once per step through the
    caller's).  ``h.pc`` is left at the last step run (the caller advances it)."""
    seg = net._segments[h.pc]
    plan = runnable_plan(net, h.pc, h.host)
    if plan is not None:
        run_fused(net, h, plan)
        return
    if h.segment is None or h.segment.segment is not seg:
        h.segment = _enter(net, h, seg)
    last = seg.end - 1 if getattr(h, "segment_loop", False) else h.pc
    while True:
        _one(net, h)
        if h.pc == last:
            break
        h.pc += 1
    if h.pc + 1 == seg.end:
        _leave(net, h)


def runnable_plan(net: Any, pc: int, host: Any) -> FusedPlan | None:
    """The compiled FP16 plan :func:`step` runs for CPU step ``pc`` while the run's host
    holds the tensors ``host``, or None (no plan; no compiled loops for it; or an operand
    the host holds unrounded, which takes the general path)."""
    plan = net._fused.get(pc)
    if plan is None:
        plan = fused_plan(net, pc)
    if plan and (native.NATIVE is not None or plan.table is not None) \
            and plan.x not in host and plan.y not in host:
        return plan
    return None


@dataclass(frozen=True)
class StepRecord:
    """What a CPU step's run reads of its record and of the file, worked out on its first
    run (the file does not change): the op, its operands, its event's label, and per
    result the shape the file records (a tuple, or None) and whether the device reads it."""

    op_type: str
    attrs: Any
    inputs: list
    outputs: list
    name: str
    label: str
    elementwise_out: str | None  # the one result of an ELEMENTWISE op (_chunked_args)
    results: tuple  # (name, shape or None, on the device) per result with a name


def _record(net: Any, pc: int) -> StepRecord:
    records = vars(net).setdefault("_step_records", {})
    rec = records.get(pc)
    if rec is None:
        op_type, attrs, inputs, outputs, name = net.steps[pc][1]
        out = outputs[0] if len(outputs) == 1 else None
        results = []
        for o in outputs:
            if o:
                want = net.tensors[o]["shape"]
                results.append((o, None if want is None else tuple(want),
                                net._dev(o) is not None))
        rec = records[pc] = StepRecord(op_type, attrs, inputs, outputs, name,
                                       f"{op_type} {name}",
                                       out if out and op_type in ELEMENTWISE else None,
                                       tuple(results))
    return rec


def _one(net: Any, h: Any) -> None:
    """CPU step ``h.pc`` of ``net`` (one op) in the segment ``h.segment``."""
    rec = _record(net, h.pc)
    op_type, attrs = rec.op_type, rec.attrs
    out = rec.elementwise_out
    args = _chunked_args(net, h, op_type, rec.inputs, out) if out else None
    work: dict = {}
    t = _now()
    try:
        if args is not None:
            vals = [v for _, v in args[0]]
            results = [_run_chunked(op_type, attrs, *args)]
        else:
            vals = [_nchw(net, h, i) if i else None for i in rec.inputs]
            results = cpu_ops.run_op(op_type, vals, attrs)
    except DeviceError:
        raise
    except Exception as e:  # noqa: BLE001 - a damaged record must not escape raw
        raise NetFileError.cpu_step(op_type, rec.name, e) from e
    finally:
        h.stats.add("cpu", rec.label, t, work)
    work.update(board_model.step_work_once(net._step_work_memo, h.pc, op_type, attrs, vals,
                                           results, _ARRAYS))  # (once per signature)
    if h.pc == h.segment.segment.start:
        work["enters"] = True  # (the segment's set-up: board_model.cpu_segment_bytecodes)
    i = 0
    for o, val in zip(rec.outputs, results):
        if not o:
            continue
        _, want, dev = rec.results[i]
        i += 1
        if val.__class__ is not np.ndarray and not isinstance(val, Chunked):
            val = np.asarray(val)
        if want is not None and tuple(val.shape) != want:
            raise NetFileError(f"CPU op {op_type} {rec.name} made {o} of another shape "
                               "than the file records", field=f"tensors.{o}.shape",
                               value=list(val.shape), limit=list(want))
        h.host[o] = val
        if dev:
            h.segment.pending.append(o)


#: the operand types whose signature the board model's memo takes (step)
_ARRAYS = frozenset({np.ndarray, Chunked})


def _enter(net: Any, h: Any, seg: Segment) -> SegmentState:
    """One sync_for_cpu per contiguous range of the device tensors the segment reads (the
    ranges worked out once per segment and set of tensors the host does not hold)."""
    names = tuple(t for t in seg.reads if t not in h.host)
    memo = vars(net).setdefault("_read_spans", {})
    spans = memo.get((seg.start, names))
    if spans is None:
        if len(memo) > 4096:
            memo.clear()
        spans = memo[(seg.start, names)] = read_spans(net, list(names))
    sync_spans_for_cpu(h, spans)
    return SegmentState(seg)


def _leave(net: Any, h: Any) -> None:
    """Write the results the device reads (FP16, chunked), then one sync_for_device per
    contiguous range."""
    items = []
    for name in h.segment.pending:
        d = net._dev(name)
        hwc, tr, n = tuple(d["hwc"]), bool(d.get("transpose")), int(d.get("batch", 1))
        v = h.host[name]
        chunked = isinstance(v, Chunked) and v.key == (hwc, tr, n)
        nbytes = 2 * v.flat.size if chunked else device_nbytes(d)
        t = _now()
        try:
            if chunked:  # rounded into the arena
                h.ctx.arena.write_with(d["offset"], nbytes,
                                       lambda view, v=v: to_f16(v.flat, view.view(np.float16)))
            else:  # packed straight into the arena (no copy after)
                x = to_hwc(np.asarray(v, np.float32), device_shape(d))
                h.ctx.arena.write_with(d["offset"], nbytes, lambda view, x=x, tr=tr: layout.pack(
                    x, transpose=tr, out=view.view(np.float16)))
        finally:
            h.stats.add("pack", name, t, {"bytes": nbytes})
        items.append((d["offset"], d["offset"] + nbytes, name))
    for a, b, names in merge_spans(items):
        t = _now()
        try:
            h.ctx.arena.sync_for_device(a, b - a)
        finally:
            h.stats.add("sync", names, t, {"bytes": b - a})
    h.segment = None


def to_hwc(v: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """An (N, C, H, W) or (N, C) value as :func:`device_shape` ``shape`` (no copy)."""
    if v.ndim == 4:
        return v[0].transpose(1, 2, 0) if len(shape) == 3 else v.transpose(0, 2, 3, 1)
    return v.reshape(shape)


def _device_bytes(net: Any, h: Any, name: str) -> tuple[np.ndarray, dict]:
    d = net._dev(name)
    if d is None:
        raise NetFileError("tensor has no value at this point", field="tensor", value=name)
    # synced by _enter; a view: every caller converts it at once (to_f32, unpack)
    return h.ctx.arena.read(d["offset"], device_nbytes(d), copy=False), d


def _nchw(net: Any, h: Any, name: str) -> np.ndarray:
    """A step operand as the reference has it (unpacked once per segment)."""
    if name in net.constants:
        return net.constants[name]
    v = h.host.get(name)
    if v is None:
        raw, d = _device_bytes(net, h, name)
        t = _now()
        try:
            shape = device_shape(d)
            hwc = layout.unpack(raw, shape, transpose=bool(d.get("transpose")))
            if len(net.tensors[name]["shape"]) != 4:
                v = hwc.reshape(net.tensors[name]["shape"])
            else:
                v = hwc.transpose(2, 0, 1)[None] if len(shape) == 3 else hwc.transpose(0, 3, 1, 2)
            h.host[name] = v
        finally:
            h.stats.add("unpack", name, t, {"bytes": raw.nbytes})
    return v.nchw() if isinstance(v, Chunked) else v


# -- element-wise ops on the chunked order -------------------------------------------------
FULL, CHANNEL, SCALAR = range(3)


def _chunked_args(net: Any, h: Any, op: str, inputs: list[str], out: str
                  ) -> tuple | None:
    """The operands of an element-wise step in the chunked order, or None when the step
    must run on NCHW (another op, other shapes or types, or operands the reference holds
    in another memory order).  A per-channel operand is an (m, C) array, m 1 (every sample)
    or N (one vector a sample)."""
    if op not in ELEMENTWISE:
        return None
    shape = net.tensors[out]["shape"]
    if len(shape) != 4:
        return None
    n, c, hh, ww = shape
    hwc = (hh, ww, c)
    ops: list[tuple[int, Any]] = []
    key = None
    for i, name in enumerate(inputs):
        if not name:
            ops.append((SCALAR, None))
            continue
        v = net.constants.get(name)
        if op == TABLE and i == 1:  # the lookup table: passed as it is
            if v is None:
                return None
            ops.append((SCALAR, v))
            continue
        if v is None:
            v = h.host.get(name)
        if v is None:  # on the device, synced: as the output's layout, or (1, 1, C)
            d = net._dev(name)
            dhwc = tuple(d["hwc"]) if d is not None else None
            dn = int(d.get("batch", 1)) if d is not None else 0
            if dhwc == hwc and dn == n:
                k = (hwc, bool(d.get("transpose")), n)
                if key not in (None, k):
                    return None
                key = k
                ops.append((FULL, name))
            elif dhwc == (1, 1, c) and dn in (1, n) and len(net.tensors[name]["shape"]) == 4:
                ops.append((CHANNEL, name))
            else:
                return None
            continue
        if isinstance(v, Chunked):
            if v.hwc == hwc and v.n == n and key in (None, v.key):
                key = v.key
                ops.append((FULL, v))
            elif v.hwc == (1, 1, c) and v.n in (1, n):  # (m, C, 1, 1): the chunked order
                ops.append((CHANNEL, v.flat.reshape(v.n, c)))  # is the channels'
            else:
                return None
            continue
        v = np.asarray(v)
        if v.dtype != _F32:
            return None
        if v.size == 1:
            ops.append((SCALAR, v.reshape(())))
        elif list(v.shape) == list(shape) and hwc_ordered(v):
            ops.append((FULL, v))
        elif v.ndim <= 4 and (1,) * (4 - v.ndim) + v.shape == (1, c, 1, 1):
            ops.append((CHANNEL, v.reshape(1, c)))
        elif v.shape == (n, c, 1, 1):
            ops.append((CHANNEL, v.reshape(n, c)))
        else:
            return None
    if key is None:
        if not any(kind == FULL for kind, _ in ops):
            return None
        d = net._dev(out)
        key = (hwc, bool(d.get("transpose")) if d is not None else False, n)
    operands = []
    for kind, v in ops:
        if isinstance(v, str):  # read from the arena: FP16 -> float32, no element moves
            raw, d = _device_bytes(net, h, v)
            t = _now()
            try:
                got = Chunked(to_f32(raw.view(np.float16)), tuple(d["hwc"]),
                              bool(d.get("transpose")), int(d.get("batch", 1)))
            finally:
                h.stats.add("unpack", v, t, {"bytes": raw.nbytes})
            h.host[v] = got
            v = got.flat.reshape(got.n, c) if kind == CHANNEL else got
        elif kind == FULL and isinstance(v, np.ndarray):  # an HWC array: reorder it
            nhwc = v.transpose(0, 2, 3, 1)
            v = Chunked(layout.to_chunks(nhwc if n > 1 else nhwc[0], key[1]), hwc, key[1], n)
        operands.append((kind, v))
    return operands, key


def _run_chunked(op: str, attrs: dict, operands: list, key: tuple) -> Chunked:
    """The kernel on the chunked order: in one call on whole tensors, or, with a
    per-channel operand, once on the full 8-channel chunks of every sample (an
    (N, n, H*W, 8) view, the vectors as (m, n, 1, 8)) and once on the partial last chunk
    ((N, H*W, r) and (m, 1, r))."""
    (hh, ww, c), _, n = key
    if not any(kind == CHANNEL for kind, _ in operands):
        args = [v.flat if kind == FULL else v for kind, v in operands]
        y = _check(cpu_ops.run_op(op, args, attrs)[0], n * c * hh * ww)
        return Chunked(y, (hh, ww, c), key[1], n)
    nfull, rem = divmod(c, 8)
    split, wh = 8 * nfull * hh * ww, hh * ww
    flat = np.empty((n, c * wh), np.float32)
    if nfull:
        args = [v.flat.reshape(n, -1)[:, :split].reshape(n, nfull, wh, 8) if kind == FULL
                else v[:, :8 * nfull].reshape(-1, nfull, 1, 8) if kind == CHANNEL else v
                for kind, v in operands]
        flat[:, :split] = _check(cpu_ops.run_op(op, args, attrs)[0], n * split).reshape(n, -1)
    if rem:
        args = [v.flat.reshape(n, -1)[:, split:].reshape(n, wh, rem) if kind == FULL
                else v[:, 8 * nfull:].reshape(-1, 1, rem) if kind == CHANNEL else v
                for kind, v in operands]
        flat[:, split:] = _check(cpu_ops.run_op(op, args, attrs)[0], n * wh * rem
                                 ).reshape(n, -1)
    return Chunked(flat.reshape(-1), (hh, ww, c), key[1], n)


def _check(y: Any, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.dtype != _F32 or y.size != n:
        raise NetFileError("element-wise kernel changed the type or size of its operand",
                           field="dtype", value=str(y.dtype), limit="float32")
    return np.ascontiguousarray(y).reshape(-1)
