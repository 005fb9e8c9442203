"""Export the real-framework test model: a small MobileNetV2-style network written in
PyTorch and exported with ``torch.onnx.export`` (dynamic batch axis, so the file carries
the Shape/Gather/Concat shape subgraphs a real export writes).

Only needed to regenerate ``tests/data/torch_mbv2_tiny.onnx``; the tests read the file and
need neither torch nor this script::

    python3 -m pip install torch==2.13.0   # CPU build
    python3 tools/export_torch_model.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "torch_mbv2_tiny.onnx"


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        self.use_res = stride == 1 and cin == cout
        self.block = nn.Sequential(
            nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(inplace=True),
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid),
            nn.ReLU6(inplace=True),
            nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_res else y


class TinyMobileNetV2(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16),
                                  nn.ReLU6(inplace=True))
        self.blocks = nn.Sequential(InvertedResidual(16, 16, 1, 1), InvertedResidual(16, 24, 2, 4),
                                    InvertedResidual(24, 24, 1, 4), InvertedResidual(24, 32, 2, 4),
                                    InvertedResidual(32, 32, 1, 4))
        self.head = nn.Sequential(nn.Conv2d(32, 64, 1, bias=False), nn.BatchNorm2d(64),
                                  nn.ReLU6(inplace=True))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(self.blocks(self.stem(x)))
        x = self.pool(x)
        x = x.view(x.size(0), -1)  # the common idiom: exports as a Shape/Gather subgraph
        return torch.softmax(self.fc(x), dim=1)


def main() -> int:
    torch.manual_seed(0)
    model = TinyMobileNetV2()
    # give BatchNorm non-trivial statistics, as a trained model would have
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    model.eval()
    x = torch.rand(1, 3, 64, 64)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (x,), str(OUT), input_names=["image"], output_names=["probs"],
                      dynamic_axes={"image": {0: "batch"}, "probs": {0: "batch"}},
                      opset_version=13, dynamo=False)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes) with torch {torch.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
