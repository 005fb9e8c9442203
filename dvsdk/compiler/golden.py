"""The golden input/output pair of a net.bin and its tolerance (firmware_spec/netbin.md,
"golden"), and the precision warnings the compiler derives from it.

The pair is a deterministic input, the output of the float32 reference interpreter on it
(:func:`dvsdk.compiler.interpret.run_graph`, not the device), and per output a tolerance on
the largest absolute difference, relative to the output's range ``R = max(max r - min r,
max |r|)`` of the reference output ``r``::

    tolerance = min(max(4 e, 2**-10 R), 2**-5 R)        float outputs
    tolerance = 0                                       integer and bool outputs

where ``e`` is the simulator's own largest error on the pair.  So a device passes when it
is as close as four times the simulator's FP16 arithmetic, never looser than 2**-5 (3.1 %)
of the range; a network the simulator itself gets wrong by more than that fails its own
self-test, and the compiler says so.

Warnings (a :class:`PrecisionWarning` and an entry in ``META.warnings`` that the CLI prints):
``fp16_subnormal_output`` when a float output's largest magnitude is below FP16's smallest
normal number 2**-14 (6.1e-5), where FP16 keeps few or no significant bits (nets with an
op on the DV700);
``golden_mismatch`` when the simulator's error exceeds the tolerance cap or its output is
not finite where the reference is (FP16 overflow, 65504).

A pair whose simulator error is not finite would fail its own self-test on every device,
and ``sim_max_abs_error`` has no number to record: then the file gets no pair, and
``META.golden_omitted`` says why (as it does for ``--no-golden``), so the compiler never
writes a file its reader refuses.
"""

from __future__ import annotations

import warnings

import numpy as np

from ..errors import DvsdkError
from ..netfile import BlobBuilder, NetFile
from .interpret import run_graph
from .ir import Graph

__all__ = ["PrecisionWarning", "add_golden", "golden_feeds", "tolerance", "FP16_MIN_NORMAL",
           "REL_FLOOR", "REL_CAP"]

#: FP16's smallest normal number: below it values lose significant bits (subnormals).
FP16_MIN_NORMAL = 2.0 ** -14
REL_FLOOR = 2.0 ** -10
REL_CAP = 2.0 ** -5
SEED = 20261122


class PrecisionWarning(UserWarning):
    """The compiled network cannot be computed accurately in FP16 (see META.warnings)."""


def golden_feeds(graph: Graph) -> list[dict[str, np.ndarray]]:
    """Candidate golden inputs, in order of preference: uniform [0, 1) floats, bool coin
    flips and small positive integers (1..3: valid divisors); then the same with integers
    at 0 (valid as indices into any axis) for graphs whose integer inputs index."""
    rng = np.random.default_rng(SEED)
    first, second = {}, {}
    for n in graph.inputs:
        t = graph.tensors[n]
        shape, dt = t.shape, np.dtype(t.dtype or np.float32)
        if dt.kind == "f":
            v = rng.uniform(0, 1, shape).astype(np.float32).astype(dt)
        elif dt.kind == "b":
            v = rng.uniform(0, 1, shape) < 0.5
        else:
            v = rng.integers(1, 4, shape).astype(dt)
        first[n] = v
        second[n] = np.zeros(shape, dt) if dt.kind in "iu" else v
    return [first, second] if any(first[n] is not second[n] for n in first) else [first]


def _range(r: np.ndarray) -> float:
    fin = r[np.isfinite(r)]
    if not fin.size:
        return 0.0
    return float(max(fin.max() - fin.min(), np.abs(fin).max()))


def tolerance(ref: np.ndarray, err: float) -> float:
    """The self-test tolerance of one output (module docstring)."""
    if ref.dtype.kind != "f":
        return 0.0
    big = _range(ref)
    return min(max(4 * err, REL_FLOOR * big), REL_CAP * big)


def _warn(net: NetFile, kind: str, tensor: str, message: str) -> None:
    net.meta.setdefault("warnings", []).append({"kind": kind, "tensor": tensor,
                                                "message": message})
    warnings.warn(message, PrecisionWarning, stacklevel=5)  # the dvsdk.compile caller


def _reference(graph: Graph) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    tries = golden_feeds(graph)
    for i, feeds in enumerate(tries):
        try:
            return feeds, run_graph(graph, feeds)
        except DvsdkError:
            if i == len(tries) - 1:
                raise
    raise AssertionError("unreachable")


def add_golden(net: NetFile, graph: Graph) -> None:
    """Add the golden pair to ``net`` (META.golden and the GOLD section) and the precision
    warnings; ``graph`` is the model graph the pair is computed on."""
    from ..runtime.handle import to_model
    from ..runtime.net import Net, golden_error

    feeds, ref = _reference(graph)
    # in the model's layout, as net.run takes and returns them (NHWC for Keras)
    specs = {s["tensor"]: dict(s, transpose=False)
             for s in net.meta["inputs"] + net.meta["outputs"]}
    feeds = {specs[n]["name"]: to_model(specs[n], v) for n, v in feeds.items()}
    ref = {specs[n]["name"]: to_model(specs[n], np.asarray(v)) for n, v in ref.items()}
    url = "sim://?coherence=error&dram_mb=" + str(_dram_mb(net))
    with Net(net, url) as sim_net:
        got = sim_net.run(feeds)
    blob = BlobBuilder(align=16)
    tol, errors = {}, {}
    overflow = []
    for name, r in ref.items():
        r = np.asarray(r)
        err = golden_error(got[name], r)
        errors[name] = err if np.isfinite(err) else None
        tol[name] = tolerance(r, err)
        peak = float(np.max(np.abs(r[np.isfinite(r)]), initial=0.0)) if r.dtype.kind == "f" \
            else 0.0
        if 0 < peak < FP16_MIN_NORMAL and net.meta["stats"]["hw_ops"]:
            _warn(net, "fp16_subnormal_output", name,
                  f"output {name!r}: largest magnitude {peak:.3g} is below FP16's smallest "
                  f"normal number {FP16_MIN_NORMAL:.3g}, where the DV700's FP16 keeps few or "
                  "no significant bits (rescale the network's outputs)")
        if not np.isfinite(err):
            overflow.append(name)
            _warn(net, "golden_mismatch", name,
                  f"output {name!r}: the simulator's FP16 result has non-finite values "
                  "(FP16 overflows above 65504) where the float32 reference has none (or "
                  "the reverse); no golden pair is recorded")
        elif err > tol[name]:
            _warn(net, "golden_mismatch", name,
                  f"output {name!r}: the simulator's FP16 result has an error of {err:.3g} "
                  f"({err / max(_range(r), 1e-300):.1%} of the output's range) against the "
                  f"float32 reference (tolerance {tol[name]:.3g}); the self-test fails")
    if overflow:
        net.meta.pop("golden", None)
        net.meta["golden_omitted"] = (
            f"the simulator's FP16 result of {', '.join(map(repr, overflow))} is not finite "
            "where the float32 reference is (FP16 overflows above 65504): a pair no device "
            "could pass")
        net.golden = b""
        return
    net.meta.pop("golden_omitted", None)
    net.meta["golden"] = {
        "inputs": {n: blob.add_array(v) for n, v in feeds.items()},
        "outputs": {n: blob.add_array(np.asarray(v)) for n, v in ref.items()},
        "tolerance": tol, "sim_max_abs_error": errors,
    }
    net.golden = blob.bytes()


def _dram_mb(net: NetFile) -> int:
    need = net.meta["arena"]["size"] + len(net.weights) + (8 << 20)
    return max(64, -(-need // (1 << 20)) * 2)
