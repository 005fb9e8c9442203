"""Benchmark dvsdk.hw.weights (dv700-interface.md §8.1, §8.3) on a 3x3 512->512 conv.

Run: ``python3 benchmarks/bench_weights.py``.  Prints median times of FP16 and Q8
packing (goal for FP16: < 0.2 s), unpacking, and of ``quantize_weights`` for the layer.
"""

from __future__ import annotations

import numpy as np
from common import median_time

from dvsdk.hw import weights as W


def main() -> None:
    rng = np.random.default_rng(0)
    m, c, k = 512, 512, 3
    w = (rng.standard_normal((m, c, k, k)) * 0.05).astype(np.float32)
    bias = rng.standard_normal(m).astype(np.float32)
    table, idx = W.quantize_weights(w)
    err = W.quantization_error(w, table, idx)
    n = w.size
    rows = [
        ("pack FP16 (float32 in)", lambda: W.pack_conv_weights(w, bias)),
        ("pack FP16 + PReLU", lambda: W.pack_conv_weights(w, bias, bias)),
        ("pack Q8", lambda: W.pack_conv_weights(idx, bias, table=table)),
        ("unpack FP16", lambda: W.unpack_conv_weights(fp16_blob, c, m, k, k, False)),
        ("unpack Q8", lambda: W.unpack_conv_weights(q8_blob, c, m, k, k, True)),
        ("pack dilated FP16", lambda: W.pack_dilated_weights(w, bias)),
        ("quantize_weights", lambda: W.quantize_weights(w)),
    ]
    fp16_blob = W.pack_conv_weights(w, bias)
    q8_blob = W.pack_conv_weights(idx, bias, table=table)
    print(f"layer: {m}x{c}x{k}x{k} = {n} weights; FP16 blob {len(fp16_blob)} B, "
          f"Q8 blob {len(q8_blob)} B")
    for name, fn in rows:
        t = median_time(fn)
        print(f"{name:24} {t * 1e3:8.1f} ms  {t / n * 1e9:6.1f} ns/weight")
    print(f"quantization error: max_abs={err['max_abs']:.3g} rms={err['rms']:.3g} "
          f"rel_rms={err['rel_rms']:.3g}  (goal: pack FP16 < 200 ms)")


if __name__ == "__main__":
    main()
