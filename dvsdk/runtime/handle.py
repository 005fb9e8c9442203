"""What one run of a loaded network is made of: its context, its handle and its timings.

Shared by :mod:`dvsdk.runtime.net` (which creates and advances runs) and
:mod:`dvsdk.runtime.profile` (which times them command by command).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..driver.cmdlist import CommandList
from ..driver.commands import ConvCommand
from ..errors import InvalidArgument, NetFileError
from . import board_model
from .board_model import BoardEstimate


def spec_dtype(spec: dict) -> np.dtype:
    """The element type META records for an input or output (float32 if absent)."""
    try:
        return np.dtype(spec.get("dtype", "float32"))
    except TypeError:
        raise NetFileError("unknown element type", field=f"{spec.get('name')}.dtype",
                           value=spec.get("dtype")) from None


def feed_array(spec: dict, value: Any, *, device: bool) -> np.ndarray:
    """``value`` as the element type of input ``spec``: real numbers only (a complex array
    is not silently cast to its real part), and, for a float input the DV700 reads
    (``device``), finite ones: there NaN or infinity would run to non-finite outputs that
    look like an FP16 overflow.  An input only CPU steps read keeps ONNX's meaning of NaN
    and infinity (an attention mask of -inf, a Cast of NaN)."""
    name = spec.get("name")
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as e:   # a ragged nested list, an object numpy refuses
        raise InvalidArgument(f"input {name!r} is not an array: {e}", field=name,
                              value=type(value).__name__, limit="an array") from None
    if arr.dtype.kind not in "buif":
        what = "complex numbers" if arr.dtype.kind == "c" else f"{arr.dtype} values"
        raise InvalidArgument(f"input {name!r} holds {what}, not real numbers", field=name,
                              value=str(arr.dtype), limit="bool, integer or float")
    dtype = spec_dtype(spec)
    if device and arr.dtype.kind == "f" and dtype.kind == "f":
        bad = ~np.isfinite(arr)
        if bad.any():
            raise InvalidArgument(f"input {name!r} holds NaN or infinity "
                                  f"({int(np.count_nonzero(bad))} of {arr.size} values)",
                                  field=name, value=_first_bad(arr, bad),
                                  limit="finite values")
    return np.asarray(arr, dtype)


def _first_bad(arr: np.ndarray, bad: np.ndarray) -> str:
    i = tuple(int(v) for v in np.argwhere(bad)[0])
    return f"{arr[i]} at {list(i)}"


@dataclass
class SegmentStats:
    name: str
    device_us: float
    cycles: int | None
    wall_us: float
    commands: int


@dataclass
class RunStats:
    """Where the time of the last ``run`` went (µs), as this machine measured it (the
    device time: predicted by the simulator's cycle model on ``sim://``, measured on a
    board: ``device_predicted``); ``board`` predicts the same run on the board.
    ``events`` (kind, name, start, duration, what it did) feed ``--trace`` and ``board``."""

    segments: list[SegmentStats] = field(default_factory=list)
    cpu_us: float = 0.0
    pack_us: float = 0.0
    sync_us: float = 0.0
    unpack_us: float = 0.0
    total_us: float = 0.0
    events: list[tuple[str, str, float, float, dict]] = field(default_factory=list)
    t0: float = field(default_factory=time.perf_counter)
    device_predicted: bool = True

    def stage(self, kind: str, name: str, work: dict | None = None) -> _Stage:
        """A ``with`` block timed as one ``kind`` event named ``name``; ``work`` (what it
        did: bytes, op, elements; :mod:`.board_model`) becomes the event's details, and
        may be filled in after the block."""
        return _Stage(self, kind, name, {} if work is None else work)

    def add(self, kind: str, name: str, start: float, work: dict) -> None:
        """Record what a :meth:`stage` block records, for a block that began at ``start``
        (``time.perf_counter()``) and ends now: the runtime's per-step paths time their
        blocks with this (a ``try``/``finally`` around them), one call where a ``with``
        block costs five."""
        end = _now()
        dur = (end - start) * 1e6
        fields = self.__dict__  # (RunStats' <kind>_us field, without getattr/setattr calls)
        attr = _US[kind] if kind in _US else f"{kind}_us"
        fields[attr] = fields[attr] + dur
        self.events.append((kind, name, (start - self.t0) * 1e6, dur, work))

    @property
    def device_us(self) -> float:
        return sum(s.device_us for s in self.segments)

    @property
    def cycles(self) -> int:
        return sum(s.cycles or 0 for s in self.segments)

    @property
    def board(self) -> BoardEstimate:
        """This run on the board, predicted: its device time, then the Cortex-A53 model
        (:mod:`dvsdk.runtime.board_model`) for the CPU's work and the cache syncs."""
        return board_model.estimate(self.events, self.device_predicted)


class _Stage:
    """The context manager of :meth:`RunStats.stage` (a class: it runs several times per
    CPU step, where a generator-based one costs microseconds)."""

    __slots__ = ("stats", "kind", "name", "work", "start")

    def __init__(self, stats: RunStats, kind: str, name: str, work: dict) -> None:
        self.stats, self.kind, self.name, self.work = stats, kind, name, work

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.stats.add(self.kind, self.name, self.start, self.work)


