#!/usr/bin/env python3
"""Make the TFOpLambda test models of ``tests/data/keras_tfop/`` with real TensorFlow.

tf.keras (Keras 2, ``tf_keras``) saves a TensorFlow function applied to a Keras tensor
(``x * 2.0``, ``tf.nn.relu6(x)``, ``tf.concat([a, b], -1)`` ...) as a ``TFOpLambda`` layer
and a slice ``x[:, :, :, :8]`` as a ``SlicingOpLambda``.  Each model here is built with
seeded weights, saved as a legacy ``.h5`` and run once on a seeded input; TensorFlow's
outputs are saved beside it as ``<model>.npz`` (``in:<input>``, ``out:<output layer>``,
``meta``), the reference ``tests/test_keras_tfop.py`` compares dvsdk against.

Needs TensorFlow (not a dvsdk dependency)::

    python3 -m venv /tmp/tfvenv && /tmp/tfvenv/bin/pip install tensorflow-cpu tf-keras h5py
    TF_USE_LEGACY_KERAS=1 /tmp/tfvenv/bin/python tools/make_tfop_models.py
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "keras_tfop"
SEED = 20261128
SHAPE = (16, 16, 3)
BATCH = 2
L = keras.layers


def randomize(model, rng: np.random.Generator) -> None:
    """Seeded weights of a sensible scale."""
    for layer in model.layers:
        vals = []
        for v in layer.weights:
            shape = tuple(v.shape)
            if len(shape) >= 2:
                fan_in = int(np.prod(shape[:-1]))
                vals.append(rng.normal(0, 1.2 / np.sqrt(max(fan_in, 1)), shape))
            else:
                vals.append(rng.normal(0, 0.2, shape))
        if vals:
            layer.set_weights([a.astype(np.float32) for a in vals])


def io_names(path: Path) -> tuple[list[str], list[str]]:
    """Input and output layer names as the saved config has them."""
    import h5py

    with h5py.File(path, "r") as f:
        inner = json.loads(f.attrs["model_config"])["config"]
    ins, outs = inner["input_layers"], inner["output_layers"]
    ins = [ins] if isinstance(ins[0], str) else ins
    outs = [outs] if isinstance(outs[0], str) else outs
    return [i[0] for i in ins], [o[0] for o in outs]


def save(model, name: str, feed: np.ndarray) -> None:
    path = OUT / f"{name}.h5"
    model.save(path, save_format="h5")
    outs = model.predict(feed, verbose=0)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    ins, names = io_names(path)
    arrays = {f"in:{ins[0]}": feed}
    arrays.update({f"out:{n}": np.asarray(y, np.float32) for n, y in zip(names, outs)})
    meta = {"tensorflow": tf.__version__, "tf_keras": keras.__version__, "seed": SEED}
    np.savez_compressed(OUT / f"{name}.npz", meta=json.dumps(meta), **arrays)
    print(f"{path.name}: {path.stat().st_size} bytes, outputs "
          + ", ".join(f"{n}{tuple(np.shape(y))}" for n, y in zip(names, outs)))


# --------------------------------------------------------------------------- the models
def arith() -> keras.Model:
    """Scalar arithmetic on both sides, int and negative constants, relu6, swish."""
    x = keras.Input(SHAPE, name="image")
    y = x / 255.0 - 0.5                       # pixel scaling before the first conv
    y = L.Conv2D(8, 3, padding="same", name="c1")(y)
    y = 2.0 * y                               # scalar on the left
    y = y + 1                                 # int constant
    y = tf.nn.relu6(y)
    y = L.Conv2D(8, 3, padding="same", name="c2")(y)
    y = y * -0.75 + 0.25                      # negative scalar
    y = 1.0 - y                               # reversed subtraction
    y = tf.math.multiply(y, tf.nn.sigmoid(y))  # swish
    y = L.Conv2D(4, 1, name="c3")(y)
    y = y / 2
    return keras.Model(x, tf.math.subtract(y, 0.125), name="tfop_arith")


def merge() -> keras.Model:
    """tf.add of two tensors, tf.concat, squeeze-excite with reduce_mean and sigmoid."""
    x = keras.Input(SHAPE, name="image")
    a = L.Conv2D(8, 3, padding="same", activation="relu", name="ca")(x)
    b = L.Conv2D(8, 3, padding="same", name="cb")(x)
    s = tf.add(a, b)
    c = tf.concat([a, s], axis=-1)
    se = tf.reduce_mean(c, axis=[1, 2], keepdims=True)
    se = L.Conv2D(16, 1, name="se")(se)
    se = tf.math.sigmoid(se)
    y = c * se
    y = tf.math.add(y, tf.nn.relu(b[:, :, :, :1]))
    y = L.Conv2D(6, 3, strides=2, name="c2")(y)
    return keras.Model(x, y, name="tfop_merge")


def shapes() -> keras.Model:
    """tf.reshape, tf.transpose, slices, reduce_mean without keepdims, a Dense head."""
    x = keras.Input(SHAPE, name="image")
    y = L.Conv2D(8, 3, strides=2, padding="same", name="c1")(x)      # (8, 8, 8)
    first = y[:, :, :, :4]
    rest = y[:, 1:, :, 4:]
    t = tf.transpose(first, perm=[0, 3, 1, 2])                       # (4, 8, 8)
    t = tf.reshape(t, [-1, 4, 64])
    t = L.Dense(5, name="d1")(t)                                      # (4, 5)
    t = tf.reshape(t, (-1, 20))
    r = tf.reduce_mean(rest, axis=[1, 2])                             # (4,)
    y = tf.concat([t, r], axis=1)
    y = L.Dense(3, name="head")(y)
    return keras.Model(x, tf.nn.softmax(y), name="tfop_shapes")


def mobile() -> keras.Model:
    """A MobileNet-like block written with TF functions: relu6, hard-swish, residual."""
    x = keras.Input(SHAPE, name="image")
    y = (x - 127.5) / 127.5
    y = L.Conv2D(8, 3, strides=2, padding="same", name="stem")(y)
    y = y * tf.nn.relu6(y + 3.0) / 6.0                                # hard-swish
    z = L.DepthwiseConv2D(3, padding="same", name="dw")(y)
    z = tf.nn.relu6(z)
    z = L.Conv2D(8, 1, name="pw")(z)
    y = tf.add(y, z)
    y = tf.math.reduce_mean(y, axis=[1, 2], keepdims=True)
    y = L.Conv2D(10, 1, name="logits")(y)
    y = tf.reshape(y, [-1, 10])
    return keras.Model(x, y, name="tfop_mobile")


#: name -> (builder, the input's range: pixels for the models that scale them themselves)
MODELS = {"tfop_arith": (arith, 255.0), "tfop_merge": (merge, 1.0),
          "tfop_shapes": (shapes, 1.0), "tfop_mobile": (mobile, 255.0)}


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for i, (name, (make, top)) in enumerate(MODELS.items()):
        keras.utils.set_random_seed(SEED + i)
        model = make()
        randomize(model, np.random.default_rng(SEED + i))
        feed = np.random.default_rng(SEED + 100 + i).uniform(0, top, (BATCH, *SHAPE))
        save(model, name, feed.astype(np.float32))
    return 0


if __name__ == "__main__":
    sys.exit(main())
