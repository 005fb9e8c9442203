"""Transformer stand-ins of issue 28 item 5, written as exporters write them.

* :func:`vit_tiny`: a ViT-tiny-like classifier (Dosovitskiy et al. 2021, DeiT-tiny's
  shape, smaller): a strided-conv patch embedding, a class token and position embeddings,
  pre-norm blocks of multi-head self-attention (one fused qkv projection, split by
  Reshape/Transpose/Gather as ``torch.onnx`` writes ``qkv.unbind(0)``) and an MLP with the
  exact GELU, then LayerNorm and a linear head on the class token.  Opset 17:
  ``LayerNormalization`` is one op, GELU is torch's ``Erf`` form.
* :func:`svtr_tiny`: an SVTR-like recognizer (Du et al. 2022): a two-conv stem to height
  4, "global mixing" blocks of attention over every position and MLPs with GELU, a
  pooling to height 1 and a per-column CTC head, all at opset 20 where ``Gelu`` is an op.

The weights are random with a fixed seed, scaled so activations stay of order one
(:class:`tests.realistic_nets.CalibratedBuilder` folds the convs' BatchNorm to realistic
statistics), so agreement with onnxruntime is a real test.
"""

from __future__ import annotations

import numpy as np
import onnx

from .realistic_nets import CalibratedBuilder, _w, calibration_image


class _Builder(CalibratedBuilder):
    def __init__(self, seed: int, inputs: dict[str, np.ndarray], opset: int) -> None:
        super().__init__(seed, inputs)
        self.opset = opset

    def linear(self, x: str, cin: int, cout: int) -> str:
        self.seed += 1
        y = self.node("MatMul", [x, self.const(_w(self.seed, cin, cout, fan=cin), "lw")])
        bias = np.random.default_rng(self.seed + 500).normal(0, 0.02, cout).astype(np.float32)
        return self.node("Add", [y, self.const(bias, "lb")])

    def layer_norm(self, x: str, c: int) -> str:
        self.seed += 1
        rng = np.random.default_rng(self.seed)
        g = rng.uniform(0.8, 1.2, c).astype(np.float32)
        b = rng.normal(0, 0.05, c).astype(np.float32)
        return self.node("LayerNormalization", [x, self.const(g, "ln_g"), self.const(b, "ln_b")],
                         axis=-1, epsilon=1e-6)

    def gelu(self, x: str) -> str:
        if self.opset >= 20:
            return self.node("Gelu", [x])
        # torch.onnx (opset < 20): x * 0.5 * (1 + erf(x / sqrt(2)))
        e = self.node("Erf", [self.node("Div", [x, self.const(np.float32(2 ** 0.5), "r2")])])
        half = self.node("Mul", [x, self.const(np.float32(0.5), "half")])
        return self.node("Mul", [half, self.node("Add", [e, self.const(np.float32(1), "one")])])

    def attention(self, x: str, t: int, d: int, heads: int) -> str:
        """Multi-head self-attention on (1, t, d), the qkv projection fused."""
        dh = d // heads
        qkv = self.node("Reshape", [self.linear(x, d, 3 * d),
                                    self.const(np.array([1, t, 3, heads, dh], np.int64), "s")])
        qkv = self.node("Transpose", [qkv], perm=[2, 0, 3, 1, 4])          # (3, 1, H, t, dh)
        q, k, v = (self.node("Gather", [qkv, self.const(np.int64(i), "i")], axis=0)
                   for i in range(3))
        a = self.node("MatMul", [self.node("Mul", [q, self.const(np.float32(dh ** -0.5), "sc")]),
                                 self.node("Transpose", [k], perm=[0, 1, 3, 2])])
        o = self.node("MatMul", [self.node("Softmax", [a], axis=-1), v])   # (1, H, t, dh)
        o = self.node("Reshape", [self.node("Transpose", [o], perm=[0, 2, 1, 3]),
                                  self.const(np.array([1, t, d], np.int64), "m")])
        return self.linear(o, d, d)

    def block(self, x: str, t: int, d: int, heads: int, mlp: int = 4) -> str:
        x = self.node("Add", [x, self.attention(self.layer_norm(x, d), t, d, heads)])
        h = self.gelu(self.linear(self.layer_norm(x, d), d, mlp * d))
        return self.node("Add", [x, self.linear(h, mlp * d, d)])


def vit_tiny(size: int = 64, patch: int = 8, d: int = 96, heads: int = 3, depth: int = 4,
             classes: int = 10) -> onnx.ModelProto:
    b = _Builder(1100, {"x": calibration_image((size, size), 11)}, opset=17)
    n = (size // patch) ** 2
    x = b.conv("x", 3, d, k=patch, s=patch, p=0)                           # (1, d, g, g)
    x = b.node("Transpose", [b.node("Reshape", [x, b.const(np.array([1, d, n], np.int64),
                                                                   "flat")])], perm=[0, 2, 1])
    rng = np.random.default_rng(b.seed + 77)
    cls = b.const(rng.normal(0, 0.5, (1, 1, d)).astype(np.float32), "cls")
    x = b.node("Concat", [cls, x], axis=1)                                 # (1, n + 1, d)
    x = b.node("Add", [x, b.const(rng.normal(0, 0.5, (1, n + 1, d)).astype(np.float32),
                                  "pos")])
    for _ in range(depth):
        x = b.block(x, n + 1, d, heads)
    x = b.node("Gather", [b.layer_norm(x, d), b.const(np.int64(0), "first")], axis=1)
    logits = b.node("Gemm", [x, b.const(_w(b.seed + 9, classes, d, fan=d), "hw"),
                             b.const(np.zeros(classes, np.float32), "hb")], transB=1)
    return b.model_of([("x", (1, 3, size, size))], [logits], "vit_tiny")


def svtr_tiny(size: tuple[int, int] = (32, 128), d: int = 64, heads: int = 2,
              depth: int = 2, classes: int = 37) -> onnx.ModelProto:
    h, w = size
    b = _Builder(1200, {"x": calibration_image((h, w), 12)}, opset=20)
    x = b.cba(b.cba("x", 3, d // 2, 3, 2, act="relu"), d // 2, d, 3, 2, act="relu")
    t = (h // 4) * (w // 4)
    x = b.node("Transpose", [b.node("Reshape", [x, b.const(np.array([1, d, t], np.int64),
                                                                   "flat")])], perm=[0, 2, 1])
    for _ in range(depth):
        x = b.block(x, t, d, heads, mlp=2)
    x = b.layer_norm(x, d)                                                  # (1, t, d)
    x = b.node("Reshape", [b.node("Transpose", [x], perm=[0, 2, 1]),
                           b.const(np.array([1, d, h // 4, w // 4], np.int64), "img")])
    x = b.node("AveragePool", [x], kernel_shape=[h // 4, 1], strides=[h // 4, 1])
    x = b.node("Transpose", [b.node("Reshape", [x, b.const(np.array([1, d, w // 4], np.int64),
                                                                   "cols")])], perm=[0, 2, 1])
    return b.model_of([("x", (1, 3, h, w))],
                      [b.node("Softmax", [b.linear(x, d, classes)], axis=-1)], "svtr_tiny")


#: name -> builder (their default input sizes)
TRANSFORMERS = {"vit_tiny": vit_tiny, "svtr_tiny": svtr_tiny}
