"""ONNX recurrent layers as CPU kernels: LSTM (opset 14), GRU (opset 14) and RNN (opset 14).

Every ONNX option: ``direction`` forward / reverse / bidirectional; ``activations`` (default
Sigmoid/Tanh/Tanh for LSTM, Sigmoid/Tanh for GRU, Tanh for RNN, per direction) with
``activation_alpha`` / ``activation_beta`` consumed in order by the activations that take
parameters (as onnxruntime reads them); ``clip`` (the gates' pre-activations clamped to
``[-clip, clip]``); optional ``B``, ``sequence_lens``, ``initial_h``, ``initial_c``, ``P``
(peepholes); ``layout`` 0 (``X`` is ``[seq, batch, input]``) and 1 (``[batch, seq,
input]``); LSTM ``input_forget`` (f = 1 - i); GRU ``linear_before_reset``.  With
``sequence_lens``, batch item b runs its first ``L[b]`` steps only (the reverse direction
from step ``L[b] - 1`` down), Y is 0 past them, and Y_h / Y_c hold the state after the
last step run.

Arithmetic (firmware_spec/arithmetic.md, the CPU steps): ``X W^T`` for all steps at once
and ``H R^T`` at each step by :func:`dvsdk.hw.arith.matmul_nd` (each output summed in order
k = 0..K-1); biases added to the products in the input's float type (``((X W^T + Wb) + H R^T)
+ Rb``, in that order; peepholes after them); the activations in float64
(:mod:`dvsdk.hw.elementary`; Relu/clips compare-select) rounded once to the input type;
element-wise products and sums in the input type.  A Python loop over the time steps
only.  No onnx import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ModelError
from ..hw import arith, elementary

__all__ = ["RECURRENT_KERNELS", "lstm", "gru", "rnn"]

Arr = np.ndarray
Act = Callable[[Arr], Arr]

#: activation name -> (number of parameters it reads, default alpha, default beta)
_PARAMS = {"Sigmoid": 0, "Tanh": 0, "Relu": 0, "Softsign": 0, "Softplus": 0,
           "HardSigmoid": 2, "LeakyRelu": 1, "ThresholdedRelu": 1, "ScaledTanh": 2,
           "Affine": 2, "Elu": 1}
_DEFAULTS = {"HardSigmoid": (0.2, 0.5), "LeakyRelu": (0.01, 0.0),
             "ThresholdedRelu": (1.0, 0.0), "ScaledTanh": (1.0, 1.0), "Affine": (1.0, 0.0),
             "Elu": (1.0, 0.0)}


def _activation(name: str, alpha: float, beta: float, dt: np.dtype) -> Act:
    def f64(fn: Callable[[Arr], Arr]) -> Act:
        return lambda x: fn(x.astype(np.float64)).astype(dt)

    zero = np.zeros((), dt)
    table: dict[str, Act] = {
        "Sigmoid": f64(elementary.sigmoid),
        "Tanh": f64(elementary.tanh),
        "Relu": lambda x: arith.maximum(x, zero),
        "Softsign": f64(lambda x: x / (1.0 + np.abs(x))),
        "Softplus": f64(lambda x: np.where(x > 0, x, 0.0) + elementary.log1p(
            elementary.exp(-np.abs(x)))),
        "HardSigmoid": f64(lambda x: arith.clip(alpha * x + beta, 0.0, 1.0)),
        "LeakyRelu": f64(lambda x: np.where(x >= 0, x, alpha * x)),
        "ThresholdedRelu": f64(lambda x: np.where(x > alpha, x, 0.0)),
        "ScaledTanh": f64(lambda x: alpha * elementary.tanh(beta * x)),
        "Affine": f64(lambda x: alpha * x + beta),
        "Elu": f64(lambda x: elementary.elu(x, alpha)),
    }
    return table[name]


def _activations(op: str, attrs: dict[str, Any], defaults: list[str], dirs: int,
                 dt: np.dtype) -> list[list[Act]]:
    names = attrs.get("activations") or defaults * dirs
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) != len(defaults) * dirs:
        raise ModelError(f"{op} activations: {len(defaults)} per direction",
                         field=f"{op}.activations", value=names, limit=len(defaults) * dirs)
    alphas = [float(a) for a in attrs.get("activation_alpha") or []]
    betas = [float(b) for b in attrs.get("activation_beta") or []]
    fns = []
    for n in names:
        key = next((k for k in _PARAMS if k.lower() == n.lower()), None)
        if key is None:
            raise ModelError(f"{op} activation not supported", field=f"{op}.activations",
                             value=n, limit=sorted(_PARAMS))
        a, b = _DEFAULTS.get(key, (0.0, 0.0))
        if _PARAMS[key] >= 1 and alphas:
            a = alphas.pop(0)
        if _PARAMS[key] >= 2 and betas:
            b = betas.pop(0)
        fns.append(_activation(key, a, b, dt))
    k = len(defaults)
    return [fns[d * k:(d + 1) * k] for d in range(dirs)]


class _Setup:
    """What LSTM, GRU and RNN read alike: X in [seq, batch, input], the direction count,
    hidden size, lengths, initial states, clip, activations."""

    def __init__(self, op: str, inputs: list, attrs: dict[str, Any], gates: int,
                 acts: list[str]) -> None:
        x, w = inputs[0], inputs[1]
        self.layout = int(attrs.get("layout", 0))
        if self.layout not in (0, 1):
            raise ModelError(f"{op} layout must be 0 or 1", field=f"{op}.layout",
                             value=self.layout, limit="0, 1")
        self.x = np.swapaxes(x, 0, 1) if self.layout else x
        self.dt = x.dtype
        direction = attrs.get("direction", "forward")
        if isinstance(direction, bytes):
            direction = direction.decode()
        if direction not in ("forward", "reverse", "bidirectional"):
            raise ModelError(f"{op} direction not supported", field=f"{op}.direction",
                             value=direction, limit="forward, reverse, bidirectional")
        self.reverse = [False, True] if direction == "bidirectional" else [
            direction == "reverse"]
        self.dirs = len(self.reverse)
        self.hidden = w.shape[1] // gates
        if w.shape[0] != self.dirs or (attrs.get("hidden_size") is not None
                                       and int(attrs["hidden_size"]) != self.hidden):
            raise ModelError(f"{op} W does not match direction and hidden_size",
                             field=f"{op}.W", value=list(w.shape),
                             limit=[self.dirs, gates * int(attrs.get("hidden_size") or 0)])
        seq, batch = self.x.shape[:2]
        self.seq, self.batch = seq, batch
        lens = inputs[4] if len(inputs) > 4 else None
        self.lens = (np.full(batch, seq, np.int64) if lens is None
                     else np.asarray(lens, np.int64).reshape(-1))
        if self.lens.shape != (batch,) or np.any(self.lens < 0) or np.any(self.lens > seq):
            raise ModelError(f"{op} sequence_lens out of range", field=f"{op}.sequence_lens",
                             value=self.lens.tolist(), limit=f"{batch} values in [0, {seq}]")
        h0 = inputs[5] if len(inputs) > 5 else None
        shape = (self.dirs, batch, self.hidden)
        if h0 is not None and self.layout:
            h0 = np.swapaxes(h0, 0, 1)
        self.h0 = np.zeros(shape, self.dt) if h0 is None else np.asarray(h0, self.dt)
        clip = attrs.get("clip")
        self.clip = None if clip is None else float(clip)
        self.acts = _activations(op, attrs, acts, self.dirs, self.dt)

    def pre(self, v: Arr) -> Arr:
        """A gate's pre-activation, clamped to +-clip when the op has one."""
        return v if self.clip is None else arith.clip(v, -self.clip, self.clip).astype(self.dt)

    def steps(self, d: int) -> range:
        return range(self.seq - 1, -1, -1) if self.reverse[d] else range(self.seq)

    def xw(self, w: Arr, bias: Arr | None) -> Arr:
        """``X W^T (+ Wb)`` for every step: [seq, batch, gates * hidden]."""
        x2 = self.x.reshape(self.seq * self.batch, -1)
        y = arith.matmul_nd(x2, np.ascontiguousarray(w.T)).reshape(self.seq, self.batch, -1)
        return y if bias is None else y + bias

    def emit(self, y: Arr, t: int, new: Arr, *state: Arr) -> tuple[Arr, ...]:
        """Step ``t``'s output ``new`` into ``y`` for the sequences still running (zeros
        past a sequence's length), and each state moved to its new value only there:
        ``state`` as (old, new) pairs, the kept states returned in order."""
        live = (t < self.lens)[:, None]
        y[t] = np.where(live, new, self.dt.type(0))
        return tuple(np.where(live, n, o) for o, n in zip(state[::2], state[1::2]))

    def outputs(self, ys: list[Arr], finals: list[list[Arr]]) -> list[Arr]:
        y = np.stack(ys, axis=1)  # [seq, dirs, batch, hidden]
        states = [np.stack(f, axis=0) for f in finals]  # [dirs, batch, hidden] each
        if self.layout:
            y = y.transpose(2, 0, 1, 3)
            states = [np.swapaxes(s, 0, 1) for s in states]
        return [np.ascontiguousarray(y, self.dt),
                *(np.ascontiguousarray(s, self.dt) for s in states)]


