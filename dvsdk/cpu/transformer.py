"""Numpy kernels for transformer-block ops the DV700 cannot run (ONNX semantics).

LayerNormalization (opset 17), Gelu (opset 20, ``approximate`` none / tanh), Erf (opset
13), TopK (opsets 1/10/11), CastLike (opset 21), ScatterND (opset 18, every reduction) and
Einsum (opset 12).  Attention is in :mod:`.attention`.

The arithmetic is the runtime's CPU steps' (firmware_spec/arithmetic.md): matrix products
by :func:`dvsdk.hw.arith.matmul_nd` (each output summed in order k = 0..K-1, never BLAS),
transcendental functions by :mod:`dvsdk.hw.elementary` in float64, maximum and minimum by
compare-select (:mod:`dvsdk.hw.arith`), sums over an axis by numpy's pairwise summation in
float64.  No onnx import (the board has only numpy).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary
from .args import axis_attr as _axis
from .args import optional as _opt
from .dtypes import cast_array, onnx_code, onnx_dtype

__all__ = ["TRANSFORMER_KERNELS", "einsum_parse", "einsum"]

Arr = np.ndarray
Attrs = dict[str, Any]


# --------------------------------------------------------------------------- norms
def layer_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX LayerNormalization-17: over the axes ``axis..rank-1``, ``Y = (X - mean) /
    sqrt(var + epsilon) * Scale + B``; also Mean and InvStdDev (shape ``X.shape[:axis] +
    [1] * (rank - axis)``, in the ``stash_type`` element type).  Mean and the (biased)
    variance are numpy's pairwise sums in float64, divided by the count; the rest float64
    operations, rounded once to the output types."""
    x, scale, bias = inputs[0], inputs[1], _opt(inputs, 2)
    axis = _axis(attrs, x.ndim, -1, "LayerNormalization")
    eps = float(attrs.get("epsilon", 1e-5))
    stash = onnx_dtype(int(attrs.get("stash_type", 1)))
    axes = tuple(range(axis, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True)
    d = xd - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = d * inv * scale.astype(np.float64)
    if bias is not None:
        y = y + bias.astype(np.float64)
    return [y.astype(x.dtype), mean.astype(stash), inv.astype(stash)]


# --------------------------------------------------------------------------- activations
_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Gelu-20: ``0.5 x (1 + erf(x / sqrt 2))``, or with ``approximate="tanh"``
    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3)))``; float64, rounded once."""
    x = inputs[0]
    mode = attrs.get("approximate", "none")
    xd = x.astype(np.float64)
    if mode == "none":
        inner = elementary.erf(xd * _SQRT_HALF)
    elif mode == "tanh":
        inner = elementary.tanh(_SQRT_2_OVER_PI * (xd + 0.044715 * (xd * xd * xd)))
    else:
        raise ModelError("Gelu approximate must be none or tanh", field="Gelu.approximate",
                         value=mode, limit="none, tanh")
    return [(0.5 * xd * (1.0 + inner)).astype(x.dtype)]


def erf(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Erf-13 by :func:`dvsdk.hw.elementary.erf` (float64, rounded once)."""
    x = inputs[0]
    return [elementary.erf(x).astype(x.dtype)]


