"""Runtime: a net.bin on a device (the data flow's last software stage).

``net = dvsdk.load("net.bin")`` allocates the activation arena and the weights
once, uploads the weights, rebuilds every command from its relocatable record
and commits one command list per hardware segment.  ``net.run(x)`` takes the
model's own inputs (NCHW float32 for an ONNX model, a dict for several) and
returns ``{output name: float32 array}`` in the model's own shapes, so results
compare directly with onnxruntime.  CPU ops run between segments; every
CPU↔device hand-over is an explicit cache sync.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import cpu_ops, layout
from .driver.cmdlist import CommandList
from .driver.commands import BufferRef, ConvCommand
from .driver.device import Device, open_device
from .errors import InvalidArgument, NetFileError
from .netfile import REGIONS, NetFile, check_hardware, read


@dataclass
class SegmentStats:
    name: str
    device_us: float
    cycles: int | None
    wall_us: float
    commands: int


@dataclass
class RunStats:
    """Where the time of the last ``run`` went."""

    segments: list[SegmentStats] = field(default_factory=list)
    cpu_us: float = 0.0
    pack_us: float = 0.0
    unpack_us: float = 0.0
    total_us: float = 0.0

    @property
    def device_us(self) -> float:
        return sum(s.device_us for s in self.segments)

    @property
    def cycles(self) -> int:
        return sum(s.cycles or 0 for s in self.segments)


def decode_attr(v: Any) -> Any:
    if isinstance(v, dict) and "__array__" in v:
        return np.asarray(v["__array__"], dtype=v["dtype"]).reshape(v["shape"])
    if isinstance(v, list):
        return [decode_attr(x) for x in v]
    return v


class Net:
    """A compiled network loaded on a device."""

    def __init__(self, source: str | os.PathLike | NetFile, device: Device | str | None = None
                 ) -> None:
        self.file = source if isinstance(source, NetFile) else read(source)
        meta = self.file.meta
        self._own_device = not isinstance(device, Device)
        self.device = device if isinstance(device, Device) else open_device(device)
        self._buffers = []
        self._lists: list[CommandList] = []
        try:
            check_hardware(self.file, self.device.info())
            self.meta = meta
            self.tensors: dict[str, dict] = meta["tensors"]
            self.inputs: list[dict] = meta["inputs"]
            self.outputs: list[dict] = meta["outputs"]
            self.labels: list[str] | None = meta.get("labels")
            arena_size = max(int(meta["arena"]["size"]), 64)
            self.arena = self._alloc(arena_size, "arena")
            self.weights = self._alloc(max(len(self.file.weights), 64), "weights")
            if self.file.weights:
                self.weights.write(0, np.frombuffer(self.file.weights, np.uint8))
                self.weights.sync_for_device()
            self.constants = {n: self.file.array(e) for n, e in meta.get("constants",
                                                                           {}).items()}
            self._build(meta["program"])
        except BaseException:
            self.close()
            raise
        self.last_run = RunStats()

    # -- setup --------------------------------------------------------------------------
    def _alloc(self, n: int, name: str):
        buf = self.device.alloc(n, align=64, name=name)
        self._buffers.append(buf)
        return buf

    def _resolve(self, mem: int, offs: int) -> BufferRef:
        if mem == REGIONS["arena"]:
            return BufferRef(self.arena, offs)
        if mem == REGIONS["weights"]:
            return BufferRef(self.weights, offs)
        raise NetFileError("command refers to an unknown memory region", field="mem",
                           value=mem, limit=sorted(REGIONS.values()))

    def _build(self, program: list[dict]) -> None:
        records = self.file.command_records()
        self.steps: list[tuple[str, Any]] = []
        for step in program:
            if step["kind"] == "hw":
                start, count = step["commands"]
                if start < 0 or start + count > len(records):
                    raise NetFileError("program refers to missing commands", field="commands",
                                       value=(start, count), limit=len(records))
                cl = CommandList(self.device)
                self._lists.append(cl)
                for raw in records[start : start + count]:
                    cl.add(ConvCommand.from_raw(raw, self._resolve))
                cl.commit()
                self.steps.append(("hw", (step.get("name", f"segment{len(self._lists)}"), cl,
                                          step.get("writes", []))))
            elif step["kind"] == "cpu":
                attrs = {k: decode_attr(v) for k, v in step.get("attrs", {}).items()}
                self.steps.append(("cpu", (step["op"], attrs, step["inputs"], step["outputs"],
                                           step.get("name", step["op"]))))
            else:
                raise NetFileError("unknown program step", field="kind", value=step["kind"],
                                   limit=("hw", "cpu"))

    # -- tensors between host and arena ---------------------------------------------------
    def _dev(self, name: str) -> dict | None:
        return self.tensors.get(name, {}).get("device")

    def _upload(self, name: str, value: np.ndarray) -> None:
        d = self._dev(name)
        h, w, c = d["hwc"]
        t0 = time.perf_counter()
        hwc = _to_hwc(value, (h, w, c))
        packed = layout.pack(hwc, transpose=bool(d.get("transpose")))
        self.arena.write(d["offset"], packed)
        self.arena.sync_for_device(d["offset"], packed.nbytes)
        self._stats.pack_us += (time.perf_counter() - t0) * 1e6

    def _download(self, name: str) -> np.ndarray:
        d = self._dev(name)
        h, w, c = d["hwc"]
        n = h * w * c * 2
        t0 = time.perf_counter()
        self.arena.sync_for_cpu(d["offset"], n)
        hwc = layout.unpack(self.arena.read(d["offset"], n), (h, w, c),
                            transpose=bool(d.get("transpose")))
        out = _from_hwc(hwc, tuple(self.tensors[name]["shape"]))
        self._stats.unpack_us += (time.perf_counter() - t0) * 1e6
        return out

    def _value(self, name: str, host: dict[str, np.ndarray]) -> np.ndarray:
        if name in self.constants:
            return self.constants[name]
        if name not in host:
            if self._dev(name) is None:
                raise NetFileError("tensor has no value at this point", field="tensor",
                                   value=name)
            host[name] = self._download(name)
        return host[name]

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
            arr = np.asarray(feeds.pop(name), np.float32)
            want = tuple(spec["shape"])
            if arr.shape != want:
                if arr.size == int(np.prod(want)) and arr.ndim == len(want) - 1:
                    arr = arr.reshape(want)
                else:
                    raise InvalidArgument("input shape does not match the model", field=name,
                                          value=arr.shape, limit=want)
            out[name] = arr
        if feeds:
            raise InvalidArgument("unknown input", field="inputs", value=sorted(feeds),
                                  limit=[i["name"] for i in self.inputs])
        return out

    def run(self, x: Any, timeout: float = 10.0) -> dict[str, np.ndarray]:
        """Run once; returns ``{output name: float32 array}`` in the model's shapes."""
        t_start = time.perf_counter()
        self._stats = RunStats()
        host: dict[str, np.ndarray] = {}
        for name, arr in self._feeds(x).items():
            host[name] = arr
            if self._dev(name) is not None:
                self._upload(name, arr)
        for kind, payload in self.steps:
            if kind == "hw":
                name, cl, writes = payload
                t0 = time.perf_counter()
                us = cl.run(timeout)
                wall = (time.perf_counter() - t0) * 1e6
                self._stats.segments.append(SegmentStats(name, us, cl.last.cycles, wall,
                                                         len(cl.commands)))
                for t in list(host):   # the device may have rewritten any arena tensor
                    if self._dev(t) is not None:
                        del host[t]
            else:
                op_type, attrs, inputs, outputs, _ = payload
                args = [self._value(i, host) if i else None for i in inputs]
                t0 = time.perf_counter()
                results = cpu_ops.run_op(op_type, args, attrs)
                self._stats.cpu_us += (time.perf_counter() - t0) * 1e6
                for name, val in zip(outputs, results):
                    if not name:
                        continue
                    host[name] = np.asarray(val)
                    if self._dev(name) is not None:
                        self._upload(name, host[name])
        result = {}
        for spec in self.outputs:
            result[spec["name"]] = np.asarray(self._value(spec["tensor"], host),
                                              np.float32).reshape(spec["shape"])
        self._stats.total_us = (time.perf_counter() - t_start) * 1e6
        self.last_run = self._stats
        return result

    def run_image(self, image: Any, timeout: float = 10.0) -> dict[str, np.ndarray]:
        """Run on an image (path or array) with the preprocessing recorded in the net.bin."""
        from .images import preprocess

        if len(self.inputs) != 1:
            raise InvalidArgument("run_image needs a single-input network", field="inputs",
                                  value=[i["name"] for i in self.inputs])
        spec = self.inputs[0]
        return self.run(preprocess(image, tuple(spec["shape"]), spec.get("preprocess", {})),
                        timeout)

    def selftest(self) -> dict[str, Any]:
        """Run the golden pair stored in the file; report pass/fail and the worst error."""
        gold = self.meta.get("golden")
        if not gold:
            raise NetFileError("this net.bin has no golden pair", field="GOLD")
        feeds = {n: self.file.array(e, "GOLD") for n, e in gold["inputs"].items()}
        got = self.run(feeds)
        worst, ok = 0.0, True
        for name, entry in gold["outputs"].items():
            ref = self.file.array(entry, "GOLD").astype(np.float32)
            err = float(np.max(np.abs(got[name] - ref))) if ref.size else 0.0
            worst = max(worst, err)
            ok &= err <= float(gold["tolerance"][name])
        return {"passed": bool(ok), "max_abs_error": worst, "tolerance": gold["tolerance"]}

    def close(self) -> None:
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


def _to_hwc(value: np.ndarray, hwc: tuple[int, int, int]) -> np.ndarray:
    v = np.asarray(value, np.float32)
    if v.ndim == 4:
        return v[0].transpose(1, 2, 0)
    return v.reshape(hwc)


def _from_hwc(hwc: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if len(shape) == 4:
        return hwc.transpose(2, 0, 1)[None]
    return hwc.reshape(shape)


def load(path: str | os.PathLike | NetFile, device: Device | str | None = None) -> Net:
    """Load a net.bin on ``device`` (a Device, a URL, or None for the default)."""
    return Net(path, device)
