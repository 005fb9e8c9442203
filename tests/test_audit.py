"""Bits DMP's stack would send, found by an audit against the reference (issue 12 §4):
ELU's parameter, the batch's bit 15, the converter's size limits, and what the simulator
refuses because the hardware would misbehave (a wrong ``tiles`` field, a multi-run command
over the unified buffer).  The IPU scales without a texture are in test_kmod.py, the
memory plan's in-place question in test_compile_nets.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dvsdk
from dvsdk.compiler.build import compile
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import BufferRef, ConvCommand, ConvRun
from dvsdk.driver.stream import build_stream, conv_words
from dvsdk.driver.validate import validate_conv
from dvsdk.errors import InvalidCommand
from dvsdk.hw.weights import pack_conv_weights
from dvsdk.runtime.net import Net

from .compile_harness import ort_reference
from .hw import kick_stream, upload, upload_tensor, wait_stream

SIM = "sim://"


def _conv_elu(alpha: float) -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 8, 3, 3],
                           rng.uniform(-0.5, 0.5, 8 * 8 * 9).astype(np.float32))
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Elu", ["c"], ["y"], alpha=alpha)], "elu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_elu_sends_what_dmp_sends_and_other_alphas_run_on_the_cpu(alpha):
    """DMP's converter and tests send actfunc_param = 0 for ELU (§4.5: alpha 1); an alpha
    the hardware is not shown to take stays on the CPU; both agree with onnxruntime."""
    model = _conv_elu(alpha)
    net = compile(model, golden=False)
    where = {r["type"]: r["where"] for r in net.meta["report"]}
    with Net(net, SIM) as n:
        runs = [r for cmd in n._contexts[0].commands for r in cmd.runs]
        feeds = {"x": np.random.default_rng(1).uniform(-2, 2, (1, 8, 6, 6)).astype(np.float32)}
        y = n.run(feeds)["y"]
    if alpha == 1.0:
        assert where["Elu"] == "hw" and [(r.actfunc, r.actfunc_param) for r in runs] == [(5, 0)]
    else:
        assert where["Elu"] == "cpu" and all(r.actfunc == 0 for r in runs)
    assert np.max(np.abs(y - ort_reference(model, feeds)[0])) < 2e-2


def _one_conv(dev, w=4, h=4, c=8, batch=1):
    x = upload_tensor(dev, np.ones((h, w, c), np.float32))
    wb = upload(dev, pack_conv_weights(np.ones((8, c, 1, 1), np.float32),
                                       np.zeros(8, np.float32)), name="weights")
    out = dev.alloc(w * h * 8 * 2, name="out")
    return ConvCommand(input_buf=x, output_buf=out, w=w, h=h, c=c, input_circular_offset=batch,
                       runs=[ConvRun.make(8, conv="conv", kernel=1, weights=wb)])


def test_validation_refuses_what_dmp_never_sends(sim):
    info = sim.info()
    cmd = _one_conv(sim)
    elu = cmd.replace(runs=[replace(cmd.runs[0], actfunc=5, actfunc_param=0x3C00)])
    with pytest.raises(InvalidCommand, match="ELU takes no parameter") as e:
        validate_conv(elu, info)
    assert e.value.field == "run[0].actfunc_param" and e.value.limit == 0
    validate_conv(replace(elu, runs=[replace(elu.runs[0], actfunc_param=0)]), info)
    # batch 32768 would be 0x8000: the converter's transposed-weight flag (bit 15)
    with pytest.raises(InvalidCommand, match="batch") as e:
        validate_conv(cmd.replace(input_circular_offset=32768), info)
    assert e.value.limit == "0..32767"


@pytest.mark.parametrize("field,shape,limit", [("w", (2048, 1, 8), 2047),
                                               ("h", (1, 1025, 8), 1024),
                                               ("c", (1, 1, 32776), 32768)])
def test_the_converters_dv700_size_limits(field, shape, limit):
    """dmp-convertor.md §3: W <= 2047, H <= 1024, C <= 32768 for every conv/pool input."""
    w, h, c = shape
    info = dvsdk.driver.device.DeviceInfo(ub_size=1 << 26, mac_num=576)
    fake = BufferRef(_Fake(), 0)
    cmd = ConvCommand(input_buf=fake, output_buf=fake, w=w, h=h, c=c,
                      runs=[ConvRun.make(8, conv="conv", kernel=1, weights=fake)])
    with pytest.raises(InvalidCommand, match="exceeds the DV700's limit") as e:
        validate_conv(cmd, info)
    assert e.value.field == f"run[0].{field}"
    assert e.value.value == shape[("w", "h", "c").index(field)]
    assert str(limit) in str(e.value.limit)
    ok = cmd.replace(**{field: limit})
    if field == "c":
        ok = ok.replace(runs=[replace(ok.runs[0], m=8)])
    validate_conv(ok, info)


class _Fake:
    """A buffer stand-in as the compiler uses for validation: large, aligned."""

    phys, size, freed, name = 0x1000_0000, 1 << 30, False, "fake"


def test_the_simulator_refuses_a_wrong_tiles_field_and_an_oversized_multirun(sim):
    """The hardware would misbehave on these, so the simulator reports bad_config instead
    of computing a result: a ``tiles`` field other than get_conv_tiles_v0's, and a
    multi-run command whose unified-buffer peak (§7.3) exceeds the device's."""
    cmd = _one_conv(sim, w=64, h=64, c=64)
    tiles = validate_conv(cmd, sim.info()).tiles
    assert tiles == 2  # 64x64x64 on 512 KiB: 2 strips (§7.2)
    words = conv_words(cmd, 3)
    stream = build_stream(sim, [words])
    kick_stream(sim, stream.address, stream.length8)
    wait_stream(sim, 1.0)
    assert sim.read32("conv", 0x308) == 4 and "tiles field 3 disagrees" in sim.errors[-1]
    stream.free()
    # a two-run fire-like command over a 32 KiB unified buffer
    small = dvsdk.open_device(f"sim://?ub_size={32 << 10}&kick={sim.kick}")
    try:
        c = _one_conv(small, w=32, h=32, c=8)
        two = c.replace(topo=0b11, runs=[c.runs[0], c.runs[0]],
                        output_buf=small.alloc(2 * 32 * 32 * 8 * 2))
        stream = build_stream(small, [conv_words(two, 1)])
        kick_stream(small, stream.address, stream.length8)
        wait_stream(small, 1.0)
        assert small.read32("conv", 0x308) == 4
        assert "multi-run command needs" in small.errors[-1]
        with CommandList(small) as cl, pytest.raises(InvalidCommand, match="unified buffer"):
            cl.add(two)  # the driver refuses it before the hardware sees it
    finally:
        small.close()
    with CommandList(sim) as cl:  # the driver's own tiles are the right ones
        cl.add(cmd)
        cl.commit()
        cl.run()
