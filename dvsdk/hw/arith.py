"""The arithmetic every result of the simulator is defined by (firmware_spec/arithmetic.md).

The DV700 reference leaves the accumulator's precision and order open (dv700-interface.md
§4.2 [AMBIG]).  dvsdk fixes them, so that one net.bin and one input give the same bits on
every machine: a result is a fixed sequence of IEEE 754 operations (float32 products and
sums in a documented order, float64 where said), never whatever a BLAS library, a vector
width or a thread split happens to do.  This module holds the pieces that are not plain
element-wise numpy:

* :func:`matmul`: ``a @ b`` with each output the float32 sum of its products in the order
  ``k = 0, 1, ..., K-1``, starting from +0 (the conv engine's multiply-accumulate, and the
  runtime's CPU matrix products).  The compiled build (``dvsdk._native.gemm``, with fused
  multiply-adds where every product is exact) and the numpy loop here give the same bits.
* :func:`pack_b`: the weights in the panel layout the compiled product reads.
* :func:`total_keys` / :func:`total_values`: max pooling's total order (``-0 < +0``, NaN
  above all), in which the simulator's maximum of a window is exact and unique.
* :func:`maximum`, :func:`minimum`, :func:`clip`, :func:`reduce_max`, :func:`reduce_min`:
  the CPU steps' comparisons written as selects, because numpy's own ``maximum`` returns
  either zero for ``max(-0, +0)`` depending on the machine and on where the element falls
  in its vector loop.

Section numbers (§) are those of dv700-interface.md.
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np

from .. import native
from .fp16 import denormals_work

__all__ = ["ArithmeticWarning", "check_fp_environment", "PANEL", "pack_b", "matmul",
           "matmul_nd", "total_keys", "total_values", "maximum", "minimum", "clip",
           "reduce_max", "reduce_min"]

#: columns per panel of a packed right-hand operand (``_native_gemm.c``)
PANEL = 16
#: float32 accumulators the numpy loop keeps per block of rows (fits the L2 cache)
_NP_BLOCK = 1 << 15


def pack_b(b: np.ndarray) -> np.ndarray:
    """``b`` (K, M) as panels of :data:`PANEL` columns, ``(ceil(M/16), K, 16)`` float32,
    the last one zero-padded: what :func:`matmul` passes to the compiled product (pack a
    constant operand, such as a layer's weights, once)."""
    b = np.asarray(b, np.float32)
    k, m = b.shape
    p = -(-m // PANEL)
    if p * PANEL != m:  # zeros in the last panel's spare columns (np.pad took ~50 us)
        padded = np.zeros((k, p * PANEL), np.float32)
        padded[:, :m] = b
        b = padded
    return np.ascontiguousarray(b.reshape(k, p, PANEL).transpose(1, 0, 2))


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, *,
           packed: np.ndarray | None = None, exact_products: bool = False,
           rows: tuple[int, int] | None = None, panels: tuple[int, int] | None = None
           ) -> np.ndarray:
    """``a`` (N, K) @ ``b`` (K, M), float32, each output summed in the fixed order
    ``((0 + a[i,0]*b[0,j]) + a[i,1]*b[1,j]) + ...`` (firmware_spec/arithmetic.md).

    ``packed``: :func:`pack_b` of ``b``, if the caller keeps it.  ``exact_products``: every
    product is exact in float32 (binary16 operands), so the compiled build may fuse each
    multiply and add (the same bits, twice the speed).  ``rows`` / ``panels``: compute only
    those output rows / 16-column panels (``out`` must then be given; two threads may fill
    one ``out`` in parts).
    """
    a = np.ascontiguousarray(a, np.float32)
    n, k = a.shape
    m = b.shape[1]
    if out is None:
        out = np.empty((n, m), np.float32)
    r0, r1 = rows if rows is not None else (0, n)
    p0, p1 = panels if panels is not None else (0, -(-m // PANEL))
    if native.NATIVE is not None:
        if packed is None:
            packed = pack_b(b)
        native.NATIVE.gemm(a, packed, out, exact_products, r0, r1, p0, p1)
        return out
    _matmul_numpy(a, np.asarray(b, np.float32), out, r0, r1, p0 * PANEL, min(m, p1 * PANEL))
    return out


def _matmul_numpy(a: np.ndarray, b: np.ndarray, out: np.ndarray, r0: int, r1: int, c0: int,
                  c1: int) -> None:
    """The fixed order in numpy: for each block of rows, the products of one k at a time
    added to the block's sums (a multiply, then an add, each rounded to float32: the bits
    of a fused multiply-add too when the products are exact)."""
    k = a.shape[1]
    b = b[:, c0:c1]
    width = c1 - c0
    if width <= 0 or r1 <= r0:
        return
    step = max(1, _NP_BLOCK // width)
    prod = np.empty((min(step, r1 - r0), width), out.dtype)
    for i in range(r0, r1, step):
        j = min(i + step, r1)
        acc = out[i:j, c0:c1]
        acc[...] = 0.0
        p = prod[: j - i]
        for kk in range(k):
            np.multiply(a[i:j, kk:kk + 1], b[kk], out=p)
            np.add(acc, p, out=acc)


def matmul_nd(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's ``matmul`` semantics (1-D operands, broadcast batch dimensions) with every
    float product in the fixed order of :func:`matmul`: float32 by it (general operands:
    no fused multiply-add), other float types (float64, mixed) by its numpy loop in the
    result's type.  Integer products are numpy's (exact, no BLAS)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim == 0 or b.ndim == 0 or (a.dtype.kind != "f" and b.dtype.kind != "f"):
        return np.matmul(a, b)  # (integers; a 0-d operand: numpy's error)
    if (a.dtype == b.dtype == np.float32 and a.ndim >= 2 and b.ndim == 2
            and a.shape[-1] == b.shape[0]):
        # a layer's product (a 2-D right operand): every row of a, whatever its batch
        # dimensions, in one call (each output is its own fixed-order sum: the same bits)
        packed = _packed_constant(b) if native.NATIVE is not None else None
        rows = matmul(a.reshape(-1, a.shape[-1]), b, packed=packed)
        return rows.reshape(*a.shape[:-1], b.shape[1])
    dt = np.result_type(a, b)
    a, b = a.astype(dt, copy=False), b.astype(dt, copy=False)
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    n, m = a2.shape[-2], b2.shape[-1]
    if a2.shape[-1] != b2.shape[-2]:
        return np.matmul(a, b)  # its error
    ab = np.broadcast_to(a2, (*batch, n, a2.shape[-1]))
    bb = np.broadcast_to(b2, (*batch, *b2.shape[-2:]))
    out = np.empty((*batch, n, m), dt)
    packed = _packed_constant(b2) if dt == np.float32 and native.NATIVE is not None else None
    if packed is None and dt == np.float32 and native.NATIVE is not None and n and m:
        # every matrix of b packed at once (pack_b's panels, per matrix) and a made
        # contiguous once: then one compiled product per matrix (the same sums)
        bps = np.broadcast_to(_pack_batch(b2), (*batch, -(-m // PANEL), b2.shape[-2], PANEL))
        ac = np.ascontiguousarray(ab)
        for idx in np.ndindex(*batch):
            native.NATIVE.gemm(ac[idx], bps[idx], out[idx], False, 0, -1, 0, -1)
    else:
        for idx in np.ndindex(*batch):
            if dt == np.float32:
                matmul(ab[idx], bb[idx], out[idx], packed=packed)
            else:
                _matmul_numpy(np.ascontiguousarray(ab[idx]), bb[idx], out[idx], 0, n, 0, m)
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


def _pack_batch(b: np.ndarray) -> np.ndarray:
    """:func:`pack_b` of every (K, M) matrix of float32 ``b`` (..., K, M) at once:
    (..., ceil(M/16), K, 16), C-contiguous."""
    m = b.shape[-1]
    p = -(-m // PANEL)
    padded = np.zeros((*b.shape[:-1], p * PANEL), np.float32)
    padded[..., :m] = b
    return np.ascontiguousarray(padded.reshape(*b.shape[:-1], p, PANEL).swapaxes(-3, -2))


#: pack_b of 2-D operands whose bytes cannot change, by id: (the array, weakly; packed)
_PACKED: dict[int, tuple[weakref.ref, np.ndarray]] = {}


def _immutable(b: np.ndarray) -> bool:
    """Whether ``b``'s elements can never change: a read-only view of a ``bytes`` object
    (a net.bin's constants, ``np.frombuffer``), through any chain of numpy views."""
    base = b
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj if base.readonly else None
    return isinstance(base, bytes)


def _packed_constant(b: np.ndarray) -> np.ndarray | None:
    """:func:`pack_b` of the 2-D float32 operand ``b``, packed once while ``b`` lives when
    its bytes cannot change (a CPU step's weights, packed on every run before); None for
    any other operand (the product packs it)."""
    if b.ndim != 2 or b.dtype != np.float32 or not _immutable(b):
        return None
    hit = _PACKED.get(id(b))
    if hit is not None and hit[0]() is b:
        return hit[1]
    if len(_PACKED) >= 256:
        _PACKED.clear()
    packed = pack_b(b)
    _PACKED[id(b)] = (weakref.ref(b), packed)
    return packed


def total_keys(x: np.ndarray) -> np.ndarray:
    """float32 ``x`` as int32 keys in max pooling's total order (firmware_spec/arithmetic.md):
    the bit patterns, with the magnitude bits of negative values flipped (so ``-0 < +0``),
    every NaN first made the canonical quiet NaN (above ``+inf``).  :func:`total_values` maps
    keys back."""
    i = np.where(np.isnan(x), np.float32(np.nan), np.asarray(x, np.float32)).view(np.int32)
    return i ^ ((i >> 31) & np.int32(0x7FFFFFFF))


def total_values(k: np.ndarray) -> np.ndarray:
    """The float32 values of :func:`total_keys` keys (the map is its own inverse)."""
    return (k ^ ((k >> 31) & np.int32(0x7FFFFFFF))).view(np.float32)


def maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` where ``a > b`` or ``a`` is NaN, else ``b``: NaN propagates, and of two equal
    values (``-0`` and ``+0``) the second is the result, on every machine."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return np.maximum(a, b)
    return np.where((a > b) | np.isnan(a), a, b)


def minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a`` where ``a < b`` or ``a`` is NaN, else ``b`` (see :func:`maximum`)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind != "f" and b.dtype.kind != "f":
        return np.minimum(a, b)
    return np.where((a < b) | np.isnan(a), a, b)


def clip(x: np.ndarray, lo: float | np.ndarray | None, hi: float | np.ndarray | None,
         owned: bool = False) -> np.ndarray:
    """``lo`` where ``x < lo``, ``hi`` where ``x > hi``, else ``x`` (NaN stays NaN, ``-0``
    stays ``-0`` against a bound of 0): the compiled CPU steps' clamp.  ``owned``: ``x``
    is a temporary of the caller's that may be clamped in place (with scalar bounds)."""
    y = np.asarray(x)
    if y.dtype.kind == "f" and y.ndim and all(b is None or type(b) in (int, float)
                                              for b in (lo, hi)):
        # the same selections without the temporaries of np.where: the bounds stored into
        # y where the comparisons hold (Python numbers: y's type, as np.where's result had;
        # a numpy bound may promote, and goes the general way)
        if not (owned and y.flags.writeable):
            y = y.copy()
        if lo is not None:
            np.copyto(y, lo, where=y < lo, casting="unsafe")
        if hi is not None:
            np.copyto(y, hi, where=y > hi, casting="unsafe")
        return y
    if lo is not None:
        y = np.where(y < lo, lo, y)
    if hi is not None:
        y = np.where(y > hi, hi, y)
    return y.astype(np.asarray(x).dtype, copy=False)


def reduce_max(x: np.ndarray, axis: int | tuple | None = None, keepdims: bool = False
               ) -> np.ndarray:
    """``np.max`` with a zero result's sign fixed: ``+0`` if the reduced values hold a
    ``+0``, else ``-0`` (numpy returns whichever its vector loop met first); NaN
    propagates."""
    return _reduce_signed_zero(x, np.max, axis, keepdims, plus=True)


def reduce_min(x: np.ndarray, axis: int | tuple | None = None, keepdims: bool = False
               ) -> np.ndarray:
    """``np.min`` with a zero result's sign fixed: ``-0`` if the reduced values hold a
    ``-0``, else ``+0``."""
    return _reduce_signed_zero(x, np.min, axis, keepdims, plus=False)


def _reduce_signed_zero(x: np.ndarray, fn, axis, keepdims: bool, plus: bool) -> np.ndarray:
    x = np.asarray(x)
    r = _max_by_pool(x, axis, keepdims) if plus else None
    if r is None:
        r = np.asarray(fn(x, axis=axis, keepdims=keepdims))
    if x.dtype.kind != "f" or not (r == 0).any():
        return r
    zero = (x == 0) & (np.signbit(x) != plus)  # the zeros of the sign that wins
    hit = np.any(zero, axis=axis, keepdims=keepdims)
    sign = np.asarray(0.0 if plus else -0.0, x.dtype)
    other = np.asarray(-0.0 if plus else 0.0, x.dtype)
    return np.where(r == 0, np.where(hit, sign, other), r).astype(x.dtype, copy=False)


def _max_by_pool(x: np.ndarray, axis, keepdims: bool) -> np.ndarray | None:
    """``np.max(x, axis, keepdims)`` of float32 ``x`` over one axis that lies between
    others in x's memory (a transposed tensor reduced along a strided axis: numpy's loop
    over it is several times slower) by the compiled max pool, a window of that axis per
    output (``native.maxpool``, the total order of firmware_spec/arithmetic.md): each
    result the maximum of the same values, a zero's sign fixed by the caller as for
    numpy's.  None (numpy's reduction runs) where the module is not built, the axis is
    the innermost or the only one, or a result is NaN (which NaN numpy returns depends on
    its order)."""
    if native.NATIVE is None or x.dtype != np.float32 or x.ndim < 2 or x.size == 0:
        return None
    if not isinstance(axis, (int, np.integer)):
        if not isinstance(axis, tuple) or len(axis) != 1:
            return None
        axis = axis[0]
    if not -x.ndim <= axis < x.ndim:
        return None
    axis = int(axis) % x.ndim
    if axis == x.ndim - 1 and x.flags.c_contiguous:
        return None  # (the common case: numpy's reduction over contiguous rows is fast)
    perm = sorted(range(x.ndim), key=lambda i: -x.strides[i])  # (memory order)
    xt = x.transpose(perm)
    q = perm.index(axis)
    outer, r, inner = math.prod(xt.shape[:q]), xt.shape[q], math.prod(xt.shape[q + 1:])
    if not xt.flags.c_contiguous or inner == 1 or r < 2 or max(outer, r, inner) >= 1 << 31:
        return None
    out = np.empty((outer, 1, inner), np.float32)
    native.NATIVE.maxpool(xt.reshape(outer, r, inner), out, r, 1, r, 1, 0, 0)
    if np.isnan(out).any():
        return None
    res = out.reshape(*xt.shape[:q], 1, *xt.shape[q + 1:]).transpose(np.argsort(perm))
    return res if keepdims else res.reshape(x.shape[:axis] + x.shape[axis + 1:])


class ArithmeticWarning(RuntimeWarning):
    """This process computes other bits than firmware_spec/arithmetic.md defines."""


_checked = [False]


def max_pool_nhwc(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int],
                  pads: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray | None:
    """Max pooling of float32 ``x`` (N, C, H, W) (any strides; fastest where its memory is
    (N, H, W, C), as a device tensor's) by the compiled pool (``native.maxpool``: kernel
    (kh, kw), strides (sh, sw), top/left pads (pt, pl), out_hw (OH, OW); positions outside
    the input -inf), as a C-ordered (N, C, OH, OW) array: each window's maximum with +0
    over -0, as :func:`reduce_max` gives it.  None where the module is not built or a
    result is NaN (whose payload numpy's reduction chooses: the caller's path runs)."""
    if native.NATIVE is None:
        return None
    (kh, kw), (sh, sw), (pt, pl), (oh, ow) = kernel, strides, pads, out_hw
    n, c = x.shape[:2]
    nhwc = x.transpose(0, 2, 3, 1)
    out = np.empty((n, oh, ow, c), np.float32)
    for i in range(n):
        native.NATIVE.maxpool(np.ascontiguousarray(nhwc[i]), out[i], kw, kh, sw, sh, pl, pt)
    if np.isnan(out).any():
        return None
    r = np.empty((n, c, oh, ow), np.float32)
    native.NATIVE.hwc_to_chw(out.reshape(n, oh * ow, c), r.reshape(n, c, oh * ow))
    return r


def check_fp_environment() -> None:
    """Warn once per process when float32 subnormals are flushed to zero here (a library
    loaded into the process may switch FTZ/DAZ on): the CPU steps' results, and any
    subnormal the simulator's float32 stages meet, then differ from other machines'."""
    if not _checked[0]:
        _checked[0] = True
        if not denormals_work():
            warnings.warn("subnormal floats are flushed to zero in this process (a library "
                          "turned FTZ/DAZ on): results will differ from other machines' "
                          "(firmware_spec/arithmetic.md)", ArithmeticWarning, stacklevel=3)
