"""The optional compiled loops (``dvsdk/_native.c``) and the switch between them and numpy.

The simulator's two hottest data paths, FP16 rounding (:func:`dvsdk.fp16.round_f16`) and
the depthwise convolution (:mod:`dvsdk.sim.ops`), have a numpy implementation, which is
the reference, and a compiled one with the same bits (NaN payloads aside: which NaN an
operation on two NaNs returns may differ, as it does between numpy's own SIMD builds)
that makes one pass over memory instead of numpy's five to eighteen.  The compiled
module is an optional extension: a machine without a C compiler installs and runs with
numpy only.  ``DVSDK_NATIVE=0``
in the environment selects numpy even where the module exists.

Callers read :data:`NATIVE` at call time (``native.NATIVE``), so tests can switch it.
"""

from __future__ import annotations

import os
from types import ModuleType


def _load() -> ModuleType | None:
    if os.environ.get("DVSDK_NATIVE", "1").strip() == "0":
        return None
    try:
        from . import _native
    except ImportError:
        return None
    return _native


#: the compiled module, or None for the numpy paths
NATIVE: ModuleType | None = _load()


def describe() -> str:
    """One line for ``dvsdk doctor``: which implementation the simulator uses."""
    if NATIVE is not None:
        return "compiled loops (dvsdk._native)"
    if os.environ.get("DVSDK_NATIVE", "1").strip() == "0":
        return "numpy (DVSDK_NATIVE=0)"
    return "numpy (dvsdk._native was not built: no C compiler at install)"
