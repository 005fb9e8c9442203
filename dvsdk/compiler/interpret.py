"""The float32 reference interpreter of the graph IR: every op through the CPU kernels.

The compiler's golden pair, the tests and accuracy analysis compare the device against
this interpreter; it runs any graph a frontend produced, before or after the passes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from ..cpu.ops import run_op
from ..errors import ModelError
from .ir import Graph


def run_graph(graph: Graph, feeds: Mapping[str, np.ndarray],
              outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Interpret ``graph`` on ``feeds`` (graph input name -> array) with :data:`KERNELS`.

    Returns the graph outputs (or the tensors named in ``outputs``) by name. Feeds are cast to
    the input's dtype and checked against its shape when known. Intermediate arrays are
    released as soon as their last reader has run.
    """
    want = list(graph.outputs if outputs is None else outputs)
    env: dict[str, np.ndarray] = {}
    for name in graph.inputs:
        if name not in feeds:
            raise ModelError("missing feed for graph input", field=name)
        t = graph.tensors[name]
        arr = np.asarray(feeds[name])
        if t.dtype is not None:
            arr = arr.astype(t.dtype, copy=False)
        if t.shape is not None and tuple(arr.shape) != tuple(t.shape):
            raise ModelError("feed has the wrong shape", field=name, value=tuple(arr.shape),
                             limit=tuple(t.shape))
        env[name] = arr
    last_use: dict[str, int] = {}
    for i, op in enumerate(graph.ops):
        for n in op.inputs:
            last_use[n] = i
    keep = set(want)
    for i, op in enumerate(graph.ops):
        args = []
        for n in op.inputs:
            if not n:
                args.append(None)
            elif n in env:
                args.append(env[n])
            else:
                c = graph.const(n)
                if c is None:
                    raise ModelError("tensor not computed before use",
                                     field=f"{op.type} {op.name}", value=n)
                args.append(c)
        try:
            results = run_op(op.type, args, op.attrs)
        except ModelError:
            raise
        except Exception as exc:  # a kernel crash: name the op
            raise ModelError(f"CPU kernel failed: {exc}", field=f"{op.type} {op.name}") from exc
        for n, r in zip(op.outputs, results, strict=False):
            if n:
                env[n] = np.asarray(r)
        for n in dict.fromkeys(op.inputs):
            if n and last_use.get(n) == i and n not in keep and n in env:
                del env[n]
    out = {}
    for n in want:
        if n in env:
            out[n] = env[n]
        elif graph.const(n) is not None:
            out[n] = np.asarray(graph.const(n))
        else:
            raise ModelError("requested tensor was not computed", field=n)
    return out
