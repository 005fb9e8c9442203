"""The Khronos OpenVX CTS NN tests (``test_tensor_nn.c``), every case, run on ``dvsdk.vx``.

Each case draws the CTS's own shapes and data (its seeds and generator,
:mod:`vx_cts_cases`), runs the node on the simulator and compares the raw output with the
CTS's tolerance (8 raw units) against the reference the extension's text defines
(:mod:`vx_cts_refs`).  Where the CTS's C reference departs from the text, the case is in
``TEXT_VS_CTS`` with the reason and the spec's words: it checks that dvsdk equals the text's
reference and that the CTS's differs; every other case checks that the two references agree
(so the table is complete).  Cases are run in groups (one graph per group of like cases)
to keep the whole file near a minute.  Our own harder cases (S8 and Q7.8 versions of the
CTS lists, U8 cases whose results span the range, LRN, FP16) follow.
"""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk.vx as vx

from . import vx_cts_refs as R
from .vx_cts_cases import (
    GEN,
    TOL,
    Case,
    activation_cases,
    all_cts_cases,
    conv_cases,
    fc_cases,
    lrn_cases,
    pool_cases,
    roi_cases,
    softmax_cases,
)
from .vx_cts_table import SPEC, TEXT_VS_CTS

VX_TYPE = {"U8": (vx.Type.UINT8, 0), "S8": (vx.Type.INT8, 0), "Q78": (vx.Type.INT16, 8),
           "F16": (vx.Type.FLOAT16, 0)}
POL = {True: vx.ConvertPolicy.WRAP, False: vx.ConvertPolicy.SATURATE}
RND = {True: vx.RoundPolicy.TO_NEAREST_EVEN, False: vx.RoundPolicy.TO_ZERO}


@pytest.fixture(scope="module")
def ctx():
    with vx.Context() as c:
        yield c


# -- building one case's node -------------------------------------------------------------------

_MADE: list = []                      # tensors of the graph being built (released after)


def _tensor(ctx, arr_or_dims, fmt: str):
    t, f = VX_TYPE[fmt]
    dims = arr_or_dims.shape if isinstance(arr_or_dims, np.ndarray) else arr_or_dims
    x = vx.Tensor(ctx, list(dims), t, f)
    if isinstance(arr_or_dims, np.ndarray):
        x.copy_patch(arr_or_dims, vx.Accessor.WRITE_ONLY)
    _MADE.append(x)
    return x


def add_node(ctx, g, c: Case, d: dict):
    """The case's node in graph ``g``; returns its output tensor."""
    p = c.p
    x = _tensor(ctx, d["x"], c.fmt)
    y = _tensor(ctx, d["y_dims"], c.fmt)
    if c.test in ("ConvolutionLayer", "DeconvolutionLayer"):
        w = _tensor(ctx, d["w"], c.fmt)
        b = None if d["b"] is None else _tensor(ctx, d["b"], c.fmt)
        if c.test == "ConvolutionLayer":
            prm = vx.ConvolutionParams(p["pad"][0], p["pad"][1], POL[p["wrap"]], RND[p["ne"]],
                                       vx.RoundingType.CEILING if p["ceil"] else
                                       vx.RoundingType.FLOOR, p["d"][0], p["d"][1])
            vx.convolution_layer(g, x, w, b, prm, y)
        else:
            prm = vx.DeconvolutionParams(p["pad"][0], p["pad"][1], POL[p["wrap"]],
                                         RND[p["ne"]], p["d"][0], p["d"][1])
            vx.deconvolution_layer(g, x, w, b, prm, y)
    elif c.test == "FullyConnectedLayer":
        w = _tensor(ctx, d["w"], c.fmt)
        b = None if d["b"] is None else _tensor(ctx, d["b"], c.fmt)
        vx.fully_connected_layer(g, x, w, b, POL[p["wrap"]], RND[p["ne"]], y)
    elif c.test == "PoolingLayer":
        vx.pooling_layer(g, x, vx.PoolingType.MAX if p["max"] else vx.PoolingType.AVG,
                         *p["size"], *p["pad"], vx.RoundingType.CEILING if p["ceil"] else
                         vx.RoundingType.FLOOR, y)
    elif c.test == "SoftmaxLayer":
        vx.softmax_layer(g, x, y)
    elif c.test == "ActivationLayer":
        vx.activation_layer(g, x, vx.ActivationFunction[p["fn"]], p["a"], p["b"], y)
    elif c.test == "ROIPoolingLayer":
        rois = _tensor(ctx, d["rois"], c.fmt)
        vx.roi_pooling_layer(g, x, rois, vx.RoiPoolParams(), y)
    elif c.test == "NormalizationLayer":
        vx.normalization_layer(g, x, vx.NormType.SAME_MAP if p["same"] else
                               vx.NormType.ACROSS_MAPS, p["n"], p["alpha"], p["beta"], y)
        if "range" in p:
            x.set_value_range(*p["range"])
    return y


