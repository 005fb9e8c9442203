"""Compiler end to end: whole networks, regressions, bad models and the output file,
against onnxruntime (metric and tolerances: tests/test_compile.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from dvsdk.compiler.build import compile
from dvsdk.errors import ModelError, UnsupportedOps
from dvsdk.runtime.net import Net

from . import onnx_models as M
from .compile_harness import (
    Q_TOL_REL,
    SIM,
    TOL_REL,
    S,
    assert_matches,
    cpu_types,
    hw_commands,
    hw_stage_count,
    ort,
    ort_reference,
    pad_maxpool,
    program_ops,
    resize_after_conv,
    run_case,
    where,
)


# --------------------------------------------------------------------------- regressions
def _pad_maxpool_input() -> np.ndarray:
    """Negative FP16-exact values: a border window's max is the padded 0, and both the
    simulator and onnxruntime are exact on them."""
    x = -np.random.default_rng(3).uniform(0.5, 2.0, (1, 8, 6, 6))
    return x.astype(np.float16).astype(np.float32)


def _pad_maxpool_numpy(x: np.ndarray) -> np.ndarray:
    """:func:`pad_maxpool` in numpy: zero Pad of one row/column on each side, then a 3x3
    stride-1 max-pool."""
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
    return win.max(axis=(-2, -1))


def test_pad_then_maxpool_keeps_the_zero_border() -> None:
    """A zero Pad before a MaxPool is not MaxPool padding (-inf): the compiler keeps the Pad
    on the CPU (it never folds Pad into MaxPool), so a border window over negative values
    gives the padded 0.  Checked against numpy, since onnxruntime's optimizer once got this
    very graph wrong (below)."""
    model = pad_maxpool()
    x = _pad_maxpool_input()
    ref = _pad_maxpool_numpy(x)
    assert np.all(ref[..., 0, :] == 0) and np.all(ref[..., :, 0] == 0)
    assert np.all(ref[..., 1:-1, 1:-1] < 0)
    net, out = run_case(model, {"x": x})  # (and against onnxruntime, graph as written)
    np.testing.assert_array_equal(out["y"], ref)
    assert cpu_types(net) == ["Pad"] and ("MaxPool", "hw") in where(net)


def test_the_onnxruntime_reference_runs_the_graph_as_written() -> None:
    """Every reference runs with ORT_DISABLE_ALL (:func:`ort_reference`), so it computes the
    graph as written: on Pad -> MaxPool it agrees with numpy whatever onnxruntime does with
    its optimizer on."""
    x = _pad_maxpool_input()
    np.testing.assert_array_equal(ort_reference(pad_maxpool(), {"x": x})[0],
                                  _pad_maxpool_numpy(x))


def test_onnxruntime_optimizer_pad_maxpool_fusion_bug() -> None:
    """onnxruntime's own bug, the reason for ORT_DISABLE_ALL (no dvsdk code runs here):
    1.31's optimizer fuses a zero Pad into the following MaxPool as if it were MaxPool
    padding (-inf), so a border window over negative values returns their max instead of
    the padded 0.  Skips on an onnxruntime that has fixed it (1.32 has)."""
    x = _pad_maxpool_input()
    optimized = ort_reference(pad_maxpool(), {"x": x}, optimize=True)[0]
    ref = _pad_maxpool_numpy(x)
    if np.array_equal(ref, optimized):  # pragma: no cover - a fixed onnxruntime
        pytest.skip(f"onnxruntime {ort.__version__} no longer mis-fuses Pad into MaxPool")
    assert np.max(np.abs(ref - optimized)) > 0.4


def test_resize_tf_half_pixel_not_mapped_as_replicate() -> None:
    """Regression: nearest Resize with tf_half_pixel_for_nn/ceil (and any 2x-sized output
    that is not y[i, j] = x[i // 2, j // 2]) was lowered to the 2x upsample run and gave
    wrong values (error 0.8 x range)."""
    for build in (S("resize_nearest_tf_half_pixel_for_nn"),
                  resize_after_conv(scales=(1, 1, 2.1, 2.1),
                                    coordinate_transformation_mode="asymmetric",
                                    nearest_mode="floor")):
        net, _ = run_case(build())
        assert ("Resize", "cpu") in where(net)
    # align_corners happens to replicate for 4 -> 8 with round_prefer_ceil: hardware
    net, _ = run_case(S("resize_nearest_align_corners")())
    assert ("Resize", "hw") in where(net)


@pytest.mark.parametrize("name", ["shape", "constant_of_shape", "range"])
def test_constant_output(name: str) -> None:
    """Regression: an output that folds to a constant had no producer in the program and
    Net.run raised "tensor has no value at this point"; it now comes from CNST."""
    model = S(name)()
    net = compile(model)
    assert net.meta["program"] == []
    feeds = M.make_feeds(model, seed=1)
    ref = ort_reference(model, feeds)[0]
    with Net(net, SIM) as n:
        np.testing.assert_allclose(n.run(feeds)[net.meta["outputs"][0]["name"]], ref)
        assert n.selftest()["passed"]


# --------------------------------------------------------------------------- networks
def _all_convs_on_hw(net) -> None:
    convs = [r for r in net.meta["report"] if r["type"] in ("Conv", "ConvTranspose")]
    assert convs and all(r["where"] == "hw" for r in convs), \
        [r for r in convs if r["where"] != "hw"]


@pytest.mark.parametrize("quantize", [False, True], ids=["fp16", "quantized"])
def test_mobilenetv2_like(quantize: bool) -> None:
    model = M.mobilenetv2_like(size=64)
    # (a command per layer: the fusions below are per lowered command)
    net, out = run_case(model, tol_rel=Q_TOL_REL if quantize else TOL_REL, quantize=quantize,
                        chain=False)
    _all_convs_on_hw(net)
    assert cpu_types(net) == ["Softmax"]
    assert "BatchNormalization" not in [t for t, _ in where(net)]
    cmds = hw_commands(net)
    # stem, 6 depthwise, 5 expansions and the last 1x1 carry their ReLU6; the two
    # stride-1 projections with equal channels carry their residual Add
    assert sum(cmd == ["Conv", "Clip"] for cmd in cmds) == 13
    assert sum(cmd == ["Conv", "Add"] for cmd in cmds) == 2
    assert sum(out[net.meta["outputs"][0]["name"]].ravel()) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("quantize", [False, True], ids=["fp16", "quantized"])
def test_resnet_like(quantize: bool) -> None:
    model = M.resnet_like(size=64)
    net, _ = run_case(model, tol_rel=Q_TOL_REL if quantize else TOL_REL, quantize=quantize)
    _all_convs_on_hw(net)
    assert cpu_types(net) == []
    cmds = hw_commands(net)
    assert ["Conv", "Relu", "MaxPool"] in cmds      # stem: conv + BN + ReLU + max-pool
    assert sum(cmd == ["Conv", "Add", "Relu"] for cmd in cmds) == 2  # residual tails


def test_repeated_runs_are_independent() -> None:
    """Run after run on one loaded net (hardware segments, a CPU op, arena slots reused):
    each result is that input's, nothing leaks from the run before."""
    model = M.mobilenetv2_like(size=32)
    net = compile(model, golden=False)
    feeds = [M.make_feeds(model, seed=s) for s in (1, 2, 1)]
    with Net(net, SIM) as n:
        outs = [n.run(f) for f in feeds]
    name = net.meta["outputs"][0]["name"]
    for f, o in zip(feeds, outs):
        assert_matches(o[name], ort_reference(model, f)[0])
    np.testing.assert_array_equal(outs[0][name], outs[2][name])
    assert not np.array_equal(outs[0][name], outs[1][name])


def test_torch_export_like() -> None:
    """Shape subgraphs (Shape, Gather, Unsqueeze, Concat, ConstantOfShape, Slice, Cast ...)
    fold to constants: none of them is left in the program."""
    model = M.torch_export_like()
    net, _ = run_case(model)
    ops = program_ops(net)
    for t in ("Shape", "Gather", "ConstantOfShape", "Unsqueeze", "Concat", "Slice", "Cast",
              "Transpose", "Floor", "Pad"):
        assert t not in ops, ops
    _all_convs_on_hw(net)
    assert ("Resize", "hw") in where(net) and ("Gemm", "hw") in where(net)
    assert cpu_types(net) == []  # its 4x4/4 MaxPool runs as two 2x2 stages


def test_dynamic_spatial_with_input_size() -> None:
    model = M.dynamic_spatial_model()
    net = compile(model, input_size=(12, 10), golden=False)
    assert net.meta["inputs"][0]["shape"] == [1, 3, 12, 10]
    x = np.random.default_rng(5).standard_normal((1, 3, 12, 10)).astype(np.float32)
    with Net(net, SIM) as n:
        y = n.run(x)
    assert_matches(y[net.meta["outputs"][0]["name"]], ort_reference(model, {"x": x})[0])
    assert cpu_types(net) == []
    # a fixed model: input_size must agree with it
    assert compile(M.conv_bn_relu(), input_size=(10, 10), golden=False)
    with pytest.raises(ModelError, match="conflicts with the model's fixed dimension"):
        compile(M.conv_bn_relu(), input_size=(20, 20))
    with pytest.raises(ModelError, match="positive"):
        compile(model, input_size=(0, 10))


# --------------------------------------------------------------------------- bad models
def test_unknown_ops_listed_with_node_names() -> None:
    with pytest.raises(UnsupportedOps) as ei:
        compile(M.unknown_ops_model())
    e = ei.value
    assert e.ops == [("NonMaxSuppression", "nms_1"), ("Unique", "unique_7"),
                     ("com.example::FancyOp", "fancy")]
    for text in ("NonMaxSuppression (nms_1)", "Unique (unique_7)", "FancyOp (fancy)"):
        assert text in str(e)
    assert "relu_ok" not in str(e)


def test_dynamic_shape_needs_input_size() -> None:
    with pytest.raises(ModelError) as ei:
        compile(M.dynamic_spatial_model())
    assert "--input-size" in str(ei.value) and "height" in str(ei.value)
    assert not isinstance(ei.value, UnsupportedOps)


@pytest.mark.parametrize("data", [b"", b"garbage\x00\x01\x02", b"\x08\x07" * 50],
                         ids=["empty", "garbage", "bad-protobuf"])
def test_corrupt_model(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "broken.onnx"
    path.write_bytes(data)
    with pytest.raises(ModelError):
        compile(str(path))
    good = M.conv_bn_relu().SerializeToString()
    path.write_bytes(good[: len(good) // 2])  # truncated protobuf
    with pytest.raises(ModelError, match="ONNX"):
        compile(path)


def test_missing_file_and_missing_initializer() -> None:
    with pytest.raises(ModelError, match="not found"):
        compile("/nonexistent/model.onnx")
    with pytest.raises(ModelError, match="W_missing"):
        compile(M.missing_initializer_model())


# --------------------------------------------------------------------------- output file
def test_output_file_selftest(tmp_path: Path) -> None:
    path = tmp_path / "net.bin"
    net = compile(M.conv_add_relu(), output=path)
    assert path.read_bytes()[:8] == b"DVNETBIN"
    with Net(path, SIM) as n:
        res = n.selftest()
    assert res["passed"] is True, res
    assert net.meta["golden"]["sim_max_abs_error"]
    assert [p.name for p in tmp_path.iterdir()] == ["net.bin"]  # no temporary left


def test_output_file_from_path_model(tmp_path: Path) -> None:
    src = tmp_path / "model.onnx"
    onnx.save(M.mobilenetv2_like(size=32), str(src))
    out = tmp_path / "mnv2.bin"
    net = compile(str(src), output=out, quantize=True)
    assert net.meta["source"] == src.name  # only the file name: output independent of cwd
    with Net(str(out), SIM) as n:
        assert n.selftest()["passed"] is True


def test_output_not_written_when_compile_fails(tmp_path: Path) -> None:
    path = tmp_path / "net.bin"
    with pytest.raises(UnsupportedOps):
        compile(M.unknown_ops_model(), output=path)
    assert not path.exists()
    path.write_bytes(b"previous good file")
    with pytest.raises(ModelError):
        compile(M.dynamic_spatial_model(), output=path)
    assert path.read_bytes() == b"previous good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.bin"]


def test_output_write_is_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while writing (here: fsync) leaves the previous file and no temporary."""
    path = tmp_path / "net.bin"
    path.write_bytes(b"previous good file")

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="No space"):
        compile(M.conv_bn_relu(), output=path, golden=False)
    assert path.read_bytes() == b"previous good file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.bin"]


@pytest.mark.parametrize("k,size,commands", [(4, 16, 2), (6, 12, 2), (9, 18, 2), (5, 10, 2),
                                              (7, 14, 3)])
def test_large_non_overlapping_maxpool_runs_in_stages(k, size, commands):
    """max over a k x k block = max of block maxima: k = 2^a 3^b runs as 2x2/3x3 stages;
    other k as a stride-1 cascade whose last stage has stride k (test_compile_rewrites)."""
    g = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[k, k])], "mp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, size // k, size // k])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    net = compile(model, golden=False)
    assert [r["where"] for r in net.meta["report"]] == ["hw"]
    assert hw_stage_count(net) == commands and net.meta["stats"]["commands"] == 1
    feeds = {"x": np.random.default_rng(k).uniform(-4, 4, (1, 8, size, size)).astype(np.float32)}
    ref = ort_reference(model, feeds)[0]
    with Net(net, SIM) as n:
        y = n.run(feeds)["y"]
    assert np.max(np.abs(y - ref)) <= 4e-3  # FP16 rounding of the inputs only


def test_a_per_element_run_never_writes_over_its_own_input():
    """BatchNormalization after an Add becomes a depthwise 1x1 run and the Add's result
    dies there; still the run writes to its own slot: the reference does not say the
    hardware reads the whole input before storing output, and a depthwise/pool run is
    "one tile" by calc_num_tiles_pool's fixed budget whatever the unified buffer (§7.2),
    so the input need not be in the UBUF."""
    model = M.bn_standalone()
    net = compile(model, golden=False)
    offs = net.meta["arena"]["offsets"]
    bn = next(r for r in net.meta["report"] if r["type"] == "BatchNormalization")
    assert "depthwise 1x1" in bn["detail"]
    src, dst = offs["add_out5"], offs["batchnormalization_out11"]
    n = 5 * 5 * 3 * 2  # (1, 3, 5, 5) FP16
    assert src + n <= dst or dst + n <= src
    feeds = M.make_feeds(model, seed=4)
    ref = ort_reference(model, feeds)
    with Net(net, SIM) as n:
        out = n.run(feeds)
    for spec, r in zip(net.meta["outputs"], ref):
        assert np.max(np.abs(out[spec["name"]] - r)) <= 1e-3 + 1e-2 * np.ptp(r)


def test_quantized_selftest_measures_the_device_not_the_quantization():
    """The golden reference of a --quantize net is the quantized model itself, so its
    tolerance is FP16-tight; the per-layer quantization error is reported."""
    net = compile(M.mobilenetv2_like(), quantize=True)
    quant = net.meta["quantization"]
    assert len(quant) == sum(1 for r in net.meta["report"] if r["type"] in ("Conv", "Gemm"))
    assert all(0 < q["rel_rms"] < 0.02 for q in quant)
    (tol,) = net.meta["golden"]["tolerance"].values()
    assert tol <= 2e-3
    with Net(net, SIM) as n:
        assert n.selftest()["passed"]



def _inception(size: int = 12) -> onnx.ModelProto:
    """GoogLeNet inception_3b in miniature: 1x1 | 1x1 -> 3x3 | 1x1 -> 5x5 | pool -> 1x1."""
    b = M.NetBuilder(91)
    x0 = b.node("Relu", [b.conv("x", 16, 32, k=1)])
    b1 = b.node("Relu", [b.conv(x0, 32, 16, k=1)])
    b2 = b.node("Relu", [b.conv(b.node("Relu", [b.conv(x0, 32, 8, k=1)]), 8, 16, k=3, p=1)])
    b3 = b.node("Relu", [b.conv(b.node("Relu", [b.conv(x0, 32, 8, k=1)]), 8, 8, k=5, p=2)])
    mp = b.node("MaxPool", [x0], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    b4 = b.node("Relu", [b.conv(mp, 32, 8, k=1)])
    y = b.node("Concat", [b1, b2, b3, b4], axis=1)
    return b.model([("x", (1, 16, size, size))], [y], "inception")


def test_branches_into_a_concat_become_one_multi_run_command():
    """§4.1: the inception module runs as one command with topo 0x55 (the reduce convs and
    the branch pool stay in the unified buffer), as DMP's own test_multirun config; it
    matches onnxruntime and beats separate commands on cycles and arena size."""
    model = _inception()
    feeds = M.make_feeds(model, seed=1)
    ref = ort_reference(model, feeds)[0]
    results = {}
    for multirun in (True, False):
        net = compile(model, multirun=multirun, chain=False, golden=False)
        with Net(net, SIM) as n:
            y = n.run(feeds)[net.meta["outputs"][0]["name"]]
            results[multirun] = (n.last_run.cycles, net.meta["arena"]["size"],
                                 hw_commands(net))
        assert_matches(y, ref)
    (cyc_m, arena_m, cmds_m), (cyc_s, arena_s, cmds_s) = results[True], results[False]
    assert len(cmds_m) == 2 and len(cmds_s) == 8
    concat = next(r for r in compile(model, golden=False).meta["report"]
                  if r["type"] == "Concat")
    assert "multi-run topo 0x55" in concat["detail"]
    assert cyc_m < 0.7 * cyc_s and arena_m < arena_s
    with Net(compile(model, golden=False), SIM) as n:  # the profile row: branches appended
        row = next(r for r in n.profile(feeds) if r["kind"].startswith("multi-run"))
    assert row["output"][2] == ref.shape[1] and row["runs"] == 7


def test_concat_falls_back_to_zero_copy_placement():
    """Without multi-run (or when it does not validate) each branch is its own command and
    the producers write straight into the concat buffer."""
    for net in (compile(_inception(), multirun=False, golden=False),
                compile(_inception(48), ub_size=65536, golden=False)):  # §7.3 peak too big
        concat = next(r for r in net.meta["report"] if r["type"] == "Concat")
        assert "zero-copy" in concat["detail"]
