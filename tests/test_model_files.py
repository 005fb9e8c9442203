"""Model files that asked for impossible things (issue 25, items 10 and 11).

Each bad number in a model (a stride of 0, a negative split, a 2^31-element input, a Range
to 1e12, a million-image batch, opset 0 or 99, a negative declared dimension, a 50 MiB XML
attribute) is a typed :class:`~dvsdk.errors.ModelError` naming the field, the value and the
limit, never a raw ZeroDivisionError, ValueError or MemoryError; and a free batch written as
-1 (PaddleOCR's exports) is a free dimension again, as onnxruntime and OpenVINO take it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.compiler.frontends import load
from dvsdk.errors import ModelError, UnsupportedOps

from .conftest import DATA

F = TensorProto.FLOAT
OV = DATA / "openvino"
KERAS = DATA / "keras"


def model(nodes, inputs, inits=None, opset=13, outputs=("y",)):
    ins = [helper.make_tensor_value_info(n, F, s) for n, s in inputs]
    outs = [helper.make_tensor_value_info(o, F, None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "m", ins, outs, init)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def refused(m, match: str, **options) -> ModelError:
    with pytest.raises(ModelError, match=match) as e:
        dvsdk.compile(m.SerializeToString(), **options)
    assert not isinstance(e.value, UnsupportedOps)
    return e.value


W = {"w": np.ones((4, 3, 3, 3), np.float32)}


# --------------------------------------------------------------------------- ONNX windows
@pytest.mark.parametrize("attr, value", [("strides", [0, 0]), ("strides", [1, -1]),
                                         ("dilations", [0, 1]), ("pads", [-1, 0, 0, 0]),
                                         ("kernel_shape", [0, 3])])
def test_conv_window_out_of_range_names_the_attribute(attr, value):
    """strides 0 was a ZeroDivisionError from the shape rule."""
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], name="c", **{attr: value})],
              [("x", [1, 3, 8, 8])], W)
    e = refused(m, f"{attr} out of range")
    assert e.field == f"Conv c.{attr}" and e.value == value


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pool_stride_zero(op):
    m = model([helper.make_node(op, ["x"], ["y"], name="p", kernel_shape=[2, 2],
                                strides=[0, 2])], [("x", [1, 3, 8, 8])])
    assert refused(m, "strides out of range").field == f"{op} p.strides"


def test_conv_transpose_stride_zero():
    m = model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="t", strides=[0, 0])],
              [("x", [1, 4, 8, 8])], W)
    assert refused(m, "strides out of range").field == "ConvTranspose t.strides"


def test_split_with_negative_sizes():
    """[6, -2] sums to 4 and used to pass, ending in a reshape ValueError."""
    m = model([helper.make_node("Split", ["x", "s"], ["a", "b"], name="sp", axis=1)],
              [("x", [1, 4, 8, 8])], {"s": np.array([6, -2], np.int64)}, outputs=("a", "b"))
    e = refused(m, "Split sizes must not be negative")
    assert e.field == "Split sp.split" and e.value == [6, -2] and e.limit == ">= 0"


# --------------------------------------------------------------------------- ONNX sizes
@pytest.mark.parametrize("shape", [[1, 1, 1 << 16, 1 << 15], [1, 1 << 31], [1 << 20, 3, 224, 224]])
def test_inputs_beyond_the_tensor_limit(shape):
    """A 2^31-element input and a batch of a million 224x224 images were raw MemoryErrors
    (the golden pair's random input)."""
    from dvsdk.compiler.limits import MAX_TENSOR_BYTES

    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", shape)])
    e = refused(m, "more than a compiled program may hold")
    assert e.field == "input x" and e.value == tuple(shape)
    assert str(MAX_TENSOR_BYTES) in str(e.limit).replace(",", "")


@pytest.mark.parametrize("dtype, limit", [(np.int64, 10**12), (np.float32, 1e12)])
def test_range_up_to_1e12(dtype, limit):
    """Range's shape rule materialized the range: a 7 TiB MemoryError."""
    m = model([helper.make_node("Range", ["s", "l", "d"], ["r"], name="rg"),
               helper.make_node("Add", ["x", "r"], ["y"])], [("x", [1])],
              {"s": np.array(0, dtype), "l": np.array(limit, dtype), "d": np.array(1, dtype)})
    e = refused(m, "tensor 'r' would need")
    assert e.field == "Range rg" and e.value[0] >= 10**11


def test_range_with_step_zero():
    m = model([helper.make_node("Range", ["s", "l", "d"], ["r"], name="rg"),
               helper.make_node("Add", ["x", "r"], ["y"])], [("x", [1])],
              {"s": np.array(0, np.int64), "l": np.array(5, np.int64),
               "d": np.array(0, np.int64)})
    assert refused(m, "Range step is 0").field == "Range rg.delta"


def test_intermediate_tensor_beyond_the_limit():
    """A small input made huge by an op (Tile) is refused at that op, before any array."""
    m = model([helper.make_node("Tile", ["x", "r"], ["y"], name="big")], [("x", [1, 3, 8, 8])],
              {"r": np.array([100000, 1, 100, 100], np.int64)})
    e = refused(m, "tensor 'y' would need")
    assert e.field == "Tile big" and e.value == (100000, 3, 800, 800)


def test_a_large_batch_within_the_limit_compiles():
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", [4096, 3, 8, 8])], W)
    net = dvsdk.compile(m.SerializeToString(), golden=False)
    assert net.meta["inputs"][0]["shape"] == [4096, 3, 8, 8]


# --------------------------------------------------------------------------- ONNX opsets
@pytest.mark.parametrize("opset", [0, 99])
def test_opset_outside_the_known_range_is_refused(opset):
    """Both compiled silently."""
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 3, 4, 4])], opset=opset)
    e = refused(m, f"opset {opset} is not an ONNX opset")
    newest = onnx.defs.onnx_opset_version()
    assert e.field == "opset_import" and e.value == opset and e.limit == f"1..{newest}"