def _run(ctx, cases: list[Case]) -> dict[str, object]:
    """Run ``cases`` in one graph; on a verify failure, each alone (the failure is then the
    case's own)."""
    data = {c.id: _DATA.pop(c.id, None) or GEN[c.test](c) for c in cases}
    _DATA.update(data)                   # check() takes each case's own back
    g = ctx.graph()
    outs = {c.id: add_node(ctx, g, c, data[c.id]) for c in cases}
    if g.verify() == vx.Status.SUCCESS and g.process() == vx.Status.SUCCESS:
        res = {k: _values(t.copy_patch()) for k, t in outs.items()}
    elif len(cases) == 1:
        res = {cases[0].id: g.error}
    else:
        res = {}
        for c in cases:
            res.update(_run(ctx, [c]))
    g.release()
    while _MADE:                          # the context's object list stays short
        _MADE.pop().release()
    return res


def _values(a: np.ndarray) -> np.ndarray:
    return a.astype(np.int64) if a.dtype.kind in "iu" else a.astype(np.float64)


_CACHE: dict[str, object] = {}
_DATA: dict[str, dict] = {}           # a group's generated tensors until their checks


def group_key(c: Case) -> tuple:
    p = c.p
    return (c.test, c.fmt, p.get("k"), p.get("wrap"), p.get("ne"), p.get("ceil"),
            p.get("core"), p.get("max"))


def result(ctx, c: Case, pool: list[Case]):
    if c.id not in _CACHE:
        key = group_key(c)
        _CACHE.update(_run(ctx, [o for o in pool if group_key(o) == key
                                 and o.id not in _CACHE]))
    out = _CACHE[c.id]
    if not isinstance(out, np.ndarray):
        pytest.fail(f"{c.id}: dvsdk refused the case: {out}")
    return out


# -- references ------------------------------------------------------------------------------------

def references(c: Case, d: dict) -> tuple[np.ndarray, np.ndarray]:
    """(text's reference, CTS's reference) for a case's data."""
    p, f = c.p, c.fmt
    if c.test == "ConvolutionLayer":
        ix, iy = ([R.conv_taps(d["x"].shape[a], p["pad"][a], p["k"][a], p["d"][a],
                               d["step"][a], d["y_dims"][a], cts) for a in (0, 1)]
                  for cts in (False, True))
        return (R.conv_text(f, d["x"], d["w"], d["b"], *ix, p["wrap"], p["ne"]),
                R.conv_cts(f, d["x"], d["w"], d["b"], *iy, p["wrap"], p["ne"]))
    if c.test == "DeconvolutionLayer":
        ix, iy = ([R.deconv_taps(d["x"].shape[a], p["pad"][a], p["k"][a], d["step"][a],
                               d["y_dims"][a], cts) for a in (0, 1)] for cts in (False, True))
        return (R.conv_text(f, d["x"], d["w"], d["b"], *ix, p["wrap"], p["ne"]),
                R.conv_cts(f, d["x"], d["w"], d["b"], *iy, p["wrap"], p["ne"]))
    if c.test == "FullyConnectedLayer":
        return (R.fc_text(f, d["x"], d["w"], d["b"], p["core"], p["wrap"], p["ne"]),
                R.fc_cts(f, d["x"], d["w"], d["b"], p["core"], p["wrap"], p["ne"]))
    if c.test == "PoolingLayer":
        return tuple(R.pool_ref(f, d["x"], p["max"], p["size"], p["pad"], d["step"],
                                d["y_dims"], cts) for cts in (False, True))
    if c.test == "SoftmaxLayer":
        r = R.softmax_ref(f, d["x"])
        return r, r
    if c.test == "ActivationLayer":
        r = R.activation_ref(f, d["x"], p["fn"], p["a"], p["b"])
        return r, r
    if c.test == "ROIPoolingLayer":
        return tuple(R.roi_ref(f, d["x"], d["rois"], d["y_dims"], cts) for cts in (False, True))
    raise AssertionError(c.test)


def far(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.abs(np.asarray(a, np.int64) - np.asarray(b, np.int64)).max(initial=0))


def data(ctx, c: Case, pool: list[Case]) -> tuple[dict, np.ndarray]:
    """The case's tensors (generated once, with its group's run) and dvsdk's output."""
    out = result(ctx, c, pool)
    return _DATA.pop(c.id, None) or GEN[c.test](c), out


