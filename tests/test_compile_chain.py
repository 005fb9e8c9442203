"""Chained commands (dvsdk.compiler.chain): a command whose output only the next command
reads hands it over in the unified buffer, as one multi-run command with topo 1 << (n-1).

The results are the bits of the unchained program (run on sim:// both ways); a chain is
taken only where the intermediate has no other reader and the merged command passes the
driver's own validation."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.compiler.chain import chain_kinds
from dvsdk.driver.commands import BufferRef, ConvCommand
from dvsdk.driver.device import DeviceInfo
from dvsdk.driver.stream import build_stream, conv_words
from dvsdk.driver.validate import validate_conv
from dvsdk.errors import InvalidCommand
from dvsdk.runtime.net import Net

from . import realistic_nets as R
from .compile_harness import SIM, hw_stage_count, ort_reference
from .hw import kick_stream, wait_stream
from .onnx_models import NetBuilder

#: (at 96x96: at 64x64 the MobileNetV3 and DBNet stand-ins leave the FP16 range, NaN)
NETS = {"mobilenetv3_small": lambda: R.mobilenetv3_small(96, 10),
        "efficientnet_lite0": lambda: R.efficientnet_lite0(96, 10),
        "yolov8n": lambda: R.yolov8n(96, 8),
        "dbnet": lambda: R.dbnet(96)}


class _Region:
    """A stand-in for the arena and weight regions (validation checks sizes against it)."""

    phys, size, freed, name = 0x1000_0000, 1 << 28, False, "region"


def _commands(net) -> list[ConvCommand]:
    return [ConvCommand.from_raw(r, lambda mem, offs: BufferRef(_Region(), offs))
            for r in net.command_records()]


def _run(net, x) -> tuple[dict, int]:
    with Net(net, SIM) as n:
        out = n.run(x)
        return out, n.last_run.cycles


@pytest.mark.parametrize("name", sorted(NETS))
def test_chained_networks_give_the_unchained_bits(name):
    model = NETS[name]()
    x = R.calibration_image((96, 96), 3)
    chained, plain = compile(model, golden=False), compile(model, golden=False, chain=False)
    assert chained.meta["stats"]["commands"] < plain.meta["stats"]["commands"]
    assert hw_stage_count(chained) == plain.meta["stats"]["commands"]  # the same commands
    (y_c, cyc_c), (y_p, cyc_p) = _run(chained, x), _run(plain, x)
    assert y_c.keys() == y_p.keys()
    for k in y_c:
        assert np.isfinite(y_p[k]).all() and np.array_equal(y_c[k], y_p[k]), k
    # fewer commands and DRAM round trips: fewer predicted cycles, a smaller arena
    assert cyc_c < cyc_p
    assert chained.meta["arena"]["size"] <= plain.meta["arena"]["size"]
    info = DeviceInfo(ub_size=chained.meta["hardware"]["ub_size_min"], mac_num=576,
                      max_kernel_size=7, svn_version=93)
    for cmd, kind in zip(_commands(chained), [k for s in chained.meta["program"]
                                              if s["kind"] == "hw" for k in s["runs"]]):
        if kind.startswith("chain ["):
            assert cmd.topo == 1 << (cmd.num_runs - 1) and cmd.num_runs == len(
                chain_kinds(kind))
            assert validate_conv(cmd, info).tiles == 1
    _fits(chained)


def test_a_squeeze_excitation_tail_is_one_command():
    """Global average pool stages, reduce and expand 1x1 convs: four commands, one chain;
    the intermediates leave the arena."""
    b = NetBuilder(7)
    x = b.node("Relu", [b.conv("x", 8, 16)])
    g = b.node("GlobalAveragePool", [x])
    s = b.node("Relu", [b.conv(g, 16, 8, k=1)])
    e = b.node("Sigmoid", [b.conv(s, 8, 16, k=1)])
    model = b.model([("x", (1, 8, 20, 20))], [b.node("Mul", [x, e])], "se")
    net = compile(model, golden=False)
    chains = [r for st in net.meta["program"] if st["kind"] == "hw" for r in st["runs"]
              if r.startswith("chain [")]
    assert len(chains) == 1 and len(chain_kinds(chains[0])) == 4, net.meta["program"]
    assert [k.split(" stage")[0] for k in chain_kinds(chains[0])[:2]] == \
        ["global avg-pool"] * 2
    on_device = {n for n, t in net.meta["tensors"].items() if "device" in t}
    assert g not in on_device and s not in on_device and x in on_device
    feeds = {"x": np.random.default_rng(0).uniform(-1, 1, (1, 8, 20, 20)).astype(np.float32)}
    with Net(net, SIM) as n:
        y = next(iter(n.run(feeds).values()))
        row = next(r for r in n.profile(feeds) if r["kind"] == chains[0])
    assert (row["input"], row["output"], row["runs"]) == ((20, 20, 16), (1, 1, 16), 4)
    ref = ort_reference(model, feeds)[0]
    assert np.abs(y - ref).max() <= 1e-3 + 1e-2 * np.ptp(ref)


def _two_convs(shape=(1, 8, 12, 12), **kw):
    """x -> conv A -> t -> conv B -> y, with what ``kw`` adds around t."""
    b = NetBuilder(11)
    t = b.node("Relu", [b.conv("x", shape[1], 8)])
    y = b.conv(t, 8, 8)
    outs = [y]
    if kw.get("t_is_output"):
        outs.append(t)
    if kw.get("t_read_twice"):
        outs.append(b.conv(t, 8, 8, k=1))  # (not a twin of conv B: no head merge)
    if kw.get("t_on_cpu"):
        outs.append(b.node("Exp", [t]))
    if kw.get("residual"):
        outs = [b.node("Add", [y, t])]
    return b.model([("x", shape)], outs, "two"), t


@pytest.mark.parametrize("case", ["t_is_output", "t_read_twice", "t_on_cpu", "residual"])
def test_no_chain_where_the_intermediate_has_another_reader(case):
    model, t = _two_convs(**{case: True})
    net = compile(model, golden=False)
    assert not any(r.startswith("chain [") for st in net.meta["program"]
                   if st["kind"] == "hw" for r in st["runs"]), net.meta["program"]
    assert "device" in net.meta["tensors"][t]


def test_chain_when_nothing_else_reads_it():
    model, t = _two_convs()
    net = compile(model, golden=False)
    assert net.meta["stats"]["commands"] == 1 and hw_stage_count(net) == 2
    assert "device" not in net.meta["tensors"][t]
    feeds = {"x": np.random.default_rng(5).uniform(-1, 1, (1, 8, 12, 12)).astype(np.float32)}
    plain = compile(model, golden=False, chain=False)
    (y_c, _), (y_p, _) = _run(net, feeds), _run(plain, feeds)
    assert all(np.array_equal(y_c[k], y_p[k]) for k in y_p)


def test_no_chain_where_a_run_needs_several_tiles():
    """112x112x32 3x3 convs need more than one tile of a 256 KiB UBUF: a run kept in the
    UBUF must fit in one (§4.1), so they stay separate commands."""
    b = NetBuilder(13)
    y = b.conv(b.conv("x", 32, 32), 32, 32)
    model = b.model([("x", (1, 32, 112, 112))], [y], "big")
    assert compile(model, golden=False, ub_size=262144).meta["stats"]["commands"] == 2


def test_no_chain_into_a_fully_connected_command():
    """The FC reads the conv's bytes as a 1x1xN vector: no unified-buffer hand-over."""
    b = NetBuilder(17)
    t = b.node("Relu", [b.conv("x", 8, 8)])
    f = b.node("Flatten", [t])
    y = b.node("Gemm", [f, b.const(np.random.default_rng(1).normal(0, .1, (10, 8 * 4 * 4))
                                   .astype(np.float32)), b.const(np.zeros(10, np.float32))],
               transB=1)
    net = compile(b.model([("x", (1, 8, 4, 4))], [y], "fc"), golden=False)
    assert net.meta["stats"]["commands"] == 2


