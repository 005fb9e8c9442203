"""onnxruntime's ``com.microsoft`` ``Attention`` contrib op (IR op type ``MsAttention``).

The fused multi-head self-attention of onnxruntime (ContribOperators.md,
``com.microsoft.Attention``): ``input`` (batch, seq, input_hidden) is projected by
``weights`` (input_hidden, q_hidden + k_hidden + v_hidden) plus ``bias`` into Q, K and V
(``qkv_hidden_sizes``, default three equal parts), each split into ``num_heads`` heads;
``scores = scale * Q K^T`` (default scale ``1 / sqrt(q_hidden / num_heads)``) plus the
mask, plus ``attention_bias`` (input 5) when given; a softmax over the keys; ``P V``; the
heads concatenated again: output (batch, seq, v_hidden).

``mask_index`` (input 3), as onnxruntime's CPU kernel reads it (attention_cpu_base.h,
``PrepareMask``): 1-D (batch) key lengths (keys at or after ``len[b]`` masked), 1-D
(2 * batch) end then start positions (keys before the start masked too), 2-D (batch,
total) and 3-D (batch, seq, total) 0/1 masks (0: masked).  A masked key gets
``mask_filter_value`` (default -10000) added to its score (finite: a row whose keys are
all masked keeps a softmax of its scores).  ``unidirectional`` = 1 gives key j > i of query
i the float type's lowest value instead (causal).  4-D (Megatron) masks, which
onnxruntime's CPU kernel does not implement either, are refused.

Refused with a :class:`dvsdk.errors.ModelError` naming the field: ``past`` (input 4),
``past_sequence_length`` (input 6), ``do_rotary`` = 1, ``past_present_share_buffer`` = 1
(the ``present`` output is refused by the ONNX frontend).

Arithmetic (firmware_spec/arithmetic.md, the CPU steps): the projection ``input @ weights``
and both attention products by :func:`dvsdk.hw.arith.matmul_nd` in the input's float type;
``+ bias``, ``* scale``, ``+ mask``, ``+ attention_bias`` element-wise in that type (in that
order, as onnxruntime's GEMM with the bias / mask as its C operand); the softmax in float64
as :mod:`dvsdk.cpu.attention` (max by compare-select, e**x by :mod:`dvsdk.hw.elementary`,
numpy's pairwise row sum), rounded once to the input type before ``P V``.  No onnx import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith
from .attention import _softmax_rows

__all__ = ["ms_attention", "ms_attention_dims", "OP"]

Arr = np.ndarray

#: the IR op type (distinct from ONNX's own ``Attention``)
OP = "MsAttention"
_NAME = "com.microsoft.Attention"


def _fail(msg: str, field: str, **kw: Any) -> ModelError:
    return ModelError(f"{_NAME} {msg}", field=f"{_NAME}.{field}", **kw)


def ms_attention_dims(x: Sequence[int], w: Sequence[int], b: Sequence[int] | None,
                      attrs: dict[str, Any],
                      mask: Sequence[int] | None = None) -> tuple[int, int, int, int]:
    """(num_heads, q_hidden, k_hidden, v_hidden) for these input shapes, or a ModelError
    naming the attribute or input that does not fit."""
    if "num_heads" not in attrs or attrs["num_heads"] is None:
        raise _fail("needs the num_heads attribute", "num_heads")
    n = int(attrs["num_heads"])
    for key in ("do_rotary", "past_present_share_buffer"):
        if int(attrs.get(key, 0) or 0):
            raise _fail(f"{key} = 1 is not supported", key, value=attrs[key], limit=0)
    if len(x) != 3:
        raise _fail("input must be 3-D (batch, sequence, hidden)", "input", value=tuple(x))
    if len(w) != 2 or w[0] != x[2]:
        raise _fail("weights must be 2-D (input hidden, q + k + v hidden)", "weights",
                    value=tuple(w), limit=f"({x[2]}, q + k + v hidden)")
    sizes = attrs.get("qkv_hidden_sizes")
    if sizes is not None and len(list(sizes)):
        sizes = [int(s) for s in sizes]
        if len(sizes) != 3 or min(sizes) < 1 or sum(sizes) != w[1] or sizes[0] != sizes[1]:
            raise _fail("qkv_hidden_sizes must be three positive sizes, q = k, summing to "
                        "the weights' second dimension", "qkv_hidden_sizes", value=sizes,
                        limit=f"[q, q, v] with 2q + v = {w[1]}")
    else:
        if w[1] % 3:
            raise _fail("weights' second dimension must be 3 * hidden without "
                        "qkv_hidden_sizes", "weights", value=tuple(w))
        sizes = [w[1] // 3] * 3
    qh, kh, vh = sizes
    if n < 1 or qh % n or vh % n:
        raise _fail("num_heads must divide the q and v hidden sizes", "num_heads", value=n,
                    limit=f"a divisor of {qh} and {vh}")
    if b is not None and tuple(b) != (w[1],):
        raise _fail("bias must be 1-D of the weights' second dimension", "bias",
                    value=tuple(b), limit=(w[1],))
    if mask is not None:
        bsz, s = x[0], x[1]
        ok = {1: [(bsz,), (2 * bsz,)], 2: [(bsz, s)], 3: [(bsz, s, s)]}.get(len(mask), [])
        if tuple(mask) not in ok:
            raise _fail("mask_index must be (batch), (2 * batch), (batch, total) or "
                        "(batch, seq, total) (4-D masks are not supported)", "mask_index",
                        value=tuple(mask))
    return n, qh, kh, vh


def _mask(mask: Arr, bsz: int, s: int, t: int, fill: float, dt: np.dtype) -> Arr:
    """The additive mask (batch, 1, seq, total) in ``dt``, as onnxruntime's PrepareMask."""
    m = np.asarray(mask)
    if m.ndim == 1:
        j = np.arange(t)
        end = m[:bsz].astype(np.int64).reshape(bsz, 1)
        masked = j[None, :] >= end
        if m.shape[0] == 2 * bsz:
            start = np.minimum(m[bsz:].astype(np.int64), t).reshape(bsz, 1)
            masked |= j[None, :] < start
        masked = np.broadcast_to(masked[:, None, :], (bsz, s, t))
    elif m.ndim == 2:
        masked = np.broadcast_to((m <= 0)[:, None, :], (bsz, s, t))
    else:
        masked = m <= 0
    return np.where(masked, dt.type(fill), dt.type(0))[:, None, :, :]


