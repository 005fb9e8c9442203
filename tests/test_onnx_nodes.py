"""Conformance: the ONNX project's own backend node tests, compiled and run on ``sim://``.

Every node test whose ops are all ones the compiler accepts (``SUPPORTED_OPS``) runs as
shipped and, where it has more than one graph input, as a ``[const]`` variant whose other
inputs are initializers (weights, bias, shapes and axes become constants, so Conv /
ConvTranspose / Gemm / MatMul / PRelu / Add ... take the DV700 path where they map onto it).
Each one either

* compiles (``dvsdk.compile(model, golden=False)``), runs on one simulator device shared by
  the module, and matches the expected outputs of the ONNX reference implementation, or
* is listed in :data:`tests.onnx_node_refused.REFUSED` and is refused at compile time with a
  ModelError / UnsupportedOps saying why (the op and the element type, mode or input).

So a refused test that starts compiling fails (update the list), and so does an accepted one
that computes a wrong answer.

Tolerance, per output: the same shape and element type; integer and bool outputs exactly
equal; float outputs with NaN and +-inf where expected, and the finite values within

* ``2**-8 * max|expected|`` when any op of the net runs on the DV700 (FP16 arithmetic: 8
  units of FP16 rounding, 2**-11, of the output's magnitude), else
* ``8 * eps(dtype) * max|expected|`` (the CPU kernels compute in the output's own type),

plus half a unit in the last decimal for the few tests whose expected outputs the ONNX
project wrote by hand rounded to some decimals (:data:`ROUNDED`; the ONNX reference
implementation itself is that far from them).

The data: :mod:`tests.onnx_nodes` fetches the onnx 1.22 wheel from the package registry
(``pip download``), once, into ``~/.cache/dvsdk/onnx-node-tests``; the tests skip, saying
so, only if the registry cannot be reached.
"""

from __future__ import annotations

import numpy as np
import pytest

from .onnx_node_refused import REFUSED
from .onnx_nodes import NodeCase, cases, fetch, load

pytest.importorskip("onnx")

FP16_REL = 2.0 ** -8
CPU_EPS = 8
#: node tests whose expected outputs are printed to this many decimals (hand-written in
#: onnx/backend/test/case/node/*.py), not computed
#: (test_roialign_aligned_false: printed to 4 decimals, but by some implementation other than
#: the ONNX reference, which is 8.4e-5 from them; the RoiAlign kernel equals the reference
#: bit for bit, tests/test_more_ops_b.py; so compared at 3 decimals)
ROUNDED = {"test_gridsample_bicubic": 4, "test_roialign_aligned_true": 4,
           "test_roialign_aligned_false": 3}


def _accepted() -> frozenset[str]:
    from dvsdk.compiler.frontends.onnx import SUPPORTED_OPS

    return SUPPORTED_OPS


_ROOT = None


def _root():
    global _ROOT
    if _ROOT is None:
        _ROOT = fetch()
    return _ROOT


def pytest_generate_tests(metafunc):
    if "node_case" not in metafunc.fixturenames:
        return
    root = _root()
    if isinstance(root, str):  # registry unreachable: one test that says so
        metafunc.parametrize("node_case", [pytest.param(None, id="unavailable")])
        return
    all_cases = cases(root, _accepted())
    metafunc.parametrize("node_case", all_cases, ids=[c.id for c in all_cases])


@pytest.fixture(scope="module")
def sim():
    import dvsdk

    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


