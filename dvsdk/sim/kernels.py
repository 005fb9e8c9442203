"""One run of the conv engine as a prepared step: the fast path of ``conv_unit._run``.

``conv_unit._run`` is the reference: it decodes the run's fields on every call and goes
through :mod:`.ops` stage by stage (conv, bias, element-wise add, pool, activation,
rounding; §4.1).  :func:`make_step` decodes the fields once per configuration image and,
where the compiled loops (:mod:`dvsdk.native`) exist, fuses the stages after the
convolution into one pass over the output (``epilogue``) or into the depthwise loop
itself.  The operations and their order stay those of the reference, so the results are
the same bits; the tests run both on random configurations.

What is compiled: the conv stage's data movement (im2col without a padded copy, the
zero-inserted input of a deconvolution) and its fixed-order matrix product
(:func:`dvsdk.hw.arith.matmul`), depthwise convolutions, average and max pooling (max in
the total order of firmware_spec/arithmetic.md), and after them bias, addend, the
activations (tanh, sigmoid and ELU as :mod:`dvsdk.hw.elementary` computes them) and the
rounding.  Around a max-pool or upsample only the bias and addend are fused (the pool
comes between them and the activation).  LRN, rectify and PReLU without weights take the
reference path.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np

from .. import native
from ..hw import arith
from ..hw.fp16 import fp16_value
from ..hw.spec import SPEC
from . import ops, split

POOL = SPEC.enum("pool_enable")
#: activation codes the compiled epilogue applies (ops.activation's numbering)
FUSED_ACTS = (ops.ACT_NONE, ops.ACT_LEAKY_RELU, ops.ACT_PRELU, ops.ACT_RELU6)

Step = Callable[[np.ndarray, tuple | None, np.ndarray | None], np.ndarray]
#: bytes of im2col matrix built and multiplied at a time (:func:`_correlate`): a block that
#: stays in the L2 cache between its construction and the product that reads it (32 MiB
#: blocks, written to and read back from memory, took 10-15% longer)
COLS_BLOCK = 1 << 20


def _xy(word: int) -> tuple[int, int]:
    return word & 0xFF, (word >> 8) & 0xFF


def _pads(word: int, mask_a: int) -> tuple[int, int, int, int]:
    return word & mask_a, (word >> 8) & 0xFF, (word >> 16) & mask_a, (word >> 24) & 0xFF


def make_step(run: dict, reference: Callable[..., np.ndarray]) -> Step:
    """The step for ``run``: ``step(x, weights, addend) -> y`` with the bits of
    ``reference(run, x, weights, addend)`` (``conv_unit._run``), which it returns itself
    where nothing is compiled or the compiled loops are off."""
    ce, pe = run["conv_enable"], run["pool_enable"]
    act, param = run["actfunc"], fp16_value(run["actfunc_param"])
    rect = bool(run["rectifi_en"])
    pooled = pe in (POOL.max, POOL.upsample)
    if native.NATIVE is None or run["lrn"] & 1 or rect:
        return partial(reference, run)
    if not ce:
        if act == ops.ACT_PRELU or pe not in (POOL.none, POOL.max, POOL.avg, POOL.upsample):
            return partial(reference, run)
        if pe != POOL.avg:  # a standalone max-pool, upsample, addition or activation
            return _plain_step(run, pe)
        size, stride = _xy(run["pool_size"]), _xy(run["pool_stride"])
        pads, scale = _pads(run["pool_pad"], 0xFF), fp16_value(run["pool_avg_param"])
        if min(size + stride) < 1:
            return partial(reference, run)  # its error

        tail = _make_tail(run)

        def pool_step(x: np.ndarray, wb: None, addend: np.ndarray | None) -> np.ndarray:
            return tail(_pool(x, size, stride, pads, scale), None, None, addend)
        return pool_step

    kx, ky = _xy(run["p"])
    stride = (1, 1) if ce & 4 else _xy(run["conv_stride"])
    up = _xy(run["conv_stride"]) if ce & 4 else (1, 1)  # deconv: zeros inserted
    pads = _pads(run["conv_pad"], 0x7F)
    dil = tuple(max(1, d) for d in _xy(run["conv_dilation"]))
    depthwise = bool(ce & 2)
    pointwise = not depthwise and kx == ky == 1 and stride == (1, 1) and not any(pads)
    direct = act in FUSED_ACTS and not pooled
    tail = _make_tail(run)
    sizes: dict[tuple[int, int], tuple[int, int]] = {}  # depthwise: (OH, OW) per (H, W)
    zeros_first = up != (1, 1) and (depthwise or pointwise)
    ep_act = (act, param) if direct else (-1, 0.0)  # (the epilogue's activation, if fused)

    def step(x: np.ndarray, wb: tuple, addend: np.ndarray | None) -> np.ndarray:
        wts, bias, prelu, _, derived = wb
        x = np.asarray(x, np.float32)
        c = x.shape[2]
        if (wts.shape[1] != 1 or wts.shape[0] != c) if depthwise else wts.shape[1] != c:
            return reference(run, x, wb, addend)  # its error
        if zeros_first:
            # ops.deconv2d: the input zero-inserted, then a stride-1 conv (the general
            # case below inserts the zeros as it builds its matrix)
            h_in, w_in, c = x.shape
            z = np.zeros(((h_in - 1) * up[1] + 1, (w_in - 1) * up[0] + 1, c), np.float32)
            z[::up[1], ::up[0], :] = x
            x = z
        if depthwise:
            taps = derived.get("taps")
            if taps is None:
                taps = derived["taps"] = np.ascontiguousarray(wts[:, 0].transpose(1, 2, 0))
            h, w, c = x.shape
            out_hw = sizes.get((h, w))  # (the same input size run after run)
            if out_hw is None:
                out_hw = sizes[(h, w)] = (
                    ops.conv_out_size(h, (ky - 1) * dil[1] + 1, pads[2], pads[3], stride[1],
                                      "height"),
                    ops.conv_out_size(w, (kx - 1) * dil[0] + 1, pads[0], pads[1], stride[0],
                                      "width"))
            oh, ow = out_hw
            out = np.empty((oh, ow, c), np.float32)
            fused = direct and addend is None
            x = np.ascontiguousarray(x)
            native.NATIVE.depthwise(
                x, taps, bias, out, stride[0], stride[1], dil[0], dil[1], pads[0], pads[2],
                act if fused else -1, param if fused else 0.0, prelu if fused else None,
                0, oh, split.parts(split.DEPTHWISE * oh * ow * c * kx * ky))
            return out if fused else tail(out, None, prelu, addend)
        # the epilogue on each tile of the product as it is finished: bias and addend, and
        # where nothing comes between them (a pool), the activation and the rounding too
        ep = (bias, None if addend is None else addend.reshape(-1, addend.shape[-1]),
              *ep_act, prelu if direct else None)
        if pointwise:
            h, w, c = x.shape
            out = np.empty((h * w, wts.shape[0]), np.float32)
            _product(x.reshape(h * w, c), _packed(wts, derived), out, ep)
            out = out.reshape(h, w, -1)
        else:
            out = _correlate(x, wb, (kx, ky), stride, pads, dil, up, ep)
        return out if direct else tail(out, None, prelu, None)
    return step


def _plain_step(run: dict, pe: int) -> Step:
    """A run without a conv stage whose pool stage is none, max or upsample: the conv
    stage's tail on the input (``x + addend``, the pool, the activation, the rounding),
    compiled; the input is never written (a multi-run command reads it again)."""
    tail = _make_tail(run)

    def plain_step(x: np.ndarray, wb: None, addend: np.ndarray | None) -> np.ndarray:
        if pe == POOL.none or addend is not None:
            x = np.array(x, np.float32, order="C")  # (the tail works in place)
        return tail(x, None, None, addend)
    return plain_step


def warm(run: dict, wb: tuple) -> None:
    """Work out ahead (:mod:`.warm`) what :func:`make_step`'s step derives from the run's
    decoded weights ``wb`` on its first call: a depthwise run's taps, another conv's packed
    matrix operand (``derived``, kept with the decoded block)."""
    ce = run["conv_enable"]
    if native.NATIVE is None or not ce or run["lrn"] & 1 or run["rectifi_en"]:
        return
    wts, derived = wb[0], wb[4]
    if ce & 2:
        if "taps" not in derived and wts.ndim == 4 and wts.shape[1] == 1:
            derived["taps"] = np.ascontiguousarray(wts[:, 0].transpose(1, 2, 0))
    elif wts.ndim == 4:
        _packed(wts, derived)


def _make_tail(run: dict) -> Callable[..., np.ndarray]:
    """``tail(t, bias, prelu, addend)``: everything after the conv (or average-pool) stage
    on ``t`` (owned, contiguous (OH, OW, M)): + bias, + addend, max-pool or upsample,
    activation, rounding; the run's fields decoded here, once."""
    pe, act = run["pool_enable"], run["actfunc"]
    param = fp16_value(run["actfunc_param"])
    pool = (_xy(run["pool_size"]), _xy(run["pool_stride"]), _pads(run["pool_pad"], 0xFF))
    if act in FUSED_ACTS and pe not in (POOL.max, POOL.upsample):
        def direct(t: np.ndarray, bias: np.ndarray | None, prelu: np.ndarray | None,
                   addend: np.ndarray | None) -> np.ndarray:
            _epilogue(t, bias, addend, act, param, prelu)
            return t
        return direct

    def tail(t: np.ndarray, bias: np.ndarray | None, prelu: np.ndarray | None,
             addend: np.ndarray | None) -> np.ndarray:
        if bias is not None or addend is not None:
            _epilogue(t, bias, addend, -1, 0.0, None)
        if pe == POOL.max:
            t = _pool(t, *pool)
        elif pe == POOL.upsample:
            t = ops.upsample2x(t)
        if act in FUSED_ACTS and (act != ops.ACT_PRELU or prelu is not None):
            # (a fresh contiguous array: the activation and the rounding in one pass, as
            # the direct path has them, PReLU included)
            _epilogue(t, None, None, act, param, prelu)
            return t
        return ops.finish(t, act, param, prelu, False, owned=True)
    return tail