def _bias(inputs: list, d: int, n: int, dt: np.dtype) -> tuple[Arr | None, Arr | None]:
    b = inputs[3] if len(inputs) > 3 else None
    if b is None:
        return None, None
    b = np.asarray(b, dt)[d]
    return b[:n], b[n:]


def _gate(s: _Setup, xw: Arr, hr: Arr, rb: Arr | None, sl: slice) -> Arr:
    v = xw[:, sl] + hr[:, sl]
    return s.pre(v if rb is None else v + rb[sl])


def lstm(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """ONNX LSTM-14 (gate order i, o, f, c; see the module docstring): Y, Y_h, Y_c."""
    s = _Setup("LSTM", inputs, attrs, 4, ["Sigmoid", "Tanh", "Tanh"])
    w, r, dt, hs = inputs[1], inputs[2], s.dt, s.hidden
    c0 = inputs[6] if len(inputs) > 6 else None
    if c0 is not None and s.layout:
        c0 = np.swapaxes(c0, 0, 1)
    c0 = np.zeros_like(s.h0) if c0 is None else np.asarray(c0, dt)
    p = inputs[7] if len(inputs) > 7 else None
    couple = int(attrs.get("input_forget", 0))
    gi, go, gf, gc = (slice(k * hs, (k + 1) * hs) for k in range(4))
    ys, hs_out, cs_out = [], [], []
    for d in range(s.dirs):
        f, g, h = s.acts[d]
        wb, rb = _bias(inputs, d, 4 * hs, dt)
        xw = s.xw(w[d], wb)
        rt = np.ascontiguousarray(r[d].T)
        pi, po, pf = (None, None, None) if p is None else (
            np.asarray(p, dt)[d][k * hs:(k + 1) * hs] for k in range(3))
        hcur, ccur = s.h0[d].copy(), c0[d].copy()
        y = np.zeros((s.seq, s.batch, hs), dt)
        for t in s.steps(d):
            hr = arith.matmul_nd(hcur, rt)
            vi, vf = xw[t][:, gi] + hr[:, gi], xw[t][:, gf] + hr[:, gf]
            if rb is not None:
                vi, vf = vi + rb[gi], vf + rb[gf]
            if pi is not None:
                vi, vf = vi + pi * ccur, vf + pf * ccur
            it = f(s.pre(vi))
            ft = (dt.type(1) - it) if couple else f(s.pre(vf))
            ct = g(_gate(s, xw[t], hr, rb, gc))
            cnew = ft * ccur + it * ct
            vo = xw[t][:, go] + hr[:, go]
            if rb is not None:
                vo = vo + rb[go]
            if po is not None:
                vo = vo + po * cnew
            hnew = f(s.pre(vo)) * h(cnew)
            hcur, ccur = s.emit(y, t, hnew, hcur, hnew, ccur, cnew)
        ys.append(y)
        hs_out.append(hcur)
        cs_out.append(ccur)
    return s.outputs(ys, [hs_out, cs_out])


def gru(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """ONNX GRU-14 (gate order z, r, h; see the module docstring): Y, Y_h."""
    s = _Setup("GRU", inputs, attrs, 3, ["Sigmoid", "Tanh"])
    w, r, dt, hs = inputs[1], inputs[2], s.dt, s.hidden
    lbr = int(attrs.get("linear_before_reset", 0))
    gz, gr, gh = (slice(k * hs, (k + 1) * hs) for k in range(3))
    ys, finals = [], []
    for d in range(s.dirs):
        f, g = s.acts[d]
        wb, rb = _bias(inputs, d, 3 * hs, dt)
        xw = s.xw(w[d], wb)
        rzr = np.ascontiguousarray(r[d][: 2 * hs].T)
        rh = np.ascontiguousarray(r[d][2 * hs:].T)
        hcur = s.h0[d].copy()
        y = np.zeros((s.seq, s.batch, hs), dt)
        for t in s.steps(d):
            hr = arith.matmul_nd(hcur, rzr)
            zt = f(_gate(s, xw[t], hr, rb, gz))
            rt = f(_gate(s, xw[t], hr, rb, gr))
            if lbr:
                lin = arith.matmul_nd(hcur, rh)
                if rb is not None:
                    lin = lin + rb[gh]
                v = xw[t][:, gh] + rt * lin
            else:
                v = xw[t][:, gh] + arith.matmul_nd(rt * hcur, rh)
                if rb is not None:
                    v = v + rb[gh]
            ht = g(s.pre(v))
            hnew = (dt.type(1) - zt) * ht + zt * hcur
            (hcur,) = s.emit(y, t, hnew, hcur, hnew)
        ys.append(y)
        finals.append(hcur)
    return s.outputs(ys, [finals])


def rnn(inputs: list, attrs: dict[str, Any]) -> list[Arr]:
    """ONNX RNN-14: ``H = f(X W^T + H R^T + Wb + Rb)``: Y, Y_h."""
    s = _Setup("RNN", inputs, attrs, 1, ["Tanh"])
    w, r, dt = inputs[1], inputs[2], s.dt
    ys, finals = [], []
    for d in range(s.dirs):
        (f,) = s.acts[d]
        wb, rb = _bias(inputs, d, s.hidden, dt)
        xw = s.xw(w[d], wb)
        rt = np.ascontiguousarray(r[d].T)
        hcur = s.h0[d].copy()
        y = np.zeros((s.seq, s.batch, s.hidden), dt)
        for t in s.steps(d):
            hnew = f(_gate(s, xw[t], arith.matmul_nd(hcur, rt), rb, slice(None)))
            (hcur,) = s.emit(y, t, hnew, hcur, hnew)
        ys.append(y)
        finals.append(hcur)
    return s.outputs(ys, [finals])


RECURRENT_KERNELS = {"LSTM": lstm, "GRU": gru, "RNN": rnn}
