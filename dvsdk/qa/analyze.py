"""``dvsdk analyze``: where along the network the device's result departs from the model's.

The net runs on a device command by command (as ``net.profile()`` does); after each
hardware command the tensor it wrote (``command_outputs`` in the net.bin, see
``firmware_spec/netbin.md``) is read back before the next command can reuse its arena slot,
and every CPU step's outputs are kept.  The source model runs in float32 on the same input:
onnxruntime for ONNX (every compared tensor exposed as an extra graph output), dvsdk's own
float32 interpreter (:func:`dvsdk.compiler.interpret.run_graph`) for the other formats.
Each tensor present in both is compared:

* ``max_abs``: max |device − reference|;
* ``rel``: ``max_abs`` / the reference tensor's range (max − min), the error as a share of
  the values the layer produces;
* ``cosine``: cosine similarity of the flattened tensors;
* ``where``: ``hw`` with the command index and its kind, or ``cpu``;
* ``added``: ``rel`` minus the largest ``rel`` among the tensors the step read (a poor
  ranking: the error carried in and the error added do not subtract, and a ReLU6 output's
  range is capped, so most layers after a damaged one get a negative ``added``);
* ``own``: ``rel`` of the same step fed the reference's own inputs (isolation, below);
* ``contribution``: the final output's error (largest ``rel`` over the outputs) when this
  layer alone is the device's and the rest of the model float32, by which :func:`worst`
  ranks.

Isolation (``isolate=True``, ``dvsdk analyze --isolate``; RKNN-Toolkit2 calls it "single"
mode): before each hardware command runs, every tensor it reads that the reference has is
packed into its buffer in the arena with the reference's value, through the runtime's own
upload (``Net._upload``: FP16, the device layout); a CPU step gets the reference's values
as its arguments.  Each command then runs alone on the device and its output is read back,
so the value carries that command's error only (8-bit weight tables, FP16 arithmetic).

Contribution (always computed unless ``contribution=False``): the isolated value of each
tensor is put in place of the reference's and only the model downstream of it runs again
in float32 (:class:`dvsdk.qa.contrib.Reference`).  This *is* the one-layer-at-a-time
experiment ("quantize one layer, run the float model, measure the output"), with the
device's own arithmetic for that layer, at the cost of one isolated device pass and one
run of each layer's tail; against that experiment done independently in onnxruntime
(tests/test_qa_analyze_rank.py) it ranks layers with Spearman >= 0.9 on MobileNet- and
EfficientNet-Lite0-shaped nets, where ``added`` scores about 0.2 and ``rel`` below 0.

Tensors computed inside one fused command (a conv's output before its fused activation)
or between the runs of a chained one (``dvsdk.compiler.chain``) do not exist on the device
and are not compared: ``dvsdk-compile --no-chain`` makes a net.bin with a command, and a
compared tensor, per layer.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..driver.cmdlist import CommandList
from ..errors import ModelError
from ..runtime.handle import Run
from ..runtime.net import Net
from ..runtime.views import Placement, parent, part
from .contrib import Reference, _onnxruntime, compare


@dataclass
class LayerError:
    index: int                # position along the program
    tensor: str
    where: str                # "hw" or "cpu"
    producer: str             # command kind / CPU op type
    ops: list[str]            # the IR ops that produced it
    command: int | None       # hardware command index
    shape: tuple[int, ...]
    max_abs: float
    rel: float
    cosine: float
    ref_range: float
    inputs: list[str]         # the tensors it read
    added: float = 0.0        # rel minus the largest rel of its compared inputs
    own: float | None = None  # rel when fed the reference's inputs (isolation)
    contribution: float | None = None  # output rel with this layer alone the device's

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


# -- the device side ------------------------------------------------------------------------

def device_tensors(net: Net, x: Any, reference: dict[str, np.ndarray] | None = None
                   ) -> list[tuple]:
    """Run ``net`` one command at a time; returns, in program order, (tensor, where,
    producer, ops, command index, inputs, value) for every tensor a step produced.

    With ``reference`` (float32 values by tensor name, in the model's orientation) every
    step is *isolated*: just before it runs, each tensor it reads that the reference has is
    overwritten with the reference's value (packed into the command's input buffer in the
    arena through the runtime's own upload, or set as the CPU op's argument), so the value
    it produces carries its own error only."""
    while net._pending:
        net._pending[0].wait()
    ctx = net._contexts[0]
    singles = []
    for cmd in ctx.commands:
        cl = CommandList(net.device)
        cl.add(cmd)
        cl.commit()
        net._lists.append(cl)
        singles.append(cl)
    h = Run(net, ctx, 10.0)
    for name, arr in net._feeds(x).items():
        h.host[name] = arr
        if net._dev(name) is not None:
            net._upload(ctx, name, arr, h.stats)
    flip = bool(net.meta.get("transposed"))
    place = {t: (d["device"]["offset"], tuple(d["device"]["hwc"]),
                 int(d["device"].get("batch", 1)))
             for t, d in net.tensors.items() if d.get("device") is not None}
    out = []
    for step_meta, (kind, payload) in zip(net.meta["program"], net.steps):
        if kind == "cpu":
            if reference is not None:
                for t in payload[2]:
                    _put(net, h, t, reference, flip, place)
            net._step(h, block=True)   # runs the CPU op, uploads what the device reads
            op_type, _, inputs, outputs, name = payload
            for t in outputs:
                if t:
                    out.append((t, "cpu", op_type, [name], None, [i for i in inputs if i],
                                _orient(h.host[t], flip)))
            continue
        h.pc += 1
        start, count = step_meta["commands"]
        outputs, inputs = step_meta.get("command_outputs"), step_meta.get("command_inputs")
        if outputs is None or inputs is None:
            raise ModelError("this net.bin does not record which tensor each command "
                             "writes; recompile it with this dvsdk", field="command_outputs")
        # the tensors this step writes in parts (views: a band's strips, a group's
        # channels), each with the index of its last command
        last = {p: k for k, t in enumerate(outputs)
                if isinstance(t, str) and (p := parent(t, place)) is not None}
        for k in range(count):
            if reference is not None:
                for t in inputs[k]:
                    _put(net, h, t, reference, flip, place)
            singles[start + k].run()
            h.host = {t: v for t, v in h.host.items() if net._dev(t) is None}
            t = outputs[k]
            value = net._value(h, t)
            out.append((t, "hw", step_meta["runs"][k], step_meta["command_sources"][k],
                        start + k, list(inputs[k]), _orient(value, flip)))
            root = parent(t, place)
            if root is not None and last.get(root) == k:
                # the last part of a tensor is written: the whole tensor is there now
                out.append((root, "hw", step_meta["runs"][k], step_meta["command_sources"][k],
                            start + k, [parent(i, place) or i for i in inputs[k]],
                            _orient(net._value(h, root), flip)))
    return out


def _put(net: Net, h: Run, name: str, reference: dict[str, np.ndarray], flip: bool,
         place: dict[str, Placement]) -> None:
    """Give ``name`` the reference's value for the next step: on the host, and in the
    arena where the device holds it (a tensor the reference lacks keeps the device's)."""
    v, spec = reference.get(name), net.tensors.get(name)
    if v is None and name:   # a band's strip, a group's sample: part of a tensor it has
        got = part(name, place)
        if got is not None and got[0] in reference:
            v = np.asarray(_orient(reference[got[0]], flip))
            v = v.reshape(net.tensors[got[0]]["shape"])[got[1]]
            flip = False   # (in the device's orientation already)
    if not name or v is None or spec is None or v.size != int(np.prod(spec["shape"])):
        return
    arr = _orient(v, flip).reshape(spec["shape"])
    h.host[name] = arr
    if net._dev(name) is not None:
        net._upload(h.ctx, name, arr, h.stats)


def _orient(value: np.ndarray, transposed: bool) -> np.ndarray:
    v = np.asarray(value, np.float32)
    return v.transpose(0, 1, 3, 2) if transposed and v.ndim == 4 else v


# -- the reference side --------------------------------------------------------------------

def reference_tensors(model: Any, names: list[str], feeds: dict[str, np.ndarray],
                      fmt: str | None = None) -> dict[str, np.ndarray]:
    """float32 values of ``names`` (those that exist in the source model) on ``feeds``."""
    from ..compiler.frontends import detect

    if fmt is None:
        fmt = detect(model) if isinstance(model, (str, os.PathLike)) else "onnx"
    if fmt == "onnx":
        return _onnxruntime(model, names, feeds)
    from ..compiler.fold import infer_and_fold
    from ..compiler.frontends import load
    from ..compiler.interpret import run_graph

    graph = infer_and_fold(load(model, fmt))
    present = [n for n in names if n in graph.tensors and not graph.is_const(n)]
    feeds = {k: v for k, v in feeds.items() if k in graph.inputs}
    return run_graph(graph, feeds, outputs=present)


# -- comparison ------------------------------------------------------------------------------

def analyze(net: Net, reference: Any, x: Any, fmt: str | None = None, *,
            isolate: bool = False, contribution: bool = True) -> list[LayerError]:
    """Compare every tensor ``net`` produces on ``x`` with ``reference`` (a model path, bytes
    or ModelProto, of format ``fmt``); rows in program order.

    ``isolate``: the rows' errors are those of each step fed the reference's own inputs
    (its own error only) instead of the device's (the error carried so far).
    ``contribution``: also run the isolation pass and measure, per tensor, the final
    output's error when that tensor alone is the device's (module docstring); ``worst``
    ranks by it.  Off, the rows have ``own`` and ``contribution`` None."""
    feeds = net._feeds(x)
    flip = bool(net.meta.get("transposed"))
    model_feeds = {k: (v.transpose(0, 1, 3, 2) if flip and v.ndim == 4 else v)
                   for k, v in feeds.items()}
    ref = Reference(reference, model_feeds, fmt)
    isolated = device_tensors(net, x, ref.values) if isolate or contribution else None
    produced = isolated if isolate else device_tensors(net, x)
    rows: list[LayerError] = []
    rel_of: dict[str, float] = {}
    for k, (tensor, where, producer, ops, cmd, inputs, value) in enumerate(produced):
        if tensor not in ref.values:
            continue
        r = ref.values[tensor]
        if r.size != value.size:
            continue  # a view the device holds in another shape
        max_abs, rel, cos, rng = compare(value, r.reshape(value.shape))
        carried = 0.0 if isolate else max((rel_of[i] for i in inputs if i in rel_of),
                                          default=0.0)
        row = LayerError(len(rows), tensor, where, producer, list(ops), cmd,
                         tuple(value.shape), max_abs, rel, cos, rng, list(inputs),
                         rel - carried)
        if contribution and isolated is not None:
            own = isolated[k][6]
            row.own = compare(own, r.reshape(own.shape))[1]
            row.contribution = ref.contribution(tensor, own.reshape(r.shape))
        rows.append(row)
        rel_of[tensor] = rel
    if not rows:
        raise ModelError("no tensor of the net exists in the reference model",
                         field="reference", hint="is it the model this net.bin was compiled "
                         "from?")
    return rows


def worst(rows: list[LayerError], n: int = 5) -> list[LayerError]:
    """The ``n`` layers that cost the final output most: by ``contribution`` (the output's
    error with that layer alone the device's) when the rows have it, else by ``added``
    (``rel`` minus the largest ``rel`` of the tensors they read)."""
    if all(r.contribution is not None for r in rows):
        return sorted(rows, key=lambda r: (-r.contribution, r.index))[:n]
    return sorted(rows, key=lambda r: (-r.added, r.index))[:n]