def _epilogue(t: np.ndarray, bias: np.ndarray | None, addend: np.ndarray | None, act: int,
              param: float, prelu: np.ndarray | None) -> None:
    """``native.epilogue`` on ``t`` (OH, OW, M) in place, its pixels split over the
    threads (element by element: the same bits)."""
    m = t.shape[2]
    t2 = t.reshape(-1, m)
    native.NATIVE.epilogue(t2, bias, None if addend is None else addend.reshape(-1, m), act,
                           param, prelu, split.parts(split.EPILOGUE * t2.size))


def _pool(x: np.ndarray, size: tuple[int, int], stride: tuple[int, int],
          pads: tuple[int, int, int, int], avg_param: float | None = None) -> np.ndarray:
    """:func:`.ops.avg_pool` (``avg_param`` given) or :func:`.ops.max_pool`, compiled: the
    same taps in the same order (max: numpy's maximum, NaN and signed-zero cases included,
    padded positions -inf)."""
    (kx, ky), (sx, sy), (pl, pr, pt, pb) = size, stride, pads
    if min(kx, ky, sx, sy) < 1:  # their errors
        return (ops.max_pool(x, size, stride, pads) if avg_param is None
                else ops.avg_pool(x, size, stride, pads, avg_param))
    h, w, c = x.shape
    ow = ops.conv_out_size(w, kx, pl, pr, sx, "width")
    oh = ops.conv_out_size(h, ky, pt, pb, sy, "height")
    out = np.empty((oh, ow, c), np.float32)
    x = np.ascontiguousarray(x, np.float32)
    if avg_param is None:
        native.NATIVE.maxpool(x, out, kx, ky, sx, sy, pl, pt)
    else:
        native.NATIVE.avgpool(x, out, kx, ky, sx, sy, pl, pt, float(np.float32(avg_param)))
    return out


