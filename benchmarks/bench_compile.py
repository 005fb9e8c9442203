"""Compiler speed, and simulator speed against onnxruntime, on MobileNetV2 (224x224, width 1.0).

The model is the standard MobileNetV2 topology (stem 3x3/2 32, 17 inverted residual blocks
(t, c, n, s) = (1,16,1,1) (6,24,2,2) (6,32,3,2) (6,64,4,2) (6,96,3,1) (6,160,3,2) (6,320,1,1),
1x1 1280, GAP, FC 1000, Softmax; BN after every conv, ReLU6) built with onnx.helper and
random weights (3.5 M parameters), so no download is needed.

Measured:

* compile time, FP16 (goal < 5 s) and quantize=True (goal < 20 s), end to end as
  ``compile(model)`` runs it (golden pair included), median of ``--repeats`` runs;
* a per-stage breakdown: frontend (ONNX -> IR, shape inference, folding, simplification),
  lowering (mapping + weight packing, k-means quantization when quantize=True), memory
  plan, encoding (commands, constants, META), golden run (reference interpreter + one
  simulator run);
* run time of the compiled net on sim:// against onnxruntime (default graph optimizations:
  this is timing, not a reference) on the same input, and the ratio (goal < 10x), with
  where the simulator run's time goes; plus the accuracy of the run against onnxruntime
  with optimizations disabled.

The simulator uses the compiled loops of dvsdk/_native.c when they were built; run with
``DVSDK_NATIVE=0`` to measure the numpy paths alone.

    python benchmarks/bench_compile.py [--repeats 3] [--size 224] [--width 1.0]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dvsdk.compiler import build as B  # noqa: E402
from dvsdk.compiler.golden import add_golden  # noqa: E402
from dvsdk.compiler.lower import lower  # noqa: E402
from dvsdk.compiler.memplan import plan  # noqa: E402
from dvsdk.driver.device import DeviceInfo  # noqa: E402
from dvsdk.runtime.net import Net  # noqa: E402
from tests.onnx_models import NetBuilder, w  # noqa: E402

SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
            (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenetv2(size: int = 224, width: float = 1.0, classes: int = 1000):
    b = NetBuilder(500)

    def ch(c: float) -> int:
        return max(8, int(c * width + 4) // 8 * 8)

    cin = ch(32)
    x = b.relu6(b.bn(b.conv("input", 3, cin, s=2, bias=False), cin))
    for t, c, n, s in SETTINGS:
        c = ch(c)
        for i in range(n):
            stride = s if i == 0 else 1
            h, hid = x, cin * t
            if t != 1:
                h = b.relu6(b.bn(b.conv(h, cin, hid, k=1, bias=False), hid))
            h = b.relu6(b.bn(b.conv(h, hid, hid, s=stride, group=hid, bias=False), hid))
            h = b.bn(b.conv(h, hid, c, k=1, bias=False), c)
            x = b.node("Add", [x, h]) if stride == 1 and cin == c else h
            cin = c
    last = ch(1280) if width > 1 else 1280
    x = b.relu6(b.bn(b.conv(x, cin, last, k=1, bias=False), last))
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    x = b.node("Gemm", [x, b.const(w(501, classes, last, scale=0.05), "fcW"),
                        b.const(w(502, classes, scale=0.1), "fcB")], transB=1)
    return b.model([("input", (1, 3, size, size))], [b.node("Softmax", [x], axis=1)],
                   "mobilenetv2")


def stages(model, quantize: bool) -> dict[str, float]:
    """compile_graph's stages, timed one by one (same calls, same order)."""
    opts = B.Options(quantize=quantize)
    t = {}
    t0 = time.perf_counter()
    graph = B.load_model(model, opts)
    t["frontend"] = time.perf_counter() - t0
    info = DeviceInfo(ub_size=opts.ub_size, mac_num=576, max_kernel_size=7, svn_version=93)
    t0 = time.perf_counter()
    program = lower(graph, info, quantize=quantize)
    t["lowering+packing" + ("+quantize" if quantize else "")] = time.perf_counter() - t0
    t0 = time.perf_counter()
    mplan = plan(program)
    t["memory plan"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    steps, cmds, weights, constants, _ = B._encode_program(program, mplan, opts)
    t["encode"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    net = B.compile_graph(graph, B.Options(quantize=quantize, golden=False))
    t["(compile_graph, no golden)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    add_golden(net, graph)
    t["golden run"] = time.perf_counter() - t0
    return t


def timed(fn, repeats: int) -> tuple[float, object]:
    """Median wall time of ``repeats`` calls, and the last result."""
    times, out = timings(fn, repeats)
    return statistics.median(times), out


def timings(fn, repeats: int) -> tuple[list[float], object]:
    """The wall times of ``repeats`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def goal(value: float, limit: float) -> str:
    return "ok" if value < limit else "MISSED"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--width", type=float, default=1.0)
    args = ap.parse_args()
    import onnxruntime as ort

    model = mobilenetv2(args.size, args.width)
    params = sum(int(np.prod(i.dims)) for i in model.graph.initializer)
    print(f"MobileNetV2 {args.size}x{args.size} width {args.width}: "
          f"{len(model.graph.node)} ONNX nodes, {params / 1e6:.2f} M parameters")

    nets = {}
    for quantize, limit in ((False, 5.0), (True, 20.0)):
        label = "quantized" if quantize else "FP16"
        med, net = timed(lambda q=quantize: B.compile(model, quantize=q), args.repeats)
        nets[label] = net
        st = net.meta["stats"]
        arena = net.meta["arena"]["size"] / 1e6
        tol = list(net.meta["golden"]["tolerance"].values())[0]
        print(f"\ncompile {label:9s}: {med:6.2f} s  (goal < {limit:g} s: {goal(med, limit)})  "
              f"{st['hw_ops']} ops on hw, {st['cpu_ops']} on cpu, {st['commands']} commands, "
              f"weights {len(net.weights) / 1e6:.2f} MB, arena {arena:.2f} MB, "
              f"self-test tolerance {tol:.2g}")
        for name, sec in stages(model, quantize).items():
            print(f"    {name:28s} {sec * 1e3:8.1f} ms")

    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, args.size, args.size)).astype(np.float32)
    t_ort = {}
    for threads in (0, 1):          # 0: onnxruntime's default (all cores); 1: like sim://
        so = ort.SessionOptions()
        so.log_severity_level = 3
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])
        sess.run(None, {"input": x})
        t_ort[threads] = timed(lambda s=sess: s.run(None, {"input": x}), 30)[0]
    so_ref = ort.SessionOptions()
    so_ref.log_severity_level = 3
    so_ref.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ref = ort.InferenceSession(model.SerializeToString(), so_ref,
                               providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    from dvsdk import native
    print(f"\nsimulator data paths: {native.describe()}")
    print(f"onnxruntime {ort.__version__}, default optimizations: {t_ort[0] * 1e3:.1f} ms "
          f"(default threads), {t_ort[1] * 1e3:.1f} ms (1 thread); medians of 30")
    for label, net in nets.items():
        with Net(net, "sim://") as n:
            n.run(x)
            times, out = timings(lambda n=n: n.run(x), max(5, args.repeats))
            t_sim, t_best = statistics.median(times), min(times)  # (of the same runs)
            rs = n.last_run
        y = out[net.meta["outputs"][0]["name"]]
        err = float(np.abs(y - ref).max())
        span = float(ref.max() - ref.min())
        ratio = t_sim / t_ort[0]
        print(f"sim:// {label:9s}: {t_sim * 1e3:6.1f} ms (best {t_best * 1e3:.1f}) = {ratio:5.1f}x "
              f"onnxruntime (goal < 10x: {goal(ratio, 10)}), {t_sim / t_ort[1]:.1f}x its "
              f"1-thread time; simulated DV700 time {rs.device_us / 1e3:.2f} ms "
              f"({rs.cycles} cycles)")
        sim_wall = sum(s.wall_us for s in rs.segments)
        print(f"    wall: hw segments {sim_wall / 1e3:.1f} ms, cpu ops {rs.cpu_us / 1e3:.1f} ms, "
              f"pack {rs.pack_us / 1e3:.1f} ms, sync {rs.sync_us / 1e3:.1f} ms, "
              f"unpack {rs.unpack_us / 1e3:.1f} ms")
        print(f"    vs onnxruntime (optimizations off): max-abs {err:.3g} = {err / span:.2%} of "
              f"the output range; top-1 {'same' if y.argmax() == ref.argmax() else 'DIFFERS'}")

if __name__ == "__main__":
    main()
