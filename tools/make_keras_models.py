#!/usr/bin/env python3
"""Make the Keras test models of ``tests/data/keras/`` with the real frameworks.

Every model is built and saved (legacy ``.h5``) by Keras itself, with seeded random weights,
and run once on a seeded input; the framework's own outputs are saved beside it as
``<model>.npz`` (``in:<input name>`` and ``out:<output layer>`` arrays, plus ``meta``) and are
the reference the tests compare the simulator against.  Two generations:

* Keras 3 with the jax backend (``k3_*.h5``),
* Keras 2 as ``tf-keras`` (TensorFlow backend, ``k2_*.h5``),

each with the same architectures (and, Keras 3 only, ``ops``: arithmetic on tensors,
``x + 3.0``, which Keras 3 saves as operation calls): ``convs`` (Conv2D variants, DepthwiseConv2D,
SeparableConv2D, Conv2DTranspose, BatchNormalization, Add/Multiply/Concatenate ...),
``acts`` (every activation and activation layer), ``shapes`` (pooling, padding, cropping,
upsampling, Flatten/Reshape/Permute, Dense), ``seq`` (a Sequential CNN), ``free``
(free spatial input size) and ``digits``: a small CNN trained on scikit-learn's digits
(the bundled model's data, ``examples/models/train_digits.py``), whose reference holds
held-out images with their labels.  ``bad_*`` files are for the error tests.

``SegNet_Basic.hdf5`` (copied from DMP's converter tests) is run with tf-keras on a seeded
input (``segnet_ref.npz``: the seed, a checksum of the input and the outputs of 4096 pixels
plus the whole argmax map, to stay small).

Needs (not dvsdk dependencies; ~700 MB)::

    pip install keras jax tf-keras scikit-learn
    python3 tools/make_keras_models.py [--only k2|k3|k3-ops|segnet]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "data" / "keras"
SEED = 20261122
SEGNET_SEED = 7
SEGNET_PIXELS = 4096


# --------------------------------------------------------------------------- weights, io
def randomize(model, rng: np.random.Generator) -> None:
    """Seeded weights of a sensible scale (BatchNorm variances positive)."""
    for layer in model.layers:
        ws = layer.weights
        if not ws:
            continue
        vals = []
        for v in ws:
            name, shape = v.name.lower(), tuple(v.shape)
            if "variance" in name:
                vals.append(rng.uniform(0.5, 1.5, shape))
            elif "gamma" in name:
                vals.append(rng.uniform(0.6, 1.4, shape))
            elif "alpha" in name:
                vals.append(rng.uniform(0.05, 0.5, shape))
            elif len(shape) >= 2:
                fan_in = int(np.prod(shape[:-1])) if len(shape) > 2 else shape[0]
                vals.append(rng.normal(0, 1.2 / np.sqrt(max(fan_in, 1)), shape))
            else:
                vals.append(rng.normal(0, 0.2, shape))
        layer.set_weights([v.astype(np.float32) for v in vals])


def io_names(path: Path) -> tuple[list[str], list[str]]:
    """Input and output names as the saved config has them (what dvsdk's frontend uses)."""
    import h5py

    with h5py.File(path, "r") as f:
        cfg = json.loads(f.attrs["model_config"])
    inner = cfg["config"]
    if cfg["class_name"] == "Sequential":
        layers = inner["layers"] if isinstance(inner, dict) else inner
        first = layers[0]["config"].get("name") if layers[0]["class_name"] == "InputLayer" \
            else "input"
        return [first], [layers[-1]["config"]["name"]]
    ins, outs = inner["input_layers"], inner["output_layers"]
    ins = [ins] if isinstance(ins[0], str) else ins
    outs = [outs] if isinstance(outs[0], str) else outs
    return [i[0] for i in ins], [o[0] for o in outs]


def save(model, name: str, feeds: list[np.ndarray], extra: dict | None = None) -> None:
    path = OUT / f"{name}.h5"
    model.save(path)
    outs = model.predict(feeds if len(feeds) > 1 else feeds[0], verbose=0)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    ins, names = io_names(path)
    arrays = {f"in:{n}": x for n, x in zip(ins, feeds)}
    arrays.update({f"out:{n}": np.asarray(y, np.float32) for n, y in zip(names, outs)})
    meta = {"keras": KERAS_VERSION, "backend": BACKEND, "seed": SEED, **(extra or {})}
    np.savez_compressed(OUT / f"{name}.npz", meta=json.dumps(meta), **arrays)
    print(f"{path.name}: {path.stat().st_size} bytes, outputs "
          + ", ".join(f"{n}{tuple(np.shape(y))}" for n, y in zip(names, outs)))


# --------------------------------------------------------------------------- architectures
def build_convs(k):
    L = k.layers
    x = k.Input((12, 10, 3), name="img")
    c1 = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(x)
    c2 = L.Conv2D(6, (3, 5), strides=(2, 1), use_bias=False, name="c2_valid_s21")(x)
    c3 = L.Conv2D(8, 3, dilation_rate=2, padding="same", activation="tanh", name="c3_dil")(x)
    bn = L.BatchNormalization(name="bn")(c1)
    dw = L.DepthwiseConv2D(3, strides=2, padding="same", depth_multiplier=2,
                           activation="relu", name="dw_s2_m2")(bn)
    sep = L.SeparableConv2D(8, 3, padding="same", activation="sigmoid", name="sep")(bn)
    add = L.Add(name="add")([c1, sep])
    mul = L.Multiply(name="mul")([add, c3])
    cat = L.Concatenate(name="cat")([mul, bn])
    grp = L.Conv2D(8, 3, groups=2, padding="same", name="grouped")(cat)
    tr1 = L.Conv2DTranspose(4, 3, strides=2, padding="same", name="deconv_same")(c1)
    tr2 = L.Conv2DTranspose(4, (2, 3), strides=2, activation="elu", name="deconv_valid")(c1)
    tr3 = L.Conv2DTranspose(4, 3, strides=2, padding="same", output_padding=0,
                            name="deconv_opad")(bn)
    sub = L.Subtract(name="sub")([c1, bn])
    avg = L.Average(name="avg")([c1, bn, sub])
    mx = L.Maximum(name="max")([c1, sub])
    mn = L.Minimum(name="min")([c1, sub])
    return k.Model(x, [c2, dw, grp, tr1, tr2, tr3, avg, mx, mn], name="convs")


def build_acts(k, major: int):
    L = k.layers
    x = k.Input((6, 5, 4), name="x")
    base = L.Conv2D(8, 3, padding="same", name="base")(x)
    outs = []
    names = ["relu", "relu6", "sigmoid", "tanh", "softmax", "elu", "selu", "hard_sigmoid",
             "swish", "softplus", "softsign", "exponential", "mish", "log_softmax", "linear"]
    if major >= 3:
        names += ["hard_silu", "leaky_relu"]
    for n in names:
        outs.append(L.Activation(n, name=f"act_{n}")(base))
    outs.append(L.ReLU(max_value=6.0, name="relu6_layer")(base))
    outs.append(L.ReLU(max_value=1.5, negative_slope=0.1, name="relu_max_slope")(base))
    outs.append(L.ReLU(threshold=0.3, name="relu_threshold")(base))
    outs.append(L.ReLU(negative_slope=0.2, threshold=0.2, max_value=2.0, name="relu_all")(base))
    leaky = {"negative_slope": 0.15} if major >= 3 else {"alpha": 0.15}
    outs.append(L.LeakyReLU(**leaky, name="leaky")(base))
    outs.append(L.PReLU(shared_axes=[1, 2], name="prelu_shared")(base))
    outs.append(L.PReLU(name="prelu_full")(base))
    outs.append(L.ELU(alpha=0.7, name="elu_layer")(base))
    outs.append(L.Softmax(name="softmax_layer")(base))
    if hasattr(L, "ThresholdedReLU"):   # Keras 2 only
        outs.append(L.ThresholdedReLU(theta=0.4, name="thresholded")(base))
    outs.append(L.Conv2D(4, 1, activation="relu6", name="conv_relu6")(base))
    flat = L.Flatten(name="flat")(base)
    outs.append(L.Dense(6, activation="hard_sigmoid", name="fc_hsig")(flat))
    return k.Model(x, outs, name="acts")


def build_shapes(k):
    L = k.layers
    x = k.Input((9, 11, 8), name="x")
    outs = [
        L.MaxPooling2D(2, name="maxpool")(x),
        L.MaxPooling2D(3, strides=2, padding="same", name="maxpool_same")(x),
        L.AveragePooling2D(2, name="avgpool")(x),
        L.AveragePooling2D(3, strides=2, padding="same", name="avgpool_same")(x),
        L.GlobalAveragePooling2D(name="gap")(x),
        L.GlobalMaxPooling2D(keepdims=True, name="gmp_keep")(x),
    ]
    pad = L.ZeroPadding2D(((1, 2), (0, 3)), name="zpad")(x)
    outs.append(L.Conv2D(4, 3, name="conv_after_pad")(pad))
    outs.append(L.ZeroPadding2D(1, name="zpad_sym")(x))
    up = L.UpSampling2D(2, name="up2")(x)
    outs.append(L.Conv2D(4, 3, padding="same", name="conv_after_up")(up))
    outs.append(L.UpSampling2D((2, 3), interpolation="bilinear", name="up_bilinear")(x))
    outs.append(L.Cropping2D(((1, 0), (2, 1)), name="crop")(x))
    conv = L.Conv2D(6, 3, strides=2, padding="same", name="conv_s2")(x)
    drop = L.Dropout(0.5, name="drop")(L.SpatialDropout2D(0.2, name="sdrop")(
        L.GaussianNoise(0.1, name="noise")(conv)))
    flat = L.Flatten(name="flat")(drop)
    outs.append(L.Dense(10, activation="softmax", name="fc_softmax")(flat))
    outs.append(L.Dense(5, name="fc_raw")(flat))
    outs.append(L.Reshape((-1, 6), name="reshape_rank3")(conv))
    outs.append(L.Reshape((6, 10, 3), name="reshape_rank4")(conv))
    outs.append(L.Permute((2, 1, 3), name="permute_hw")(conv))
    outs.append(L.Permute((3, 1, 2), name="permute_chw")(conv))
    outs.append(L.Dense(3, name="dense_on_pixels")(conv))
    outs.append(L.Flatten(name="flat_out")(conv))          # Keras's H, W, C order out
    rs = L.Reshape((30, 6), name="rows")(conv)
    outs.append(L.Permute((2, 1), name="permute_rank3")(rs))
    outs.append(L.Activation("softmax", name="softmax_rank3")(rs))
    outs.append(L.BatchNormalization(name="bn_rank3")(rs))
    outs.append(L.Dense(4, activation="relu", name="dense_rank3")(rs))
    return k.Model(x, outs, name="shapes")


def build_multi(k):
    """Two inputs, two outputs, a shared layer."""
    L = k.layers
    a = k.Input((8, 6, 3), name="img_a")
    b = k.Input((8, 6, 3), name="img_b")
    shared = L.Conv2D(8, 3, padding="same", activation="relu", name="shared")
    s = L.Add(name="sum")([shared(a), shared(b)])
    y1 = L.Conv2D(4, 1, name="head")(s)
    y2 = L.Dense(3, name="logits")(L.GlobalAveragePooling2D(name="gap")(s))
    return k.Model([a, b], [y1, y2], name="multi")


def build_seq(k, major: int):
    L = k.layers
    first = [k.Input((16, 16, 1))] if major >= 3 else []
    kw = {} if major >= 3 else {"input_shape": (16, 16, 1)}
    return k.Sequential(first + [
        L.Conv2D(8, 3, padding="same", activation="relu", **kw),
        L.MaxPooling2D(2),
        L.Conv2D(16, 3, padding="same"),
        L.BatchNormalization(),
        L.Activation("relu"),
        L.MaxPooling2D(2),
        L.Flatten(),
        L.Dense(32, activation="relu"),
        L.Dropout(0.3),
        L.Dense(10, activation="softmax"),
    ], name="seq")


def build_free(k):
    L = k.layers
    x = k.Input((None, None, 3), name="x")
    y = L.Conv2D(8, 3, padding="same", activation="relu", name="c1")(x)
    y = L.MaxPooling2D(2, name="pool")(y)
    y = L.Conv2D(4, 1, name="c2")(y)
    return k.Model(x, y, name="free")


def build_ops(k):
    """Keras 3 arithmetic on tensors (``x + 3.0``): operation calls, not layers, in the file."""
    L = k.layers
    x = k.Input((6, 5, 3), name="img")
    y = L.Conv2D(4, 3, padding="same", name="conv")(x)
    plus = y + 3.0
    rsub = 3.0 - y
    half = y / 2.0
    minus_int = y - 1
    per_channel = y * np.array([0.5, -1.0, 2.0, 1.5], np.float32)
    both = plus + half                       # two tensors, positionally (not a merge layer)
    floor = k.ops.maximum(both, 0.25)
    merged = L.Add(name="merge")([rsub, half])
    d = L.Dense(3, name="dense")(L.GlobalAveragePooling2D(name="gap")(y))
    scaled = 2.0 * d + np.array([1.0, -2.0, 0.5], np.float32)
    return k.Model(x, [per_channel, floor, merged, minus_int, scaled], name="ops")


def make_ops() -> None:
    """``k3_ops`` alone (the other Keras 3 files stay as they are)."""
    global KERAS_VERSION, BACKEND
    os.environ["KERAS_BACKEND"] = "jax"
    import keras as k
    BACKEND = k.backend.backend()
    KERAS_VERSION = k.__version__
    k.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED + 30)
    model = build_ops(k)
    randomize(model, rng)
    save(model, "k3_ops", [rng.uniform(-1, 1, (1, 6, 5, 3)).astype(np.float32)])


