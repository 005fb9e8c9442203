"""Fixed-point convolution, deconvolution and fully connected layers (dvsdk.vx.exact,
dvsdk.cpu.fixedpoint, firmware_spec/fixed_point.md): U8, S8 and Q7.8 with WRAP or SATURATE
and TO_ZERO or TO_NEAREST_EVEN, against the extension text's ``sat(round(sum + b))``
computed here in Python integers (the sums by tests/vx_refs in float64, exact for these
sizes; rounding with ``fractions.Fraction``), and the FP16 bound on both sides."""

from __future__ import annotations

import re
import zlib
from fractions import Fraction

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx
from dvsdk.cpu.fixedpoint import fixed_point

from . import vx_refs as ref
from .conftest import ROOT

WO = vx.Accessor.WRITE_ONLY
SAT, WRAP = vx.ConvertPolicy.SATURATE, vx.ConvertPolicy.WRAP
ZERO, EVEN = vx.RoundPolicy.TO_ZERO, vx.RoundPolicy.TO_NEAREST_EVEN
TYPES = {"U8": (vx.Type.UINT8, 0, 0, 255), "S8": (vx.Type.INT8, 0, -128, 127),
         "Q78": (vx.Type.INT16, 8, -32768, 32767)}


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


# -- the text's arithmetic, in Python integers ------------------------------------------

def policy(total: np.ndarray, shift: int, lo: int, hi: int, overflow, rounding) -> np.ndarray:
    """Exact integer sums in units of 2**-(p_in + p_w) -> raw outputs."""
    def one(t: float) -> int:
        v = Fraction(int(t), 2 ** shift)
        q = round(v) if rounding == EVEN else int(v)        # round(): half to even
        if overflow == SAT:
            return min(max(q, lo), hi)
        return (q - lo) % (hi - lo + 1) + lo
    assert np.all(np.abs(total) < 2 ** 52)                   # float64 sums were exact
    return np.vectorize(one, otypes=[np.int64])(total)


def _tensor(ctx, dims, kind, raw=None):
    typ, fpp, _, _ = TYPES[kind]
    t = vx.Tensor(ctx, dims, typ, fpp)
    if raw is not None:
        t.copy_patch(np.asarray(raw).astype(t._storage().dtype), WO)
    return t


def _raw(rng, kind, shape, lo=None, hi=None):
    _, _, tlo, thi = TYPES[kind]
    return rng.integers(tlo if lo is None else lo, (thi if hi is None else hi) + 1, shape)


def _run(g, x, xr, y):
    assert g.verify() == vx.Status.SUCCESS, g.error
    x.copy_patch(np.asarray(xr).astype(x._storage().dtype), WO)
    assert g.process() == vx.Status.SUCCESS, g.error
    return y.copy_patch().astype(np.int64)


def _spread(got, lo, hi):
    """Hard cases: the outputs span the range, not one saturated value."""
    assert len(np.unique(got)) > got.size // 4
    assert np.mean((got == lo) | (got == hi)) < 0.5


# (weights range, input range) per type and policy: SATURATE cases keep most sums inside
# the type so rounding shows; WRAP cases overflow on purpose
CONV_CASES = [
    ("U8", SAT, ZERO, (0, 1), (0, 20)), ("U8", WRAP, ZERO, (0, 255), (0, 255)),
    ("S8", SAT, EVEN, (-1, 1), (-20, 20)), ("S8", WRAP, EVEN, (-128, 127), (-128, 127)),
    ("Q78", SAT, ZERO, (-40, 40), None), ("Q78", SAT, EVEN, (-40, 40), None),
    ("Q78", WRAP, ZERO, (-3000, 3000), None), ("Q78", WRAP, EVEN, (-3000, 3000), None)]


