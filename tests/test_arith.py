"""The simulator's arithmetic (firmware_spec/arithmetic.md), piece by piece, against
references written here: a plain float32 loop in the documented order, integer known
answers, numpy's float64 functions, and the rules for zeros and NaNs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dvsdk import native
from dvsdk.hw import arith, elementary
from dvsdk.hw.fp16 import round_f16, to_f16
from dvsdk.hw.layout import pack
from dvsdk.sim import ops

NATIVE = native.NATIVE
ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def _sequential(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The documented order, one float32 scalar operation at a time (no numpy vector
    loop, no BLAS): acc = +0, then acc + a[i,k]*b[k,j] for k = 0, 1, ..."""
    n, k = a.shape
    m = b.shape[1]
    out = np.empty((n, m), np.float32)
    for i in range(n):
        for j in range(m):
            acc = np.float32(0)
            for kk in range(k):
                acc = np.float32(acc + np.float32(a[i, kk] * b[kk, j]))
            out[i, j] = acc
    return out


def _f16_values(rng, shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float16).astype(np.float32)


@pytest.fixture(params=["compiled", "numpy"])
def path(request, monkeypatch):
    if request.param == "compiled":
        if NATIVE is None:
            pytest.skip("dvsdk._native not built")
    else:
        monkeypatch.setattr(native, "NATIVE", None)
    return request.param


@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (3, 5, 17), (9, 31, 16), (8, 257, 48),
                                   (13, 300, 50), (2, 0, 3), (17, 2, 65)])
def test_matmul_is_the_sequential_float32_sum(n, k, m, path):
    """Every output equals the scalar loop in the documented order, on tile edges (rows not a
    multiple of a tile, partial 16-column panels, K across the 256-step blocks)."""
    rng = np.random.default_rng(n * 100 + k + m)
    a, b = _f16_values(rng, (n, k), 4), _f16_values(rng, (k, m))
    for exact in (True, False):
        got = arith.matmul(a, b, exact_products=exact)
        assert np.array_equal(got.view(np.uint32), _sequential(a, b).view(np.uint32))


def test_matmul_sums_in_order_k_not_pairwise(path):
    """Known answers that only the documented order gives: 1 + 2**-24 + ... rounds back to 1
    at every step when the 1 comes first (16 steps of 2**-24 would add 2**-20 summed
    pairwise or in reverse); with the 1 last, the small ones add up exactly first."""
    k = 17
    a = np.full((2, k), 2.0 ** -24, np.float32)
    a[0, 0] = 1.0
    a[1, -1] = 1.0
    b = np.ones((k, 1), np.float32)
    got = arith.matmul(a, b, exact_products=True)[:, 0]
    assert got[0] == np.float32(1.0)
    assert got[1] == np.float32(1.0 + 16 * 2.0 ** -24)


def test_pure_integer_data_is_exact(path):
    """DMP's "pure ints" (§12: values and weights in {-2, -1, 1, 2}, bias too): every partial
    sum is an integer below 2**24, so the result is the exact integer product."""
    rng = np.random.default_rng(7)
    vals = np.array([-2.0, -1.0, 1.0, 2.0], np.float32)
    a, b = rng.choice(vals, (37, 576)), rng.choice(vals, (576, 40))
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert np.array_equal(arith.matmul(a, b, exact_products=True), exact.astype(np.float32))


@pytest.mark.skipif(NATIVE is None or NATIVE.gemm_isa() not in ("avx512", "avx2"),
                    reason="no lower x86 build to compare with here")
