"""Shape rules for the transformer, recurrent and sampling ops (:mod:`.fold`'s
``SHAPE_RULES`` takes these in).

Each rule reads a :class:`dvsdk.compiler.fold._Ctx` (input shapes, dtypes, constants) and
returns ``[(shape, dtype)]`` per output, None when a shape-defining input is not constant
yet, or raises ModelError naming the op.  The output shapes follow the ONNX operator specs
cited by the kernels (:mod:`dvsdk.cpu.transformer`, :mod:`dvsdk.cpu.attention`,
:mod:`dvsdk.cpu.ms_attention`,
:mod:`dvsdk.cpu.recurrent`, :mod:`dvsdk.cpu.sample`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..cpu.dtypes import onnx_dtype
from ..cpu.ms_attention import ms_attention_dims
from ..cpu.transformer import einsum_parse
from ..errors import ModelError

Shape = tuple[int, ...]
Result = list[tuple[Shape, np.dtype]] | None

_I64 = np.dtype(np.int64)


def _axis(c: Any, rank: int, default: int) -> int:
    axis = int(c.op.attrs.get("axis", default))
    if not -rank <= axis < max(rank, 1):
        raise c.fail("axis out of range", value=axis, limit=f"[{-rank}, {rank - 1}]")
    return axis % max(rank, 1)


def _same(c: Any) -> Result:
    return [(c.shape(0), c.dtype(0))]


def _layer_norm(c: Any) -> Result:
    x = c.shape(0)
    axis = _axis(c, len(x), -1)
    stash = onnx_dtype(int(c.op.attrs.get("stash_type", 1)))
    stat = tuple(x[:axis]) + (1,) * (len(x) - axis)
    try:
        np.broadcast_shapes(c.shape(1), tuple(x[axis:]))
    except ValueError:
        raise c.fail("LayerNormalization Scale does not broadcast to the normalized axes",
                     value=(tuple(x), c.shape(1)), limit=tuple(x[axis:])) from None
    return [(tuple(x), c.dtype(0)), (stat, stash), (stat, stash)]


def _topk(c: Any) -> Result:
    x = c.shape(0)
    axis = _axis(c, len(x), -1)
    if c.has(1):
        k = c.const(1)
        if k is None:
            return None
        k = int(np.asarray(k).reshape(-1)[0])
    else:
        k = int(c.op.attrs["k"])
    if not 0 <= k <= x[axis]:
        raise c.fail("TopK K out of range", value=k, limit=f"[0, {x[axis]}]")
    out = tuple(k if i == axis else d for i, d in enumerate(x))
    return [(out, c.dtype(0)), (out, _I64)]


def _cast_like(c: Any) -> Result:
    return [(c.shape(0), c.dtype(1))]


def _scatter_nd(c: Any) -> Result:
    data, idx, upd = c.shape(0), c.shape(1), c.shape(2)
    k = idx[-1] if idx else 0
    want = tuple(idx[:-1]) + tuple(data[k:])
    if not idx or k > len(data) or tuple(upd) != want:
        raise c.fail("ScatterND updates must have shape indices.shape[:-1] + "
                     "data.shape[indices.shape[-1]:]", value=(data, idx, upd), limit=want)
    return _same(c)


def _einsum(c: Any) -> Result:
    n = len(c.op.inputs)
    shapes = [c.shape(i) for i in range(n)]
    terms, out = einsum_parse(str(c.op.attrs["equation"]), [len(s) for s in shapes])
    sizes: dict[str, int] = {}
    for t, s in zip(terms, shapes, strict=True):
        for ch, d in zip(t, s, strict=True):
            if ch in sizes and d != sizes[ch] and 1 not in (d, sizes[ch]):
                raise c.fail("Einsum operands disagree on a letter's size",
                             value=f"{ch}: {sizes[ch]} vs {d}")
            sizes[ch] = d if sizes.get(ch, 1) == 1 else sizes[ch]
    return [(tuple(sizes[ch] for ch in out), c.dtype(0))]


def _attention(c: Any) -> Result:
    q, k, v = c.shape(0), c.shape(1), c.shape(2)
    a = c.op.attrs
    if not len(q) == len(k) == len(v) or len(q) not in (3, 4):
        raise c.fail("Attention Q, K, V must all be 3-D or all 4-D", value=(q, k, v))
    if len(q) == 3:
        hq, hk = int(a.get("q_num_heads", 0)), int(a.get("kv_num_heads", 0))
        if hq < 1 or hk < 1 or q[2] % hq or k[2] % hk or v[2] % hk:
            raise c.fail("3-D Attention needs q_num_heads and kv_num_heads dividing the "
                         "hidden sizes", value=(q, k, v, hq, hk))
        b, sq = q[0], q[1]
        dk, dv, skv = k[2] // hk, v[2] // hk, k[1]
    else:
        b, hq, sq, dq = q
        hk, skv, dk, dv = k[1], k[2], k[3], v[3]
        if dq != dk:
            raise c.fail("Attention Q and K head sizes differ", value=(q, k))
    if hq % hk or v[0] != b or k[0] != b:
        raise c.fail("Attention needs q heads a multiple of kv heads and one batch size",
                     value=(q, k, v))
    past = c.shape(4) if c.has(4) else None
    total = skv + (past[2] if past is not None else 0)
    y = (b, sq, hq * dv) if len(q) == 3 else (b, hq, sq, dv)
    dt = c.dtype(0)
    return [(y, dt), ((b, hk, total, dk), dt), ((b, hk, total, dv), dt),
            ((b, hq, sq, total), dt)]


def _ms_attention(c: Any) -> Result:
    for i, what in ((4, "past"), (6, "past_sequence_length")):
        if c.has(i):
            raise ModelError(f"com.microsoft.Attention {what} (input {i}) is not supported",
                             field=f"com.microsoft.Attention.{what}")
    bias = c.shape(2) if c.has(2) else None
    mask = c.shape(3) if c.has(3) else None
    x = c.shape(0)
    _, _, _, vh = ms_attention_dims(x, c.shape(1), bias, c.op.attrs, mask)
    return [((x[0], x[1], vh), c.dtype(0))]


def _recurrent(c: Any) -> Result:
    x, w = c.shape(0), c.shape(1)
    a = c.op.attrs
    hidden = int(a["hidden_size"]) if a.get("hidden_size") is not None else None
    dirs = 2 if a.get("direction", "forward") == "bidirectional" else 1
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[c.op.type]
    if len(x) != 3 or len(w) != 3 or w[0] != dirs or (hidden is not None and
                                                          w[1] != gates * hidden):
        raise c.fail(f"{c.op.type} needs X 3-D and W [num_directions, {gates}*hidden, input]",
                     value=(x, w), limit=(dirs, hidden))
    h = w[1] // gates
    if a.get("layout", 0):
        batch, seq = x[0], x[1]
        y, yh = (batch, seq, dirs, h), (batch, dirs, h)
    else:
        seq, batch = x[0], x[1]
        y, yh = (seq, dirs, batch, h), (dirs, batch, h)
    dt = c.dtype(0)
    return [(y, dt), (yh, dt), (yh, dt)][:3 if c.op.type == "LSTM" else 2]


def _grid_sample(c: Any) -> Result:
    x, grid = c.shape(0), c.shape(1)
    n = len(x) - 2
    if n < 1 or len(grid) != len(x) or grid[-1] != n or grid[0] != x[0]:
        raise c.fail("GridSample needs X (N, C, *D) and grid (N, *D_out, rank-2)",
                     value=(x, grid))
    return [((x[0], x[1], *grid[1:-1]), c.dtype(0))]


def _bool(c: Any) -> Result:
    return [(c.shape(0), np.dtype(np.bool_))]


def _rms_norm(c: Any) -> Result:
    x = c.shape(0)
    axis = _axis(c, len(x), -1)
    try:
        np.broadcast_shapes(c.shape(1), tuple(x[axis:]))
    except ValueError:
        raise c.fail("RMSNormalization scale does not broadcast to the normalized axes",
                     value=(tuple(x), c.shape(1)), limit=tuple(x[axis:])) from None
    return _same(c)


def _lp_norm(c: Any) -> Result:
    _axis(c, len(c.shape(0)), -1)
    return _same(c)


def _group_norm(c: Any) -> Result:
    x = c.shape(0)
    g = int(c.op.attrs.get("num_groups", 0))
    if len(x) < 2 or g < 1 or x[1] % g:
        raise c.fail("GroupNormalization num_groups must divide the channels", value=g,
                     limit=x[1] if len(x) >= 2 else None)
    for i in (1, 2):
        if int(np.prod(c.shape(i))) != x[1]:
            raise c.fail("GroupNormalization scale and bias need one value per channel "
                         "(opset 21)", value=tuple(c.shape(i)), limit=x[1])
    return _same(c)


def _loss(c: Any) -> Result:
    x, t = c.shape(0), c.shape(1)
    if len(x) < 2 or tuple(t) != (x[0], *x[2:]):
        raise c.fail(f"{c.op.type} target must have the input's shape without C",
                     value=(tuple(x), tuple(t)), limit=(x[0], *x[2:]) if x else None)
    if c.has(2) and tuple(c.shape(2)) != (x[1],):
        raise c.fail(f"{c.op.type} weight must have C values", value=tuple(c.shape(2)),
                     limit=(x[1],))
    red = c.op.attrs.get("reduction", "mean")
    loss = tuple(t) if red == "none" else ()
    return [(loss, c.dtype(0)), (tuple(x), c.dtype(0))]


MORE_RULES: dict[str, Callable[[Any], Result]] = {
    "RMSNormalization": _rms_norm,
    "LpNormalization": _lp_norm,
    "GroupNormalization": _group_norm,
    "MeanVarianceNormalization": _same,
    **{t: _same for t in "Celu Mish Swish ThresholdedRelu Shrink".split()},
    "IsInf": _bool,
    "IsNaN": _bool,
    "NegativeLogLikelihoodLoss": _loss,
    "SoftmaxCrossEntropyLoss": _loss,
    "LayerNormalization": _layer_norm,
    "Gelu": _same,
    "Erf": _same,
    "TopK": _topk,
    "CastLike": _cast_like,
    "ScatterND": _scatter_nd,
    "Einsum": _einsum,
    "Attention": _attention,
    "MsAttention": _ms_attention,
    "LSTM": _recurrent,
    "GRU": _recurrent,
    "RNN": _recurrent,
    "GridSample": _grid_sample,
}
