"""``VxFixedPoint``: the OpenVX NN extension's fixed-point layers, exact, in int64.

A compiler-only op (:data:`dvsdk.cpu.ops.COMPILER_OPS`) that :mod:`dvsdk.vx` emits for a
convolution, deconvolution or fully connected layer on UINT8, INT8 (KHR_NN_8) or INT16
Q7.8 (KHR_NN_16) tensors whose FP16 path on the DV700 cannot be proven exact
(:mod:`dvsdk.vx.exact`).  It computes what the extension text (``formats.md`` §2.3, §2.6)
says: ``out = sat(round(sum_taps in * w + b))`` with an accumulator wide enough never to
overflow (the text leaves the width to the implementation, at least 16 bits: this one is
int64, so the sum is exact), rounded once to the output's fixed-point position by the
node's ``rounding_policy`` and fitted once to the output type by its ``overflow_policy``.

Operands: input 0 is the layer's input as real values (float32, as every IR tensor), turned
back into raw integers of ``in_dtype`` at ``in_fpp`` (``rint``, saturated: the identity on
values of that type); input 1 the raw weights (int64; conv and deconv OIHW with the
OpenVX kernel as given, fc ``(K, O)``); input 2, optional, the raw bias (int64, ``(O,)``, or
``(O, H, W)`` per output location).  The result is the output's real values
``raw / 2**out_fpp`` (float32, exact: at most 16 significant bits).

``kind``: ``conv`` (``vx_pads`` [top, left, bottom, right] of zeros, ``vx_strides``,
``vx_dilations`` as ONNX has them: the OpenVX dilation plus 1), ``deconv`` (zeros inserted
between the inputs by ``vx_strides``, the result padded by ``kernel - vx_pads - 1`` on each side
and ``vx_output_padding`` more at the end, then a stride-1 convolution with the weights as
given), ``fc`` (input as rows of K, ``(N, K)``: one per sample of every batch
dimension), or ``requantize`` (no weights: the input is an exact sum at ``acc_fpp``
fractional bits, as the DV700 leaves it within the bound of :mod:`dvsdk.vx.exact`, and only
the rounding and overflow policies apply).

Vectorized: a convolution is one ``einsum`` per kernel tap over the whole tensor, in
int64 (numpy's integer products and sums: exact, no BLAS).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError

__all__ = ["OP", "fixed_point", "round_shift", "fit"]

OP = "VxFixedPoint"
Arr = np.ndarray


def _limits(dtype: str) -> tuple[int, int, int]:
    info = np.iinfo(np.dtype(dtype))
    return int(info.min), int(info.max), info.bits


def to_raw(x: Arr, fpp: int, dtype: str) -> Arr:
    """Real values of a fixed-point tensor -> its raw integers (int64)."""
    lo, hi, _ = _limits(dtype)
    v = np.asarray(x, np.float64) * 2.0 ** fpp
    v = np.where(np.isnan(v), 0.0, v)
    return np.clip(np.rint(v), lo, hi).astype(np.int64)


def round_shift(t: Arr, shift: int, to_nearest_even: bool) -> Arr:
    """``t / 2**shift`` rounded to an integer: toward zero, or to nearest, ties to even
    (``shift <= 0`` multiplies, exactly)."""
    t = np.asarray(t, np.int64)
    if shift <= 0:
        return t << -shift
    q = t >> shift                                    # floor (arithmetic shift)
    r = t - (q << shift)                              # 0 <= r < 2**shift
    if to_nearest_even:
        half = np.int64(1) << (shift - 1)
        return q + ((r > half) | ((r == half) & ((q & 1) == 1)))
    return q + ((t < 0) & (r != 0))                   # floor -> toward zero


def fit(q: Arr, dtype: str, saturate: bool) -> Arr:
    """Integers into ``dtype``'s range: clamp, or keep the low bits (two's complement)."""
    lo, hi, bits = _limits(dtype)
    if saturate:
        return np.clip(q, lo, hi)
    return ((q - lo) & ((1 << bits) - 1)) + lo


def _conv(x: Arr, w: Arr, pads: list[int], strides: list[int], dilations: list[int],
          out_hw: tuple[int, int]) -> Arr:
    """Cross-correlation of raw int64 ``x`` (N, C, H, W) with ``w`` (O, C, kh, kw)."""
    top, left, bottom, right = (int(p) for p in pads)
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    (sy, sx), (dy, dx) = strides, dilations
    oh, ow = out_hw
    if (oh - 1) * sy + (w.shape[2] - 1) * dy >= xp.shape[2] or \
            (ow - 1) * sx + (w.shape[3] - 1) * dx >= xp.shape[3]:
        raise ModelError("VxFixedPoint: the windows leave the padded input",
                         field="VxFixedPoint.vx_pads", value=pads, limit=xp.shape[2:])
    acc = np.zeros((x.shape[0], w.shape[0], oh, ow), np.int64)
    for i in range(w.shape[2]):                       # one einsum per tap, not per element
        for j in range(w.shape[3]):
            patch = xp[:, :, i * dy:i * dy + (oh - 1) * sy + 1:sy,
                       j * dx:j * dx + (ow - 1) * sx + 1:sx]
            acc += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return acc


def _deconv(x: Arr, w: Arr, pads: list[int], strides: list[int], out_pad: list[int],
            out_hw: tuple[int, int]) -> Arr:
    n, c, h, wd = x.shape
    sy, sx = strides
    up = np.zeros((n, c, (h - 1) * sy + 1, (wd - 1) * sx + 1), np.int64)
    up[:, :, ::sy, ::sx] = x
    ky, kx = w.shape[2], w.shape[3]
    py, px = ky - int(pads[0]) - 1, kx - int(pads[1]) - 1
    return _conv(up, w, [py, px, py + int(out_pad[0]), px + int(out_pad[1])], [1, 1], [1, 1],
                 out_hw)


def fixed_point(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """The ``VxFixedPoint`` kernel (the module docstring)."""
    kind = attrs["kind"]
    out_shape = tuple(int(d) for d in attrs["vx_output_shape"])
    nearest = attrs["rounding"] == "to_nearest_even"
    saturate = attrs["overflow"] == "saturate"
    out_fpp = int(attrs["out_fpp"])
    if kind == "requantize":
        acc_fpp = int(attrs["acc_fpp"])
        acc = np.rint(np.asarray(inputs[0], np.float64) * 2.0 ** acc_fpp)
        acc = np.where(np.isfinite(acc), acc, 0).astype(np.int64)
        q = round_shift(acc, acc_fpp - out_fpp, nearest)
    else:
        x = to_raw(inputs[0], int(attrs["in_fpp"]), attrs["in_dtype"])
        w = np.asarray(inputs[1], np.int64)
        bias = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        if kind == "fc":   # rows of K: one sample, or one of several batch dimensions
            acc = x.reshape(-1, w.shape[0]) @ w
        elif kind == "conv":
            acc = _conv(x, w, attrs["vx_pads"], attrs["vx_strides"], attrs["vx_dilations"],
                        out_shape[2:])
        elif kind == "deconv":
            acc = _deconv(x, w, attrs["vx_pads"], attrs["vx_strides"], attrs["vx_output_padding"],
                          out_shape[2:])
        else:
            raise ModelError("VxFixedPoint kind unknown", field="VxFixedPoint.kind",
                             value=kind, limit=["conv", "deconv", "fc", "requantize"])
        acc_fpp = int(attrs["in_fpp"]) + int(attrs["w_fpp"])
        if bias is not None:
            b = np.asarray(bias, np.int64)
            b = b.reshape((1, -1) + (1,) * (acc.ndim - 2)) if b.ndim == 1 else b[None]
            b_fpp = int(attrs["b_fpp"])
            if b_fpp > acc_fpp:
                acc, acc_fpp = acc << (b_fpp - acc_fpp), b_fpp
            acc = acc + (b << (acc_fpp - b_fpp))
        q = round_shift(acc, acc_fpp - out_fpp, nearest)
    q = fit(q, attrs["out_dtype"], saturate)
    return [(q.astype(np.float64) / 2.0 ** out_fpp).astype(np.float32).reshape(out_shape)]
