"""compile(): model → optimized IR → DV700 program → memory plan → net.bin.

The file records everything the runtime needs and nothing it must guess:
hardware requirements, inputs with their preprocessing, outputs, labels, the
relocatable commands, CPU op records and constants, packed weights, the memory
plan, a per-op report and a golden input/output pair for self-test.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from ..driver.commands import BufferRef
from ..driver.device import DeviceInfo
from ..errors import InvalidArgument, InvalidCommand, ModelError, NetFileError
from ..fsutil import read_utf8
from ..hw import quirks
from ..netfile import FORMAT_VERSION, REGIONS, BlobBuilder, NetFile, decode, encode, write
from ..runtime.records import encode_attr
from .batch import check_batch, set_batch, warn_fallbacks
from .golden import add_golden
from .ir import Graph
from .lower import lower
from .memplan import Plan, plan
from .program import CpuStep, HwStep, Program

CHANNEL_ORDERS = ("RGB", "BGR")
RESIZE_MODES = ("stretch", "letterbox", "crop")


@dataclass
class Options:
    """Compiler options (the ``dvsdk-compile`` flags)."""

    quantize: bool = False
    quantize_skip: tuple[str, ...] = ()   # layers kept in FP16 when quantizing
    transpose: bool = False
    input_size: tuple[int, int] | None = None
    #: samples per run (:mod:`.batch`): every batched input's leading dimension; None keeps
    #: the model's own (a free batch is 1)
    batch: int | None = None
    mean: tuple[float, ...] = (0.0, 0.0, 0.0)
    scale: float = 1.0
    std: tuple[float, ...] | None = None
    channel_order: str = "RGB"
    resize: str = "stretch"
    labels: list[str] | None = None
    ub_size: int = 524288
    #: the target's hardware version (HWMAJOR.HWMINOR.YYYYMMDD or its date; 0: the newest):
    #: work that version cannot do (:mod:`dvsdk.hw.quirks`) is split or kept on the CPU
    hw_version: str | int = 0
    golden: bool = True
    multirun: bool = True
    #: consecutive commands chained through the unified buffer (:mod:`.chain`)
    chain: bool = True
    #: chains on a narrow input run in column bands, every intermediate on chip
    #: (:mod:`.bands`; the same bits; off with ``chain``)
    bands: bool = True
    #: a conv and the per-channel runs after it in groups of output channels, the
    #: intermediate on chip (:mod:`.groups`; the same bits; off with ``chain``)
    groups: bool = True
    #: element-wise tails of device tensors as one CPU table lookup (:mod:`.table`)
    tables: bool = True
    #: convs moved to just before the Add they feed, so it fuses (:mod:`.reorder`):
    #: one FP16 rounding instead of two, so results change (within FP16 tolerance)
    fuse_adds: bool = False
    format: str | None = None  # the model format; None: from the file
    #: the task head recorded in META ``task`` (:mod:`dvsdk.tasks.spec`): a kind
    #: ("classify", "detect", "segment", "ocr"), a dict of META ``task`` keys (``chars``
    #: may be a file), or a TaskSpec; None: no head
    task: Any = None
    #: resize "crop": the share of the resized image kept (ImageNet's 224/256)
    crop_ratio: float = 0.875
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse preprocessing the runtime could not apply: ``(x - mean) * scale / std``
        needs finite means, a finite non-zero scale and finite positive stds."""
        self.mean = _per_channel(_floats(self.mean, "mean"), "mean")
        if self.std is not None:
            self.std = _per_channel(_floats(self.std, "std"), "std")
            bad = [v for v in self.std if not v > 0]
            if bad:
                raise ModelError("std must be positive (the image is divided by it)",
                                 field="std", value=list(self.std), limit="> 0")
        try:
            self.scale = float(self.scale)
        except (TypeError, ValueError):
            raise ModelError("scale is not a number", field="scale", value=self.scale) from None
        if not np.isfinite(self.scale) or self.scale == 0:
            raise ModelError("scale must be finite and non-zero", field="scale",
                             value=self.scale, limit="finite, != 0")
        try:
            self.hw_date = quirks.parse_hw_version(self.hw_version)
        except InvalidArgument as e:
            raise ModelError(e.message, field="hw_version", value=self.hw_version,
                             limit=e.limit) from None
        if self.batch is not None:
            self.batch = check_batch(self.batch)
        if self.channel_order not in CHANNEL_ORDERS:
            raise ModelError("unknown channel order", field="channel_order",
                             value=self.channel_order, limit=CHANNEL_ORDERS)
        if self.resize not in RESIZE_MODES:
            raise ModelError("unknown resize mode", field="resize", value=self.resize,
                             limit=RESIZE_MODES)
        if isinstance(self.quantize_skip, str):
            self.quantize_skip = tuple(n for n in self.quantize_skip.split(",") if n)
        self.quantize_skip = _names(self.quantize_skip, "quantize_skip")
        self.input_size = _input_size(self.input_size)
        if isinstance(self.ub_size, bool) or not isinstance(self.ub_size, (int, np.integer)) \
                or self.ub_size < 1:
            raise ModelError("ub_size must be a whole number of bytes >= 1", field="ub_size",
                             value=self.ub_size, limit=">= 1")
        if self.quantize_skip and not self.quantize:
            raise ModelError("quantize_skip needs quantize", field="quantize_skip",
                             value=list(self.quantize_skip))
        if self.labels is not None:
            if isinstance(self.labels, (str, bytes)) or not _iterable(self.labels) or not all(
                    isinstance(x, str) and x.strip() for x in self.labels):
                raise ModelError("labels must be a list of non-empty names (or a file)",
                                 field="labels", value=str(self.labels)[:80])
            self.labels = [x.strip() for x in self.labels]