def build_bad(k):
    L = k.layers
    x = k.Input((8, 8, 3), name="x")
    y = L.Conv2D(4, 3, name="conv")(x)
    y = L.Lambda(lambda t: t * 2.0, name="times_two")(y)
    y = L.Activation("gelu", name="gelu")(y)
    y = L.Conv1D(4, 3, name="conv1d")(L.Reshape((36, 4), name="rows")(y))
    return k.Model(x, y, name="bad")


# --------------------------------------------------------------------------- digits
def digits_data():
    """The bundled model's data (scikit-learn load_digits), as 16x16x1 images in 0..1: the
    8x8 digit upscaled 2x with nearest, the last 20% held out."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = np.repeat(np.repeat(d.images / 16.0, 2, axis=1), 2, axis=2)[..., None]
    x = x.astype(np.float32)
    n = int(len(x) * 0.8)
    return (x[:n], d.target[:n]), (x[n:], d.target[n:])


def build_digits(k):
    L = k.layers
    x = k.Input((16, 16, 1), name="image")
    y = L.Conv2D(8, 3, padding="same", activation="relu", name="conv1")(x)
    y = L.MaxPooling2D(2, name="pool1")(y)
    y = L.Conv2D(16, 3, padding="same", name="conv2")(y)
    y = L.BatchNormalization(name="bn2")(y)
    y = L.ReLU(name="relu2")(y)
    y = L.MaxPooling2D(2, name="pool2")(y)
    y = L.Flatten(name="flatten")(y)
    y = L.Dense(10, activation="softmax", name="probs")(y)
    return k.Model(x, y, name="digits")


def train_digits(k, prefix: str) -> None:
    (xt, yt), (xh, yh) = digits_data()
    model = build_digits(k)
    model.compile(optimizer=k.optimizers.Adam(3e-3), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(xt, yt, epochs=15, batch_size=32, verbose=0, shuffle=True)
    probs = model.predict(xh, verbose=0)
    acc = float(np.mean(probs.argmax(1) == yh))
    pick = np.random.default_rng(SEED).choice(len(xh), 24, replace=False)
    path = OUT / f"{prefix}_digits.h5"
    model.save(path)
    meta = {"keras": KERAS_VERSION, "backend": BACKEND, "heldout_accuracy": acc,
            "heldout": len(xh), "epochs": 15}
    np.savez_compressed(OUT / f"{prefix}_digits.npz", meta=json.dumps(meta),
                        **{"in:image": xh[pick], "out:probs": probs[pick].astype(np.float32),
                           "labels": yh[pick].astype(np.int64)})
    print(f"{path.name}: held-out accuracy {acc:.4f} on {len(xh)} images (Keras)")


# --------------------------------------------------------------------------- per framework
def make(major: int) -> None:
    global KERAS_VERSION, BACKEND
    if major >= 3:
        os.environ["KERAS_BACKEND"] = "jax"
        import keras as k
        BACKEND = k.backend.backend()
        k.utils.set_random_seed(SEED)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tf_keras as k
        BACKEND = "tensorflow"
        k.utils.set_random_seed(SEED)
    KERAS_VERSION = k.__version__ if hasattr(k, "__version__") else k.version()
    prefix = f"k{major}"
    OUT.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED + major)

    def feed(shape):
        return rng.uniform(-1, 1, (1, *shape)).astype(np.float32)

    for name, model, shapes in (
            ("convs", build_convs(k), [(12, 10, 3)]),
            ("acts", build_acts(k, major), [(6, 5, 4)]),
            ("shapes", build_shapes(k), [(9, 11, 8)]),
            ("seq", build_seq(k, major), [(16, 16, 1)]),
            ("multi", build_multi(k), [(8, 6, 3), (8, 6, 3)])):
        randomize(model, rng)
        save(model, f"{prefix}_{name}", [feed(s) for s in shapes])
    free = build_free(k)
    randomize(free, rng)
    save(free, f"{prefix}_free", [feed((10, 14, 3))], {"input_size": [10, 14]})
    train_digits(k, prefix)
    if major >= 3:
        bad = build_bad(k)
        bad.save(OUT / "bad_layers.h5")
        free.save_weights(OUT / "bad_weights_only.weights.h5")
        print("bad_layers.h5, bad_weights_only.weights.h5")


def make_segnet() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tf_keras as k

    model = k.models.load_model(OUT / "SegNet_Basic.hdf5", compile=False)
    x = segnet_input()
    y = model.predict(x, verbose=0)[0]   # (76800, 12)
    pix = np.sort(np.random.default_rng(SEGNET_SEED + 1).choice(len(y), SEGNET_PIXELS,
                                                                 replace=False))
    meta = {"keras": k.__version__, "backend": "tensorflow", "seed": SEGNET_SEED,
            "input": "default_rng(seed).uniform(0, 1, (1, 240, 320, 3)) as float32",
            "input_sha256": hashlib.sha256(x.tobytes()).hexdigest(),
            "output_range": [float(y.min()), float(y.max())]}
    np.savez_compressed(OUT / "segnet_ref.npz", meta=json.dumps(meta), pixels=pix,
                        values=y[pix].astype(np.float32),
                        classes=y.argmax(-1).astype(np.uint8))
    print(f"segnet_ref.npz: output range {meta['output_range']}")


def segnet_input() -> np.ndarray:
    return np.random.default_rng(SEGNET_SEED).uniform(0, 1, (1, 240, 320, 3)).astype(np.float32)


KERAS_VERSION = BACKEND = ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=("k2", "k3", "k3-ops", "segnet"))
    args = p.parse_args(argv)
    if args.only is None:   # one framework per process: Keras 3 and tf-keras do not mix
        for part in ("k3", "k3-ops", "k2", "segnet"):
            subprocess.run([sys.executable, __file__, "--only", part], check=True)
        return 0
    if args.only == "segnet":
        make_segnet()
    elif args.only == "k3-ops":
        make_ops()
    else:
        make(int(args.only[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
