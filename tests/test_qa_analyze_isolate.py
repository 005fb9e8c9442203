"""dvsdk analyze --isolate, the per-layer contribution and the --plot (issue 29 item 1).

References are independent of the device path: onnxruntime on single-layer models built
here, plain numpy for the tail of the digits model, matplotlib's own objects for the
figure (its texts, bars and lines, not pixels)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.qa.analyze import LayerError, analyze, worst
from dvsdk.qa.contrib import Reference

from .conftest import ROOT
from .test_qa_analyze import chain

MODELS = ROOT / "examples" / "models"


def _ort(model: onnx.ModelProto, feeds: dict, outputs: list[str] | None = None) -> list:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in outputs or []:
        if name not in have:
            m.graph.output.append(helper.make_empty_tensor_value_info(name))
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(outputs, feeds)


def _one_conv(model: onnx.ModelProto, index: int) -> onnx.ModelProto:
    """The ``index``-th Conv of ``model`` (with the Relu after it, if any) as a model."""
    g = model.graph
    convs = [i for i, n in enumerate(g.node) if n.op_type == "Conv"]
    nodes = [g.node[convs[index]]]
    nxt = g.node[convs[index] + 1] if convs[index] + 1 < len(g.node) else None
    if nxt is not None and nxt.op_type == "Relu":
        nodes.append(nxt)
    used = {i for n in nodes for i in n.input}
    inits = [t for t in g.initializer if t.name in used]
    graph = helper.make_graph(
        nodes, "one", [helper.make_tensor_value_info(nodes[0].input[0], TensorProto.FLOAT,
                                                     None)],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=model.opset_import)


@pytest.mark.parametrize("transpose", [False, True], ids=["plain", "transposed"])
def test_isolation_feeds_each_command_the_reference_input(transpose):
    """Net with conv #1 damaged, reference the good model: fed the good model's tensors,
    the damaged command's output is onnxruntime's damaged conv on the good model's input
    (to FP16 precision), and the commands after it show FP16 error only (without
    isolation they carry the damage)."""
    good, bad = chain(), chain(perturb=0.3)
    net = dvsdk.compile(bad.SerializeToString(), golden=False, chain=False,
                        transpose=transpose)
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    with dvsdk.load(net) as n:
        rows = analyze(n, good.SerializeToString(), x, isolate=True)
        carried = analyze(n, good.SerializeToString(), x, contribution=False)
    convs = [r for r in rows if r.where == "hw"]
    assert len(convs) == 4
    # independent: the good model's input of conv #1, through the damaged conv alone
    x1, y1 = convs[1].inputs[0], convs[1].tensor
    ref_in, ref_out = _ort(good, {"x": x}, [x1, y1])
    damaged = _ort(_one_conv(bad, 1), {x1: ref_in})[0]
    expect = float(np.abs(damaged - ref_out).max())
    assert convs[1].max_abs == pytest.approx(expect, rel=0.02)
    assert convs[1].rel > 0.05 and convs[1].own == convs[1].rel
    for r in (convs[0], convs[2], convs[3]):
        assert r.rel < 5e-3 and r.cosine > 0.9999, r
    assert [r.rel > 0.05 for r in carried if r.where == "hw"] == [False, True, True, True]
    assert worst(rows, 1)[0].tensor == y1


def test_contribution_is_the_output_error_with_that_layer_alone_damaged():
    """Only conv #1 differs between the net and the reference, so its contribution is the
    final output error of the damaged model in onnxruntime; the others' are FP16-sized."""
    good, bad = chain(), chain(perturb=0.3)
    net = dvsdk.compile(bad.SerializeToString(), golden=False, chain=False)
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    with dvsdk.load(net) as n:
        rows = analyze(n, good.SerializeToString(), x)
    y_good, y_bad = _ort(good, {"x": x})[0], _ort(bad, {"x": x})[0]
    truth = float(np.abs(y_bad - y_good).max() / np.ptp(y_good))
    convs = [r for r in rows if r.where == "hw"]
    assert convs[1].contribution == pytest.approx(truth, rel=0.05)
    assert all(r.contribution < truth / 10 for r in rows if r is not convs[1])
    assert worst(rows, 1)[0] is convs[1]


@pytest.mark.parametrize("fmt, model, cut", [
    ("onnx", MODELS / "digits.onnx", "pool2"),
    ("nnef", ROOT / "tests" / "data" / "nnef" / "digits.nnef", "max_pool2"),
])
def test_reference_reruns_only_the_tail_with_one_tensor_replaced(fmt, model, cut):
    """onnxruntime's sub-graph (ONNX) and the interpreter (NNEF) against plain numpy:
    flatten, the digits model's fully connected layer, softmax."""
    x = np.random.default_rng(4).uniform(0, 1, (1, 1, 16, 16)).astype(np.float32)
    feeds = {("image" if fmt == "onnx" else "input"): x}
    ref = Reference(model, feeds if fmt == "onnx" else _nnef_feeds(model, x))
    v = ref.values[cut]
    damaged = v + np.random.default_rng(5).normal(0, 2 * np.ptp(v), v.shape)
    inits = {t.name: numpy_helper.to_array(t)
             for t in onnx.load(MODELS / "digits.onnx").graph.initializer}

    def tail(t):
        z = t.reshape(1, -1).astype(np.float64) @ inits["fc.weight"].T + inits["fc.bias"]
        e = np.exp(z - z.max())
        return e / e.sum()

    p0, p1 = tail(v), tail(damaged)
    expect = float(np.abs(p1 - p0).max() / np.ptp(p0))
    assert expect > 1e-3
    assert ref.contribution(cut, damaged) == pytest.approx(expect, rel=1e-4)
    assert ref.contribution(cut, v) == pytest.approx(0.0, abs=1e-6)


