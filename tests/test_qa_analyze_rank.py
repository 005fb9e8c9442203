"""dvsdk analyze's ranking against the one-layer-at-a-time ground truth (issue 29 item 1).

The ground truth is computed here, independently of dvsdk: one weighted layer at a time,
its weights are replaced in the ONNX model by their 8-bit codebook values (the scheme of
``dvsdk/compiler/quantize.py`` and ``dvsdk.hw.weights.quantize_weights``, written again
below: 255 one-dimensional k-means centroids of the nonzero weights plus 0.0, started at
the Panter-Dite density p^(1/3), FP16 table, nearest entry), onnxruntime runs the model,
and the final output's error against the float model is that layer's real damage.
``analyze`` on the fully quantized net.bin must rank the layers the same way (Spearman
>= 0.8, ranks with plain numpy) on a MobileNet-like and an EfficientNet-Lite0-like
stand-in: depthwise separable convolutions, ReLU6, inverted residuals, folded-BN-like
per-channel weight scales whose spread differs from layer to layer (seeded)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.qa.analyze import analyze, worst

# -- stand-ins -------------------------------------------------------------------------------

class _Net:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: dict[str, np.ndarray] = {}
        self.weighted: list[str] = []

    def _name(self, hint: str) -> str:
        return f"{hint}{len(self.nodes) + len(self.inits)}"

    def const(self, v, hint: str) -> str:
        name = self._name(hint)
        self.inits[name] = np.asarray(v, np.float32)
        return name

    def node(self, op: str, ins: list[str], **attrs) -> str:
        out, name = self._name(op.lower()), self._name(op)
        self.nodes.append(helper.make_node(op, ins, [out], name=name, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int = 1, stride: int = 1,
             group: int = 1, act: bool = True) -> str:
        fan = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * (2.0 / fan) ** 0.5
        spread = self.rng.uniform(0.05, 1.8 if group > 1 else 1.2)  # folded BN's scales
        w *= np.exp(self.rng.normal(0, spread, (cout, 1, 1, 1)))
        y = self.node("Conv", [x, self.const(w, "W"), self.const(
            self.rng.normal(0, 0.2, cout), "B")], kernel_shape=[k, k],
            strides=[stride] * 2, pads=[k // 2] * 4, group=group)
        self.weighted.append(self.nodes[-1].name)
        return self.node("Clip", [y, self.const(0, "lo"), self.const(6, "hi")]) if act else y

    def model(self, x: str, c: int, size: int, classes: int = 10) -> onnx.ModelProto:
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])])
        w = self.rng.standard_normal((classes, c)) / c ** 0.5
        y = self.node("Gemm", [x, self.const(w, "fcW"), self.const(
            self.rng.normal(0, 0.1, classes), "fcB")], transB=1)
        self.weighted.append(self.nodes[-1].name)
        g = helper.make_graph(
            self.nodes, "standin",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
            [helper.make_tensor_value_info(y, TensorProto.FLOAT, None)],
            [numpy_helper.from_array(v, k) for k, v in self.inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def mobilenet_like(seed: int = 1, size: int = 32) -> tuple[onnx.ModelProto, list[str]]:
    """MobileNetV1: a 3x3 stem, then depthwise 3x3 + pointwise 1x1 pairs with ReLU6."""
    b = _Net(seed)
    x, c = b.conv("x", 3, 32, k=3, stride=2), 32
    for cout, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (256, 1)):
        x = b.conv(x, c, c, k=3, stride=stride, group=c)
        x, c = b.conv(x, c, cout), cout
    return b.model(x, c, size), b.weighted


def lite0_like(seed: int = 2, size: int = 32) -> tuple[onnx.ModelProto, list[str]]:
    """EfficientNet-Lite0: stem, MBConv blocks (1x1 expand x6, depthwise 3x3/5x5, 1x1
    project without activation, residual Add when the shape allows), 1x1 head; ReLU6."""
    b = _Net(seed)
    x, c = b.conv("x", 3, 16, k=3, stride=2), 16
    for t, k, cout, stride, n in ((1, 3, 8, 1, 1), (6, 3, 12, 2, 2), (6, 5, 20, 2, 2),
                                  (6, 3, 40, 2, 2), (6, 5, 48, 1, 1)):
        for i in range(n):
            s = stride if i == 0 else 1
            h = b.conv(x, c, c * t) if t != 1 else x
            h = b.conv(h, c * t, c * t, k=k, stride=s, group=c * t)
            h = b.conv(h, c * t, cout, act=False)
            x = b.node("Add", [x, h]) if s == 1 and c == cout else h
            c = cout
    return b.model(b.conv(x, c, 128), 128, size), b.weighted


# -- the ground truth ------------------------------------------------------------------------

def codebook_q8(w: np.ndarray, iters: int = 100) -> np.ndarray:
    """``w`` on its 8-bit table: entry 0 is 0.0, entries 1..255 the k-means centroids of
    the nonzero weights (exact with at most 255 distinct FP16 values), FP16."""
    flat = w.astype(np.float64).ravel()
    s = np.sort(flat[flat != 0])
    distinct = np.unique(s.astype(np.float16)).astype(np.float64)
    if distinct.size <= 255:
        table = distinct
    else:   # Lloyd on the sorted values, started at the p^(1/3) density
        nb = min(2048, max(1, s.size // 32))
        edges = s[np.linspace(0, s.size - 1, nb + 1).round().astype(np.int64)]
        cdf = np.concatenate([[0.0], np.cumsum(np.diff(edges) ** (2.0 / 3.0))])
        c = np.interp((np.arange(255) + 0.5) / 255, cdf / cdf[-1], edges)
        csum = np.concatenate([[0.0], np.cumsum(s)])
        rng = np.random.default_rng(0)
        for _ in range(iters):
            e = np.concatenate([[0], np.searchsorted(s, (c[:-1] + c[1:]) / 2), [s.size]])
            n = np.diff(e)
            new = np.where(n > 0, (csum[e[1:]] - csum[e[:-1]]) / np.maximum(n, 1), c)
            if (n == 0).any():   # an empty cluster restarts at a random distinct value
                new[n == 0] = rng.choice(distinct, int((n == 0).sum()), replace=False)
            new.sort()
            moved, c = np.abs(new - c).max(), new
            if not (n == 0).any() and moved <= 1e-9 * (s[-1] - s[0]):
                break
        table = c.astype(np.float16).astype(np.float64)
    table = np.unique(np.concatenate([[0.0], table]))
    i = np.clip(np.searchsorted(table, flat), 1, table.size - 1)
    lo, hi = table[i - 1], table[i]
    return np.where(flat - lo <= hi - flat, lo, hi).reshape(w.shape).astype(np.float32)


def output_error(y: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(y - ref).max() / np.ptp(ref))


def ground_truth(model: onnx.ModelProto, layers: list[str], x: np.ndarray | dict
                 ) -> dict[str, float]:
    """Each layer's damage: the output error (:func:`output_error`) with that layer's
    weights alone quantized by :func:`codebook_q8`; ``x`` the input "x", or the feeds."""
    feeds = x if isinstance(x, dict) else {"x": x}

    def run(m):
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        return sess.run(None, feeds)[0]

    ref, damage = run(model), {}
    for layer in layers:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        node = next(n for n in m.graph.node if n.name == layer)
        init = next(t for t in m.graph.initializer if t.name == node.input[1])
        init.CopyFrom(numpy_helper.from_array(codebook_q8(numpy_helper.to_array(init)),
                                              init.name))
        damage[layer] = output_error(run(m), ref)
    return damage


def spearman(a, b) -> float:
    def ranks(v):   # average ranks of ties
        v = np.asarray(v, np.float64)
        order = np.argsort(v, kind="stable")
        r = np.empty(v.size)
        r[order] = np.arange(v.size, dtype=np.float64)
        for u in np.unique(v):
            r[v == u] = r[v == u].mean()
        return r
    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1])


# -- the tests -------------------------------------------------------------------------------

def _ranked(build, seed: int):
    model, layers = build(seed)
    x = np.random.default_rng(seed + 50).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    truth = ground_truth(model, layers, x)
    net = dvsdk.compile(model.SerializeToString(), quantize=True, golden=False, chain=False)
    with dvsdk.load(net) as n:
        rows = analyze(n, model.SerializeToString(), x)
    by_op = {op: r for r in rows for op in r.ops}
    assert set(layers) <= set(by_op)     # a command (or CPU step) per weighted layer
    return layers, truth, by_op, rows


@pytest.mark.parametrize("build", [mobilenet_like, lite0_like], ids=["mobilenet", "lite0"])
@pytest.mark.parametrize("seed", [0, 1])
def test_ranking_follows_the_one_layer_at_a_time_ground_truth(build, seed):
    layers, truth, by_op, rows = _ranked(build, seed)
    contrib = [by_op[n].contribution for n in layers]
    rho = spearman([truth[n] for n in layers], contrib)
    print(f"{build.__name__} seed {seed}: {len(layers)} layers, Spearman {rho:.3f}")
    assert rho >= 0.8
    # the layers worst() names are among the truly worst
    top = [n for n in sorted(layers, key=lambda n: -truth[n])][: len(layers) // 3]
    named = {op for r in worst(rows, 3) for op in r.ops}
    assert len(named & set(top)) >= 2
