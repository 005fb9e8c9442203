"""Real-world network shapes for benchmarks and tests, with calibrated BatchNorm statistics.

Four families that real exports bring to the DV700 (issue 14): a MobileNetV3-small-like
classifier (HardSwish, squeeze-excitation), an EfficientNet-Lite0-like classifier (ReLU6,
5x5 depthwise), a YOLOv8n-like detector (SiLU as Sigmoid·x, C2f split/concat, SPPF 5x5
max-pools, nearest upsampling, three detection heads) and a DBNet-like text segmenter
(MobileNetV3 backbone, FPN, transposed-conv head, sigmoid map).  Built with
:class:`CalibratedBuilder`: every node is computed in float32 with dvsdk's CPU kernels while
the graph is built, and each BatchNormalization takes the mean and variance its input really
has on a calibration image, the way a trained network's statistics are.  So activations keep
a realistic range through the whole depth (random statistics make them explode or vanish),
and outputs are neither vanishingly small nor overflowing FP16.

Weights are seeded: the same call always builds the same model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx

from dvsdk.cpu.ops import run_op

from .onnx_models import NetBuilder

OPSET = 17


class CalibratedBuilder(NetBuilder):
    """A :class:`NetBuilder` that evaluates each node as it is added (see module docstring)."""

    def __init__(self, seed: int, inputs: dict[str, np.ndarray], hswish: str = "op") -> None:
        super().__init__(seed, OPSET)
        self.values: dict[str, np.ndarray] = dict(inputs)
        #: how HardSwish is written: "op" (the ONNX op, torch.onnx at opset >= 14) or
        #: "split" (Mul(x, HardSigmoid(x)): paddle2onnx at opset 11, as PP-OCR ships)
        self.hswish = hswish

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = super().const(value, hint)
        self.values[name] = np.asarray(value)
        return name

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs):
        outs = super().node(op, inputs, n_out, **attrs)
        args = [self.values[i] if i else None for i in inputs]
        results = run_op(op, args, attrs)
        for name, value in zip([outs] if n_out == 1 else outs, results):
            self.values[name] = np.asarray(value)
        return outs

    def bn(self, x: str, c: int) -> str:
        self.seed += 1
        rng = np.random.default_rng(self.seed)
        v = self.values[x].astype(np.float64)
        mean, var = v.mean(axis=(0, 2, 3)), v.var(axis=(0, 2, 3))
        params = [rng.uniform(0.7, 1.3, c), rng.normal(0.1, 0.2, c), mean, var]
        return self.node("BatchNormalization",
                         [x] + [self.const(np.asarray(p, np.float32), "bn") for p in params],
                         epsilon=1e-3)

    # -- blocks --------------------------------------------------------------------------
    def cba(self, x: str, cin: int, cout: int, k: int = 3, s: int = 1, group: int = 1,
            act: str | None = "relu") -> str:
        """conv → BN → activation (relu, relu6, hswish, silu or None)."""
        return self.act(self.bn(self.conv(x, cin, cout, k, s, group=group, bias=False), cout),
                        act)

    def act(self, x: str, kind: str | None) -> str:
        if kind is None:
            return x
        if kind == "relu":
            return self.node("Relu", [x])
        if kind == "relu6":
            return self.relu6(x)
        if kind == "hswish" and self.hswish == "split":
            return self.node("Mul", [x, self.node("HardSigmoid", [x], alpha=1 / 6, beta=0.5)])
        if kind == "hswish":
            return self.node("HardSwish", [x])
        if kind == "silu":  # how torch.onnx exports nn.SiLU
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        raise ValueError(kind)

    def se(self, x: str, c: int, squeeze: int) -> str:
        """Squeeze-excitation as MobileNetV3 has it: GAP → 1x1 ReLU → 1x1 HardSigmoid → Mul."""
        s = self.node("GlobalAveragePool", [x])
        s = self.node("Relu", [self.conv(s, c, squeeze, k=1)])
        s = self.node("HardSigmoid", [self.conv(s, squeeze, c, k=1)], alpha=1 / 6, beta=0.5)
        return self.node("Mul", [x, s])

    def fc(self, x: str, cin: int, cout: int) -> str:
        return self.node("Gemm", [x, self.const(_w(self.seed + 7, cout, cin, fan=cin), "fcW"),
                                  self.const(np.zeros(cout, np.float32), "fcB")], transB=1)

    def model_of(self, inputs: Sequence, outputs: Sequence, name: str) -> onnx.ModelProto:
        return self.model(inputs, outputs, name)


def _w(seed: int, *shape: int, fan: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * (1.0 / fan) ** 0.5
            ).astype(np.float32)


def calibration_image(size: tuple[int, int], seed: int = 0) -> np.ndarray:
    """A smooth, image-like (1, 3, H, W) input in [0, 1] (blobs and gradients, not noise)."""
    h, w = size
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((3, h, w), np.float32)
    for c in range(3):
        for _ in range(6):
            cy, cx = rng.uniform(0, h), rng.uniform(0, w)
            r = rng.uniform(0.05, 0.3) * max(h, w)
            img[c] += rng.uniform(0.2, 1.0) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / r ** 2)
    img += 0.05 * rng.standard_normal(img.shape).astype(np.float32)
    img = (img - img.min()) / (np.ptp(img) + 1e-6)
    return img[None].astype(np.float32)


# -- MobileNetV3-small -------------------------------------------------------------------
# (kernel, expansion, out, SE, activation, stride), Howard et al. 2019, table 2
MBV3_SMALL = ((3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2),
              (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hswish", 2),
              (5, 240, 40, True, "hswish", 1), (5, 240, 40, True, "hswish", 1),
              (5, 120, 48, True, "hswish", 1), (5, 144, 48, True, "hswish", 1),
              (5, 288, 96, True, "hswish", 2), (5, 576, 96, True, "hswish", 1),
              (5, 576, 96, True, "hswish", 1))


def _squeeze(c: int) -> int:
    return max(8, (c // 4 + 4) // 8 * 8)


def _mbv3_backbone(b: CalibratedBuilder, x: str, taps: Sequence[int] = ()) -> tuple[str, int,
                                                                                      list]:
    x, cin, feats = b.cba(x, 3, 16, 3, 2, act="hswish"), 16, []
    for i, (k, exp, out, se, act, s) in enumerate(MBV3_SMALL):
        h = x
        if exp != cin:
            h = b.cba(h, cin, exp, 1, act=act)
        h = b.cba(h, exp, exp, k, s, group=exp, act=act)
        if se:
            h = b.se(h, exp, _squeeze(exp))
        h = b.cba(h, exp, out, 1, act=None)
        x = b.node("Add", [x, h]) if s == 1 and cin == out else h
        cin = out
        if i in taps:
            feats.append((x, cin))
    return x, cin, feats


def mobilenetv3_small(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    b = CalibratedBuilder(300, {"input": calibration_image((size, size), 1)})
    x, cin, _ = _mbv3_backbone(b, "input")
    x = b.cba(x, cin, 576, 1, act="hswish")
    x = b.node("GlobalAveragePool", [x])
    x = b.node("HardSwish", [b.conv(x, 576, 1024, k=1)])
    x = b.fc(b.node("Flatten", [x]), 1024, classes)
    return b.model_of([("input", (1, 3, size, size))], [x], "mobilenetv3_small")


# -- EfficientNet-Lite0 --------------------------------------------------------------------
# (expansion, kernel, stride, out, repeats), Tan & Le 2019 without SE/swish (the Lite variant)
EFFNET_LITE0 = ((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 2), (6, 3, 2, 80, 3),
                (6, 5, 1, 112, 3), (6, 5, 2, 192, 4), (6, 3, 1, 320, 1))


def efficientnet_lite0(size: int = 224, classes: int = 1000) -> onnx.ModelProto:
    b = CalibratedBuilder(400, {"input": calibration_image((size, size), 2)})
    x, cin = b.cba("input", 3, 32, 3, 2, act="relu6"), 32
    for t, k, s, out, n in EFFNET_LITE0:
        for i in range(n):
            stride, h = (s if i == 0 else 1), x
            if t != 1:
                h = b.cba(h, cin, cin * t, 1, act="relu6")
            h = b.cba(h, cin * t, cin * t, k, stride, group=cin * t, act="relu6")
            h = b.cba(h, cin * t, out, 1, act=None)
            x = b.node("Add", [x, h]) if stride == 1 and cin == out else h
            cin = out
    x = b.cba(x, cin, 1280, 1, act="relu6")
    x = b.fc(b.node("Flatten", [b.node("GlobalAveragePool", [x])]), 1280, classes)
    return b.model_of([("input", (1, 3, size, size))], [x], "efficientnet_lite0")


# -- YOLOv8n -----------------------------------------------------------------------------------

def _c2f(b: CalibratedBuilder, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    """cv1 1x1 → split in two → n bottlenecks on the second half → concat all → cv2 1x1."""
    half = cout // 2
    y = b.cba(x, cin, 2 * half, 1, act="silu")
    parts = list(b.node("Split", [y, b.const(np.array([half, half], np.int64), "split")],
                        n_out=2, axis=1))
    for _ in range(n):
        h = b.cba(b.cba(parts[-1], half, half, 3, act="silu"), half, half, 3, act="silu")
        parts.append(b.node("Add", [parts[-1], h]) if shortcut else h)
    return b.cba(b.node("Concat", parts, axis=1), (2 + n) * half, cout, 1, act="silu")


def _sppf(b: CalibratedBuilder, x: str, c: int, k: int = 5) -> str:
    y = b.cba(x, c, c // 2, 1, act="silu")
    pools = [y]
    for _ in range(3):
        pools.append(b.node("MaxPool", [pools[-1]], kernel_shape=[k, k], strides=[1, 1],
                            pads=[k // 2] * 4))
    return b.cba(b.node("Concat", pools, axis=1), 2 * c, c, 1, act="silu")


def _up(b: CalibratedBuilder, x: str) -> str:
    scales = b.const(np.array([1, 1, 2, 2], np.float32), "scales")
    return b.node("Resize", [x, "", scales], mode="nearest")


def yolov8n(size: int = 320, classes: int = 80) -> onnx.ModelProto:
    b = CalibratedBuilder(500, {"images": calibration_image((size, size), 3)})
    x = b.cba(b.cba("images", 3, 16, 3, 2, act="silu"), 16, 32, 3, 2, act="silu")
    x = _c2f(b, x, 32, 32, 1, True)
    p3 = _c2f(b, b.cba(x, 32, 64, 3, 2, act="silu"), 64, 64, 2, True)
    p4 = _c2f(b, b.cba(p3, 64, 128, 3, 2, act="silu"), 128, 128, 2, True)
    p5 = _c2f(b, b.cba(p4, 128, 256, 3, 2, act="silu"), 256, 256, 1, True)
    p5 = _sppf(b, p5, 256)
    t4 = _c2f(b, b.node("Concat", [_up(b, p5), p4], axis=1), 384, 128, 1, False)
    n3 = _c2f(b, b.node("Concat", [_up(b, t4), p3], axis=1), 192, 64, 1, False)
    n4 = _c2f(b, b.node("Concat", [b.cba(n3, 64, 64, 3, 2, act="silu"), t4], axis=1), 192,
              128, 1, False)
    n5 = _c2f(b, b.node("Concat", [b.cba(n4, 128, 128, 3, 2, act="silu"), p5], axis=1), 384,
              256, 1, False)
    outs = []
    for feat, c in ((n3, 64), (n4, 128), (n5, 256)):
        box = b.conv(b.cba(b.cba(feat, c, 64, 3, act="silu"), 64, 64, 3, act="silu"), 64, 64, 1)
        cls_c = max(c, min(classes, 100))
        cls = b.conv(b.cba(b.cba(feat, c, cls_c, 3, act="silu"), cls_c, cls_c, 3, act="silu"),
                     cls_c, classes, 1)
        outs.append(b.node("Concat", [box, cls], axis=1))
    return b.model_of([("images", (1, 3, size, size))], outs, "yolov8n")


# -- DBNet ---------------------------------------------------------------------------------------

def _hw(size: int | tuple[int, int]) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def dbnet(size: int | tuple[int, int] = 320, hswish: str = "op") -> onnx.ModelProto:
    """MobileNetV3-small backbone taps at 1/4, 1/8, 1/16, 1/32 → FPN (1x1 laterals,
    top-down nearest upsample + add, 3x3 smoothing, each conv with BN) → concat at 1/4 →
    conv 3x3 → 2x ConvTranspose 2x2/2 → Sigmoid: the probability map at full resolution.
    ``size``: square, or (height, width); ``hswish`` as :class:`CalibratedBuilder` has it."""
    h, w = _hw(size)
    b = CalibratedBuilder(600, {"x": calibration_image((h, w), 4)}, hswish)
    _, _, feats = _mbv3_backbone(b, "x", taps=(0, 2, 7, 10))
    inner = 64
    lat = [b.cba(f, c, inner, 1, act=None) for f, c in feats]
    for i in range(len(lat) - 2, -1, -1):
        lat[i] = b.node("Add", [lat[i], _up(b, lat[i + 1])])
    outs = []
    for i, f in enumerate(lat):
        p = b.cba(f, inner, inner // 4, 3, act=None)
        for _ in range(i):
            p = _up(b, p)
        outs.append(p)
    x = b.node("Concat", outs, axis=1)
    x = b.cba(x, inner, inner // 4, 3, act="relu")
    for last in (False, True):
        b.seed += 1
        wt = _w(b.seed, inner // 4, 1 if last else inner // 4, 2, 2, fan=inner)
        x = b.node("ConvTranspose", [x, b.const(wt, "W"),
                                     b.const(np.zeros(wt.shape[1], np.float32), "B")],
                   kernel_shape=[2, 2], strides=[2, 2])
        if not last:
            x = b.node("Relu", [b.bn(x, inner // 4)])
    return b.model_of([("x", (1, 3, h, w))], [b.node("Sigmoid", [x])], "dbnet")


# -- PP-OCR stand-ins ------------------------------------------------------------------------
# PaddleOCR's ONNX models come from paddle2onnx at opset 11, which writes each HardSwish as
# Mul(x, HardSigmoid(x)); the stand-ins do the same.
def ppocr_det(size: tuple[int, int] = (192, 384)) -> onnx.ModelProto:
    """PP-OCR's text detector's shape: the DBNet-like net at 192x384, HardSwish split."""
    return dbnet(size, hswish="split")


# PP-LCNet-like blocks (depthwise k x k + pointwise, HardSwish, SE in the last two), as the
# PP-OCR v3/v4 mobile models' backbones; (kernel, out, stride (h, w), SE)
LCNET_REC = ((3, 32, (1, 1), False), (3, 64, (2, 2), False), (3, 64, (1, 1), False),
             (3, 128, (2, 1), False), (3, 128, (1, 1), False), (5, 256, (2, 1), False),
             (5, 256, (1, 1), False), (5, 256, (1, 1), False), (5, 512, (1, 1), True),
             (5, 512, (1, 1), True))
LCNET_CLS = ((3, 16, (1, 1), False), (3, 32, (2, 2), False), (3, 32, (1, 1), False),
             (3, 64, (2, 2), False), (3, 64, (1, 1), False), (5, 128, (2, 2), False),
             (5, 128, (1, 1), False), (5, 256, (2, 2), True), (5, 256, (1, 1), True))


def _lcnet(b: CalibratedBuilder, x: str, cin: int, blocks: Sequence) -> tuple[str, int]:
    for k, out, (sh, sw), se in blocks:
        x = b.cba(x, cin, cin, k, 1, group=cin, act="hswish")
        if (sh, sw) != (1, 1):  # PP-LCNet strides (2, 1) on text lines: a pool keeps W
            x = b.node("MaxPool", [x], kernel_shape=[sh, sw], strides=[sh, sw])
        if se:
            x = b.se(x, cin, _squeeze(cin))
        x = b.cba(x, cin, out, 1, act="hswish")
        cin = out
    return x, cin


def _layer_norm(b: CalibratedBuilder, x: str, c: int) -> str:
    """LayerNorm over the last axis as torch.onnx writes it at opset 11-16 (ReduceMean,
    Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add)."""
    mu = b.node("ReduceMean", [x], axes=[-1])
    d = b.node("Sub", [x, mu])
    var = b.node("ReduceMean", [b.node("Pow", [d, b.const(np.float32(2.0), "two")])], axes=[-1])
    y = b.node("Div", [d, b.node("Sqrt", [b.node("Add", [var, b.const(np.float32(1e-5),
                                                                       "eps")])])])
    b.seed += 1
    g = np.random.default_rng(b.seed).uniform(0.8, 1.2, c).astype(np.float32)
    return b.node("Add", [b.node("Mul", [y, b.const(g, "ln_g")]),
                          b.const(np.zeros(c, np.float32), "ln_b")])


def _linear(b: CalibratedBuilder, x: str, cin: int, cout: int) -> str:
    b.seed += 1
    return b.node("Add", [b.node("MatMul", [x, b.const(_w(b.seed, cin, cout, fan=cin), "lw")]),
                          b.const(np.zeros(cout, np.float32), "lb")])


def ppocr_rec(size: tuple[int, int] = (48, 320), classes: int = 6625) -> onnx.ModelProto:
    """PP-OCRv4 rec's shape (mobile): a PP-LCNet-like backbone to height 3, a pool to
    height 1, an SVTR-like neck (1x1 to 120 channels, two transformer blocks of multi-head
    attention and an MLP over the W/4 tokens, with torch's LayerNorm), a CTC head (FC to
    6625 characters, Softmax)."""
    h, w = _hw(size)
    b = CalibratedBuilder(700, {"x": calibration_image((h, w), 5)}, hswish="split")
    x, c = _lcnet(b, b.cba("x", 3, 16, 3, 2, act="hswish"), 16, LCNET_REC)
    x = b.node("AveragePool", [x], kernel_shape=[h // 16, 2], strides=[h // 16, 2])  # H 3->1
    d, heads = 120, 8
    x = b.cba(x, c, d, 1, act="hswish")                       # (1, d, 1, T)
    t = w // 8
    x = b.node("Transpose", [b.node("Reshape", [x, b.const(np.array([1, d, t], np.int64),
                                                                   "shp")])], perm=[0, 2, 1])
    for _ in range(2):
        y = _layer_norm(b, x, d)
        q, k, v = (b.node("Transpose", [b.node("Reshape", [
            _linear(b, y, d, d), b.const(np.array([1, t, heads, d // heads], np.int64), "hs")])],
            perm=[0, 2, 1, 3]) for _ in range(3))
        a = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                           b.const(np.float32((d // heads) ** -0.5), "scale")])
        o = b.node("MatMul", [b.node("Softmax", [a], axis=-1), v])
        o = b.node("Reshape", [b.node("Transpose", [o], perm=[0, 2, 1, 3]),
                               b.const(np.array([1, t, d], np.int64), "merge")])
        x = b.node("Add", [x, _linear(b, o, d, d)])
        y = _layer_norm(b, x, d)
        x = b.node("Add", [x, _linear(b, b.act(_linear(b, y, d, 2 * d), "hswish"), 2 * d, d)])
    x = b.node("Softmax", [_linear(b, _layer_norm(b, x, d), d, classes)], axis=-1)
    return b.model_of([("x", (1, 3, h, w))], [x], "ppocr_rec")


def ppocr_cls(size: tuple[int, int] = (48, 192), classes: int = 2) -> onnx.ModelProto:
    """PP-OCR's text-direction classifier's shape: a small PP-LCNet-like backbone (x0.35
    widths), global average pooling, an FC to 2 classes, Softmax."""
    h, w = _hw(size)
    b = CalibratedBuilder(800, {"x": calibration_image((h, w), 6)}, hswish="split")
    x, c = _lcnet(b, b.cba("x", 3, 16, 3, 2, act="hswish"), 16, LCNET_CLS)
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    return b.model_of([("x", (1, 3, h, w))], [b.node("Softmax", [b.fc(x, c, classes)],
                                                     axis=1)], "ppocr_cls")


def mtcnn_pnet(size: tuple[int, int] = (120, 160)) -> onnx.ModelProto:
    """MTCNN's P-Net (Zhang et al. 2016) fully convolutional on a 120x160 image: 3x3 conv 10
    + PReLU, 2x2 max-pool, 3x3 conv 16 + PReLU, 3x3 conv 32 + PReLU, then 1x1 convs to the
    face probability (Softmax over 2 channels) and the 4 box offsets."""
    h, w = _hw(size)
    b = CalibratedBuilder(900, {"x": calibration_image((h, w), 7)})

    def prelu(x: str, c: int) -> str:
        return b.node("PRelu", [x, b.const(np.full((c, 1, 1), 0.25, np.float32), "slope")])

    x = prelu(b.conv("x", 3, 10, 3, p=0), 10)
    x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    x = prelu(b.conv(x, 10, 16, 3, p=0), 16)
    x = prelu(b.conv(x, 16, 32, 3, p=0), 32)
    prob = b.node("Softmax", [b.conv(x, 32, 2, 1)], axis=1)
    return b.model_of([("x", (1, 3, h, w))], [prob, b.conv(x, 32, 4, 1)], "mtcnn_pnet")


#: name -> (builder, input size used by the benchmarks: a side, or (height, width))
NETWORKS = {"mobilenetv3_small": (mobilenetv3_small, 224),
            "efficientnet_lite0": (efficientnet_lite0, 224),
            "yolov8n": (yolov8n, 320), "dbnet": (dbnet, 320),
            "ppocr_det": (ppocr_det, (192, 384)), "ppocr_rec": (ppocr_rec, (48, 320)),
            "ppocr_cls": (ppocr_cls, (48, 192)), "mtcnn_pnet": (mtcnn_pnet, (120, 160))}


def input_of(name: str, seed: int = 9) -> np.ndarray:
    """The benchmarks' and tests' input for network ``name``."""
    return calibration_image(_hw(NETWORKS[name][1]), seed)