def _nnef_feeds(model, x):
    from dvsdk.compiler.frontends import load

    return {load(model, "nnef").inputs[0]: x}


# -- the CLI and the figure -----------------------------------------------------------------

def test_cli_isolate_json_ranks_by_contribution(tmp_path, capsys):
    from dvsdk.cli.main import run

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.bin"
    good.write_bytes(chain().SerializeToString())
    dvsdk.compile(chain(perturb=0.3).SerializeToString(), bad, golden=False, chain=False)
    assert run(["analyze", str(bad), "--reference", str(good), "--isolate", "--json",
                "--top", "2"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_contrib = sorted(doc, key=lambda r: -r["contribution"])
    assert {r["index"] for r in doc if r["worst"]} == {r["index"] for r in by_contrib[:2]}
    hw = [r for r in doc if r["where"] == "hw"]
    assert hw[1]["worst"] and [r["rel"] > 0.05 for r in hw] == [False, True, False, False]
    assert run(["analyze", str(bad), "--reference", str(good), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "contrib" in out and "tensors compared" in out
    assert hw[1]["tensor"] in [ln for ln in out.splitlines() if "<- worst" in ln][0]


@pytest.mark.parametrize("argv, field", [(["--tolerance", "0"], "tolerance"),
                                         (["--tolerance", "nan"], "tolerance"),
                                         (["--plot-layers", "0"], "plot")])
def test_cli_bad_plot_options_are_one_line(argv, field, capsys):
    from dvsdk.cli.main import run

    code = run(["analyze", str(MODELS / "digits.bin"), "--reference",
                str(MODELS / "digits.onnx"), *argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and field in err.replace("_", "-")


def _rows(n: int) -> list[LayerError]:
    rng = np.random.default_rng(6)
    contrib = rng.uniform(0, 0.03, n)
    return [LayerError(i, f"block{i // 3}/expand_conv{i}/Relu6:0", "hw" if i % 7 else "cpu",
                       "depthwise conv 5x5 +relu6", [f"op{i}"], i, (1, 8, 4, 4), 0.1, 0.01,
                       0.99, 6.0, [], 0.0, 0.01, float(contrib[i])) for i in range(n)]


def test_plot_is_readable_at_60_layers(tmp_path):
    pytest.importorskip("matplotlib")
    from dvsdk.qa.plots import error_figure, error_plot

    rows = _rows(60)
    bad = {r.index for r in worst(rows, 5)}
    fig = error_figure(rows, bad, tolerance=0.01, top=40)
    ax = fig.axes[0]
    assert "contribution" in ax.get_title() and "40 of 60" in ax.get_title()
    assert "output error" in ax.get_xlabel() and "layer" in ax.get_ylabel()
    # one bar per shown layer, largest first (the y axis is inverted: top row = y 0)
    bars = sorted(ax.patches, key=lambda p: p.get_y())
    widths = [b.get_width() for b in bars]
    expect = sorted((r.contribution for r in rows), reverse=True)[:40]
    assert np.allclose(widths, expect)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == 40 and len(set(labels)) == 40
    order = sorted(rows, key=lambda r: -r.contribution)[:40]
    assert [int(lab.lstrip("* ").split()[0][1:]) for lab in labels] == [r.index for r in order]
    assert all(lab.startswith("* ") == (r.index in bad) for lab, r in zip(labels, order))
    tol = [ln for ln in ax.get_lines() if list(ln.get_xdata()) == [0.01, 0.01]]
    assert len(tol) == 1 and tol[0].get_linestyle() == "--"
    assert any("tolerance" in t.get_text() for t in ax.get_legend().get_texts())
    # distinct labels do not overlap each other and stay inside the figure
    fig.canvas.draw()
    boxes = sorted((t.get_window_extent() for t in ax.get_yticklabels()), key=lambda b: b.y0)
    assert all(a.y1 <= b.y0 + 0.5 for a, b in zip(boxes, boxes[1:]))
    assert min(b.x0 for b in boxes) >= 0
    import matplotlib.pyplot as plt

    plt.close(fig)
    png = tmp_path / "err.png"
    error_plot(rows, bad, png, tolerance=0.01, top=40)
    from PIL import Image

    with Image.open(png) as im:
        assert im.format == "PNG" and im.size[1] > 40 * 20   # a row of >= 20 px per layer


def test_cli_no_contribution_ranks_by_added(tmp_path, capsys):
    from dvsdk.cli.main import run

    good, bad = tmp_path / "good.onnx", tmp_path / "bad.bin"
    good.write_bytes(chain().SerializeToString())
    dvsdk.compile(chain(perturb=0.3).SerializeToString(), bad, golden=False, chain=False)
    assert run(["analyze", str(bad), "--reference", str(good), "--no-contribution",
                "--json", "--top", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert all(r["contribution"] is None and r["own"] is None for r in doc)
    hw = [r for r in doc if r["where"] == "hw"]
    assert [r["worst"] for r in hw] == [False, True, False, False]   # the largest 'added'
    assert max(doc, key=lambda r: r["added"])["index"] == hw[1]["index"]
