"""Train, export and compile the bundled digits model (``examples/models/digits.*``).

A small CNN trained with plain numpy on scikit-learn's ``load_digits`` (1797 8x8 images,
values 0..16, ink bright on black), exported to ONNX with ``onnx.helper`` (opset 13) and
compiled for the DV700 with :func:`dvsdk.compile`::

    image 1x1x16x16 -> Conv 3x3 (8) + Relu + MaxPool 2x2     one DV700 conv run (fused)
                    -> Conv 3x3 (16) + Relu + MaxPool 2x2    one DV700 conv run (fused)
                    -> Flatten -> Gemm 256->10               DV700 FC, reads the pool output
                    -> Softmax                               CPU

Images: a digit is drawn as an 8-bit grayscale PNG, pixel = round(value * 255 / 16),
upscaled 4x with nearest to 32x32 (:func:`render`). The net.bin records the preprocessing
(scale 1/255, stretch resize to 16x16), so ``dvsdk-run digits.bin seven.png`` works on any
light-on-dark digit image. The training inputs are exactly what the runtime feeds the net
for such a PNG (:func:`dvsdk.runtime.images.preprocess`), plus the same digits upscaled 2x with
nearest (a crisp 16x16 image), so both kinds of input are in the training distribution.

Training: Adam, 30 epochs, random shifts of up to one digit pixel; about 10 s on 2 cores.
Deterministic: a fixed seed, the last 20% of the data set held out (other writers).

    pip install scikit-learn                            # only this script needs it
    python examples/models/train_digits.py              # train, export, compile, samples
    python examples/models/train_digits.py --compile-only   # recompile the shipped ONNX

``--compile-only`` rebuilds ``digits.bin`` from the shipped ``digits.onnx`` (run it after a
compiler change; ``tests/test_bundled_model.py`` fails while the shipped file is stale) and
needs neither scikit-learn nor training.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ONNX_PATH = HERE / "digits.onnx"
NET_PATH = HERE / "digits.bin"
LABELS_PATH = HERE / "digits_labels.txt"
HELDOUT_PATH = HERE / "digits_heldout.npz"
SAMPLES_DIR = HERE / "samples"

LABELS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
INPUT_SIZE = 16        # the network's input: 1x1x16x16
SAMPLE_SIZE = 32       # shipped sample PNGs: 32x32 (the 8x8 digit upscaled 4x, nearest)
SCALE = 1.0 / 255.0    # PNG pixel 0..255 -> network input 0..1
TEST_FRACTION = 0.2    # the last 20% of load_digits is held out
SEED = 20261122
EPOCHS = 30
BATCH = 32
LR = 3e-3
WEIGHT_DECAY = 1e-4
SHIFT = 2              # augmentation: random shifts of up to 2 input pixels (1 digit pixel)
CONV1, CONV2 = 8, 16   # output channels of the two conv layers

#: Everything the shipped digits.bin was compiled with (the staleness test uses it too).
COMPILE_OPTIONS = {"scale": SCALE, "resize": "stretch", "labels": list(LABELS)}
#: The preprocessing the net.bin records (``dvsdk.runtime.images.preprocess`` spec).
PREPROCESS = {"mean": [0.0, 0.0, 0.0], "scale": SCALE, "std": None, "channel_order": "RGB",
              "resize": "stretch"}
INPUT_SHAPE = (1, 1, INPUT_SIZE, INPUT_SIZE)


# -- images --------------------------------------------------------------------------------
def render(digit: np.ndarray, size: int = SAMPLE_SIZE) -> np.ndarray:
    """An 8x8 digit (values 0..16) as an 8-bit grayscale image (size x size, nearest)."""
    d = np.asarray(digit, np.float64).reshape(8, 8)
    img = np.clip(np.round(d * 255.0 / 16.0), 0, 255).astype(np.uint8)
    k = size // 8
    return np.repeat(np.repeat(img, k, axis=0), k, axis=1)


def to_input(image: np.ndarray) -> np.ndarray:
    """An image as the network input (1, 1, 16, 16), exactly as ``Net.run_image`` does."""
    from dvsdk.runtime.images import preprocess

    return preprocess(image, INPUT_SHAPE, PREPROCESS)


def views(digits: np.ndarray) -> dict[str, np.ndarray]:
    """Network inputs (N, 1, 16, 16) for digits (N, 8, 8): as a 32x32 PNG through the
    runtime's preprocessing, and as a crisp 16x16 image (2x nearest)."""
    png = np.concatenate([to_input(render(d)) for d in digits])
    crisp = np.concatenate([to_input(render(d, INPUT_SIZE)) for d in digits])
    return {"png32": png, "crisp16": crisp}


