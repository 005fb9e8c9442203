"""The compiler's graph IR: tensors, ops and a graph, with ONNX op names and semantics.

The IR is deliberately a thin, self-explanatory mirror of ONNX:

* layout is NCHW, op types are ONNX op types (``Conv``, ``Gemm``, ``Resize`` ...) and the
  numerical meaning of every op is the ONNX meaning (latest opset) unless an attribute says
  otherwise (``Softmax``/``LogSoftmax`` carry ``opset`` for the pre-13 2-D coercion);
* parameters that newer opsets pass as inputs (``Reshape`` shape, ``Pad`` pads, ``Slice``
  starts/ends, ``Squeeze``/``Unsqueeze``/``Reduce*`` axes, ``Split`` sizes, ``Resize``
  scales/sizes, ``Clip`` min/max) are *inputs* here too; the frontend turns the old attribute
  forms into constant input tensors. Read them with :meth:`Graph.const`.
  The one exception is ``Clip`` after :func:`dvsdk.compiler.simplify.normalize_clip`, which
  carries float ``min``/``max`` attributes and a single input;
* an absent optional input is the empty string ``""`` (as in ONNX);
* attributes are plain Python / numpy values (no protobuf objects). Once
  :func:`dvsdk.compiler.fold.infer_shapes` has run, Conv/ConvTranspose/pool attributes are
  explicit (``kernel_shape``, ``strides``, ``pads`` as ONNX ``[begins..., ends...]``,
  ``dilations``, ``group``; ``auto_pad`` resolved and removed) and negative axes are
  normalized.

Constant arrays are made read-only: passes build new arrays instead of editing them, which is
what lets :meth:`Graph.copy` share them and every pass be a pure ``Graph -> Graph`` function.

This module needs only numpy (the board runtime imports it without onnx installed).
"""

from __future__ import annotations

import copy as _copy
import heapq
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ModelError

__all__ = ["Tensor", "Op", "Graph"]


@dataclass(eq=False)
class Tensor:
    """A named value. ``shape``/``dtype`` are None until inferred; ``const`` holds constants.

    Equality is identity (graph objects, not values).
    """

    name: str
    shape: tuple[int, ...] | None = None
    dtype: np.dtype | None = None
    const: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.const is not None:
            arr = np.asarray(self.const)
            if arr.flags.writeable:
                arr = arr.copy()
                arr.flags.writeable = False
            self.const = arr
            self.shape = tuple(int(d) for d in arr.shape)
            self.dtype = arr.dtype
        else:
            if self.shape is not None:
                self.shape = tuple(int(d) for d in self.shape)
            if self.dtype is not None:
                self.dtype = np.dtype(self.dtype)

    @property
    def is_const(self) -> bool:
        return self.const is not None

    @property
    def size(self) -> int | None:
        """Number of elements, or None if the shape is unknown."""
        return None if self.shape is None else int(np.prod(self.shape, dtype=np.int64))


@dataclass(eq=False)
class Op:
    """One node: ONNX ``type``, unique ``name``, input/output tensor names and attributes.

    Equality is identity, so ``graph.ops.remove(op)`` removes exactly that op.
    """

    type: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    #: the source model's layer this op came from ("<type> <name>"), where the source format
    #: is not ONNX; ``--report`` shows it beside every placement decision
    origin: str = ""

    def input(self, i: int) -> str:
        """Name of input ``i``, or ``""`` if absent."""
        return self.inputs[i] if i < len(self.inputs) else ""

    def __repr__(self) -> str:
        return f"Op({self.type} {self.name!r}: {self.inputs} -> {self.outputs} {self.attrs})"