def check(ctx, c: Case, pool: list[Case]) -> None:
    d, out = data(ctx, c, pool)
    text, cts = references(c, d)
    assert out.shape == text.shape
    gap = far(text, cts)
    if c.id in TEXT_VS_CTS:
        assert all(code in SPEC for code in TEXT_VS_CTS[c.id].split("+"))
        assert gap > TOL, f"{c.id}: listed as text-vs-CTS but the references agree"
    else:
        assert gap <= TOL, f"{c.id}: the CTS's reference departs from the text's by {gap}"
    if far(out, text) > TOL:
        pytest.fail(f"{c.id}: dvsdk differs from the text's reference by {far(out, text)} "
                    f"raw units (tolerance {TOL})", pytrace=False)


# -- every CTS case -------------------------------------------------------------------------------

CTS = all_cts_cases()


def _params(cases: list[Case]) -> list:
    return [pytest.param(c, id=c.id) for c in cases]


@pytest.mark.parametrize("case", _params(CTS))
def test_cts_case(ctx, case: Case) -> None:
    check(ctx, case, CTS)


def test_case_lists_match_the_cts() -> None:
    """1,180 cases: 720 convolution, 64 fully connected, 10 pooling, 4 softmax, 16
    activation, 6 ROI pooling, 360 deconvolution; names as the CTS builds them."""
    by = {}
    for c in CTS:
        by[c.test] = by.get(c.test, 0) + 1
    assert by == {"ConvolutionLayer": 720, "FullyConnectedLayer": 64, "PoolingLayer": 10,
                  "SoftmaxLayer": 4, "ActivationLayer": 16, "ROIPoolingLayer": 6,
                  "DeconvolutionLayer": 360}
    assert CTS[0].full == ("TensorNN.ConvolutionLayer/0/U8_WRAP_ZERO_FLOOR_NOBIAS_SZ_X11_Y11"
                           "_PAD_X0_Y0_DILATION_X0_Y0")
    assert CTS[719].name == "U8_SAT_NE_CEIL_BATCH_PERLOCBIAS_SZ_X3_Y4_PAD_X1_Y2_DILATION_X1_Y0"
    assert set(TEXT_VS_CTS) <= {c.id for c in CTS + EXTRA + HARD + LRN}


# -- our own: S8 and Q7.8 versions of the CTS lists (its functions take them) --------------------

def _every(cases: list[Case], n: int) -> list[Case]:
    return cases[::n]


EXTRA = (_every(conv_cases("ConvolutionLayer", ("S8", "Q78"), ((3, 3, 0, 0), (3, 4, 1, 2)),
                           start=10000), 5)
         + _every(conv_cases("DeconvolutionLayer", ("S8", "Q78"), ((3, 3, 0, 0), (3, 4, 1, 2)),
                             start=10000), 5)
         + [Case(c.test, 10000 + c.index, c.name, c.fmt, c.p)
            for c in fc_cases(("S8", "Q78"))[::3] + pool_cases(("S8", "Q78"))
            + softmax_cases(("S8", "Q78")) + activation_cases(("S8", "Q78"))])


@pytest.mark.parametrize("case", _params(EXTRA))
def test_cts_scheme_s8_q78(ctx, case: Case) -> None:
    check(ctx, case, EXTRA)


# -- our own: harder U8 cases whose saturated results span 0..255 ------------------------------

def _hard_cases() -> list[Case]:
    out = []
    for i, (test, k, pad, d, wrap) in enumerate((
            ("ConvolutionLayer", (3, 3), (1, 1), (0, 0), False),
            ("ConvolutionLayer", (5, 5), (0, 0), (1, 1), False),
            ("ConvolutionLayer", (3, 4), (1, 2), (0, 0), True),
            ("DeconvolutionLayer", (3, 3), (0, 0), (1, 1), False),
            ("DeconvolutionLayer", (4, 4), (1, 1), (0, 0), True))):
        out.append(Case(test, 20000 + i, f"U8_HARD_{'WRAP' if wrap else 'SAT'}_{i}", "U8",
                        dict(k=k, pad=pad, wrap=wrap, ne=True, ceil=False, d=d, batch=1,
                             bias=1, hard=True)))
    for i, core in enumerate((1, 3)):
        out.append(Case("FullyConnectedLayer", 20010 + i, f"U8_HARD_SAT_FC{core}", "U8",
                        dict(wrap=False, ne=True, core=core, wdim=2, batch=1, bias=1,
                             hard=True)))
    out.append(Case("ConvolutionLayer", 20020, "U8_HARD_WRAP_BIG_SUMS", "U8",
                    dict(k=(3, 3), pad=(1, 1), wrap=True, ne=True, ceil=False, d=(0, 0),
                         batch=0, bias=1, hard=True, big=True)))
    out.append(Case("FullyConnectedLayer", 20021, "U8_HARD_WRAP_BIG_SUMS_FC", "U8",
                    dict(wrap=True, ne=True, core=1, wdim=2, batch=1, bias=1, hard=True,
                         big=True)))
    return out


