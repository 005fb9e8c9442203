"""Keras ``.h5`` models made by Keras 3 (jax) and tf-keras, compiled and run on the simulator.

Every model in ``tests/data/keras/`` was saved by the framework itself
(``tools/make_keras_models.py``); the ``.npz`` beside it holds the framework's own outputs on
a seeded input, which is the reference here (neither Keras nor TensorFlow is needed: h5py
and numpy read the files).  Outputs must agree at the suite's FP16 tolerance
(``tests/compile_harness.py``: max-abs error <= 1e-3 + 1e-2 x the reference's range), and
tensors cross ``net.run`` in Keras's own NHWC layout.  Bad files end in a typed ModelError.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.frontends import detect, load
from dvsdk.compiler.frontends.keras_layers import LAYERS
from dvsdk.errors import (
    InvalidArgument,
    ModelError,
    NetFileError,
    UnsupportedOps,
    WeightError,
)
from dvsdk.netfile import read, write
from dvsdk.runtime.net import Net

h5py = pytest.importorskip("h5py")

DATA = Path(__file__).resolve().parent / "data" / "keras"
TOL_REL, TOL_ABS = 1e-2, 1e-3          # as tests/compile_harness.py
SIM = "sim://"
MODELS = sorted(p.stem for p in DATA.glob("k[23]_*.h5"))


def ref(stem: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict]:
    """(inputs, outputs, meta) the generating framework saved beside ``stem.h5``."""
    z = np.load(DATA / f"{stem}.npz")
    ins = {k[3:]: z[k] for k in z.files if k.startswith("in:")}
    outs = {k[4:]: z[k] for k in z.files if k.startswith("out:")}
    extra = {k: z[k] for k in z.files if ":" not in k and k != "meta"}
    return ins, outs, {**json.loads(str(z["meta"])), **extra}


def assert_close(y: np.ndarray, r: np.ndarray, what: str) -> float:
    assert y.shape == r.shape, f"{what}: shape {y.shape} != Keras {r.shape}"
    err = float(np.max(np.abs(y.astype(np.float64) - r))) if r.size else 0.0
    span = float(r.max() - r.min()) if r.size else 0.0
    assert np.all(np.isfinite(y)), what
    assert err <= TOL_ABS + TOL_REL * span, f"{what}: max-abs error {err:.4g}, range {span:.4g}"
    return err


def run_batch(net, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a batch of (B, ...) inputs one sample at a time (the nets have batch 1)."""
    batch = next(iter(feeds.values())).shape[0]
    with Net(net, SIM) as n:
        outs = [n.run({k: v[i:i + 1] for k, v in feeds.items()}) for i in range(batch)]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


@pytest.fixture(scope="module")
def digits_nets():
    return {v: compile(DATA / f"k{v}_digits.h5", golden=False, scale=1 / 255) for v in (2, 3)}


# --------------------------------------------------------------------------- agreement
@pytest.mark.parametrize("stem", MODELS)
def test_model_agrees_with_the_framework(stem):
    ins, outs, meta = ref(stem)
    size = tuple(meta["input_size"]) if "input_size" in meta else None
    net = compile(DATA / f"{stem}.h5", golden=False, input_size=size)
    assert [o["name"] for o in net.meta["outputs"]] == list(outs)
    assert [i["name"] for i in net.meta["inputs"]] == list(ins)
    got = run_batch(net, ins)
    for name, r in outs.items():
        assert_close(got[name], r, f"{stem}:{name}")


def test_both_generations_and_both_model_kinds_are_covered():
    seen = set()
    for stem in MODELS:
        with h5py.File(DATA / f"{stem}.h5", "r") as f:
            version = f.attrs["keras_version"]
            kind = json.loads(f.attrs["model_config"])["class_name"]
        seen.add((str(version)[0], kind))
        assert str(version)[0] == stem[1], stem
    assert seen >= {("2", "Sequential"), ("2", "Functional"), ("3", "Sequential"),
                    ("3", "Functional")}