def test_every_build_of_the_compiled_product_gives_the_same_bits():
    """The AVX-512, AVX2 and SSE2 tiles (and fused or not) write the same bits as the numpy
    loop, in children that ask for each build (``DVSDK_NATIVE_ISA``)."""
    code = ("import hashlib, numpy as np\n"
            "from dvsdk.hw import arith\nfrom dvsdk import native\n"
            "rng = np.random.default_rng(3)\nh = hashlib.sha256()\n"
            "for n, k, m in [(1, 1280, 1000), (49, 1152, 192), (300, 27, 32), (7, 513, 47)]:\n"
            "    a = rng.standard_normal((n, k)).astype(np.float16).astype(np.float32)\n"
            "    b = rng.standard_normal((k, m)).astype(np.float16).astype(np.float32)\n"
            "    for f in (True, False):\n"
            "        h.update(arith.matmul(a, b, exact_products=f).tobytes())\n"
            "print(native.NATIVE.gemm_isa() if native.NATIVE else 'numpy', h.hexdigest())\n")
    got = {}
    for isa in ("avx512", "avx2", "sse2", "numpy"):
        env = dict(os.environ, DVSDK_NATIVE_ISA=isa, DVSDK_NATIVE="0" if isa == "numpy" else "1")
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=300, check=True).stdout.split()
        got[out[0]] = out[1]
    assert {"avx2", "sse2", "numpy"} <= set(got) and len(set(got.values())) == 1, got


def test_matmul_nd_follows_numpys_shapes():
    rng = np.random.default_rng(4)
    for sa, sb in [((5,), (5, 3)), ((4, 5), (5,)), ((2, 3, 4, 5), (5, 6)), ((1, 4, 5), (3, 5, 2))]:
        a, b = _f16_values(rng, sa), _f16_values(rng, sb)
        got = arith.matmul_nd(a, b)
        assert got.shape == np.matmul(a, b).shape
        np.testing.assert_allclose(got, np.matmul(a.astype(np.float64), b), rtol=1e-5,
                                   atol=1e-5)
    ints = np.arange(6).reshape(2, 3)
    assert np.array_equal(arith.matmul_nd(ints, ints.T), ints @ ints.T)


# -- elementary functions ----------------------------------------------------------------

def _ulps(got: np.ndarray, ref: np.ndarray) -> float:
    fin = np.isfinite(ref) & (ref != 0) & (np.abs(ref) > 1e-300)
    return float((np.abs(got[fin] - ref[fin]) / np.abs(ref[fin]) / 2.0 ** -52).max())


@pytest.mark.parametrize("fn,ref,lo,hi", [
    (elementary.exp, np.exp, -700, 700), (elementary.expm1, np.expm1, -40, 40),
    (elementary.tanh, np.tanh, -25, 25), (elementary.log, np.log, 1e-300, 1e300),
    (elementary.sigmoid, lambda x: 1 / (1 + np.exp(-x)), -40, 40),
    (elementary.log1p, np.log1p, 0, 1)])
def test_elementary_functions_are_within_a_few_ulps_of_numpys(fn, ref, lo, hi):
    rng = np.random.default_rng(9)
    if fn is elementary.log:
        x = np.exp(rng.uniform(np.log(lo), np.log(hi), 200_000))
    else:
        x = np.concatenate([rng.uniform(lo, hi, 200_000), rng.uniform(-1e-3, 1e-3, 10_000)])
        x = x[(x >= lo) & (x <= hi)]
    assert _ulps(fn(x), ref(x)) < 4


def test_elementary_special_values():
    sp = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1000.0, -1000.0])
    e = elementary.exp(sp)
    assert list(e[[0, 1, 2, 3, 5, 6]]) == [1.0, 1.0, np.inf, 0.0, np.inf, 0.0]
    assert np.isnan(e[4])
    t = elementary.tanh(sp)
    assert list(t[[0, 2, 3, 5, 6]]) == [0.0, 1.0, -1.0, 1.0, -1.0] and np.signbit(t[1])
    m = elementary.expm1(sp)
    assert m[0] == 0 and np.signbit(m[1]) and m[3] == -1.0 and m[2] == np.inf
    lg = elementary.log(np.array([0.0, -1.0, np.inf, 1.0, 5e-324]))
    assert lg[0] == -np.inf and np.isnan(lg[1]) and lg[2] == np.inf and lg[3] == 0.0
    assert lg[4] == pytest.approx(np.log(5e-324))
    p = elementary.power(np.array([0.0, -0.0, -2.0, -2.0, 2.0, 1.0, 4.0, 3.0]),
                         np.array([0.0, -1.0, 3.0, 0.5, -2.0, np.nan, 0.5, 2.5]))
    assert p[0] == 1.0 and p[1] == -np.inf and np.isnan(p[3])
    assert p[4] == 0.25 and p[5] == 1.0 and p[7] == pytest.approx(3.0 ** 2.5, rel=1e-15)
    # small integer powers by repeated multiplication, a half power by the square root:
    # exact where the result is representable, as C's pow
    assert p[2] == -8.0 and p[6] == 2.0
    x = np.arange(1, 200, dtype=np.float64)
    assert np.array_equal(elementary.power(x, 3.0), x * x * x)
    assert np.array_equal(elementary.power(x, -2.0), 1.0 / (x * x))
    assert np.array_equal(elementary.power(x * x, 0.5), x)


