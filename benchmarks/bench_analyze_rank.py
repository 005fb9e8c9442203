"""``dvsdk analyze``'s ranking against the one-layer-at-a-time ground truth (issue 29 item 1).

For each network (``tests/realistic_nets.py``: EfficientNet-Lite0-like and
MobileNetV3-small-like with calibrated BatchNorm statistics, 224x224, 1000 classes): the
BatchNorms are folded into their convolutions in the ONNX model (the float function is
unchanged; dvsdk quantizes the folded weights too), then, one weighted layer at a time,
that layer's weights are put on their 8-bit codebook (the test's independent
``codebook_q8``) and onnxruntime measures the final output's error: the real damage.
The model is compiled fully quantized (``--no-chain``: a command per layer) and analyzed
on the simulator; printed: Spearman of real damage against each column (``contribution``
ranks, ``added`` and ``rel`` did before), where the old ``worst`` layers rank, and the
analysis time.

    python benchmarks/bench_analyze_rank.py [--nets efficientnet_lite0,mobilenetv3_small]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dvsdk  # noqa: E402
from dvsdk.qa.analyze import analyze  # noqa: E402
from tests import realistic_nets  # noqa: E402
from tests.test_qa_analyze_rank import ground_truth, spearman  # noqa: E402


def fold_batchnorms(model: onnx.ModelProto) -> onnx.ModelProto:
    """Conv → BatchNormalization pairs as one Conv (weights and bias scaled)."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in g.initializer}
    made = {o: n for n in g.node for o in n.output}
    readers: dict[str, int] = {}
    for n in g.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    drop, new_inits = set(), {}
    for bn in g.node:
        conv = made.get(bn.input[0])
        if bn.op_type != "BatchNormalization" or conv is None or conv.op_type != "Conv" \
                or readers[bn.input[0]] != 1:
            continue
        eps = next((a.f for a in bn.attribute if a.name == "epsilon"), 1e-5)
        gamma, beta, mean, var = (inits[i] for i in bn.input[1:5])
        k = gamma / np.sqrt(var + eps)
        w = inits[conv.input[1]]
        b = inits[conv.input[2]] if len(conv.input) > 2 and conv.input[2] else 0.0
        new_inits[conv.input[1]] = (w * k.reshape(-1, 1, 1, 1)).astype(np.float32)
        bias = conv.name + "_bias"
        new_inits[bias] = ((b - mean) * k + beta).astype(np.float32)
        del conv.input[2:]
        conv.input.append(bias)
        conv.output[0] = bn.output[0]
        drop.add(id(bn))
    nodes = [n for n in g.node if id(n) not in drop]
    del g.node[:]
    g.node.extend(nodes)
    keep = [t for t in g.initializer if t.name not in new_inits]
    del g.initializer[:]
    g.initializer.extend(keep + [numpy_helper.from_array(v, k) for k, v in new_inits.items()])
    used = {i for n in g.node for i in n.input}
    keep = [t for t in g.initializer if t.name in used]
    del g.initializer[:]
    g.initializer.extend(keep)
    return model


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nets", default="efficientnet_lite0,mobilenetv3_small")
    ap.add_argument("--size", type=int, default=224)
    args = ap.parse_args()
    for name in args.nets.split(","):
        model = fold_batchnorms(getattr(realistic_nets, name)(size=args.size))
        inits = {t.name for t in model.graph.initializer}
        layers = [n.name for n in model.graph.node
                  if n.op_type in ("Conv", "Gemm") and n.input[1] in inits]
        inp = model.graph.input[0].name
        x = np.random.default_rng(0).uniform(0, 1, (1, 3, args.size, args.size))
        x = x.astype(np.float32)
        t0 = time.perf_counter()
        damage = ground_truth(model, layers, {inp: x})
        t_truth = time.perf_counter() - t0
        data = model.SerializeToString()
        net = dvsdk.compile(data, quantize=True, golden=False, chain=False)
        t0 = time.perf_counter()
        with dvsdk.load(net) as n:
            rows = analyze(n, data, x)
        t_analyze = time.perf_counter() - t0
        by_op = {op: r for r in rows for op in r.ops}
        layers = [n for n in layers if n in by_op]
        real = [damage[n] for n in layers]
        rank = {n: i + 1 for i, n in enumerate(sorted(layers, key=lambda n: -damage[n]))}
        print(f"{name} {args.size}x{args.size}: {len(layers)} weighted layers, ground truth "
              f"{t_truth:.1f} s, analyze {t_analyze:.1f} s")
        for col in ("contribution", "added", "rel", "own"):
            rho = spearman(real, [getattr(by_op[n], col) for n in layers])
            print(f"  Spearman(real damage, {col:12s}) = {rho:+.3f}")
        for col in ("contribution", "added"):
            top = sorted(layers, key=lambda n: -getattr(by_op[n], col))[:5]
            print(f"  5 worst by {col:12s}: real ranks {sorted(rank[n] for n in top)}")
        top8 = sorted(layers, key=lambda n: -damage[n])[:8]
        print(f"  of the 8 most damaging layers, {sum(by_op[n].added < 0 for n in top8)} "
              "have a negative 'added'")


if __name__ == "__main__":
    main()
