"""The optional compiled loops (``dvsdk/_native*.c``) and the switch between them and numpy.

The hottest data paths have a numpy implementation, which is the reference, and a compiled
one with the same bits (NaN payloads aside where an operation on two NaNs may return
either, as numpy's own SIMD builds differ there) that makes one pass over memory instead of
numpy's several: FP16 rounding and conversions and the chunked layout (:mod:`dvsdk.hw.fp16`,
:mod:`dvsdk.hw.layout`, used by the runtime too), element-wise CPU steps from FP16 to FP16
(``ew_f16``, :mod:`dvsdk.runtime.cpusteps`), and the simulator's conv engine
(:mod:`dvsdk.sim.kernels`: the fixed-order matrix product of firmware_spec/arithmetic.md,
the epilogue of bias, addend, activation and rounding, depthwise convolution, im2col,
pooling).  The compiled module is an optional extension: a machine without a C compiler
installs and runs with numpy only.  ``DVSDK_NATIVE=0``
in the environment selects numpy even where the module exists.

Callers read :data:`NATIVE` at call time (``native.NATIVE``), so tests can switch it.
Where the module was not built, the simulator says so once per process when it is first
opened (:func:`note_fallback`), not only in ``dvsdk doctor``.
"""

from __future__ import annotations

import os
import warnings
from types import ModuleType


class NativeFallbackWarning(RuntimeWarning):
    """The compiled loops were not built: the simulator runs on numpy alone."""


def _disabled() -> bool:
    return os.environ.get("DVSDK_NATIVE", "1").strip() == "0"


def _load() -> ModuleType | None:
    if _disabled():
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
        return f"compiled loops (dvsdk._native; matrix product: {NATIVE.gemm_isa()} build)"
    if _disabled():
        return "numpy (DVSDK_NATIVE=0)"
    return "numpy (dvsdk._native was not built: no C compiler at install)"


_noted = False


def note_fallback() -> None:
    """Warn once per process that the compiled loops are missing (not when chosen off)."""
    global _noted
    if NATIVE is None and not _disabled() and not _noted:
        _noted = True
        warnings.warn("dvsdk._native was not built (no C compiler at install time): the "
                      "simulator runs on numpy alone, about 2x slower. Install a C compiler "
                      "and reinstall dvsdk, or set DVSDK_NATIVE=0 to choose numpy and silence "
                      "this.", NativeFallbackWarning, stacklevel=3)