# -- zeros, NaNs and the total order -----------------------------------------------------

def test_max_pool_order_puts_plus_zero_over_minus_zero_and_nan_above_all(path):
    x = np.array([[-0.0, 0.0], [0.0, -0.0]], np.float32).reshape(2, 2, 1)
    assert not np.signbit(ops.max_pool(x, (2, 2), (2, 2))).any()
    neg = np.array([-0.0, -0.0, -0.0, -0.0], np.float32).reshape(2, 2, 1)
    assert np.signbit(ops.max_pool(neg, (2, 2), (2, 2))).all()
    nan = np.array([1.0, np.inf, -np.nan, 3.0], np.float32).reshape(2, 2, 1)
    got = ops.max_pool(nan, (2, 2), (2, 2))
    assert got.view(np.uint32)[0, 0, 0] == 0x7FC00000  # the canonical NaN, whatever came in
    pad = ops.max_pool(np.full((1, 1, 1), 5.0, np.float32), (2, 2), (1, 1), (1, 0, 1, 0))
    assert pad.ravel()[0] == 5.0  # padded positions are -inf, never 0


def test_every_stored_nan_is_the_canonical_one(path):
    bits = np.array([0x7FC00000, 0xFFC00000, 0x7F801234, 0xFFFFFFFF, 0x3F800000], np.uint32)
    x = bits.view(np.float32)
    assert list(to_f16(x).view(np.uint16)) == [0x7E00] * 4 + [0x3C00]
    assert list(round_f16(x).view(np.uint32)) == [0x7FC00000] * 4 + [0x3F800000]
    assert list(pack(x.reshape(1, 1, 5)).view(np.uint16)) == [0x7E00] * 4 + [0x3C00]


def test_cpu_comparisons_select_without_the_machines_zero_rule():
    a = np.array([0.0, -0.0, np.nan, 1.0, 2.0], np.float32)
    b = np.array([-0.0, 0.0, 1.0, np.nan, 1.0], np.float32)
    mx, mn = arith.maximum(a, b), arith.minimum(a, b)
    assert list(np.signbit(mx[:2])) == [True, False]  # equal: the second operand
    assert np.isnan(mx[2]) and np.isnan(mx[3]) and mx[4] == 2.0
    assert list(np.signbit(mn[:2])) == [True, False] and mn[4] == 1.0
    c = arith.clip(np.array([-0.0, -1.0, 7.0, np.nan], np.float32), 0, 6)
    assert np.signbit(c[0]) and c[1] == 0 and c[2] == 6 and np.isnan(c[3])
    z = np.array([[-0.0, 0.0, -1.0], [-0.0, -0.0, -5.0]], np.float32)
    assert list(np.signbit(arith.reduce_max(z, axis=1))) == [False, True]
    zmin = np.array([[0.0, 1.0], [-0.0, 0.0]], np.float32)
    assert list(np.signbit(arith.reduce_min(zmin, axis=1))) == [False, True]