def ms_attention(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """com.microsoft Attention (see the module docstring); outputs [output]."""
    def given(i: int) -> Arr | None:
        return inputs[i] if len(inputs) > i and inputs[i] is not None else None

    x, w, bias, mask = inputs[0], inputs[1], given(2), given(3)
    if given(4) is not None:
        raise _fail("past (input 4) is not supported", "past")
    if given(6) is not None:
        raise _fail("past_sequence_length (input 6) is not supported", "past_sequence_length")
    attn_bias = given(5)
    n, qh, kh, vh = ms_attention_dims(x.shape, w.shape, None if bias is None else bias.shape,
                                      attrs, None if mask is None else np.shape(mask))
    dt = x.dtype
    bsz, s = x.shape[0], x.shape[1]
    t = s  # (no past: the total sequence is this one)
    proj = arith.matmul_nd(x, w.astype(dt, copy=False))
    if bias is not None:
        proj = proj + bias.astype(dt, copy=False)

    def heads(lo: int, size: int) -> Arr:
        return proj[:, :, lo:lo + size].reshape(bsz, s, n, size // n).transpose(0, 2, 1, 3)

    q, k, v = heads(0, qh), heads(qh, kh), heads(qh + kh, vh)
    scale = attrs.get("scale")
    scale = 1.0 / np.sqrt(qh // n) if scale is None or float(scale) == 0.0 else float(scale)
    scores = arith.matmul_nd(q, np.swapaxes(k, -1, -2)) * dt.type(scale)
    causal = bool(int(attrs.get("unidirectional", 0) or 0))
    if mask is not None or causal:
        add = (np.zeros((bsz, 1, s, t), dt) if mask is None else
               _mask(mask, bsz, s, t, float(attrs.get("mask_filter_value", -10000.0)), dt))
        if causal:
            future = np.arange(t)[None, :] > np.arange(s)[:, None]
            add = np.where(future, np.finfo(dt).min, add)
        scores = scores + add
    if attn_bias is not None:
        ab = np.asarray(attn_bias).astype(dt, copy=False)
        try:
            scores = scores + np.broadcast_to(ab, scores.shape)
        except ValueError:
            raise _fail("attention_bias must broadcast to (batch, heads, seq, total)",
                        "attention_bias", value=ab.shape, limit=scores.shape) from None
    probs = _softmax_rows(scores.astype(np.float64)).astype(dt)
    y = arith.matmul_nd(probs, v)
    return [np.ascontiguousarray(y.transpose(0, 2, 1, 3).reshape(bsz, s, vh), dt)]
