"""The simulator's bits on the board's architecture (aarch64), against this host's.

``.ci/arm-bits`` runs this file twice.  On the host (``make DIR``): compile the realistic
networks of ``tests/realistic_nets.py`` and the bundled digits
model to net.bin files in DIR, with their inputs, and print each output's SHA-256 as this
host computes it with its compiled loops and with numpy alone.  Under ``qemu-aarch64``,
with an aarch64 CPython, numpy's aarch64 wheel and dvsdk's extension cross-compiled for
aarch64 (``run DIR``): load each net.bin on ``sim://``, run its input and print the same
hashes, for each setting in the environment the script gives (one or two simulator
threads; the compiled loops, NEON's matrix product, or numpy alone).  firmware_spec/
arithmetic.md defines one result: every line must be the host's.

    python3 .ci/arm_bits.py make DIR        (host)
    python3 .ci/arm_bits.py run DIR         (aarch64)
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def digest(out: dict) -> str:
    """SHA-256 of every output's bytes, in name order, 12 hex digits."""
    h = hashlib.sha256()
    for k in sorted(out):
        h.update(np.ascontiguousarray(out[k]).tobytes())
    return h.hexdigest()[:12]


def run_all(folder: Path) -> dict[str, str]:
    """Each net's output hash, and (``_paths``) the data paths that computed them."""
    from dvsdk import native
    from dvsdk.runtime.net import Net

    got = {"_paths": native.describe()}
    for bin_path in sorted(folder.glob("*.bin")):
        x = np.load(bin_path.with_suffix(".npy"))
        with Net(str(bin_path), "sim://") as net:
            got[bin_path.stem] = digest(net.run(x))
    return got


def make(folder: Path) -> None:
    """Compile the nets into ``folder``; print the host's hashes (as JSON)."""
    import onnx

    from dvsdk.compiler.build import compile as compile_model
    from dvsdk.netfile import write
    from tests.realistic_nets import NETWORKS, input_of

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(3)
    for name, (build, size) in NETWORKS.items():
        write(compile_model(build(size).SerializeToString(), golden=False),
              folder / f"{name}.bin")
        np.save(folder / f"{name}.npy", input_of(name))
    digits = onnx.load(ROOT / "examples" / "models" / "digits.onnx")
    shape = [d.dim_value for d in digits.graph.input[0].type.tensor_type.shape.dim]
    write(compile_model(digits.SerializeToString(), golden=False), folder / "digits.bin")
    np.save(folder / "digits.npy", rng.random(shape).astype(np.float32))
    print(json.dumps(run_all(folder), sort_keys=True))


def main() -> None:
    warnings.simplefilter("ignore")
    sys.path.insert(0, str(ROOT))  # (this tree's dvsdk and tests)
    what, folder = sys.argv[1], Path(sys.argv[2])
    if what == "make":
        make(folder)
    else:
        print(json.dumps(run_all(folder), sort_keys=True))


if __name__ == "__main__":
    main()
