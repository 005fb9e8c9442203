"""Frames through a network with the device kept busy: four stages, each its own thread.

::

    source ──► prepare ──► run ──► finish + draw + sinks
    (decode)   (resize,    (the     (the task head's decoding, NMS, the drawing, the
               normalize)  DV700)   outputs: files, framebuffer, preview)

While the device runs frame n, frame n+1 is decoded and prepared (and packed into the
net's second arena: ``net.run_async`` keeps two runs in flight) and frame n-1 is decoded
into a result, drawn and written, so the device waits only when the host's stages are
slower than it.  Queues between stages are bounded (``depth``, default 2):
a slow sink holds the source back instead of filling memory.  A live source (a camera)
does not wait: its stage keeps only the newest frame in a one-slot mailbox, and a frame
that the prepare stage has not taken before the next one arrives is dropped (counted in
the report), so the output shows the present rather than a growing backlog.

Each stage's time per frame is measured (``time.perf_counter``), and each frame's
latency from the moment its source produced it to the moment its sinks were done.
:class:`PipelineReport` gives, per stage, the median and p99 in milliseconds and the
rate that stage alone would sustain (1 / its mean time), and the whole pipeline's
frames per second.  On ``sim://`` the device's time is the simulator's prediction
(``net.last_run``, :mod:`dvsdk.runtime.handle`), so the report adds the predicted device
FPS (1 / median predicted device time) and the predicted board FPS of a sequential run
(:mod:`dvsdk.runtime.board_model`), labelled as predictions, beside the host's measured
ones.

With ``ipu=True`` the prepare stage only works out each frame's geometry (the decoded RGB
frame is kept), and the run stage has the device's IPU resize it and convert it to FP16
straight into the input tensor (§9.1 of dv700-interface.md,
:func:`dvsdk.runtime.ipu.ipu_preprocess`) before the net runs, as
``net.run_image(frame, ipu=True)`` does, one frame at a time (the IPU's command and the
net's share the device).  The net's recorded preprocessing must have an IPU equivalent
(stretch resize, x/255 or x - integer mean, no std, one sample): otherwise the pipeline
refuses before its first frame (InvalidArgument naming the field,
:func:`dvsdk.runtime.ipu.check_ipu`).

A frame whose outputs hold NaN or inf (values that overflowed FP16 on the device) is
still finished, drawn and written, and counted (``PipelineReport.nonfinite``, the first
such frame's name in ``first_nonfinite``); ``on_nonfinite(frame, outputs)`` is called for
each.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgument
from .sources import Frame, Source, open_source

STAGES = ("source", "prepare", "run", "finish", "draw", "sink")
_END = object()
_EMPTY = object()     # get_nowait: nothing waiting


@dataclass
class _Item:
    frame: Frame
    born: float                     # perf_counter when the source produced it
    x: Any = None
    ctx: Any = None
    outputs: dict | None = None


class _Mailbox:
    """A one-slot queue whose ``put`` replaces an untaken item (a live source's frames)."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.item: Any = None
        self.full = False
        self.dropped = 0

    def put(self, item: Any, stop: threading.Event) -> None:
        with self.cond:
            while item is _END and self.full and not stop.is_set():
                self.cond.wait(0.1)      # the end waits for the last frame to be taken
            if self.full:
                self.dropped += 1        # a newer frame replaces one nobody took
            self.item, self.full = item, True
            self.cond.notify_all()

    def get(self, stop: threading.Event) -> Any:
        with self.cond:
            while not self.full:
                if stop.is_set():
                    return _END
                self.cond.wait(0.1)
            item, self.item, self.full = self.item, None, False
            self.cond.notify_all()
            return item

    def get_nowait(self) -> Any:
        with self.cond:
            if not self.full:
                return _EMPTY
            item, self.item, self.full = self.item, None, False
            self.cond.notify_all()
            return item


class _Queue:
    """A bounded queue whose waits give up when the pipeline stops."""

    def __init__(self, depth: int) -> None:
        self.q: queue.Queue = queue.Queue(depth)
        self.dropped = 0

    def put(self, item: Any, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.q.put(item, timeout=0.1)
                return
            except queue.Full:
                pass

    def get(self, stop: threading.Event) -> Any:
        while not stop.is_set():
            try:
                return self.q.get(timeout=0.1)
            except queue.Empty:
                pass
        return _END

    def get_nowait(self) -> Any:
        try:
            return self.q.get_nowait()
        except queue.Empty:
            return _EMPTY


def _ms(values: list[float]) -> dict[str, float]:
    v = np.asarray(values, np.float64) * 1e3
    if not v.size:
        return {"median_ms": 0.0, "p99_ms": 0.0, "fps": 0.0}
    mean = float(v.mean())
    return {"median_ms": float(np.percentile(v, 50)), "p99_ms": float(np.percentile(v, 99)),
            "fps": 1e3 / mean if mean > 0 else 0.0}


@dataclass
class PipelineReport:
    """What a pipeline did: ``frames`` through it, ``dropped`` (a live source's stale
    frames), ``wall_s``, per-stage times (seconds, one entry a frame), per-frame latency,
    and each run's device time in µs (``device_predicted``: the simulator's prediction)
    and its predicted board time."""

    frames: int = 0
    dropped: int = 0
    wall_s: float = 0.0
    stages: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STAGES})
    latency: list[float] = field(default_factory=list)
    device_us: list[float] = field(default_factory=list)
    board_us: list[float] = field(default_factory=list)
    device_predicted: bool = True
    nonfinite: int = 0
    first_nonfinite: str | None = None

    @property
    def fps(self) -> float:
        return self.frames / self.wall_s if self.wall_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"frames": self.frames, "dropped": self.dropped,
                             "nonfinite": self.nonfinite,
                             "wall_s": self.wall_s, "fps": self.fps,
                             "stages": {s: _ms(v) for s, v in self.stages.items() if v},
                             "latency": _ms(self.latency)}
        d["latency"].pop("fps")
        if self.device_us:
            dev = float(np.median(self.device_us))
            board = float(np.median(self.board_us)) if self.board_us else 0.0
            d["device"] = {"median_us": dev, "fps": 1e6 / dev if dev > 0 else 0.0,
                           "board_median_us": board,
                           "board_fps": 1e6 / board if board > 0 else 0.0,
                           "predicted": self.device_predicted}
        return d

    def lines(self) -> list[str]:
        """The summary printed at the end: the host's rate, each stage, the latency, and
        on the simulator the device's predicted rate."""
        d = self.as_dict()
        drop = f", {self.dropped} stale frames dropped" if self.dropped else ""
        out = [f"{self.frames} frames in {self.wall_s:.2f} s: {self.fps:.1f} FPS on this "
               f"host (measured){drop}",
               f"  {'stage':8s} {'median':>10s} {'p99':>10s} {'alone':>10s}"]
        for name, s in d["stages"].items():
            out.append(f"  {name:8s} {s['median_ms']:7.2f} ms {s['p99_ms']:7.2f} ms "
                       f"{s['fps']:6.1f} FPS")
        if self.nonfinite:
            out.append(f"  {self.nonfinite} frames with non-finite outputs (NaN/inf), the "
                       f"first {self.first_nonfinite}")
        lat = d["latency"]
        out.append(f"  latency  {lat['median_ms']:7.2f} ms {lat['p99_ms']:7.2f} ms  "
                   "(source to sinks)")
        dev = d.get("device")
        if dev:
            how = "predicted by the simulator's cycle model" if dev["predicted"] else "measured"
            out.append(f"device: {dev['median_us'] / 1e3:.2f} ms a frame, {dev['fps']:.1f} FPS "
                       f"({how})")
            if dev["board_fps"]:
                out.append(f"on the board, predicted: {dev['board_median_us'] / 1e3:.2f} ms a "
                           f"frame run by run, {dev['board_fps']:.1f} FPS "
                           "(device + CPU + syncs, dvsdk/runtime/board_model.py)")
        return out


