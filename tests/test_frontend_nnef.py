"""The NNEF frontend: real NNEF files through the compiler, the IR and the simulator.

References (never the frontend's own output):

* the models in ``tests/data/nnef/`` were written by the Khronos NNEF-Tools converter from
  ONNX twins checked in beside them (``tools/make_nnef_models.py``); onnxruntime runs the
  twin.  In the IR interpreter (float32) the NNEF graph must agree to float rounding; compiled
  for the DV700 and run on ``sim://`` it must agree at the suite's FP16 tolerance
  (``tests/compile_harness.py``);
* hand-written ``graph.nnef`` texts for the ops the converter never emits run on the Khronos
  reference runtime (``nnef.Session``, its compound fragments expanded by the Khronos parser),
  or, where that runtime has no implementation (borders other than constant, 'aligned',
  factors other than 2), on numpy written here from S1's definitions.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.build import compile as compile_model
from dvsdk.compiler.fold import infer_and_fold
from dvsdk.compiler.frontends import detect, load
from dvsdk.compiler.interpret import run_graph
from dvsdk.errors import ModelError, UnsupportedOps
from dvsdk.runtime.net import Net

from .compile_harness import assert_matches
from .conftest import DATA, ROOT

nnef = pytest.importorskip("nnef")
ort = pytest.importorskip("onnxruntime")

NNEF_DATA = DATA / "nnef"
MODELS = ("convs", "pools", "eltwise", "shapes", "upsample")
#: the NNEF ops each converted model must contain (so a converter change cannot hollow out a test)
EXPECTED_OPS = {
    "convs": {"conv", "deconv", "relu", "leaky_relu", "prelu", "elu", "clamp", "sigmoid",
              "tanh", "batch_normalization", "unsqueeze", "copy"},
    "pools": {"max_pool", "avg_pool", "mean_reduce", "max_reduce", "add"},
    "eltwise": {"add", "sub", "mul", "div", "tanh", "sigmoid", "abs", "clamp",
                "batch_normalization", "local_response_normalization", "softmax"},
    "shapes": {"concat", "split", "pad", "transpose", "reshape", "unsqueeze", "squeeze",
               "linear", "matmul", "softmax", "relu"},
    "upsample": {"nearest_upsample", "multilinear_upsample", "concat"},
}
SIM = "sim://"


def _ort(model: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model), so, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))


def _feeds(model: Path, seed: int = 3) -> dict[str, np.ndarray]:
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}


def _nnef_ops(path: Path) -> set[str]:
    return {op.name for op in nnef.load_graph(str(path), load_variables=False).operations}


# --------------------------------------------------------------------------- converted models
@pytest.mark.parametrize("name", MODELS)
def test_converted_model_equals_onnxruntime_in_the_ir(name):
    """The frontend's IR (float32 interpreter) computes what onnxruntime computes on the ONNX
    model the NNEF files were converted from: every op converted exactly."""
    path = NNEF_DATA / f"{name}.nnef"
    assert EXPECTED_OPS[name] <= _nnef_ops(path)
    feeds = _feeds(NNEF_DATA / f"{name}.onnx")
    ref = _ort(NNEF_DATA / f"{name}.onnx", feeds)
    g = load(path)
    assert g.layout == "NCHW" and sorted(g.inputs) == sorted(feeds)
    out = run_graph(infer_and_fold(g), feeds)
    assert sorted(out) == sorted(ref)
    for k, r in ref.items():
        np.testing.assert_allclose(out[k], r, rtol=1e-5, atol=1e-5, err_msg=f"{name}:{k}")


@pytest.mark.parametrize("name", MODELS)
def test_converted_model_on_the_simulator(name):
    """Compiled for the DV700 and run on sim://: the FP16 tolerance of the ONNX tests, and
    every report line names the NNEF op and output it comes from."""
    path = NNEF_DATA / f"{name}.nnef"
    feeds = _feeds(NNEF_DATA / f"{name}.onnx")
    ref = _ort(NNEF_DATA / f"{name}.onnx", feeds)
    net = compile_model(path, golden=False)
    with Net(net, SIM) as n:
        out = n.run(feeds)
    for k, r in ref.items():
        assert_matches(out[k], r, what=f"{name}:{k}")
    nnef_ops = _nnef_ops(path)
    for r in net.meta["report"]:
        op, _, output = r.get("source", "").partition(" ")
        assert op in nnef_ops and output, r
    assert any(r["where"] == "hw" for r in net.meta["report"])


def _where(net, source: str) -> set[str]:
    return {r["where"] for r in net.meta["report"] if r.get("source") == source}


def test_placement_names_the_nnef_layers():
    """Where the DV700 runs an op and where the CPU does, per NNEF op (--report's data)."""
    net = compile_model(NNEF_DATA / "convs.nnef", golden=False)
    assert _where(net, "conv conv1") == {"hw"} and _where(net, "relu relu1") == {"hw"}
    assert _where(net, "deconv deconv1") == {"hw"}
    assert _where(net, "prelu prelu1") == {"hw"}
    assert _where(net, "conv conv2") == {"hw", "cpu"}  # 2 groups: split, 2 runs, CPU concat
    net = compile_model(NNEF_DATA / "pools.nnef", golden=False)
    assert _where(net, "avg_pool avg_pool1") == {"cpu"}  # border 'ignore' with padding
    assert _where(net, "avg_pool avg_pool2") == {"hw"}  # border 'constant'
    assert _where(net, "mean_reduce mean_reduce1") == {"hw"}
    assert _where(net, "mean_reduce mean_reduce2") == {"cpu"}  # over channels


# --------------------------------------------------------------------------- the trained CNN
def _digits_script():
    spec = importlib.util.spec_from_file_location(
        "train_digits", ROOT / "examples" / "models" / "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _tar_like_nnef_tools(src: Path, dst: Path) -> Path:
    """A .tgz with the files at the top, as ``nnef_tools.convert --compress`` writes it."""
    with tarfile.open(dst, "w:gz") as tar:
        for f in sorted(src.iterdir()):
            tar.add(f, arcname=f.name)
    return dst


def test_trained_digits_cnn_from_nnef(tmp_path):
    """The project's trained CNN, converted to NNEF by NNEF-Tools and packed as .tgz, compiles
    to a net that classifies held-out digits as the ONNX original does under onnxruntime."""
    script = _digits_script()
    held = np.load(script.HELDOUT_PATH)
    x = script.views(held["images"][:60])["crisp16"].astype(np.float32)
    labels = held["labels"][:60].astype(np.int64)
    archive = _tar_like_nnef_tools(NNEF_DATA / "digits.nnef", tmp_path / "digits.nnef.tgz")
    assert detect(archive) == "nnef"
    net = compile_model(archive, golden=False)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(script.ONNX_PATH), so, providers=["CPUExecutionProvider"])
    with Net(net, SIM) as n:
        (iname,) = [i["name"] for i in net.meta["inputs"]]
        (oname,) = [o["name"] for o in net.meta["outputs"]]
        probs = np.concatenate([n.run({iname: xi[None]})[oname] for xi in x])
    ref = np.concatenate([sess.run(None, {sess.get_inputs()[0].name: xi[None]})[0] for xi in x])
    assert_matches(probs, ref, what="digits")
    assert (probs.argmax(1) == ref.argmax(1)).all()
    assert (probs.argmax(1) == labels).mean() >= 0.95
    assert [r["where"] for r in net.meta["report"]].count("hw") >= 6


def test_cli_compiles_nnef_with_a_report(tmp_path):
    out = tmp_path / "digits.bin"
    proc = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile",
                           str(NNEF_DATA / "digits.nnef"), "-o", str(out), "--report"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert any("conv conv1" in ln and "hw" in ln for ln in lines)
    assert any("softmax probs" in ln and "cpu" in ln for ln in lines)
    assert out.is_file()


def test_cli_bad_nnef_leaves_the_output_untouched(tmp_path):
    model = tmp_path / "m.nnef"
    model.mkdir()
    for f in (NNEF_DATA / "digits.nnef").iterdir():
        (model / f.name).write_bytes(f.read_bytes())
    dat = model / "variable3.dat"
    dat.write_bytes(dat.read_bytes()[:-10])  # truncated weights
    out = tmp_path / "net.bin"
    out.write_bytes(b"previous net")
    proc = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile", str(model), "-o", str(out),
                           "--force"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "variable3.dat" in proc.stderr
    assert "truncated" in proc.stderr and "Traceback" not in proc.stderr
    assert out.read_bytes() == b"previous net"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.nnef", "net.bin"]


# --------------------------------------------------------------------------- hand-written graphs
def _write(tmp_path: Path, body: str, shape=(1, 2, 6, 6), outputs=("y",),
           name: str = "g") -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    head = f"version 1.0;\ngraph G(x) -> ({', '.join(outputs)})\n{{\n"
    head += f"    x = external(shape = {list(shape)});\n"
    (d / "graph.nnef").write_text(head + body + "}\n")
    return d


#: the compounds the Khronos runtime only runs expanded
RUNTIME_LOWERED = [
    "clamp", "rsqr", "log2", "softabs", "local_variance_normalization",
    "local_contrast_normalization", "linear_quantize", "min_max_linear_quantize",
    "logarithmic_quantize", "separable_deconv", "copy_n", "rms_pool", "l2_normalization",
    "l1_normalization", "softmax", "local_response_normalization", "local_mean_normalization",
    "moments", "nearest_downsample", "area_downsample", "nearest_upsample", "add_n",
    "separable_conv", "selu", "gelu", "silu", "rsqrt", "batch_normalization", "prelu",
    "leaky_relu"]

def _c(*shape: int, seed: int = 0) -> str:
    """An NNEF ``constant`` with seeded random values."""
    v = np.random.default_rng(seed).standard_normal(shape).round(3).reshape(-1)
    return f"constant(shape = {list(shape)}, value = [{', '.join(map(str, v))}])"


#: name -> body (assignments; outputs y[, v]); each runs on the Khronos runtime
HAND = {
    "conv_auto_stride2_depthwise": f"y = conv(x, {_c(2, 1, 3, 3)}, groups = 0, stride = [2, 2]);",
    "conv_grouped_dilated": f"y = conv(x, {_c(4, 1, 3, 3, seed=1)}, {_c(1, 4, seed=2)}, groups = 2,"
                            " dilation = [2, 2], padding = [(2, 1), (0, 2)]);",
    "conv_tensor_bias": "b = mean_reduce(x, axes = [2, 3]);\n"
                        "y = conv(x, constant(shape = [2, 2, 1, 1], value = [1.0, 2.0, -1.0, 0.5]),"
                        " reshape(b, shape = [1, 2]));",
    "deconv_auto_padding": f"y = deconv(x, {_c(2, 3, 3, 3, seed=3)}, stride = [2, 2]);",
    "deconv_output_shape": "y = deconv(x, constant(shape = [2, 1, 3, 3], value = [0.2]), "
                           "stride = [2, 2], padding = [(1, 1), (1, 1)], groups = 0, "
                           "output_shape = [1, 2, 12, 12]);",
    "separable_conv": "y = separable_conv(x, constant(shape = [2, 1, 3, 3], value = [0.2]), "
                      "constant(shape = [4, 2, 1, 1], value = [0.3, -0.1, 0.5, 1.0, 0.2, 0.1, "
                      "-0.4, 0.6]), padding = [(1, 1), (1, 1)]);",
    "box_sum": "y = box(x, size = [1, 1, 2, 3], stride = [1, 1, 2, 1]);",
    "box_sum_ignore_padded": "y = box(x, size = [1, 1, 3, 3], border = 'ignore', "
                             "padding = [(0, 0), (0, 0), (1, 1), (1, 1)]);",
    "box_normalized_ignore": "y = box(x, size = [1, 1, 3, 3], border = 'ignore', "
                             "normalize = true);",
    "avg_pool_auto": "y = avg_pool(x, size = [1, 1, 3, 3], stride = [1, 1, 2, 2]);",
    "max_pool_constant_border": "y = max_pool(x, size = [1, 1, 3, 3], border = 'constant', "
                                "padding = [(0, 0), (0, 0), (1, 1), (1, 1)], "
                                "stride = [1, 1, 2, 2]);",
    "max_pool_dilated": "y = max_pool(x, size = [1, 1, 2, 2], dilation = [1, 1, 2, 2], "
                        "border = 'ignore', padding = [(0, 0), (0, 0), (0, 0), (0, 0)]);",
    "rms_pool": "y = rms_pool(x, size = [1, 1, 2, 2], stride = [1, 1, 2, 2]);",
    "nearest_downsample": "y = nearest_downsample(x, factor = [2, 2]);",
    "area_downsample": "y = area_downsample(x, factor = [2, 3]);",
    "nearest_upsample": "y = nearest_upsample(x, factor = [2, 2]);",
    "multilinear_symmetric_constant": "y = multilinear_upsample(x, factor = [2, 2], "
                                      "method = 'symmetric', border = 'constant');",
    "multilinear_asymmetric_constant": "y = multilinear_upsample(x, factor = [2, 2], "
                                       "method = 'asymmetric', border = 'constant');",
    "sum_min_reduce": "y = add(sum_reduce(x, axes = [1]), min_reduce(x, axes = [3]));",
    "argmax_reduce": "y = argmax_reduce(x, axes = [1]);",
    "mean_and_max_reduce": "y = add(mean_reduce(x, axes = [1, 2]), max_reduce(x, axes = [3]));",
    "lrn_across_channels": "y = local_response_normalization(x, size = [1, 2, 1, 1], "
                           "alpha = 0.5, beta = 0.75, bias = 2.0);",
    "lrn_spatial": "y = local_response_normalization(x, size = [1, 1, 3, 3], alpha = 0.5, "
                   "bias = 2.0);",
    "batch_normalization": "y = batch_normalization(x, constant(shape = [1, 2], value = "
                           "[0.1, -0.2]), constant(shape = [1, 2], value = [1.5, 0.5]), "
                           "constant(shape = [1, 2], value = [0.3, 0.0]), constant(shape = "
                           "[1, 2], value = [2.0, 1.0]), epsilon = 0.001);",
    "broadcast_left_aligned": "y = mul(sub(x, constant(shape = [1, 2], value = [1.0, -1.0])), "
                              "constant(shape = [1, 2, 6], value = [0.5]));",
    "prelu_leaky_elu_selu": "y = add(prelu(x, constant(shape = [1, 2], value = [0.1, 0.3])), "
                            "add(leaky_relu(x, alpha = 0.2), add(elu(x, alpha = 0.5), "
                            "selu(x))));",
    "clamp_scalar_and_tensor": "y = add(clamp(x, -0.5, 0.5), clamp(x, neg(abs(x)), "
                               "constant(shape = [1, 2], value = [0.1, 0.2])));",
    "round_floor_ceil_sign": "y = add(round(mul(x, 2.0)), add(floor(x), add(ceil(x), "
                             "sign(x))));",
    "unary_math": "y = add(exp(neg(abs(x))), add(log(add(abs(x), 1.0)), add(sqrt(abs(x)), "
                  "add(rcp(add(abs(x), 1.0)), add(sqr(x), rsqrt(add(abs(x), 1.0)))))));",
    "activations": "y = add(softplus(x), add(silu(x), add(gelu(x), pow(abs(x), 1.5))));",
    "compare_select": "y = select(and(gt(x, -0.5), or(lt(x, 0.5), ge(x, 1.0))), x, "
                      "select(le(x, 0.0), min(x, 0.1), max(x, -0.1)));",
    "softmax_two_axes": "y = softmax(x, axes = [2, 3]);",
    "normalizations": "y = add(l2_normalization(x, axes = [1], epsilon = 1e-6), add("
                      "l1_normalization(x, axes = [1]), local_mean_normalization(x, "
                      "size = [1, 1, 3, 3])));",
    "moments": "y, v = moments(x, axes = [2, 3]);",
    "slice_tile_transpose": "y = transpose(tile(slice(x, axes = [2, 3], begin = [1, -4], "
                            "end = [0, 5]), repeats = [1, 1, 2, 1]), axes = [0, 2, 1]);",
    "reshape_axis_range": "y = reshape(x, shape = [36], axis_start = 2, axis_count = 2);",
    "stack_unstack_concat": "[a, b] = unstack(reshape(x, shape = [2, 36]), axis = 0);\n"
                            "y = concat([stack([a, b], axis = 1), stack([b, a], axis = 1)], "
                            "axis = 0);",
    "matmul_transposes": "a = reshape(x, shape = [6, 12]);\n"
                         f"y = add(matmul(a, {_c(6, 5, seed=4)}, transposeA = true), "
                         f"matmul(reshape(x, shape = [12, 6]), {_c(5, 6, seed=5)}, "
                         "transposeB = true));",
    "matmul_two_tensors": "a = reshape(x, shape = [1, 12, 6]);\n"
                          "y = matmul(a, a, transposeB = true);",
    "linear_tensor_bias": "a = reshape(x, shape = [1, 72]);\n"
                          "y = linear(a, constant(shape = [4, 72], value = [0.01]), "
                          "slice(a, axes = [1], begin = [0], end = [4]));",
    "pad_all_borders": "a = pad(x, padding = [(0, 0), (0, 0), (2, 1), (1, 2)], "
                       "border = 'reflect');\nb = pad(x, padding = [(0, 0), (0, 0), (2, 1), "
                       "(1, 2)], border = 'reflect-even');\nc = pad(x, padding = [(0, 0), (0, 0),"
                       " (2, 1), (1, 2)], border = 'replicate');\nd = pad(x, padding = [(0, 0), "
                       "(0, 0), (2, 1), (1, 2)], value = 0.5);\ny = add(a, add(b, add(c, d)));",
    "copy_add_n": "y = add_n([copy(x), x, x]);",
    "copy_n": "[a, b] = copy_n(x, times = 2);\ny = sub(a, mul(b, 2.0));",
    "rsqr_log2_softabs": "y = add(rsqr(add(abs(x), 1.0)), add(log2(add(abs(x), 1.0)), "
                         "softabs(x, epsilon = 0.1)));",
    "local_variance_contrast": "y = add(local_variance_normalization(x, size = [1, 1, 3, 3], "
                               "bias = 1.0, epsilon = 0.1), local_contrast_normalization(x, "
                               "size = [1, 1, 3, 3], epsilon = 0.1));",
    "linear_and_log_quantize": "y = add(linear_quantize(x, min = -1.0, max = 1.0, bits = 4), "
                               "add(min_max_linear_quantize(x, min = -1.0, max = 1.0, bits = 4, "
                               "signed = true, symmetric = true), logarithmic_quantize(x, "
                               "max = 4.0, bits = 3)));",
    "separable_deconv": f"y = separable_deconv(x, {_c(3, 1, 3, 3, seed=8)}, "
                        f"{_c(2, 3, 1, 1, seed=9)}, stride = [2, 2]);",
}


def _session(d: Path, *inputs: np.ndarray) -> list[np.ndarray]:
    with nnef.Session(str(d), lowered=list(RUNTIME_LOWERED)) as s:
        return [np.asarray(v) for v in s(*inputs)]


def _ir(d: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    g = load(d)
    out = run_graph(infer_and_fold(g), feeds)
    return [out[n] for n in g.outputs]


@pytest.mark.parametrize("case", sorted(HAND))
def test_hand_written_graph_equals_the_khronos_runtime(tmp_path, case):
    body = HAND[case]
    outputs = ("y", "v") if body.startswith("y, v") else ("y",)
    d = _write(tmp_path, "    " + body.replace("\n", "\n    ") + "\n", outputs=outputs)
    x = np.random.default_rng(5).standard_normal((1, 2, 6, 6)).astype(np.float32)
    ref = _session(d, x)
    got = _ir(d, {"x": x})
    assert len(got) == len(ref)
    for a, r in zip(got, ref):
        assert a.shape == r.shape, case
        np.testing.assert_allclose(a.astype(np.float64), r, rtol=2e-5, atol=2e-6, err_msg=case)


def test_round_sends_halves_up(tmp_path):
    """S1 4.2.1: round(x) = floor(x + 0.5), not numpy's or ONNX's round-half-to-even.  (The
    Khronos C++ runtime rounds negative halves away from zero instead: it agrees elsewhere.)"""
    d = _write(tmp_path, "    y = round(x);\n", shape=(1, 2, 2, 3))
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.49, 0.49, 3.0, -3.0, 1e6 + 0.5, 7.25],
                 np.float32).reshape(1, 2, 2, 3)
    (got,) = _ir(d, {"x": x})
    np.testing.assert_array_equal(got, np.floor(x + np.float32(0.5)))
    runtime = _session(d, x)[0]
    negative_half = (x < 0) & (x % 1 == 0.5)
    assert negative_half.sum() == 3
    np.testing.assert_array_equal(got[~negative_half], runtime[~negative_half])


