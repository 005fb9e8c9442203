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

Fixed-point tensors (UINT8, INT8, INT16 Q7.8) are judged instead by the Khronos CTS's
tolerance, :data:`CTS_TOLERANCE` raw units of the output (``ownExpectIdenticalData(...,
8, ...)`` in ``test_tensor_nn.c``): :data:`ABS_ERROR` is the unit's largest absolute error
for inputs ``|x| <= B``, measured on the simulator (``tools/measure_lrn.py --absolute``,
the second table of ``firmware_spec/lrn.md``).  The raw outputs of the unit and of the
exact formula, both rounded to the output's step ``2**-p``, differ by at most
``error * 2**p + 1``; the unit is used when ``1.05 * error(B) * 2**p + 1 <= 8`` (5% of
margin on the sampled maximum), which gives ``|x| <= 20`` for Q7.8 and ``|x| <= 128`` for
UINT8 and INT8 (so INT8's whole range, and UINT8 with a declared range).
"""

from __future__ import annotations

import math

from .types import NormType, Target

__all__ = ["HW_SIZE", "HW_ALPHA", "HW_BETA", "SUM_SQ_MAX", "REL_ERROR", "CTS_TOLERANCE",
           "ABS_ERROR", "MARGIN", "fixed_bound", "hardware_lrn"]

HW_SIZE = 5
HW_ALPHA = 1e-4
HW_BETA = 0.75
#: the bound on the 5-channel sum of squares up to which the unit is used (the knot 4**7)
SUM_SQ_MAX = 4.0 ** 7
#: the relative error bound for sums up to SUM_SQ_MAX (measured 0.774%; the curve's 0.689%
#: plus two FP16 roundings is 0.787%)
REL_ERROR = 0.008


#: the CTS's tolerance for NN outputs, in raw units of the output type
CTS_TOLERANCE = 8
#: the factor on the sampled error before comparing with the tolerance
MARGIN = 1.05
#: (B, the largest absolute error of the unit for |x| <= B), measured on the simulator
#: (tools/measure_lrn.py --absolute; firmware_spec/lrn.md), cumulative in B
ABS_ERROR: tuple[tuple[float, float], ...] = (
    (1, 0.00007), (2, 0.00049), (4, 0.00098), (8, 0.00202), (12, 0.00818), (16, 0.00994),
    (18, 0.02054), (20, 0.02474), (22, 0.02645), (24, 0.02807), (26, 0.02888),
    (28, 0.03011), (32, 0.07641), (40, 0.24061), (48, 0.31483), (57.2, 0.37002),
    (64, 0.82135), (96, 3.22534), (112, 3.75863), (128, 4.28246), (144, 6.98788),
    (160, 9.40877), (176, 10.59415), (192, 11.54224), (255, 15.30580))


def abs_error(bound: float) -> float:
    """The unit's measured absolute error for inputs ``|x| <= bound`` (inf beyond 255)."""
    return next((e for b, e in ABS_ERROR if bound <= b), math.inf)


def fixed_bound(fpp: int) -> float:
    """The largest tabulated B within the CTS tolerance for outputs at position ``fpp``."""
    ok = [b for b, e in ABS_ERROR if MARGIN * e * 2 ** fpp + 1 <= CTS_TOLERANCE]
    return max(ok, default=0.0)


def _same(a: float, b: float) -> bool:
    return math.isclose(float(a), b, rel_tol=1e-6)


def hardware_lrn(kind: int, size: int, alpha: float, beta: float, channels: int,
                 batches: int, bound: float, target: str, fixed: int | None = None
                 ) -> tuple[bool, str]:
    """(use the LRN unit?, why) for a normalization node whose input satisfies
    ``|x| <= bound`` (``inf``: unknown); ``fixed``: the output's fixed-point position
    when its type is UINT8, INT8 or INT16 (the CTS tolerance decides), else None."""
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
    if fixed is not None:
        return _fixed(bound, fixed)
    sum_sq = HW_SIZE * bound * bound
    if not sum_sq <= SUM_SQ_MAX:
        shown = "unbounded" if math.isinf(bound) else f"|x| <= {bound:.4g}"
        return False, (f"input {shown}: the 5-map sum of squares may exceed "
                       f"{SUM_SQ_MAX:g}, where the LRN unit's piecewise-linear curve is off "
                       f"by more than {REL_ERROR:.2%} (firmware_spec/lrn.md); exact on the "
                       "CPU (declare a tighter tensor value range, or target DV700)")
    return True, (f"input |x| <= {bound:.4g}: sum of squares <= {sum_sq:.4g} <= "
                  f"{SUM_SQ_MAX:g}, error <= {REL_ERROR:.2%}")


def _fixed(bound: float, fpp: int) -> tuple[bool, str]:
    limit = fixed_bound(fpp)
    shown = "unbounded" if math.isinf(bound) else f"|x| <= {bound:.4g}"
    err = abs_error(bound) * 2 ** fpp
    if bound <= limit:
        return True, (f"input {shown} <= {limit:g}: the LRN unit's measured error <= "
                      f"{err:.2f} raw units (+1 rounding) within the CTS tolerance of "
                      f"{CTS_TOLERANCE} (firmware_spec/lrn.md)")
    why = "more than 15" if math.isinf(err) else f"{err:.4g}"
    return False, (f"input {shown} > {limit:g}: the LRN unit's error may reach {why} raw "
                   f"units, beyond the CTS tolerance of {CTS_TOLERANCE} "
                   "(firmware_spec/lrn.md); exact on the CPU (declare a tighter tensor value "
                   "range, or target DV700)")