# --------------------------------------------------------------------------- selection
def topk(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX TopK-11 (also 1 and 10: ``k`` attribute, largest, sorted): the ``K`` largest
    (``largest=0``: smallest) along ``axis`` with their int64 indices, always sorted; equal
    values keep the lower index first; a NaN counts as larger than every number (as
    onnxruntime's comparisons order it), -0 and +0 are equal."""
    x = inputs[0]
    k_in = _opt(inputs, 1)
    k = int(np.asarray(k_in).reshape(-1)[0]) if k_in is not None else int(attrs["k"])
    axis = _axis(attrs, x.ndim, -1, "TopK")
    if not 0 <= k <= x.shape[axis]:
        raise ModelError("TopK K out of range", field="TopK.K", value=k,
                         limit=f"[0, {x.shape[axis]}]")
    largest = int(attrs.get("largest", 1))
    if x.dtype.kind == "f":
        key = x.astype(np.float64)
        nan = np.isnan(key)
        key = np.where(nan, np.inf, key) + 0.0  # (+ 0.0: -0 becomes +0)
        # NaN above +inf: rank by (class, value) with a stable sort on each
        if largest:
            order = np.argsort(-key, axis=axis, kind="stable")
            cls = np.take_along_axis(~nan, order, axis=axis)
            order = np.take_along_axis(order, np.argsort(cls, axis=axis, kind="stable"),
                                       axis=axis)
        else:
            order = np.argsort(key, axis=axis, kind="stable")
            cls = np.take_along_axis(nan, order, axis=axis)
            order = np.take_along_axis(order, np.argsort(cls, axis=axis, kind="stable"),
                                       axis=axis)
    elif largest:
        # integers: descending, stable (the lower index first among equals)
        rev = np.flip(x, axis=axis)
        order = x.shape[axis] - 1 - np.flip(np.argsort(rev, axis=axis, kind="stable"),
                                            axis=axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis)
    return [np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64)]


def cast_like(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX CastLike-21: Cast to the element type of the second input (Cast's rules,
    :func:`dvsdk.cpu.dtypes.cast_array`)."""
    return [cast_array(inputs[0], onnx_dtype(onnx_code(inputs[1].dtype)))]


# --------------------------------------------------------------------------- scatter
_REDUCE = {"add": np.add, "mul": np.multiply, "max": arith.maximum, "min": arith.minimum}


def scatter_nd(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX ScatterND-18: ``out = copy(data)``; ``out[indices[i]] = updates[i]`` (or
    combined with ``reduction`` add / mul / max / min) for the update slices in order.
    Negative indices count from the end.  Repeated indices with reduction apply in update
    order: round r updates every index's r-th occurrence (a vector step per round; max/min
    compare-select); repeated indices without reduction: the last update wins."""
    data, indices, updates = inputs[0], np.asarray(inputs[1]).astype(np.int64), inputs[2]
    red = attrs.get("reduction", "none")
    if red != "none" and red not in _REDUCE:
        raise ModelError("ScatterND reduction not supported", field="ScatterND.reduction",
                         value=red, limit="none, add, mul, max, min")
    k = indices.shape[-1]
    if k > data.ndim:
        raise ModelError("ScatterND index tuples are longer than data's rank",
                         field="ScatterND.indices", value=list(indices.shape), limit=data.ndim)
    dims = np.asarray(data.shape[:k], np.int64)
    idx = indices.reshape(-1, k)
    idx = np.where(idx < 0, idx + dims, idx)
    if idx.size and (np.any(idx < 0) or np.any(idx >= dims)):
        raise ModelError("ScatterND index out of range", field="ScatterND.indices",
                         value=int(idx[np.any((idx < 0) | (idx >= dims), axis=1)][0][0]),
                         limit=list(data.shape[:k]))
    out = np.array(data, copy=True)
    upd = np.asarray(updates, data.dtype).reshape(idx.shape[0], *data.shape[k:])
    flat = np.ravel_multi_index(tuple(idx.T), data.shape[:k]) if k else np.zeros(
        idx.shape[0], np.int64)
    view = out.reshape(-1, *data.shape[k:])
    if red == "none":
        # last occurrence of each index wins: write only those
        last = np.unique(flat[::-1], return_index=True)[1]
        sel = flat.shape[0] - 1 - last
        view[flat[sel]] = upd[sel]
        return [out]
    fn = _REDUCE[red]
    order = np.argsort(flat, kind="stable")
    sf = flat[order]
    start = np.r_[0, np.flatnonzero(np.diff(sf)) + 1] if sf.size else np.zeros(0, np.int64)
    rank = np.arange(sf.size) - np.repeat(start, np.diff(np.r_[start, sf.size]))
    for r in range(int(rank.max()) + 1 if rank.size else 0):
        pick = order[rank == r]
        view[flat[pick]] = fn(view[flat[pick]], upd[pick])
    return [out]


# --------------------------------------------------------------------------- einsum
def einsum_parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """The operands' and the output's subscripts, ``...`` spelled as placeholder letters
    (one per broadcast axis, aligned from the right; not ASCII, so they never clash with
    the equation's own); the implicit output is the ellipsis then the letters used once,
    in alphabetical order."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise ModelError("Einsum equation names another number of operands",
                         field="Einsum.equation", value=equation, limit=len(ranks))
    ell = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks, strict=True)
               if "..." in t] or [0])
    marks = "".join(chr(0x4E00 + i) for i in range(ell))
    out_terms = []
    for t, r in zip(terms, ranks, strict=True):
        own = t.replace("...", "")
        if not (own.isascii() and (own.isalpha() or not own)) or t.count("...") > 1:
            raise ModelError("Einsum term is not letters and one ...", field="Einsum.equation",
                             value=equation)
        if "..." in t:
            t = t.replace("...", marks[ell - (r - len(own)):] if r > len(own) else "")
        if len(t) != r:
            raise ModelError("Einsum term does not match its operand's rank",
                             field="Einsum.equation", value=equation, limit=r)
        out_terms.append(t)
    used = "".join(out_terms)
    if arrow:
        own = rhs.replace("...", "")
        out = rhs.replace("...", marks)
        if not (own.isascii() and (own.isalpha() or not own)) or len(set(out)) != len(out) \
                or any(c not in used for c in own):
            raise ModelError("Einsum output term is not distinct letters of the inputs",
                             field="Einsum.equation", value=equation)
    else:
        out = marks + "".join(sorted(c for c in set(used) if c.isascii()
                                     and used.count(c) == 1))
    return out_terms, out


def _diagonals(x: Arr, term: str) -> tuple[Arr, str]:
    """Repeated letters within one term: their diagonal (numpy's, data movement only)."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        i = term.index(c)
        j = term.index(c, i + 1)
        x = np.diagonal(x, axis1=i, axis2=j)  # the diagonal axis goes last
        term = term[:i] + term[i + 1:j] + term[j + 1:] + c
    return x, term


def einsum(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Einsum-12 without BLAS: each operand's repeated letters become its diagonal,
    letters no other operand or the output uses are summed (numpy's pairwise sum), then the
    operands are multiplied left to right, each pair as one batched product of
    :func:`dvsdk.hw.arith.matmul_nd` (batch letters, kept letters, contracted letters;
    each output summed over the contracted index in row-major order), and the result is
    transposed to the output's letters."""
    xs = [np.asarray(x) for x in inputs]
    terms, out = einsum_parse(str(attrs["equation"]), [x.ndim for x in xs])
    sizes: dict[str, int] = {}
    ops: list[tuple[Arr, str]] = []
    for x, t in zip(xs, terms, strict=True):
        x, t = _diagonals(x, t)
        for c, d in zip(t, x.shape, strict=True):
            if sizes.get(c, d) != d and 1 not in (d, sizes[c]):
                raise ModelError("Einsum operands disagree on a letter's size",
                                 field="Einsum.equation", value=f"{c}: {sizes[c]} vs {d}")
            sizes[c] = max(sizes.get(c, d), d) if d != 1 else sizes.get(c, d)
        ops.append((x, t))
    dt = np.result_type(*xs)

    def needed(k: int) -> set[str]:
        s = set(out)
        for _, t in ops[k + 1:]:
            s |= set(t)
        return s

    def reduce_own(x: Arr, t: str, keep: set[str]) -> tuple[Arr, str]:
        drop = tuple(i for i, c in enumerate(t) if c not in keep)
        if drop:
            x = x.sum(axis=drop, dtype=dt)
            t = "".join(c for c in t if c in keep)
        return x, t

    acc, at = ops[0]
    acc, at = reduce_own(acc, at, needed(0))
    for k in range(1, len(ops)):
        x, t = ops[k]
        later = needed(k)
        x, t = reduce_own(x, t, later | set(at))
        acc, at = reduce_own(acc, at, later | set(t))
        batch = [c for c in at if c in t and c in later]
        contract = [c for c in at if c in t and c not in later]
        a_only = [c for c in at if c not in t]
        b_only = [c for c in t if c not in at]
        a = np.transpose(acc, [at.index(c) for c in batch + a_only + contract])
        b = np.transpose(x, [t.index(c) for c in batch + contract + b_only])
        bs = [sizes[c] for c in batch]
        a = np.broadcast_to(a, (*bs, *a.shape[len(batch):]))
        b = np.broadcast_to(b, (*bs, *b.shape[len(batch):]))
        m = int(np.prod([a.shape[len(batch) + i] for i in range(len(a_only))], dtype=np.int64))
        kk = int(np.prod([sizes[c] for c in contract], dtype=np.int64))
        n = int(np.prod([b.shape[len(batch) + len(contract) + i] for i in range(len(b_only))],
                        dtype=np.int64))
        a3 = np.ascontiguousarray(a, dt).reshape((*bs, m, kk))
        b3 = np.ascontiguousarray(b, dt).reshape((*bs, kk, n))
        y = arith.matmul_nd(a3, b3) if kk else np.zeros((*bs, m, n), dt)
        acc = y.reshape((*bs, *a.shape[len(batch):len(batch) + len(a_only)],
                         *b.shape[len(batch) + len(contract):]))
        at = "".join(batch + a_only + b_only)
    acc, at = reduce_own(acc, at, set(out))
    y = np.transpose(acc, [at.index(c) for c in out])
    y = np.broadcast_to(y, tuple(sizes[c] for c in out))
    return [np.array(y, dtype=dt, order="C")]


TRANSFORMER_KERNELS = {
    "LayerNormalization": layer_normalization,
    "Gelu": gelu,
    "Erf": erf,
    "TopK": topk,
    "CastLike": cast_like,
    "ScatterND": scatter_nd,
    "Einsum": einsum,
}