@dataclass(eq=False)
class Graph:
    """Tensors by name, ops in (topological) order, graph input and output names.

    Constants are tensors with ``const`` set; they are neither graph inputs nor op outputs.
    """

    tensors: dict[str, Tensor]
    ops: list[Op]
    inputs: list[str]
    outputs: list[str]
    opset: int = 13
    name: str = "graph"
    #: the source model's layout of 4-D inputs and outputs ("NCHW", or "NHWC" for Keras):
    #: the IR is NCHW inside; the runtime converts at the boundary
    layout: str = "NCHW"

    # ----------------------------------------------------------------- basics
    def copy(self) -> Graph:
        """A copy whose tensors, ops and attribute dicts can be edited freely.

        Constant arrays are shared (they are read-only).
        """
        tensors = {
            n: Tensor(t.name, t.shape, t.dtype, t.const) for n, t in self.tensors.items()
        }
        ops = [
            Op(o.type, o.name, list(o.inputs), list(o.outputs), _copy.deepcopy(o.attrs), o.origin)
            for o in self.ops
        ]
        return Graph(tensors, ops, list(self.inputs), list(self.outputs), self.opset, self.name,
                     self.layout)

    def const(self, name: str) -> np.ndarray | None:
        """The constant value of tensor ``name``, or None (also for ``""`` or unknown names)."""
        t = self.tensors.get(name) if name else None
        return None if t is None else t.const

    def is_const(self, name: str) -> bool:
        return self.const(name) is not None

    def shape(self, name: str) -> tuple[int, ...] | None:
        """Shape of tensor ``name`` (None if unknown)."""
        t = self.tensors.get(name) if name else None
        return None if t is None else t.shape

    def unique_name(self, hint: str) -> str:
        """A tensor/op name not used yet, derived from ``hint``."""
        used = self._names()
        if hint not in used:
            return hint
        base = re.sub(r"_\d+$", "", hint)
        i = 1
        while f"{base}_{i}" in used:
            i += 1
        return f"{base}_{i}"

    def _names(self) -> set[str]:
        names = set(self.tensors)
        names.update(o.name for o in self.ops)
        return names

    def add_const(self, hint: str, value: np.ndarray) -> str:
        """Add a constant tensor under a fresh name derived from ``hint``; return the name."""
        name = self.unique_name(hint)
        self.tensors[name] = Tensor(name, const=np.asarray(value))
        return name

    def add_tensor(
        self, hint: str, shape: tuple[int, ...] | None = None, dtype: Any = None
    ) -> str:
        """Add a (non-constant) tensor under a fresh name; return the name."""
        name = self.unique_name(hint)
        self.tensors[name] = Tensor(name, shape, None if dtype is None else np.dtype(dtype))
        return name

    # ------------------------------------------------------------ structure
    def producers(self) -> dict[str, Op]:
        """Tensor name -> the op producing it."""
        return {out: op for op in self.ops for out in op.outputs if out}

    def value_sources(self, names: Iterable[str]) -> list[str]:
        """The graph inputs whose *values* the tensors ``names`` are computed from, in graph
        input order.  ``Shape`` and ``Size`` read only their input's shape, which is static,
        so the walk stops there (their outputs fold to constants)."""
        prods = self.producers()
        seen: set[str] = set()
        stack = [n for n in names if n]
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            op = prods.get(n)
            if op is not None and op.type not in ("Shape", "Size"):
                stack += [i for i in op.inputs if i]
        return [n for n in self.inputs if n in seen]

    def consumers(self) -> dict[str, list[Op]]:
        """Tensor name -> ops reading it (an op appears once per tensor even if it reads twice)."""
        cons: dict[str, list[Op]] = {}
        for op in self.ops:
            for name in dict.fromkeys(op.inputs):
                if name:
                    cons.setdefault(name, []).append(op)
        return cons

    def op_by_name(self, name: str) -> Op:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(name)

    def topo_sort(self) -> Graph:
        """Reorder ``ops`` topologically (stable: keeps the given order where possible).

        Raises ModelError on a cycle or on an input nobody produces. Returns ``self``.
        """
        avail = set(self.inputs) | {n for n, t in self.tensors.items() if t.is_const}
        prod = self.producers()
        waiting: dict[int, int] = {}
        users: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            need = {n for n in op.inputs if n and n not in avail}
            for n in need:
                if n not in prod:
                    raise ModelError(
                        "op input is not produced by any op, input or initializer",
                        field=f"{op.type} {op.name}", value=n,
                        hint="a missing initializer or a truncated model",
                    )
                users.setdefault(n, []).append(i)
            waiting[i] = len(need)
        ready = [i for i, k in waiting.items() if k == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            i = heapq.heappop(ready)
            order.append(i)
            for out in self.ops[i].outputs:
                for j in users.get(out, ()):
                    waiting[j] -= 1
                    if waiting[j] == 0:
                        heapq.heappush(ready, j)
        if len(order) != len(self.ops):
            done = set(order)
            stuck = [self.ops[i].name for i in range(len(self.ops)) if i not in done]
            raise ModelError("graph has a cycle", field="ops", value=stuck[:5])
        self.ops = [self.ops[i] for i in order]
        return self

    # ------------------------------------------------------------- editing
    def replace_op(self, old: Op, new: Iterable[Op]) -> None:
        """Put ``new`` ops where ``old`` was (same position in ``ops``)."""
        i = self._index(old)
        self.ops[i : i + 1] = list(new)

    def remove_op(self, op: Op, *, rewire: bool = False) -> None:
        """Delete ``op``.

        With ``rewire=True`` the op must be a pass-through (output 0 equals input 0 in value):
        readers of its output read its input instead. If the output is a graph output, the
        producer of the input is renamed to write the output name directly when that is safe;
        otherwise ModelError is raised (keep the op in that case).
        """
        if rewire:
            src, dst = op.inputs[0], op.outputs[0]
            if dst in self.outputs:
                prod = self.producers().get(src)
                if prod is None or src in self.outputs or src in self.inputs:
                    raise ModelError("cannot bypass op writing a graph output", field=op.name)
                prod.outputs[prod.outputs.index(src)] = dst
                self.rename_uses(src, dst, skip=op)
                self.tensors.pop(src, None)
            else:
                self.rename_uses(dst, src, skip=op)
                self.tensors.pop(dst, None)
        self.ops.pop(self._index(op))

    def rename_uses(self, old: str, new: str, skip: Op | None = None) -> None:
        """Make every op (except ``skip``) that reads ``old`` read ``new``; same for outputs."""
        for op in self.ops:
            if op is skip:
                continue
            op.inputs = [new if n == old else n for n in op.inputs]
        self.outputs = [new if n == old else n for n in self.outputs]

    def _index(self, op: Op) -> int:
        for i, o in enumerate(self.ops):
            if o is op:
                return i
        raise ValueError(f"op {op.name!r} is not in the graph")

    def dead_code_elimination(self) -> int:
        """Drop ops none of whose outputs reach a graph output, and unused tensors.

        Returns the number of ops removed.
        """
        live = set(self.outputs)
        keep: list[Op] = []
        for op in reversed(self.ops):
            if any(o in live for o in op.outputs):
                keep.append(op)
                live.update(n for n in op.inputs if n)
        removed = len(self.ops) - len(keep)
        self.ops = keep[::-1]
        used = set(self.inputs) | set(self.outputs)
        for op in self.ops:
            used.update(op.inputs)
            used.update(op.outputs)
        for name in [n for n in self.tensors if n not in used]:
            del self.tensors[name]
        return removed

    # ----------------------------------------------------------- checking
    def validate(self, *, require_shapes: bool = True) -> None:
        """Check structural invariants; raise ModelError naming the first problem.

        Every tensor is defined exactly once (graph input, constant or one op output), every
        op input is defined, op names are unique, ops are in topological order, graph outputs
        exist, and (``require_shapes``) every tensor has a known shape and dtype.
        """
        defined: dict[str, str] = {}

        def define(name: str, by: str) -> None:
            if name in defined:
                raise ModelError("tensor defined twice", field=name, value=(defined[name], by))
            if name not in self.tensors:
                raise ModelError("tensor missing from the tensor table", field=name, value=by)
            defined[name] = by

        for name in self.inputs:
            if self.tensors.get(name) is not None and self.tensors[name].is_const:
                raise ModelError("graph input is a constant", field=name)
            define(name, "graph input")
        for name, t in self.tensors.items():
            if t.is_const:
                define(name, "constant")
        op_names: set[str] = set()
        for op in self.ops:
            if op.name in op_names:
                raise ModelError("duplicate op name", field=op.name)
            op_names.add(op.name)
            for n in op.inputs:
                if n and n not in defined:
                    raise ModelError(
                        "op reads a tensor not defined before it",
                        field=f"{op.type} {op.name}", value=n,
                    )
            for n in op.outputs:
                if n:
                    define(n, f"{op.type} {op.name}")
        for n in self.outputs:
            if n not in defined:
                raise ModelError("graph output is not defined", field=n)
        if require_shapes:
            for n in defined:
                t = self.tensors[n]
                if t.shape is None or t.dtype is None:
                    raise ModelError(
                        "tensor shape unknown", field=n, value=defined[n],
                        hint="run dvsdk.compiler.fold.infer_shapes first",
                    )

    def op_types(self) -> list[str]:
        """Op types in order (handy in tests and logs)."""
        return [op.type for op in self.ops]

    def summary(self) -> str:
        """A human-readable listing: one line per op with output shapes."""
        lines = [f"graph {self.name} (opset {self.opset})"]
        for n in self.inputs:
            t = self.tensors[n]
            lines.append(f"  input {n}: {t.shape} {t.dtype}")
        for op in self.ops:
            outs = ", ".join(f"{o}{self.shape(o)}" for o in op.outputs if o)
            ins = ", ".join(n if not self.is_const(n) else f"{n}=const{self.shape(n)}"
                            for n in op.inputs)
            lines.append(f"  {op.type} {op.name}({ins}) -> {outs}")
        lines.append(f"  outputs: {', '.join(self.outputs)}")
        return "\n".join(lines)
