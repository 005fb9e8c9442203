"""``compile(model, batch=N)``: the model's graph for N samples at once.

The DV700 runs a conv command once per sample when its ``input_circular_offset`` holds N,
reading sample n at ``input + n·w·h·c·2`` and writing it at ``output + n·OUT_BYTES``
(dv700-interface.md §4.10), bit-identical to N separate commands.  So a network over N
samples is the batch-1 network with every tensor's leading dimension N: the lowering
(:mod:`.lower`) gives each command the N of the tensors it reads and writes, the memory
plan holds N samples back to back per tensor, and the CPU steps run the model's own ops on
(N, ...) tensors.

:func:`set_batch` makes that graph.  Every graph input of rank 2 or more has its leading
dimension (1 or free, which the frontends read as 1) set to N; a fixed leading dimension
other than 1 and N is refused.  Shapes are then inferred again, and the result is taken
only if the batch axis stays the batch axis: every tensor that has shape ``(1, ...)`` at
batch 1 has ``(N, ...)`` at batch N and every other tensor keeps its shape.

Exporters bake batch 1 into Reshape targets (PyTorch traces ``x.view(B, T, heads, d)``
with B = 1: a constant ``(1, 40, 8, 15)``).  Such a Reshape of a tensor that carries the
batch (its leading 1 is the batch axis at batch 1, and so is its output's) has its
target's leading 1 replaced by N: for a row-major reshape that keeps the leading axis,
``(N, ...) -> (N, rest)`` is N per-sample reshapes ``(1, ...) -> (1, rest)``, the meaning
of the batch-1 model run on N samples.  A model that bakes batch 1 in any other way (a
Flatten over axis 0, a Squeeze of the batch axis, a Reshape that moves the batch into
another axis) would mix samples at batch N; it is refused with
:class:`~dvsdk.errors.ModelError` naming the first tensor that would, rather than compiled
into something else.

What the batch itself keeps off the DV700 is never silent: a zero-copy split or concat view
needs one sample (a channel slice of N samples is not back to back), so at N > 1 it runs on
the CPU, its ``--report`` reason starting with :data:`BATCH_REASON`; :func:`warn_fallbacks`
then raises one :class:`BatchWarning` naming those ops and records it in ``META.warnings``
(kind ``batch_on_cpu``, firmware_spec/netbin.md), which ``dvsdk-compile`` prints.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw.spec import SPEC
from .ir import Graph

#: the most samples one conv command runs (``input_circular_offset``, commands.yaml
#: ``batch_max``: firmware_spec/README.md "Batch")
BATCH_MAX = int(SPEC.limits["batch_max"])

#: how a ``--report`` reason starts when the batch (N > 1) put the op on the CPU
BATCH_REASON = "batch: "


class BatchWarning(UserWarning):
    """Ops that run on the DV700 for one sample run on the CPU for N (see META.warnings)."""


def check_batch(n: object) -> int:
    """``n`` as a batch size: a whole number 1..:data:`BATCH_MAX` (ModelError naming
    ``batch`` otherwise)."""
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ModelError("batch is not a whole number", field="batch", value=n,
                         limit=f"1..{BATCH_MAX}")
    if not 1 <= n <= BATCH_MAX:
        raise ModelError("batch out of range: one conv command runs at most "
                         f"{BATCH_MAX} samples (§4.10)", field="batch", value=int(n),
                         limit=f"1..{BATCH_MAX}")
    return int(n)


def set_batch(graph: Graph, n: int) -> Graph:
    """``graph`` (as a frontend reads it) with every batched input holding ``n`` samples,
    checked as the module docstring says; a new graph, ``graph`` is left as it is."""
    from .fold import infer_and_fold

    n = check_batch(n)
    out = graph.copy()
    batched = []
    for name in out.inputs:
        t = out.tensors[name]
        if t.shape is None or len(t.shape) < 2:
            continue
        if t.shape[0] not in (1, n):
            raise ModelError(f"input {name!r} has a fixed batch of {t.shape[0]}: it cannot "
                             f"run {n} samples", field="batch", value=n, limit=t.shape[0])
        t.shape = (n, *t.shape[1:])
        batched.append(name)
    if not batched:
        raise ModelError("the model has no input with a batch axis (rank 2 or more)",
                         field="batch", value=n, limit="an input (N, ...)")
    if n == 1:
        return out
    one = graph.copy()
    for name in batched:
        t = one.tensors[name]
        t.shape = (1, *t.shape[1:])
    ref = infer_and_fold(one)
    _rebatch_reshapes(out, ref, batched, n)
    try:
        got = infer_and_fold(out)
    except ModelError as e:  # e.g. a Squeeze of the batch axis, a Reshape to (1, ...)
        raise ModelError(f"the model does not run {n} samples: {e.message}", field="batch",
                         value=n, limit="batch 1") from e
    for name, t in ref.tensors.items():
        other = got.tensors.get(name)
        if t.is_const or t.shape is None or other is None or other.is_const:
            continue
        want = (n, *t.shape[1:]) if t.shape and t.shape[0] == 1 else t.shape
        if other.shape != want:
            raise ModelError(f"the model does not keep its batch axis: {name!r} is "
                             f"{t.shape} for one sample but {other.shape} for {n}, not "
                             f"{want} (an op fixes batch 1, e.g. a Reshape to a constant "
                             "shape)", field="batch", value=n, limit="batch 1")
    return out


def _rebatch_reshapes(graph: Graph, ref: Graph, batched: list[str], n: int) -> None:
    """Replace the leading 1 of the constant target of every Reshape in ``graph`` whose
    input and output lead with the batch axis at batch 1 (``ref``'s shapes) by ``n``, as
    the module docstring says; in place."""
    carried = set(batched)     # tensors whose values come from a batched input (one pass;
    for op in graph.ops:       # Shape and Size read only a shape, as value_sources says)
        if op.type not in ("Shape", "Size") and any(i in carried for i in op.inputs):
            carried.update(op.outputs)
    for op in graph.ops:
        if op.type != "Reshape" or not op.outputs:
            continue
        target = graph.const(op.input(1))
        if target is None:
            target = ref.const(op.input(1))
        src, dst = ref.shape(op.input(0)), ref.shape(op.outputs[0])
        if (target is None or target.ndim != 1 or not len(target) or int(target[0]) != 1
                or not src or not dst or src[0] != 1 or dst[0] != 1
                or op.input(0) not in carried):
            continue
        rebatched = np.array(target, dtype=target.dtype)
        rebatched[0] = n
        op.inputs[1] = graph.add_const(op.input(1) + "_batch", rebatched)


def batch_fallbacks(report: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``--report`` entries of ops the batch put on the CPU (:data:`BATCH_REASON`)."""
    return [r for r in report if r["where"] == "cpu" and r["detail"].startswith(BATCH_REASON)]


def warn_fallbacks(meta: dict[str, Any], graph: Graph) -> None:
    """Warn (:class:`BatchWarning`, and an entry in ``meta["warnings"]`` whose ``tensor`` is
    the first such op's output) when the batch put ops on the CPU: one line naming how many,
    their types, why and the first few."""
    ops = batch_fallbacks(meta["report"])
    if not ops:
        return
    first = graph.op_by_name(ops[0]["op"])
    n = first.outputs and graph.shape(first.outputs[0])
    n = n[0] if n else "N"
    types = sorted({r["type"] for r in ops})
    names = ", ".join(r["op"] for r in ops[:4]) + (", ..." if len(ops) > 4 else "")
    many = f"{len(ops)} ops run" if len(ops) > 1 else "1 op runs"
    message = (f"batch {n}: {many} on the CPU, not the DV700, because of the "
               f"batch ({'/'.join(types)}; {ops[0]['detail'][len(BATCH_REASON):]}): {names}")
    meta.setdefault("warnings", []).append({"kind": "batch_on_cpu",
                                            "tensor": first.outputs[0], "message": message})
    warnings.warn(message, BatchWarning, stacklevel=5)  # the dvsdk.compile caller