@pytest.mark.parametrize("signed,symmetric", [(True, False), (True, True), (False, False)])
def test_zero_point_quantize_as_s1_defines_it(tmp_path, signed, symmetric):
    """S1 zero_point_linear_quantize, from the formula (the Khronos parser's own expansion
    clamps signed non-symmetric codes at 126 instead of -128)."""
    flags = f"signed = {str(signed).lower()}, symmetric = {str(symmetric).lower()}"
    d = _write(tmp_path, "    z = constant<integer>(shape = [1, 2], value = [3, -5]);\n"
               f"    y = zero_point_linear_quantize(x, zero_point = z, scale = constant(shape = "
               f"[1, 2], value = [0.02, 0.05]), bits = 8, {flags});\n")
    x = np.random.default_rng(11).standard_normal((1, 2, 6, 6)).astype(np.float32) * 4
    (got,) = _ir(d, {"x": x})
    z, s = np.array([3, -5]).reshape(1, 2, 1, 1), np.array([0.02, 0.05]).reshape(1, 2, 1, 1)
    r = 127 if signed else 255
    lo = (-r if symmetric else -r - 1) if signed else 0
    q = np.clip(np.floor(x.astype(np.float64) / s + 0.5) + z, lo, r)
    np.testing.assert_allclose(got, (q - z) * s, rtol=1e-6, atol=1e-6)
    assert (q == lo).any() and (q == r).any()  # both bounds matter


