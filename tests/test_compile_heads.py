"""Output heads in cheaper shapes (dvsdk.compiler.heads): the same bits, less device work.

Each case is compiled with the default passes and with the head passes left out, run on
sim://, and must give identical outputs bit for bit; onnxruntime checks the result is
still the model's.
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk.compiler.build import Options, compile, compile_graph
from dvsdk.compiler.fold import infer_and_fold
from dvsdk.compiler.frontends import load
from dvsdk.compiler.heads import HEAD_PASSES
from dvsdk.compiler.simplify import PASSES, optimize
from dvsdk.runtime.net import Net

from .compile_harness import SIM, ort_reference
from .onnx_models import NetBuilder


def _without_heads(model):
    g = optimize(infer_and_fold(load(model.SerializeToString(), None, None)),
                 passes=[p for p in PASSES if p not in HEAD_PASSES])
    return compile_graph(g, Options(golden=False))


def _run(net, x):
    with Net(net, SIM) as dev:
        out = dev.run(x)
    return {k: np.asarray(v, np.float32) for k, v in out.items()}


def _check(model, x):
    """(with the head passes, without): same bits, and onnxruntime's answer."""
    on, off = compile(model, golden=False), _without_heads(model)
    a, b = _run(on, x), _run(off, x)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].shape == b[k].shape and np.array_equal(a[k].view(np.uint32),
                                                           b[k].view(np.uint32)), k
    refs = ort_reference(model, {"x": x})
    for spec, ref in zip(on.meta["outputs"], refs):
        y = a[spec["name"]]
        assert y.shape == ref.shape
        assert np.abs(y - ref).max() <= 1e-3 + 1e-2 * np.ptp(ref)
    return on, off