def load_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits: (train images, train labels, test images, test labels, test
    indices into load_digits); images are uint8 (N, 8, 8) with values 0..16."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("training needs scikit-learn: pip install scikit-learn "
                 "(--compile-only does not)")
    ds = load_digits()
    images = ds.images.astype(np.uint8)
    labels = ds.target.astype(np.int64)
    n_train = int(round(len(images) * (1 - TEST_FRACTION)))
    idx = np.arange(len(images))
    return images[:n_train], labels[:n_train], images[n_train:], labels[n_train:], idx[n_train:]


# -- the network in numpy (NHWC activations, ONNX weight layouts) ---------------------------
def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    flat = CONV2 * (INPUT_SIZE // 4) ** 2
    return {"conv1.weight": he((CONV1, 1, 3, 3), 9), "conv1.bias": np.zeros(CONV1, np.float32),
            "conv2.weight": he((CONV2, CONV1, 3, 3), 9 * CONV1),
            "conv2.bias": np.zeros(CONV2, np.float32),
            "fc.weight": he((10, flat), flat), "fc.bias": np.zeros(10, np.float32)}


def _im2col(x: np.ndarray) -> np.ndarray:
    """(N, H, W, C) -> (N*H*W, C*9) patches of a 3x3 pad-1 conv, ordered (c, ky, kx)."""
    n, h, w, c = x.shape
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    cols = np.stack([xp[:, ky:ky + h, kx:kx + w, :] for ky in range(3) for kx in range(3)],
                    axis=-1)
    return cols.reshape(n * h * w, c * 9)


def _col2im(dcols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    n, h, w, c = shape
    d = dcols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, h + 2, w + 2, c), np.float32)
    for ky in range(3):
        for kx in range(3):
            dxp[:, ky:ky + h, kx:kx + w, :] += d[..., ky, kx]
    return dxp[:, 1:-1, 1:-1, :]