def _iterable(v: Any) -> bool:
    try:
        iter(v)
    except TypeError:
        return False
    return True


def _names(values: Any, name: str) -> tuple[str, ...]:
    """A list of layer names (ModelError naming ``name`` for anything else)."""
    names = tuple(values) if _iterable(values) else None
    if names is None or not all(isinstance(v, str) for v in names):
        raise ModelError(f"{name} must be layer names", field=name, value=values,
                         limit="a list of names or NAME,NAME,...")
    return names


def _input_size(size: Any) -> tuple[int, int] | None:
    """``input_size`` as ``(H, W)`` of whole numbers >= 1; ``"HxW"`` as dvsdk-compile's
    ``--input-size`` takes it."""
    if size is None:
        return None
    try:
        vals = size.lower().split("x") if isinstance(size, str) else list(size)
        h, w = (int(v) for v in vals)
        ok = all(float(v) == int(v) for v in vals) and h >= 1 and w >= 1
    except (TypeError, ValueError, AttributeError, OverflowError):
        ok = False
    if not ok:
        raise ModelError("input_size must be two positive whole numbers (H, W) or \"HxW\"",
                         field="input_size", value=size, limit="(H, W) >= 1")
    return h, w


def _per_channel(values: tuple[float, ...], name: str) -> tuple[float, ...]:
    """One value for all three channels (R, G, B), or one each: the images are RGB (a
    1-channel input takes the first after the gray conversion), as dvsdk-compile reads
    ``--mean`` and ``--std``."""
    if len(values) == 1:
        return values * 3
    if len(values) != 3:
        raise ModelError(f"{name} needs 1 or 3 values (R, G, B)", field=name,
                         value=list(values), limit="1 or 3 values")
    return values


def _floats(values: Any, name: str) -> tuple[float, ...]:
    """A preprocessing vector as finite floats (ModelError naming the field otherwise)."""
    try:
        out = tuple(float(v) for v in np.atleast_1d(np.asarray(values, dtype=object)))
    except (TypeError, ValueError):
        raise ModelError(f"{name} is not a list of numbers", field=name, value=values) from None
    if not out or not all(np.isfinite(out)):
        raise ModelError(f"{name} must be finite numbers", field=name, value=list(out),
                         limit="finite")
    return out


class _Region:
    """Stand-in DMA buffer of one net.bin region, so commands encode relocatably."""

    def __init__(self, region: int, size: int) -> None:
        self.region, self.phys, self.size, self.freed, self.name = region, 0, size, False, \
            {1: "arena", 2: "weights"}[region]