def _np_pool(xp: np.ndarray, k: tuple[int, int], s: tuple[int, int], red) -> np.ndarray:
    n, c, h, w = xp.shape
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    win = np.lib.stride_tricks.sliding_window_view(xp, k, axis=(2, 3))[:, :, ::s[0], ::s[1]]
    return red(win[:, :, :oh, :ow], axis=(-2, -1))


NP_BORDER = {"reflect": "reflect", "replicate": "edge", "reflect-even": "symmetric"}


@pytest.mark.parametrize("border", sorted(NP_BORDER))
def test_borders_the_runtime_lacks_against_numpy_padding(tmp_path, border):
    """conv, box and max_pool with replicate/reflect/reflect-even borders: numpy pads the input
    as S1 defines the mode (reflect in[-i], reflect-even in[-i-1], replicate the edge), then
    the Khronos runtime runs the same op without padding."""
    pads = [(0, 0), (0, 0), (2, 1), (1, 2)]
    w = _c(3, 2, 3, 3, seed=6)
    body = (f"    a = conv(x, {w}, border = '{border}', padding = {pads[2:]});\n"
            f"    b = box(x, size = [1, 1, 3, 3], border = '{border}', padding = {pads});\n"
            f"    c = max_pool(x, size = [1, 1, 3, 3], border = '{border}', padding = {pads});\n")
    d = _write(tmp_path, body, outputs=("a", "b", "c"))
    x = np.random.default_rng(6).standard_normal((1, 2, 6, 6)).astype(np.float32)
    got = _ir(d, {"x": x})
    xp = np.pad(x, pads, mode=NP_BORDER[border])
    plain = _write(tmp_path, f"    a = conv(x, {w}, padding = [(0, 0), (0, 0)]);\n",
                   shape=xp.shape, outputs=("a",), name="plain")
    (ref_conv,) = _session(plain, xp)
    np.testing.assert_allclose(got[0], ref_conv, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], _np_pool(xp, (3, 3), (1, 1), np.sum), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(got[2], _np_pool(xp, (3, 3), (1, 1), np.max), rtol=0, atol=0)


