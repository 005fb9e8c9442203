"""The NNEF frontend's IR builder: tensors and ops out of parsed NNEF operations.

:class:`Converter` holds the IR tensors and ops being built and the NNEF-inferred shapes;
the converters of :mod:`.nnef_ops` and :mod:`.nnef_window` call it.  NNEF broadcasting
aligns shapes on the *left* (trailing singleton dimensions are implicit, S1 §2.5 and
"Element-wise binary operations"), so :meth:`Converter.aligned` gives lower-rank operands
trailing singleton axes before an ONNX-style (right-aligned) IR op reads them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ModelError
from ..ir import Op, Tensor

__all__ = ["Converter", "Refused", "with_bias"]


class Refused(Exception):
    """This op (with these attributes) has no IR form: ``reason`` names the attribute."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _ident(v: Any) -> bool:
    """A tensor identifier (tensor arguments are identifiers or literals, never strings)."""
    return isinstance(v, str)


class Converter:
    """Builds IR tensors and ops from parsed NNEF operations.

    ``shapes`` are the NNEF-inferred shapes of every identifier; ``tensors`` starts with the
    graph inputs and constants (variables, ``constant`` ops) and collects every new tensor.
    ``origin`` and ``base`` (the NNEF op's first output) label the ops being emitted.
    """

    def __init__(self, shapes: dict[str, tuple[int, ...]], tensors: dict[str, Tensor]) -> None:
        self.shapes = shapes
        self.tensors = tensors
        self.ops: list[Op] = []
        self.used: set[str] = set(tensors)
        self.op_names: set[str] = set()
        self.origin = ""
        self.base = ""

    # ------------------------------------------------------------------ helpers
    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self.used:
            name, i = f"{hint}_{i}", i + 1
        self.used.add(name)
        return name

    def const(self, value: Any, dtype: Any = np.float32, hint: str = "") -> str:
        name = self.fresh(f"{hint or self.base}_c")
        self.tensors[name] = Tensor(name, const=np.asarray(value, dtype=dtype))
        return name

    def value(self, v: Any) -> np.ndarray | None:
        """The constant value of an argument (literal or constant tensor), else None."""
        if _ident(v):
            t = self.tensors.get(str(v))
            return None if t is None else t.const
        if isinstance(v, (bool, int, float, np.number)):
            return np.asarray(v)
        return None

    def shape(self, v: Any) -> tuple[int, ...]:
        if _ident(v):
            return tuple(self.shapes[str(v)])
        return ()

    def tensor(self, v: Any, dtype: Any = np.float32) -> str:
        """The IR tensor of an argument: an identifier, or a literal as a 0-d constant."""
        if _ident(v):
            return str(v)
        if isinstance(v, bool):
            dtype = np.bool_
        return self.const(v, dtype)

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | None = None,
             **attrs: Any) -> str:
        """Append an op; fresh output tensors unless ``outputs`` names them. Returns output 0."""
        outs = list(outputs) if outputs is not None else [self.fresh(f"{self.base}_t")]
        for o in outs:
            self.used.add(o)
            self.tensors.setdefault(o, Tensor(o))
        name, i = self.base, 1
        while name in self.op_names:
            name, i = f"{self.base}_{i}", i + 1
        self.op_names.add(name)
        self.ops.append(Op(op_type, name, list(inputs), outs, attrs, self.origin))
        return outs[0]

    def aligned(self, v: Any, rank: int, dtype: Any = np.float32) -> str:
        """Argument ``v`` with trailing singleton axes up to ``rank`` (NNEF broadcasting)."""
        c = self.value(v)
        if c is not None and not _ident(v):
            return self.tensor(v, dtype)
        r = len(self.shape(v))
        if r >= rank or r == 0:
            return self.tensor(v, dtype)
        if c is not None:
            return self.const(c.reshape(c.shape + (1,) * (rank - r)), c.dtype)
        return self.emit("Unsqueeze", [str(v), self.const(list(range(r, rank)), np.int64)])

    def channel_vector(self, v: Any, channels: int, what: str) -> np.ndarray | None:
        """A per-channel parameter (``[1, C]``, ``[C]`` or a scalar) as a length-C vector."""
        c = self.value(v)
        if c is None:
            return None
        flat = np.asarray(c, dtype=np.float32).reshape(-1)
        if flat.size == 1:
            return np.full(channels, flat[0], np.float32)
        if flat.size != channels:
            raise ModelError(f"{what} does not have one value per channel", field=self.origin,
                             value=list(np.shape(c)), limit=channels)
        return flat


def with_bias(cv: Converter, op_type: str, ins: list[str], b: Any, channels: int, out: str,
              rank: int, **attrs: Any) -> None:
    """Emit ``op_type`` writing ``out`` with bias ``b`` (a literal, ``[1, C]`` or ``[C]``)
    as its third input; a computed (non-constant) bias is added after it instead."""
    vec = cv.channel_vector(b, channels, "bias")
    if vec is None:
        cv.emit("Add", [cv.emit(op_type, ins, **attrs), cv.aligned(b, rank)], [out])
    elif vec.any():
        cv.emit(op_type, ins + [cv.const(vec, hint=f"{cv.base}_bias")], [out], **attrs)
    else:
        cv.emit(op_type, ins, [out], **attrs)