def load_model(model: Any, options: Options) -> Graph:
    """Read and optimize a model: a path (the format from the file unless
    ``options.format`` names it) or an in-memory ONNX model (bytes or a ModelProto)."""
    from .fold import infer_and_fold
    from .frontends import load
    from .simplify import optimize

    graph = load(model, options.format, options.input_size)
    if options.batch is not None:
        graph = set_batch(graph, options.batch)
    return optimize(infer_and_fold(graph))


def _add_blob(blob: BlobBuilder, stored: dict[int, tuple[bytes, int]], data: bytes) -> int:
    """``data``'s offset in the weights, stored once however many commands run it (the
    bands of a chain share their runs' weights, :mod:`.bands`)."""
    got = stored.get(id(data))
    if got is None:
        got = stored[id(data)] = (data, blob.add(data))   # (kept alive: ids stay unique)
    return got[1]


def _encode_program(program: Program, mplan: Plan, options: Options
                    ) -> tuple[list[dict], bytes, bytes, BlobBuilder, dict]:
    arena = _Region(REGIONS["arena"], max(mplan.size, 64))
    weights_blob = BlobBuilder(align=64)
    records = BlobBuilder(align=8)
    constants = BlobBuilder(align=16)
    const_index: dict[str, dict] = {}
    steps: list[dict] = []
    place = {n: BufferRef(arena, off) for n, off in mplan.offsets.items()}
    info = DeviceInfo(ub_size=options.ub_size, mac_num=576, max_kernel_size=7, svn_version=93,
                      hw_date=options.hw_date)
    weight_refs: list[list[int | None]] = []
    stored: dict[int, tuple[bytes, int]] = {}
    ncmd = 0
    from ..driver.validate import validate_conv

    for step in program.steps:
        if isinstance(step, HwStep):
            start = ncmd
            for cmd in step.commands:
                offs = [_add_blob(weights_blob, stored, b) if b else None for b in cmd.blobs]
                weight_refs.append(offs)
            sources = []
            for cmd, offs in zip(step.commands, weight_refs[start:]):
                wregion = _Region(REGIONS["weights"], 1 << 31)
                conv = cmd.command(place, [BufferRef(wregion, o) if o is not None else None
                                           for o in offs])
                try:
                    validate_conv(conv, info)
                except InvalidCommand as e:  # a lowering bug, not a user error
                    raise ModelError(f"internal: planned command fails validation: {e}",
                                     field=",".join(cmd.sources)) from e
                records.add(conv.to_raw(lambda b: b.region))
                sources.extend(cmd.sources)
                ncmd += 1
            steps.append({"kind": "hw", "name": f"segment{len(steps)}",
                          "commands": [start, ncmd - start], "sources": sources,
                          "runs": [c.kind for c in step.commands],
                          "command_sources": [c.sources for c in step.commands],
                          "command_outputs": [c.output for c in step.commands],
                          "command_inputs": [[c.input] + ([c.eltwise] if c.eltwise else [])
                                             for c in step.commands]})
        elif isinstance(step, CpuStep):
            op = step.op
            for name in op.inputs:
                c = program.graph.const(name)
                if name and c is not None and name not in const_index:
                    const_index[name] = constants.add_array(np.asarray(c))
            steps.append({"kind": "cpu", "op": op.type, "name": op.name,
                          "attrs": {k: encode_attr(v) for k, v in op.attrs.items()},
                          "inputs": list(op.inputs), "outputs": list(op.outputs)})
    # A graph output that folded to a constant (e.g. a Shape of a static tensor) is produced
    # by no step: the runtime returns it from CNST.
    for name in program.graph.outputs:
        c = program.graph.const(name)
        if c is not None and name not in const_index:
            const_index[name] = constants.add_array(np.asarray(c))
    return steps, records.bytes(), weights_blob.bytes(), constants, const_index