def _np_take(x: np.ndarray, k: np.ndarray, axis: int, zero_outside: bool) -> np.ndarray:
    n = x.shape[axis]
    v = np.take(x, np.clip(k, 0, n - 1), axis=axis)
    if zero_outside:
        shape = [1] * x.ndim
        shape[axis] = -1
        v = v * ((k >= 0) & (k < n)).reshape(shape)
    return v


def _np_multilinear(x: np.ndarray, f: int, method: str, border: str) -> np.ndarray:
    """S1 multilinear_upsample, written from its definition, one spatial axis at a time:
    output[i] = (1 - u) input[j] + u input[j + 1], j and u from the method's position."""
    for axis in (2, 3):
        n = x.shape[axis]
        i = np.arange(n * f, dtype=np.float64)
        if method == "aligned":
            pos = i / ((n * f - 1) / (n - 1))
        elif method == "symmetric":
            pos = (i - (f - 1) / 2) / f
        else:
            pos = i / f
        j = np.floor(pos).astype(np.int64)
        shape = [1] * x.ndim
        shape[axis] = -1
        u = (pos - j).reshape(shape)
        zero = border == "constant"
        x = _np_take(x, j, axis, zero) * (1 - u) + _np_take(x, j + 1, axis, zero) * u
    return x


@pytest.mark.parametrize("method,border,factor", [
    ("symmetric", "constant", 2), ("asymmetric", "constant", 2), ("symmetric", "replicate", 2),
    ("asymmetric", "replicate", 3), ("symmetric", "replicate", 3), ("aligned", "replicate", 2),
    ("aligned", "constant", 3)])