@pytest.mark.parametrize("kind,overflow,rounding,wr,xr", CONV_CASES)
@pytest.mark.parametrize("bias", ["none", "shared", "unshared"])
def test_convolution_exact(device, kind, overflow, rounding, wr, xr, bias):
    rng = np.random.default_rng(zlib.crc32(f"{kind} {overflow} {rounding} {bias}".encode()))
    _, fpp, lo, hi = TYPES[kind]
    xs, ws = (9, 7, 3, 2), (3, 3, 3, 5)                     # pad 1, dilation (1, 0), skip 2
    pad, dil, skip = (1, 1), (1, 0), (2, 2)
    keff = [ws[a] + (ws[a] - 1) * dil[a] for a in (0, 1)]
    od = [ref.out_size(xs[a], pad[a], keff[a], skip[a], True) for a in (0, 1)]
    w_raw = _raw(rng, kind, ws, *wr)
    b_lo, b_hi = (-2000, 2000) if fpp else (None, None) if overflow == WRAP else (
        (0, 40) if kind == "U8" else (-20, 20))            # SATURATE: keep sums in range
    b_raw = {"none": None, "shared": _raw(rng, kind, (5,), b_lo, b_hi),
             "unshared": _raw(rng, kind, (od[0], od[1], 5), b_lo, b_hi)}[bias]
    x_raw = _raw(rng, kind, xs, *(xr or (None, None)))
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x = _tensor(ctx, xs, kind)
        w = _tensor(ctx, ws, kind, w_raw)
        b = None if b_raw is None else _tensor(ctx, b_raw.shape, kind, b_raw)
        y = _tensor(ctx, (od[0], od[1], 5, 2), kind)
        p = vx.ConvolutionParams(pad[0], pad[1], overflow, rounding,
                                 vx.RoundingType.CEILING, dil[0], dil[1])
        node = vx.convolution_layer(g, x, w, b, p, y)
        got = _run(g, x, x_raw, y)
        assert node.where == "CPU" and "exact int64" in node.placement[0]["detail"]
    total = ref.convolution(x_raw, w_raw, None, pad, dil, skip, ceil=True)
    if b_raw is not None:                                   # the bias at the products' step
        b_up = b_raw.astype(np.float64) * 2 ** fpp
        total += b_up.reshape(b_up.shape + (1,)) if b_raw.ndim == 3 else b_up.reshape(
            1, 1, -1, 1)
    want = policy(total, fpp, lo, hi, overflow, rounding)
    np.testing.assert_array_equal(got, want)
    if overflow == SAT:
        _spread(got, lo, hi)


@pytest.mark.parametrize("kind,overflow,rounding,wr,xr", CONV_CASES)
def test_deconvolution_exact(device, kind, overflow, rounding, wr, xr):
    rng = np.random.default_rng(7)
    _, fpp, lo, hi = TYPES[kind]
    xs, ws, up, pad, a = (5, 4, 3, 1), (3, 4, 3, 4), (2, 2), (1, 0), (1, 0)
    od = [(xs[i] - 1) * up[i] - 2 * pad[i] + ws[i] + a[i] for i in (0, 1)]
    w_raw, b_raw = _raw(rng, kind, ws, *wr), _raw(rng, kind, (4,), -1000 if fpp else None,
                                                  1000 if fpp else None)
    x_raw = _raw(rng, kind, xs, *(xr or (None, None)))
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x, w, b = _tensor(ctx, xs, kind), _tensor(ctx, ws, kind, w_raw), _tensor(
            ctx, (4,), kind, b_raw)
        y = _tensor(ctx, (od[0], od[1], 4, 1), kind)
        node = vx.deconvolution_layer(g, x, w, b, vx.DeconvolutionParams(
            pad[0], pad[1], overflow, rounding, a[0], a[1]), y)
        got = _run(g, x, x_raw, y)
        assert node.where == "CPU"
    total = ref.deconvolution(x_raw, w_raw, b_raw.astype(np.float64) * 2 ** fpp, up, pad, a)
    np.testing.assert_array_equal(got, policy(total, fpp, lo, hi, overflow, rounding))
    if overflow == SAT:
        _spread(got, lo, hi)


