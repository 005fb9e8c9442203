"""One run of the conv engine as a prepared step: the fast path of ``conv_unit._run``.

``conv_unit._run`` is the reference: it decodes the run's fields on every call and goes
through :mod:`.ops` stage by stage (conv, bias, element-wise add, pool, activation,
rounding; §4.1).  :func:`make_step` decodes the fields once per configuration image and,
where the compiled loops (:mod:`dvsdk.native`) exist, fuses the stages after the
convolution into one pass over the output (``epilogue``) or into the depthwise loop
itself.  The operations and their order stay those of the reference, so the results are
the same bits; the tests run both on random configurations.

What is fused: the conv stage of plain, pointwise and depthwise convolutions (not
deconvolution, LRN or pooling-only runs, which take the reference path), with the
activations the compiled loops have (none, leaky ReLU, PReLU, ReLU6) and no rectify.
Around a max-pool or upsample only the bias and addend are fused (the pool comes
between them and the activation).  The matrix products are numpy's, called exactly as
:func:`.ops.conv2d` calls them (BLAS sums in its own order: same call, same bits).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .. import native
from ..hw.fp16 import fp16_value
from ..hw.spec import SPEC
from . import ops

POOL = SPEC.enum("pool_enable")
#: activation codes the compiled epilogue applies (ops.activation's numbering)
FUSED_ACTS = (ops.ACT_NONE, ops.ACT_LEAKY_RELU, ops.ACT_PRELU, ops.ACT_RELU6)

Step = Callable[[np.ndarray, tuple | None, np.ndarray | None], np.ndarray]


def _xy(word: int) -> tuple[int, int]:
    return word & 0xFF, (word >> 8) & 0xFF


def _pads(word: int, mask_a: int) -> tuple[int, int, int, int]:
    return word & mask_a, (word >> 8) & 0xFF, (word >> 16) & mask_a, (word >> 24) & 0xFF


def make_step(run: dict, reference: Callable[..., np.ndarray]) -> Step:
    """The step for ``run``: ``step(x, weights, addend) -> y`` with the bits of
    ``reference(run, x, weights, addend)`` (``conv_unit._run``), which it returns itself
    where nothing is fused or the compiled loops are off."""
    ce, pe = run["conv_enable"], run["pool_enable"]
    if native.NATIVE is None or run["lrn"] & 1 or not ce or ce & 4:
        return partial(reference, run)
    kx, ky = _xy(run["p"])
    stride = _xy(run["conv_stride"])
    pl, pr, pt, pb = _pads(run["conv_pad"], 0x7F)
    dil = tuple(max(1, d) for d in _xy(run["conv_dilation"]))
    act, param = run["actfunc"], fp16_value(run["actfunc_param"])
    rect = bool(run["rectifi_en"])
    pooled = pe in (POOL.max, POOL.upsample)
    fuse_act = act in FUSED_ACTS and not rect and not pooled
    depthwise = bool(ce & 2)
    pointwise = not depthwise and kx == ky == 1 and stride == (1, 1) and not (
        pl or pr or pt or pb)

    def tail(t: np.ndarray, wb: tuple, addend: np.ndarray | None, biased: bool
             ) -> np.ndarray:
        """Everything after the conv stage, ``t`` (owned, contiguous (OH, OW, M))."""
        bias, prelu = wb[1], wb[2]
        m = t.shape[2]
        if fuse_act:
            native.NATIVE.epilogue(t.reshape(-1, m), None if biased else bias, addend,
                                   act, param, prelu)
            return t
        if not biased or addend is not None:
            native.NATIVE.epilogue(t.reshape(-1, m), None if biased else bias, addend, -1,
                                   0.0, None)
        if pe == POOL.max:
            t = ops.max_pool(t, _xy(run["pool_size"]), _xy(run["pool_stride"]),
                             _pads(run["pool_pad"], 0xFF))
        elif pe == POOL.upsample:
            t = ops.upsample2x(t)
        return ops.finish(t, act, param, prelu, rect, owned=True)

    if depthwise:
        def step(x: np.ndarray, wb: tuple, addend: np.ndarray | None) -> np.ndarray:
            wts, bias, prelu, _, derived = wb
            if wts.shape[0] != x.shape[2] or wts.shape[1] != 1:
                return reference(run, x, wb, addend)  # its error
            taps = derived.get("taps")
            if taps is None:
                taps = derived["taps"] = np.ascontiguousarray(wts[:, 0].transpose(1, 2, 0))
            h, w, c = x.shape
            oh = ops.conv_out_size(h, (ky - 1) * dil[1] + 1, pt, pb, stride[1], "height")
            ow = ops.conv_out_size(w, (kx - 1) * dil[0] + 1, pl, pr, stride[0], "width")
            out = np.empty((oh, ow, c), np.float32)
            direct = fuse_act and addend is None
            native.NATIVE.depthwise(np.ascontiguousarray(x, np.float32), taps, bias, out,
                                    stride[0], stride[1], dil[0], dil[1], pl, pt,
                                    act if direct else -1, param if direct else 0.0,
                                    prelu if direct else None)
            return out if direct else tail(out, wb, addend, True)
    elif pointwise:
        def step(x: np.ndarray, wb: tuple, addend: np.ndarray | None) -> np.ndarray:
            wts, derived = wb[0], wb[4]
            if wts.shape[1] != x.shape[2]:
                return reference(run, x, wb, addend)  # its error
            wmat = derived.get("wmat")
            if wmat is None:
                m, c = wts.shape[:2]
                wmat = derived["wmat"] = np.ascontiguousarray(wts.reshape(m, c).T)
            h, w, c = x.shape
            out = np.matmul(np.asarray(x, np.float32).reshape(-1, c), wmat)
            return tail(out.reshape(h, w, -1), wb, addend, False)
    else:
        def step(x: np.ndarray, wb: tuple, addend: np.ndarray | None) -> np.ndarray:
            if wb[0].shape[1] != x.shape[2]:
                return reference(run, x, wb, addend)  # its error
            out = _correlate(np.asarray(x, np.float32), wb, (kx, ky), stride,
                             (pl, pr, pt, pb), dil)
            return tail(out, wb, addend, False)
    return step


def _correlate(x: np.ndarray, wb: tuple, k: tuple[int, int], stride: tuple[int, int],
               pads: tuple[int, int, int, int], dil: tuple[int, ...]) -> np.ndarray:
    """The conv stage of :func:`.ops.conv2d` (general case) without its bias: the same
    im2col blocks and matrix products, so the same sums."""
    w, derived = wb[0], wb[4]
    (kx, ky), (sx, sy), (pl, pr, pt, pb), (dx, dy) = k, stride, pads, dil
    h_in, w_in, c = x.shape
    m = w.shape[0]
    kex, key = (kx - 1) * dx + 1, (ky - 1) * dy + 1
    ow = ops.conv_out_size(w_in, kex, pl, pr, sx, "width")
    oh = ops.conv_out_size(h_in, key, pt, pb, sy, "height")
    xp = np.pad(x, ((pt, pb), (pl, pr), (0, 0))) if pl or pr or pt or pb else x
    win = sliding_window_view(xp, (key, kex), axis=(0, 1))
    win = win[: (oh - 1) * sy + 1: sy, : (ow - 1) * sx + 1: sx, :, ::dy, ::dx]
    win = win.transpose(0, 1, 3, 4, 2)
    kdim = ky * kx * c
    wmat = derived.get("wmat")
    if wmat is None:
        wmat = derived["wmat"] = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(kdim, m))
    out = np.empty((oh, ow, m), np.float32)
    rows_per_block = max(1, ops._IM2COL_BUDGET // max(1, ow * kdim * 4))
    for r in range(0, oh, rows_per_block):
        blk = win[r:r + rows_per_block]
        n = blk.shape[0] * ow
        np.matmul(blk.reshape(n, kdim), wmat, out=out[r:r + rows_per_block].reshape(n, m))
    return out