def test_the_cli_names_the_opset_in_one_line(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 3, 4, 4])], opset=99)
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    r = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile", str(path)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "opset 99" in r.stderr
    assert not (tmp_path / "m.bin").exists()


# --------------------------------------------------------------------------- batch -1 (item 11)
def paddle_cls_model(batch: int | str = -1) -> onnx.ModelProto:
    """The shape of PP-OCR's text-direction classifier: (batch, 3, 48, 192) in, 2 classes
    out, its batch dimension stored as dim_value -1 (as paddle2onnx writes it)."""
    rng = np.random.default_rng(11)
    inits = {"w1": rng.normal(0, 0.3, (8, 3, 3, 3)).astype(np.float32),
             "b1": rng.normal(0, 0.1, 8).astype(np.float32),
             "fc": rng.normal(0, 0.3, (8, 2)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], strides=[2, 2], pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["l"]),
             helper.make_node("Softmax", ["l"], ["y"], axis=1)]
    return model(nodes, [("x", [batch, 3, 48, 192])], inits)


def test_batch_minus_one_is_a_free_batch(sim):
    """Compiled at 4eae059; refused as "a negative dimension" since 7f52c77."""
    m = paddle_cls_model()
    assert m.graph.input[0].type.tensor_type.shape.dim[0].dim_value == -1
    net = dvsdk.compile(m.SerializeToString())
    assert net.meta["inputs"][0]["shape"] == [1, 3, 48, 192]
    x = np.random.default_rng(0).uniform(0, 1, (1, 3, 48, 192)).astype(np.float32)
    ort = pytest.importorskip("onnxruntime")
    ref = ort.InferenceSession(m.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with dvsdk.load(net, sim) as n:
        got = n.run(x)["y"]
    np.testing.assert_allclose(got, ref, atol=2e-3)


def test_negative_spatial_dimensions_come_from_input_size(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [-1, 3, -1, -1])])
    with pytest.raises(ModelError, match="free dimension '-1' at axis 2"):
        dvsdk.compile(m.SerializeToString(), golden=False)
    net = dvsdk.compile(m.SerializeToString(), golden=False, input_size=(5, 7))
    assert net.meta["inputs"][0]["shape"] == [1, 3, 5, 7]
    path = tmp_path / "m.onnx"
    path.write_bytes(m.SerializeToString())
    r = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile", str(path), "--input-size",
                        "6x4", "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_zero_dimension_is_still_refused():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [("x", [1, 0, 4])])
    refused(m, "zero-size dimension at axis 1")


# --------------------------------------------------------------------------- OpenVINO
@pytest.fixture
def digits_ir(tmp_path):
    for suffix in (".xml", ".bin"):
        shutil.copy(OV / f"digits_fp32{suffix}", tmp_path / f"d{suffix}")
    return tmp_path / "d.xml"


def edit(xml, old: str, new: str) -> None:
    text = xml.read_text()
    assert old in text, old
    xml.write_text(text.replace(old, new, 1))


PARAM = '<data shape="1,1,16,16" element_type="f32" />'


def test_openvino_negative_declared_dimension_is_refused(digits_ir):
    """The Parameter's declared shape (1, -3, 16, 16) was accepted."""
    pytest.importorskip("defusedxml")
    edit(digits_ir, PARAM, '<data shape="1,-3,16,16" element_type="f32" />')
    with pytest.raises(ModelError, match="negative dimension") as e:
        load(digits_ir)
    assert e.value.field == "Parameter image.shape" and e.value.value == -3


