"""Numpy kernels for normalizations, activations and reductions the DV700 cannot run
(ONNX semantics, issue 28).

Normalizations: RMSNormalization (opset 23), LpNormalization (opset 22), GroupNormalization
(opset 21: scale and bias per channel), MeanVarianceNormalization (opset 13).
Activations: Celu (12), Mish (22), Swish (24), ThresholdedRelu (22), Shrink (9), Hardmax
(13; before 13 on the input coerced to 2-D), IsInf and IsNaN (20).
Reductions: ReduceL1, ReduceLogSum, ReduceLogSumExp (opset 18; before 18 ``axes`` is an
attribute, which the ONNX frontend turns into the input).

The arithmetic is the runtime's CPU steps' (firmware_spec/arithmetic.md): sums over axes by
numpy's pairwise summation in float64, transcendental functions by
:mod:`dvsdk.hw.elementary` in float64, the rest float64 operations rounded once to the
output type; the arg-max of Hardmax by comparisons only.  No onnx import (the board has
only numpy).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary
from .args import axis_attr as _axis

__all__ = ["NORM_KERNELS", "REDUCE_OPS"]

Arr = np.ndarray
Attrs = dict[str, Any]


def _f64(x: Arr) -> Arr:
    return np.asarray(x).astype(np.float64)


# --------------------------------------------------------------------------- normalizations
def rms_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX RMSNormalization-23: ``Y = X / sqrt(mean(X**2) + epsilon) * scale`` over the axes
    ``axis..rank-1``; the mean a pairwise sum in float64 divided by the count."""
    x, scale = inputs[0], inputs[1]
    axis = _axis(attrs, x.ndim, -1, "RMSNormalization")
    eps = float(attrs.get("epsilon", 1e-5))
    xd = _f64(x)
    ms = (xd * xd).mean(axis=tuple(range(axis, x.ndim)), keepdims=True)
    inv = 1.0 / np.sqrt(ms + eps)
    return [(xd * inv * _f64(scale)).astype(x.dtype)]


def lp_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX LpNormalization-22: ``x / ||x||_p`` along ``axis`` (p = 1: sum of |x|; p = 2:
    square root of the sum of squares; pairwise sums in float64); a zero norm gives 0."""
    x = inputs[0]
    axis = _axis(attrs, x.ndim, -1, "LpNormalization")
    p = int(attrs.get("p", 2))
    if p not in (1, 2):
        raise ModelError("LpNormalization p must be 1 or 2", field="LpNormalization.p",
                         value=p, limit="1, 2")
    xd = _f64(x)
    if p == 1:
        norm = np.abs(xd).sum(axis=axis, keepdims=True)
    else:
        norm = np.sqrt((xd * xd).sum(axis=axis, keepdims=True))
    y = np.where(norm == 0, 0.0, xd / np.where(norm == 0, 1.0, norm))
    return [y.astype(x.dtype)]


def group_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX GroupNormalization-21: X (N, C, ...) split into ``num_groups`` groups of
    channels; each (sample, group) normalized by its mean and biased variance (pairwise
    sums in float64), ``(x - mean) / sqrt(var + epsilon)``, then ``* scale[c] + bias[c]``."""
    x, scale, bias = inputs[0], inputs[1], inputs[2]
    g = int(attrs.get("num_groups", 0))
    eps = float(attrs.get("epsilon", 1e-5))
    if x.ndim < 2 or g < 1 or x.shape[1] % g:
        raise ModelError("GroupNormalization num_groups must divide the channels",
                         field="GroupNormalization.num_groups", value=g,
                         limit=x.shape[1] if x.ndim >= 2 else None)
    c = x.shape[1]
    if scale.size != c or bias.size != c:
        raise ModelError("GroupNormalization scale and bias need one value per channel "
                         "(opset 21)", field="GroupNormalization.scale",
                         value=(scale.size, bias.size), limit=c)
    xd = _f64(x).reshape(x.shape[0], g, -1)
    mean = xd.mean(axis=2, keepdims=True)
    d = xd - mean
    var = (d * d).mean(axis=2, keepdims=True)
    y = (d * (1.0 / np.sqrt(var + eps))).reshape(x.shape)
    cs = (c,) + (1,) * (x.ndim - 2)
    y = y * _f64(scale).reshape(cs) + _f64(bias).reshape(cs)
    return [y.astype(x.dtype)]


