"""The floors of ``benchmarks/bench_predicted.py`` (issue 27): known answers worked out by
hand on small graphs, and the property that makes them floors, checked against the
compiler's own schedules: no network compiles to a predicted device time below them (a
check that cannot see schedules dvsdk does not make: the review that found bands and
re-mapped ops beating ``segment_floor`` is in its docstring)."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.build import compile as compile_model
from dvsdk.hw.timing import TimingParams
from dvsdk.runtime.net import Net
from tests.onnx_models import NetBuilder
from tests.realistic_nets import NETWORKS, input_of

_PATH = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_predicted.py"
_SPEC = importlib.util.spec_from_file_location("bench_predicted", _PATH)
bp = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bp)


def _io(c: int, hw: int, name: str) -> tuple[str, list[int]]:
    return (name, [1, c, hw, hw])


def conv_silu_conv():
    """x (16x32x32) -> 3x3 conv 16->16 -> SiLU (x * sigmoid x) -> 1x1 conv 16->8."""
    b = NetBuilder(seed=3)
    a = b.conv("x", 16, 16, k=3)
    s = b.node("Mul", [a, b.node("Sigmoid", [a])])
    y = b.conv(s, 16, 8, k=1)
    return b.model([_io(16, 32, "x")], [y], "conv_silu_conv")


def conv_bn_silu_conv():
    """:func:`conv_silu_conv` with a BatchNormalization between the conv and its SiLU."""
    b = NetBuilder(seed=3)
    a = b.bn(b.conv("x", 16, 16, k=3), 16)
    s = b.node("Mul", [a, b.node("Sigmoid", [a])])
    y = b.conv(s, 16, 8, k=1)
    return b.model([_io(16, 32, "x")], [y], "conv_bn_silu_conv")


def conv_relu_conv():
    """x (16x32x32) -> 3x3 conv 16->16 -> ReLU -> 1x1 conv 16->8: no CPU op."""
    b = NetBuilder(seed=4)
    a = b.node("Relu", [b.conv("x", 16, 16, k=3)])
    y = b.conv(a, 16, 8, k=1)
    return b.model([_io(16, 32, "x")], [y], "conv_relu_conv")


def test_segment_floor_known_answer_with_a_cpu_product():
    # The product of two activations cuts the graph in two segments (the CPU computes the
    # sigmoid itself: the device sends the conv's output, not the sigmoid's too).
    # Segment 1: reads x (16*32*32*2 = 32768 B), weights 16*16*9*2 + 16*2 = 4640 B, sends
    # the conv's output (32768 B): 70176 B = 4386 beats against 1024 pixels x 2 lane groups
    # x 2 blocks (16 channels, 3x3: 8 a block) = 4096 array cycles -> 4386.
    # Segment 2: reads the product (32768 B), weights 16*8*2 + 8*2 = 272 B, writes the
    # output 8*32*32*2 = 16384 B: 49424 B = 3089 beats against 1024 x 1 x 1 -> 3089.
    model = conv_silu_conv()
    assert bp.segment_floor(model) == 4386 + 3089
    # one command each at least
    assert bp.segment_floor(model, command_overhead=100) == 4386 + 3089 + 200
    # the whole-graph floors overlap the two segments' work, so they are lower
    assert bp.geometry_floor(model) < bp.segment_floor(model)


def test_a_run_result_for_the_cpu_is_not_also_counted_as_over_the_unified_buffer():
    # The batch norm joins the conv's run, so its result, not the conv's output, is what
    # the run stores: sent to the CPU once, even when it is over a 1000-byte buffer.  The
    # same two segments as above, whatever the buffer.
    model = conv_bn_silu_conv()
    assert bp.segment_floor(model) == 4386 + 3089
    assert bp.segment_floor(model, ub_size=1000) == 4386 + 3089


def test_segment_floor_known_answer_over_the_unified_buffer():
    # One segment: x 32768 B, weights 4640 + 272 B, output 16384 B = 54064 B.  With a
    # 1000-byte unified buffer the 3x3 conv's 32768-byte output cannot stay on chip: it is
    # written and read back (+65536 B: 119600 B = 7475 beats, against 4096 + 1024 array
    # cycles) by a second command (its input is that tensor).
    model = conv_relu_conv()
    assert bp.segment_floor(model) == max(54064 / 16, 4096 + 1024)
    assert bp.segment_floor(model, ub_size=1000) == 119600 / 16
    assert bp.segment_floor(model, ub_size=1000, command_overhead=100) == 119600 / 16 + 200
    assert bp.segment_floor(model, command_overhead=100) == 5120 + 100


def test_segment_roofline_known_answer():
    # The same two segments as conv_silu_conv's, with MACs at full use and no round trip:
    # segment 1: 32*32*16*16*9 = 2359296 MACs / 576 = 4096 cycles against 70176 B / 16 =
    # 4386 beats -> 4386; segment 2: 32*32*16*8 = 131072 / 576 = 227.6 against 3089 -> 3089.
    assert bp.segment_roofline(conv_silu_conv()) == 4386 + 3089
    assert bp.segment_roofline(conv_silu_conv(), command_overhead=100) == 4386 + 3089 + 200
    # one segment; the 1 MiB-over-the-buffer intermediate is not counted (bands keep it on
    # chip): max((2359296 + 131072) / 576, 54064 / 16 = 3379) = 4323.6
    assert bp.segment_roofline(conv_relu_conv()) == pytest.approx(2490368 / 576)


def test_an_add_carries_the_run_whichever_operand_the_conv_is():
    # conv -> Add(x2, conv) -> MaxPool: one run (conv, add, pool); with a 1000-byte buffer
    # the pooled result, not the conv's output, is what is over it: one segment reading
    # x (16x32x32) and x2 (16x32x32), weights 4640 B, writing the pooled 16x16x16 output.
    for swap in (False, True):
        b = NetBuilder(seed=5)
        c = b.conv("x", 16, 16, k=3)
        a = b.node("Add", ["x2", c] if swap else [c, "x2"])
        y = b.node("MaxPool", [a], kernel_shape=[2, 2], strides=[2, 2])
        model = b.model([_io(16, 32, "x"), _io(16, 32, "x2")], [y], "add_order")
        assert bp.segment_floor(model, ub_size=1000) == (32768 * 2 + 4640 + 8192) / 16, swap


def test_constant_nodes_are_constants_and_a_scale_between_cpu_ops_is_not_device_work():
    from onnx import helper

    # conv * Constant(2.0): a product with a constant (the device folds it), not a CPU
    # product of two activations: one segment, as for an initializer
    b = NetBuilder(seed=6)
    c = b.conv("x", 16, 16, k=3)
    b.nodes.append(helper.make_node("Constant", [], ["two"], value=helper.make_tensor(
        "two", 1, [1], [2.0])))
    y = b.node("Mul", [c, "two"])
    with_node = b.model([_io(16, 32, "x")], [y], "constant_node")
    assert bp.segment_floor(with_node) == (32768 + 4640 + 32768) / 16
    # attention: MatMul(q, k) (CPU) * 0.25 -> Softmax -> MatMul(., v) (CPU): the scale sits
    # between CPU ops, so it is no device segment (nothing on the device at all)
    b = NetBuilder(seed=7)
    s = b.node("Mul", [b.node("MatMul", ["q", "k"]), b.const(np.float32(0.25))])
    y = b.node("MatMul", [b.node("Softmax", [s], axis=-1), "v"])
    model = b.model([("q", [1, 4, 8]), ("k", [1, 8, 4]), ("v", [1, 4, 8])], [y], "attn")
    assert bp.segment_floor(model) == 0 and bp.segment_roofline(model, 1500) == 0


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_no_compiled_network_beats_its_floors(name):
    """The floors are lower bounds of every schedule of the modelled hardware, so of the
    compiler's: a floor above a prediction is a floor that counts what need not move."""
    build, size = NETWORKS[name]
    model = build(size)
    warnings.simplefilter("ignore")
    with Net(compile_model(model, golden=False), "sim://") as net, \
            np.errstate(all="ignore"):
        net.run(input_of(name))
        cycles = net.last_run.device_us * bp.CLOCK_MHZ
    overhead = TimingParams().command_overhead
    floors = {"floor": bp.floor(model), "geometry": bp.geometry_floor(model),
              "segment": bp.segment_floor(model, command_overhead=overhead),
              "any": bp.segment_roofline(model, command_overhead=overhead)}
    for kind, value in floors.items():
        assert value <= cycles * (1 + 1e-9), (kind, value, cycles)
    # the bound of every schedule is below the one of whole-tensor schedules
    assert floors["any"] <= floors["segment"]