def test_every_listed_layer_is_exercised_by_the_files():
    classes = set()
    for stem in MODELS + ["SegNet_Basic"]:
        path = DATA / (f"{stem}.h5" if stem != "SegNet_Basic" else "SegNet_Basic.hdf5")
        with h5py.File(path, "r") as f:
            cfg = json.loads(f.attrs["model_config"])
        inner = cfg["config"]
        classes |= {ly["class_name"] for ly in (inner if isinstance(inner, list)
                                                 else inner["layers"])}
    untested = set(LAYERS) - classes - {"SpatialDropout2D", "GaussianNoise", "GaussianDropout",
                                        "AlphaDropout", "ActivityRegularization",
                                        "ThresholdedReLU"}
    # made by Keras at test time: tests/test_keras_applications.py
    untested -= {"Rescaling", "Normalization", "CenterCrop", "LayerScale",
                 "LayerNormalization"}
    assert not untested, untested


@pytest.mark.parametrize("version", [2, 3])
def test_digits_cnn_trained_in_keras_classifies_like_keras(version, digits_nets):
    """The "real pretrained CNN": trained by Keras on the bundled model's digits data."""
    ins, outs, meta = ref(f"k{version}_digits")
    net = digits_nets[version]
    got = run_batch(net, ins)["probs"]
    assert_close(got, outs["probs"], "probs")
    assert np.array_equal(got.argmax(1), outs["probs"].argmax(1))
    assert np.mean(got.argmax(1) == meta["labels"]) >= 0.85
    where = {(r["type"], r["where"]) for r in net.meta["report"]}
    assert where == {("Conv", "hw"), ("Relu", "hw"), ("MaxPool", "hw"), ("Flatten", "hw"),
                     ("Gemm", "hw"), ("Softmax", "cpu")}, where   # BN folded, no Transpose
    assert meta["heldout_accuracy"] >= 0.9


def test_flatten_dense_permutes_the_kernel_instead_of_a_transpose():
    g = load(DATA / "k3_digits.h5")
    assert "Transpose" not in g.op_types()
    gemm = next(op for op in g.ops if op.type == "Gemm")
    with h5py.File(DATA / "k3_digits.h5", "r") as f:
        k = f["model_weights/probs/probs/kernel"][()]          # rows in H, W, C order
    w = g.const(gemm.inputs[1])
    assert w.shape == k.shape and not np.array_equal(w, k)
    assert np.array_equal(w, k.reshape(4, 4, 16, 10).transpose(2, 0, 1, 3).reshape(256, 10))


@pytest.mark.parametrize("version, alpha", [(2, 0.2), (3, 1 / 6)])
def test_hard_sigmoid_follows_the_files_keras_version(version, alpha):
    g = load(DATA / f"k{version}_acts.h5")
    hs = [op for op in g.ops if op.type == "HardSigmoid"]
    assert hs and all(op.attrs["alpha"] == pytest.approx(alpha) for op in hs)


# --------------------------------------------------------------------------- SegNet
def test_segnet_basic_agrees_with_tf_keras():
    """DMP's SegNet_Basic (Keras 2.1.2, a trained model) against tf-keras on a seeded input."""
    z = np.load(DATA / "segnet_ref.npz")
    meta = json.loads(str(z["meta"]))
    x = np.random.default_rng(meta["seed"]).uniform(0, 1, (1, 240, 320, 3)).astype(np.float32)
    assert hashlib.sha256(x.tobytes()).hexdigest() == meta["input_sha256"]
    net = compile(DATA / "SegNet_Basic.hdf5", golden=False)
    assert net.meta["inputs"][0]["shape"] == [1, 240, 320, 3]
    assert net.meta["inputs"][0]["layout"] == "NHWC"
    assert net.meta["outputs"][0]["shape"] == [1, 76800, 12]
    with Net(net, SIM) as n:
        y = n.run(x)["reshape_1"][0]
    lo, hi = meta["output_range"]
    err = float(np.max(np.abs(y[z["pixels"]] - z["values"])))
    assert err <= TOL_ABS + TOL_REL * (hi - lo), err
    assert np.mean(y.argmax(-1) == z["classes"]) >= 0.999
    cpu = [(r["type"], r["source"]) for r in net.meta["report"] if r["where"] == "cpu"]
    assert cpu == [("Transpose", "Reshape reshape_1"), ("Reshape", "Reshape reshape_1")]


