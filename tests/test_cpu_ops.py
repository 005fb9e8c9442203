"""CPU kernels (dvsdk.cpu.ops / dvsdk.cpu.nn) against onnxruntime.

Metric everywhere: max-abs error <= 1e-4 * max(1, range of the ORT output), float32; integer
outputs must match exactly. Single-op models come from tests/onnx_models.py; random attribute
sweeps use hypothesis (derandomized, so CI is deterministic).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from dvsdk.compiler.fold import infer_and_fold
from dvsdk.compiler.frontends.onnx import SUPPORTED_OPS, load_onnx
from dvsdk.compiler.interpret import run_graph
from dvsdk.cpu.ops import KERNELS, run_op
from dvsdk.errors import ModelError

from . import onnx_models as M

SWEEP = settings(max_examples=int(os.environ.get("DVSDK_SWEEP_EXAMPLES", "40")), deadline=None,
                 derandomize=True)


def check_against_ort(model, feeds=None, input_sizes=None, positive=False) -> None:
    feeds = feeds or M.make_feeds(model, positive=positive, input_sizes=input_sizes)
    ref = M.ort_run(model, feeds)
    g = infer_and_fold(load_onnx(model, input_sizes))
    out = run_graph(g, feeds)
    for name, r in zip(g.outputs, ref, strict=True):
        M.assert_close(out[name], r, name)


@pytest.mark.parametrize("case", M.SINGLE_OP_CASES, ids=lambda c: c.name)
def test_single_op_matches_onnxruntime(case):
    check_against_ort(case.build(), input_sizes=case.input_sizes or None, positive=case.positive)


def test_every_supported_op_has_a_kernel_or_is_rewritten():
    assert SUPPORTED_OPS - set(KERNELS) == {"Constant", "Upsample"}


def test_every_hw_op_has_a_single_op_case():
    built = set()
    for case in M.SINGLE_OP_CASES:
        built.update(n.op_type for n in case.build().graph.node)
    missing = {"Conv", "ConvTranspose", "BatchNormalization", "Add", "Sub", "Mul", "Div",
               "Relu", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "Elu", "Clip", "MaxPool",
               "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "Pad", "Gemm", "MatMul",
               "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Concat", "Split", "Softmax",
               "Resize", "Upsample", "Transpose", "Identity", "Dropout", "Shape", "Gather",
               "Cast", "ConstantOfShape", "Slice", "Range", "Expand", "ReduceProd", "Equal",
               "Where", "LRN", "Sqrt", "Exp", "Log", "Neg", "Abs", "HardSigmoid",
               "HardSwish"} - built
    assert not missing


# --------------------------------------------------------------------------- sweeps
@SWEEP
@given(st.data())
def test_conv_random_attrs(data):
    d = data.draw
    g, cg, mg = d(st.integers(1, 3)), d(st.integers(1, 3)), d(st.integers(1, 3))
    k = [d(st.integers(1, 4)), d(st.integers(1, 4))]
    s = [d(st.integers(1, 3)), d(st.integers(1, 3))]
    dil = [d(st.integers(1, 2)), d(st.integers(1, 2))]
    auto = d(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto.startswith("SAME"):
        dil = [1, 1]  # onnxruntime rejects dilation with SAME_* padding
    pads = [d(st.integers(0, 2)) for _ in range(4)]
    eff = [(k[i] - 1) * dil[i] + 1 for i in range(2)]
    hw = [d(st.integers(eff[i], eff[i] + 6)) for i in range(2)]
    attrs = {"kernel_shape": k, "strides": s, "dilations": dil, "group": g}
    if auto == "NOTSET":
        attrs["pads"] = pads
    else:
        attrs["auto_pad"] = auto
    ins = [(1, g * cg, *hw), M.w(1, g * mg, cg, *k)]
    if d(st.booleans()):
        ins.append(M.w(2, g * mg))
    check_against_ort(M.single("Conv", ins, attrs))


@SWEEP
@given(st.data())
def test_conv_transpose_random_attrs(data):
    d = data.draw
    g, cg, mg = d(st.integers(1, 2)), d(st.integers(1, 3)), d(st.integers(1, 3))
    k = [d(st.integers(1, 3)), d(st.integers(1, 3))]
    s = [d(st.integers(1, 3)), d(st.integers(1, 3))]
    dil = [d(st.integers(1, 2)), d(st.integers(1, 2))]
    hw = [d(st.integers(1, 5)), d(st.integers(1, 5))]
    attrs = {"kernel_shape": k, "strides": s, "dilations": dil, "group": g}
    eff = [(k[i] - 1) * dil[i] + 1 for i in range(2)]
    if d(st.booleans()):
        nat = [s[i] * (hw[i] - 1) + eff[i] for i in range(2)]
        attrs["output_shape"] = [max(1, nat[i] - d(st.integers(0, 2))) for i in range(2)]
    else:
        pads = [d(st.integers(0, max(0, eff[i % 2] - 1))) for i in range(4)]
        outpad = [d(st.integers(0, s[i] - 1)) for i in range(2)]  # ORT: < stride
        assume(all(s[i] * (hw[i] - 1) + outpad[i] + eff[i] - pads[i] - pads[i + 2] > 0
                   for i in range(2)))
        attrs["pads"], attrs["output_padding"] = pads, outpad
    ins = [(1, g * cg, *hw), M.w(3, g * cg, mg, *k)]
    if d(st.booleans()):
        ins.append(M.w(4, g * mg))
    check_against_ort(M.single("ConvTranspose", ins, attrs))


@SWEEP
@given(st.data())
def test_pool_random_attrs(data):
    d = data.draw
    op = d(st.sampled_from(["MaxPool", "AveragePool"]))
    k = [d(st.integers(1, 3)), d(st.integers(1, 3))]
    s = [d(st.integers(1, 3)), d(st.integers(1, 3))]
    dil = [d(st.integers(1, 2)), d(st.integers(1, 2))] if op == "MaxPool" else [1, 1]
    pads = [d(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    eff = [(k[i] - 1) * dil[i] + 1 for i in range(2)]
    hw = [d(st.integers(eff[i], eff[i] + 6)) for i in range(2)]
    attrs = {"kernel_shape": k, "strides": s, "pads": pads, "ceil_mode": d(st.integers(0, 1))}
    if op == "MaxPool":
        attrs["dilations"] = dil
    else:
        attrs["count_include_pad"] = d(st.integers(0, 1))
    check_against_ort(M.single(op, [(1, 2, *hw)], attrs))


@SWEEP
@given(st.data())
def test_resize_random_attrs(data):
    d = data.draw
    mode = d(st.sampled_from(["nearest", "linear"]))
    ctms = ["half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"]
    if mode == "nearest":
        ctms.append("tf_half_pixel_for_nn")
    attrs = {"mode": mode, "coordinate_transformation_mode": d(st.sampled_from(ctms))}
    if mode == "nearest":
        attrs["nearest_mode"] = d(st.sampled_from(
            ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]))
    hw = (d(st.integers(2, 7)), d(st.integers(2, 7)))
    if d(st.booleans()):
        sc = [d(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 3.0])) for _ in range(2)]
        ins = [(1, 2, *hw), None, np.array([1, 1, *sc], np.float32)]
    else:
        sz = [d(st.integers(1, 12)) for _ in range(2)]
        ins = [(1, 2, *hw), None, None, np.array([1, 2, *sz], np.int64)]
    check_against_ort(M.single("Resize", ins, attrs))


@SWEEP
@given(st.data())
def test_slice_random(data):
    d = data.draw
    rank = d(st.integers(1, 3))
    shape = [d(st.integers(1, 6)) for _ in range(rank)]
    axes = d(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank,
                      unique_by=lambda a: a % rank))
    bound = st.one_of(st.integers(-8, 8), st.sampled_from([2**62, -(2**62)]))
    starts = [d(bound) for _ in axes]
    ends = [d(bound) for _ in axes]
    steps = [d(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in axes]
    ins = [tuple(shape), *(np.array(v, np.int64) for v in (starts, ends, axes, steps))]
    model = M.single("Slice", ins)
    check_against_ort(model)


# --------------------------------------------------------------------------- unit checks
def test_integer_div_truncates_like_onnxruntime():
    node = helper.make_node("Div", ["a", "b"], ["y"])
    model = M.make_model([node], [("a", (6,), TensorProto.INT64), ("b", (6,), TensorProto.INT64)],
                         [("y", TensorProto.INT64)])
    feeds = {"a": np.array([7, -7, 7, -7, 0, 9], np.int64),
             "b": np.array([2, 2, -2, -2, 3, 3], np.int64)}
    check_against_ort(model, feeds)


def test_softmax_opset11_coerces_to_2d():
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    new = run_op("Softmax", [x], {"axis": 1, "opset": 13})[0]
    old = run_op("Softmax", [x], {"axis": 1, "opset": 11})[0]
    assert not np.allclose(new, old)
    np.testing.assert_allclose(old.reshape(2, 12).sum(axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(new.sum(axis=1), 1.0, rtol=1e-6)


def test_kernels_keep_float32():
    x = np.ones((1, 2, 4, 4), np.float32)
    w = np.ones((3, 2, 3, 3), np.float32)
    assert run_op("Conv", [x, w], {"pads": [1, 1, 1, 1]})[0].dtype == np.float32
    assert run_op("AveragePool", [x], {"kernel_shape": [2, 2]})[0].dtype == np.float32
    assert run_op("Resize", [x, None, np.array([1, 1, 2, 2], np.float32)],
                  {"mode": "linear"})[0].dtype == np.float32


def test_run_graph_checks_feeds():
    g = infer_and_fold(load_onnx(M.single("Relu", [(1, 3)])))
    with pytest.raises(ModelError, match="missing feed"):
        run_graph(g, {})
    with pytest.raises(ModelError, match="wrong shape"):
        run_graph(g, {"x0": np.zeros((1, 4), np.float32)})
    out = run_graph(g, {"x0": np.array([[-1.0, 0.0, 2.0]])}, outputs=["y0"])
    np.testing.assert_array_equal(out["y0"], np.array([[0, 0, 2]], np.float32))


def test_unknown_kernel_is_a_model_error():
    with pytest.raises(ModelError, match="no CPU kernel"):
        run_op("NotAnOp", [], {})


def test_cpu_ops_import_without_onnx():
    """The board runtime has numpy but no onnx: cpu_ops and the IR must import without it."""
    code = ("import sys; sys.modules['onnx'] = None; import numpy as np; "
            "import dvsdk.cpu.ops as c, dvsdk.compiler.ir as ir; "
            "x = np.ones((1, 1, 3, 3), np.float32); "
            "print(c.run_op('MaxPool', [x], {'kernel_shape': [2, 2]})[0].shape)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "(1, 1, 2, 2)"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("kernel,strides,pads,dil", [
    ([2, 1], [2, 1], [0, 0, 0, 0], [1, 1]), ([3, 3], [2, 2], [1, 1, 1, 1], [1, 1]),
    ([2, 2], [1, 1], [0, 1, 0, 1], [2, 2])])
def test_max_pool_zero_signs_and_nan_against_a_window_loop(dtype, kernel, strides, pads, dil):
    """MaxPool on inputs full of +0 and -0 (a HardSwish's zeros), with NaN and -inf: each
    output against a plain loop over its window (padding is -inf): the largest value, a
    zero result +0 where the window holds a +0 and -0 where it holds only -0, NaN where
    the window holds one; an input held in (N, H, W, C) order gives the same bits."""
    from dvsdk.cpu.nn import max_pool

    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 9, 10)).astype(dtype)
    x[x < 0.4] = 0.0
    x[(x == 0) & (rng.random(x.shape) < 0.6)] = -0.0
    for with_nan in (False, True):
        if with_nan:
            x.flat[::53] = np.nan
            x.flat[7::29] = -np.inf
        attrs = {"kernel_shape": kernel, "strides": strides, "pads": pads, "dilations": dil}
        got = max_pool([x], attrs)[0]
        # the same values held as a device tensor is (an (N, H, W, C) array seen as NCHW)
        hwc_view = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        assert got.tobytes() == max_pool([hwc_view], attrs)[0].tobytes()
        ph, pw = pads[0], pads[1]
        xp = np.full((2, 3, 9 + pads[0] + pads[2], 10 + pads[1] + pads[3]), -np.inf, dtype)
        xp[:, :, ph:ph + 9, pw:pw + 10] = x
        oh = (xp.shape[2] - dil[0] * (kernel[0] - 1) - 1) // strides[0] + 1
        ow = (xp.shape[3] - dil[1] * (kernel[1] - 1) - 1) // strides[1] + 1
        assert got.shape == (2, 3, oh, ow) and got.dtype == dtype
        for n, c, i, j in np.ndindex(got.shape):
            win = xp[n, c, i * strides[0]:i * strides[0] + dil[0] * (kernel[0] - 1) + 1:dil[0],
                     j * strides[1]:j * strides[1] + dil[1] * (kernel[1] - 1) + 1:dil[1]].ravel()
            v = got[n, c, i, j]
            if np.isnan(win).any():
                assert np.isnan(v)
            elif win.max() == 0:
                plus = any(w == 0 and not np.signbit(w) for w in win)
                assert v == 0 and bool(np.signbit(v)) == (not plus)
            else:
                assert v == win.max()


def test_pow_by_a_one_element_integer_exponent_is_the_product():
    """Pow(x, [2]) and Pow(x, [-3]) (LayerNorm's square, a (1,)-shaped constant) are the
    float64 products rounded once (numpy's own x*x, 1/(x*x*x)), NaN, infinities and
    signed zeros included, in the broadcast shape (a 0-d base to a (1,) exponent: (1,))."""
    from dvsdk.cpu.ops import run_op

    rng = np.random.default_rng(9)
    x = np.concatenate([rng.standard_normal(500) * 50,
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e-30]]
                       ).astype(np.float32).reshape(2, -1)
    xd = x.astype(np.float64)
    with np.errstate(all="ignore"):
        for exp_dtype in (np.float32, np.int64):
            sq = run_op("Pow", [x, np.array([2], exp_dtype)], {})[0]
            assert sq.dtype == np.float32 and sq.shape == x.shape
            assert np.array_equal(sq, (xd * xd).astype(np.float32), equal_nan=True)
            inv = run_op("Pow", [x, np.array([-3], exp_dtype)], {})[0]
            want = (1.0 / (xd * xd * xd)).astype(np.float32)
            assert np.array_equal(inv.view(np.uint32)[~np.isnan(want)],
                                  want.view(np.uint32)[~np.isnan(want)])
            assert np.isnan(inv[np.isnan(want)]).all()
    assert run_op("Pow", [np.array(3.0, np.float32), np.array([2.0], np.float32)], {}
                  )[0].shape == (1,)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_of_an_hwc_array_seen_as_nchw(mode):
    """DepthToSpace of a device tensor as the runtime holds it (an (H, W, C) array seen as
    (1, C, H, W)) moves the same elements as ONNX's definition written here with explicit
    index arithmetic."""
    from dvsdk.cpu.nn import depth_to_space

    bs, c, h, w = 2, 12, 5, 7
    hwc = np.random.default_rng(2).standard_normal((h, w, c)).astype(np.float32)
    x = hwc.transpose(2, 0, 1)[None]
    got = depth_to_space([x], {"blocksize": bs, "mode": mode})[0]
    cout = c // (bs * bs)
    want = np.empty((1, cout, h * bs, w * bs), np.float32)
    for k, yy, xx in np.ndindex(cout, h * bs, w * bs):
        i, j = yy % bs, xx % bs
        ch = (i * bs + j) * cout + k if mode == "DCR" else k * bs * bs + i * bs + j
        want[0, k, yy, xx] = hwc[yy // bs, xx // bs, ch]
    assert got.shape == want.shape and np.array_equal(got, want)
    assert np.array_equal(depth_to_space([np.ascontiguousarray(x)], {"blocksize": bs,
                                                                     "mode": mode})[0], want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_by_two_is_the_rounded_float64_square_bit_for_bit(dtype):
    """Pow(x, 2) (LayerNorm's square) of float32 and float64 is the float64 square rounded
    once to x's type, bit for bit: NaN payloads, subnormal results, overflow to inf and
    signed zeros included, for a C-ordered base and for a transposed view of one."""
    from dvsdk.cpu.ops import run_op

    rng = np.random.default_rng(21)
    bits = rng.integers(0, 2**32, 4000, dtype=np.uint64).astype(np.uint32)
    x32 = np.concatenate([bits.view(np.float32),
                          np.array([0.0, -0.0, np.inf, -np.inf, 1e-23, -3e-23, 1.9e19, 1.0, -1.0],
                                   np.float32),
                          np.array([0x7FC12345, 0xFFA00001], np.uint32).view(np.float32)])
    with np.errstate(all="ignore"):
        x = x32.astype(dtype) if dtype == np.float32 else np.concatenate(
            [x32.astype(np.float64), rng.standard_normal(500) * 1e160, [1e-170, -2e-162]])
        x = x[: x.size // 2 * 2].reshape(2, -1)
        xd = x.astype(np.float64)  # (float32 -> float64 keeps every payload)
        want = (xd * xd).astype(dtype)
        for base, ref in ((x, want), (x.T, want.T)):
            for exponent in (np.array([2.0], np.float32), np.array([2], np.int64),
                             np.array(2.0, dtype)):
                got = run_op("Pow", [base, exponent], {})[0]
                assert got.dtype == dtype and got.shape == base.shape
                assert np.array_equal(got.view(f"u{got.itemsize}"), ref.view(f"u{ref.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_mean_is_numpys_mean_bit_for_bit(dtype):
    """ReduceMean is numpy's mean (its pairwise sum over the reduced axes in the array's
    memory order, divided by the count), bit for bit, for every axis set of C-ordered,
    Fortran-ordered and transposed float arrays, keepdims 0 and 1, in the result's
    shape and type."""
    import itertools

    from dvsdk.cpu.ops import run_op

    rng = np.random.default_rng(5)
    base = (rng.standard_normal((3, 5, 129)) * 10.0 ** rng.integers(-20, 20, (3, 5, 129))
            ).astype(dtype)
    for x in (base, np.asfortranarray(base), base.transpose(2, 0, 1)):
        for r in range(1, 4):
            for axes in itertools.combinations(range(3), r):
                for keep in (0, 1):
                    got = run_op("ReduceMean", [x, np.array(axes, np.int64)],
                                 {"keepdims": keep})[0]
                    want = np.asarray(np.mean(x, axis=axes, keepdims=bool(keep)))
                    assert got.dtype == dtype and got.shape == want.shape
                    assert np.array_equal(np.ravel(got).view(f"u{got.itemsize}"),
                                          np.ravel(want).view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_few_zero_results_take_the_sign_of_their_windows(dtype):
    """MaxPool where only a few windows have a zero maximum (most values positive, a few
    windows all zeros of mixed signs): each such output +0 where its window holds a +0
    and -0 where it holds only -0, every other output its window's largest value, by a
    plain loop over the windows; both memory orders of the input."""
    from dvsdk.cpu.nn import max_pool

    rng = np.random.default_rng(8)
    x = rng.uniform(0.5, 2.0, (1, 16, 12, 20)).astype(dtype)
    x[0, :, 0:2, 0:1] = [[0.0], [-0.0]]   # windows (row pairs) of zeros: +0 and -0
    x[0, 3, 4:6, 7] = -0.0                # all -0
    x[0, 5, 8:10, 9] = [-0.0, 0.0]
    x[0, 7, 2:4, 3] = [-0.0, -1.0]        # -0 and a negative
    attrs = {"kernel_shape": [2, 1], "strides": [2, 1]}
    for view in (x, np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)):
        got = max_pool([view], attrs)[0]
        assert got.shape == (1, 16, 6, 20) and got.dtype == dtype
        for c, i, j in np.ndindex(16, 6, 20):
            win = x[0, c, 2 * i:2 * i + 2, j]
            v = got[0, c, i, j]
            if win.max() == 0:
                plus = any(w == 0 and not np.signbit(w) for w in win)
                assert v == 0 and bool(np.signbit(v)) == (not plus), (c, i, j)
            else:
                assert v == win.max()
