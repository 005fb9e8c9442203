"""The conv unit's activation stage (reference §4.5): ``actfunc`` and ``rectifi_en``.

The arithmetic every DV700 device shares, the simulator's conv unit
(:func:`dvsdk.sim.ops.finish`) and the compiler's table pass (:mod:`dvsdk.compiler.table`,
which evaluates an activation-only command on every binary16 value) alike: float32 in,
float32 out, unrounded; the caller rounds to binary16 where the hardware stores.
"""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgument
from . import elementary

__all__ = ["ACT_NONE", "ACT_TANH", "ACT_LEAKY_RELU", "ACT_SIGMOID", "ACT_PRELU", "ACT_ELU",
           "ACT_RELU6", "activation", "elu_alpha", "rectify"]

# Activation codes of the CONV ``actfunc`` field (§4.5).
ACT_NONE = 0
ACT_TANH = 1
ACT_LEAKY_RELU = 2
ACT_SIGMOID = 3
ACT_PRELU = 4
ACT_ELU = 5
ACT_RELU6 = 6


def activation(
    x: np.ndarray,
    code: int,
    param: float = 0.0,
    prelu: np.ndarray | None = None,
) -> np.ndarray:
    """CONV activation ``actfunc`` (§4.5), applied in float32, unrounded.

    Codes: 0 none; 1 tanh; 2 leaky ReLU ``x > 0 ? x : x * param`` (param 0 ⇒
    ReLU); 3 sigmoid; 4 PReLU with per-channel slopes ``prelu`` (length =
    channels, last axis); 5 ELU; 6 ReLU6: ``+0`` for ``x <= 0`` (``-0`` too), ``x`` up
    to 6, then 6; a NaN stays NaN.

    [AMBIG] The hardware's tanh/sigmoid/ELU curves are unspecified (tests allow 1e-3):
    ours are the functions of :mod:`dvsdk.hw.elementary` (float64 operations in a fixed
    order, the same bits on every machine), rounded to float32.  [AMBIG] ELU's ``param``:
    the tests pass 0 and compare against alpha = 1, so ``param == 0`` means alpha = 1 and
    any other value is used as alpha.  ReLU6 ignores ``param``.  Unknown codes raise
    :class:`InvalidArgument`.
    """
    a = np.asarray(x, dtype=np.float32)
    code = int(code)
    if code == ACT_NONE:
        return a.copy()
    if code == ACT_TANH:
        return elementary.tanh(a).astype(np.float32)
    if code == ACT_LEAKY_RELU:
        return np.where(a > 0, a, a * np.float32(param))
    if code == ACT_SIGMOID:
        return elementary.sigmoid(a).astype(np.float32)
    if code == ACT_PRELU:
        if prelu is None:
            raise InvalidArgument("PReLU needs per-channel slopes", field="prelu", value=None)
        s = np.asarray(prelu, dtype=np.float32).reshape(-1)
        if a.ndim == 0 or s.shape[0] != a.shape[-1]:
            raise InvalidArgument("PReLU slopes must have one value per channel", field="prelu",
                                  value=s.shape[0], limit=a.shape[-1] if a.ndim else None)
        return np.where(a > 0, a, a * s)
    if code == ACT_ELU:
        return elementary.elu(a, elu_alpha(param)).astype(np.float32)
    if code == ACT_RELU6:
        six = np.float32(6)
        return np.where(a > 0, np.where(a < six, a, six), np.where(np.isnan(a), a,
                                                                   np.float32(0)))
    raise InvalidArgument("unknown activation code", field="actfunc", value=code, limit="0..6")


def elu_alpha(param: float) -> float:
    """ELU's alpha from ``actfunc_param`` ([AMBIG] §4.5: 0 means 1, as DMP's tests)."""
    return float(np.float32(param)) if param != 0 else 1.0


def rectify(x: np.ndarray) -> np.ndarray:
    """``rectifi_en``: ``abs(x)``, applied after the activation (§4.5)."""
    return np.abs(np.asarray(x, dtype=np.float32))
