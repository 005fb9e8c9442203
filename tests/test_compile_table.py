"""Element-wise tails of device tensors as one CPU table lookup (dvsdk.compiler.table).

The claim is "the same bits, less device work": every network is compiled with and
without the pass (``tables=False``) and run on sim:// through both CPU-step paths; the
outputs must be identical bit for bit, and the tails' activation commands gone.  The
lookup kernel is checked against plain numpy, and a table against SiLU in float64.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.cpu.ops import run_op
from dvsdk.errors import ModelError
from dvsdk.runtime.net import Net

from .compile_harness import SIM, ort_reference
from .onnx_models import NetBuilder


def _bits(net, x, mode: str) -> list[np.ndarray]:
    with Net(net, SIM, cpu_steps=mode) as dev:
        out = dev.run(x)
    return [np.asarray(out[k], np.float32).view(np.uint32) for k in sorted(out)]


def _same_bits(model, x) -> tuple:
    on, off = compile(model, golden=False), compile(model, golden=False, tables=False)
    ref = _bits(off, x, "unpack")
    for net in (on, off):
        for mode in ("device", "unpack"):
            got = _bits(net, x, mode)
            assert all(np.array_equal(a, b) for a, b in zip(got, ref)), mode
    return on, off


def _steps(net) -> collections.Counter:
    return collections.Counter(s["op"] for s in net.meta["program"] if s["kind"] == "cpu")


def _activation_commands(net) -> int:
    return sum(r.startswith("activation") for s in net.meta["program"] if s["kind"] == "hw"
               for r in s["runs"])


def _x(shape, seed=0, scale=3.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _silu_net(kind: str):
    """conv -> activation tail -> conv; ``kind`` picks how the tail is written."""
    b = NetBuilder(5, opset=17)  # (HardSwish: opset 14)
    y = b.conv("x", 8, 16)
    if kind == "silu":  # torch.onnx's SiLU
        z = b.node("Mul", [y, b.node("Sigmoid", [y])])
    elif kind == "hswish_split":  # paddle2onnx's HardSwish at opset 11
        z = b.node("Mul", [y, b.node("HardSigmoid", [y], alpha=1 / 6, beta=0.5)])
    elif kind == "hswish":
        z = b.node("HardSwish", [y])
    elif kind == "scalar_chain":  # more ops, one-element constants
        z = b.node("Mul", [y, b.node("HardSigmoid", [y], alpha=0.2, beta=0.5)])
        z = b.node("Clip", [z, b.const(np.float32(-1), "lo"), b.const(np.float32(4), "hi")])
        z = b.node("Abs", [b.node("Neg", [z])])
    else:
        raise ValueError(kind)
    return b.model([("x", (1, 8, 10, 12))], [b.conv(z, 16, 8)], kind)


@pytest.mark.parametrize("kind", ["silu", "hswish_split", "hswish", "scalar_chain"])
def test_tail_becomes_one_lookup_with_the_same_bits(kind):
    model = _silu_net(kind)
    x = _x((1, 8, 10, 12))
    on, off = _same_bits(model, x)
    assert _steps(on) == {"Fp16Table": 1}, on.meta["program"]
    assert _activation_commands(on) == 0
    if kind == "silu":  # the sigmoid ran on the DV700 before: a command less, same bits
        assert _activation_commands(off) == 1
        assert on.meta["stats"]["commands"] == off.meta["stats"]["commands"] - 1
    ref = ort_reference(model, {"x": x})[0]
    with Net(on, SIM) as dev:
        y = dev.run(x)[on.meta["outputs"][0]["name"]]
    assert np.abs(y - ref).max() <= 1e-3 + 1e-2 * np.ptp(ref)


def test_report_and_analysis_name_the_lookup():
    on = compile(_silu_net("silu"), golden=False)
    rows = [r for r in on.meta["report"] if r["type"] in ("Sigmoid", "Mul")]
    assert len(rows) == 2 and all(r["where"] == "cpu" and "table lookup" in r["detail"]
                                  for r in rows)
    (step,) = [s for s in on.meta["program"] if s["kind"] == "cpu"]
    assert step["attrs"]["ops"] == "device Sigmoid > Mul"


def test_identical_tails_share_one_table():
    b = NetBuilder(8)
    x = "x"
    for _ in range(3):
        y = b.conv(x, 8, 8)
        x = b.node("Mul", [y, b.node("Sigmoid", [y])])
    model = b.model([("x", (1, 8, 6, 6))], [x], "three")
    on, _ = _same_bits(model, _x((1, 8, 6, 6), 1))
    tables = {s["inputs"][1] for s in on.meta["program"] if s["kind"] == "cpu"}
    assert _steps(on) == {"Fp16Table": 3} and len(tables) == 1


@pytest.mark.parametrize("case", ["per_channel", "two_results", "cpu_source", "other_input"])
def test_tails_that_are_not_a_function_of_one_fp16_value_stay(case):
    """A per-channel constant, an intermediate read elsewhere, a source the CPU computed
    (float32, not binary16) or a second tensor operand: no table."""
    b = NetBuilder(9)
    y = b.conv("x", 8, 8)
    outs = []
    if case == "per_channel":
        z = b.node("Mul", [b.node("Sigmoid", [y]),
                           b.const(np.linspace(0.5, 2, 8, dtype=np.float32).reshape(1, 8, 1, 1))])
        z = b.node("Mul", [y, z])
    elif case == "two_results":
        s = b.node("HardSigmoid", [y], alpha=1 / 6, beta=0.5)
        z = b.node("Mul", [y, s])
        outs.append(b.conv(s, 8, 8))
    elif case == "cpu_source":
        y = b.node("Exp", [b.node("Neg", ["x"])])  # computed on the CPU
        z = b.node("Mul", [y, b.node("HardSigmoid", [y])])
    else:
        z = b.node("Mul", [b.node("HardSigmoid", [y]), "x"])
    model = b.model([("x", (1, 8, 6, 6))], [b.conv(z, 8, 8), *outs], case)
    on, _ = _same_bits(model, _x((1, 8, 6, 6), 2, 1.0))
    assert "Fp16Table" not in _steps(on)


def test_yolo_like_network_loses_every_sigmoid_command():
    from .realistic_nets import NETWORKS, input_of

    build, _ = NETWORKS["yolov8n"]
    model = build(96)
    on, off = _same_bits(model, input_of("yolov8n")[:, :, :96, :96])
    assert _activation_commands(off) == 57 and _activation_commands(on) == 0
    assert _steps(on) == {"Fp16Table": 57}
    assert len({s["inputs"][1] for s in on.meta["program"] if s["kind"] == "cpu"}) == 1


def test_lookup_kernel_against_numpy():
    rng = np.random.default_rng(3)
    table = rng.standard_normal(1 << 16).astype(np.float32)
    x16 = rng.integers(0, 1 << 16, size=(2, 3, 5, 7), dtype=np.uint16).view(np.float16)
    x16[np.isnan(x16)] = np.float16(np.nan)  # (device tensors hold the canonical NaN)
    x = x16.astype(np.float32)
    want = table[x16.view(np.uint16).astype(np.int64)]
    (got,) = run_op("Fp16Table", [x, table], {})
    assert got.dtype == np.float32 and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    # the result keeps its operand's memory order, as an element-wise ufunc's does
    xt = x.transpose(0, 2, 3, 1).copy().transpose(0, 3, 1, 2)
    (got,) = run_op("Fp16Table", [xt, table], {})
    assert got.strides == xt.strides and np.array_equal(got, want)
    # a value that is not binary16 is rounded to nearest even first
    (got,) = run_op("Fp16Table", [np.float32([1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11]), table], {})
    assert np.array_equal(got, table[[0x3C00, 0x3C02]])


def test_silu_table_is_silu():
    """The table of SiLU against float64 SiLU of every finite binary16 value y: the device's
    sigmoid s is stored in binary16 (within one binary16 ulp of the exact sigmoid) and the
    product y * s is exact in float32, so the entry is within |y| * ulp16(s) of y / (1 + e^-y)."""
    on = compile(_silu_net("silu"), golden=False)
    (step,) = [s for s in on.meta["program"] if s["kind"] == "cpu"]
    with Net(on, SIM) as dev:
        table = dev.constants[step["inputs"][1]]
    y = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float64)
    fin = np.isfinite(y)
    with np.errstate(all="ignore"):
        s = 1 / (1 + np.exp(-y))
        ulp = np.spacing(s.astype(np.float16)).astype(np.float64)
        err = np.abs(table.astype(np.float64) - y * s)
    assert np.all(err[fin] <= np.abs(y[fin]) * ulp[fin])
    assert np.all((err[fin] == 0) | (np.abs(y[fin]) > 0))
    assert np.isnan(table[np.isnan(y)]).all()
    assert table[0x7C00] == np.inf and np.isnan(table[0xFC00])  # inf * 1, -inf * 0


def test_a_damaged_table_is_refused():
    with pytest.raises(ModelError) as e:
        run_op("Fp16Table", [np.zeros(4, np.float32), np.zeros(100, np.float32)], {})
    assert e.value.field == "table"


def test_cli_no_tables(tmp_path, capsys):
    import onnx

    from dvsdk.cli import compile as cli
    from dvsdk.netfile import read

    src = tmp_path / "m.onnx"
    onnx.save(_silu_net("silu"), src)
    for flag, want in (([], 1), (["--no-tables"], 0)):
        out = tmp_path / f"m{len(flag)}.bin"
        assert cli.main([str(src), "-o", str(out), "--no-golden", "-q", *flag]) == 0
        assert _steps(read(out)).get("Fp16Table", 0) == want


def test_a_model_cannot_name_the_compiler_s_own_op():
    """``Fp16Table`` is ours (netbin.md), not ONNX's: a model that uses it is refused,
    and the README's supported-ops table leaves it out."""
    b = NetBuilder(5)
    y = b.node("Fp16Table", [b.conv("x", 8, 8), b.const(np.zeros(65536, np.float32), "t")])
    with pytest.raises(ModelError) as e:
        compile(b.model([("x", (1, 8, 6, 6))], [y], "own_op"), golden=False)
    assert "Fp16Table" in str(e.value)


def test_making_a_table_warns_about_nothing():
    """The table covers every binary16 input, signalling NaNs and infinities included:
    compiling must not spill numpy's floating-point warnings on the user."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        net = compile(_silu_net("silu"), golden=False)
    assert _steps(net)["Fp16Table"] == 1