def _check(name: str, got: np.ndarray, want: np.ndarray, on_hw: bool,
           decimals: int | None = None) -> None:
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind != "f":
        assert np.array_equal(got, want), f"{name}: {got} != {want}"
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    fin = np.isfinite(w)
    assert np.array_equal(np.isnan(g), np.isnan(w)), f"{name}: NaNs differ"
    assert np.array_equal(g[np.isinf(w)], w[np.isinf(w)]), f"{name}: infinities differ"
    if not fin.any():
        return
    scale = float(np.max(np.abs(w[fin])))
    rel = FP16_REL if on_hw else CPU_EPS * float(np.finfo(want.dtype).eps)
    err = float(np.max(np.abs(g[fin] - w[fin])))
    atol = 0.5 * 10.0 ** -decimals if decimals is not None else 0.0
    assert err <= rel * scale + atol, (f"{name}: max error {err:.3g} > {rel:.3g} x {scale:.3g} "
                                f"({'DV700' if on_hw else 'CPU'})")


def test_node(node_case: NodeCase | None, sim) -> None:
    import dvsdk
    from dvsdk.errors import ModelError

    if node_case is None:
        pytest.skip(_root())
    model, feeds, expected = load(_root(), node_case)
    refused = REFUSED.get(node_case.id)
    if refused is not None:
        with pytest.raises(ModelError) as err:
            dvsdk.compile(model, golden=False)
        assert refused in str(err.value), f"refused for another reason: {err.value}"
        return
    net = dvsdk.compile(model, golden=False)
    on_hw = net.meta["stats"]["hw_ops"] > 0
    with dvsdk.load(net, sim) as loaded:
        got = loaded.run(feeds)
    assert set(got) == set(expected)
    for name, want in expected.items():
        _check(name, got[name], want, on_hw, ROUNDED.get(node_case.name))


def test_refused_list_is_current() -> None:
    """Every REFUSED entry names a node test that exists and is of an accepted op."""
    root = _root()
    if isinstance(root, str):
        pytest.skip(root)
    ids = {c.id for c in cases(root, _accepted())}
    stale = sorted(set(REFUSED) - ids)
    assert not stale, f"REFUSED lists node tests that are not run: {stale[:10]}"


#: op type -> input positions that define its output shape (ONNX operator specs: Reshape-14
#: shape, Expand-13 shape, Tile-13 repeats, ConstantOfShape-9 input, Range-11 start/limit/delta,
#: Slice-13 starts/ends/axes/steps, Pad-18 pads/axes, Resize-19 scales/sizes, Squeeze-13 /
#: Unsqueeze-13 / Reduce*-18 axes, Split-18 split, CenterCropPad-18 shape, Upsample-9 scales,
#: TopK-11 K, OneHot-11 depth, MaxUnpool-11 output_shape, Col2Im-18 image_shape/block_shape,
#: AffineGrid-20 size)
_SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Pad": (1, 3), "Resize": (2, 3), "Squeeze": (1,), "Unsqueeze": (1,),
    "Split": (1,), "Upsample": (1,), "CenterCropPad": (1,), "TopK": (1,), "OneHot": (1,),
    "MaxUnpool": (2,), "Col2Im": (1, 2), "AffineGrid": (1,),
    **{f"Reduce{r}": (1,) for r in "Sum Mean Max Min Prod L1 L2 LogSum LogSumExp SumSquare"
                                    .split()},
}


def test_not_constant_refusals_really_depend_on_data() -> None:
    """Each node test refused for "a shape-defining input is not constant" reads a shape
    parameter whose value depends on a graph input's *value* (Shape and Size depend only on
    shapes, which are static), so no compile-time folding could make it constant."""
    root = _root()
    if isinstance(root, str):
        pytest.skip(root)
    ids = [i for i, why in REFUSED.items() if why == "a shape-defining input is not constant"]
    assert ids
    for case_id in ids:
        case = NodeCase(case_id.removesuffix("[const]"), case_id.endswith("[const]"))
        model, feeds, _ = load(root, case)
        data = set(feeds)              # graph inputs left after load (initializers are not)
        for node in model.graph.node:  # topological in the node tests
            if node.op_type not in ("Shape", "Size") and data & set(node.input):
                data.update(node.output)
        assert any(node.input[k] in data for node in model.graph.node
                   for k in _SHAPE_INPUTS.get(node.op_type, ()) if k < len(node.input)
                   and node.input[k]), case_id
