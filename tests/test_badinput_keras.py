"""Damaged Keras .h5 model configs: a layer reference or constant whose ``config`` is not
an object (-1, true), and window attributes that are not finite (strides [Infinity, 1],
dilation_rate [NaN, NaN], as Python's json writes them) are ModelErrors naming the layer,
not AttributeError or OverflowError (frontends/keras.py, keras_ops.py, keras_prep.py,
keras_ir.py)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import pytest

import dvsdk
from dvsdk.errors import ModelError

DATA = Path(__file__).resolve().parent / "data" / "keras"


def _edit(src: str, tmp_path: Path, change) -> Path:
    """A copy of ``src`` whose model_config JSON went through ``change(config)``."""
    out = tmp_path / "m.h5"
    shutil.copy(DATA / src, out)
    with h5py.File(out, "r+") as f:
        raw = f.attrs["model_config"]
        config = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
        assert change(config), "nothing to change: the fixture moved"
        f.attrs["model_config"] = json.dumps(config)
    return out


def _first(node, pred):
    """The first dict in the JSON tree for which ``pred`` holds."""
    if isinstance(node, dict):
        if pred(node):
            return node
        node = list(node.values())
    if isinstance(node, list):
        for v in node:
            hit = _first(v, pred)
            if hit is not None:
                return hit
    return None


def _set_class_config(cls: str, value):
    def change(config) -> bool:
        hit = _first(config, lambda d: d.get("class_name") == cls)
        if hit is not None:
            hit["config"] = value
        return hit is not None
    return change


def _set_window(key: str, value):
    def change(config) -> bool:
        hit = _first(config, lambda d: d.get("class_name") == "Conv2D")
        if hit is not None:
            hit["config"][key] = value
        return hit is not None
    return change


@pytest.mark.parametrize("src, change, field", [
    ("k3_convs.h5", _set_class_config("__keras_tensor__", -1), None),
    ("k3_ops.h5", _set_class_config("__keras_tensor__", True), None),
    ("k3_ops.h5", _set_class_config("__numpy__", True), None),
    ("k3_convs.h5", _set_window("strides", [float("inf"), 1]), "Conv2D"),
    ("k3_convs.h5", _set_window("strides", [float("-inf"), 1]), "Conv2D"),
    ("k2_convs.h5", _set_window("dilation_rate", [float("nan")] * 2), "Conv2D"),
    ("k2_convs.h5", _set_window("kernel_size", [2 ** 70, 3]), "Conv2D"),
], ids=["tensor-config-int", "tensor-config-bool", "numpy-config-bool", "strides-inf",
        "strides-minus-inf", "dilation-nan", "kernel-2**70"])
def test_damaged_config_is_a_model_error(src, change, field, tmp_path):
    path = _edit(src, tmp_path, change)
    with pytest.raises(ModelError) as info:
        dvsdk.compile(str(path), tmp_path / "out.bin")
    assert info.value.field
    if field:
        assert info.value.field.startswith(field)
    assert not (tmp_path / "out.bin").exists()


@pytest.mark.parametrize("config", [True, -1, "x", [1, 2]])
def test_rescaling_numpy_operand_with_a_damaged_config(config):
    """Rescaling's ``scale`` saved as Keras 3's ``{"class_name": "__numpy__", "config":
    ...}`` whose config is not an object: a ModelError naming the layer (keras_prep)."""
    from dvsdk.compiler.frontends.keras_ir import Layer
    from dvsdk.compiler.frontends.keras_prep import _number_array

    layer = Layer("Rescaling", "pre", {}, lambda role, shape: None)
    with pytest.raises(ModelError) as info:
        _number_array(layer, {"class_name": "__numpy__", "config": config}, "scale")
    assert info.value.field == "Rescaling pre"