def test_relu6_of_minus_zero_is_plus_zero_on_both_paths(path):
    x = np.array([-0.0, -3.0, 0.0, 7.0, np.nan, 2.5], np.float32)
    y = ops.finish(x.copy(), ops.ACT_RELU6)
    assert list(y.view(np.uint32)[:4]) == [0, 0, 0, 0x40C00000]
    assert np.isnan(y[4]) and y[5] == 2.5


def test_the_quick_probe_of_the_stop_hook_agrees_with_a_child_under_another_blas_kernel():
    """The hook's probe net (a conv stack at 112x112) in two children with different
    OpenBLAS kernels and thread counts: one answer (the simulator calls no BLAS)."""
    code = ("import hashlib, numpy as np, onnx, dvsdk, sys\n"
            "sys.path.insert(0, sys.argv[1])\n"
            "from tests.onnx_models import NetBuilder\nfrom tests.patterns import pattern\n"
            "b = NetBuilder(3)\nh = b.node('Relu', [b.conv('x', 16, 32, k=3)])\n"
            "h = b.node('Relu', [b.conv(h, 32, 32, k=3, group=32)])\n"
            "y = b.conv(b.node('Relu', [b.conv(h, 32, 96, k=1)]), 96, 24, k=1)\n"
            "m = b.model([('x', (1, 16, 112, 112))], [y], 'probe')\n"
            "with dvsdk.load(dvsdk.compile(m), 'sim://') as net:\n"
            "    out = net.run(pattern((1, 16, 112, 112)))\n"
            "print(hashlib.sha256(next(iter(out.values())).tobytes()).hexdigest())\n")
    got = set()
    for ct, th in (("Haswell", "2"), ("Prescott", "1")):
        env = dict(os.environ, OPENBLAS_CORETYPE=ct, DVSDK_SIM_THREADS=th)
        got.add(subprocess.run([sys.executable, "-W", "ignore", "-c", code, str(ROOT)],
                               env=env, capture_output=True, text=True, timeout=300,
                               check=True).stdout.strip())
    assert len(got) == 1, got


@pytest.mark.skipif(NATIVE is None, reason="dvsdk._native not built")
@pytest.mark.parametrize("name", ["exp", "expm1", "tanh", "sigmoid", "log"])
def test_the_compiled_elementary_functions_are_the_numpy_ones_bit_for_bit(name, monkeypatch):
    """dvsdk._native.elem (_native_elem.h) against elementary's numpy code, on wide ranges,
    subnormal inputs and results, overflow, zeros of both signs, infinities and NaN."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.standard_normal(200_000) * 5, rng.uniform(-800, 800, 50_000),
                        np.exp(rng.uniform(-740, 700, 50_000)), -np.exp(rng.uniform(-9, 9, 999)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, 1e-310, -1e-310,
                         2.2250738585072014e-308, 709.78, -745.1]])
    fn = getattr(elementary, name)
    fast = fn(x)
    monkeypatch.setattr(native, "NATIVE", None)
    assert np.array_equal(fast.view(np.uint64), fn(x).view(np.uint64))


@pytest.mark.skipif(NATIVE is None, reason="dvsdk._native not built")
@pytest.mark.parametrize("name", ["exp", "expm1", "tanh", "sigmoid", "log"])
def test_float32_in_one_compiled_pass_is_the_numpy_code_then_numpys_cast(name, monkeypatch):
    """The CPU steps' float32 path (``nn.in_float_type``: ``_native.elem`` on float32, each
    value widened, computed and rounded back in one pass) against elementary's numpy code
    in float64 then numpy's cast to float32: float32 overflow to inf, results that round to
    float32 subnormals or zero, NaN of both signs, strided and 0-d inputs."""
    from dvsdk.cpu.nn import in_float_type

    rng = np.random.default_rng(12)
    x = np.concatenate([rng.standard_normal(100_000) * 30, rng.uniform(-200, 200, 20_000),
                        np.exp(rng.uniform(-100, 88, 20_000)),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 1e-40,
                         88.72, 88.73, -103.9, -104.0, 3.4e38, 1e-7]]).astype(np.float32)
    fn = getattr(elementary, name)
    with np.errstate(all="ignore"):
        for v in (x, x.reshape(-1, 5)[:, ::2], np.asarray(x[7])):
            fast = in_float_type(fn, v)
            ref = fn(v).astype(np.float32)
            assert fast.shape == ref.shape and fast.dtype == np.float32
            assert np.array_equal(fast.view(np.uint32), ref.view(np.uint32))
    monkeypatch.setattr(native, "NATIVE", None)  # the numpy path: the same call
    with np.errstate(all="ignore"):
        assert np.array_equal(in_float_type(fn, x).view(np.uint32),
                              fn(x).astype(np.float32).view(np.uint32))


def test_a_process_that_flushes_subnormals_is_warned(monkeypatch):
    """FTZ/DAZ switched on by some library changes results: opening sim:// says so once."""
    import dvsdk

    monkeypatch.setattr(arith, "denormals_work", lambda: False)
    monkeypatch.setattr(arith, "_checked", [False])
    with pytest.warns(arith.ArithmeticWarning, match="flushed to zero"):
        dvsdk.open_device("sim://").close()


