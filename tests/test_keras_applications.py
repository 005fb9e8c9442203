"""keras.applications with their built-in preprocessing, and Keras's constant preprocessing
layers, compiled and run on the simulator against Keras itself (issue 28 item 1).

The models are made by Keras at test time (``tests/keras_apps.py``: weights=None, a fixed
seed, calibrated to a trained net's statistics, saved as ``.h5`` into ``tmp_path``) and the
reference is Keras's own output on the same input.  Three checks per model:

* the IR the frontend reads, run by the float32 interpreter, equals Keras to 1e-4 of the
  output range (the conversion is exact; FP16 plays no part);
* the simulator's output (FP16 storage, the DV700's arithmetic) is within the model's bound
  of Keras, and the top class is Keras's;
* the bounds: these 50-150-layer nets with random (calibrated) weights amplify FP16's
  rounding along their depth more than the suite's usual 1e-2 of the range (per layer
  ``dvsdk analyze`` shows the error growing steadily, no layer adding a jump: 0.07% after
  MobileNetV2's first block, 2.2% at its logits).  The bounds are the measured levels with
  a margin, as in tests/test_realistic_nets.py; a wrong fold or layout gives errors of the
  order of the range itself.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.frontends import load
from dvsdk.compiler.interpret import run_graph
from dvsdk.errors import ModelError, UnsupportedOps
from dvsdk.runtime.net import Net

from .keras_apps import images, keras_module, make_application

# Skipped only where keras is not installed at all: in the dev install (CI) it is, and a
# keras that cannot import (a missing backend dependency) must fail, not skip
if importlib.util.find_spec("keras") is None or importlib.util.find_spec("h5py") is None:
    pytest.skip("keras and h5py are not installed (pip install -e '.[dev]')",
                allow_module_level=True)
keras_module()

TOL_REL, TOL_ABS = 1e-2, 1e-3      # as tests/compile_harness.py

#: model: (input size, calibration images, sim error bound / output range; measured)
APPS = {
    "MobileNetV3Small": (32, 16, 3e-2),     # 1.7e-2
    "MobileNetV2": (32, 16, 4e-2),          # 2.1e-2
    "ResNet50": (32, 16, 5e-2),             # 2.8e-2
    "MobileNetV3Large": (64, 32, 4e-2),     # 1.8e-2 (5.6e-2 at 32 x 32: 1x1 features)
    "EfficientNetB0": (64, 32, 5e-2),       # 2.9e-2
    "EfficientNetV2B0": (64, 32, 1e-2),     # 3.0e-3
}


def _sim(net, x: np.ndarray) -> np.ndarray:
    with Net(net, "sim://") as n:
        return next(iter(n.run({net.meta["inputs"][0]["name"]: x}).values()))


def _interp(path, x: np.ndarray) -> np.ndarray:
    g = load(path)
    return next(iter(run_graph(g, {g.inputs[0]: x.transpose(0, 3, 1, 2)}).values()))


@pytest.mark.parametrize("name", list(APPS))
def test_application_agrees_with_keras(name, tmp_path):
    size, calibration, bound = APPS[name]
    path, x, ref = make_application(name, tmp_path, size, calibration)
    span = float(ref.max() - ref.min())
    assert span > 0.1, "a degenerate reference"
    exact = float(np.abs(_interp(path, x) - ref).max())
    assert exact <= 1e-4 * span, f"{name}: float32 IR differs from Keras by {exact:.3g}"
    net = compile(path, golden=False)
    types = {r["type"] for r in net.meta["report"]}
    y = _sim(net, x)
    err = float(np.abs(y.astype(np.float64) - ref).max())
    assert err <= TOL_ABS + bound * span, f"{name}: {err:.4g} of range {span:.4g}"
    assert int(y.argmax()) == int(ref.argmax())
    assert "Rescaling" not in types


def test_convnext_tiny_agrees_with_keras(tmp_path):
    """ConvNeXtTiny: nested Sequential blocks (stem, downsampling), LayerNormalization,
    Gelu, LayerScale (measured: float32 IR 9.3e-7, simulator 1.2e-3 of the range)."""
    path, x, ref = make_application("ConvNeXtTiny", tmp_path, 32, 16)
    span = float(ref.max() - ref.min())
    g = load(path)
    assert {"LayerNormalization", "Gelu"} <= set(g.op_types())
    assert float(np.abs(_interp(path, x) - ref).max()) <= 1e-4 * span
    y = _sim(compile(path, golden=False), x)
    assert float(np.abs(y - ref).max()) <= TOL_ABS + 1e-2 * span
    assert int(y.argmax()) == int(ref.argmax())


# --------------------------------------------------------------------------- the layers
def _model(keras, body, shape=(12, 10, 3)):
    x = keras.Input(shape, name="img")
    return keras.Model(x, body(keras.layers, x))


def _check(keras, model, tmp_path, x=None, tol=TOL_REL):
    path = tmp_path / "m.h5"
    model.save(path)
    if x is None:
        x = images(np.random.default_rng(1), 1, 32)[:, :model.input.shape[1],
                                                    :model.input.shape[2]]
    ref = np.asarray(keras.ops.convert_to_numpy(model(x)), np.float32)
    net = compile(path, golden=False)
    y = _sim(net, x)
    span = float(ref.max() - ref.min())
    assert float(np.abs(y - ref).max()) <= TOL_ABS + tol * span
    return load(path), net


def test_rescaling_folds_into_the_first_conv(tmp_path):
    """MobileNetV3's x / 127.5 - 1 before a conv that does not pad: scale into its weights,
    offset into its bias; nothing of the layer is left."""
    keras = keras_module()
    keras.utils.set_random_seed(1)
    m = _model(keras, lambda L, x: L.Conv2D(4, 3, name="conv")(
        L.Rescaling(1 / 127.5, offset=-1.0, name="pre")(x)))
    g, net = _check(keras, m, tmp_path)
    assert g.op_types().count("Mul") == 1 and g.op_types().count("Add") == 1
    assert {r["type"] for r in net.meta["report"]} == {"Conv"}


def test_offset_before_a_padded_conv_stays_an_element_wise_step(tmp_path):
    """The padded zeros must not see the offset: only the scale folds."""
    keras = keras_module()
    keras.utils.set_random_seed(2)
    m = _model(keras, lambda L, x: L.Conv2D(4, 3, padding="same", name="conv")(
        L.Rescaling(1 / 127.5, offset=-1.0, name="pre")(x)))
    _, net = _check(keras, m, tmp_path)
    assert {r["type"] for r in net.meta["report"]} == {"Conv", "Add"}


def test_rescaling_then_normalization_is_one_affine_map(tmp_path):
    """EfficientNet's Rescaling(1/255) -> Normalization(mean, variance): one Add, one Mul."""
    keras = keras_module()
    keras.utils.set_random_seed(3)
    m = _model(keras, lambda L, x: L.Conv2D(4, 3, name="conv")(
        L.Normalization(mean=[0.485, 0.456, 0.406], variance=[0.052, 0.05, 0.0506],
                        name="norm")(L.Rescaling(1 / 255, name="pre")(x))))
    g, net = _check(keras, m, tmp_path)
    assert sorted(g.op_types()) == ["Add", "Conv", "Mul"]
    assert {r["type"] for r in net.meta["report"]} == {"Conv"}