def test_multilinear_upsample_against_its_definition(tmp_path, method, border, factor):
    d = _write(tmp_path, f"    y = multilinear_upsample(x, factor = [{factor}, {factor}], "
                         f"method = '{method}', border = '{border}');\n")
    x = np.random.default_rng(7).standard_normal((1, 2, 6, 6)).astype(np.float32)
    (got,) = _ir(d, {"x": x})
    np.testing.assert_allclose(got, _np_multilinear(x.astype(np.float64), factor, method, border),
                               rtol=1e-5, atol=1e-6)


def test_hand_written_window_ops_on_the_simulator(tmp_path):
    """Ops the converter never emits, compiled for the DV700 (sum box: a depth-wise conv of
    ones; constant-border bilinear: a depth-wise deconv; strided downsampling: pools) and
    checked on sim:// against the Khronos runtime at the FP16 tolerance."""
    body = ("    w = variable(shape = [8, 8, 3, 3], label = 'w');\n"
            "    c = relu(conv(x, w, padding = [(1, 1), (1, 1)]));\n"
            "    a = box(c, size = [1, 1, 3, 3], stride = [1, 1, 2, 2], padding = "
            "[(0, 0), (0, 0), (1, 1), (1, 1)]);\n"
            "    b = multilinear_upsample(c, factor = [2, 2], border = 'constant');\n"
            "    d = area_downsample(c, factor = [2, 2]);\n"
            "    e = nearest_downsample(c, factor = [2, 2]);\n"
            f"    f = planewise_conv(c, {_c(8, 1, 3, 3, seed=7)}, padding = [(1, 1), (1, 1)]);\n")
    d = _write(tmp_path, body, shape=(1, 8, 8, 8), outputs=("a", "b", "d", "e", "f"))
    w = np.random.default_rng(8).standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2
    with open(d / "w.dat", "wb") as fh:
        nnef.write_tensor(fh, w)
    x = np.random.default_rng(9).standard_normal((1, 8, 8, 8)).astype(np.float32)
    # the Khronos runtime has no planewise_conv (provisional NNEF): run it as depth-wise conv
    ref_dir = _write(tmp_path, body.replace("planewise_conv(c, ", "conv(c, ").replace(
        "padding = [(1, 1), (1, 1)]);\n", "padding = [(1, 1), (1, 1)], groups = 0);\n"),
        shape=(1, 8, 8, 8), outputs=("a", "b", "d", "e", "f"), name="ref")
    (ref_dir / "w.dat").write_bytes((d / "w.dat").read_bytes())
    refs = _session(ref_dir, x)
    net = compile_model(d, golden=False)
    with Net(net, SIM) as n:
        out = n.run({"x": x})
    for name, r in zip(("a", "b", "d", "e", "f"), refs):
        assert_matches(out[name], r, what=name)
    placed = {r["source"]: r["where"] for r in net.meta["report"]}
    assert placed["box a"] == "hw" and placed["multilinear_upsample b"] == "hw"
    assert placed["planewise_conv f"] == "hw" and placed["area_downsample d"] == "hw"