def _x(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _kinds(net) -> list[str]:
    return [r for s in net.meta["program"] if s["kind"] == "hw" for r in s["runs"]]


def _pnet_tail():
    """3x3 conv -> PReLU -> {1x1 conv -> Softmax, 1x1 conv}: MTCNN P-Net's heads."""
    b = NetBuilder(3)
    t = b.node("PRelu", [b.conv("x", 8, 32, p=0),
                         b.const(np.full((32, 1, 1), 0.25, np.float32), "slope")])
    prob = b.node("Softmax", [b.conv(t, 32, 2, 1)], axis=1)
    return b.model([("x", (1, 8, 14, 18))], [prob, b.conv(t, 32, 4, 1)], "pnet")


def test_sibling_heads_read_their_input_once_and_chain():
    on, off = _check(_pnet_tail(), _x((1, 8, 14, 18)))
    assert len(_kinds(off)) == 3 and not any(k.startswith("chain") for k in _kinds(off))
    (kind,) = _kinds(on)  # the 3x3 conv and the merged heads: one command, UBUF hand-over
    assert kind.startswith("chain [conv 3x3 +prelu -> conv 1x1")
    assert on.meta["stats"]["commands"] == 1


def test_heads_with_different_windows_or_device_tails_stay_apart():
    b = NetBuilder(4)
    t = b.conv("x", 8, 16)
    outs = [b.conv(t, 16, 4, 1), b.conv(t, 16, 4, 3),            # another window
            b.node("Relu", [b.conv(t, 16, 4, 1)])]               # a tail the DV700 fuses
    model = b.model([("x", (1, 8, 8, 8))], outs, "apart")
    on, off = _check(model, _x((1, 8, 8, 8), 1))
    assert _kinds(on) == _kinds(off)


def _dbnet_head(last_act: str | None = "Sigmoid", k: int = 2, s: int = 2, scale: float = 0.2,
                after: bool = False):
    b = NetBuilder(6)
    t = b.node("Relu", [b.conv("x", 8, 16)])
    w = (np.random.default_rng(7).standard_normal((16, 1, k, k)) * scale).astype(np.float32)
    y = b.node("ConvTranspose", [t, b.const(w, "W"), b.const(np.float32([0.1]), "B")],
               kernel_shape=[k, k], strides=[s, s])
    if last_act:
        y = b.node(last_act, [y])
    if after:  # the result goes on to a DV700 conv: no DepthToSpace on the device
        y = b.conv(y, 1, 4)
    return b.model([("x", (1, 8, 12, 20))], [y], "head")


@pytest.mark.parametrize("act", ["Sigmoid", "Relu", None])
def test_kernel_equals_stride_deconv_becomes_a_1x1_conv(act):
    on, off = _check(_dbnet_head(act), _x((1, 8, 12, 20), 2))
    assert any("deconv 2x2" in k for k in _kinds(off))
    assert not any("deconv" in k for k in _kinds(on))
    assert any("conv 1x1" in k for k in _kinds(on))
    steps = [s["op"] for s in on.meta["program"] if s["kind"] == "cpu"]
    assert steps == ["DepthToSpace"]


@pytest.mark.parametrize("case", [dict(k=3, s=2), dict(after=True), dict(scale=1e6)])
def test_other_deconvs_stay(case):
    """A window larger than the stride (taps overlap), a result the device reads on, and
    weights beyond FP16 (an inf times an inserted zero is NaN in the deconv, not in a 1x1
    conv) keep the deconv."""
    model = _dbnet_head(**case)
    on, off = compile(model, golden=False), _without_heads(model)
    assert _kinds(on) == _kinds(off)
    assert not any(s["kind"] == "cpu" and s["op"] == "DepthToSpace"
                   for s in on.meta["program"])


def test_dbnet_like_network_same_bits():
    from .realistic_nets import NETWORKS, input_of

    build, _ = NETWORKS["dbnet"]
    model = build(64)
    x = input_of("dbnet")[:, :, :64, :64]
    on, off = compile(model, golden=False), _without_heads(model)
    a, b = _run(on, x), _run(off, x)
    assert all(np.array_equal(a[k].view(np.uint32), b[k].view(np.uint32)) for k in a)
    assert sum(k.count("deconv") for k in _kinds(off)) == 2
    # the last one's map leaves the device (a 1x1 conv); the first runs per output phase
    assert sum(k.count("deconv") for k in _kinds(on)) == 0
    assert sum(k.startswith("chain [conv 1x1 +relu -> conv 1x1 +sigmoid]")
               for k in _kinds(on)) == 4


def _two_deconvs(act1: str | None, act2: str | None, s1: int = 2, s2: int = 2):
    """x -> 3x3 conv -> ReLU -> ConvTranspose s1 x s1 / s1 (16 -> 6) [-> act1] ->
    ConvTranspose s2 x s2 / s2 (6 -> 3) [-> act2]: DBNet's probability head, widened."""
    b = NetBuilder(8)
    t = b.node("Relu", [b.conv("x", 8, 16)])
    g = np.random.default_rng(9)
    for cin, cout, s, act in ((16, 6, s1, act1), (6, 3, s2, act2)):
        w = (g.standard_normal((cin, cout, s, s)) * 0.3).astype(np.float32)
        t = b.node("ConvTranspose", [t, b.const(w, "W"),
                                     b.const(g.uniform(-0.2, 0.2, cout).astype(np.float32))],
                   kernel_shape=[s, s], strides=[s, s])
        if act:
            t = b.node(act, [t])
    return b.model([("x", (1, 8, 6, 10))], [t], "two_deconvs")


@pytest.mark.parametrize("acts,strides", [(("Relu", "Sigmoid"), (2, 2)),
                                          ((None, "Tanh"), (2, 2)),
                                          (("Relu", None), (3, 2)),
                                          (("Sigmoid", "Sigmoid"), (2, 3))])
def test_a_deconv_into_a_pixel_head_runs_per_output_phase(acts, strides):
    """Same bits as the deconvolution and onnxruntime's answer, with s1² chains of two 1x1
    convs on the input's pixels (the intermediate on chip) and no deconvolution."""
    on, off = _check(_two_deconvs(*acts, *strides), _x((1, 8, 6, 10), 3))
    assert sum("deconv" in k for k in _kinds(off)) == 1
    kinds = _kinds(on)
    assert not any("deconv" in k for k in kinds)
    assert sum(k.startswith("chain [conv 1x1") for k in kinds) == strides[0] ** 2
    steps = [s["op"] for s in on.meta["program"] if s["kind"] == "cpu"]
    assert "Transpose" in steps and "DepthToSpace" not in steps


def test_a_deconv_read_by_anything_else_stays():
    # the first deconv's result also leaves as an output: it keeps its deconvolution
    model = _two_deconvs("Relu", "Sigmoid")
    model.graph.output.append(type(model.graph.output[0])(name=model.graph.node[3].output[0]))
    on, off = compile(model, golden=False), _without_heads(model)
    # (the second still becomes a pixel head: its map leaves)
    assert [sum("deconv" in k for k in _kinds(n)) for n in (on, off)] == [1, 2]


def test_phases_of_same_type_activations_and_torch_style_names():
    """Relu after both deconvolutions, nodes named as torch.onnx.export names them
    (Relu_13, Relu_15): each phase's two Relus get distinct op names (they clashed)."""
    model = _two_deconvs("Relu", "Relu")
    for i, node in enumerate(model.graph.node):
        node.name = f"{node.op_type}_{11 + 2 * i}"
    on, _ = _check(model, _x((1, 8, 6, 10), 4))
    assert not any("deconv" in k for k in _kinds(on))


def test_quantize_skip_names_the_deconvolutions_their_phases_and_pixels_came_from():
    model = _two_deconvs("Relu", "Sigmoid")
    names = [n.name for n in model.graph.node if n.op_type == "ConvTranspose"]
    for name in names:   # each is a layer --quantize-skip may name, as before the passes
        net = compile(model, golden=False, quantize=True, quantize_skip=[name])
        kept = [r for r in net.meta["report"] if r.get("source") == f"ConvTranspose {name}"]
        assert kept and all(not r.get("quantized") for r in kept), (name, kept)