def compile_graph(graph: Graph, options: Options, source: str = "") -> NetFile:
    t0 = time.perf_counter()
    info = DeviceInfo(ub_size=options.ub_size, mac_num=576, max_kernel_size=7, svn_version=93,
                      hw_date=options.hw_date)
    quant_report: list[dict] = []
    quantized: bool | frozenset = False
    if options.quantize:
        from .quantize import quantize_graph

        graph, quant_report, quantized = quantize_graph(graph, options.quantize_skip)
    model_graph = graph
    if options.transpose:
        from .transpose import transpose_spatial

        graph = transpose_spatial(graph)
    program = lower(graph, info, quantize=quantized, multirun=options.multirun,
                    chain=options.chain, bands=options.bands, groups=options.groups,
                    tables=options.tables,
                    fuse_adds=options.fuse_adds)
    mplan = plan(program)
    steps, cmds, weights, constants, const_index = _encode_program(program, mplan, options)
    tensors = {}
    for name, t in graph.tensors.items():
        if t.is_const:
            continue
        entry: dict[str, Any] = {"shape": list(t.shape or ()),
                                 "dtype": str(t.dtype or "float32")}
        if name in program.device:
            entry["device"] = {"offset": mplan.offsets[name], "hwc": list(program.device[name])}
            if program.samples.get(name, 1) != 1:
                entry["device"]["batch"] = program.samples[name]
        tensors[name] = entry
    for name in program.device.keys() - tensors.keys():   # a band's strips and copies
        h, w, c = program.device[name]
        tensors[name] = {"shape": [1, c, h, w], "dtype": "float16",
                         "device": {"offset": mplan.offsets[name], "hwc": [h, w, c]}}
    preprocess = {"mean": list(options.mean), "scale": options.scale,
                  "std": list(options.std) if options.std else None,
                  "channel_order": options.channel_order, "resize": options.resize}
    if options.resize == "crop":
        if not 0 < float(options.crop_ratio) <= 1:
            raise ModelError("crop_ratio must be in (0, 1]", field="crop_ratio",
                             value=options.crop_ratio, limit="(0, 1]")
        preprocess["crop_ratio"] = float(options.crop_ratio)
    def swapped(n: str) -> bool:  # transposed at the boundary (--transpose)
        return options.transpose and len(model_graph.shape(n) or ()) == 4

    def dtype(n: str) -> str:
        return str(model_graph.tensors[n].dtype or "float32")

    inputs, outputs = [], []
    for n in graph.inputs:
        shape, lay = boundary(model_graph, n, "NCHW")
        inputs.append({"name": n, "tensor": n, "shape": shape, "dtype": dtype(n),
                       "layout": lay, "preprocess": preprocess, "transpose": swapped(n)})
    for n in graph.outputs:
        shape, lay = boundary(model_graph, n, "ND")
        outputs.append({"name": n, "tensor": n, "shape": shape, "dtype": dtype(n),
                        "transpose": swapped(n), "layout": lay})
    hw_ops = sum(1 for r in program.report if r["where"] == "hw")
    meta = {
        "format_version": FORMAT_VERSION, "compiler": f"dvsdk {__version__}", "source": source,
        "hardware": {"ub_size_min": options.ub_size, "max_kernel_size": _max_kernel(program),
                     "svn_version_min": 93, "units": ["conv"],
                     **({"hw_version": options.hw_date} if options.hw_date else {})},
        "inputs": inputs, "outputs": outputs, "labels": options.labels,
        "tensors": tensors, "program": steps, "constants": const_index,
        "arena": {"size": mplan.size, "offsets": mplan.offsets},
        "weights": {"size": len(weights), "quantized": options.quantize},
        "report": program.report,
        "quantization": quant_report,
        "stats": {"hw_ops": hw_ops, "cpu_ops": len(program.report) - hw_ops,
                  "commands": len(cmds) and sum(s["commands"][1] for s in steps
                                                if s["kind"] == "hw"),
                  "compile_s": 0.0},
    }
    net = NetFile(meta=meta, commands=cmds, weights=weights, constants=constants.bytes())
    meta["transposed"] = options.transpose
    warn_fallbacks(meta, program.graph)
    if options.golden:
        add_golden(net, model_graph)
    else:
        meta["golden_omitted"] = "compiled without one (--no-golden)"
    meta["stats"]["compile_s"] = round(time.perf_counter() - t0, 3)
    if options.task is not None:
        from ..tasks.heads import resolve_task

        meta["task"] = resolve_task(options.task, meta)
    _reader_accepts(net)
    return net