def test_no_chain_option_and_cli_flag(tmp_path):
    from dvsdk.cli.compile import main as compile_main

    model, _ = _two_convs()
    path = tmp_path / "two.onnx"
    path.write_bytes(model.SerializeToString())
    assert compile_main([str(path), "-o", str(tmp_path / "a.bin"), "-q", "--no-golden"]) == 0
    assert compile_main([str(path), "-o", str(tmp_path / "b.bin"), "-q", "--no-golden",
                         "--no-chain"]) == 0
    from dvsdk import netfile

    assert netfile.read(tmp_path / "a.bin").meta["stats"]["commands"] == 1
    assert netfile.read(tmp_path / "b.bin").meta["stats"]["commands"] == 2


def test_chain_kinds():
    assert chain_kinds("chain [conv 1x1 -> depthwise conv 3x3 +relu6]") == \
        ["conv 1x1", "depthwise conv 3x3 +relu6"]
    assert chain_kinds("conv 1x1") == ["conv 1x1"]
    assert chain_kinds("multi-run topo 0x55 [a | b]") == ["multi-run topo 0x55 [a | b]"]


def _fits(net) -> None:
    """Every kept run of every command holds its whole input and output in the UBUF."""
    from dvsdk.hw import dims

    ub = net.meta["hardware"]["ub_size_min"]
    for cmd in _commands(net):
        assert dims.ubuf_kept_bytes(cmd, cmd.runs) <= ub