#: the RunStats field each stage kind adds its time to
_US = {kind: f"{kind}_us" for kind in ("cpu", "pack", "sync", "unpack")}
_now = time.perf_counter


@dataclass
class RunContext:
    """One activation arena and the command lists committed against it."""

    arena: Any
    commands: list[ConvCommand]
    lists: list[CommandList] = field(default_factory=list)


class Run:
    """One run of a net moving through its steps (what :class:`RunHandle` shows, what the
    net keeps in order until it completes)."""

    def __init__(self, net: Any, ctx: RunContext, timeout: float) -> None:
        self.net, self.ctx, self.timeout = net, ctx, timeout
        self.host: dict[str, np.ndarray] = {}
        self.stats = RunStats(device_predicted=getattr(net, "simulated", True))
        self.pc = 0
        self.exec_id: int | None = None
        self.segment: Any = None  # the CPU segment in progress (cpusteps.SegmentState)
        self.t_kick = 0.0
        self.result: dict[str, np.ndarray] | None = None
        #: advance() runs the rest of a CPU segment in one step call (cpusteps.step); one
        #: who calls ``net._step`` step by step (dvsdk.qa.analyze) gets one op a call
        self.segment_loop = False

    def advance(self, block: bool) -> None:
        net = self.net
        step, n = net._step, len(net.steps)
        self.segment_loop = True
        while self.pc < n:
            if not step(self, block):
                return

    def done(self) -> bool:
        return self.result is not None

    def abandon(self) -> None:
        """Nobody will wait for this run (its handle was dropped): the segment it kicked
        may be finished by whoever needs that unit next (``CommandList.abandon``).  Takes
        no lock: it runs in a finalizer, on any thread."""
        exec_id = self.exec_id
        if exec_id is None or self.result is not None or self.pc >= len(self.net.steps):
            return
        kind, payload = self.net.steps[self.pc]
        if kind == "hw":
            self.ctx.lists[payload[1]].abandon(exec_id)

    def wait(self) -> dict[str, np.ndarray]:
        """The run's outputs (finishing it, and any earlier run, first).  Thread-safe."""
        with self.net.lock:
            return self._wait()

    def _wait(self) -> dict[str, np.ndarray]:
        if self.result is not None:
            return self.result
        net = self.net
        for earlier in list(net._pending):  # complete in order
            if earlier is self:
                break
            earlier.wait()
        try:
            self.advance(block=True)
            result = {}
            for spec in net.outputs:
                val = np.asarray(net._value(self, spec["tensor"]), spec_dtype(spec))
                result[spec["name"]] = to_model(spec, canonical_nans(val))
        finally:
            if self in net._pending:
                net._pending.remove(self)
        self.stats.total_us = (time.perf_counter() - self.stats.t0) * 1e6
        net.last_run = self.stats
        net._last_ctx = self.ctx
        net._last_result = result
        self.result = result
        self.host = {}
        if net._pending and net._pending[0].exec_id is None:
            net._pending[0].advance(block=False)  # its input is packed: kick it now
        return result


def canonical_nans(val: np.ndarray) -> np.ndarray:
    """A float output with every NaN the canonical quiet one (firmware_spec/arithmetic.md):
    one a CPU step made carries the machine's NaN (x86's is negative, Arm's positive).
    Outputs the device stored are canonical already; the check is one reduction."""
    if val.dtype.kind == "f" and val.size and np.isnan(val.max()):
        val = np.where(np.isnan(val), np.array(np.nan, val.dtype), val)
    return val


class RunHandle:
    """A run in flight (from :meth:`Net.run_async`); :meth:`wait` returns its outputs.

    Dropping the handle without waiting gives up the run: the unit its kicked segment
    holds goes to whoever needs it next once the device has finished that segment (before,
    another net waited its whole timeout for a ``wait`` that never came, then got
    DeviceBusy).  The net still completes the run, in order, before its own later runs."""

    __slots__ = ("_run", "__weakref__")

    def __init__(self, run: Run) -> None:
        self._run = run
        weakref.finalize(self, run.abandon).atexit = False  # (nothing to free at exit)

    def wait(self) -> dict[str, np.ndarray]:
        """The run's outputs (finishing it, and any earlier run, first).  Thread-safe."""
        return self._run.wait()

    def done(self) -> bool:
        return self._run.done()

    def __getattr__(self, name: str) -> Any:  # stats, result, exec_id ...: the run's
        return getattr(self._run, name)


def to_ir(spec: dict, arr: np.ndarray) -> np.ndarray:
    """A model-layout input (``spec``: a META inputs entry) as the program's tensor: NHWC
    (Keras) becomes NCHW, and a --transpose net runs on x/y-exchanged tensors."""
    if spec.get("layout") == "NHWC":
        arr = arr.transpose(0, 3, 1, 2)
    return arr.transpose(0, 1, 3, 2) if spec.get("transpose") else arr


def to_model(spec: dict, val: np.ndarray) -> np.ndarray:
    """A program tensor as the model takes or returns it (``spec``: a META inputs or outputs
    entry): the inverse of :func:`to_ir`."""
    if spec.get("transpose"):
        val = val.transpose(0, 1, 3, 2)
    if spec.get("layout") == "NHWC":
        val = val.transpose(0, 2, 3, 1)
    return val.reshape(spec["shape"])