# --------------------------------------------------------------------------- --report
def test_report_names_the_keras_class_and_layer_of_every_decision():
    with h5py.File(DATA / "k3_convs.h5", "r") as f:
        layers = {ly["name"]: ly["class_name"]
                  for ly in json.loads(f.attrs["model_config"])["config"]["layers"]}
    net = compile(DATA / "k3_convs.h5", golden=False)
    for r in net.meta["report"]:
        cls, name = r["source"].split(" ", 1)
        assert layers[name] == cls, r
    sources = {r["source"] for r in net.meta["report"]}
    assert {"SeparableConv2D sep", "Conv2DTranspose deconv_same", "Conv2D grouped",
            "DepthwiseConv2D dw_s2_m2"} <= sources


def cli(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    mod = {"dvsdk-compile": "dvsdk.cli.compile", "dvsdk-run": "dvsdk.cli.run"}[args[0]]
    proc = subprocess.run([sys.executable, "-m", mod, *args[1:]], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "DVSDK_DEVICE": SIM})
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def test_cli_report_input_and_save_in_nhwc(tmp_path):
    out = cli("dvsdk-compile", str(DATA / "k3_free.h5"), "-o", str(tmp_path / "free.bin"),
              "--input-size", "10x14", "--report").stdout
    assert "Conv2D c1" in out and "MaxPooling2D pool" in out and "Conv2D c2" in out
    ins, outs, _ = ref("k3_free")
    np.save(tmp_path / "x.npy", ins["x"])                     # (1, 10, 14, 3): Keras layout
    cli("dvsdk-run", str(tmp_path / "free.bin"), "--input", str(tmp_path / "x.npy"),
        "--save", str(tmp_path / "y.npz"), "-q")
    assert_close(np.load(tmp_path / "y.npz")["c2"], outs["c2"], "c2")   # (1, 5, 7, 4)
    proc = cli("dvsdk-compile", str(DATA / "bad_layers.h5"), "-o", str(tmp_path / "bad.bin"),
               check=2)
    assert "Lambda (times_two)" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad.bin").exists()


# --------------------------------------------------------------------------- the boundary
@pytest.fixture(scope="module")
def free_net():
    return compile(DATA / "k3_free.h5", input_size=(10, 14), scale=1 / 255)


def test_net_takes_and_returns_the_models_nhwc_layout(free_net):
    (spec,), (out,) = free_net.meta["inputs"], free_net.meta["outputs"]
    assert (spec["shape"], spec["layout"]) == ([1, 10, 14, 3], "NHWC")
    assert (out["shape"], out["layout"]) == ([1, 5, 7, 4], "NHWC")
    assert free_net.meta["tensors"][spec["tensor"]]["shape"] == [1, 3, 10, 14]  # IR: NCHW
    ins, outs, _ = ref("k3_free")
    with Net(free_net, SIM) as n:
        assert_close(n.run(ins["x"])["c2"], outs["c2"], "c2")
        assert_close(n.run(ins["x"][0])["c2"], outs["c2"], "c2 (batch dimension left out)")
        with pytest.raises(InvalidArgument, match="input shape"):
            n.run(ins["x"].transpose(0, 3, 1, 2))             # NCHW is not this model's layout
        assert n.selftest()["passed"]                         # golden pair in NHWC too
        y = n.run(ins["x"])["c2"]
        np.testing.assert_array_equal(n.class_map(), y[0].argmax(-1))   # classes last
    gold = free_net.meta["golden"]
    assert gold["inputs"]["x"]["shape"] == [1, 10, 14, 3]
    assert gold["outputs"]["c2"]["shape"] == [1, 5, 7, 4]