@pytest.mark.parametrize("case", ["deconv", "avgpool_1x7"])
def test_no_chain_that_the_ubuf_peak_undercounts(case):
    """§7.3's peak, as the C computes it, takes a stride-2 deconv's output for a conv's
    (1/4 of it) and a 1x7 average pool for a 7x7 one: these chains would pass it with
    intermediates of 921,600 and 380,928 bytes that do not fit next to their inputs in
    512 KiB.  The whole tensors are checked too (dims.ubuf_kept_bytes): two commands."""
    b = NetBuilder(1)
    if case == "deconv":
        t = b.node("Relu", [b.node("ConvTranspose", [
            "x", b.const(np.random.default_rng(3).normal(0, .3, (8, 8, 2, 2))
                         .astype(np.float32)),
            b.const(np.zeros(8, np.float32))], kernel_shape=[2, 2], strides=[2, 2])])
        shape, y = (1, 8, 120, 120), b.conv(t, 8, 8)
    else:
        t = b.node("AveragePool", ["x"], kernel_shape=[1, 7], strides=[1, 1])
        shape, y = (1, 64, 8, 380), b.conv(t, 64, 8, k=1)
    model = b.model([("x", shape)], [y], case)
    net = compile(model, golden=False)
    assert net.meta["stats"]["commands"] == 2
    _fits(net)
    merged = compile(model, golden=False, chain=False)  # the same commands, then joined:
    cmds = _commands(merged)                              # the driver refuses the join
    joined = ConvCommand(input_buf=cmds[0].input_buf, output_buf=cmds[1].output_buf,
                         w=cmds[0].w, h=cmds[0].h, c=cmds[0].c,
                         runs=cmds[0].runs + cmds[1].runs, topo=2)
    info = DeviceInfo(ub_size=524288, mac_num=576, max_kernel_size=7, svn_version=93)
    with pytest.raises(InvalidCommand, match="kept in the unified buffer"):
        validate_conv(joined, info)
    # kicked past the driver, the simulator refuses it as the hardware could not run it
    with Net(merged, SIM) as n:
        a, b = n._contexts[0].commands
        raw = replace(a, topo=2, runs=a.runs + b.runs, output_buf=b.output_buf)
        stream = build_stream(n.device, [conv_words(raw, 1)])
        kick_stream(n.device, stream.address, stream.length8)
        wait_stream(n.device, 1.0)
        assert n.device.read32("conv", 0x308) == 4  # SIM_STATUS bad_config
        assert "multi-run command needs" in n.device.errors[-1]
        stream.free()


def test_a_long_chain_splits_at_32_runs():
    """40 1x1 convs in a row: a 32-run command, then the other 8 (§4.1 MAX_NUM_RUNS)."""
    b = NetBuilder(19)
    x = "x"
    for _ in range(40):
        x = b.conv(x, 8, 8, k=1)
    model = b.model([("x", (1, 8, 6, 6))], [x], "long")
    net = compile(model, golden=False)
    assert [len(chain_kinds(k)) for st in net.meta["program"] if st["kind"] == "hw"
            for k in st["runs"]] == [32, 8]
    feeds = {"x": np.random.default_rng(2).uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)}
    (y_c, _), (y_p, _) = _run(net, feeds), _run(compile(model, golden=False, chain=False),
                                                   feeds)
    assert all(np.array_equal(y_c[k], y_p[k]) for k in y_p)


@pytest.mark.parametrize("opts", [dict(quantize=True), dict(transpose=True)],
                         ids=["quantized", "transposed"])
def test_chains_in_quantized_and_transposed_nets_give_the_unchained_bits(opts):
    model = NETS["mobilenetv3_small"]()
    x = R.calibration_image((96, 96), 4)
    chained, plain = compile(model, golden=False, **opts), compile(model, golden=False,
                                                                   chain=False, **opts)
    assert chained.meta["stats"]["commands"] < plain.meta["stats"]["commands"]
    _fits(chained)
    (y_c, _), (y_p, _) = _run(chained, x), _run(plain, x)
    assert all(np.isfinite(y_p[k]).all() and np.array_equal(y_c[k], y_p[k]) for k in y_p)