HARD = _hard_cases()


@pytest.mark.parametrize("case", _params(HARD))
def test_harder_u8_cases_span_the_range(ctx, case: Case) -> None:
    """The text's reference spans the range (not 255 almost everywhere), and dvsdk gives it."""
    d = GEN[case.test](case)
    text, _ = references(case, d)
    assert len(np.unique(text)) >= min(32, text.size // 2) and (text == 255).mean() < 0.5
    check(ctx, case, HARD)


# -- our own: normalization ---------------------------------------------------------------------

LRN = lrn_cases()


@pytest.mark.parametrize("case", _params(LRN))
def test_normalization_follows_the_text(ctx, case: Case) -> None:
    """``x / (1 + alpha / n * sum x_i^2) ** beta``, n = normalization_size; SAME_MAP sums
    the n x n square and still divides alpha by n (the text's n), which a Caffe-style
    port (alpha / n^2) does not: listed as text-vs-CTS with the spec's words."""
    p = case.p
    d = GEN[case.test](case)
    text = R.lrn_ref(case.fmt, d["x"], p["same"], p["n"], p["alpha"], p["beta"])
    port = R.lrn_ref(case.fmt, d["x"], p["same"], p["n"], p["alpha"], p["beta"],
                     divisor=p["n"] ** 2 if p["same"] else None)
    if case.id in TEXT_VS_CTS:
        assert TEXT_VS_CTS[case.id] == "lrn_same_map" and far(text, port) > TOL
    else:
        assert far(text, port) <= TOL
    out = result(ctx, case, LRN)
    _DATA.pop(case.id, None)
    if far(out, text) > TOL:
        pytest.fail(f"{case.id}: {far(out, text)} raw units from the text", pytrace=False)


# -- our own: FP16 versions (the CTS has no FP16 cases) -------------------------------------------

def _f16_cases() -> list[Case]:
    """The CTS's shapes and U8 draws as FP16 real values ``raw / 32 - 4`` (exact in FP16):
    a fifth of the convolution and deconvolution lists, all of the others."""
    src = (conv_cases("ConvolutionLayer")[::5] + conv_cases("DeconvolutionLayer")[::5]
           + fc_cases() + pool_cases() + softmax_cases() + activation_cases() + roi_cases())
    return [Case(c.test, 40000 + c.index, c.name.replace("U8", "F16", 1), "F16",
                 dict(c.p, f16=True)) for c in src if c.fmt == "U8"]


F16 = _f16_cases()


def f16_reference(c: Case, d: dict) -> np.ndarray:
    p = c.p
    x = d["x"].astype(np.float64)
    if c.test == "ConvolutionLayer":
        ix = [R.conv_taps(x.shape[a], p["pad"][a], p["k"][a], p["d"][a], d["step"][a],
                          d["y_dims"][a], False) for a in (0, 1)]
        return R.gather_real(x, d["w"], d["b"], *ix)
    if c.test == "DeconvolutionLayer":
        ix = [R.deconv_taps(x.shape[a], p["pad"][a], p["k"][a], d["step"][a],
                            d["y_dims"][a], False) for a in (0, 1)]
        return R.gather_real(x, d["w"], d["b"], *ix)
    if c.test == "FullyConnectedLayer":
        return R.fc_real(x, d["w"], d["b"], p["core"])
    if c.test == "PoolingLayer":
        return R.pool_real(x, p["max"], p["size"], p["pad"], d["step"], d["y_dims"])
    if c.test == "SoftmaxLayer":
        return R.softmax_real(x)
    if c.test == "ActivationLayer":
        return R.activation_real(x, p["fn"], p["a"], p["b"])
    return R.roi_ref("U8", x, d["rois"].astype(np.int64), d["y_dims"], False)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id) for c in F16])
def test_fp16_versions(ctx, case: Case) -> None:
    """FP16 results within FP16's rounding of the float64 reference of the text (the
    reference itself rounded to FP16: beyond 65504 it is infinite, as IEEE 754 says): a
    few units in the last place of the largest result."""
    d, got = data(ctx, case, F16)
    want = f16_reference(case, d)
    with np.errstate(over="ignore"):
        want = want.astype(np.float16).astype(np.float64)   # FP16 overflows to +-inf
    finite = np.abs(want[np.isfinite(want)])
    scale = max(1.0, float(finite.max(initial=0.0)))
    np.testing.assert_allclose(got, want, rtol=4e-3, atol=4e-3 * scale)