class Pipeline:
    """``net`` (a loaded :class:`~dvsdk.runtime.net.Net`) on every frame of ``source``
    (anything :func:`~.sources.open_source` takes), each result given to every sink
    (``write(frame, result, annotated)``; the annotated frame is drawn only when a sink
    ``needs_annotated``).  ``head``: the task head (default :func:`dvsdk.tasks.head_for`);
    ``live``: drop stale frames (default: the source's own ``live``); ``depth``: the bound
    of each queue; ``on_result(frame, result)``: called in the last stage, in order;
    ``ipu``: resize and convert on the device's IPU (module docstring);
    ``on_nonfinite(frame, outputs)``: called for a frame whose outputs hold NaN/inf."""

    def __init__(self, net: Any, source: Any, sinks: Iterable[Any] = (), head: Any = None,
                 timeout: float = 10.0, live: bool | None = None, depth: int = 2,
                 on_result: Callable[[Frame, Any], None] | None = None,
                 max_frames: int | None = None, ipu: bool = False,
                 on_nonfinite: Callable[[Frame, dict], None] | None = None) -> None:
        if depth < 1:
            raise InvalidArgument("the queue depth must be at least 1", field="depth",
                                  value=depth, limit=">= 1")
        shape = tuple(net.inputs[0]["shape"]) if len(net.inputs) == 1 else ()
        if len(shape) == 4 and shape[0] != 1:
            raise InvalidArgument("the pipeline runs one frame at a time: compile the net "
                                  "for a batch of 1", field="batch", value=shape[0], limit=1)
        if ipu:
            from ..runtime.ipu import check_ipu

            check_ipu(net)
        if head is None:
            from ..tasks import head_for

            head = head_for(net)
        self.net, self.head, self.timeout = net, head, timeout
        self.source: Source = open_source(source)
        self.sinks = list(sinks)
        self.live = self.source.live if live is None else live
        self.depth = depth
        self.on_result = on_result
        self.max_frames = max_frames
        self.ipu = ipu
        self.on_nonfinite = on_nonfinite
        self.report = PipelineReport(device_predicted=bool(getattr(net, "simulated", True)))
        self.stop = threading.Event()
        self.errors: list[BaseException] = []

    # -- the stages ---------------------------------------------------------------------
    def _guard(self, body: Callable[[], None], out: Any) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                self.errors.append(e)
                self.stop.set()
            finally:
                out.put(_END, self.stop) if not self.stop.is_set() else None
        return run

    def _read(self, out: Any) -> None:
        times = self.report.stages["source"]
        it = iter(self.source)
        n = 0
        while not self.stop.is_set() and (self.max_frames is None or n < self.max_frames):
            t0 = time.perf_counter()
            frame = next(it, None)
            t1 = time.perf_counter()
            if frame is None:
                return
            times.append(t1 - t0)
            out.put(_Item(frame, t1), self.stop)
            n += 1

    def _prepare(self, inbox: Any, out: Any) -> None:
        times = self.report.stages["prepare"]
        while (item := inbox.get(self.stop)) is not _END:
            t0 = time.perf_counter()
            if self.ipu:   # the IPU prepares it in the run stage: the geometry only
                item.ctx = self.head.geometry(*item.frame.rgb.shape[:2])
            else:
                item.x, item.ctx = self.head.prepare(item.frame.rgb)
            times.append(time.perf_counter() - t0)
            out.put(item, self.stop)

    def _run(self, inbox: Any, out: Any) -> None:
        """Two runs in flight (``net.run_async``: the input of frame n+1 is packed into the
        second arena while the device runs frame n); the oldest is waited for when a third
        frame comes, or at once when no frame is waiting (a camera's frame is not held
        back for the next one)."""
        rep = self.report
        flight: deque[tuple[_Item, Any, float]] = deque()

        def finish_oldest() -> None:
            item, handle, spent = flight.popleft()
            t0 = time.perf_counter()
            item.outputs = handle.wait()
            rep.stages["run"].append(spent + time.perf_counter() - t0)
            st = handle.stats
            if st.segments:
                rep.device_us.append(st.device_us)
                rep.board_us.append(st.board.total_us)
            item.x = None
            out.put(item, self.stop)

        if self.ipu:
            self._run_ipu(inbox, out)
            return
        while True:
            item = inbox.get_nowait() if flight else inbox.get(self.stop)
            if item is _EMPTY:
                finish_oldest()
                continue
            if item is _END:
                break
            t0 = time.perf_counter()
            handle = self.net.run_async(item.x, self.timeout)
            flight.append((item, handle, time.perf_counter() - t0))
            if len(flight) >= 2:
                finish_oldest()
        while flight and not self.stop.is_set():
            finish_oldest()

    def _run_ipu(self, inbox: Any, out: Any) -> None:
        """Each frame: the IPU's resize and conversion into the input tensor, then the net
        (``net.run_image(rgb, ipu=True)``; the device does one at a time)."""
        rep = self.report
        while (item := inbox.get(self.stop)) is not _END:
            t0 = time.perf_counter()
            item.outputs = self.net.run_image(item.frame.rgb, self.timeout, ipu=True,
                                              raw=True)
            rep.stages["run"].append(time.perf_counter() - t0)
            st = self.net.last_run
            if st.segments:
                rep.device_us.append(st.device_us)
                rep.board_us.append(st.board.total_us)
            out.put(item, self.stop)

    def _finish(self, inbox: Any) -> None:
        rep = self.report
        draw = any(getattr(s, "needs_annotated", False) for s in self.sinks)
        self._watchers = [s for s in self.sinks if hasattr(s, "progress")]
        frames = self._frames

        def inbox_dropped() -> int:
            return frames.dropped

        while (item := inbox.get(self.stop)) is not _END:
            t0 = time.perf_counter()
            bad = not all(np.isfinite(v).all() for v in item.outputs.values()
                          if np.asarray(v).dtype.kind in "fc")
            with np.errstate(all="ignore"):   # NaN/inf are counted, not warned about
                result = self.head.finish(item.outputs, item.ctx)
            t1 = time.perf_counter()
            if bad:
                item.frame.nonfinite = True     # the sinks' records say so
                rep.nonfinite += 1
                if rep.first_nonfinite is None:
                    rep.first_nonfinite = item.frame.name
                if self.on_nonfinite is not None:
                    self.on_nonfinite(item.frame, item.outputs)
            with np.errstate(all="ignore"):
                annotated = result.draw(item.frame.rgb) if draw else None
            t2 = time.perf_counter()
            for s in self.sinks:
                s.write(item.frame, result, annotated)
            if self.on_result is not None:
                self.on_result(item.frame, result)
            t3 = time.perf_counter()
            rep.stages["finish"].append(t1 - t0)
            if draw:
                rep.stages["draw"].append(t2 - t1)
            rep.stages["sink"].append(t3 - t2)
            rep.latency.append(t3 - item.born)
            rep.frames += 1
            for s in self._watchers:   # a preview page shows the running count
                s.progress({"frames": rep.frames, "dropped": inbox_dropped(),
                            "fps": rep.frames / max(t3 - self.t_start, 1e-9)})

    def run(self) -> PipelineReport:
        """Run to the source's end (or ``max_frames``); the first error of any stage is
        raised here, after every thread has stopped.  The sinks are not closed."""
        frames = self._frames = _Mailbox() if self.live else _Queue(self.depth)
        prepared, ran = _Queue(self.depth), _Queue(self.depth)
        threads = [threading.Thread(target=self._guard(lambda: self._read(frames), frames),
                                    name="source", daemon=True),
                   threading.Thread(target=self._guard(lambda: self._prepare(frames, prepared),
                                                       prepared), name="prepare", daemon=True),
                   threading.Thread(target=self._guard(lambda: self._run(prepared, ran), ran),
                                    name="run", daemon=True)]
        t0 = self.t_start = time.perf_counter()
        for t in threads:
            t.start()
        try:
            self._finish(ran)
        except BaseException:
            self.stop.set()
            raise
        finally:
            self.stop.set()
            for t in threads:
                t.join()
            self.report.wall_s = time.perf_counter() - t0
            self.report.dropped = frames.dropped
            self.source.close()
        if self.errors:
            raise self.errors[0]
        return self.report


def run_pipeline(net: Any, source: Any, sinks: Iterable[Any] = (), **kw: Any
                 ) -> PipelineReport:
    """:class:`Pipeline` ``(net, source, sinks, **kw).run()``, closing the sinks after
    (each told whether the run succeeded, for those that keep or discard their file)."""
    sinks = list(sinks)
    ok = False
    try:
        report = Pipeline(net, source, sinks, **kw).run()
        ok = True
        return report
    finally:
        for s in sinks:
            try:
                s.close(ok) if _takes_ok(s) else s.close()
            except Exception:  # noqa: BLE001 - a failed close must not hide the real error
                if ok:
                    raise


def _takes_ok(sink: Any) -> bool:
    import inspect

    try:
        return len(inspect.signature(sink.close).parameters) >= 1
    except (TypeError, ValueError):
        return False
