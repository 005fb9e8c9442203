"""Runtime: a net.bin on a device (the data flow's last software stage).

``net = dvsdk.load("net.bin")`` allocates the activation arena and the weights
once, uploads the weights, rebuilds every command from its relocatable record
and commits one command list per hardware segment.  ``net.run(x)`` takes the
model's own inputs (NCHW float32 for an ONNX model, a dict for several) and
returns ``{output name: array}`` in the model's own shapes and element types (META
``dtype``: float32 for float tensors), so results compare directly with onnxruntime.
CPU ops run between segments; every CPU↔device hand-over is an explicit cache sync, one
per segment boundary and byte range (element-wise ops run in the device's layout:
:mod:`.cpusteps`; ``cpu_steps="unpack"`` selects the reference path that converts every
tensor to NCHW and back, per op).

Threads: a :class:`Net` may be shared by threads.  Its runs take turns on one lock (the
device runs one stream at a time anyway): ``run`` holds it from upload to outputs,
``run_async`` and ``RunHandle.wait`` each for their part.  Several nets on one device
take turns per unit through the device's unit gate.
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import Any

import numpy as np

from ..cpu import ops as cpu_ops
from ..driver.cmdlist import CommandList
from ..driver.device import Device, check_timeout, open_device
from ..errors import DeviceError, InvalidArgument, NetFileError
from ..hw import layout
from ..netfile import NetFile, check, check_hardware, read
from . import board_model, cpusteps
from .handle import (
    Run,
    RunContext,
    RunHandle,
    RunStats,
    SegmentStats,
    feed_array,
    to_ir,
)
from .records import decode_attr, relocate, verify

_now = time.perf_counter


class Net:
    """A compiled network loaded on a device."""

    def __init__(self, source: str | os.PathLike | NetFile, device: Device | str | None = None,
                 cpu_steps: str | None = None) -> None:
        #: how CPU steps run: "device" (element-wise ops on the device's layout, one sync
        #: per segment boundary) or "unpack" (the reference: NCHW per tensor and op);
        #: default from DVSDK_CPU_STEPS, else "device"
        self.cpu_steps = cpu_steps or os.environ.get("DVSDK_CPU_STEPS", "").strip() or "device"
        if self.cpu_steps not in cpusteps.MODES:
            raise InvalidArgument("unknown way to run CPU steps", field="cpu_steps",
                                  value=self.cpu_steps, limit=cpusteps.MODES)
        if not isinstance(source, (NetFile, str, os.PathLike)):
            raise InvalidArgument("a net is a net.bin path or a NetFile", field="net",
                                  value=type(source).__name__, limit="str, os.PathLike, NetFile")
        self.file = source if isinstance(source, NetFile) else read(source)
        #: how messages name this net (a DeviceBusy of another net waiting for its unit)
        self.name = "net " + (repr(os.path.basename(os.fspath(source)))
                              if not isinstance(source, NetFile) else "(in memory)")
        if isinstance(source, NetFile):
            check(source)       # read() has checked META; a NetFile may come from anywhere
        # commands, tensors and CPU steps, before touching a device
        self._commands = verify(self.file)
        meta = self.file.meta
        self._own_device = not isinstance(device, Device)
        #: one run at a time moves through the arenas and handles (module docstring)
        self.lock = threading.RLock()
        self.device = device if isinstance(device, Device) else open_device(device)
        self._buffers = []
        self._lists: list[CommandList] = []
        try:
            info = self.device.info()
            check_hardware(self.file, info)
            #: the device times are the simulator's predictions (else measured on a board)
            self.simulated = bool(info.simulated)
            self.meta = meta
            self.tensors: dict[str, dict] = meta["tensors"]
            self.inputs: list[dict] = meta["inputs"]
            self.outputs: list[dict] = meta["outputs"]
            self.labels: list[str] | None = meta.get("labels")
            self.weights = self._alloc(max(len(self.file.weights), 64), "weights")
            if self.file.weights:
                self.weights.write(0, np.frombuffer(self.file.weights, np.uint8))
                self.weights.sync_for_device()
            self.constants = {n: self.file.array(e)
                              for n, e in (meta.get("constants") or {}).items()}
            self._contexts = [self._context()]
        except BaseException:
            self.close()
            raise
        self.last_run = RunStats(device_predicted=self.simulated)
        self._pending: list[Run] = []

    @property
    def arena(self):
        return self._contexts[0].arena

    # -- setup --------------------------------------------------------------------------
    def _alloc(self, n: int, name: str):
        buf = self.device.alloc(n, align=64, name=name)
        self._buffers.append(buf)
        return buf

    def _context(self) -> RunContext:
        """An arena with every hardware segment committed against it."""
        arena = self._alloc(max(int(self.meta["arena"]["size"]), 64), "arena")
        records = self._commands
        commands = [relocate(cmd, arena, self.weights) for cmd in records]
        ctx = RunContext(arena, commands)
        if not hasattr(self, "steps"):
            self._program(len(records))
        for kind, payload in self.steps:
            if kind == "hw":
                start, count = payload[2]["commands"]
                cl = CommandList(self.device)
                cl.label = f"{self.name} segment {payload[2].get('name', len(ctx.lists) + 1)!r}"
                self._lists.append(cl)
                for cmd in commands[start : start + count]:
                    cl.add(cmd)
                cl.commit()
                ctx.lists.append(cl)
        return ctx

    def _program(self, n_commands: int) -> None:
        """The program's steps, their CPU segments and what their runs reuse, worked out
        once per loaded net (every arena's runs share them): a CPU step's compiled plan,
        its lookup table as binary16 (:func:`cpusteps.prepare`), the arena's tensors."""
        steps: list[tuple[str, Any]] = []
        lists = 0
        for step in self.meta["program"]:
            if step["kind"] == "hw":
                start, count = step["commands"]
                if start < 0 or count < 1 or start + count > n_commands:
                    raise NetFileError("program refers to missing commands", field="commands",
                                       value=(start, count), limit=n_commands)
                lists += 1
                steps.append(("hw", (step.get("name", f"segment{lists}"), lists - 1, step)))
            elif step["kind"] == "cpu":
                attrs = {k: decode_attr(v) for k, v in step.get("attrs", {}).items()}
                steps.append(("cpu", (step["op"], attrs, step["inputs"], step["outputs"],
                                      step.get("name", step["op"]))))
            else:
                raise NetFileError("unknown program step", field="kind", value=step["kind"],
                                   limit=("hw", "cpu"))
        self.steps = steps
        self._segments = cpusteps.segments(self.steps)
        self._fused: dict[int, cpusteps.FusedPlan | bool] = {}  # by step (cpusteps.prepare)
        self._step_work_memo: dict = {}  # (board_model.step_work_once, by CPU step)
        #: every tensor's arena placement (META ``device``), by name
        self._devs = {t: d["device"] for t, d in self.tensors.items()
                      if isinstance(d, dict) and d.get("device") is not None}
        self._arena_names = frozenset(self._devs)
        if self.cpu_steps == "device":
            cpusteps.prepare(self)

    # -- tensors between host and arena ---------------------------------------------------
    def _dev(self, name: str) -> dict | None:
        return self._devs.get(name)

    def _arena_tensors(self) -> frozenset[str]:
        """The tensors with an arena placement (``_dev`` not None), worked out at load."""
        return self._arena_names

    def _upload(self, ctx: RunContext, name: str, value: np.ndarray, st: RunStats) -> None:
        d = self._dev(name)
        shape = cpusteps.device_shape(d)
        nbytes = 2 * math.prod(shape)
        t = _now()
        try:  # straight into the arena
            hwc = cpusteps.to_hwc(value, shape)
            ctx.arena.write_with(d["offset"], nbytes, lambda view: layout.pack(
                hwc, transpose=bool(d.get("transpose")), out=view.view(np.float16)))
        finally:
            st.add("pack", name, t, {"bytes": nbytes})
        t = _now()
        try:
            ctx.arena.sync_for_device(d["offset"], nbytes)
        finally:
            st.add("sync", name, t, {"bytes": nbytes})

    def _download(self, ctx: RunContext, name: str, st: RunStats) -> np.ndarray:
        d = self._dev(name)
        shape = cpusteps.device_shape(d)
        n = 2 * math.prod(shape)
        t = _now()
        try:
            ctx.arena.sync_for_cpu(d["offset"], n)
        finally:
            st.add("sync", name, t, {"bytes": n})
        t = _now()
        try:
            hwc = layout.unpack(ctx.arena.read(d["offset"], n, copy=False), shape,
                                transpose=bool(d.get("transpose")))
            return _from_hwc(hwc, tuple(self.tensors[name]["shape"]))
        finally:
            st.add("unpack", name, t, {"bytes": n})

    def _value(self, h: Run, name: str) -> np.ndarray:
        if name in self.constants:
            return self.constants[name]
        if name not in h.host:
            if self._dev(name) is None:
                raise NetFileError("tensor has no value at this point", field="tensor",
                                   value=name)
            h.host[name] = self._download(h.ctx, name, h.stats)
        v = h.host[name]
        return v.nchw() if isinstance(v, cpusteps.Chunked) else v

    # -- running ------------------------------------------------------------------------
    def _feeds(self, x: Any) -> dict[str, np.ndarray]:
        if isinstance(x, dict):
            feeds = dict(x)
        elif len(self.inputs) == 1:
            feeds = {self.inputs[0]["name"]: x}
        else:
            raise InvalidArgument("this network has several inputs: pass a dict",
                                  field="inputs", limit=[i["name"] for i in self.inputs])
        out = {}
        for spec in self.inputs:
            name = spec["name"]
            if name not in feeds:
                raise InvalidArgument("missing input", field="inputs", value=sorted(feeds),
                                      limit=name)
            arr = feed_array(spec, feeds.pop(name), device=self._dev(spec["tensor"]) is not None)
            want = tuple(spec["shape"])
            if arr.shape != want:
                if arr.size == int(np.prod(want)) and arr.ndim == len(want) - 1:
                    arr = arr.reshape(want)
                else:
                    raise InvalidArgument("input shape does not match the model", field=name,
                                          value=arr.shape, limit=want)
            out[spec["tensor"]] = to_ir(spec, arr)  # NHWC and --transpose flip at the boundary
        if feeds:
            raise InvalidArgument("unknown input", field="inputs", value=sorted(feeds),
                                  limit=[i["name"] for i in self.inputs])
        return out

    def run(self, x: Any, timeout: float = 10.0) -> dict[str, np.ndarray]:
        """Run once; returns ``{output name: array}`` in the model's shapes and dtypes.

        ``timeout`` (s) bounds each hardware segment's wait for its unit and for its
        interrupt: finite, ``0..MAX_TIMEOUT`` (InvalidArgument otherwise).  Thread-safe:
        concurrent calls run one after the other."""
        timeout = check_timeout(timeout)
        with self.lock:
            return self._run_async(x, timeout).wait()

    def run_async(self, x: Any, timeout: float = 10.0) -> RunHandle:
        """Upload ``x`` into a free arena and start its first hardware segment.

        Two arenas alternate (double buffering): the CPU packs input n+1 into one while
        the device runs input n from the other; n+1 is kicked as soon as the unit is
        free (it takes one stream at a time).  ``handle.wait()`` finishes the run and
        returns the outputs; handles complete in order, and a third call waits for the
        oldest first.  Thread-safe (module docstring).
        """
        timeout = check_timeout(timeout)
        with self.lock:
            return RunHandle(self._run_async(x, timeout))

    def _run_async(self, x: Any, timeout: float) -> Run:
        while len(self._pending) >= 2:
            self._pending[0].wait()
        busy = {id(h.ctx) for h in self._pending}
        ctx = next((c for c in self._contexts if id(c) not in busy), None)
        if ctx is None:
            ctx = self._context()
            self._contexts.append(ctx)
        h = Run(self, ctx, timeout)
        for name, arr in self._feeds(x).items():
            h.host[name] = arr
            if self._dev(name) is not None:
                self._upload(ctx, name, arr, h.stats)
        self._pending.append(h)
        head = self._pending[0]
        if head.exec_id is None:  # runs start in order, one stream at a time: kick the
            head.advance(block=False)  # oldest if the unit is free (this one, if alone)
        return h

    def _step(self, h: Run, block: bool) -> bool:
        """Run step ``h.pc``; returns False when it had to stop at an unfinished kick."""
        kind, payload = self.steps[h.pc]
        if kind == "hw":
            name, index, _ = payload
            cl = h.ctx.lists[index]
            if h.exec_id is None:
                t_kick = _now()
                if not block:  # kick only if the unit is free (another net may hold it)
                    h.exec_id = cl.try_exec()
                    if h.exec_id is not None:
                        h.t_kick = t_kick
                    return False
                h.exec_id = cl.exec(h.timeout)
                h.t_kick = t_kick
            us = cl.wait(h.exec_id, h.timeout)
            wall = (_now() - h.t_kick) * 1e6
            h.exec_id = None
            st, cycles = h.stats, cl.last.cycles
            st.segments.append(SegmentStats(name, us, cycles, wall, len(cl.commands)))
            st.events.append(("device", name, (h.t_kick - st.t0) * 1e6, wall,
                              {"predicted_us": us, "cycles": cycles}))
            if h.host:  # the device may have rewritten any arena tensor (a set
                for t in h.host.keys() & self._arena_names:  # intersection, in C: the host
                    del h.host[t]  # holds every CPU-only tensor so far, ~100 late in a run)
        elif self.cpu_steps == "device":
            cpusteps.step(self, h)
        else:
            op_type, attrs, inputs, outputs, name = payload
            args = [self._value(h, i) if i else None for i in inputs]
            work: dict = {}
            with h.stats.stage("cpu", f"{op_type} {name}", work):
                try:
                    results = cpu_ops.run_op(op_type, args, attrs)
                except DeviceError:
                    raise
                except Exception as e:  # noqa: BLE001 - a damaged record must not escape raw
                    raise NetFileError.cpu_step(op_type, name, e) from e
            work.update(board_model.step_work(op_type, attrs, args, results))
            for out, val in zip(outputs, results):
                want = self.tensors[out]["shape"] if out else None
                if want is not None and list(np.shape(val)) != list(want):
                    raise NetFileError(f"CPU op {op_type} {name} made {out} of another shape "
                                       "than the file records", field=f"tensors.{out}.shape",
                                       value=list(np.shape(val)), limit=want)
                if out:
                    h.host[out] = np.asarray(val)
                    if self._dev(out) is not None:
                        self._upload(h.ctx, out, h.host[out], h.stats)
        h.pc += 1
        return True

    def profile(self, x: Any | None = None) -> list[dict[str, Any]]:
        """Run every hardware command on its own and report what it costs.

        One row per command: source ops, run kinds, shapes, cycles and µs (predicted on
        the simulator, measured on hardware), MACs and utilization against the peak,
        bytes moved and tiles.  ``x`` defaults to the golden input (or zeros).
        """
        from .profile import profile_net

        with self.lock:
            return profile_net(self, x)

    def run_image(self, image: Any, timeout: float = 10.0, ipu: bool = False,
                  raw: bool = False) -> Any:
        """Run on an image (path or array) with the preprocessing recorded in the net.bin;
        a network compiled for N samples (``batch``) takes a list of N images.

        ``ipu=True`` resizes and converts on the device's IPU (§9.1) straight into the
        input tensor, when the recorded preprocessing has an IPU equivalent (one image:
        the IPU has no batch).

        A net.bin with a task (``dvsdk-compile --task``, META ``task``) returns its result
        (:mod:`dvsdk.tasks`: top-k classes, boxes, a class map, text; a list for a list of
        images); without one, or with ``raw=True``, ``{output name: array}`` as always."""
        from .images import as_rgb, preprocess

        if self.meta.get("task") is not None and not raw:
            from .taskrun import run_task_image

            return run_task_image(self, image, timeout, ipu)
        timeout = check_timeout(timeout)
        if len(self.inputs) != 1:
            raise InvalidArgument("run_image needs a single-input network", field="inputs",
                                  value=[i["name"] for i in self.inputs])
        spec = self.inputs[0]
        shape = tuple(spec["shape"])
        n = shape[0] if len(shape) == 4 else 1
        if isinstance(image, (list, tuple)) or n != 1:
            images = list(image) if isinstance(image, (list, tuple)) else [image]
            if len(images) != n:
                raise InvalidArgument(f"this network runs {n} images at once", field="image",
                                      value=len(images), limit=n)
            if ipu and n != 1:
                raise InvalidArgument("the IPU fills one image; this network takes a batch",
                                      field="ipu", value=n, limit=1)
            if not ipu:
                one = (1, *shape[1:])
                return self.run(np.concatenate([
                    preprocess(i, one, spec.get("preprocess", {}), spec.get("layout", "NCHW"))
                    for i in images]), timeout)
            image = images[0]
        if not ipu:
            return self.run(preprocess(image, shape, spec.get("preprocess", {}),
                                       spec.get("layout", "NCHW")), timeout)
        from .ipu import ipu_preprocess

        rgb = as_rgb(image)
        with self.lock:
            while self._pending:
                self._pending[0].wait()
            ctx = self._contexts[0]
            h = Run(self, ctx, timeout)
            with h.stats.stage("pack", "ipu"):
                ipu_preprocess(self, ctx, spec, rgb, timeout)
            self._pending.append(h)
            return h.wait()

    def preprocess_image(self, image: Any) -> tuple[np.ndarray, tuple[int, int]]:
        """(one sample's input as ``run`` takes it, the image's (height, width)) of an image
        (path or array), with the preprocessing recorded in the net.bin; what a task head's
        ``prepare`` applies (:func:`dvsdk.tasks.head_for`)."""
        from .images import as_rgb, preprocess

        if len(self.inputs) != 1:
            raise InvalidArgument("an image goes to a single-input network", field="inputs",
                                  value=[i["name"] for i in self.inputs])
        spec = self.inputs[0]
        rgb = as_rgb(image)
        x = preprocess(rgb, (1, *tuple(spec["shape"])[1:]), spec.get("preprocess", {}),
                       spec.get("layout", "NCHW"))
        return x, (int(rgb.shape[0]), int(rgb.shape[1]))

    def class_map(self, output: str | None = None) -> np.ndarray:
        """Per-pixel class (H, W) uint8 of a (1, K, H, W) output of the last run, (N, H, W)
        of an (N, K, H, W) one: the maximizer unit when the device has one (§9.2; one
        command a sample), else numpy (lowest index wins)."""
        from .ipu import class_map

        with self.lock:
            return class_map(self, output)

    def selftest(self) -> dict[str, Any]:
        """Run the golden pair stored in the file; report pass/fail and the worst error."""
        gold = self.meta.get("golden")
        if not gold:
            raise NetFileError("this net.bin has no golden pair", field="GOLD",
                               hint=self.meta.get("golden_omitted"))
        feeds = {n: self.file.array(e, "GOLD") for n, e in gold["inputs"].items()}
        with self.lock:
            got = self.run(feeds)
        worst, ok = 0.0, True
        for name, entry in gold["outputs"].items():
            err = golden_error(got[name], self.file.array(entry, "GOLD"))
            worst = max(worst, err)
            ok &= err <= float(gold["tolerance"][name])
        return {"passed": bool(ok), "max_abs_error": worst, "tolerance": gold["tolerance"]}

    def close(self) -> None:
        with self.lock:
            self._close()

    def _close(self) -> None:
        for cl in self._lists:
            cl.close()
        self._lists = []
        for b in self._buffers:
            b.free()
        self._buffers = []
        if self._own_device and getattr(self, "device", None) is not None:
            self.device.close()

    def __enter__(self) -> Net:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def golden_error(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest absolute difference of an output from its golden reference (in float64);
    inf where NaN or +-inf are not exactly where the reference has them."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    fin = np.isfinite(r)
    if not (np.array_equal(np.isnan(g), np.isnan(r))
            and np.array_equal(g[np.isinf(r)], r[np.isinf(r)]) and np.isfinite(g[fin]).all()):
        return float("inf")
    return float(np.max(np.abs(g[fin] - r[fin]))) if fin.any() else 0.0


def _from_hwc(hwc: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if len(shape) == 4:
        return hwc.transpose(2, 0, 1)[None] if hwc.ndim == 3 else hwc.transpose(0, 3, 1, 2)
    return hwc.reshape(shape)


def load(path: str | os.PathLike | NetFile, device: Device | str | None = None,
         cpu_steps: str | None = None) -> Net:
    """Load a net.bin on ``device`` (a Device, a URL, or None for the default);
    ``cpu_steps`` as :class:`Net` takes it."""
    return Net(path, device, cpu_steps)