def test_run_image_with_and_without_the_ipu_on_an_nhwc_net(free_net, tmp_path):
    from PIL import Image

    rgb = np.random.default_rng(3).integers(0, 256, (10, 14, 3), dtype=np.uint8)  # no resize
    Image.fromarray(rgb).save(tmp_path / "im.png")
    with Net(free_net, SIM) as n:
        want = n.run(rgb[None] / 255)["c2"]
        cpu = n.run_image(tmp_path / "im.png")["c2"]
        ipu = n.run_image(tmp_path / "im.png", ipu=True)["c2"]
    np.testing.assert_array_equal(cpu, want)
    assert_close(ipu, want, "IPU-preprocessed")


def test_run_image_on_the_keras_digits_model(digits_nets, tmp_path):
    from PIL import Image

    ins, outs, _ = ref("k3_digits")
    img = np.round(ins["image"][0, :, :, 0] * 255).astype(np.uint8)
    Image.fromarray(img).save(tmp_path / "d.png")
    with Net(digits_nets[3], SIM) as n:
        got = n.run_image(tmp_path / "d.png")["probs"]
    assert got.argmax() == outs["probs"][0].argmax()
    assert_close(got, outs["probs"][:1], "probs of the PNG")


def test_onnx_nets_keep_nchw():
    from .onnx_models import mobilenetv2_like

    net = compile(mobilenetv2_like(), golden=False)
    assert net.meta["inputs"][0]["layout"] == "NCHW"
    assert net.meta["inputs"][0]["shape"][1] == 3


def test_reader_rejects_a_bad_layout(tmp_path, digits_nets):
    net = digits_nets[3]
    meta = json.loads(json.dumps(net.meta))
    meta["outputs"][0]["layout"] = "NHWC"                    # on a rank-2 output
    bad = type(net)(meta=meta, commands=net.commands, weights=net.weights,
                    constants=net.constants, golden=net.golden)
    write(bad, tmp_path / "bad.bin")
    with pytest.raises(NetFileError, match="layout"):
        read(tmp_path / "bad.bin")


# --------------------------------------------------------------------------- bad files
def copy(tmp_path, stem: str = "k3_seq") -> Path:
    p = tmp_path / f"{stem}.h5"
    shutil.copy(DATA / f"{stem}.h5", p)
    return p


def set_config(path: Path, cfg) -> None:
    with h5py.File(path, "r+") as f:
        f.attrs["model_config"] = cfg if isinstance(cfg, str) else json.dumps(cfg)


