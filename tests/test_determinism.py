"""One net.bin and one input give the same bits on every machine (firmware_spec/
arithmetic.md; issue 24).

A realistic net (tests/data/determinism/net.onnx: 3x3, depthwise, 1x1, transposed and
strided convs, ReLU6, tanh, ELU, sigmoid, a residual add, max and average pooling, an FC
layer, HardSwish and Softmax on the CPU, 64x64) and the bundled digits model run in child
processes under every combination of what used to move the bits: OpenBLAS's kernel for
another CPU (``OPENBLAS_CORETYPE``), one or two simulator threads (``DVSDK_SIM_THREADS``),
the compiled loops or numpy alone (``DVSDK_NATIVE``), the compiled product's builds for
other instruction sets (``DVSDK_NATIVE_ISA``: the AVX2 and SSE2 tiles on this machine) and
the portable binary16 conversions instead of F16C (``DVSDK_NATIVE_F16C=0``).
Each child runs twice (a repeat must not move either).  Every child must print the same
SHA-256, and that SHA-256 is the one committed in tests/data/determinism/golden.json:
computed once, it must hold on every machine (a machine that computes another one runs
another arithmetic than the documented one).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import onnx
import pytest

from dvsdk import native
from dvsdk.compiler.build import compile as compile_model

from .patterns import pattern

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "determinism"
GOLDEN = json.loads((DATA / "golden.json").read_text()) if (DATA / "golden.json").exists() \
    else {}
CORETYPES = ("Haswell", "Sandybridge", "Nehalem", "Prescott")

#: the child: load a net.bin, run the input of ``pattern`` twice, print one SHA-256 of every
#: output's bytes (in the net's output order), or two where the repeat differed
CHILD = r"""
import hashlib, sys
import numpy as np
import dvsdk
sys.path.insert(0, sys.argv[3])
from tests.patterns import pattern
with dvsdk.load(sys.argv[1], "sim://") as net:
    x = pattern(tuple(int(d) for d in sys.argv[2].split(",")))
    shas = set()
    for _ in range(2):
        out = net.run(x)
        h = hashlib.sha256()
        for name in [o["name"] for o in net.meta["outputs"]]:
            h.update(np.ascontiguousarray(out[name]).tobytes())
        shas.add(h.hexdigest())
print(" ".join(sorted(shas)))
"""


def _children(netbin: Path, shape: tuple[int, ...], envs: list[dict]) -> list[str]:
    def one(extra: dict) -> str:
        env = {k: v for k, v in os.environ.items()
               if k not in ("OPENBLAS_CORETYPE", "DVSDK_SIM_THREADS", "DVSDK_NATIVE",
                            "DVSDK_NATIVE_ISA", "DVSDK_NATIVE_F16C")}
        env.update(extra)
        r = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, str(netbin),
                            ",".join(map(str, shape)), str(ROOT)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, (extra, r.stderr[-2000:])
        return r.stdout.strip()

    with ThreadPoolExecutor(2) as pool:  # two children at a time: this suite's 2 cores
        return list(pool.map(one, envs))


def _matrix() -> list[dict]:
    envs = [{"OPENBLAS_CORETYPE": ct, "DVSDK_SIM_THREADS": th, "DVSDK_NATIVE": nat}
            for ct in CORETYPES for th in ("1", "2") for nat in ("0", "1")]
    if native.NATIVE is not None and native.NATIVE.gemm_isa() in ("avx512", "avx2"):
        lower = ("avx2", "sse2") if native.NATIVE.gemm_isa() == "avx512" else ("sse2",)
        envs += [{"DVSDK_NATIVE_ISA": isa, "DVSDK_SIM_THREADS": "2"} for isa in lower]
    envs.append({"DVSDK_NATIVE_F16C": "0"})  # the portable conversions (an Arm board's)
    return envs


@pytest.fixture(scope="module")
def realistic_netbin(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("determinism") / "net.bin"
    compile_model(onnx.load(DATA / "net.onnx"), path, golden=False)
    return path


def test_a_realistic_net_gives_one_sha256_under_every_blas_thread_count_and_build(
        realistic_netbin):
    envs = _matrix()
    got = _children(realistic_netbin, (1, 3, 64, 64), envs)
    table = "\n".join(f"{e} -> {g}" for e, g in zip(envs, got))
    assert len(set(got)) == 1 and " " not in got[0], table
    assert got[0] == GOLDEN["realistic"], table


def test_the_bundled_digits_model_gives_its_committed_sha256():
    netbin = ROOT / "examples" / "models" / "digits.bin"
    envs = [{"DVSDK_SIM_THREADS": "2"}, {"DVSDK_NATIVE": "0", "OPENBLAS_CORETYPE": "Prescott"}]
    got = _children(netbin, (1, 1, 16, 16), envs)
    assert got == [GOLDEN["digits"]] * 2, got


def test_the_golden_file_says_where_its_hashes_come_from():
    assert set(GOLDEN) >= {"realistic", "digits", "provenance"}
    assert all(len(GOLDEN[k]) == 64 for k in ("realistic", "digits"))
    # the input generator is part of what the hashes pin
    assert hashlib.sha256(pattern((1, 3, 64, 64)).tobytes()).hexdigest() == GOLDEN["input"]


@pytest.mark.skipif(native.NATIVE is None or not __import__("shutil").which("valgrind"),
                    reason="needs the compiled loops and valgrind")
def test_the_avx2_builds_give_the_committed_sha256s(realistic_netbin):
    """Under valgrind, which offers no AVX-512, every compiled loop runs its AVX2 build
    (the machine this project's CI may land on: AMD EPYC, AVX2 only): the same hashes."""
    for netbin, shape, key in ((realistic_netbin, "1,3,64,64", "realistic"),
                               (ROOT / "examples" / "models" / "digits.bin", "1,1,16,16",
                                "digits")):
        r = subprocess.run(["valgrind", "--tool=none", "-q", sys.executable, "-W", "ignore",
                            "-c", CHILD, str(netbin), shape, str(ROOT)],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.strip() == GOLDEN[key]
    probe = subprocess.run(["valgrind", "--tool=none", "-q", sys.executable, "-c",
                            "from dvsdk import native; print(native.NATIVE.gemm_isa())"],
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "avx2"
