"""What every CPU kernel reads the same way: optional inputs and the ``axis`` attribute
(ONNX: an omitted optional input is absent or empty; ``axis`` in ``[-r, r - 1]``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError


def optional(inputs: Sequence, i: int) -> np.ndarray | None:
    """Input ``i``, or None where the model omits it."""
    return inputs[i] if len(inputs) > i and inputs[i] is not None else None


def check_axis(axis: int, rank: int, op: str) -> int:
    """``axis`` of a rank-``rank`` tensor as a non-negative index (ModelError naming
    ``<op>.axis`` outside ``[-rank, rank - 1]``)."""
    if not -rank <= axis < max(rank, 1):
        raise ModelError(f"{op} axis out of range", field=f"{op}.axis", value=axis,
                         limit=f"[{-rank}, {rank - 1}]")
    return axis % max(rank, 1)


def axis_attr(attrs: Mapping[str, Any], rank: int, default: int, op: str) -> int:
    """The ``axis`` attribute (``default`` where absent), checked as :func:`check_axis`."""
    return check_axis(int(attrs.get("axis", default)), rank, op)