@pytest.mark.parametrize("kind,overflow,rounding,wr,xr", CONV_CASES)
def test_fully_connected_exact(device, kind, overflow, rounding, wr, xr):
    rng = np.random.default_rng(11)
    _, fpp, lo, hi = TYPES[kind]
    xs = (3, 2, 4, 3)                                        # [W, H, C, batch] flattened
    w_raw = _raw(rng, kind, (24, 6), *wr)
    b_raw = _raw(rng, kind, (6,), -1000 if fpp else None, 1000 if fpp else None)
    x_raw = _raw(rng, kind, xs, *(xr or (None, None)))
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x, w, b = _tensor(ctx, xs, kind), _tensor(ctx, (24, 6), kind, w_raw), _tensor(
            ctx, (6,), kind, b_raw)
        y = _tensor(ctx, (6, 3), kind)
        node = vx.fully_connected_layer(g, x, w, b, overflow, rounding, y)
        got = _run(g, x, x_raw, y)
        assert node.where == "CPU"
    total = ref.fully_connected(x_raw, w_raw, b_raw.astype(np.float64) * 2 ** fpp)
    np.testing.assert_array_equal(got, policy(total, fpp, lo, hi, overflow, rounding))
    if overflow == SAT:
        _spread(got, lo, hi)


def test_chained_layers_see_the_policies_of_the_one_before(device):
    """A virtual tensor between two fixed-point layers holds the first one's saturated,
    rounded values (the second sums those, not the first's raw sum)."""
    rng = np.random.default_rng(3)
    w1, w2 = rng.integers(-40, 41, (3, 3, 2, 4)), rng.integers(-40, 41, (1, 1, 4, 2))
    x_raw = rng.integers(-32768, 32768, (6, 6, 2, 1))
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x = _tensor(ctx, (6, 6, 2, 1), "Q78")
        mid = g.virtual_tensor((4, 4, 4, 1), vx.Type.INT16, 8)
        y = _tensor(ctx, (4, 4, 2, 1), "Q78")
        p = vx.ConvolutionParams(overflow_policy=SAT, rounding_policy=ZERO)
        vx.convolution_layer(g, x, _tensor(ctx, w1.shape, "Q78", w1), None, p, mid)
        vx.convolution_layer(g, mid, _tensor(ctx, w2.shape, "Q78", w2), None, p, y)
        got = _run(g, x, x_raw, y)
    m = policy(ref.convolution(x_raw, w1, None), 8, -32768, 32767, SAT, ZERO)
    want = policy(ref.convolution(m, w2, None), 8, -32768, 32767, SAT, ZERO)
    np.testing.assert_array_equal(got, want)


# -- the FP16 bound (firmware_spec/fixed_point.md) -----------------------------------------

def _bound_graph(ctx, kind, w_raw, declared, overflow=SAT, consumer=False):
    typ, fpp, _, _ = TYPES[kind]
    g = ctx.graph()
    x = _tensor(ctx, (8, 8, 2, 1), kind)
    x.set_value_range(*declared)
    w = _tensor(ctx, w_raw.shape, kind, w_raw)
    y = _tensor(ctx, (6, 6, w_raw.shape[3], 1), kind)
    dst = g.virtual_tensor(y.dims, typ, fpp) if consumer else y
    p = vx.ConvolutionParams(overflow_policy=overflow, rounding_policy=EVEN)
    node = vx.convolution_layer(g, x, w, None, p, dst)
    if consumer:                                  # a 1x1 identity conv reads it
        eye = np.zeros((1, 1) + (w_raw.shape[3],) * 2, np.int64)
        eye[0, 0] = np.eye(w_raw.shape[3], dtype=np.int64) * (2 ** fpp if fpp else 1)
        vx.convolution_layer(g, dst, _tensor(ctx, eye.shape, kind, eye), None, p, y)
    return g, x, y, node