def _reader_accepts(net: NetFile) -> None:
    """The reader's own checks on what the compiler made (the bytes, META, commands, the
    schedule): a file ``dvsdk.load`` would refuse is a ModelError here, never written."""
    from ..runtime.records import verify

    try:
        verify(decode(encode(net), "the compiled net.bin"))
    except NetFileError as e:
        raise ModelError(f"internal: the compiled net.bin fails its reader's check: "
                         f"{e.message}", field=e.field, value=e.value, limit=e.limit) from e


def boundary(graph: Graph, name: str, other: str) -> tuple[list[int], str]:
    """(shape, layout) of a graph input/output as the source model sees it: 4-D tensors in
    the model's layout (``graph.layout``: NCHW, or NHWC for Keras, whose tensors the runtime
    transposes at the boundary), others in their own order with layout ``other``."""
    shape = list(graph.shape(name) or ())
    if len(shape) != 4:
        return shape, other
    if graph.layout == "NHWC":
        shape = [shape[0], shape[2], shape[3], shape[1]]
    return shape, graph.layout


def _max_kernel(program: Program) -> int:
    k = 1
    for step in program.steps:
        if isinstance(step, HwStep):
            for cmd in step.commands:
                for r in cmd.runs:
                    k = max(k, r.kx, r.ky, *r.pool_kernel)
    return min(k, 7)


def read_labels(path: str | os.PathLike) -> list[str]:
    """One label a line (blank lines ignored); every error names the file."""
    text = read_utf8(path, "labels file", "labels",
                     "labels file is not a text file (UTF-8, one label a line)",
                     refuse_nul=True)
    return [ln.strip() for ln in text.splitlines() if ln.strip()]


def scored_classes(meta: dict) -> int | None:
    """How many classes a single-output model scores: the channel axis of (N, K[, H, W]),
    N 1 or the first input's batch."""
    outs = meta["outputs"]
    if len(outs) != 1:
        return None
    shape = outs[0]["shape"]
    first = meta["inputs"][0]["shape"] if meta["inputs"] else []
    batch = first[0] if len(first) >= 2 else 1
    return int(shape[1]) if len(shape) >= 2 and shape[0] in (1, batch) else None


def compile(model: Any, output: str | os.PathLike | None = None, *,
            progress: Any = None, **options: Any) -> NetFile:
    """Compile ``model`` (a model file or directory of any format :mod:`.frontends` reads,
    or ONNX bytes or a ModelProto); write ``output`` if given.

    ``labels`` is a list of class names or a file of them (one a line); a classifier must
    get one per class.  ``output`` must not be one of the model's files or the labels file
    (InvalidArgument before any work).  ``progress(stage)`` is called as each stage starts
    (the CLI draws it on a terminal)."""
    from ..fsutil import check_outputs
    from .frontends import source_files

    say = progress or (lambda stage: None)
    labels = options.pop("labels", None)
    label_file = labels if isinstance(labels, (str, os.PathLike)) else None
    if label_file is not None:
        labels = read_labels(label_file)
    if output is not None:
        inputs = source_files(model) + ([("the labels file", label_file)] if label_file else [])
        check_outputs({"output": output}, inputs, force=True)
    unknown = sorted(set(options) - {f.name for f in fields(Options)})
    if unknown:
        raise ModelError("unknown compile option", field=unknown[0],
                         limit=sorted(f.name for f in fields(Options)))
    opts = Options(labels=labels, **options)
    say("reading and optimizing the model")
    graph = load_model(model, opts)
    say("lowering, packing weights" + (", quantizing" if opts.quantize else "")
        + (", golden self-test" if opts.golden else ""))
    net = compile_graph(graph, opts, source=Path(model).name
                        if isinstance(model, (str, os.PathLike)) else "<memory>")
    k = scored_classes(net.meta)
    kind = (net.meta.get("task") or {}).get("kind")
    if opts.labels is not None and k is not None and len(opts.labels) != k \
            and kind in (None, "classify", "segment"):
        raise InvalidArgument(f"{len(opts.labels)} labels for a model that scores {k} "
                              "classes", field="labels",
                              value=str(label_file) if label_file else len(opts.labels),
                              limit=k)
    if output is not None:
        say(f"writing {output}")
        write(net, output)
    return net
