"""Elementary functions as fixed sequences of float64 operations (firmware_spec/arithmetic.md).

numpy's ``exp``, ``tanh``, ``log``... come from the C library or from numpy's own vector
code, chosen by the machine (AVX-512, AVX2, Arm): their last bits differ between machines.
The simulator's activations and the runtime's CPU steps use these instead: each is a range
reduction and a polynomial written with IEEE 754 double operations only (add, subtract,
multiply, divide, round to integer, exact scaling by powers of two), each rounded as IEEE
requires, in this order.  So every machine computes the same bits, and the compiled twins
in ``dvsdk/_native_elem.h`` repeat the same operations in the same order (built without
contraction).  Accuracy: within a few units in the last place of a double, far below the
float32 and binary16 results they are rounded to.

All functions take and return float64 arrays; NaN stays NaN (its payload is not part of the
model: stored results are canonical, :mod:`dvsdk.hw.fp16`).
"""

from __future__ import annotations

import math

import numpy as np

from .. import native

__all__ = ["exp", "expm1", "log", "log1p", "tanh", "sigmoid", "elu", "power", "erf"]

_F64 = np.float64
#: ln 2 in two parts (fdlibm's): the high part has 21 trailing zero bits, so k * _LN2_HI is
#: exact for every |k| < 2**21; the low part is the rest, to double precision
_LN2_HI = float.fromhex("0x1.62e42feep-1")
_LN2_LO = float.fromhex("0x1.a39ef35793c76p-33")
_INV_LN2 = 1.0 / math.log(2.0)
#: |x| at which exp overflows (and, negated, underflows to 0) for every double: a bound for
#: the reduction, past which the scaling itself gives inf or 0
_EXP_LIMIT = 750.0
#: 1/n!, n = 0..14 (Python's int / int division: correctly rounded on every machine)
_INV_FACT = [1 / math.factorial(n) for n in range(15)]
#: 1/(2n+1), n = 1..12: the series of atanh, for log
_INV_ODD = [1 / (2 * n + 1) for n in range(1, 13)]
_SQRT_HALF = math.sqrt(0.5)


def _f64(x: np.ndarray | float) -> np.ndarray:
    return np.asarray(x, _F64)


#: the compiled twins' codes (``dvsdk._native.elem``)
_NATIVE_CODES = {"exp": 0, "expm1": 1, "tanh": 2, "sigmoid": 3, "log": 4}
def _compiled(name: str, x: np.ndarray) -> np.ndarray | None:
    """``name``(x) by the compiled twin (the same operations, the same bits), or None where
    the module is not built.  (Even for a few values: the numpy code is some thirty
    array operations, 30-50 us however small the array.)"""
    if native.NATIVE is None:
        return None
    src = np.ascontiguousarray(x, _F64)  # (at least 1-D)
    out = np.empty(src.shape, _F64)
    native.NATIVE.elem(_NATIVE_CODES[name], src, out)
    return out.reshape(np.shape(x))


def compiled_f32(fn: object, x: np.ndarray, out: np.ndarray | None = None
                 ) -> np.ndarray | None:
    """``fn(x).astype(float32)`` for a float32 ``x`` and ``fn`` one of exp, expm1, tanh,
    sigmoid, log: in one compiled pass (each value widened to float64, the same operations,
    rounded back as numpy's cast), without the two float64 arrays; None where the module
    is not built (or predates float32), ``fn`` has no compiled twin or ``x`` is not
    float32.  ``out`` (C-contiguous float32 of x's shape; ``x`` itself allowed when x is
    C-contiguous: element by element) receives the values instead of a fresh array."""
    code = _NATIVE_CODES.get(getattr(fn, "__name__", ""))
    if native.NATIVE is None or code is None or np.asarray(x).dtype != np.float32:
        return None
    src = np.ascontiguousarray(x)
    out = np.empty(src.shape, np.float32) if out is None else out
    try:
        native.NATIVE.elem(code, src, out)
    except TypeError:  # (a module built before elem took float32)
        return None
    return out.reshape(np.shape(x))


def _pow2(k: np.ndarray) -> np.ndarray:
    """2**k for integer-valued float64 ``k`` in [-1022, 1023], built from its bits (exact)."""
    return ((k.astype(np.int64) + 1023) << 52).view(_F64)


def _scale(p: np.ndarray, k: np.ndarray) -> np.ndarray:
    """p * 2**k for |k| <= 2044, rounded once (as ldexp): the first factor is exact."""
    k1 = np.floor(k * 0.5)
    with np.errstate(over="ignore", under="ignore"):
        return (p * _pow2(k1)) * _pow2(k - k1)


def _exp_poly(r: np.ndarray) -> np.ndarray:
    """sum r**n / n!, n = 0..13, by Horner's rule (|r| <= ln2 / 2)."""
    p = np.full_like(r, _INV_FACT[13])
    for c in reversed(_INV_FACT[:13]):
        p = p * r + c
    return p


