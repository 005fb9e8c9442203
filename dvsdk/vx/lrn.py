"""Where a normalization layer runs: the DV700's LRN unit or the CPU (``firmware_spec/lrn.md``).

The LRN unit (reference §4.7) computes ``v * f(s)`` with ``s`` the sum of squares over 5
channels centred on v (zero padded) and f a piecewise-linear interpolation of
``(1 + 2e-5 s) ** -0.75`` between the knots ``s = 4**i``: Caffe's LRN with n = 5,
alpha = 1e-4, beta = 0.75, k = 1, fixed in the hardware.  An OpenVX ACROSS_MAPS
normalization with exactly these parameters is that function; the interpolation error
grows with s, so the layer goes to the unit only when the verifier's range analysis
(:mod:`dvsdk.vx.ranges`) bounds its input so that ``s <= SUM_SQ_MAX``, where the error
measured on the simulator is at most ``REL_ERROR`` (``tools/measure_lrn.py`` measures it;
``firmware_spec/lrn.md`` records the table and how).  Otherwise, and for SAME_MAP, it
runs exactly on the CPU, with the reason in the node's placement.  A node whose target is
``"DV700"`` goes to the unit whenever the parameters match, bound or not; ``"CPU"``
keeps it on the CPU.
"""

from __future__ import annotations

import math

from .types import NormType, Target

__all__ = ["HW_SIZE", "HW_ALPHA", "HW_BETA", "SUM_SQ_MAX", "REL_ERROR", "hardware_lrn"]

HW_SIZE = 5
HW_ALPHA = 1e-4
HW_BETA = 0.75
#: the bound on the 5-channel sum of squares up to which the unit is used (the knot 4**7)
SUM_SQ_MAX = 4.0 ** 7
#: the relative error bound for sums up to SUM_SQ_MAX (measured 0.774%; the curve's 0.689%
#: plus two FP16 roundings is 0.787%)
REL_ERROR = 0.008


def _same(a: float, b: float) -> bool:
    return math.isclose(float(a), b, rel_tol=1e-6)


def hardware_lrn(kind: int, size: int, alpha: float, beta: float, channels: int,
                 batches: int, bound: float, target: str) -> tuple[bool, str]:
    """(use the LRN unit?, why) for a normalization node whose input satisfies
    ``|x| <= bound`` (``inf``: unknown)."""
    if target == Target.CPU:
        return False, "target CPU"
    if kind != NormType.ACROSS_MAPS:
        return False, "SAME_MAP normalization has no DV700 unit (exact on the CPU)"
    if size != HW_SIZE or not _same(alpha, HW_ALPHA) or not _same(beta, HW_BETA):
        return False, (f"the LRN unit has n={HW_SIZE}, alpha={HW_ALPHA:g}, beta={HW_BETA:g} "
                       f"fixed (reference 4.7); this node has n={size}, alpha={alpha:g}, "
                       f"beta={beta:g}")
    if channels % 16:
        return False, f"the LRN unit needs #IFM % 16 == 0; this input has {channels}"
    if batches != 1:
        return False, "the DV700 runs one image at a time; this input has a batch"
    if target == Target.DV700:
        return True, "target DV700 (no error bound checked)"
    sum_sq = HW_SIZE * bound * bound
    if not sum_sq <= SUM_SQ_MAX:
        shown = "unbounded" if math.isinf(bound) else f"|x| <= {bound:.4g}"
        return False, (f"input {shown}: the 5-map sum of squares may exceed "
                       f"{SUM_SQ_MAX:g}, where the LRN unit's piecewise-linear curve is off "
                       f"by more than {REL_ERROR:.2%} (firmware_spec/lrn.md); exact on the "
                       "CPU (declare a tighter tensor value range, or target DV700)")
    return True, (f"input |x| <= {bound:.4g}: sum of squares <= {sum_sq:.4g} <= "
                  f"{SUM_SQ_MAX:g}, error <= {REL_ERROR:.2%}")