def test_scalars_keep_their_shape_through_the_compiled_functions():
    """A 0-d input comes back 0-d (the compiled path is handed a 1-D copy)."""
    from dvsdk.cpu.ops import run_op

    for op in ("Exp", "Log", "Tanh", "Sigmoid", "Softplus", "Elu"):
        assert run_op(op, [np.array(0.5, np.float32)], {})[0].shape == ()
    assert elementary.power(np.float64(2.0), 0.5).shape == ()


def test_cast_of_nan_inf_and_out_of_range_floats_is_defined():
    """NaN -> 0, saturation to the type's range, then truncation toward zero (x86 and Arm
    convert these differently; ONNX leaves them undefined)."""
    from dvsdk.cpu.ops import run_op

    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, -1.7, 2.9, 255.5], np.float32)
    assert run_op("Cast", [x], {"to": 2})[0].tolist() == [0, 255, 0, 255, 0, 0, 2, 255]
    assert run_op("Cast", [x], {"to": 6})[0].tolist() == [
        0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, -1, 2, 255]
    big = run_op("Cast", [x], {"to": 7})[0]
    assert big[1] == 2**63 - 1024 and big[2] == -2**63 and big[0] == 0


def test_float64_products_take_the_fixed_order_too():
    """float64 (and mixed) MatMul in the order of the float32 one, not BLAS's."""
    rng = np.random.default_rng(13)
    a, b = rng.standard_normal((5, 300)), rng.standard_normal((300, 7))
    got = arith.matmul_nd(a, b)
    ref = np.zeros((5, 7))
    for k in range(300):
        ref = ref + a[:, k:k + 1] * b[k]
    assert got.dtype == np.float64 and np.array_equal(got, ref)
    assert arith.matmul_nd(a.astype(np.float32), b).dtype == np.float64


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_clip_with_number_bounds_selects_as_where_did(dtype):
    """clip's in-place selection (Python-number bounds) against the two np.where of its
    general path, on every binary16 pattern (NaN payloads, -0): the same bits; ``x`` is
    left alone unless ``owned``."""
    x = np.arange(65536, dtype=np.uint16).view(np.float16).astype(dtype)
    keep = x.copy()
    for lo, hi in ((0, 1), (None, 6), (-2.5, None), (0.1, 1e4)):
        ref = x
        if lo is not None:
            ref = np.where(ref < lo, lo, ref)
        if hi is not None:
            ref = np.where(ref > hi, hi, ref)
        got = arith.clip(x, lo, hi)
        assert got.dtype == dtype and got.tobytes() == ref.astype(dtype).tobytes()
        assert x.tobytes() == keep.tobytes()
        t = x.copy()
        assert arith.clip(t, lo, hi, owned=True).tobytes() == got.tobytes()


