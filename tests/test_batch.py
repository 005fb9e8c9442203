"""Batch on the DV700 (issue 27 item 2): ``compile(model, batch=N)``, ``dvsdk-compile --batch
N`` and models with a fixed batch > 1 run their conv work as commands whose
``input_circular_offset`` is N (dv700-interface.md §4.10).

The references are independent of the code under test: N batch-1 runs of the same model on
sim:// (one arithmetic, firmware_spec/arithmetic.md: the batch-N outputs must be the same
bits, as §4.10 says the hardware's are), and onnxruntime on the batched ONNX model within the
project's FP16 tolerance (tests/compile_harness.py).  Device times are the simulator's
predictions (cycles at its clock), never wall-clock measurements.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import onnx
import pytest

from dvsdk.cli import compile as compile_cli
from dvsdk.cli import run as run_cli
from dvsdk.compiler.batch import BatchWarning
from dvsdk.compiler.build import compile
from dvsdk.errors import InvalidArgument, ModelError, NetFileError
from dvsdk.netfile import decode, encode
from dvsdk.runtime.net import Net
from dvsdk.runtime.records import verify

from .compile_harness import SIM, assert_matches, ort_reference
from .onnx_models import NetBuilder
from .realistic_nets import NETWORKS, calibration_image

#: byte offset of input_circular_offset in a conv_v0 record (§3.2)
ICO = 68


def batched(model: onnx.ModelProto, n: int) -> onnx.ModelProto:
    """``model`` with the leading dimension of every input and output set to ``n``."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in list(out.graph.input) + list(out.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if len(dims) >= 2:
            dims[0].dim_value = n
    return out


