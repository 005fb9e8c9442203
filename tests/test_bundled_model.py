"""The bundled digits model (examples/models/): fresh against the compiler, accurate on the
simulator, and every shipped sample classifies to the class in its file name.

The options and paths come from the script that trained and compiled the model,
``examples/models/train_digits.py`` (imported, not run: it needs scikit-learn only to train).
"""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from .conftest import ROOT

MODELS = ROOT / "examples" / "models"
REGENERATE = "python examples/models/train_digits.py --compile-only"
SAMPLES = sorted((MODELS / "samples").glob("*.png"))


def _load_script():
    spec = importlib.util.spec_from_file_location("train_digits", MODELS / "train_digits.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _load_script()


@pytest.fixture(scope="module")
def net(script):
    import dvsdk

    with dvsdk.load(script.NET_PATH, "sim://") as n:
        yield n


def _meta(meta: dict) -> dict:
    """META as stored (JSON), without the compile time."""
    m = json.loads(json.dumps(meta, sort_keys=True))
    m.get("stats", {}).pop("compile_s", None)
    return m


def _differing_keys(a: dict, b: dict, prefix: str = "") -> list[str]:
    out = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) == b.get(k):
            continue
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += _differing_keys(a[k], b[k], f"{prefix}{k}.")
        else:
            out.append(prefix + k)
    return out


def test_shipped_net_bin_is_fresh(script):
    """digits.bin is what the current compiler makes of digits.onnx with the script's
    options: CMDS, WGTS, CNST bytewise, META except stats.compile_s, and the golden pair."""
    from dvsdk import netfile

    shipped = netfile.read(script.NET_PATH)
    fresh = script.compile_net(None)
    stale = [tag for tag, a, b in (("CMDS", fresh.commands, shipped.commands),
                                   ("WGTS", fresh.weights, shipped.weights),
                                   ("CNST", fresh.constants, shipped.constants)) if a != b]
    meta_fresh, meta_shipped = _meta(fresh.meta), _meta(shipped.meta)
    if meta_fresh != meta_shipped:
        stale.append("META (" + ", ".join(_differing_keys(meta_fresh, meta_shipped)[:8]) + ")")
    elif fresh.golden != shipped.golden:
        # GOLD's reference outputs are float32 numpy results: the last bits depend on the
        # CPU's BLAS kernels, so they compare to a tolerance; the inputs are seeded, exact
        gold = shipped.meta["golden"]
        for kind in ("inputs", "outputs"):
            for name, entry in gold[kind].items():
                a = fresh.array(fresh.meta["golden"][kind][name], "GOLD")
                b = shipped.array(entry, "GOLD")
                same = np.array_equal(a, b) if kind == "inputs" else \
                    np.allclose(a, b, rtol=1e-5, atol=1e-6)
                if not same:
                    stale.append(f"GOLD ({kind} {name})")
    assert not stale, (
        f"examples/models/digits.bin is stale against the compiler: {', '.join(stale)} "
        f"differ from a fresh compile of digits.onnx. Regenerate it with `{REGENERATE}` "
        "and commit the new digits.bin.")


def test_labels(script, net):
    lines = (MODELS / "digits_labels.txt").read_text().split()
    assert net.labels == lines == list(script.LABELS)


def test_samples_are_shipped(net):
    classes = {p.stem.split("_")[0] for p in SAMPLES}
    assert len(SAMPLES) >= 6 and classes <= set(net.labels), [p.name for p in SAMPLES]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_sample_classifies_to_its_name(net, path):
    (probs,) = net.run_image(path).values()
    probs = probs.reshape(-1)
    assert net.labels[int(probs.argmax())] == path.stem.split("_")[0], \
        dict(zip(net.labels, np.round(probs, 3).tolist()))
    assert probs.sum() == pytest.approx(1.0, abs=1e-2)   # the CPU Softmax ran


def test_selftest(net):
    result = net.selftest()
    assert result["passed"], result


def test_held_out_accuracy_on_the_simulator(script, net):
    """The held-out digits (never trained on), drawn as the samples are and run through
    run_image: preprocessing, the DV700 on sim://, Softmax on the CPU."""
    held = np.load(script.HELDOUT_PATH)
    images, labels = held["images"], held["labels"].astype(np.int64)
    assert len(labels) >= 50 and images.shape[1:] == (8, 8)
    pred = script.sim_predict(net, images)
    accuracy = float((pred == labels).mean())
    assert accuracy >= 0.95, f"held-out accuracy on sim:// {accuracy:.2%}"

    # and the hardware path agrees with onnxruntime on the float32 ONNX model
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(script.ONNX_PATH), so, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    ref = np.array([int(sess.run(None, {name: script.to_input(script.render(d))})[0].argmax())
                    for d in images])
    assert float((pred == ref).mean()) >= 0.99, "sim:// and onnxruntime disagree"


def test_artefacts_stay_small():
    files = [p for p in MODELS.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
             and p.name != "README.md"]
    total = sum(p.stat().st_size for p in files)
    assert total < 200 * 1024, {p.name: p.stat().st_size for p in files}
