"""The Khronos OpenVX conformance tests of the NN extension, as data: case lists, seeds,
random data and reference functions, written in our own Python from the facts of
``test_conformance/test_tensor_nn.c`` and ``test_tensor_util.h`` (KhronosGroup/OpenVX-cts,
branch openvx_1.3, read for facts only), plus the extension's text (``formats.md`` §2.6,
seed S0) where the two disagree.

Facts used:

* Each case's seed is the 64-bit FNV-1a hash of its test name
  ``TensorNN.<Test>/<index>/<arg name>``; the generator is the multiply-with-carry step
  ``s = (s mod 2**32) * 4164903690 + (s >> 32)`` and ``next_int(a, b) = (s mod 2**32) %
  (b - a) + a`` (``test_engine/test_utils.h``); one iteration per case.
* Tensor sizes are drawn in 1..20; convolution and pooling draw input size and stride per
  axis, deconvolution the upscale then the input size (:func:`conv_pool_params`,
  :func:`deconv_params`).  Sums of products get "small" data: values up to
  ``max / sqrt(number of products)``; biases and the rest the full range.
* Results pass when every raw value is within 8 of the reference (``TOL``).

Arrays are OpenVX-ordered: ``a[x, y, c, n]`` for a tensor of dims ``[x, y, c, n]`` (the
CTS's flat buffers, dimension 0 fastest).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

TOL = 8            # the CTS's max_raw_int_diff
MAX_DIM = 20
_A = 4164903690
_M32 = 0xFFFFFFFF

#: raw ranges and numpy types of the three CTS formats (and FP16, our own cases)
FORMATS = {"U8": (np.uint8, 0, 255, 0), "S8": (np.int8, -128, 127, 0),
           "Q78": (np.int16, -32768, 32767, 8)}


def fnv1a(text: str) -> int:
    h = 0xCBF29CE484222325
    for ch in text.encode():
        h = ((h ^ ch) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


class Rng:
    """The CTS generator (CT_RNG_INIT / CT_RNG_NEXT_INT)."""

    def __init__(self, seed: int) -> None:
        self.s = seed if seed else 0xFFFFFFFFFFFFFFFF

    def next_int(self, a: int, b: int) -> int:
        self.s = (self.s & _M32) * _A + (self.s >> 32)
        return (self.s & _M32) % (b - a) + a

    def ints(self, n: int, a: int, b: int) -> np.ndarray:
        """``n`` draws of next_int(a, b) (a tight loop: the sequence is serial)."""
        s, m, out = self.s, b - a, [0] * n
        for i in range(n):
            s = (s & _M32) * _A + (s >> 32)
            out[i] = s & _M32
        self.s = s
        return np.asarray(out, np.int64) % m + a if n else np.zeros(0, np.int64)


def fill(rng: Rng, fmt: str, dims: tuple[int, ...], prods: int | None = None) -> np.ndarray:
    """ownFillRandData (``prods`` None) or ownFillSmallRandData, as an OpenVX array."""
    _, lo, hi, _ = FORMATS[fmt]
    if prods is not None:
        r = math.sqrt(prods)
        if fmt == "U8":
            lo, hi = 0, int(255 / r) & 0xFF
        else:
            lo, hi = int(lo / r), int(hi / r)
    n = math.prod(dims)
    return rng.ints(n, lo, hi + 1).reshape(dims[::-1]).T.copy()


def wrap_sat(v: np.ndarray, fmt: str, wrap: bool) -> np.ndarray:
    dt, lo, hi, _ = FORMATS[fmt]
    v = np.asarray(v, np.int64)
    return v.astype(dt).astype(np.int64) if wrap else np.clip(v, lo, hi)


def cts_wrap_sat(v: np.ndarray, fmt: str, wrap: bool) -> np.ndarray:
    """ownWrapOrSat as written: S8 WRAP truncates to 16 bits (a CTS slip)."""
    if fmt == "S8" and wrap:
        return np.asarray(v, np.int64).astype(np.int16).astype(np.int64)
    return wrap_sat(v, fmt, wrap)


def round_shift(acc: np.ndarray, bits: int, to_ne: bool) -> np.ndarray:
    """An exact integer ``acc / 2**bits`` rounded to zero or to nearest even."""
    acc = np.asarray(acc, np.int64)
    if not bits:
        return acc
    if not to_ne:
        q = np.abs(acc) >> bits
        return np.where(acc < 0, -q, q)
    return np.rint(acc / float(1 << bits)).astype(np.int64)   # exact: |acc| < 2**52


# -- case lists ---------------------------------------------------------------------------------

@dataclass
class Case:
    test: str              # CTS test name without the "test" prefix
    index: int             # the ARG's index in the CTS list (-1: our own case)
    name: str
    fmt: str
    p: dict = field(default_factory=dict)

    @property
    def full(self) -> str:
        return f"TensorNN.{self.test}/{self.index}/{self.name}"

    @property
    def id(self) -> str:
        return f"{self.test}/{self.index}/{self.name}"

    @property
    def seed(self) -> int:
        return fnv1a(self.full)


_CONV_SIZES = ((11, 11, 0, 0), (6, 6, 0, 0), (5, 5, 0, 0), (3, 3, 0, 0), (3, 4, 1, 2))
_BIAS = ("NOBIAS", "SHAREDBIAS", "PERLOCBIAS")


def conv_cases(test: str, fmts: tuple[str, ...] = ("U8",), sizes=_CONV_SIZES,
               start: int = 0) -> list[Case]:
    """TT_CONVOLUTION_CASES_ALL / TT_DECONVOLUTION_CASES_ALL, in the CTS's order (the two
    lists differ by FLOOR/CEIL for convolution, the a_x/a_y values being the same)."""
    out = []
    conv = test == "ConvolutionLayer"
    for fmt in fmts:
        for kx, ky, px, py in sizes:
            for of in ("WRAP", "SAT"):
                for rnd in ("ZERO", "NE"):
                    for ds in (("FLOOR", "CEIL") if conv else ("",)):
                        for dx, dy in ((0, 0), (0, 1), (1, 0)):
                            for batch in (0, 1):
                                for bias in range(3):
                                    head = f"{fmt}_{of}_{rnd}" + (f"_{ds}" if conv else "")
                                    head += "_BATCH" if batch else ""
                                    tail = (f"_SZ_X{kx}_Y{ky}_PAD_X{px}_Y{py}_"
                                            + ("DILATION" if conv else "A")
                                            + f"_X{dx}_Y{dy}")
                                    out.append(Case(test, start + len(out),
                                                    f"{head}_{_BIAS[bias]}{tail}", fmt, dict(
                                        k=(kx, ky), pad=(px, py), wrap=of == "WRAP",
                                        ne=rnd == "NE", ceil=ds == "CEIL", d=(dx, dy),
                                        batch=batch, bias=bias)))
    return out


def fc_cases(fmts=("U8",)) -> list[Case]:
    out = []
    for fmt in fmts:
        for of in ("WRAP", "SAT"):
            for rnd in ("ZERO", "NE"):
                for core, wd, batch in ((1, 2, 0), (1, 2, 1), (1, 2, 2), (1, 2, 3),
                                        (3, 2, 0), (3, 2, 1), (3, 4, 0), (3, 4, 1)):
                    for bias in (0, 1):
                        name = (f"{fmt}_{of}_{rnd}_{'BIAS' if bias else 'NOBIAS'}_COREDIMS_"
                                f"{core}_WEIGHTDIMS_{wd}_BATCHDIMS_{batch}")
                        out.append(Case("FullyConnectedLayer", len(out), name, fmt, dict(
                            wrap=of == "WRAP", ne=rnd == "NE", core=core, wdim=wd,
                            batch=batch, bias=bias)))
    return out


def pool_cases(fmts=("U8",)) -> list[Case]:
    out = []
    for fmt in fmts:
        rows = [("MAX", "FLOOR", 3, 3, 0, 0)]
        for kind in ("MAX", "AVG"):
            for rnd in ("FLOOR", "CEILING"):
                rows.append((kind, rnd, 3, 4, 1, 2))
        for kind, rnd, sx, sy, px, py in rows:
            for batch in (0, 1):
                name = (f"{fmt}_SIZE_X{sx}_Y{sy}_PAD_X{px}_Y{py}_{kind}"
                        + ("_BATCH" if batch else ""))
                out.append(Case("PoolingLayer", len(out), name, fmt, dict(
                    max=kind == "MAX", ceil=rnd == "CEILING", size=(sx, sy), pad=(px, py),
                    batch=batch)))
    return out


def softmax_cases(fmts=("U8",)) -> list[Case]:
    return [Case("SoftmaxLayer", i, f"{fmt}_DIMS{d}", fmt, dict(dims=d))
            for i, (fmt, d) in enumerate((f, d) for f in fmts for d in (1, 2, 3, 4))]


def activation_cases(fmts=("U8",)) -> list[Case]:
    out = []
    for fmt in fmts:
        for d in (1, 2, 3, 4):
            for fn, suffix, a, b in (("LOGISTIC", "", 0, 0), ("HYPERBOLIC_TAN", "_A1_B1", 1, 1),
                                     ("HYPERBOLIC_TAN", "_A2_B2", 2, 2), ("RELU", "", 0, 0)):
                out.append(Case("ActivationLayer", len(out), f"{fmt}_DIMS{d}_{fn}{suffix}",
                                fmt, dict(dims=d, fn=fn, a=a, b=b)))
    return out


def roi_cases() -> list[Case]:
    rows = (("Q78", "Q78", False), ("U8", "U8", False), ("S8", "S8", False),
            ("Q78_Bathcing", "Q78", True), ("U8_Batching", "U8", True),
            ("S8_Batching", "S8", True))
    return [Case("ROIPoolingLayer", i, n, f, dict(batch=b)) for i, (n, f, b) in enumerate(rows)]


def all_cts_cases() -> list[Case]:
    """Every case the CTS runs (its lists instantiate U8 only, ROI pooling all three)."""
    return (conv_cases("ConvolutionLayer") + fc_cases() + pool_cases() + softmax_cases()
            + activation_cases() + roi_cases() + conv_cases("DeconvolutionLayer"))


# -- random shapes and data ----------------------------------------------------------------------

def conv_pool_params(rng: Rng, pad: int, k: int, d: int, ceil: bool) -> tuple[int, int, int]:
    """ownGetConvPoolRandParams: (input size, stride, output size)."""
    min_in = max(k + (k - 1) * d - 2 * pad, 1)
    size = rng.next_int(min_in, min(min_in, MAX_DIM) + 5)
    cand = rng.next_int(1, 4)
    num = size + 2 * pad - (k + (k - 1) * d)
    out = (num + (cand - 1 if ceil else 0)) // cand + 1
    t = cand
    while t > 1 and (num + (t - 2 if ceil else 0)) // (t - 1) + 1 == out:
        t -= 1
    return size, t, out


def deconv_params(rng: Rng, pad: int, k: int, a: int) -> tuple[int, int, int]:
    """ownGetDeconvRandParams: (input size, upscale, output size)."""
    up = rng.next_int(a + 1, a + 3)
    tmp = int((2 * pad - k - a + (up - 1)) / up)          # C division: toward zero
    min_in = 2 + max(tmp, 0)
    size = rng.next_int(min_in, min(min_in, MAX_DIM) + 5)
    return size, up, (size - 1) * up + k + a - 2 * pad


def _dim(rng: Rng) -> int:
    return rng.next_int(1, MAX_DIM + 1)


def gen_conv(c: Case) -> dict[str, Any]:
    """The tensors of a convolution or deconvolution case, drawn as the CTS draws them."""
    rng, p = Rng(c.seed), c.p
    conv = c.test == "ConvolutionLayer"
    geo = []
    for ax in (0, 1):
        if conv:
            geo.append(conv_pool_params(rng, p["pad"][ax], p["k"][ax], p["d"][ax], p["ceil"]))
        else:
            geo.append(deconv_params(rng, p["pad"][ax], p["k"][ax], p["d"][ax]))
    xd = [geo[0][0], geo[1][0]] + [_dim(rng) for _ in range(1 + p["batch"])]
    yd = [geo[0][2], geo[1][2], _dim(rng)] + xd[3:]
    wd = [p["k"][0], p["k"][1], xd[2], yd[2]]
    bd = [[], [yd[2]], yd[:3]][p["bias"]]
    prods = p["k"][0] * p["k"][1] * xd[2]
    x = fill(rng, c.fmt, tuple(xd), prods)
    w = fill(rng, c.fmt, tuple(wd), prods)
    b = fill(rng, c.fmt, tuple(bd)) if bd else None
    return dict(x=x, w=w, b=b, y_dims=tuple(yd), step=(geo[0][1], geo[1][1]))


def gen_fc(c: Case) -> dict[str, Any]:
    rng, p = Rng(c.seed), c.p
    xd = [_dim(rng) for _ in range(p["core"] + p["batch"])]
    yd = [_dim(rng)] + xd[p["core"]:]
    if p["core"] == 1:
        wd = [xd[0], yd[0]]
    elif p["wdim"] == 2:
        wd = [xd[0] * xd[1] * xd[2], yd[0]]
    else:
        wd = xd[:3] + [yd[0]]
    prods = math.prod(wd[:-1])
    x = fill(rng, c.fmt, tuple(xd), prods)
    # the CTS fills only "bias_count" weights (weight_count = bias_bytes / sizeof, a slip):
    # the first #OFM weights in memory order when there is a bias, none otherwise, and
    # leaves the rest as malloc left them.  We draw those first ones as it does, then the
    # bias, then the rest from the same generator and range (our stand-in for the
    # uninitialised memory, which makes the product sums real tests)
    n_all = math.prod(wd)
    nw = yd[0] if p["bias"] else 0
    flat = np.zeros(n_all, np.int64)
    if nw:
        flat[:nw] = fill(rng, c.fmt, (nw,), prods)
    b = fill(rng, c.fmt, (yd[0],)) if p["bias"] else None
    flat[nw:] = fill(rng, c.fmt, (n_all - nw,), prods)
    w = flat.reshape(wd[::-1]).T.copy()
    return dict(x=x, w=w, b=b, y_dims=tuple(yd))


def gen_pool(c: Case) -> dict[str, Any]:
    rng, p = Rng(c.seed), c.p
    geo = [conv_pool_params(rng, p["pad"][ax], p["size"][ax], 0, p["ceil"]) for ax in (0, 1)]
    ch = _dim(rng)
    nb = _dim(rng) if p["batch"] else 0
    xd = [geo[0][0], geo[1][0], ch] + ([nb] if p["batch"] else [])
    yd = [geo[0][2], geo[1][2], ch] + ([nb] if p["batch"] else [])
    return dict(x=fill(rng, c.fmt, tuple(xd)), y_dims=tuple(yd),
                step=(geo[0][1], geo[1][1]))


def gen_same(c: Case) -> dict[str, Any]:
    """Softmax and activation: dims then full-range data."""
    rng = Rng(c.seed)
    dims = tuple(_dim(rng) for _ in range(c.p["dims"]))
    return dict(x=fill(rng, c.fmt, dims), y_dims=dims)


def gen_roi(c: Case) -> dict[str, Any]:
    rng = Rng(c.seed)
    nd = 4 if c.p["batch"] else 3
    dd = [_dim(rng) for _ in range(nd)]
    count = _dim(rng)
    rd = [4, count] + dd[3:]
    yd = dd[:3] + [count] + dd[3:]
    data = fill(rng, c.fmt, tuple(dd))
    lo = 0 if c.fmt == "U8" else -2
    # the CTS writes only the first batch's ROIs ([4, count] values); the rest stay zero
    flat = np.zeros(math.prod(rd), np.int64)
    for i in range(count):
        for j in range(4):
            flat[4 * i + j] = rng.next_int(lo, dd[j % 2] + 2)
    return dict(x=data, rois=flat.reshape(rd[::-1]).T.copy(), y_dims=tuple(yd))


GEN = {"ConvolutionLayer": gen_conv, "DeconvolutionLayer": gen_conv,
       "FullyConnectedLayer": gen_fc, "PoolingLayer": gen_pool, "SoftmaxLayer": gen_same,
       "ActivationLayer": gen_same, "ROIPoolingLayer": gen_roi}


def _harden(c: Case, d: dict[str, Any]) -> dict[str, Any]:
    """Our harder U8 data for the CTS's shapes: full-range inputs and 0/1 weights, about
    1.2 in ``products`` set, so sums spread over 0..~400 and a saturated (or wrapped)
    result spans the type instead of sitting at 255; ``big`` cases take weights 0..15, sums
    beyond FP16's exact integers (2048), wrapped to 8 bits."""
    g = np.random.default_rng(c.seed & 0xFFFFFFFF)
    w = d["w"]
    prods = math.prod(w.shape[:-1])
    d["x"] = g.integers(0, 256, d["x"].shape).astype(np.int64)
    d["w"] = (g.random(w.shape) < 1.2 / prods).astype(np.int64)
    if c.p.get("big"):       # sums of thousands and more: WRAP keeps their low 8 bits
        d["w"] = g.integers(0, 16, w.shape).astype(np.int64)
    if d["b"] is not None:
        d["b"] = g.integers(0, 32, d["b"].shape).astype(np.int64)
    return d