@pytest.mark.parametrize("consumer", [False, True])
def test_u8_bound_inside_runs_on_the_dv700_exactly(device, consumer):
    """All-ones 3x3x2 weights: |sum| <= 18 * 113 = 2034 <= 2048 -> the DV700; every input
    at the top of the declared range reaches the bound, and SATURATE still applies."""
    w_raw = np.ones((3, 3, 2, 2), np.int64)
    x_raw = np.random.default_rng(5).integers(0, 114, (8, 8, 2, 1))
    x_raw[:3, :3] = 113
    with vx.Context(device) as ctx:
        g, x, y, node = _bound_graph(ctx, "U8", w_raw, (0, 113), consumer=consumer)
        got = _run(g, x, x_raw, y)
        assert node.where == "DV700" if not consumer else "DV700" in node.where
        assert re.search(r"\|partial sums\| <= 2034 <= 2048", g.report())
    total = ref.convolution(x_raw, w_raw, None)
    assert total.max() == 2034
    np.testing.assert_array_equal(got, policy(total, 0, 0, 255, SAT, EVEN))


def test_u8_bound_just_outside_runs_on_the_cpu(device):
    """114 -> 18 * 114 = 2052 > 2048: the CPU, with the bound in the report."""
    w_raw = np.ones((3, 3, 2, 2), np.int64)
    x_raw = np.full((8, 8, 2, 1), 114)
    with vx.Context(device) as ctx:
        g, x, y, node = _bound_graph(ctx, "U8", w_raw, (0, 114), overflow=WRAP)
        got = _run(g, x, x_raw, y)
        assert node.where == "CPU"
        assert "U8 WRAP: FP16 sum not provably exact: |sum| bound 2.1e+03 > 2048" in \
            g.report()
    np.testing.assert_array_equal(got, policy(ref.convolution(x_raw, w_raw, None), 0, 0,
                                              255, WRAP, EVEN))


def test_q78_bound_both_sides(device):
    """Q7.8 weights of raw +-1..3 (18 taps) and inputs |x| <= 128/256: the products' step is
    2^-16; S = sum |w| * 128 decides."""
    w_raw = np.random.default_rng(8).choice([-3, -2, -1, 1, 2, 3], (3, 3, 2, 3))
    s_unit = int(np.abs(w_raw).reshape(-1, 3).sum(axis=0).max())
    inside = 2048 // s_unit                     # largest raw input bound inside
    x_raw = np.random.default_rng(9).integers(-inside, inside + 1, (8, 8, 2, 1))
    for top, where in ((inside, "DV700"), (inside + 1, "CPU")):
        with vx.Context(device) as ctx:
            g, x, y, node = _bound_graph(ctx, "Q78", w_raw, (-top / 256, top / 256))
            got = _run(g, x, x_raw, y)
            assert node.where == where, g.report()
        want = policy(ref.convolution(x_raw, w_raw, None), 8, -32768, 32767, SAT, EVEN)
        np.testing.assert_array_equal(got, want)


def test_the_fp16_path_is_not_exact_beyond_the_bound(device):
    """Why the bound matters: forced onto the DV700 (target DV700), a U8 WRAP sum of 2049
    and up comes back rounded to FP16 (2049 -> 2048) and wraps to the wrong byte."""
    w_raw = np.ones((3, 3, 2, 2), np.int64)
    x_raw = np.full((8, 8, 2, 1), 120)
    x_raw[0, 0, 0, 0] = 121                           # a sum of 2161: odd, above 2048
    with vx.Context(device) as ctx:
        g, x, y, node = _bound_graph(ctx, "U8", w_raw, (0, 255), overflow=WRAP)
        node.set_target(vx.Target.DV700)
        got = _run(g, x, x_raw, y)
        assert node.where == "DV700" and "no exactness bound" in g.report()
    want = policy(ref.convolution(x_raw, w_raw, None), 0, 0, 255, WRAP, EVEN)
    assert (got != want).any()


# -- the kernel's rounding on its own, and the document -------------------------------------