def mean_variance_normalization(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX MeanVarianceNormalization-13: ``(X - mean) / (sqrt(var) + 1e-9)`` over ``axes``
    (default 0, 2, 3); mean and biased variance pairwise sums in float64."""
    x = inputs[0]
    axes = attrs.get("axes")
    axes = [0, 2, 3] if axes is None else [int(a) for a in np.asarray(axes).reshape(-1)]
    for a in axes:
        if not -x.ndim <= a < x.ndim:
            raise ModelError("MeanVarianceNormalization axis out of range",
                             field="MeanVarianceNormalization.axes", value=a,
                             limit=f"[{-x.ndim}, {x.ndim - 1}]")
    ax = tuple(sorted({a % x.ndim for a in axes}))
    xd = _f64(x)
    mean = xd.mean(axis=ax, keepdims=True)
    d = xd - mean
    var = (d * d).mean(axis=ax, keepdims=True)
    return [(d / (np.sqrt(var) + 1e-9)).astype(x.dtype)]


# --------------------------------------------------------------------------- activations
def celu(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Celu-12: ``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` in float64."""
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    if alpha == 0.0:
        raise ModelError("Celu alpha must not be 0", field="Celu.alpha", value=alpha,
                         limit="nonzero")
    xd = _f64(x)
    neg = alpha * elementary.expm1(xd / alpha)
    y = np.where(xd > 0, xd, 0.0) + np.where(neg < 0, neg, 0.0)
    return [np.where(np.isnan(xd), xd, y).astype(x.dtype)]


def _softplus64(xd: Arr) -> Arr:
    return np.where(xd > 0, xd, 0.0) + elementary.log1p(elementary.exp(-np.abs(xd)))


def mish(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Mish-22: ``x * tanh(softplus(x))``, softplus ``max(x, 0) + log1p(exp(-|x|))``,
    in float64."""
    x = inputs[0]
    xd = _f64(x)
    return [(xd * elementary.tanh(_softplus64(xd))).astype(x.dtype)]


def swish(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Swish-24: ``x * sigmoid(alpha * x)`` in float64."""
    x = inputs[0]
    alpha = float(attrs.get("alpha", 1.0))
    xd = _f64(x)
    return [(xd * elementary.sigmoid(alpha * xd)).astype(x.dtype)]


def thresholded_relu(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX ThresholdedRelu-22: ``x`` where ``x > alpha``, else 0 (a select)."""
    x = inputs[0]
    alpha = x.dtype.type(float(attrs.get("alpha", 1.0)))
    return [np.where(x > alpha, x, np.zeros((), x.dtype))]


def shrink(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Shrink-9: ``x + bias`` where ``x < -lambd``, ``x - bias`` where ``x > lambd``,
    else 0; in float64, rounded once."""
    x = inputs[0]
    lambd, bias = float(attrs.get("lambd", 0.5)), float(attrs.get("bias", 0.0))
    xd = _f64(x)
    y = np.where(xd < -lambd, xd + bias, np.where(xd > lambd, xd - bias, 0.0))
    return [y.astype(x.dtype)]


def hardmax(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX Hardmax-13: 1 at the first largest element along ``axis`` (a NaN counts as the
    largest, as numpy's and the ONNX reference's argmax), 0 elsewhere.  Opsets before 13
    (``opset`` recorded by the frontend) coerce the input to 2-D at ``axis`` (default 1)."""
    x = inputs[0]
    opset = int(attrs.get("opset", 13))
    axis = _axis(attrs, x.ndim, -1 if opset >= 13 else 1, "Hardmax")
    if x.size == 0:
        return [x.copy()]
    work = x
    if opset < 13:
        work = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1)
        axis = 1
    idx = np.expand_dims(np.argmax(work, axis=axis), axis)
    y = np.zeros_like(work)
    np.put_along_axis(y, idx, 1, axis=axis)
    return [y.reshape(x.shape)]


def is_inf(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX IsInf-20: +inf (``detect_positive``) and -inf (``detect_negative``) -> true."""
    x = inputs[0]
    pos, neg = int(attrs.get("detect_positive", 1)), int(attrs.get("detect_negative", 1))
    return [(np.isposinf(x) & bool(pos)) | (np.isneginf(x) & bool(neg))]


def is_nan(inputs: list, attrs: Attrs) -> list[Arr]:
    """ONNX IsNaN-20."""
    return [np.isnan(inputs[0])]


# --------------------------------------------------------------------------- reductions
def _reduce(fn):
    def kernel(inputs: list, attrs: Attrs) -> list[Arr]:
        x = inputs[0]
        ax_in = inputs[1] if len(inputs) > 1 else None
        if ax_in is not None:
            axes = [int(a) for a in np.asarray(ax_in).reshape(-1)]
        elif attrs.get("axes") is not None:
            axes = [int(a) for a in np.asarray(attrs["axes"]).reshape(-1)]
        else:
            axes = []
        if not axes and attrs.get("noop_with_empty_axes", 0):
            ax: tuple = ()   # no reduction: the element-wise part (|x|, log x), as onnxruntime
        else:
            ax = tuple(range(x.ndim)) if not axes else tuple(sorted({a % x.ndim for a in axes}))
        keep = bool(attrs.get("keepdims", 1))
        return [np.asarray(fn(x, ax, keep)).astype(x.dtype)]
    return kernel


def _l1(x: Arr, ax: tuple, keep: bool) -> Arr:
    if x.dtype.kind in "iu":  # integers: exact (numpy's wrapping like ReduceSum's)
        return np.abs(x).sum(axis=ax, keepdims=keep)
    return np.abs(_f64(x)).sum(axis=ax, keepdims=keep)


def _log_sum(x: Arr, ax: tuple, keep: bool) -> Arr:
    return elementary.log(_f64(x).sum(axis=ax, keepdims=keep))


def _log_sum_exp(x: Arr, ax: tuple, keep: bool) -> Arr:
    """``m + log(sum(exp(x - m)))`` with ``m`` the maximum (by comparisons; an infinite or
    NaN maximum gives ``log(sum(exp(x)))`` directly, as the formula does)."""
    xd = _f64(x)
    m = arith.reduce_max(xd, axis=ax, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    s = elementary.exp(xd - m).sum(axis=ax, keepdims=True)
    y = elementary.log(s) + m
    return y if keep else np.squeeze(y, axis=ax)


#: the reductions here (the frontend's and the shape rules' lists take them in)
REDUCE_OPS = ("ReduceL1", "ReduceLogSum", "ReduceLogSumExp")

NORM_KERNELS = {
    "RMSNormalization": rms_normalization,
    "LpNormalization": lp_normalization,
    "GroupNormalization": group_normalization,
    "MeanVarianceNormalization": mean_variance_normalization,
    "Celu": celu,
    "Mish": mish,
    "Swish": swish,
    "ThresholdedRelu": thresholded_relu,
    "Shrink": shrink,
    "Hardmax": hardmax,
    "IsInf": is_inf,
    "IsNaN": is_nan,
    "ReduceL1": _reduce(_l1),
    "ReduceLogSum": _reduce(_log_sum),
    "ReduceLogSumExp": _reduce(_log_sum_exp),
}
