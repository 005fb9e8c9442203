"""Channel groups (dvsdk.compiler.groups): a conv and the per-channel command after it (a
depthwise conv, a pool, an activation) whose intermediate does not fit the unified buffer
run one command per group of whole 8-channel chunks of the conv's output channels.

Known answers for the grouping and the weight subsets (packed from the model's own float
weights, not from the compiler's blob); whole blocks against the program without groups
(the same bits: every output channel has the same runs on the same inputs and weights) and
against onnxruntime; the predicted device time against the ungrouped program's."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
from dvsdk.compiler.build import compile
from dvsdk.compiler.groups import _groups, _subset
from dvsdk.driver.commands import ConvRun
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.runtime.net import Net

from .compile_harness import ort_reference
from .onnx_models import NetBuilder

SIM = "sim://"


def test_groups_are_whole_chunks_as_even_as_they_go():
    assert _groups(144, 3) == [(0, 48), (48, 96), (96, 144)]
    assert _groups(20, 2) == [(0, 8), (8, 20)]              # 3 chunks: 1 + 2
    assert _groups(16, 3) == [(0, 8), (8, 16)]              # fewer chunks than groups
    assert _groups(140, 2) == [(0, 72), (72, 140)]          # 18 chunks, the last of 4


@pytest.mark.parametrize("depthwise,prelu", [(False, False), (True, False), (False, True)])
def test_a_group_s_weights_are_the_model_s_for_its_channels(depthwise, prelu):
    rng = np.random.default_rng(1)
    m, c = 40, 24
    w = rng.standard_normal((m, 1 if depthwise else c, 3, 3)).astype(np.float16)
    b = rng.standard_normal(m).astype(np.float16)
    p = rng.standard_normal(m).astype(np.float16) if prelu else None
    run = ConvRun.make(m, conv="depthwise" if depthwise else "conv", kernel=3,
                       act="prelu" if prelu else "none")
    blob = pack_conv_weights(w.astype(np.float32), b.astype(np.float32),
                             None if p is None else p.astype(np.float32))
    sub_run, sub = _subset(run, blob, m if depthwise else c, 16, 40)
    assert sub_run.m == 24
    assert sub == pack_conv_weights(w[16:40].astype(np.float32), b[16:40].astype(np.float32),
                                    None if p is None else p[16:40].astype(np.float32))


def _block(size: int, cin: int, mid: int, k: int = 3, s: int = 1, tail: str = "dw",
           act: str = "relu6", seed: int = 1):
    """An inverted-residual block at ``size`` x ``size``: a 1x1 expand to ``mid`` channels,
    then a per-channel ``tail`` (a kxk/s depthwise conv, or an average pool: a max pool would
    fuse into the conv's run), a 1x1 projection."""
    b = NetBuilder(seed=seed)
    y = b.conv("x", cin, mid, k=1)
    if act == "relu6":
        y = b.relu6(y)
    elif act == "prelu":
        y = b.node("PRelu", [y, b.const(np.linspace(0.05, 0.3, mid, dtype=np.float32)
                                       .reshape(mid, 1, 1), "slope")])
    if tail == "dw":
        y = b.relu6(b.conv(y, mid, mid, k=k, s=s, group=mid))
    else:
        y = b.node("AveragePool", [y], kernel_shape=[2, 2], strides=[2, 2])
    y = b.conv(y, mid, cin, k=1)
    return b.model([("x", [1, cin, size, size])], [y], "block")


def _kinds(net) -> list[str]:
    return [k for s in net.meta["program"] if s["kind"] == "hw" for k in s["runs"]]


def _run(net, x):
    with Net(net, SIM) as n:
        y = n.run(x)
        return {k: np.asarray(v) for k, v in y.items()}, n.last_run.device_us


@pytest.mark.parametrize("mid,k,s,tail,act", [
    (144, 3, 1, "dw", "relu6"),     # EfficientNet-Lite0's 56x56 block
    (144, 5, 2, "dw", "relu6"),
    (140, 3, 1, "dw", "relu6"),     # a last group of 4 channels
    (96, 3, 1, "dw", "prelu"),      # PReLU slopes for the group's channels
    (144, 2, 2, "pool", "relu6"),   # a pool is per channel too
])
def test_grouped_block_gives_the_ungrouped_bits_faster(mid, k, s, tail, act):
    model = _block(56, 24, mid, k, s, tail, act)
    x = np.random.default_rng(mid + k).uniform(-1, 1, (1, 24, 56, 56)).astype(np.float32)
    grouped, plain = compile(model, golden=False), compile(model, golden=False, groups=False)
    assert any(k.startswith("group [") for k in _kinds(grouped)), _kinds(grouped)
    assert not any(k.startswith("group [") for k in _kinds(plain))
    (yg, us_g), (yp, us_p) = _run(grouped, x), _run(plain, x)
    for name in yp:
        assert yg[name].tobytes() == yp[name].tobytes(), name
    assert us_g < us_p
    ref = ort_reference(model, {"x": x})[0]
    got = next(iter(yg.values()))
    assert np.abs(got - ref).max() <= 0.02 * (np.abs(ref).max() + 1)


def test_grouped_net_loads_from_a_file(tmp_path):
    model = _block(56, 24, 144)
    x = np.random.default_rng(4).uniform(-1, 1, (1, 24, 56, 56)).astype(np.float32)
    path = tmp_path / "net.bin"
    compile(model, path, golden=False)
    with dvsdk.load(path, SIM) as net:
        y = {k: np.asarray(v) for k, v in net.run(x).items()}
    yp, _ = _run(compile(model, golden=False, groups=False), x)
    assert all(y[k].tobytes() == yp[k].tobytes() for k in yp)


def test_no_groups_where_they_cannot_be_or_would_not_pay():
    # everything fits the unified buffer whole: chained already, nothing to gain
    assert not any(k.startswith("group") for k in _kinds(compile(_block(14, 24, 144),
                                                                   golden=False)))
    # 8-bit weights keep their own tables: not split
    assert not any(k.startswith("group") for k in _kinds(
        compile(_block(56, 24, 144), golden=False, quantize=True)))
    # off with chaining (a command, and a tensor, per layer)
    assert not any(k.startswith("group") for k in _kinds(
        compile(_block(56, 24, 144), golden=False, chain=False)))


def test_the_expanded_tensor_with_a_second_reader_stays_whole():
    b = NetBuilder(seed=5)
    e = b.relu6(b.conv("x", 24, 144, k=1))
    d = b.relu6(b.conv(e, 144, 144, k=3, group=144))
    y = b.node("Add", [d, e])                 # the expanded tensor is read twice
    model = b.model([("x", [1, 24, 56, 56])], [y], "two_readers")
    net = compile(model, golden=False)
    assert not any(k.startswith("group") for k in _kinds(net))
    x = np.random.default_rng(6).uniform(-1, 1, (1, 24, 56, 56)).astype(np.float32)
    (got,) = _run(net, x)[0].values()
    ref = ort_reference(model, {"x": x})[0]
    assert np.abs(got - ref).max() <= 0.02 * (np.abs(ref).max() + 1)


def test_a_grouped_network_output_is_written_in_place():
    b = NetBuilder(seed=5)
    y = b.relu6(b.conv(b.relu6(b.conv("x", 24, 144, k=1)), 144, 144, k=3, group=144))
    model = b.model([("x", [1, 24, 56, 56])], [y], "out")
    x = np.random.default_rng(6).uniform(-1, 1, (1, 24, 56, 56)).astype(np.float32)
    grouped = compile(model, golden=False)
    assert sum(k.startswith("group [") for k in _kinds(grouped)) == 3
    (yg, us_g), (yp, us_p) = _run(grouped, x), _run(compile(model, golden=False,
                                                            groups=False), x)
    assert all(yg[k].tobytes() == yp[k].tobytes() for k in yp) and us_g < us_p


def test_a_batch_runs_its_groups_sample_by_sample():
    """§4.10 steps whole samples, and a group's channels of several samples are not one
    range: a batch's groups are batch-1 commands on each sample; each sample's own bits."""
    model = _block(56, 24, 144)
    x = np.random.default_rng(8).uniform(-1, 1, (2, 24, 56, 56)).astype(np.float32)
    net2, net1 = compile(model, golden=False, batch=2), compile(model, golden=False)
    groups1 = [k for k in _kinds(net1) if k.startswith("group [")]
    assert groups1 and [k for k in _kinds(net2) if k.startswith("group [")] == groups1 * 2
    (y2, us2), (y1a, us1) = _run(net2, x), _run(net1, x[:1])
    y1b, _ = _run(net1, x[1:])
    for k in y1a:
        assert y2[k][:1].tobytes() == y1a[k].tobytes() and y2[k][1:].tobytes() == \
            y1b[k].tobytes()
    assert us2 / 2 <= 1.05 * us1


def _named_block(batch: int, extra: str | None = None, xname: str = "x"):
    """An expand -> depthwise block whose model also has a tensor named ``extra`` (a 3x3
    conv of the input, a second output) or an input named ``xname``: names that read as
    the parts groups makes (``P#chA:B``, ``P@n``, :mod:`dvsdk.runtime.views`)."""
    from onnx import helper

    b = NetBuilder(seed=2)
    e = b.node("Relu", [b.node("Conv", [xname, b.const(
        np.random.default_rng(1).standard_normal((144, 24, 1, 1)).astype(np.float32) * .3)])])
    d = b.node("Relu", [b.node("Conv", [e, b.const(
        np.random.default_rng(2).standard_normal((144, 1, 3, 3)).astype(np.float32) * .3)],
        pads=[1, 1, 1, 1], group=144)])
    outs = [d]
    if extra:
        b.nodes.append(helper.make_node("Conv", [xname, b.const(
            np.random.default_rng(3).standard_normal((8, 24, 3, 3)).astype(np.float32))],
            [extra], pads=[1, 1, 1, 1]))
        outs.append(extra)
    return b.model([(xname, [batch, 24, 56, 56])], outs, "named"), d


@pytest.mark.parametrize("batch,extra,xname", [
    (1, "{d}#ch0:48", "x"), (2, "x@1", "x"), (2, None, "a#ch0:8"), (1, "{d}#ch0:144", "x")])
def test_model_names_that_read_as_parts_compile_to_the_same_bits(batch, extra, xname):
    """A model's tensor names are free text: one that is a part's name groups would make
    keeps its pair ungrouped (it compiled to a file its own check refused); an input whose
    name reads as a part still has its samples told apart (a review's cases)."""
    model, d = _named_block(batch, None, xname)
    if extra:
        model, d = _named_block(batch, extra.format(d=d), xname)
    x = np.random.default_rng(9).uniform(-1, 1, (batch, 24, 56, 56)).astype(np.float32)
    with Net(compile(model, golden=False), SIM) as n:
        got = {k: np.asarray(v) for k, v in n.run(x).items()}
    with Net(compile(model, golden=False, groups=False), SIM) as n:
        want = {k: np.asarray(v) for k, v in n.run(x).items()}
    assert all(got[k].tobytes() == want[k].tobytes() for k in want)


def test_analyze_isolates_a_group_of_a_batch():
    """dvsdk analyze --isolate feeds each command the reference's value of what it reads;
    a batch's group reads a sample of its input (``P@n``), the reference's P sliced."""
    from dvsdk.qa.analyze import Reference, device_tensors

    b = NetBuilder(seed=3)
    y = b.relu6(b.conv("x", 24, 24, k=3))
    d = b.relu6(b.conv(b.relu6(b.conv(y, 24, 144, k=1)), 144, 144, k=3, group=144))
    model = b.model([("x", [2, 24, 56, 56])], [b.node("Add", [b.conv(d, 144, 24, k=1), y])],
                    "iso")
    x = np.random.default_rng(2).uniform(-1, 1, (2, 24, 56, 56)).astype(np.float32)
    ref = dict(Reference(model, {"x": x}, None).values)
    ref[y] = np.zeros_like(ref[y])     # a value for the groups' input that must show
    net = compile(model, golden=False)
    assert any(k.startswith("group [") for k in _kinds(net))
    with Net(net, SIM) as n:
        carried = {t: v for t, *_, v in device_tensors(n, x)}
    with Net(net, SIM) as n:
        isolated = {t: v for t, *_, v in device_tensors(n, x, ref)}
    # relu6(dwconv(relu6(conv(0)))): from the biases, one value a channel inside the
    # padding's reach, not the carried values
    assert not np.array_equal(carried[d], isolated[d])
    for sample in np.asarray(isolated[d]):
        assert np.ptp(sample[:, 1:-1, 1:-1], axis=(1, 2)).max() == 0
