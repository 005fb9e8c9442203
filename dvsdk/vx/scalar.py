"""``vx_scalar``: one typed value (``vxCreateScalar``, ``vxCopyScalar``).

Node parameters given as plain Python numbers or enum members become scalars inside the
node.  Every scalar parameter of the NN kernels is [static] (``formats.md`` §2.2): changing
a scalar after verification marks the graphs that use it unverified, so the next
``process()`` recompiles (OpenVX lets ``vxProcessGraph`` re-verify).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .reference import Reference
from .types import Status, Type, VxError, enum_value, type_name

__all__ = ["Scalar", "SCALAR_TYPES"]

SCALAR_TYPES: dict[Type, type] = {
    Type.ENUM: int, Type.SIZE: int, Type.INT8: int, Type.UINT8: int, Type.INT16: int,
    Type.UINT16: int, Type.INT32: int, Type.UINT32: int, Type.INT64: int, Type.UINT64: int,
    Type.FLOAT32: float, Type.FLOAT64: float, Type.BOOL: bool,
}


class Scalar(Reference):
    """``Scalar(ctx, data_type, value)``; ``value`` reads it, ``set_value`` writes it."""

    vx_type = Type.SCALAR

    def __init__(self, context: Any, data_type: int, value: Any) -> None:
        dt = enum_value(Type, data_type, "data_type")
        if dt not in SCALAR_TYPES:
            raise VxError(Status.ERROR_INVALID_TYPE, f"{type_name(dt)} is not a scalar type",
                          field="data_type", value=type_name(dt))
        self._type = dt
        self._value = self._convert(value)
        super().__init__(context)

    def _convert(self, value: Any) -> Any:
        kind = SCALAR_TYPES[self._type]
        try:
            if kind is float:
                v = float(np.float32(value)) if self._type == Type.FLOAT32 else float(value)
            else:
                v = kind(int(value)) if kind is int else bool(value)
        except (TypeError, ValueError, OverflowError):
            raise VxError(Status.ERROR_INVALID_VALUE,
                          f"{value!r} is not a {type_name(self._type)} value",
                          field="value", value=value) from None
        return v

    @property
    def data_type(self) -> Type:
        return self._type

    @property
    def value(self) -> Any:
        self._check()
        return self._value

    def set_value(self, value: Any) -> None:
        """``vxCopyScalar(..., VX_WRITE_ONLY)``."""
        self._check()
        self._value = self._convert(value)
        self.context._changed(self, True)