def get_config(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        return json.loads(f.attrs["model_config"])


def test_h5_files_are_detected_as_keras():
    assert detect(DATA / "k3_seq.h5") == "keras"
    assert detect(DATA / "SegNet_Basic.hdf5") == "keras"


def test_unknown_and_refused_layers_are_all_listed_in_one_error():
    with pytest.raises(UnsupportedOps) as e:
        load(DATA / "bad_layers.h5")
    # (Activation("gelu") is read since issue 28: the IR's Gelu)
    assert e.value.ops == [("Lambda", "times_two"), ("Conv1D", "conv1d")]


def test_channels_first_is_refused_by_name(tmp_path):
    p = copy(tmp_path)
    cfg = get_config(p)
    for ly in cfg["config"]["layers"]:
        if ly["class_name"] in ("Conv2D", "MaxPooling2D"):
            ly["config"]["data_format"] = "channels_first"
    set_config(p, cfg)
    with pytest.raises(UnsupportedOps) as e:
        load(p)
    assert ("Conv2D[data_format=channels_first]", "conv2d") in e.value.ops
    assert ("MaxPooling2D[data_format=channels_first]", "max_pooling2d") in e.value.ops


def test_bilinear_upsampling_of_tf1_era_keras_is_refused(tmp_path):
    """Keras < 2.4 resized without half-pixel centers; that is refused, not mis-mapped."""
    p = copy(tmp_path, "k2_shapes")
    with h5py.File(p, "r+") as f:
        f.attrs["keras_version"] = "2.2.4"
    with pytest.raises(UnsupportedOps) as e:
        load(p)
    assert e.value.ops == [("UpSampling2D[bilinear, Keras 2.2]", "up_bilinear")]


def test_weights_only_file_is_a_model_error():
    with pytest.raises(ModelError, match="no model_config"):
        load(DATA / "bad_weights_only.weights.h5")


def test_wrong_weight_shape_names_the_layer_and_both_shapes(tmp_path):
    p = copy(tmp_path)
    with h5py.File(p, "r+") as f:
        g = f["model_weights/conv2d_1"]
        (kernel,) = [n for n in g.attrs["weight_names"] if n.endswith("kernel")]
        del g[kernel]
        g[kernel] = np.zeros((3, 3, 8, 15), np.float32)
    with pytest.raises(ModelError) as e:
        load(p)
    assert e.value.field == "Conv2D conv2d_1/kernel"
    assert e.value.value == (3, 3, 8, 15) and e.value.limit == (3, 3, 8, 16)


def test_missing_weight_is_a_model_error(tmp_path):
    p = copy(tmp_path)
    with h5py.File(p, "r+") as f:
        g = f["model_weights/dense"]
        (bias,) = [n for n in g.attrs["weight_names"] if n.endswith("bias")]
        del g[bias]
    with pytest.raises(ModelError, match="missing"):
        load(p)


def test_truncated_and_corrupt_files_are_model_errors_and_nothing_is_written(tmp_path):
    raw = (DATA / "k3_seq.h5").read_bytes()
    rng = np.random.default_rng(5)
    variants = [raw[:n] for n in (0, 100, 2048, len(raw) // 2, len(raw) - 64)]
    for off in (8, 600, 1500, 4000, len(raw) // 3):
        b = bytearray(raw)
        b[off:off + 64] = rng.integers(0, 256, 64, dtype=np.uint8).tobytes()
        variants.append(bytes(b))
    variants.append(b"not an hdf5 file at all" * 10)
    failures = 0
    for i, data in enumerate(variants):
        p = tmp_path / f"v{i}.h5"
        p.write_bytes(data)
        out = tmp_path / f"v{i}.bin"
        try:
            compile(p, out, golden=False)
        except ModelError:
            failures += 1
            assert not out.exists()
        except WeightError:                    # garbage weights read fine, beyond FP16
            assert not out.exists()
    assert failures >= len(variants) - 3       # a flip inside weight data reads as weights
    assert sorted(x.name for x in tmp_path.iterdir() if x.suffix != ".h5") == \
        sorted(f"v{i}.bin" for i in range(len(variants)) if (tmp_path / f"v{i}.bin").exists())


@pytest.mark.parametrize("config, match", [
    ("{not json", "not JSON"),
    ("[" * 300 + "]" * 300, "nested too deeply"),
    (json.dumps({"class_name": "Functional", "config": {"layers": [{"a": [[[[1]]]]}] * 1}}),
     "malformed layer"),
    (json.dumps({"class_name": "Sequential", "config": {"layers": [{"class_name": "Dense",
                                                                    "config": {"name": "d"}}]}}),
     "without an input shape"),
])
def test_bad_model_configs_are_model_errors(tmp_path, config, match):
    p = copy(tmp_path)
    set_config(p, config)
    with pytest.raises(ModelError, match=match):
        load(p)


def test_config_size_is_bounded(tmp_path, monkeypatch):
    from dvsdk.compiler.frontends import keras

    monkeypatch.setattr(keras, "MAX_CONFIG_BYTES", 1000)
    with pytest.raises(ModelError, match="too large"):
        load(DATA / "k3_seq.h5")


def test_missing_h5py_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)
    with pytest.raises(ModelError) as e:
        load(DATA / "k3_seq.h5")
    assert "dvsdk[keras]" in str(e.value)


def test_free_input_size_needs_input_size():
    with pytest.raises(ModelError, match="free dimensions") as e:
        load(DATA / "k3_free.h5")
    assert "--input-size" in e.value.hint
    with pytest.raises(ModelError, match="conflicts"):
        load(DATA / "k3_seq.h5", input_size=(8, 8))


def test_keras3_layer_entries_with_module_and_build_config_load_the_same(tmp_path):
    """Keras 3.0-3.x write ``module``/``registered_name``/``build_config`` per layer."""
    p = copy(tmp_path)
    cfg = get_config(p)
    for ly in cfg["config"]["layers"]:
        ly.update({"module": "keras.layers", "registered_name": None,
                   "build_config": {"input_shape": [None, 16, 16, 1]}})
    cfg["module"] = "keras"
    set_config(p, cfg)
    a, b = load(DATA / "k3_seq.h5"), load(p)
    assert a.op_types() == b.op_types() and a.outputs == b.outputs


def test_shared_layer_called_twice(tmp_path):
    """A functional layer with two inbound nodes (Keras 2 list form) runs once per call."""
    p = copy(tmp_path, "k2_free")
    cfg = get_config(p)
    layers = {ly["name"]: ly for ly in cfg["config"]["layers"]}
    layers["pool"]["inbound_nodes"].append([["pool", 0, 0, {}]])   # pool(pool(c1))
    layers["c2"]["inbound_nodes"] = [[["pool", 1, 0, {}]]]
    set_config(p, cfg)
    from dvsdk.compiler.fold import infer_shapes

    g = infer_shapes(load(p, input_size=(10, 14)))
    assert g.op_types().count("MaxPool") == 2
    assert g.shape(g.outputs[0]) == (1, 4, 2, 3)


def test_the_readme_keras_table_matches_where_layers_ran():
    """Every placement the layer table claims (DV700 / CPU) holds in every test model."""
    from dvsdk.compiler.frontends.keras_layers import ACTIVATION_RUNS, CPU, HW

    checked = 0
    for stem in MODELS:
        ins, outs, meta = ref(stem)
        size = tuple(meta["input_size"]) if "input_size" in meta else None
        net = compile(DATA / f"{stem}.h5", golden=False, input_size=size)
        with h5py.File(DATA / f"{stem}.h5", "r") as f:
            cfg = json.loads(f.attrs["model_config"])
        acts = {ly["config"].get("name", ly.get("name")): ly["config"].get("activation")
                for ly in cfg["config"]["layers"] if ly["class_name"] == "Activation"}
        for r in net.meta["report"]:
            cls, name = r["source"].split(" ", 1)
            if cls.startswith("ops."):   # Keras 3 arithmetic on tensors: not in the table
                continue
            spec = LAYERS[cls]
            runs = ACTIVATION_RUNS[acts[name]] if cls == "Activation" else \
                spec.runs if r["type"] in spec.ir_ops else None
            if runs in (HW, CPU):
                assert r["where"] == {HW: "hw", CPU: "cpu"}[runs], (stem, r)
                checked += 1
    assert checked > 100


def test_outputs_that_repeat_a_tensor_or_return_the_input(tmp_path):
    p = copy(tmp_path, "k3_free")
    cfg = get_config(p)
    cfg["config"]["output_layers"] = [["c2", 0, 0], ["c2", 0, 0], ["x", 0, 0]]
    set_config(p, cfg)
    ins, outs, _ = ref("k3_free")
    net = compile(p, golden=False, input_size=(10, 14))
    names = [o["name"] for o in net.meta["outputs"]]
    assert names[0] == "c2" and len(set(names)) == 3
    with Net(net, SIM) as n:
        got = n.run(ins["x"])
    assert_close(got[names[0]], outs["c2"], "c2")
    np.testing.assert_array_equal(got[names[1]], got[names[0]])
    np.testing.assert_allclose(got[names[2]], ins["x"], rtol=1e-3, atol=1e-4)   # via FP16


def test_transpose_option_on_an_nhwc_net():
    """--transpose (x/y-exchanged device tensors) composes with the NHWC boundary."""
    ins, outs, _ = ref("k3_free")
    net = compile(DATA / "k3_free.h5", input_size=(10, 14), transpose=True)
    assert net.meta["inputs"][0]["transpose"] and net.meta["inputs"][0]["layout"] == "NHWC"
    with Net(net, SIM) as n:
        assert_close(n.run(ins["x"])["c2"], outs["c2"], "c2")
        assert n.selftest()["passed"]
