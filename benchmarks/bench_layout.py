"""Benchmark dvsdk.hw.layout pack/unpack (dv700-interface.md §1) against a plain FP16 cast.

Run: ``python3 benchmarks/bench_layout.py``.  Prints median wall times and the ratio
to ``np.asarray(x, np.float16)`` of the same tensor (goal: <= 1.5).  For unpack it also
prints the ratio to the plain FP16 -> float32 cast of the packed buffer.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from common import median_time as _median_time

from dvsdk.hw import layout


def median_time(fn: Callable[[], object]) -> float:
    return _median_time(fn, repeat=200, warmup=5)


def main() -> None:
    rng = np.random.default_rng(0)
    tensors = {
        "224x224x3 image": rng.random((224, 224, 3), dtype=np.float32),
        "56x56x64 tensor": rng.standard_normal((56, 56, 64), dtype=np.float32),
    }
    print(f"{'tensor':18} {'orient':6} {'cast us':>8} {'pack us':>8} {'ratio':>6} "
          f"{'unpack us':>10} {'ratio':>6} {'f16->f32 us':>12} {'ratio':>6}")
    worst = 0.0
    for name, x in tensors.items():
        base = median_time(lambda x=x: np.asarray(x, np.float16))
        for transpose in (False, True):
            buf = layout.pack(x, transpose=transpose)
            t_pack = median_time(lambda x=x, t=transpose: layout.pack(x, transpose=t))
            t_unpack = median_time(
                lambda b=buf, s=x.shape, t=transpose: layout.unpack(b, s, transpose=t))
            back = median_time(lambda b=buf: np.asarray(b, np.float32))
            worst = max(worst, t_pack / base, t_unpack / base)
            print(f"{name:18} {'DHWC' if transpose else 'DWHC':6} {base * 1e6:8.0f} "
                  f"{t_pack * 1e6:8.0f} {t_pack / base:6.2f} {t_unpack * 1e6:10.0f} "
                  f"{t_unpack / base:6.2f} {back * 1e6:12.0f} {t_unpack / back:6.2f}")
    print(f"worst ratio vs np.asarray(x, np.float16): {worst:.2f} (goal <= 1.5)")


if __name__ == "__main__":
    main()
