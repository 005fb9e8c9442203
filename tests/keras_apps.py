"""keras.applications models for the tests, made by Keras itself at test time (not stored:
ResNet50's ``.h5`` alone is 100 MB).

Each model is built with ``weights=None`` and a fixed seed at the smallest input Keras
accepts (32 x 32), with a 10-class linear head (``classifier_activation=None``: the logits,
which say more than near-uniform softmax values), then given the statistics a trained net
has: one calibration pass over a seeded batch of 16 images sets every BatchNormalization's
moving mean and variance to its input's, and scales every Conv2D / DepthwiseConv2D / Dense
so its output has unit standard deviation (data-dependent initialization).  Without it the
random nets' activations vanish to 1e-11 (MobileNetV3) or saturate every sigmoid
(EfficientNet's squeeze-excitation), and any output would "agree".

Keras runs with its numpy backend (no jax or TensorFlow needed, and fast eagerly): the
reference is ``model(x)`` on a seeded 0..255 image, which the models' built-in
preprocessing (``Rescaling``, ``Normalization``) maps as ``model.predict`` does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

SIZE = 32
CALIBRATION = 16
SEED = 28


if "keras" not in sys.modules:   # Keras reads its backend once, when first imported
    os.environ["KERAS_BACKEND"] = "numpy"


def keras_module() -> Any:
    """Keras (on its numpy backend unless it was imported before with another)."""
    import keras

    return keras


def _unit_output(keras: Any, cls: type):
    base = cls.call

    def call(self, inputs, *args, **kwargs):
        y = keras.ops.convert_to_numpy(base(self, inputs, *args, **kwargs))
        sd = float(np.std(y.astype(np.float64)))
        if sd > 0:
            self.kernel.assign(keras.ops.convert_to_numpy(self.kernel) / sd)
            if getattr(self, "bias", None) is not None:
                self.bias.assign(keras.ops.convert_to_numpy(self.bias) / sd)
        return base(self, inputs, *args, **kwargs)
    return base, call


def _calibrate(keras: Any, model: Any, batch: np.ndarray) -> None:
    bn = keras.layers.BatchNormalization
    bn_call = bn.call

    def calibrating(self, inputs, training=None, mask=None):
        x = keras.ops.convert_to_numpy(inputs).astype(np.float64)
        axes = tuple(i for i in range(x.ndim) if i != self.axis % x.ndim)
        self.moving_mean.assign(x.mean(axes).astype(np.float32))
        self.moving_variance.assign(x.var(axes).astype(np.float32))
        return bn_call(self, inputs, training=False, mask=mask)

    L = keras.layers
    patches = [(c, *_unit_output(keras, c)) for c in (L.Conv2D, L.DepthwiseConv2D, L.Dense)]
    bn.call = calibrating
    for c, _, call in patches:
        c.call = call
    try:
        model(batch)
    finally:
        bn.call = bn_call
        for c, base, _ in patches:
            c.call = base


def images(rng: np.random.Generator, n: int, size: int = SIZE) -> np.ndarray:
    """``n`` seeded 0..255 RGB images (n, 32, 32, 3) that differ as photographs do: each a
    brightness, a contrast, a colour cast, coarse blobs (a 4 x 4 grid drawn 8x larger) and
    fine texture.  (Pure noise images all look alike to a net: its late features barely
    vary across them, and statistics taken on them would blow up on any other image.)"""
    level = rng.uniform(40, 215, (n, 1, 1, 1)) + rng.uniform(-25, 25, (n, 1, 1, 3))
    coarse = np.kron(rng.standard_normal((n, 4, 4, 3)), np.ones((1, size // 4, size // 4, 1)))
    fine = rng.standard_normal((n, size, size, 3))
    x = level + rng.uniform(10, 60, (n, 1, 1, 1)) * coarse + rng.uniform(0, 25, (n, 1, 1, 1)) * fine
    return np.clip(x, 0, 255).astype(np.float32)


def make_application(name: str, folder: Path, size: int = SIZE,
                     calibration: int = CALIBRATION) -> tuple[Path, np.ndarray, np.ndarray]:
    """Save ``keras.applications.<name>`` (calibrated as above) as ``folder/<name>.h5``;
    returns (path, input (1, 32, 32, 3) in 0..255, Keras's output)."""
    keras = keras_module()
    keras.utils.set_random_seed(SEED)
    model = getattr(keras.applications, name)(weights=None, input_shape=(size, size, 3),
                                              classes=10, classifier_activation=None)
    rng = np.random.default_rng(SEED)
    _calibrate(keras, model, images(rng, calibration, size))
    path = folder / f"{name}.h5"
    model.save(path)
    x = images(rng, 1, size)
    return path, x, np.asarray(keras.ops.convert_to_numpy(model(x)), np.float32)