def test_kernel_rounding_ties(device):
    """requantize: x.5 steps go to the even neighbour (TO_NEAREST_EVEN) or toward zero."""
    acc = np.array([-3, -2, -1, 1, 2, 3, 5, 6], np.float64) / 2 ** 9      # halves of 2^-8
    attrs = {"kind": "requantize", "acc_fpp": 9, "out_fpp": 8, "out_dtype": "int16",
             "overflow": "saturate", "vx_output_shape": [8]}
    even = fixed_point([acc.astype(np.float32)], {**attrs, "rounding": "to_nearest_even"})[0]
    zero = fixed_point([acc.astype(np.float32)], {**attrs, "rounding": "to_zero"})[0]
    np.testing.assert_array_equal(even * 256, [-2, -1, 0, 0, 1, 2, 2, 3])
    np.testing.assert_array_equal(zero * 256, [-1, -1, 0, 0, 1, 1, 2, 3])


def test_fixed_point_md_states_the_constant_the_code_uses():
    text = (ROOT / "firmware_spec" / "fixed_point.md").read_text()
    from dvsdk.vx import exact

    assert f"{exact.FP16_EXACT}" in text and "dvsdk/vx/exact.py" in text


@pytest.mark.parametrize("key,value", [("overflow", "clamp"), ("out_fpp", 40),
                                       ("kind", "conv3d"), ("vx_strides", [0, 1])])
def test_a_malformed_fixed_point_step_in_a_net_bin_is_refused(device, tmp_path, key, value):
    """graph.export writes the VxFixedPoint step; its attributes are checked on load."""
    from dvsdk.errors import NetFileError
    from dvsdk.netfile import read, write

    rng = np.random.default_rng(12)
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x = _tensor(ctx, (5, 5, 2, 1), "Q78")
        y = _tensor(ctx, (3, 3, 2, 1), "Q78")
        w = rng.integers(-999, 999, (3, 3, 2, 2))
        vx.convolution_layer(g, x, _tensor(ctx, w.shape, "Q78", w), None,
                             vx.ConvolutionParams(), y)
        g.export(tmp_path / "fx.bin", golden=False)
    nf = read(tmp_path / "fx.bin")
    (step,) = [s for s in nf.meta["program"] if s.get("op") == "VxFixedPoint"]
    step["attrs"][key] = value
    write(nf, tmp_path / "bad.bin")
    with pytest.raises(NetFileError) as e:
        dvsdk.load(tmp_path / "bad.bin", device)
    assert key in str(e.value)


def test_input_from_a_kernel_without_policies_goes_to_the_cpu(device):
    """The bound assumes inputs on the type's grid; an AVG pool's output inside the graph is
    not rounded (README), so the layer reading it runs on the CPU, which rounds it first."""
    rng = np.random.default_rng(13)
    x_raw = rng.integers(0, 101, (8, 8, 1, 1))
    w_raw = np.ones((3, 3, 1, 1), np.int64)
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x = _tensor(ctx, (8, 8, 1, 1), "U8")
        x.set_value_range(0, 100)
        pooled = g.virtual_tensor((4, 4, 1, 1), vx.Type.UINT8)
        vx.pooling_layer(g, x, vx.PoolingType.AVG, 2, 2, 0, 0, vx.RoundingType.FLOOR, pooled)
        y = _tensor(ctx, (2, 2, 1, 1), "U8")
        node = vx.convolution_layer(g, pooled, _tensor(ctx, w_raw.shape, "U8", w_raw), None,
                                    vx.ConvolutionParams(rounding_policy=EVEN), y)
        got = _run(g, x, x_raw, y)
        assert node.where == "CPU"
        assert "input written by pooling_layer" in node.placement[0]["detail"]
    avg = x_raw.reshape(4, 2, 4, 2, 1, 1).astype(np.float64).mean(axis=(1, 3))
    p = np.rint(avg)                                  # the CPU layer's input, on U8's grid
    want = policy(ref.convolution(p, w_raw, None), 0, 0, 255, SAT, EVEN)
    np.testing.assert_array_equal(got, want)
