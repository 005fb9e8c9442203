"""ONNX ``Attention`` (opset 23), scaled dot-product attention, as a CPU kernel.

Inputs Q, K, V (all 4-D ``(batch, heads, seq, head_size)``, or all 3-D ``(batch, seq,
heads * head_size)`` with ``q_num_heads`` / ``kv_num_heads``), optional ``attn_mask``
(bool: attend where true; float: added), optional ``past_key`` / ``past_value`` (the
present ones are past and new concatenated along the sequence).  Grouped-query attention
repeats each KV head ``q_heads / kv_heads`` times ([h0, h0, h1, h1, ...]).  ``is_causal``
masks key j for query i unless ``j <= i + past_length`` (bottom-right aligned); with
``nonpad_kv_seqlen`` (opset 24) only the first ``n[b]`` keys of batch item b count and
the causal frontier is ``j <= i + n[b] - q_length``.  Both Q
and K are multiplied by ``sqrt(scale)`` (default scale ``1 / sqrt(head_size)``) before the
product, as the ONNX function body does; ``softcap`` > 0 applies ``softcap * tanh(s /
softcap)`` to the scores before the mask.  A query row whose mask is all ``-inf`` gives
zero probabilities (and Y = 0).  ``qk_matmul_output_mode`` 0/1: the scores after the
softcap, 2: after the mask, 3: after the softmax, as the ONNX reference implementation
(onnx 1.22, which computed the conformance tests' data) defines them.

Arithmetic (firmware_spec/arithmetic.md, the CPU steps): both products by
:func:`dvsdk.hw.arith.matmul_nd` in the input's float type; the softmax in float64 (max by
compare-select, e**x by :mod:`dvsdk.hw.elementary`, the row sum numpy's pairwise sum),
rounded once to the input type, whatever ``softmax_precision`` asks (float64 is at least
as precise as every allowed precision).  No onnx import.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary

__all__ = ["attention"]

Arr = np.ndarray


def _heads(x: Arr, n: int, what: str) -> Arr:
    b, s, hidden = x.shape
    if n < 1 or hidden % n:
        raise ModelError("3-D Attention needs a head count dividing the hidden size",
                         field=f"Attention.{what}", value=n, limit=f"a divisor of {hidden}")
    return x.reshape(b, s, n, hidden // n).transpose(0, 2, 1, 3)


def _softmax_rows(s: Arr) -> Arr:
    """float64 softmax over the last axis; rows whose max is -inf give zeros."""
    m = arith.reduce_max(s, axis=-1, keepdims=True)
    dead = np.isneginf(m)
    e = elementary.exp(s - np.where(dead, 0.0, m))
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0.0, 1.0, total)


def attention(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """ONNX Attention-23 (see the module docstring); outputs Y, present_key,
    present_value, qk_matmul_output."""
    q, k, v = inputs[0], inputs[1], inputs[2]
    mask = inputs[3] if len(inputs) > 3 else None
    past_k = inputs[4] if len(inputs) > 4 else None
    past_v = inputs[5] if len(inputs) > 5 else None
    nonpad = inputs[6] if len(inputs) > 6 else None
    if nonpad is not None and past_k is not None:
        raise ModelError("Attention nonpad_kv_seqlen cannot be combined with past_key",
                         field="Attention.nonpad_kv_seqlen")
    if (past_k is None) != (past_v is None):
        raise ModelError("Attention needs past_key and past_value together",
                         field="Attention.past_key")
    dt = q.dtype
    rank3 = q.ndim == 3
    if rank3:
        q = _heads(q, int(attrs.get("q_num_heads", 0)), "q_num_heads")
        k = _heads(k, int(attrs.get("kv_num_heads", 0)), "kv_num_heads")
        v = _heads(v, int(attrs.get("kv_num_heads", 0)), "kv_num_heads")
    head = q.shape[3]
    scale = attrs.get("scale")
    scale = 1.0 / np.sqrt(head) if scale is None else float(scale)
    root = dt.type(np.sqrt(scale))
    if past_k is not None:
        k = np.concatenate([past_k, k], axis=2)
        v = np.concatenate([past_v, v], axis=2)
    present_k, present_v = k, v
    sq, skv = q.shape[2], k.shape[2]
    hq, hk = q.shape[1], k.shape[1]
    if hq % hk:
        raise ModelError("Attention q heads must be a multiple of kv heads",
                         field="Attention.kv_num_heads", value=hk, limit=f"a divisor of {hq}")
    if hq != hk:
        k = np.repeat(k, hq // hk, axis=1)
        v = np.repeat(v, hq // hk, axis=1)
    # the additive bias: the mask (padded to the kv length with "no"), then causality
    bias = np.zeros((sq, skv), np.float64)
    if mask is not None:
        m = np.asarray(mask)
        pad = skv - m.shape[-1]
        if m.dtype == np.bool_:
            m = np.where(m, 0.0, -np.inf)
        m = m.astype(np.float64)
        if pad > 0:
            m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, pad)], constant_values=-np.inf)
        bias = bias + m
    if nonpad is not None:  # per batch item: its valid keys, and the causal frontier
        valid = np.asarray(nonpad, np.int64).reshape(-1, 1, 1, 1)
        offset = valid - sq
    else:
        offset = np.int64(past_k.shape[2] if past_k is not None else 0)
    if int(attrs.get("is_causal", 0)):
        allowed = np.arange(skv)[None, :] <= np.arange(sq)[:, None] + offset
        bias = bias + np.where(allowed, 0.0, -np.inf)
    if nonpad is not None:
        bias = bias + np.where(np.arange(skv) < valid, 0.0, -np.inf)
    qk = arith.matmul_nd(q * root, np.swapaxes(k * root, -1, -2))
    softcap = float(attrs.get("softcap", 0.0))
    if softcap > 0:
        capped = elementary.tanh((qk / dt.type(softcap)).astype(np.float64)).astype(dt)
        qk = capped * dt.type(softcap)
    scores = qk.astype(np.float64) + bias
    probs = _softmax_rows(scores)
    dead = np.isneginf(arith.reduce_max(bias, axis=-1, keepdims=True))
    probs = np.where(dead, 0.0, probs)
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    if mode not in (0, 1, 2, 3):
        raise ModelError("Attention qk_matmul_output_mode out of range",
                         field="Attention.qk_matmul_output_mode", value=mode, limit="0..3")
    qk_out = {0: qk, 1: qk, 2: scores, 3: probs}[mode]
    y = arith.matmul_nd(probs.astype(dt), v)
    if rank3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], sq, -1)
    shape4 = (q.shape[0], hq, sq, skv)
    return [np.ascontiguousarray(y, dt), present_k, present_v,
            np.ascontiguousarray(np.broadcast_to(qk_out, shape4), dt)]
