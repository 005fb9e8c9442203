"""The float32 reference of ``dvsdk analyze``, and each layer's contribution to the final
output's error.

:class:`Reference` runs the source model once in float32 on the analysis input and keeps
every tensor it computes: onnxruntime for ONNX (every node output exposed as a graph
output, graph optimizations off), dvsdk's float32 interpreter
(:func:`dvsdk.compiler.interpret.run_graph`) for NNEF, OpenVINO IR and Keras.

:meth:`Reference.contribution` answers "how wrong is the final output when this one layer
is the device's and everything else is float?": the tensor is replaced by the value the
device produced for it *from the reference's own inputs* (``dvsdk analyze``'s isolation
pass, :func:`dvsdk.qa.analyze.device_tensors` with a reference), only the nodes downstream of it run
again (onnxruntime on the sub-graph of its descendants, the other tensors they read fed
from the reference run; or the interpreter over those ops), and the outputs are compared
with the reference's: the largest ``max |error| / range`` over the outputs, the unit of
``LayerError.rel``.  This is the one-layer-at-a-time measurement itself (RKNN-Toolkit2's
"single" mode followed by a float tail), not an estimate: one sub-graph run per compared
tensor, each shorter than the net.  :func:`compare` (max abs, share of range, cosine) is
the measure of every tensor ``dvsdk analyze`` reports (re-exported there).

Why not a cheaper estimate: a layer's own error (``own``) and the error it adds along the
device's run (``added``) both ignore how much the rest of the network amplifies or
suppresses it (a ReLU6 clips, a residual Add dilutes, a pointwise conv after a damaged
depthwise channel may weight it by ~0), which is what decides the output's damage; on
the EfficientNet-Lite0-shaped stand-in they rank layers with Spearman 0.09 and 0.15, the
contribution with 0.99.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import InvalidArgument, ModelError


def compare(device: np.ndarray, reference: np.ndarray) -> tuple[float, float, float, float]:
    """(max_abs, rel, cosine, range) of a device tensor against its reference."""
    d = np.asarray(device, np.float64).reshape(-1)
    r = np.asarray(reference, np.float64).reshape(-1)
    if d.size != r.size:
        raise InvalidArgument("tensor sizes differ", field="tensor", value=d.size, limit=r.size)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(d - r)
        max_abs = float(np.nanmax(diff)) if diff.size and not np.isnan(diff).all() else 0.0
        if not np.isfinite(d).all():
            max_abs = float("inf")
        rng = float(np.ptp(r)) if r.size else 0.0
        rel = max_abs / rng if rng > 0 else (0.0 if max_abs == 0 else float("inf"))
        nd, nr = np.linalg.norm(d), np.linalg.norm(r)
        cos = float(d @ r / (nd * nr)) if nd > 0 and nr > 0 else float(nd == nr)
    return max_abs, rel, cos, rng


def _onnxruntime(model: Any, names: list[str], feeds: dict[str, np.ndarray]
                 ) -> dict[str, np.ndarray]:
    try:
        import onnx
        import onnxruntime as ort
    except ImportError:
        raise InvalidArgument("the ONNX reference needs onnx and onnxruntime",
                              field="reference", hint="pip install onnxruntime") from None
    from ..compiler.frontends.onnx import _read  # the compiler's reading: typed errors

    proto, label = _read(model)
    produced = {o for n in proto.graph.node for o in n.output if o}
    have = {o.name for o in proto.graph.output}
    extra = [n for n in names if n in produced and n not in have]
    m = onnx.ModelProto()
    m.CopyFrom(proto)
    for n in extra:
        m.graph.output.append(onnx.helper.make_empty_tensor_value_info(n))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = ort.InferenceSession(m.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime refuses the graph: say so, in one line
        raise ModelError("onnxruntime cannot run the reference model", field="reference",
                         value=label, hint=f"{type(exc).__name__}: {str(exc)[:160]}") from exc
    wanted = [o.name for o in sess.get_outputs()]
    missing = [i.name for i in sess.get_inputs() if i.name not in feeds]
    if missing:
        raise ModelError("the reference model's inputs are not the net's", field="reference",
                         value=missing, limit=sorted(feeds),
                         hint="is it the model this net.bin was compiled from?")
    inputs = {i.name: np.asarray(feeds[i.name], np.float32) for i in sess.get_inputs()}
    return {n: v for n, v in zip(wanted, sess.run(wanted, inputs)) if n in set(names)}


def output_error(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> float:
    """Largest ``max |got - ref| / range(ref)`` over the outputs in ``got``."""
    return max((compare(v, ref[k].reshape(np.shape(v)))[1] for k, v in got.items()),
               default=0.0)


class Reference:
    """The float32 source model on one input: ``values`` (every tensor by name, feeds
    included), ``outputs`` (the model's output names) and :meth:`contribution`."""

    def __init__(self, model: Any, feeds: dict[str, np.ndarray], fmt: str | None = None
                 ) -> None:
        from ..compiler.frontends import detect

        if fmt is None:
            fmt = detect(model) if isinstance(model, (str, os.PathLike)) else "onnx"
        self.fmt = fmt
        if fmt == "onnx":
            self._init_onnx(model, feeds)
        else:
            self._init_graph(model, feeds)

    # -- ONNX: onnxruntime ----------------------------------------------------------------
    def _init_onnx(self, model: Any, feeds: dict[str, np.ndarray]) -> None:
        from ..compiler.frontends.onnx import _read  # the compiler's reading: typed errors

        self.proto, _ = _read(model)
        g = self.proto.graph
        self._inits = {t.name for t in g.initializer}
        produced = [o for n in g.node for o in n.output if o]
        self.outputs = [o.name for o in g.output]
        self.values = _onnxruntime(self.proto, produced + self.outputs, feeds)
        inputs = {i.name for i in g.input} - self._inits
        self.values.update({k: np.asarray(v, np.float32) for k, v in feeds.items()
                            if k in inputs})

    def _onnx_tail(self, tensor: str) -> tuple[list, list[str], list[str]]:
        """The nodes downstream of ``tensor`` (in graph order), the tensors they read that
        they do not make, and the model outputs they (or ``tensor``) give."""
        dirty, nodes = {tensor}, []
        for n in self.proto.graph.node:
            if any(i in dirty for i in n.input if i):
                nodes.append(n)
                dirty.update(o for o in n.output if o)
        made = {o for n in nodes for o in n.output}
        reads = list(dict.fromkeys(i for n in nodes for i in n.input
                                   if i and i not in made and i not in self._inits))
        return nodes, reads, [o for o in self.outputs if o in dirty]

    def _onnx_outputs_with(self, tensor: str, value: np.ndarray) -> dict[str, np.ndarray]:
        import onnx
        import onnxruntime as ort

        nodes, reads, outs = self._onnx_tail(tensor)
        got = {tensor: value} if tensor in outs else {}
        tail = [o for o in outs if o != tensor]
        if not tail:
            return got
        m = onnx.ModelProto()
        m.CopyFrom(self.proto)
        g = m.graph
        used = {i for n in nodes for i in n.input}
        kept = [t for t in g.initializer if t.name in used]
        for field in ("node", "input", "output", "value_info", "initializer"):
            g.ClearField(field)
        g.node.extend(nodes)
        g.initializer.extend(kept)
        for name in reads:
            v = self.values[name]
            g.input.append(onnx.helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)))
        g.output.extend(onnx.helper.make_empty_tensor_value_info(o) for o in tail)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        try:
            sess = ort.InferenceSession(m.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - one line, naming the cut
            raise ModelError("onnxruntime cannot run the model after this tensor",
                             field="reference", value=tensor,
                             hint=f"{type(exc).__name__}: {str(exc)[:120]} (dvsdk analyze "
                                  "--no-contribution does without)") from exc
        ref = self.values[tensor]
        feeds = {i.name: (np.asarray(value, ref.dtype).reshape(ref.shape) if i.name == tensor
                          else self.values[i.name]) for i in sess.get_inputs()}
        got.update(zip(tail, sess.run(tail, feeds)))
        return got

    # -- other formats: dvsdk's interpreter ------------------------------------------------
    def _init_graph(self, model: Any, feeds: dict[str, np.ndarray]) -> None:
        from ..compiler.fold import infer_and_fold
        from ..compiler.frontends import load
        from ..compiler.interpret import run_graph

        self.graph = infer_and_fold(load(model, self.fmt))
        g = self.graph
        self.outputs = list(g.outputs)
        made = [o for op in g.ops for o in op.outputs if o and not g.is_const(o)]
        feeds = {k: v for k, v in feeds.items() if k in g.inputs}
        self.values = {**{k: np.asarray(v, np.float32) for k, v in feeds.items()},
                       **run_graph(g, feeds, outputs=list(dict.fromkeys(made + self.outputs)))}

    def _graph_outputs_with(self, tensor: str, value: np.ndarray) -> dict[str, np.ndarray]:
        from ..cpu.ops import run_op

        g = self.graph
        env = {tensor: np.asarray(value, np.float32).reshape(self.values[tensor].shape)}
        for op in g.ops:
            if not any(i in env for i in op.inputs if i):
                continue
            args = [None if not i else env[i] if i in env else
                    self.values[i] if i in self.values else g.const(i) for i in op.inputs]
            try:
                results = run_op(op.type, args, op.attrs)
            except ModelError:
                raise
            except Exception as exc:  # noqa: BLE001 - a kernel crash: name the op
                raise ModelError(f"CPU kernel failed: {exc}",
                                 field=f"{op.type} {op.name}") from exc
            env.update((o, np.asarray(r)) for o, r in zip(op.outputs, results) if o)
        return {o: env[o] for o in self.outputs if o in env}

    # -- the measure ---------------------------------------------------------------------
    def outputs_with(self, tensor: str, value: np.ndarray) -> dict[str, np.ndarray]:
        """The model outputs that depend on ``tensor`` when it holds ``value`` (every other
        tensor that the downstream layers read keeps its reference value)."""
        if tensor not in self.values:
            raise InvalidArgument("no such tensor in the reference model", field="tensor",
                                  value=tensor)
        if np.size(value) != self.values[tensor].size:
            raise InvalidArgument("value does not fit the tensor", field=tensor,
                                  value=np.shape(value), limit=self.values[tensor].shape)
        if self.fmt == "onnx":
            return self._onnx_outputs_with(tensor, value)
        return self._graph_outputs_with(tensor, value)

    def contribution(self, tensor: str, value: np.ndarray) -> float:
        """Final output error (largest ``max |error| / range`` over the outputs) when
        ``tensor`` alone is ``value`` and the rest of the model is float32."""
        return output_error(self.outputs_with(tensor, value), self.values)
