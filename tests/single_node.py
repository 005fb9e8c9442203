"""One ONNX op as a model, and its references: the ONNX reference implementation and
onnxruntime, for the CPU-kernel tests (test_transformer_ops.py, test_more_ops_a.py,
test_more_ops_b.py); and the comparison they share."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

#: 8 units of float32 rounding of the largest expected value
TOL = 8 * float(np.finfo(np.float32).eps)


def node_model(op: str, ins: list, attrs: dict, n_out: int = 1, opset: int = 23,
               types: list | None = None):
    """(model, feeds): ``op`` on inputs ``i0, i1, ...`` (None: an omitted optional input),
    outputs ``o0, ...`` of ``types`` (ONNX element types; default: the first input's)."""
    names = [f"i{k}" if x is not None else "" for k, x in enumerate(ins)]
    node = helper.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
           for n, x in zip(names, ins, strict=True) if x is not None]
    types = types or [helper.np_dtype_to_tensor_dtype(ins[0].dtype)] * n_out
    outs = [helper.make_tensor_value_info(f"o{k}", types[k], None) for k in range(n_out)]
    m = helper.make_model(helper.make_graph([node], "g", vis, outs),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 17 else 10
    return m, {n: x for n, x in zip(names, ins, strict=True) if x is not None}


def reference(op: str, ins: list, attrs: dict, n_out: int = 1, opset: int = 23,
              types: list | None = None) -> list:
    """The ONNX reference implementation's outputs."""
    from onnx.reference import ReferenceEvaluator

    m, feeds = node_model(op, ins, attrs, n_out, opset, types)
    return ReferenceEvaluator(m).run(None, feeds)


def ort_node(op: str, ins: list, attrs: dict, n_out: int = 1, opset: int = 13,
             types: list | None = None) -> list:
    """onnxruntime's outputs (CPU provider)."""
    ort = pytest.importorskip("onnxruntime")
    m, feeds = node_model(op, ins, attrs, n_out, opset, types)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def close(got: list, want: list, what: object = "", tol: float = TOL) -> None:
    """Each expected output: the same shape and type; integers and booleans equal; floats
    NaN where NaN, the same infinities, the finite values within ``tol`` of the largest."""
    assert len(got) >= len(want), what
    for g, w in zip(got, want, strict=False):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (what, g.shape, w.shape, g.dtype,
                                                           w.dtype)
        if w.dtype.kind != "f":
            assert np.array_equal(g, w), what
            continue
        assert np.array_equal(np.isnan(g), np.isnan(w)), what
        assert np.array_equal(np.isinf(g) & (g > 0), np.isinf(w) & (w > 0)), what
        assert np.array_equal(np.isinf(g) & (g < 0), np.isinf(w) & (w < 0)), what
        fin = np.isfinite(w)
        if fin.any():
            err = np.max(np.abs(g[fin].astype(np.float64) - w[fin]))
            assert err <= tol * max(float(np.max(np.abs(w[fin]))), 1e-30), (what, err)
