"""Numpy kernels for the ONNX loss ops: NegativeLogLikelihoodLoss (opset 22) and
SoftmaxCrossEntropyLoss (opset 13).

Input (N, C) or (N, C, d1, ..., dk), target (N) or (N, d1, ..., dk) of class indices,
optional weight (C).  Each element's loss is ``-input[n, target, d...] * weight[target]``,
0 where the target equals ``ignore_index``; ``reduction`` ``none`` keeps them, ``sum`` adds
them, ``mean`` divides that sum by the sum of the weights taken (the count of elements not
ignored without weights).  SoftmaxCrossEntropyLoss first takes the log-softmax of the scores
over C: ``x - m - log(sum(exp(x - m)))``, ``m`` the maximum over C by comparisons.

Arithmetic (firmware_spec/arithmetic.md): float64, sums numpy's pairwise summation in the
elements' row-major order, exp and log by :mod:`dvsdk.hw.elementary`, rounded once to the
input type.  No onnx import (the board has only numpy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary

__all__ = ["LOSS_KERNELS", "REDUCTIONS"]

Arr = np.ndarray
Attrs = dict[str, Any]

#: the values of the losses' ``reduction`` attribute
REDUCTIONS = ("none", "sum", "mean")


def _nll(op: str, logp: Arr, target: Arr, weight: Arr | None, attrs: Attrs) -> Arr:
    """The reduced loss in float64 (``logp`` float64, shape (N, C, ...))."""
    red = attrs.get("reduction", "mean")
    if isinstance(red, bytes):
        red = red.decode()
    if red not in REDUCTIONS:
        raise ModelError(f"{op} reduction must be none, sum or mean", field=f"{op}.reduction",
                         value=red, limit=", ".join(REDUCTIONS))
    if logp.ndim < 2 or target.shape != logp.shape[:1] + logp.shape[2:]:
        raise ModelError(f"{op} target must have the input's shape without C",
                         field=f"{op}.target", value=list(target.shape),
                         limit=list(logp.shape[:1] + logp.shape[2:]))
    c = logp.shape[1]
    t = np.asarray(target).astype(np.int64)
    ii = attrs.get("ignore_index")
    keep = np.ones(t.shape, bool) if ii is None else t != int(ii)
    bad = keep & ((t < 0) | (t >= c))
    if np.any(bad):
        raise ModelError(f"{op} target class out of range", field=f"{op}.target",
                         value=int(t[bad][0]), limit=f"[0, {c - 1}]")
    tc = np.where(keep, t, 0)
    picked = np.take_along_axis(logp, tc[:, None], axis=1)[:, 0]
    w = np.ones(t.shape) if weight is None else np.asarray(weight).astype(np.float64)[tc]
    w = np.where(keep, w, 0.0)
    loss = np.where(keep, -picked * w, 0.0)
    if red == "none":
        return loss
    total = loss.sum()
    if red == "sum":
        return total
    return total / w.sum()


def negative_log_likelihood_loss(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX NegativeLogLikelihoodLoss-22 (see the module docstring)."""
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    loss = _nll("NegativeLogLikelihoodLoss", x.astype(np.float64), target, weight, attrs)
    return [np.asarray(loss).astype(x.dtype)]


def softmax_cross_entropy_loss(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX SoftmaxCrossEntropyLoss-13: the loss, and the log-softmax over C (``log_prob``,
    the input's shape and type)."""
    x, target = inputs[0], inputs[1]
    weight = inputs[2] if len(inputs) > 2 else None
    if x.ndim < 2:
        raise ModelError("SoftmaxCrossEntropyLoss scores need a class axis",
                         field="SoftmaxCrossEntropyLoss.scores", value=list(x.shape),
                         limit="(N, C, ...)")
    xd = x.astype(np.float64)
    m = arith.reduce_max(xd, axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    d = xd - m
    logp = d - elementary.log(elementary.exp(d).sum(axis=1, keepdims=True))
    loss = _nll("SoftmaxCrossEntropyLoss", logp, target, weight, attrs)
    return [np.asarray(loss).astype(x.dtype), logp.astype(x.dtype)]


LOSS_KERNELS = {
    "NegativeLogLikelihoodLoss": negative_log_likelihood_loss,
    "SoftmaxCrossEntropyLoss": softmax_cross_entropy_loss,
}