def _reduce(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """k = rint(x / ln2) and r = x - k ln2 for x within +-750 (NaN read as 0)."""
    xs = np.where(np.isnan(x), 0.0, np.minimum(np.maximum(x, -_EXP_LIMIT), _EXP_LIMIT))
    k = np.rint(xs * _INV_LN2)
    return k, (xs - k * _LN2_HI) - k * _LN2_LO


def exp(x: np.ndarray | float) -> np.ndarray:
    """e**x: ``2**k * P(r)`` with ``x = k ln2 + r``, ``P`` the Taylor polynomial of degree 13."""
    x = _f64(x)
    fast = _compiled("exp", x)
    if fast is not None:
        return fast
    k, r = _reduce(x)
    y = _scale(_exp_poly(r), k)
    return np.where(np.isnan(x), x, y)


def expm1(x: np.ndarray | float) -> np.ndarray:
    """e**x - 1: for |x| <= ln2/2 the series ``x + x**2/2! + ... + x**14/14!`` (by Horner,
    the last step a multiply by x: -0 stays -0), else ``exp(x) - 1``."""
    x = _f64(x)
    fast = _compiled("expm1", x)
    if fast is not None:
        return fast
    q = np.full_like(x, _INV_FACT[14])
    with np.errstate(over="ignore", invalid="ignore"):  # (q is used only where |x| is small)
        for c in reversed(_INV_FACT[1:14]):
            q = q * x + c
        small = q * x
    return np.where(np.abs(x) <= _LN2_HI * 0.5, small, exp(x) - 1.0)


def log(x: np.ndarray | float) -> np.ndarray:
    """Natural logarithm: ``x = m 2**e`` with ``m`` in [sqrt(1/2), sqrt(2)), ``s = (m-1) /
    (m+1)``, ``log m = 2 atanh s`` (series to s**25).  log(0) = -inf, log(x < 0) = NaN,
    log(inf) = inf."""
    x = _f64(x)
    fast = _compiled("log", x)
    if fast is not None:
        return fast
    pos = np.isfinite(x) & (x > 0)
    m, e = np.frexp(np.where(pos, x, 1.0))
    low = m < _SQRT_HALF
    m = np.where(low, m * 2.0, m)
    e = (e - low).astype(_F64)
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    acc = np.full_like(z, _INV_ODD[-1])
    for c in reversed(_INV_ODD[:-1]):
        acc = acc * z + c
    lm = 2.0 * s + (2.0 * s) * (z * acc)
    y = e * _LN2_HI + (lm + e * _LN2_LO)
    y = np.where(x == 0, -np.inf, y)
    y = np.where(x == np.inf, np.inf, y)
    return np.where(pos | (x == 0) | (x == np.inf), y, np.nan)


def log1p(x: np.ndarray | float) -> np.ndarray:
    """log(1 + x), accurate for small x: ``log(u) * x / (u - 1)`` with ``u = 1 + x`` (x where
    u rounds to 1)."""
    x = _f64(x)
    u = 1.0 + x
    d = u - 1.0
    with np.errstate(invalid="ignore", divide="ignore"):
        y = log(u) * (x / np.where(d == 0, 1.0, d))
    return np.where(d == 0, x, np.where(np.isinf(x) & (x > 0), x, y))


def tanh(x: np.ndarray | float) -> np.ndarray:
    """tanh x = sign(x) * -t / (t + 2) with t = expm1(-2|x|) (never overflows)."""
    x = _f64(x)
    fast = _compiled("tanh", x)
    if fast is not None:
        return fast
    t = expm1(-2.0 * np.abs(x))
    return np.copysign(-t / (t + 2.0), x)


def sigmoid(x: np.ndarray | float) -> np.ndarray:
    """1 / (1 + e**-x)."""
    x = _f64(x)
    fast = _compiled("sigmoid", x)
    return fast if fast is not None else 1.0 / (1.0 + exp(-x))


def elu(x: np.ndarray | float, alpha: float = 1.0) -> np.ndarray:
    """x for x > 0, else alpha * expm1(x) (one double multiply; NaN stays NaN)."""
    x = _f64(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return np.where(x > 0, x, float(alpha) * expm1(x))


#: integer exponents up to this magnitude are computed by repeated multiplication
_POW_INT_MAX = 64


def _pow_int(a: np.ndarray, n: np.ndarray) -> np.ndarray:
    """a**n for integers 0 <= n <= 64 (per element) by binary exponentiation: from y = 1,
    for each bit of n from the lowest, y = y * a**(2**bit) where the bit is set; each
    product a float64 multiply."""
    y = np.ones(np.broadcast_shapes(a.shape, n.shape))
    sq = a
    n = n.astype(np.int64)
    for bit in range(_POW_INT_MAX.bit_length()):
        y = np.where((n >> bit) & 1, y * sq, y)
        if bit + 1 < _POW_INT_MAX.bit_length():
            sq = sq * sq
    return y


def _pow_small_scalar(a: np.ndarray, b: int) -> np.ndarray:
    """:func:`power` for one integer exponent ``b``, ``0 < |b| <= 64`` (LayerNorm's square):
    the same operations as its per-element selections pick for such an exponent (the
    products of :func:`_pow_int` for the bits of ``|b|``, one division for a negative
    one, then the zero and one bases), without the ``exp(b log|a|)`` they discard."""
    n = abs(b)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        y = np.ones(a.shape)
        sq = a
        for bit in range(n.bit_length()):
            if (n >> bit) & 1:
                y = y * sq
            if bit + 1 < n.bit_length():
                sq = sq * sq
        if b < 0:
            y = 1.0 / y
        zero = np.inf if b < 0 else 0.0
        y = np.where(a == 0, np.copysign(zero, a) if n % 2 else zero, y)
        return np.where(a == 1.0, 1.0, y)


def power(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    """a**b as C's pow defines its special cases.  Where the exponent is an integer up to
    64 in magnitude: repeated multiplication (:func:`_pow_int`, and one division for a
    negative one); a scalar 0.5: the square root; anything else ``exp(b log|a|)``, with the
    sign of a negative base to an odd integer power."""
    b_arr = _f64(b)
    if b_arr.ndim == 0 and float(b_arr) == 0.5:  # C: pow(-0, .5) = +0, pow(-inf, .5) = inf
        a = _f64(a)
        with np.errstate(invalid="ignore"):
            return np.where(a == -np.inf, np.inf, np.sqrt(np.where(a == 0, 0.0, a)))
    if b_arr.ndim == 0 and float(b_arr).is_integer() and 0 < abs(float(b_arr)) <= _POW_INT_MAX:
        return _pow_small_scalar(_f64(a), int(b_arr))
    a, b = np.broadcast_arrays(_f64(a), b_arr)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        mag = exp(b * log(np.abs(a)))
        whole = np.isfinite(b) & (np.floor(b) == b)
        odd = whole & (np.abs(np.fmod(b, 2.0)) == 1.0)
        y = np.where((a < 0) & odd, -mag, mag)
        y = np.where((a < 0) & ~whole & np.isfinite(a), np.nan, y)
        small = whole & (np.abs(b) <= _POW_INT_MAX)
        if small.any():
            by_int = _pow_int(a, np.where(small, np.abs(b), 0))
            y = np.where(small, np.where(b < 0, 1.0 / by_int, by_int), y)
        # a zero base: +-0 or +-inf by the sign of the exponent (the sign for odd powers)
        zero = np.where(b < 0, np.inf, 0.0)
        y = np.where(a == 0, np.where(odd, np.copysign(zero, a), zero), y)
        y = np.where((b == 0) | (a == 1.0), 1.0, y)
    return y


#: erf: below this |x| the series, from it the continued fraction (both converge there to
#: far below a double's precision with the fixed term counts)
_ERF_CUT = 2.0
_ERF_SERIES_TERMS = 64
_ERF_CF_TERMS = 40
#: from this |x| erf is +-1 in double (erfc(6) = 2.2e-17, under half an ulp of 1)
_ERF_ONE = 6.0
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI = math.sqrt(math.pi)


def erf(x: np.ndarray | float) -> np.ndarray:
    """The error function, odd in x (erf(-0) = -0, erf(+-inf) = +-1, NaN stays NaN).

    For ``a = |x| < 2`` the series of positive terms ``erf a = 2/sqrt(pi) a e**(-a*a)
    sum_n (2a*a)**n / (3*5*...*(2n+1))``, n = 0..64, by Horner's rule from the innermost
    ``p = 1 + (z / (2n+1)) * p`` with ``z = 2a*a`` (no cancellation); for ``2 <= a < 6``
    ``1 - e**(-a*a) / (sqrt(pi) f)`` with the continued fraction ``f = a + (1/2)/(a + 1/(a
    + (3/2)/(a + ...)))`` evaluated from its 40th term ``f = a + (k/2)/f``, k = 40..1;
    from 6 on, 1.  Error: under 6e-16 relative to math.erf on [-7, 7] and down to 1e-300
    (tests/test_transformer_ops.py), far below the float32 results it is rounded to."""
    x = _f64(x)
    a = np.abs(x)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        t = np.minimum(a, _ERF_CUT)
        z = 2.0 * t * t
        p = np.ones_like(t)
        for n in range(_ERF_SERIES_TERMS, 0, -1):
            p = 1.0 + (z / (2 * n + 1)) * p
        series = (_TWO_OVER_SQRT_PI * t) * exp(-(t * t)) * p
        u = np.minimum(np.maximum(a, _ERF_CUT), _ERF_ONE)
        f = u.copy()
        for k in range(_ERF_CF_TERMS, 0, -1):
            f = u + (0.5 * k) / f
        tail = 1.0 - exp(-(u * u)) / (_SQRT_PI * f)
    y = np.where(a < _ERF_CUT, series, np.where(a >= _ERF_ONE, 1.0, tail))
    return np.where(np.isnan(x), x, np.copysign(y, x))
