"""Predicted DV700 time of each realistic network against an independent roofline (issue 27).

For every network of ``tests/realistic_nets.py`` (stand-ins of the networks users deploy:
EfficientNet-Lite0, YOLOv8n, PP-OCRv4 det/rec, PP-OCR's direction classifier, MTCNN P-Net,
and the MobileNetV3/DBNet nets of issue 14) this compiles the model, runs it once on
``sim://`` and prints:

* the simulator's predicted device time per run (its cycle model, ``dvsdk/sim/timing.py``)
  and the DRAM bytes its commands move;
* the roofline, computed here from the ONNX graph alone, independent of the compiler:
  ``max(MACs / 576, compulsory bytes / 16)`` cycles at 300 MHz, where MACs are the
  multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul (shapes from
  onnx's own shape inference), and the compulsory bytes are the FP16 weights of those ops
  plus the network's input and outputs, each moved once;
* their ratio (1.0: the device would do no better), and the number of commands and of
  device<->CPU transitions.

Nothing here is timed on the host: the numbers are the same on every machine.

    python benchmarks/bench_predicted.py [--nets yolov8n,ppocr_rec]
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvsdk.compiler.build import compile as compile_model  # noqa: E402
from dvsdk.netfile import program_shape  # noqa: E402
from dvsdk.runtime.net import Net  # noqa: E402
from tests.realistic_nets import NETWORKS, input_of  # noqa: E402

MACS_PER_CYCLE, BYTES_PER_CYCLE, CLOCK_MHZ = 576, 16, 300


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inferred = shape_inference.infer_shapes(model)
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
            list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.dim_value > 0 for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    for init in model.graph.initializer:
        out[init.name] = tuple(init.dims)
    return out


def roofline(model: onnx.ModelProto) -> tuple[int, int, float]:
    """(MACs, compulsory bytes, roofline cycles) of ``model`` as the module docstring says."""
    shapes = _shapes(model)
    consts = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    macs = weight_elems = 0
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Conv", "ConvTranspose"):
            w = shapes[node.input[1]]
            if node.op_type == "Conv":  # each output: Cin/group x kernel products
                macs += math.prod(shapes[node.output[0]]) * w[1] * math.prod(w[2:])
            else:  # each input element: Cout/group x kernel products
                macs += math.prod(shapes[node.input[0]]) * w[1] * math.prod(w[2:])
            weight_elems += math.prod(w)
        elif node.op_type in ("Gemm", "MatMul"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            k = a[-1] if not (node.op_type == "Gemm" and attrs.get("transA")) else a[0]
            macs += math.prod(out) * k
            weight_elems += sum(math.prod(shapes[i]) for i in node.input[1:2] if i in consts)
    io = sum(math.prod(shapes[v.name]) for v in list(model.graph.input) +
             list(model.graph.output) if v.name in shapes)
    nbytes = 2 * (weight_elems + io)
    return macs, nbytes, max(macs / MACS_PER_CYCLE, nbytes / BYTES_PER_CYCLE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default=",".join(NETWORKS),
                    help="comma-separated subset of " + ", ".join(NETWORKS))
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'network':19s} {'GMAC':>7s} {'MB min':>7s} {'roofline us':>12s} "
          f"{'predicted us':>13s} {'ratio':>7s} {'DRAM MB':>8s} {'cmds':>5s} {'switches':>9s}")
    for name in args.nets.split(","):
        build, size = NETWORKS[name]
        model = build(size)
        macs, nbytes, cycles = roofline(model)
        netfile = compile_model(model, golden=False)
        with Net(netfile, "sim://") as net:
            net.run(input_of(name))
            st = net.last_run
            moved = sum(int(r.get("bytes") or 0) for r in net.profile(input_of(name))
                        if r.get("where") != "cpu")
        roof_us = cycles / CLOCK_MHZ
        ps = program_shape(netfile.meta)
        print(f"{name:19s} {macs / 1e9:7.3f} {nbytes / 1e6:7.2f} {roof_us:12.1f} "
              f"{st.device_us:13.1f} {st.device_us / roof_us:6.2f}x "
              f"{moved / 1e6:8.2f} "
              f"{netfile.meta['stats']['commands']:5d} {ps.transitions:9d}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