def test_input_size_replaces_the_external_extents(tmp_path):
    d = _write(tmp_path, f"    y = conv(x, {_c(3, 2, 3, 3)}, padding = [(0, 0), (0, 0)]);\n")
    g = load(d, input_size=(9, 7))
    assert g.tensors["x"].shape == (1, 2, 9, 7)
    x = np.random.default_rng(1).standard_normal((1, 2, 9, 7)).astype(np.float32)
    (y,) = _ir_sized(d, x, (9, 7))
    assert y.shape == (1, 3, 7, 5)
    with pytest.raises(ModelError, match="positive"):
        load(d, input_size=(0, 7))
    with pytest.raises(ModelError, match="4-D inputs"):
        load(_write(tmp_path, "    y = copy(x);\n", shape=(1, 5), name="flat"), input_size=(3, 3))


def _ir_sized(d: Path, x: np.ndarray, size) -> list[np.ndarray]:
    g = load(d, input_size=size)
    out = run_graph(infer_and_fold(g), {"x": x})
    return [out[n] for n in g.outputs]


# --------------------------------------------------------------------------- refusals
def test_every_unsupported_op_is_named_in_one_error(tmp_path):
    body = ("    a = sin(x);\n"
            "    b = argmax_pool(x, size = [1, 1, 2, 2]);\n"
            "    c = deconv(x, constant(shape = [2, 2, 3, 3], value = [1.0]),"
            " border = 'reflect');\n"
            "    d = multilinear_upsample(x, factor = [3, 3], border = 'constant');\n"
            "    e = box(x, size = [1, 2, 1, 1]);\n"
            "    y = cos(x);\n")
    d = _write(tmp_path, body, outputs=("y", "a", "b", "c", "d", "e"))
    with pytest.raises(UnsupportedOps) as e:
        load(d)
    assert e.value.ops == [("sin", "a"), ("argmax_pool", "b"), ("deconv[border=reflect]", "c"),
                           ("multilinear_upsample[border=constant factor=[3, 3]]", "d"),
                           ("box[window over batch/channel size=[1, 2, 1, 1]]", "e"),
                           ("cos", "y")]