@pytest.mark.skipif(native.NATIVE is None, reason="the packed operand is the compiled product's")
def test_a_constant_operand_is_packed_once_and_others_every_time():
    """matmul_nd keeps pack_b of a right-hand operand whose bytes cannot change (a
    read-only view of ``bytes``, as a net.bin's constants are) and never of one that can:
    the same bits either way."""
    rng = np.random.default_rng(5)
    raw = rng.standard_normal(96 * 40).astype(np.float32).tobytes()
    const = np.frombuffer(raw, np.float32).reshape(96, 40)
    mutable = const.copy()
    a = rng.standard_normal((2, 7, 96)).astype(np.float32)
    arith._PACKED.clear()
    first = arith.matmul_nd(a, const)
    assert len(arith._PACKED) == 1 and arith.matmul_nd(a, const).tobytes() == first.tobytes()
    assert arith.matmul_nd(a, mutable).tobytes() == first.tobytes()
    mutable[0, 0] += 1.0  # a writable operand is packed afresh: its change shows
    assert arith.matmul_nd(a, mutable).tobytes() != first.tobytes()
    assert len(arith._PACKED) == 1
    assert not arith._immutable(np.frombuffer(bytearray(raw), np.float32))


@pytest.mark.parametrize("b", [1, 2, 3, 7, 64, -1, -2, -5, -64])
def test_a_scalar_integer_power_takes_the_selections_of_the_general_one(b):
    """power(a, b) for one integer exponent (its short way) against the same exponent as
    an array (the general way, whose selections pick the same operations): the same bits
    on every binary16 value, NaN payloads, infinities, zeros and huge and tiny values."""
    h = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float64)
    odd = np.array([0x7FF0000000000001, 0xFFF8000000001234], np.uint64).view(np.float64)
    a = np.concatenate([h, odd, [1e308, -1e-308, 5e-324, -1.0, 1.0]])
    want = elementary.power(a, np.full(a.shape, float(b)))
    for exponent in (b, float(b), np.float32(b), np.array(b)):
        assert elementary.power(a, exponent).tobytes() == want.tobytes()


