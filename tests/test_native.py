"""The compiled loops (dvsdk/_native.c) against the numpy paths they replace, bit for bit.

The numpy paths are themselves tested against numpy's float16 casts and plain-numpy
convolutions elsewhere (test_sim_speed_invariants, test_sim_ops); here every kernel runs
both ways on the same data, special values included, and must give the same bits.
"""

import os
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dvsdk import native
from dvsdk.hw.fp16 import round_f16
from dvsdk.sim import ops

from .refs import f16_cast

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NaN/inf on purpose
NATIVE = native.NATIVE
needs_native = pytest.mark.skipif(NATIVE is None, reason="dvsdk._native not built")


def test_native_module_is_built_where_a_compiler_exists():
    if os.environ.get("DVSDK_NATIVE", "1") == "0" or not (shutil.which("cc")
                                                           or shutil.which("gcc")):
        pytest.skip("no C compiler here, or numpy selected")
    assert NATIVE is not None, native.describe()
    assert "compiled" in native.describe()


@pytest.fixture
def numpy_only(monkeypatch):
    """Run the numpy reference paths."""
    monkeypatch.setattr(native, "NATIVE", None)


def both(fn, monkeypatch):
    """fn() with the compiled loops, then with numpy: the two results."""
    fast = fn()
    monkeypatch.setattr(native, "NATIVE", None)
    ref = fn()
    monkeypatch.setattr(native, "NATIVE", NATIVE)
    return fast, ref


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Same bits everywhere except NaN payloads: where one is NaN, so is the other.  (A
    compiler may commute the operands of a float add, and which NaN operand's payload an
    add of two NaNs returns is not fixed, in numpy's SIMD loops either.)"""
    if a.shape != b.shape:
        return False
    na, nb = np.isnan(a), np.isnan(b)
    return np.array_equal(na, nb) and a[~na].tobytes() == b[~nb].tobytes()


def special_mix(rng, shape) -> np.ndarray:
    x = rng.normal(scale=4, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    k = flat.size
    picks = rng.integers(0, k, size=(8, max(1, k // 50)))
    flat[picks[0]] = 0.0
    flat[picks[1]] = -0.0
    flat[picks[2]] = rng.uniform(-6e-5, 6e-5, picks[2].size)           # subnormal results
    flat[picks[3]] = rng.uniform(6e4, 7e4, picks[3].size) * rng.choice([-1, 1])
    flat[picks[4]] = np.inf
    flat[picks[5]] = np.array(0x7FC01234, np.uint32).view(np.float32)   # NaN with payload
    flat[picks[6]] = np.array(0x7F800001, np.uint32).view(np.float32)   # signalling NaN
    flat[picks[7]] = np.array(0x00012345, np.uint32).view(np.float32)   # float32 denormal
    return x


@needs_native
@pytest.mark.parametrize("seed", range(4))
def test_round_f16_native_equals_numpy(seed, monkeypatch):
    x = special_mix(np.random.default_rng(seed), (61, 67, 13))
    fast, ref = both(lambda: round_f16(x), monkeypatch)
    assert same_bits(fast, ref)


@needs_native
@pytest.mark.parametrize("code,param", [(0, 0.0), (2, 0.0), (2, 0.1), (2, -3.5), (6, 0.0)])
@pytest.mark.parametrize("owned", [False, True])
def test_finish_native_equals_numpy(code, param, owned, monkeypatch):
    x = special_mix(np.random.default_rng(code * 10 + int(owned)), (33, 130, 9))  # > a block
    keep = x.copy()

    def run():
        t = x.copy() if owned else x
        return ops.finish(t, code, param, owned=owned)

    fast, ref = both(run, monkeypatch)
    assert same_bits(fast, ref)
    assert same_bits(x, keep)  # not owned: the input is untouched


@needs_native
@pytest.mark.parametrize("seed", range(3))
def test_relu6_rounding_equals_numpy_in_blocks_with_and_without_nan(seed, monkeypatch):
    """ReLU6 + rounding take a bit-level path in a 256-value block (ROUND_CHUNK) without
    NaN and the exact one in a block holding one: every special value in blocks of both
    kinds (a NaN in every other block; and blocks of plain values between), against
    numpy."""
    rng = np.random.default_rng(seed)
    specials = np.array([0.0, -0.0, 6.0, 5.9999, 6.0001, 1e9, -1e9, np.inf, -np.inf,
                         3e-5, -3e-5, 6.1e-5, 1e-30, 65519.0, 70000.0], np.float32)
    x = rng.normal(scale=5, size=(96, 256)).astype(np.float32)
    for row in x[:64]:
        row[rng.integers(0, 256, 8)] = rng.choice(specials, 8)
        row[rng.integers(0, 256, 4)] = rng.uniform(-1e-4, 1e-4, 4)  # subnormal results
    bits = x.view(np.uint32)
    bits[:64:2, 7] = 0x7FC01234                                   # quiet NaN, payload
    bits[2:64:4, 33] = 0x7F800001                                 # signalling NaN
    fast, ref = both(lambda: ops.finish(x.copy(), 6, 0.0, owned=True), monkeypatch)
    assert same_bits(fast, ref)
    assert np.isnan(fast[:64:2, 7]).all() and (fast[1::2] <= 6).all()


@needs_native
@settings(max_examples=60, deadline=None)
@given(h=st.integers(1, 12), w=st.integers(1, 12), c=st.integers(1, 40),
       k=st.sampled_from([(1, 1), (3, 3), (5, 5), (2, 3), (3, 1), (7, 7)]),
       s=st.sampled_from([(1, 1), (2, 2), (1, 2), (3, 2)]),
       d=st.sampled_from([(1, 1), (2, 2), (1, 3)]),
       pads=st.tuples(*[st.integers(0, 3)] * 4), seed=st.integers(0, 2**16))
def test_depthwise_native_equals_numpy(h, w, c, k, s, d, pads, seed):
    rng = np.random.default_rng(seed)
    kx, ky = k
    (sx, sy), (dx, dy) = s, d
    pl, pr, pt, pb = pads
    if pl + w + pr < (kx - 1) * dx + 1 or pt + h + pb < (ky - 1) * dy + 1:
        return  # an empty output: the shape check rejects it before any kernel runs
    x = special_mix(rng, (h, w, c)) if seed % 3 == 0 else \
        rng.normal(size=(h, w, c)).astype(np.float32)
    wt = rng.normal(size=(c, 1, ky, kx)).astype(np.float32)
    if seed % 5 == 0:
        wt.reshape(-1)[rng.integers(0, wt.size)] = np.inf   # padding then gives 0*inf = NaN
    b = rng.normal(size=c).astype(np.float32)
    args = (x, wt, b, (sx, sy), pads, (dx, dy))
    fast = ops.conv2d(*args, depthwise=True)
    saved, native.NATIVE = native.NATIVE, None
    try:
        ref = ops.conv2d(*args, depthwise=True)
    finally:
        native.NATIVE = saved
    assert same_values(fast, ref)


@needs_native
def test_depthwise_matches_a_plain_loop_reference():
    """An independent reference: explicit loops over the taps, in float32, same order."""
    rng = np.random.default_rng(9)
    x = rng.normal(size=(9, 8, 5)).astype(np.float32)
    wt = rng.normal(size=(5, 1, 3, 3)).astype(np.float32)
    b = rng.normal(size=5).astype(np.float32)
    got = ops.conv2d(x, wt, b, (2, 1), (1, 0, 2, 1), depthwise=True)
    xp = np.pad(x, ((2, 1), (1, 0), (0, 0)))
    oh, ow = got.shape[:2]
    ref = np.zeros_like(got)
    for i in range(3):
        for j in range(3):
            ref += xp[i:i + oh, j:j + 2 * (ow - 1) + 1:2] * wt[:, 0, i, j]
    ref += b
    assert same_bits(got, ref)


@needs_native
def test_bad_arguments_raise_instead_of_crashing():
    f32 = np.zeros((4, 4, 3), np.float32)
    with pytest.raises(TypeError):
        NATIVE.round_f16(np.zeros(4, np.float64), np.zeros(4, np.float32))
    with pytest.raises(ValueError):
        NATIVE.round_f16(np.zeros(4, np.float32), np.zeros(5, np.float32))
    with pytest.raises(ValueError):
        buf = np.zeros(4, np.float32)
        NATIVE.round_f16(buf, buf)
    with pytest.raises(ValueError):
        NATIVE.finish(np.zeros(4, np.float32), 1, 0.0)       # tanh is numpy's
    with pytest.raises(ValueError):                          # channels disagree
        NATIVE.depthwise(f32, np.zeros((3, 3, 4), np.float32), np.zeros(3, np.float32),
                         f32.copy(), 1, 1, 1, 1, 1, 1)
    with pytest.raises(ValueError):                          # a zero stride
        NATIVE.depthwise(f32, np.zeros((3, 3, 3), np.float32), np.zeros(3, np.float32),
                         f32.copy(), 0, 1, 1, 1, 1, 1)
    with pytest.raises((TypeError, ValueError, BufferError)):  # read-only output
        ro = f32.copy()
        ro.flags.writeable = False
        NATIVE.finish(ro, 0, 0.0)


def test_numpy_paths_selected_by_environment(tmp_path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from dvsdk import native; "
                          "print(native.NATIVE is None, native.describe())"],
                         env={**os.environ, "DVSDK_NATIVE": "0"}, capture_output=True,
                         text=True, check=True).stdout
    assert out.startswith("True numpy (DVSDK_NATIVE=0)")


_FALLBACK_PROBE = """
import sys, warnings
sys.modules["dvsdk._native"] = None          # as if the extension had not been built
warnings.simplefilter("always")
import dvsdk
with warnings.catch_warnings(record=True) as seen:
    dvsdk.open_device("sim://").close()
    dvsdk.open_device("sim://").close()
print(len(seen), seen[0].category.__name__ if seen else "", str(seen[0].message) if seen else "")
"""


def test_missing_extension_is_said_once_at_first_use():
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "DVSDK_NATIVE"}
    out = subprocess.run([sys.executable, "-c", _FALLBACK_PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout
    count, category, message = out.split(" ", 2)
    assert (count, category) == ("1", "NativeFallbackWarning")
    assert "numpy alone" in message and "DVSDK_NATIVE=0" in message
    # chosen off on purpose: nothing to say
    out = subprocess.run([sys.executable, "-c", _FALLBACK_PROBE],
                         env={**env, "DVSDK_NATIVE": "0"}, capture_output=True, text=True,
                         check=True).stdout
    assert out.startswith("0 ")


def _chunked_reference(x16: np.ndarray, transpose: bool) -> np.ndarray:
    """(N, H, W, C) binary16 into the §1 order, written here with fancy indexing: element
    (n, y, x, c) at n*W*H*C + (c & ~7)*W*H + s*min(C - (c & ~7), 8) + (c & 7), where s is
    x*H + y (y*W + x transposed)."""
    n_, h, w, c = x16.shape
    nn, yy, xx, cc = np.meshgrid(*(np.arange(d) for d in x16.shape), indexing="ij")
    c0 = cc & ~7
    sp = yy * w + xx if transpose else xx * h + yy
    off = nn * w * h * c + c0 * w * h + sp * np.minimum(c - c0, 8) + (cc & 7)
    out = np.empty(x16.size, np.uint16)
    out[off.ravel()] = x16.view(np.uint16).ravel()
    return out


@needs_native
@pytest.mark.parametrize("c", [1, 3, 5, 7, 8, 9, 15, 16, 17, 24, 35])
@pytest.mark.parametrize("n,h,w", [(1, 37, 23), (2, 5, 41), (1, 1, 19), (1, 18, 1),
                                   (1, 300, 200)])  # (the last: staging split in blocks)
@pytest.mark.parametrize("transpose", [False, True])
def test_pack_unpack_runs_against_the_formula(c, n, h, w, transpose):
    """The native pack converts whole runs of positions per call (and the last chunk's
    channels through a staging run): every channel count, more outer positions than one
    block (a staging run over 1 MB is cut in blocks too), batches, both orientations, a
    contiguous source and an NCHW one seen as HWC (the strided gather), special values
    included, against numpy's cast (NaNs canonical) placed by the §1 formula; unpack
    inverts it exactly."""
    rng = np.random.default_rng(c * 1000 + h * 10 + w)
    nchw = special_mix(rng, (n, c, h, w))
    ref = _chunked_reference(f16_cast(nchw.transpose(0, 2, 3, 1)), transpose)
    for src in (nchw.transpose(0, 2, 3, 1), np.ascontiguousarray(nchw.transpose(0, 2, 3, 1))):
        out = np.empty(src.size, np.float16)
        NATIVE.pack(src, out, transpose)
        assert out.view(np.uint16).tobytes() == ref.tobytes()
    back = np.empty((n, h, w, c), np.float32)
    NATIVE.unpack(ref.view(np.float16), back, transpose)
    expect = f16_cast(nchw.transpose(0, 2, 3, 1)).astype(np.float32)
    assert same_bits(back, expect)


@needs_native
def test_the_portable_loops_give_the_same_bits():
    """Without F16C (an Arm board such as the ZIA's Cortex-A53 builds no x86 path) the
    conversions, pack/unpack and the fused CPU step run their portable loops: the same
    tests, in a child whose module skips F16C (``DVSDK_NATIVE_F16C=0``)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, DVSDK_NATIVE_F16C="0")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-x", "-k", "formula or binary16 or ew_f16 or to_f16",
                        "tests/test_native.py", "tests/test_native_fused.py"],
                       cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "deselected" in r.stdout


@needs_native
@pytest.mark.skipif(not shutil.which("valgrind"), reason="valgrind is not installed")
def test_the_avx2_builds_of_the_loops_give_the_same_bits():
    """The hot loops are built for AVX-512, AVX2 and baseline x86-64 and one is picked at
    load time; this machine runs the AVX-512 ones.  Under valgrind (which offers no
    AVX-512) the AVX2 builds run: the compiled-loop tests pass through them too.  (Not
    the pack/unpack tests, whose loops have one F16C build that runs here natively too,
    nor the look at the disassembly: under valgrind they took half of its test time and ran
    nothing the native run does not.)"""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(["valgrind", "--tool=none", "-q", sys.executable, "-m", "pytest", "-q",
                        "-p", "no:cacheprovider", "-p", "no:xdist", "tests/test_native_fused.py",
                        "tests/test_native.py", "-k", "not portable and not environment and "
                        "not built and not missing and not avx2 and not avx_builds and "
                        "not pack_unpack"],
                       cwd=root, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout


@needs_native
@pytest.mark.skipif(not shutil.which("objdump"), reason="objdump is not installed")
def test_the_avx_builds_call_no_helper_of_the_module():
    """The hot loops' AVX2 and AVX-512 builds call nothing of the module itself: a helper
    the compiler keeps out of line (a plain ``static inline`` it chose not to inline) is
    built once, for the SSE2 baseline, and calling it from a clone runs the slow build
    (a first ReLU6 pass did so and ran 2.4x slower); helpers are ``always_inline``."""
    import re
    import subprocess

    path = NATIVE.__file__
    asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    calls, fn = {}, None
    for line in asm.splitlines():
        head = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if head:
            fn = head.group(1)
        elif fn and fn.endswith((".avx2", ".avx512f")) and "\tcall " in line:
            target = re.search(r"<([^>]+)>", line)
            if target and "@plt" not in target.group(1):
                calls.setdefault(fn, set()).add(target.group(1))
    assert any(f.endswith(".avx512f") for f in re.findall(r"<(.+)>:", asm))
    assert calls == {}