def test_custom_fragments_are_listed_with_the_standard_ones(tmp_path):
    d = tmp_path / "custom"
    d.mkdir()
    (d / "graph.nnef").write_text(
        "version 1.0;\nextension KHR_enable_fragment_definitions;\n"
        "fragment my_op( input: tensor<scalar> ) -> ( output: tensor<scalar> );\n"
        "graph G(x) -> (y)\n{\n    x = external(shape = [1, 2, 4, 4]);\n"
        "    a = my_op(x);\n    b = sin(a);\n    y = my_op(b);\n}\n")
    with pytest.raises(UnsupportedOps) as e:
        load(d)
    assert e.value.ops == [("my_op", "a"), ("sin", "b"), ("my_op", "y")]


def test_parse_errors_name_the_line(tmp_path):
    d = _write(tmp_path, "    y = conv(x, );\n")
    with pytest.raises(ModelError, match=r"cannot parse graph.nnef.*\[5:"):
        load(d)
    d = _write(tmp_path, "    y = relu(x, alpha = 1.0);\n", name="badarg")
    with pytest.raises(ModelError, match="cannot parse graph.nnef"):
        load(d)


def test_missing_parser_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "nnef", None)
    d = _write(tmp_path, "    y = relu(x);\n")
    with pytest.raises(ModelError) as e:
        load(d)
    assert "dvsdk[nnef]" in str(e.value)