@pytest.mark.parametrize("shape", [(7, 33), (1, 40, 33), (2, 3, 5, 33)])
def test_a_2d_right_operand_takes_all_rows_in_one_product(shape):
    """matmul_nd with a 2-D float32 right operand (one product of every row of ``a``)
    against the same product broadcast batch by batch (``b`` given a batch dimension):
    the same bits, a transposed (non-contiguous) ``a`` too."""
    rng = np.random.default_rng(len(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    a.reshape(-1)[:3] = [np.nan, np.inf, -0.0]
    b = rng.standard_normal((33, 21)).astype(np.float32)
    want = arith.matmul_nd(a, b[None])
    assert want.shape[-2:] == (shape[-2], 21) if len(shape) > 1 else True
    got = arith.matmul_nd(a, b)
    assert got.shape == (*shape[:-1], 21)
    assert got.tobytes() == want.reshape(got.shape).tobytes()
    at = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    assert arith.matmul_nd(np.swapaxes(at, -1, -2), b).tobytes() == got.tobytes()


@pytest.mark.parametrize("k,m", [(15, 40), (27, 10), (3, 16), (1, 1), (120, 6625)])
def test_pack_b_is_the_zero_padded_panels(k, m):
    """pack_b: (ceil(M/16), K, 16) panels of ``b``, the last one's spare columns zeros
    (against np.pad's formulation), NaN payloads kept."""
    b = np.random.default_rng(k).standard_normal((k, m)).astype(np.float32)
    b.reshape(-1)[:1] = np.array([0x7F800123], np.uint32).view(np.float32)
    p = -(-m // arith.PANEL)
    want = np.pad(b, ((0, 0), (0, p * arith.PANEL - m))).reshape(k, p, arith.PANEL)
    assert arith.pack_b(b).tobytes() == np.ascontiguousarray(want.transpose(1, 0, 2)).tobytes()
    assert arith.pack_b(np.asfortranarray(b)).tobytes() == arith.pack_b(b).tobytes()


@pytest.mark.parametrize("sa,sb", [((1, 3, 5, 7), (1, 3, 7, 17)), ((2, 1, 4, 9), (3, 9, 5)),
                                   ((2, 4, 6), (2, 6, 0)), ((4, 3), (2, 3, 16)),
                                   ((6,), (2, 6, 3)), ((2, 3, 4), (4,))])
def test_a_batch_of_right_operands_is_the_sequential_sum_of_each(sa, sb, path):
    """matmul_nd with batched float32 right operands (attention's products; the compiled
    path packs every matrix at once, transposed and broadcast operands included): each
    matrix of the result is the scalar loop in the documented order."""
    rng = np.random.default_rng(len(sa) * 7 + len(sb))
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    a.reshape(-1)[:2] = [np.inf, -0.0]
    got = arith.matmul_nd(np.swapaxes(np.ascontiguousarray(np.swapaxes(a, -1, -2)), -1, -2)
                          if a.ndim > 1 else a, b)
    assert got.shape == np.matmul(a, b).shape and got.dtype == np.float32
    a2 = a[None] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    ab = np.broadcast_to(a2, (*batch, *a2.shape[-2:]))
    bb = np.broadcast_to(b2, (*batch, *b2.shape[-2:]))
    want = np.stack([_sequential(ab[i], bb[i]) for i in np.ndindex(*batch)]) if batch else \
        _sequential(ab, bb)
    want = want.reshape(*batch, a2.shape[-2], b2.shape[-1])
    if a.ndim == 1:
        want = want[..., 0, :]
    if b.ndim == 1:
        want = want[..., 0]
    assert got.tobytes() == want.tobytes()


def _max_reference(x: np.ndarray, axis: int) -> np.ndarray:
    """The largest value of each row along ``axis``, +0 over -0, NaN if one is there
    (firmware_spec/arithmetic.md), one row at a time in Python."""
    rows = np.moveaxis(x, axis, -1).reshape(-1, x.shape[axis])
    out = []
    for row in rows:
        vals = [float(v) for v in row]
        if any(v != v for v in vals):
            out.append(np.nan)
            continue
        m = max(vals)
        if m == 0:
            m = 0.0 if any(v == 0 and not np.signbit(v) for v in vals) else -0.0
        out.append(m)
    shape = np.moveaxis(x, axis, -1).shape[:-1]
    return np.asarray(out, np.float32).reshape(shape)


@pytest.mark.parametrize("base,perm", [((61, 1, 40), (1, 2, 0)), ((1, 6, 7, 8), (0, 3, 1, 2)),
                                       ((5, 9, 3), (2, 0, 1)), ((4, 6), (1, 0)),
                                       ((3, 4, 5, 6), (3, 1, 0, 2))])
@pytest.mark.parametrize("nan", [False, True])
def test_reduce_max_of_a_transposed_view_is_the_maximum_of_each_row(base, perm, nan, path):
    """reduce_max over each axis of a transposed float32 view (the compiled path reduces
    a strided axis with the max pool): the largest value, +0 over -0, NaN propagated."""
    rng = np.random.default_rng(len(base) + perm[0])
    x = rng.standard_normal(base).astype(np.float32)
    x[x > 1.2] = 0.0
    x[x < -1.2] = -0.0
    x[(x > 0) & (x < 0.3)] = -1.0  # (rows whose largest value is a zero)
    if nan:
        x.reshape(-1)[::11] = np.nan
    x = x.transpose(perm)
    for axis in range(x.ndim):
        got = arith.reduce_max(x, axis=axis, keepdims=True)
        want = _max_reference(x, axis)
        assert got.shape == tuple(1 if i == axis else n for i, n in enumerate(x.shape))
        got = np.moveaxis(got, axis, -1)[..., 0]
        assert np.array_equal(np.isnan(got), np.isnan(want))
        fin = ~np.isnan(want)
        assert np.array_equal(got[fin].view(np.uint32), want[fin].view(np.uint32))
        assert arith.reduce_max(x, axis=(axis,)).shape == want.shape
