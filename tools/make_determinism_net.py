"""Write tests/data/determinism/net.onnx: the realistic small net whose sim:// output
tests/test_determinism.py checks for one SHA-256 on every machine (issue 24).

A 64x64 RGB input through the kinds of layer the simulator's arithmetic has rules for
(firmware_spec/arithmetic.md): 3x3 conv + BatchNorm + ReLU6, 3x3 depthwise with stride 2
and HardSwish (a CPU step), 1x1 conv + tanh, a stride-2 transposed conv + ELU back to
64x64, a residual add, 2x2 max pooling, 3x3 conv with stride 2 + sigmoid, global average
pooling, an FC layer (Gemm) and Softmax (a CPU step).  Outputs: the class probabilities
and the 64x64x16 feature map after the residual add.

Weights are seeded (numpy's default_rng), but the file is stored, so the test does not
depend on numpy's random streams staying the same across versions.

    python tools/make_determinism_net.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.onnx_models import NetBuilder, w  # noqa: E402

OUT = ROOT / "tests" / "data" / "determinism" / "net.onnx"


def build() -> onnx.ModelProto:
    b = NetBuilder(2024, opset=17)
    a = b.relu6(b.bn(b.conv("x", 3, 16, k=3), 16))                       # 64x64x16
    h = b.node("HardSwish", [b.conv(a, 16, 16, k=3, s=2, group=16)])     # 32x32x16
    h = b.node("Tanh", [b.conv(h, 16, 32, k=1)])                         # 32x32x32
    t = b.node("ConvTranspose", [h, b.const(w(77, 32, 16, 2, 2, scale=0.3), "Wt"),
                                 b.const(w(78, 16, scale=0.1), "Bt")], strides=[2, 2])
    feat = b.node("Add", [b.node("Elu", [t], alpha=1.0), a])             # 64x64x16
    p = b.node("MaxPool", [feat], kernel_shape=[2, 2], strides=[2, 2])   # 32x32x16
    s = b.node("Sigmoid", [b.conv(p, 16, 24, k=3, s=2)])                 # 16x16x24
    g = b.node("Flatten", [b.node("GlobalAveragePool", [s])])
    fc = b.node("Gemm", [g, b.const(w(79, 10, 24, scale=1.5), "Wfc"),
                         b.const(w(80, 10, scale=0.2), "Bfc")], transB=1)
    probs = b.node("Softmax", [fc], axis=1)
    return b.model([("x", (1, 3, 64, 64))], [probs, feat], "determinism")


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(build(), OUT)
    print(OUT, OUT.stat().st_size, "bytes")


if __name__ == "__main__":
    main()