def feeds_of(model: onnx.ModelProto, n: int, seed: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {vi.name: rng.uniform(-1, 1, [n] + [d.dim_value for d in
                                                vi.type.tensor_type.shape.dim[1:]]
                                 ).astype(np.float32) for vi in model.graph.input}


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def check_against_batch_1(model: onnx.ModelProto, n: int, **options) -> tuple:
    """Compile ``model`` for 1 and for ``n`` samples; the batch-``n`` net's outputs must be
    the bits of ``n`` batch-1 runs and match onnxruntime on the batched model.  Returns
    (net 1, net n, outputs n)."""
    net1 = compile(model, golden=False, **options)
    netn = compile(model, golden=False, batch=n, **options)
    feeds = feeds_of(model, n)
    with Net(net1, SIM) as one:
        singles = [one.run({k: v[i:i + 1] for k, v in feeds.items()}) for i in range(n)]
    with Net(netn, SIM) as many:
        got = many.run(feeds)
    refs = ort_reference(batched(model, n), feeds)
    for spec, ref in zip(netn.meta["outputs"], refs):
        name = spec["name"]
        assert got[name].shape == ref.shape
        assert bits(got[name]) == bits(np.concatenate([s[name] for s in singles])), name
        assert_matches(got[name], ref, what=name)
    return net1, netn, got


def command_batches(net) -> list[int]:
    return [cmd.batch for cmd in verify(net)]


def placements(net) -> list[tuple[str, str]]:
    return [(r["type"], r["where"]) for r in net.meta["report"]]


# --------------------------------------------------------------------------- op families
def _conv_add_pool() -> onnx.ModelProto:
    b = NetBuilder(1)
    h = b.node("Relu", [b.conv("x", 8, 16)])
    h = b.node("Add", [h, b.conv(h, 16, 16)])          # element-wise add, per sample (§4.4)
    h = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    h = b.conv(h, 16, 16, k=3, group=16)                # depthwise
    return b.model([("x", (1, 8, 12, 10))], [b.node("Relu", [h])], "conv_add_pool")


def _deconv_upsample_avgpool() -> onnx.ModelProto:
    b = NetBuilder(2)
    h = b.conv("x", 8, 8, k=3)
    wt = b.const(np.random.default_rng(5).normal(0, 0.3, (8, 8, 2, 2)).astype(np.float32))
    h = b.node("ConvTranspose", [h, wt], kernel_shape=[2, 2], strides=[2, 2])
    h = b.node("Resize", [h, "", b.const(np.array([1, 1, 2, 2], np.float32))],
               mode="nearest", coordinate_transformation_mode="asymmetric",
               nearest_mode="floor")
    h = b.node("AveragePool", [h], kernel_shape=[3, 3], strides=[2, 2])
    return b.model([("x", (1, 8, 6, 5))], [h], "deconv_upsample_avgpool")


def _gap_fc() -> onnx.ModelProto:
    """A staged global average pool (16x16 > 7x7), a free view and an FC that reads a
    flattened conv output in place."""
    b = NetBuilder(3)
    h = b.node("Relu", [b.conv("x", 3, 16, s=1)])
    g = b.node("Flatten", [b.node("GlobalAveragePool", [h])])
    rng = np.random.default_rng(6)
    g = b.node("Gemm", [g, b.const(rng.normal(0, 0.3, (10, 16)).astype(np.float32)),
                        b.const(rng.normal(0, 0.1, 10).astype(np.float32))], transB=1)
    f = b.node("Flatten", [b.node("MaxPool", [h], kernel_shape=[4, 4], strides=[4, 4])])
    f = b.node("Gemm", [f, b.const(rng.normal(0, 0.1, (5, 256)).astype(np.float32))],
               transB=1)
    return b.model([("x", (1, 3, 16, 16))], [g, f], "gap_fc")


def _inception() -> onnx.ModelProto:
    """Branches that meet at a concat: one multi-run command (topo 0x5: each sample's
    output holds both branches, OUT_BYTES apart, §4.1, §4.10)."""
    b = NetBuilder(4)
    x = b.node("Relu", [b.conv("x", 8, 16, k=1)])
    left = b.node("Relu", [b.conv(x, 16, 8, k=1)])
    right = b.node("Relu", [b.conv(b.node("Relu", [b.conv(x, 16, 8, k=1)]), 8, 8)])
    return b.model([("x", (1, 8, 7, 9))], [b.node("Concat", [left, right], axis=1)],
                   "inception")


def _se_cpu_steps() -> onnx.ModelProto:
    """Squeeze-excitation: GAP -> 1x1 -> ReLU -> 1x1 chained through the unified buffer,
    HardSigmoid and the Mul by an (N, C, 1, 1) scale on the CPU (a per-sample channel
    operand), an Exp with no mapping between device segments, a HardSwish."""
    b = NetBuilder(5, opset=17)
    x = b.conv("x", 8, 24)
    s = b.node("GlobalAveragePool", [x])
    s = b.node("Relu", [b.conv(s, 24, 8, k=1)])
    s = b.node("HardSigmoid", [b.node("Exp", [b.conv(s, 8, 24, k=1)])], alpha=0.2, beta=0.1)
    y = b.node("HardSwish", [b.conv(b.node("Mul", [x, s]), 24, 16)])
    return b.model([("x", (1, 8, 9, 11))], [b.conv(y, 16, 8)], "se")


def _split_concat() -> onnx.ModelProto:
    """C2f's split and concat: zero-copy channel views at batch 1; a channel slice of N
    samples is not back to back, so at batch N > 1 they run on the CPU."""
    b = NetBuilder(6)
    y = b.conv("x", 8, 16, k=1)
    a, c = b.node("Split", [y, b.const(np.array([8, 8], np.int64))], n_out=2, axis=1)
    h = b.conv(c, 8, 8)
    return b.model([("x", (1, 8, 6, 6))], [b.conv(b.node("Concat", [a, c, h], axis=1), 24, 8,
                                                   k=1)], "split_concat")


FAMILIES = {"conv_add_pool": _conv_add_pool, "deconv_upsample_avgpool":
            _deconv_upsample_avgpool, "gap_fc": _gap_fc, "inception": _inception}


@pytest.mark.parametrize("n", [2, 5])
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_command_runs_the_batch_as_n_batch_1_runs_do(name, n):
    with warnings.catch_warnings():
        warnings.simplefilter("error", BatchWarning)   # nothing falls back to the CPU
        net1, netn, _ = check_against_batch_1(FAMILIES[name](), n)
    assert netn.meta["stats"]["cpu_ops"] == 0
    assert placements(netn) == placements(net1)
    assert command_batches(netn) == [n] * len(command_batches(net1))
    assert command_batches(net1) == [1] * len(command_batches(net1))


def test_the_concat_is_one_multi_run_command_per_batch():
    _, net, _ = check_against_batch_1(_inception(), 3)
    (step,) = [s for s in net.meta["program"] if s["kind"] == "hw"]
    assert any("multi-run topo 0x5" in kind for kind in step["runs"])
    assert command_batches(net) == [3, 3]


@pytest.mark.parametrize("cpu_steps", ["device", "unpack"])
def test_cpu_steps_between_segments_take_the_batch(cpu_steps, monkeypatch):
    monkeypatch.setenv("DVSDK_CPU_STEPS", cpu_steps)
    net1, net, _ = check_against_batch_1(_se_cpu_steps(), 3)
    assert placements(net) == placements(net1)
    cpu = sorted(r["type"] for r in net.meta["report"] if r["where"] == "cpu")
    assert cpu == ["Exp", "HardSigmoid", "HardSwish", "Mul"]
    assert any(k.startswith("chain [") for s in net.meta["program"] if s["kind"] == "hw"
               for k in s["runs"])
    assert set(command_batches(net)) == {3}


def test_split_and_concat_views_need_one_sample():
    with pytest.warns(BatchWarning) as caught:
        net1, net, _ = check_against_batch_1(_split_concat(), 2)
    (w,) = net.meta["warnings"]
    assert w["kind"] == "batch_on_cpu" and [str(c.message) for c in caught] == [w["message"]]
    assert w["message"].startswith("batch 2: 2 ops run on the CPU") and "Split" in w["message"]
    assert "warnings" not in net1.meta
    assert ("Split", "hw") in placements(net1) and ("Concat", "hw") in placements(net1)
    assert ("Split", "cpu") in placements(net) and ("Concat", "cpu") in placements(net)
    why = {r["type"]: r["detail"] for r in net.meta["report"]}
    assert "needs one sample" in why["Split"] and "needs one sample" in why["Concat"]
    assert set(command_batches(net)) == {2}


def test_a_model_with_a_fixed_batch_runs_it_on_the_device():
    model = batched(_conv_add_pool(), 3)
    net = compile(model, golden=False)
    assert net.meta["stats"]["cpu_ops"] == 0 and set(command_batches(net)) == {3}
    assert net.meta["inputs"][0]["shape"] == [3, 8, 12, 10]
    feeds = feeds_of(model, 3)
    with Net(net, SIM) as dev:
        got = dev.run(feeds)
    (ref,) = ort_reference(model, feeds)
    assert_matches(got[net.meta["outputs"][0]["name"]], ref)
    assert compile(model, golden=False, batch=3).commands == net.commands


def test_the_golden_pair_and_transposed_nets_hold_the_batch():
    model = _conv_add_pool()
    net = compile(model, batch=2)
    assert net.meta["golden"]["inputs"]
    with Net(net, SIM) as dev:
        assert dev.selftest()["passed"]
    check_against_batch_1(model, 2, transpose=True)


# --------------------------------------------------------------------------- the net of the issue
def test_efficientnet_lite0_batch_4_runs_on_the_dv700_at_most_1_05x_per_image():
    build, size = NETWORKS["efficientnet_lite0"]
    model = build(size)
    x = np.concatenate([calibration_image((size, size), 9 + i) for i in range(4)])
    net1 = compile(model, golden=False)
    net4 = compile(model, golden=False, batch=4)
    # on the device: batch commands, and per-sample commands for the stem on RGB in bands
    # and the expand-depthwise pairs in channel groups (dvsdk.compiler.bands, .groups: a
    # sample's strip or channels are one range, several samples' are not, §1, §4.10)
    assert net4.meta["stats"]["cpu_ops"] == 0 and set(command_batches(net4)) == {1, 4}
    with Net(net1, SIM) as one:
        singles = [one.run(x[i:i + 1]) for i in range(4)]
        t1 = one.last_run.device_us
    with Net(net4, SIM) as four:
        got = four.run(x)
        t4 = four.last_run.device_us
    (name,) = got
    assert bits(got[name]) == bits(np.concatenate([s[name] for s in singles]))
    (ref,) = ort_reference(batched(model, 4), {model.graph.input[0].name: x})
    err = float(np.abs(got[name] - ref).max())
    assert err <= 1e-3 + 2e-2 * float(np.ptp(ref))   # tests/test_realistic_nets.py's bound
    # predicted device time (cycles at the simulated clock), per image
    assert t4 / 4 <= 1.05 * t1, (t1, t4 / 4)
    # the plan grows linearly with the batch, the weights not at all; the commands only by
    # the banded and grouped ones, once per sample
    assert net4.meta["arena"]["size"] <= 4 * net1.meta["arena"]["size"]
    assert net4.weights == net1.weights
    banded = sum(k.split(" ")[0] in ("band", "copy", "group") for s in net1.meta["program"]
                 if s["kind"] == "hw" for k in s["runs"])
    assert command_batches(net4).count(4) == net1.meta["stats"]["commands"] - banded > 0
    assert command_batches(net4).count(1) == 4 * banded > 0


@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_the_memory_plan_grows_linearly_with_the_batch(n):
    model = _se_cpu_steps()
    one = compile(model, golden=False)
    net = compile(model, golden=False, batch=n)
    assert net.meta["arena"]["size"] <= n * one.meta["arena"]["size"]
    assert len(net.commands) == len(one.commands) and net.weights == one.weights
    assert len(net.meta["program"]) == len(one.meta["program"])


def test_batch_1_keeps_every_bit_of_the_file():
    model = _se_cpu_steps()
    plain, one = compile(model), compile(model, batch=1)
    for n in (plain, one):
        n.meta["stats"]["compile_s"] = 0.0
    assert encode(plain) == encode(one)


# --------------------------------------------------------------------------- refusals
def _reshape_to_one_row() -> onnx.ModelProto:
    b = NetBuilder(7)
    h = b.node("Reshape", [b.conv("x", 3, 4), b.const(np.array([1, -1], np.int64))])
    return b.model([("x", (1, 3, 4, 4))], [b.node("Relu", [h])], "one_row")


def _squeeze_batch() -> onnx.ModelProto:
    b = NetBuilder(8)
    h = b.node("Squeeze", [b.conv("x", 3, 4), b.const(np.array([0], np.int64))])
    return b.model([("x", (1, 3, 4, 4))], [h], "squeeze")


@pytest.mark.parametrize("value", [0, -1, 32768, 2.5, "4", True])
def test_a_bad_batch_is_a_model_error_naming_it(value):
    with pytest.raises(ModelError) as ei:
        compile(_conv_add_pool(), golden=False, batch=value)
    assert ei.value.field == "batch" and ei.value.limit == "1..32767"


def _reshape_batch_into_rows() -> onnx.ModelProto:
    b = NetBuilder(9)
    h = b.node("Reshape", [b.conv("x", 3, 4), b.const(np.array([4, -1], np.int64))])
    return b.model([("x", (1, 3, 4, 4))], [b.node("Relu", [h])], "batch_into_rows")


@pytest.mark.parametrize("build", [_squeeze_batch, _reshape_batch_into_rows])
def test_a_model_that_fixes_batch_1_in_its_ops_is_refused(build):
    with pytest.raises(ModelError) as ei:
        compile(build(), golden=False, batch=2)
    assert ei.value.field == "batch" and ei.value.value == 2


def _per_sample(model, netn, n: int) -> None:
    """``netn`` (``model`` at batch n) against the batch-1 net run on each sample (the
    same bits) and onnxruntime running the batch-1 model on each sample."""
    net1 = compile(model, golden=False)
    feeds = feeds_of(model, n)
    with Net(net1, SIM) as one:
        singles = [one.run({k: v[i:i + 1] for k, v in feeds.items()}) for i in range(n)]
    with Net(netn, SIM) as many:
        got = many.run(feeds)
    refs = [ort_reference(model, {k: v[i:i + 1] for k, v in feeds.items()})
            for i in range(n)]
    for j, spec in enumerate(netn.meta["outputs"]):
        name = spec["name"]
        assert bits(got[name]) == bits(np.concatenate([s[name] for s in singles])), name
        assert_matches(got[name], np.concatenate([r[j] for r in refs]), what=name)


@pytest.mark.parametrize("n", [2, 3])
def test_a_reshape_to_a_constant_batch_1_target_runs_per_sample(n):
    """An exporter's Reshape to (1, -1): its leading 1 is the batch (module docstring of
    dvsdk.compiler.batch), so at batch n each sample is reshaped alone."""
    model = _reshape_to_one_row()
    netn = compile(model, golden=False, batch=n)
    assert netn.meta["outputs"][0]["shape"][0] == n
    _per_sample(model, netn, n)


def test_ppocr_rec_with_its_batch_1_attention_reshapes_runs_2_samples():
    """PP-OCR rec's attention reshapes to (1, 40, heads, d) (as PyTorch exports them):
    refused at batch 2 before; now the same bits as two batch-1 runs."""
    build, size = NETWORKS["ppocr_rec"]
    model = build(size)
    _per_sample(model, compile(model, golden=False, batch=2), 2)


def test_a_fixed_batch_other_than_n_is_refused():
    with pytest.raises(ModelError) as ei:
        compile(batched(_conv_add_pool(), 3), golden=False, batch=2)
    assert (ei.value.field, ei.value.value, ei.value.limit) == ("batch", 2, 3)


def test_the_reader_refuses_a_batch_the_file_contradicts():
    net = compile(_conv_add_pool(), golden=False, batch=2)
    meta = json.loads(json.dumps(net.meta))
    name = net.meta["inputs"][0]["tensor"]
    meta["tensors"][name]["device"]["batch"] = 3
    with pytest.raises(NetFileError) as ei:
        decode(encode(type(net)(meta=meta, commands=net.commands, weights=net.weights,
                                constants=net.constants)))
    assert ei.value.field == f"tensors.{name}.device.batch"
    # a command running one sample where the tensors hold two would leave the second
    # sample's results unwritten: refused before anything reaches a device
    cmds = bytearray(net.commands)
    cmds[ICO:ICO + 2] = (1).to_bytes(2, "little")
    damaged = decode(encode(type(net)(meta=net.meta, commands=bytes(cmds),
                                      weights=net.weights, constants=net.constants)))
    with pytest.raises(NetFileError, match="batch"):
        verify(damaged)


# --------------------------------------------------------------------------- runtime and CLI
def _classes() -> onnx.ModelProto:
    b = NetBuilder(9)
    return b.model([("x", (1, 3, 8, 8))], [b.conv(b.node("Relu", [b.conv("x", 3, 8)]), 8, 4)],
                   "classes")


def test_class_maps_run_the_maximizer_once_a_sample():
    net = compile(_classes(), golden=False, batch=3)
    x = feeds_of(_classes(), 3)["x"]
    with Net(net, SIM) as dev:
        (scores,) = dev.run(x).values()
        maps = dev.class_map()
    assert maps.shape == (3, 8, 8) and maps.dtype == np.uint8
    np.testing.assert_array_equal(maps, np.argmax(scores, axis=1))
    with Net(compile(_classes(), golden=False), SIM) as one:
        for i in range(3):
            one.run(x[i:i + 1])
            np.testing.assert_array_equal(one.class_map(), maps[i])


def test_run_image_takes_a_list_of_n_images(tmp_path):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (10 + i, 9, 3), dtype=np.uint8) for i in range(3)]
    net, one = compile(_classes(), golden=False, batch=3), compile(_classes(), golden=False)
    with Net(net, SIM) as dev, Net(one, SIM) as single:
        (got,) = dev.run_image(images).values()
        for i, img in enumerate(images):
            (want,) = single.run_image(img).values()
            assert bits(got[i:i + 1]) == bits(want)
        with pytest.raises(InvalidArgument) as ei:
            dev.run_image(images[0])
        assert (ei.value.field, ei.value.value, ei.value.limit) == ("image", 1, 3)
        with pytest.raises(InvalidArgument) as ei:
            dev.run_image(images, ipu=True)
        assert ei.value.field == "ipu"