def _pool(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    n, h, w, c = x.shape
    blocks = x.reshape(n, h // 2, 2, w // 2, 2, c).transpose(0, 1, 3, 5, 2, 4)
    blocks = blocks.reshape(n, h // 2, w // 2, c, 4)
    arg = blocks.argmax(-1)
    return np.take_along_axis(blocks, arg[..., None], -1)[..., 0], arg


def _unpool(dy: np.ndarray, arg: np.ndarray) -> np.ndarray:
    n, h2, w2, c = dy.shape
    blocks = np.zeros((n, h2, w2, c, 4), np.float32)
    np.put_along_axis(blocks, arg[..., None], dy[..., None], -1)
    blocks = blocks.reshape(n, h2, w2, c, 2, 2).transpose(0, 1, 4, 2, 5, 3)
    return blocks.reshape(n, h2 * 2, w2 * 2, c)


def forward(p: dict[str, np.ndarray], x: np.ndarray, cache: dict | None = None) -> np.ndarray:
    """Logits (N, 10) for inputs x (N, 1, H, W); fills ``cache`` for :func:`backward`."""
    n = x.shape[0]
    a0 = x.transpose(0, 2, 3, 1)
    cols1 = _im2col(a0)
    z1 = (cols1 @ p["conv1.weight"].reshape(CONV1, -1).T + p["conv1.bias"])
    z1 = z1.reshape(*a0.shape[:3], CONV1)
    p1, arg1 = _pool(np.maximum(z1, 0))
    cols2 = _im2col(p1)
    z2 = (cols2 @ p["conv2.weight"].reshape(CONV2, -1).T + p["conv2.bias"])
    z2 = z2.reshape(*p1.shape[:3], CONV2)
    p2, arg2 = _pool(np.maximum(z2, 0))
    flat = p2.transpose(0, 3, 1, 2).reshape(n, -1)   # ONNX Flatten of NCHW
    logits = flat @ p["fc.weight"].T + p["fc.bias"]
    if cache is not None:
        cache.update(cols1=cols1, z1=z1, arg1=arg1, p1=p1, cols2=cols2, z2=z2, arg2=arg2,
                     p2=p2, flat=flat)
    return logits


def backward(p: dict[str, np.ndarray], c: dict, dlogits: np.ndarray) -> dict[str, np.ndarray]:
    g = {"fc.weight": dlogits.T @ c["flat"], "fc.bias": dlogits.sum(0)}
    dflat = dlogits @ p["fc.weight"]
    dp2 = dflat.reshape(c["p2"].shape[0], CONV2, *c["p2"].shape[1:3]).transpose(0, 2, 3, 1)
    dz2 = _unpool(dp2, c["arg2"]) * (c["z2"] > 0)
    dz2 = dz2.reshape(-1, CONV2)
    g["conv2.weight"] = (dz2.T @ c["cols2"]).reshape(CONV2, CONV1, 3, 3)
    g["conv2.bias"] = dz2.sum(0)
    dp1 = _col2im(dz2 @ p["conv2.weight"].reshape(CONV2, -1), c["p1"].shape)
    dz1 = (_unpool(dp1, c["arg1"]) * (c["z1"] > 0)).reshape(-1, CONV1)
    g["conv1.weight"] = (dz1.T @ c["cols1"]).reshape(CONV1, 1, 3, 3)
    g["conv1.bias"] = dz1.sum(0)
    return g


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def predict(p: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    return np.concatenate([forward(p, x[i:i + 256]) for i in range(0, len(x), 256)]).argmax(-1)


def shift(x: np.ndarray, rng: np.random.Generator, k: int = SHIFT) -> np.ndarray:
    """Each image of x (N, 1, H, W) moved by a random (dy, dx) in -k..k, zero-filled."""
    n, _, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (k, k), (k, k)))
    dy, dx = rng.integers(-k, k + 1, (2, n))
    rows = (k - dy)[:, None] + np.arange(h)
    cols = (k - dx)[:, None] + np.arange(w)
    return xp[np.arange(n)[:, None, None], 0, rows[:, :, None], cols[:, None, :]][:, None]


def train(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Adam on softmax cross-entropy with random shifts, cosine learning rate, L2 weight
    decay."""
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    steps_per_epoch = -(-len(x) // BATCH)
    total, t = EPOCHS * steps_per_epoch, 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        loss_sum = 0.0
        for s in range(steps_per_epoch):
            b = order[s * BATCH:(s + 1) * BATCH]
            cache: dict = {}
            logits = forward(p, shift(x[b], rng), cache)
            prob = softmax(logits)
            loss_sum += float(-np.log(prob[np.arange(len(b)), y[b]] + 1e-12).sum())
            dlogits = prob
            dlogits[np.arange(len(b)), y[b]] -= 1
            grads = backward(p, cache, (dlogits / len(b)).astype(np.float32))
            t += 1
            lr = LR * 0.5 * (1 + np.cos(np.pi * t / total))
            for k in p:
                gk = grads[k] + WEIGHT_DECAY * p[k]
                m[k] = 0.9 * m[k] + 0.1 * gk
                v[k] = 0.999 * v[k] + 0.001 * gk * gk
                mh, vh = m[k] / (1 - 0.9 ** t), v[k] / (1 - 0.999 ** t)
                p[k] = (p[k] - lr * mh / (np.sqrt(vh) + 1e-8)).astype(np.float32)
        if epoch % 5 == 4 or epoch == EPOCHS - 1:
            acc = float((predict(p, x) == y).mean())
            print(f"  epoch {epoch + 1:2d}  loss {loss_sum / len(x):.4f}  train acc {acc:.2%}")
    return p


# -- ONNX ----------------------------------------------------------------------------------
def export_onnx(p: dict[str, np.ndarray], path: Path = ONNX_PATH) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"],
                         name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"],
                         name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], name="pool2", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["pool2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"], name="fc",
                         transB=1),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes, "digits",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(np.ascontiguousarray(v, np.float32), k) for k, v in p.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)],
                              producer_name="dvsdk examples/models/train_digits.py")
    model.ir_version = 8
    model.doc_string = ("Small CNN on scikit-learn's digits (8x8, upscaled to 16x16); "
                        "input: grayscale in 0..1, ink bright; output: class probabilities")
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def check_onnxruntime(p: dict[str, np.ndarray], x: np.ndarray, path: Path = ONNX_PATH) -> float:
    """Max |onnxruntime - numpy| over the inputs x (N, 1, 16, 16); raises if above 1e-5."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ref = softmax(np.concatenate([forward(p, x[i:i + 256]) for i in range(0, len(x), 256)]))
    got = np.concatenate([sess.run(None, {"image": x[i:i + 1]})[0] for i in range(len(x))])
    err = float(np.abs(got - ref).max())
    if err > 1e-5:
        raise SystemExit(f"onnxruntime disagrees with the numpy forward pass: {err:.3g}")
    return err


# -- compile and check on the simulator ----------------------------------------------------
def compile_net(output: Path | None = NET_PATH):
    """Compile the shipped ONNX with :data:`COMPILE_OPTIONS`; returns the NetFile.

    Compiled from the file's bytes and recorded with the source ``digits.onnx`` so the
    result does not depend on the working directory (the staleness test compares bytes)."""
    import dvsdk
    from dvsdk.netfile import write

    net = dvsdk.compile(ONNX_PATH.read_bytes(), None, **COMPILE_OPTIONS)
    net.meta["source"] = ONNX_PATH.name
    recorded = net.meta["inputs"][0]["preprocess"]
    if {k: recorded.get(k) for k in PREPROCESS} != PREPROCESS:   # training used PREPROCESS
        raise RuntimeError(f"the net.bin records preprocessing {recorded}, the model was "
                           f"trained with {PREPROCESS}")
    if output is not None:
        write(net, output)
        Path(output).chmod(0o644)   # write() creates it 0600 (a temporary file, renamed)
    return net


def sim_predict(net, digits: np.ndarray) -> np.ndarray:
    """Classes the compiled net (a loaded ``dvsdk.runtime.net.Net``) gives 32x32 renders of
    digits (N, 8, 8), through ``run_image``: preprocessing, DV700 (simulator), Softmax."""
    return np.array([int(net.run_image(render(d))["probs"].argmax()) for d in digits])


def check_shipped(path: Path = NET_PATH) -> float:
    """Sim accuracy on the held-out set; every sample PNG classifies to its file name."""
    import dvsdk

    held = np.load(HELDOUT_PATH)
    with dvsdk.load(path, "sim://") as net:
        test = net.selftest()
        if not test["passed"]:
            raise SystemExit(f"selftest failed: {test}")
        acc = float((sim_predict(net, held["images"]) == held["labels"]).mean())
        for png in sorted(SAMPLES_DIR.glob("*.png")):
            got = net.labels[int(net.run_image(png)["probs"].argmax())]
            want = png.stem.split("_")[0]
            if got != want:
                raise SystemExit(f"{png.name}: the simulator says {got}")
    print(f"{path.name}: selftest ok (max error {test['max_abs_error']:.2g}), held-out "
          f"accuracy on sim:// {acc:.2%} ({len(held['labels'])} digits), "
          f"{len(list(SAMPLES_DIR.glob('*.png')))} samples ok")
    return acc


def write_samples(net, images: np.ndarray, labels: np.ndarray, indices: np.ndarray,
                  float_pred: np.ndarray) -> None:
    """One PNG per class: the first held-out digit that the float model and the compiled
    net (via the PNG file) both classify correctly; named ``<label>_<load_digits index>``."""
    from PIL import Image

    SAMPLES_DIR.mkdir(exist_ok=True)
    for old in SAMPLES_DIR.glob("*.png"):
        old.unlink()
    for cls, name in enumerate(LABELS):
        for i in np.flatnonzero((labels == cls) & (float_pred == cls)):
            path = SAMPLES_DIR / f"{name}_{int(indices[i]):04d}.png"
            Image.fromarray(render(images[i])).save(path, optimize=True)
            if int(net.run_image(path)["probs"].argmax()) == cls:
                break
            path.unlink()
        else:
            raise SystemExit(f"no held-out {name} classifies correctly")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compile-only", action="store_true",
                    help="recompile the shipped digits.onnx to digits.bin (no training)")
    args = ap.parse_args(argv)
    if args.compile_only:
        net = compile_net()
        print(f"wrote {NET_PATH.name} ({NET_PATH.stat().st_size} bytes, compiled in "
              f"{net.meta['stats']['compile_s']} s)")
        check_shipped()
        return 0

    import dvsdk

    t0 = time.perf_counter()
    rng = np.random.default_rng(SEED)
    tr_img, tr_y, te_img, te_y, te_idx = load_split()
    tr, te = views(tr_img), views(te_img)
    x = np.concatenate([tr["png32"], tr["crisp16"]])
    y = np.concatenate([tr_y, tr_y])
    print(f"training on {len(tr_y)} digits x 2 views, holding out {len(te_y)}")
    from threadpoolctl import threadpool_limits  # a scikit-learn dependency

    with threadpool_limits(1):   # small matrices: one BLAS thread is faster and repeatable
        p = train(x, y, rng)
    t_train = time.perf_counter() - t0
    float_acc = {k: float((predict(p, v) == te_y).mean()) for k, v in te.items()}
    print(f"trained in {t_train:.1f} s; held-out accuracy (float32): "
          + ", ".join(f"{k} {a:.2%}" for k, a in float_acc.items()))

    export_onnx(p)
    err = check_onnxruntime(p, te["png32"])
    print(f"wrote {ONNX_PATH.name}; onnxruntime matches numpy (max error {err:.2g})")
    LABELS_PATH.write_text("".join(f"{name}\n" for name in LABELS))
    np.savez_compressed(HELDOUT_PATH, images=te_img, labels=te_y.astype(np.uint8),
                        indices=te_idx.astype(np.int16))
    net_file = compile_net()
    print(f"wrote {NET_PATH.name} ({NET_PATH.stat().st_size} bytes)")
    with dvsdk.load(NET_PATH, "sim://") as net:
        write_samples(net, te_img, te_y, te_idx, predict(p, te["png32"]))
    del net_file
    check_shipped()
    return 0


if __name__ == "__main__":
    sys.exit(main())
