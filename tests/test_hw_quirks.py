"""Hardware-version quirks (issue 26 item 5): what older DV700 hardware cannot do, as DMP's
libdmpdv gated it (dv-user-driver 8809308: conv + pooling over several tiles works "in HW
since 20190729"; 12d9d24, 2019-12-23: dilated conv with stride 2; 91ed863 .. 2ae2913,
2020-07-10: an element-wise add with the conv module off needed a dummy conv).

Each is shown three ways: the driver refuses the command for a device of that version,
the simulator given that version refuses it at the hardware (bypassing the driver's
check), and the compiler, told the version, produces a program the old hardware runs
and whose outputs match onnxruntime."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.cmdlist import CommandList
from dvsdk.driver.commands import BufferRef, ConvCommand, ConvRun
from dvsdk.driver.submit import RegisterSubmission
from dvsdk.driver.validate import validate_conv
from dvsdk.errors import DeviceFault, InvalidArgument, InvalidCommand, InvalidURL, ModelError
from dvsdk.hw import quirks
from dvsdk.hw.weights import pack_conv_weights, pack_dilated_weights

from .hw import upload, upload_tensor

UB = 32768  # small enough that a 32x32x16 conv needs several tiles


def test_versions_parse_and_bad_ones_are_typed_errors():
    assert quirks.parse_hw_version("7.2.20190729") == 20190729
    assert quirks.parse_hw_version("20191223") == 20191223
    assert quirks.parse_hw_version("") == 0
    for bad in ("7.2", "2019-07-29", "7.2.20191350", "x"):
        with pytest.raises(InvalidArgument) as e:
            quirks.parse_hw_version(bad)
        assert e.value.field == "hw_version" and e.value.value == bad
    with pytest.raises(InvalidURL):
        dvsdk.open_device("sim://?hw_version=2019")
    with pytest.raises(ModelError):
        from dvsdk.compiler.build import Options
        Options(hw_version="soon")
    assert [q for q in quirks.QUIRKS] == ["conv_pool_tiles", "dilated_stride",
                                         "eltwise_without_conv"]
    assert {q: quirks.QUIRKS[q]["fixed"] for q in quirks.QUIRKS} == {
        "conv_pool_tiles": 20190729, "dilated_stride": 20191223,
        "eltwise_without_conv": 20200710}


def _commands(dev):
    """One command per quirk: conv 3x3 + max-pool over several tiles; a dilated 3x3 conv
    with stride 2; an element-wise add with a max-pool and the conv off."""
    x = upload_tensor(dev, np.random.default_rng(1).standard_normal((32, 32, 16)) * 0.5)
    w3 = upload(dev, pack_conv_weights(np.full((16, 16, 3, 3), 0.01, np.float32),
                                       np.zeros(16, np.float32)), name="w3")
    wd = upload(dev, pack_dilated_weights(np.full((16, 16, 3, 3), 0.01, np.float32),
                                          np.zeros(16, np.float32)), name="wd")
    out = dev.alloc(32 * 32 * 16 * 2, name="out")
    conv_pool = ConvCommand(input_buf=x, output_buf=out, w=32, h=32, c=16, runs=[
        ConvRun.make(16, conv="conv", kernel=3, pads=1, weights=w3, pool="max", pool_size=2,
                     pool_stride=2)])
    dilated = ConvCommand(input_buf=x, output_buf=out, w=32, h=32, c=16, runs=[
        ConvRun.make(16, conv="conv", kernel=3, pads=2, weights=wd, dilation=2, stride=2)])
    add_pool = ConvCommand(input_buf=x, output_buf=out, eltwise_buf=BufferRef(x, 0),
                           output_mode=1, w=32, h=32, c=16, runs=[
                               ConvRun.make(16, pool="max", pool_size=2, pool_stride=2)])
    return {"conv_pool_tiles": conv_pool, "dilated_stride": dilated,
            "eltwise_without_conv": add_pool}


@pytest.mark.parametrize("quirk", sorted(quirks.QUIRKS))
def test_the_driver_refuses_what_the_devices_version_cannot_run(quirk):
    fixed = quirks.QUIRKS[quirk]["fixed"]
    with dvsdk.open_device(f"sim://?ub_size={UB}&hw_version=7.2.{fixed - 1}") as old:
        cmd = _commands(old)[quirk]
        with CommandList(old) as cl:
            with pytest.raises(InvalidCommand, match="cannot run this") as e:
                cl.add(cmd)
        assert e.value.field == f"run[0].{quirk}" and e.value.limit == fixed
    for version in (f"7.2.{fixed}", ""):  # that date on, or unknown (the newest)
        with dvsdk.open_device(f"sim://?ub_size={UB}&hw_version={version}") as new:
            cmd = _commands(new)[quirk]
            with CommandList(new) as cl:
                cl.add(cmd)
                cl.commit()
                cl.run()


@pytest.mark.parametrize("quirk", sorted(quirks.QUIRKS))
def test_the_simulator_of_that_version_refuses_it_at_the_hardware(quirk):
    """The driver's check bypassed (planned for an unknown version): the old hardware's
    controller does not run it (bad_config); newer hardware does."""
    fixed = quirks.QUIRKS[quirk]["fixed"]
    for version, runs in ((fixed - 1, False), (fixed, True)):
        with dvsdk.open_device(f"sim://?ub_size={UB}&hw_version={version}") as dev:
            cmd = _commands(dev)[quirk]
            info = replace(dev.info(), hw_date=0)
            plan = validate_conv(cmd, info)
            if quirk == "conv_pool_tiles":
                assert plan.tiles > 1
            sub = RegisterSubmission(dev, "conv", [cmd], [plan], info)
            try:
                sub.start()
                if runs:
                    sub.wait(10.0)
                else:
                    with pytest.raises(DeviceFault, match="bad_config"):
                        sub.wait(10.0)
                    assert f"hardware {version}" in dev.core.errors[-1]
                    assert quirks.QUIRKS[quirk]["doc"] in dev.core.errors[-1]
            finally:
                sub.free()


def _conv_pool_model():
    from . import onnx_models as M
    b = M.NetBuilder(11)
    h = b.node("Relu", [b.conv("x", 16, 16)])
    y = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    return b.model([("x", (1, 16, 32, 32))], [y], "conv_pool_tiles")


def _dilated_s2_model():
    from . import onnx_models as M
    b = M.NetBuilder(12)
    w = b.const(M.w(3, 8, 8, 3, 3, scale=0.2), "W")
    y = b.node("Conv", ["x", w], kernel_shape=[3, 3], strides=[2, 2], pads=[2, 2, 2, 2],
               dilations=[2, 2])
    return b.model([("x", (1, 8, 16, 16))], [y], "dilated_s2")


def test_the_compiler_splits_conv_and_pool_for_hardware_before_20190729():
    pytest.importorskip("onnxruntime")
    from .compile_harness import hw_commands, run_case
    model = _conv_pool_model()
    new, _ = run_case(model, ub_size=UB, device=f"sim://?ub_size={UB}")
    assert ["Conv", "Relu", "MaxPool"] in hw_commands(new)  # fused where it works
    old, _ = run_case(model, ub_size=UB, hw_version="7.2.20190716",
                      device=f"sim://?ub_size={UB}&hw_version=7.2.20190716")
    assert ["Conv", "Relu", "MaxPool"] not in hw_commands(old)
    assert ["MaxPool"] in hw_commands(old)  # the pool, a command of its own
    assert old.meta["hardware"]["hw_version"] == 20190716
    # the program for new hardware is refused by the old device's driver, not run wrong
    from dvsdk.runtime.net import Net
    with pytest.raises(InvalidCommand, match="cannot run this"):
        with Net(new, f"sim://?ub_size={UB}&hw_version=7.2.20190716") as n:
            n.run({"x": np.zeros((1, 16, 32, 32), np.float32)})


def test_the_compiler_keeps_dilated_stride_2_off_hardware_before_20191223():
    pytest.importorskip("onnxruntime")
    from .compile_harness import cpu_types, run_case
    model = _dilated_s2_model()
    new, _ = run_case(model)
    assert cpu_types(new) == []
    old, _ = run_case(model, hw_version="7.2.20190729",
                      device="sim://?hw_version=7.2.20190729")
    assert cpu_types(old) == ["Conv"]
    rep = next(r for r in old.meta["report"] if r["type"] == "Conv")
    assert "dilated_stride" in rep["detail"] or "20191223" in rep["detail"]


def test_compiled_adds_never_need_the_conv_module():
    """The compiler's element-wise add is a 1x1 average pool (what libdmpdv 91ed863 found
    already compatible): a program for hardware before 20200710 runs there unchanged."""
    pytest.importorskip("onnxruntime")
    from . import onnx_models as M
    from .compile_harness import run_case
    b = M.NetBuilder(13)
    y = b.node("MaxPool", [b.node("Add", ["x", "x2"])], kernel_shape=[2, 2], strides=[2, 2])
    model = b.model([("x", (1, 8, 8, 8)), ("x2", (1, 8, 8, 8))], [y], "add_pool")
    run_case(model, hw_version="7.2.20190716", device="sim://?hw_version=7.2.20190716")


def test_dv_hardware_date_is_known_under_a_pre_r5_module_only(tmp_path):
    from .fakedv import open_fake_kmod
    for generation, date in (("2019-02", 20190215), ("7.2.x", 0)):
        dev = open_fake_kmod(tmp_path / generation, generation=generation)
        try:
            assert dev.info().hw_date == date
        finally:
            dev.close()
    dev = open_fake_kmod(tmp_path / "declared", hw_date=20191223)
    try:
        assert dev.info().hw_date == 20191223
    finally:
        dev.close()