def test_cli_compile_batch_and_bench_per_image(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DVSDK_DEVICE", "sim://")
    onnx.save(_classes(), tmp_path / "m.onnx")
    out = tmp_path / "m4.bin"
    rc = compile_cli.run([str(tmp_path / "m.onnx"), "-o", str(out), "--batch", "4",
                          "--report"])
    text = capsys.readouterr().out
    assert rc == 0 and "the DV700 runs 4 samples a command" in text
    rc = run_cli.run([str(out), "--bench", "2", "--json"])
    bench = json.loads(capsys.readouterr().out)["bench"]
    assert rc == 0 and bench["batch"] == 4
    one = bench["per_image"]
    assert one["device_us"] == pytest.approx(bench["stages"]["device"]["mean"] / 4)
    rc = run_cli.run([str(out), "--bench", "1"])
    assert rc == 0 and "batch of 4: the stages above are per batch" in capsys.readouterr().out
    rc = compile_cli.run([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "x.bin"),
                          "--batch", "40000"])
    err = capsys.readouterr().err
    assert rc == 2 and "batch" in err and "32767" in err


def test_cli_compile_warns_in_one_line_of_ops_the_batch_puts_on_the_cpu(tmp_path, capsys):
    onnx.save(_split_concat(), tmp_path / "m.onnx")
    rc = compile_cli.run([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.bin"),
                          "--batch", "3"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 0 and len(err) == 1
    assert err[0].startswith("dvsdk-compile: warning: batch 3: 2 ops run on the CPU")


def test_cli_run_groups_images_n_at_a_time(tmp_path, capsys, monkeypatch):
    """Five images on a batch-2 net: three runs (the last one filled up), each image's
    outputs the bits of its own batch-1 run; an unreadable image is reported alone."""
    from PIL import Image

    monkeypatch.setenv("DVSDK_DEVICE", "sim://")
    rng = np.random.default_rng(2)
    paths = []
    for i in range(5):
        paths.append(tmp_path / f"im{i}.png")
        Image.fromarray(rng.integers(0, 256, (9 + i, 8, 3), dtype=np.uint8)).save(paths[-1])
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    for n, name in ((2, "two"), (1, "one")):
        compile(_classes(), tmp_path / f"{name}.bin", golden=False, batch=n)
        rc = run_cli.run([str(tmp_path / f"{name}.bin"), *map(str, paths[:2]), str(bad),
                          *map(str, paths[2:]), "--save", str(tmp_path / f"{name}.npz"),
                          "--json"])
        assert rc == 2
        results = json.loads(capsys.readouterr().out)["results"]
        assert [r["input"] for r in results] == [str(p) for p in paths[:2] + [bad] + paths[2:]]
        assert results[2]["exit_code"] == 2
        assert [r.get("batch", 1) for r in results if "error" not in r] == [n] * 5
    two, one = np.load(tmp_path / "two.npz"), np.load(tmp_path / "one.npz")
    assert sorted(two.files) == sorted(one.files) and len(two.files) == 5
    for k in one.files:
        assert two[k].shape == one[k].shape and bits(two[k]) == bits(one[k])


def test_openvx_batches_run_on_the_device():
    """A ``[#IFM, #batches]`` fully connected layer and a ``[W, H, IFM, #batches]``
    convolution now go to the DV700 as one batched command each."""
    import dvsdk
    import dvsdk.vx as vx

    from . import vx_refs

    f32, wo = vx.Type.FLOAT32, vx.Accessor.WRITE_ONLY
    rng = np.random.default_rng(11)
    with dvsdk.open_device("sim://") as dev, vx.Context(dev) as ctx:
        def tensor(a):
            t = vx.Tensor(ctx, a.shape, f32)
            t.copy_patch(a.astype(np.float32), wo)
            return t

        x, wt, b = rng.standard_normal((20, 3)), rng.standard_normal((20, 7)) * 0.3, \
            rng.standard_normal(7)
        g = ctx.graph()
        y = vx.Tensor(ctx, (7, 3), f32)
        fc = vx.fully_connected_layer(g, tensor(x), tensor(wt), tensor(b),
                                      vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_ZERO, y)
        xc, wc = rng.standard_normal((6, 5, 3, 2)), rng.standard_normal((3, 3, 3, 4)) * 0.3
        yc = vx.Tensor(ctx, (4, 3, 4, 2), f32)
        conv = vx.convolution_layer(g, tensor(xc), tensor(wc), None, vx.ConvolutionParams(),
                                    yc)
        assert g.verify() == vx.Status.SUCCESS, g.error
        assert g.process() == vx.Status.SUCCESS, g.error
        assert fc.where == "DV700" and conv.where == "DV700"
        for got, want in ((y.copy_patch(), vx_refs.fully_connected(x, wt, b)),
                          (yc.copy_patch(), vx_refs.convolution(xc, wc, None))):
            assert np.abs(got - want).max() <= 2e-3 * max(1, np.abs(want).max()) \
                + 4e-3 * np.abs(want).max()