def gen_any(c: Case) -> dict[str, Any]:
    if c.p.get("f16"):
        return _to_f16(GEN_CTS[c.test](Case(c.test, c.index, c.name, "U8", c.p)))
    d = GEN_CTS[c.test](c)
    return _harden(c, d) if c.p.get("hard") else d


def _to_f16(d: dict[str, Any]) -> dict[str, Any]:
    """Our FP16 cases: the U8 draws as real values ``raw / 32 - 4`` (exact in FP16); ROI
    coordinates keep their values."""
    for k in ("x", "w", "b"):
        if d.get(k) is not None:
            d[k] = (d[k] / 32.0 - 4.0).astype(np.float16)
    if "rois" in d:
        d["rois"] = d["rois"].astype(np.float16)
    return d


GEN_CTS = dict(GEN)
GEN = {k: gen_any for k in GEN_CTS}


# -- our own: normalization (the CTS's testNormalizationLayer is commented out) ------------------

def lrn_cases() -> list[Case]:
    """Q7.8 (the type the text requires of it) across maps and on the same map, sizes 3, 5,
    7; data within +-8.0 so the sums of squares matter; and the DV700 LRN unit's own
    parameters (n 5, alpha 1e-4, beta 0.75) on 16 maps with the input's range declared +-50
    (the verifier may then use the unit) and undeclared."""
    out = []
    for same in (False, True):
        for n in (3, 5, 7):
            out.append(Case("NormalizationLayer", 30000 + len(out),
                            f"Q78_{'SAME_MAP' if same else 'ACROSS_MAPS'}_N{n}", "Q78",
                            dict(same=same, n=n, alpha=0.5, beta=0.75, amp=2048)))
    for rng_ in (None, (-50.0, 50.0)):
        p = dict(same=False, n=5, alpha=1e-4, beta=0.75, amp=32767, maps=16)
        if rng_:
            p.update(range=rng_, amp=50 * 256)
        out.append(Case("NormalizationLayer", 30000 + len(out),
                        "Q78_ACROSS_MAPS_N5_HW_PARAMS" + ("_RANGE50" if rng_ else ""), "Q78", p))
    return out


def gen_lrn(c: Case) -> dict[str, Any]:
    rng = Rng(c.seed)
    dims = tuple(rng.next_int(1, MAX_DIM + 1) for _ in range(4))
    if "maps" in c.p:                        # the LRN unit takes #IFM % 16 == 0
        dims = (dims[0], dims[1], c.p["maps"], dims[3])
    amp = c.p["amp"]
    return dict(x=rng.ints(math.prod(dims), -amp, amp + 1).reshape(dims[::-1]).T.copy(),
                y_dims=dims)


GEN_CTS["NormalizationLayer"] = gen_lrn
GEN["NormalizationLayer"] = gen_any