@pytest.mark.parametrize("kind", ["invert", "no_axis", "per_channel_scale", "adapted",
                                  "output"])
def test_preprocessing_variants_agree_with_keras(kind, tmp_path):
    keras = keras_module()
    keras.utils.set_random_seed(4)
    L = keras.layers
    if kind == "invert":
        layer = L.Normalization(mean=[10.0, 20.0, 30.0], variance=[4.0, 9.0, 16.0],
                                invert=True)
    elif kind == "no_axis":
        layer = L.Normalization(axis=None, mean=100.0, variance=2500.0)
    elif kind == "per_channel_scale":
        layer = L.Rescaling([0.5, 0.25, -0.125], offset=[1.0, 0.0, -2.0])
    elif kind == "adapted":   # mean and variance stored as weights, not in the config
        layer = L.Normalization()
        layer.adapt(images(np.random.default_rng(5), 8, 32)[:, :12, :10])
    else:
        layer = L.Rescaling(1 / 255)
    if kind == "output":   # the map alone: no conv to fold into
        m = _model(keras, lambda L_, x: layer(x))
    else:
        m = _model(keras, lambda L_, x: L.Conv2D(5, 3, padding="same")(layer(x)))
    _check(keras, m, tmp_path)


def test_center_crop_and_its_refusal(tmp_path):
    keras = keras_module()
    m = _model(keras, lambda L, x: L.CenterCrop(7, 5, name="crop")(x))
    _check(keras, m, tmp_path)
    big = _model(keras, lambda L, x: L.CenterCrop(16, 5, name="crop")(x))
    big.save(tmp_path / "big.h5")
    with pytest.raises(ModelError, match="CenterCrop.*crop"):
        load(tmp_path / "big.h5")


def test_nested_sequential_is_read_and_its_unknown_members_named(tmp_path):
    keras = keras_module()
    keras.utils.set_random_seed(6)
    L = keras.layers
    block = keras.Sequential([keras.Input((12, 10, 3)), L.Conv2D(4, 3, name="inner_conv"),
                              L.ReLU(name="inner_relu")], name="block")
    m = _model(keras, lambda L_, x: L.Conv2D(2, 1, name="head")(block(x)))
    _check(keras, m, tmp_path)
    bad = keras.Sequential([keras.Input((12, 10, 3)), L.Reshape((120, 3), name="rows"),
                            L.Conv1D(4, 3, name="inner_conv1d")], name="bad_block")
    m2 = _model(keras, lambda L_, x: bad(x))
    m2.save(tmp_path / "bad.h5")
    with pytest.raises(UnsupportedOps) as e:
        load(tmp_path / "bad.h5")
    assert ("Conv1D", "inner_conv1d") in e.value.ops