def test_detection_of_directories_and_files(tmp_path):
    d = _write(tmp_path, "    y = relu(x);\n")
    assert detect(d) == "nnef" and detect(d / "graph.nnef") == "nnef"
    assert load(d / "graph.nnef").op_types() == ["Relu"]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ModelError, match="directory that holds no model") as e:
        detect(empty)
    assert "graph.nnef" in str(e.value)
    junk = tmp_path / "model.xyz"
    junk.write_bytes(b"\0" * 64)
    with pytest.raises(ModelError, match="unknown model format") as e:
        detect(junk)
    assert "NNEF" in str(e.value)
    notnnef = tmp_path / "x.tgz"
    notnnef.write_bytes(b"not an archive")
    with pytest.raises(ModelError, match="not an NNEF model"):
        load(notnnef)
    assert os.path.isdir(d)


def test_the_op_table_classifies_every_standard_operation():
    """Each operation the Khronos parser knows is converted, expanded or refused, once; the
    README's NNEF section is generated from this table (tools/gen_ops_table.py)."""
    from dvsdk.compiler.frontends.nnef_ops import LOWERED, OPS, REFUSED

    groups = [set(OPS), set(LOWERED), set(REFUSED), {"external", "variable", "constant"}]
    assert sum(len(g) for g in groups) == len(set().union(*groups))
    provisional = {"planewise_conv", "planewise_deconv"}
    assert set().union(*groups) - provisional == set(nnef.StandardOperations)
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import gen_ops_table
    finally:
        sys.path.remove(str(ROOT / "tools"))
    block = gen_ops_table.render_nnef()
    for name in OPS:
        assert f"| `{name}` |" in block
    for name in (*LOWERED, *REFUSED):
        assert f"`{name}`" in block

