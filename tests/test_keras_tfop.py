"""tf.keras ``TFOpLambda`` / ``SlicingOpLambda`` layers (TF functions on Keras tensors).

The models in ``tests/data/keras_tfop/`` were saved by TensorFlow 2.21 / tf_keras
(``tools/make_tfop_models.py``) with TensorFlow's own outputs beside them; TensorFlow is not
needed here.  The simulator must agree at the suite's FP16 tolerance (max-abs error <=
1e-3 + 1e-2 x the reference's range) and the float32 IR interpreter at float32 tolerance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.frontends import load
from dvsdk.compiler.frontends.keras_tfop import FUNCTIONS
from dvsdk.compiler.interpret import run_graph
from dvsdk.errors import ModelError, UnsupportedOps
from dvsdk.runtime.net import Net

h5py = pytest.importorskip("h5py")

DATA = Path(__file__).resolve().parent / "data" / "keras_tfop"
MODELS = sorted(p.stem for p in DATA.glob("tfop_*.h5"))
TOL_REL, TOL_ABS = 1e-2, 1e-3          # as tests/compile_harness.py


def ref(stem: str) -> tuple[np.ndarray, str, np.ndarray]:
    z = np.load(DATA / f"{stem}.npz")
    (out,) = [k for k in z.files if k.startswith("out:")]
    return z["in:image"], out[4:], z[out]


@pytest.fixture(scope="module")
def nets():
    return {stem: compile(DATA / f"{stem}.h5", golden=False) for stem in MODELS}


def test_the_files_hold_tfop_layers_of_every_covered_form():
    seen: set[str] = set()
    for stem in MODELS:
        with h5py.File(DATA / f"{stem}.h5", "r") as f:
            assert str(f.attrs["keras_version"]).startswith("2.")
            cfg = json.loads(f.attrs["model_config"])
        seen |= {ly["config"]["function"] for ly in cfg["config"]["layers"]
                 if ly["class_name"] in ("TFOpLambda", "SlicingOpLambda")}
    assert len(MODELS) == 4
    assert seen >= {"math.multiply", "__operators__.add", "math.subtract", "math.truediv",
                    "nn.relu6", "math.sigmoid", "math.add", "concat", "reshape",
                    "compat.v1.transpose", "math.reduce_mean", "__operators__.getitem",
                    "nn.relu", "nn.softmax"}, seen
    assert seen <= set(FUNCTIONS)


@pytest.mark.parametrize("stem", MODELS)
def test_simulator_agrees_with_tensorflow(stem, nets):
    x, name, r = ref(stem)
    with Net(nets[stem], "sim://") as n:
        y = np.concatenate([n.run({"image": x[i:i + 1]})[name] for i in range(len(x))])
    assert y.shape == r.shape
    err = float(np.abs(y.astype(np.float64) - r).max())
    assert err <= TOL_ABS + TOL_REL * float(r.max() - r.min()), (stem, err)


@pytest.mark.parametrize("stem", MODELS)
def test_float32_interpreter_agrees_with_tensorflow(stem):
    x, name, r = ref(stem)
    g = load(DATA / f"{stem}.h5")
    assert g.outputs == [name]
    for i in range(len(x)):
        y = run_graph(g, {"image": x[i:i + 1].transpose(0, 3, 1, 2)})[name]
        y = y.transpose(0, 2, 3, 1) if y.ndim == 4 else y
        np.testing.assert_allclose(y, r[i:i + 1], rtol=1e-4, atol=1e-4 * np.abs(r).max())


def _where(net) -> dict[str, set[tuple[str, str]]]:
    out: dict[str, set[tuple[str, str]]] = {}
    for rec in net.meta["report"]:
        out.setdefault(rec["source"], set()).add((rec["type"], rec["where"]))
    return out


def test_scalar_arithmetic_and_activations_run_on_the_dv700(nets):
    arith = _where(nets["tfop_arith"])
    # x / 255 - 0.5 before the first conv, 2x + 1 and relu6 after it: DV700 runs
    for src in ("TFOpLambda tf.math.truediv", "TFOpLambda tf.math.subtract",
                "TFOpLambda tf.nn.relu6"):
        assert all(w == "hw" for _, w in arith[src]), (src, arith[src])
    assert "Conv" in {t for s in arith for t, w in arith[s] if w == "hw"}
    # 2x + 1 after c1, -0.75 x + 0.25 and 1 - x after c2, x / 2 - 0.125 after c3: folded
    # into those convs' weights and biases (no op of theirs is left to place)
    for name in ("multiply", "__operators__.add", "multiply_1", "__operators__.add_1",
                 "subtract_1", "truediv_1", "subtract_2"):
        src = f"TFOpLambda tf.{name}" if name.startswith("__") else f"TFOpLambda tf.math.{name}"
        assert src not in arith, (src, arith.get(src))
    mobile = _where(nets["tfop_mobile"])
    assert all(w == "hw" for s, v in mobile.items() if "relu6" in s for _, w in v)
    assert ("GlobalAveragePool", "hw") in mobile["TFOpLambda tf.math.reduce_mean_2"]
    merge = _where(nets["tfop_merge"])
    assert merge["TFOpLambda tf.concat"] == {("Concat", "hw")}
    assert merge["TFOpLambda tf.math.add"] == {("Add", "hw")}
    shapes = _where(nets["tfop_shapes"])
    assert ("Slice", "cpu") in shapes["SlicingOpLambda tf.__operators__.getitem_1"]
    assert ("Transpose", "cpu") in shapes["TFOpLambda tf.compat.v1.transpose"]


def test_scalars_on_either_side_negative_and_int_constants():
    g = load(DATA / "tfop_arith.h5")
    by_origin = {op.origin: op for op in g.ops}
    rsub = by_origin["TFOpLambda tf.math.subtract_1"]   # 1.0 - y: the constant first
    assert rsub.type == "Sub" and g.const(rsub.inputs[0]) is not None
    assert float(g.const(rsub.inputs[0]).ravel()[0]) == 1.0
    rmul = by_origin["TFOpLambda tf.math.multiply"]     # 2.0 * y
    assert g.const(rmul.inputs[0]) is not None and float(g.const(rmul.inputs[0]).ravel()[0]) == 2.0
    neg = by_origin["TFOpLambda tf.math.multiply_1"]    # y * -0.75
    assert float(g.const(neg.inputs[1]).ravel()[0]) == -0.75
    add_int = by_origin["TFOpLambda tf.__operators__.add"]   # y + 1 (an int in the file)
    assert g.const(add_int.inputs[1]).dtype == np.float32


def _edit(tmp_path: Path, stem: str, fn) -> Path:
    p = tmp_path / f"{stem}.h5"
    shutil.copy(DATA / f"{stem}.h5", p)
    with h5py.File(p, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        fn({ly["name"]: ly for ly in cfg["config"]["layers"]})
        f.attrs["model_config"] = json.dumps(cfg)
    return p


def test_an_unsupported_function_is_refused_by_name(tmp_path):
    def bogus(layers):
        layers["tf.nn.relu6"]["config"]["function"] = "math.cumsum"
        layers["tf.math.sigmoid"]["config"]["function"] = "bogus.fn"
    p = _edit(tmp_path, "tfop_arith", bogus)
    with pytest.raises(UnsupportedOps) as e:
        load(p)
    text = str(e.value)
    for part in ("TFOpLambda[math.cumsum]", "tf.nn.relu6", "TFOpLambda[bogus.fn]",
                 "tf.math.sigmoid"):
        assert part in text, text


@pytest.mark.parametrize("edit, match", [
    (lambda ls: ls["tf.compat.v1.transpose"]["inbound_nodes"][0][3].update(perm=[1, 0, 2, 3]),
     "batch"),
    (lambda ls: ls["tf.reshape"]["inbound_nodes"][0][3].update(shape=[-1, 5, 64]),
     "target_shape"),
    (lambda ls: ls["tf.__operators__.getitem_1"]["inbound_nodes"][0][3].update(
        slice_spec=[{"start": 1, "stop": None, "step": None}]), "batch"),
    (lambda ls: ls["tf.__operators__.getitem_1"]["inbound_nodes"][0][3]["slice_spec"][3]
     .update(step=-1), "step"),
    (lambda ls: ls["tf.reshape"]["inbound_nodes"][0][3].update(bogus=1), "argument"),
    (lambda ls: ls["tf.reshape"]["inbound_nodes"][0].__setitem__(0, 5), "malformed"),
    (lambda ls: ls["tf.math.reduce_mean_1"]["inbound_nodes"][0][3].update(axis=[0]), "axis"),
])
def test_calls_the_mapping_cannot_honour_are_model_errors(tmp_path, edit, match):
    p = _edit(tmp_path, "tfop_shapes", edit)
    with pytest.raises(ModelError, match=match) as e:
        load(p)
    assert e.value.field


def test_a_constant_with_a_tensor_kwarg_and_bad_constants(tmp_path):
    def bad(layers):
        layers["tf.math.multiply"]["inbound_nodes"][0][2] = "x"
    with pytest.raises(ModelError, match="neither a tensor nor a number"):
        load(_edit(tmp_path, "tfop_arith", bad))