def _packed(w: np.ndarray, derived: dict) -> np.ndarray:
    """The run's weights as the (ky*kx*C, M) matrix of :func:`.ops.conv2d` (taps in row-major
    order, C fastest), packed for the compiled product (:func:`~dvsdk.hw.arith.pack_b`);
    worked out once per decoded weight block."""
    bp = derived.get("bp")
    if bp is None:
        m, c, ky, kx = w.shape
        bp = derived["bp"] = arith.pack_b(w.transpose(2, 3, 1, 0).reshape(ky * kx * c, m))
    return bp


def _product(a: np.ndarray, bp: np.ndarray, out: np.ndarray, ep: tuple) -> None:
    """``out = a @ b`` in the fixed order (:func:`~dvsdk.hw.arith.matmul`, binary16
    operands), then the epilogue ``ep`` = (bias, addend (N, M) or None, act, slope, prelu)
    on each finished tile (``native.gemm``); in two parts on the two threads where it pays
    (by rows, or for a few rows by 16-column panels: each output is the same whichever part
    computes it)."""
    n, k = a.shape
    native.NATIVE.gemm(a, bp, out, True, 0, -1, 0, -1, *ep,
                       split.parts(split.MATMUL * n * k * out.shape[1]))


def _correlate(x: np.ndarray, wb: tuple, k: tuple[int, int], stride: tuple[int, int],
               pads: tuple[int, int, int, int], dil: tuple[int, ...], up: tuple[int, int],
               ep: tuple) -> np.ndarray:
    """The conv stage of :func:`.ops.conv2d` (general case) on ``x`` with ``up - 1`` zeros
    inserted between its columns and rows (a deconvolution's input), then the epilogue
    ``ep`` (:func:`_product`): the same im2col matrix (built without the padded or
    zero-inserted copy, in blocks of output rows to bound memory) and the same fixed-order
    product."""
    w, derived = wb[0], wb[4]
    (kx, ky), (sx, sy), (pl, pr, pt, pb), (dx, dy) = k, stride, pads, dil
    h_in, w_in, c = x.shape
    h_in, w_in = (h_in - 1) * up[1] + 1, (w_in - 1) * up[0] + 1
    m = w.shape[0]
    ow = ops.conv_out_size(w_in, (kx - 1) * dx + 1, pl, pr, sx, "width")
    oh = ops.conv_out_size(h_in, (ky - 1) * dy + 1, pt, pb, sy, "height")
    kdim = ky * kx * c
    bp = _packed(w, derived)
    out = np.empty((oh, ow, m), np.float32)
    x = np.ascontiguousarray(x)
    rows_per_block = max(1, COLS_BLOCK // max(1, ow * kdim * 4))
    cols = np.empty((min(rows_per_block, oh), ow, kdim), np.float32)
    for r in range(0, oh, rows_per_block):
        blk = cols[: min(rows_per_block, oh - r)]
        native.NATIVE.im2col(x, blk, r, kx, ky, sx, sy, dx, dy, pl, pt, up[0], up[1],
                             split.parts(split.EPILOGUE * blk.size))
        n = blk.shape[0] * ow
        add = None if ep[1] is None else ep[1][r * ow:r * ow + n]
        _product(blk.reshape(n, kdim), bp, out[r:r + blk.shape[0]].reshape(n, m),
                 (ep[0], add, *ep[2:]))
    return out