def test_openvino_declared_shape_must_agree_with_the_port(digits_ir):
    pytest.importorskip("defusedxml")
    edit(digits_ir, PARAM, '<data shape="1,1,16,15" element_type="f32" />')
    with pytest.raises(ModelError, match="disagrees with the output port"):
        load(digits_ir)


def test_openvino_legacy_pooling_stride_zero(tmp_path):
    """The legacy Pooling's output-size sum divided by the stride: a ZeroDivisionError."""
    pytest.importorskip("defusedxml")
    from .ov_legacy import Twin

    t = Twin("pool", (1, 3, 8, 8))
    t.pool("data", "p", "max", 2, 2)
    xml = tmp_path / "pool.xml"
    t.write(xml, ["p"])
    edit(xml, 'strides="2,2"', 'strides="0,2"')
    with pytest.raises(ModelError, match="strides out of range") as e:
        load(xml)
    assert e.value.field == "Pooling p.strides" and e.value.value == [0, 2]


@pytest.mark.parametrize("declared", ["-1,1,16,16", "?,1,16,16", "[?,1,16,16]"])
def test_openvino_dynamic_batch_declared_as_minus_one_or_question_mark(digits_ir, declared):
    pytest.importorskip("defusedxml")
    edit(digits_ir, PARAM, f'<data shape="{declared}" element_type="f32" />')
    assert load(digits_ir).shape("image") == (1, 1, 16, 16)


@pytest.mark.parametrize("mib", [16, 50])
def test_openvino_huge_attribute_is_refused_before_parsing(digits_ir, monkeypatch, mib):
    """16 MiB took 13.5 s to parse and 50 MiB never finished: expat re-scans a long token
    on every chunk.  Now one linear pass refuses the tag before the parser sees it."""
    pytest.importorskip("defusedxml")
    import defusedxml.ElementTree as SafeET

    edit(digits_ir, PARAM, PARAM.replace(" />", ' junk="' + "a" * (mib << 20) + '" />'))

    def never(*a, **k):
        raise AssertionError("the XML parser ran on an over-long tag")

    monkeypatch.setattr(SafeET, "fromstring", never)
    with pytest.raises(ModelError, match="an XML tag of the IR is too long") as e:
        load(digits_ir)
    assert e.value.field == f"{digits_ir} line 5"
    assert e.value.value.startswith("<data junk=...> of ") and str(mib << 20)[:2] in \
        e.value.value.replace(",", "")
    from dvsdk.compiler.frontends.openvino_ir import MAX_TAG_BYTES

    assert e.value.limit == f"{MAX_TAG_BYTES:,} bytes per tag"


def test_openvino_many_long_tags_under_the_limit_still_load(digits_ir):
    """The limit is per tag: 20 attributes just under it (20 MiB of XML) load."""
    pytest.importorskip("defusedxml")
    from dvsdk.compiler.frontends.openvino_ir import MAX_TAG_BYTES

    text = digits_ir.read_text()
    extra = "".join(f'<rt_info><attribute name="a{i}" value="{"x" * (MAX_TAG_BYTES - 100)}"/>'
                    f"</rt_info>" for i in range(20))
    digits_ir.write_text(text.replace("</net>", extra + "</net>"))
    assert load(digits_ir).inputs == ["image"]


def test_openvino_xml_size_is_bounded(digits_ir, monkeypatch):
    pytest.importorskip("defusedxml")
    from dvsdk.compiler.frontends import openvino_ir

    monkeypatch.setattr(openvino_ir, "MAX_XML_BYTES", 1000)
    with pytest.raises(ModelError, match="the IR XML is too large") as e:
        load(digits_ir)
    assert e.value.limit == "1,000 bytes"


# --------------------------------------------------------------------------- Keras 3
def test_keras3_arithmetic_on_a_tensor_is_not_a_merge_layer():
    """``x + 3.0`` was read as the merge layer Add: "needs at least two inputs"."""
    pytest.importorskip("h5py")
    net = dvsdk.compile(KERAS / "k3_ops.h5", golden=False)
    sources = {r["source"] for r in net.meta["report"]}
    assert {"ops.Add add", "ops.Subtract subtract", "ops.TrueDivide true_divide",
            "ops.Maximum maximum", "Add merge"} <= sources


def test_keras3_unknown_operation_is_refused_by_name(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / "m.h5"
    shutil.copy(KERAS / "k3_ops.h5", path)
    with h5py.File(path, "r+") as f:
        cfg = json.loads(f.attrs["model_config"])
        for ly in cfg["config"]["layers"]:
            if ly["name"] == "true_divide":
                ly["class_name"] = "Power"
        f.attrs["model_config"] = json.dumps(cfg)
    with pytest.raises(UnsupportedOps, match=r"ops\.Power \(true_divide\)"):
        dvsdk.compile(path, golden=False)
