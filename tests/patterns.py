"""Deterministic test inputs from integer arithmetic alone: no random stream whose numbers
a numpy version could change (golden hashes rest on them: tests/test_determinism.py)."""

from __future__ import annotations

import numpy as np


def pattern(shape: tuple[int, ...]) -> np.ndarray:
    """float32 values in [-1, 1), a fixed function of the element's index."""
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    return (((i * 7919 + (i // 61) * 104729) % 2000) / 1000.0 - 1.0).astype(
        np.float32).reshape(shape)
