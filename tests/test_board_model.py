"""The board's Cortex-A53 cost model (dvsdk/runtime/board_model.py) and ``last_run.board``.

Known answers: each expected figure is worked out here from the table's constants
(1200 MHz, 4 GB/s, 100 cycles a bytecode, ...), so a change of a constant or of the
formula shows as a failure to re-derive, not as drift.  Then what runs record: every CPU
step, pack, unpack and sync of a run on ``sim://`` carries the work the model needs, on
both CPU-step paths and with or without the compiled loops, and a run's prediction is
the sum of its parts and the same for every run of the same input.
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest

from dvsdk import native
from dvsdk.compiler.build import compile as compile_model
from dvsdk.cpu.ops import KERNELS
from dvsdk.runtime import board_model as bm
from dvsdk.runtime.cpusteps import Chunked
from dvsdk.runtime.net import Net

from .conftest import ROOT
from .test_cpusteps import random_net

DIGITS = ROOT / "examples" / "models" / "digits.bin"
MHZ = 1200.0
pytestmark = pytest.mark.filterwarnings("ignore::dvsdk.native.NativeFallbackWarning")


def test_the_table_names_every_cpu_kernel_once():
    """Every op a CPU step can run has its row: none falls to the default silently."""
    names = [op for _, _, ops in bm.KINDS.values() for op in ops.split()]
    assert len(names) == len(set(names))
    assert set(KERNELS) == set(names)
    assert bm.op_cost("NoSuchOp") == bm.UNKNOWN


def test_hardswish_56x56x64_on_the_compiled_path():
    """HardSwish of a 56x56x64 device tensor between two hardware segments: one pass from
    the arena's FP16 bytes to FP16 bytes."""
    n = 56 * 56 * 64                                    # 200,704 elements
    work = bm.fused_work("HardSwish", n, None)
    assert work["bytes"] == 2 * 2 * n == 802_816       # FP16 in and out
    # compute: (5 operations x 0.5 + 0.5 to float32 + 0.5 back) x n = 3.5 n cycles
    compute = 3.5 * n / MHZ                             # 585.387 us
    memory = 802_816 / 4000                             # 200.704 us at 4 GB/s
    fixed = 950 * 100 / MHZ                             # 79.167 us of Python
    assert compute > memory                             # compute-bound
    assert bm.event_us("cpu", work) == pytest.approx(fixed + compute)
    assert bm.event_us("cpu", work) == pytest.approx(664.5533, abs=1e-3)


def test_hardswish_56x56x64_on_the_numpy_path():
    """The same op through numpy on float32: seven passes over input and result."""
    x = np.zeros((1, 64, 56, 56), np.float32)
    work = bm.step_work("HardSwish", {}, [x], [x.copy()])
    n = 200_704
    assert (work["elements"], work["bytes"], work["macs"]) == (n, 8 * n, 0)
    memory = 7 * 8 * n / 4000                           # 2809.856 us: memory-bound
    compute = 2.5 * n / MHZ                             # 418.133 us
    fixed = 1100 * 100 / MHZ                            # 91.667 us
    assert bm.event_us("cpu", work) == pytest.approx(fixed + max(memory, compute))
    assert bm.event_us("cpu", work) == pytest.approx(2901.5227, abs=1e-3)
    # the first step of a CPU segment also pays the segment's set-up: 900 bytecodes
    assert bm.event_us("cpu", {**work, "enters": True}) == pytest.approx(2976.5227, abs=1e-3)
    # chunked operands count their float32 elements like arrays
    c = Chunked(np.zeros(n, np.float32), (56, 56, 64), False)
    assert bm.step_work("HardSwish", {}, [c], [c]) == work


def test_squeeze_excitation_mul_counts_the_channel_vector():
    n, c = 28 * 28 * 96, 96
    work = bm.fused_work("Mul", n, c)
    assert work["bytes"] == 2 * (2 * n + c) and work["operands"] == 2
    compute = (0.5 + 0.5 * 3) * n / MHZ                 # multiply, 2 conversions in, 1 out
    assert bm.event_us("cpu", work) == pytest.approx(950 * 100 / MHZ
                                                     + max(compute, work["bytes"] / 4000))


def test_sync_pack_and_segment_known_answers():
    nbytes = 56 * 56 * 64 * 2                           # 401,408 bytes = 6272 lines
    assert bm.sync_us(nbytes) == pytest.approx((240 * 100 + 6272 * 10) / MHZ)  # 72.267
    assert bm.sync_us(nbytes + 1) == pytest.approx((240 * 100 + 6273 * 10) / MHZ)
    # pack or unpack: 6 bytes an element, memory-bound
    assert bm.convert_us(nbytes) == pytest.approx(220 * 100 / MHZ + 6 * 200_704 / 4000)
    assert bm.convert_us(nbytes) == pytest.approx(319.3893, abs=1e-3)
    assert bm.segment_us() == pytest.approx(1850 * 100 / MHZ + 20)  # 174.167
    assert bm.run_us() == pytest.approx(1400 * 100 / MHZ)           # 116.667


def test_gemm_and_conv_count_macs():
    a = np.zeros((1, 1024), np.float32)
    w = np.zeros((1024, 1000), np.float32)
    y = np.zeros((1, 1000), np.float32)
    work = bm.step_work("Gemm", {}, [a, w, np.zeros(1000, np.float32)], [y])
    assert work["macs"] == 1_024_000
    assert work["bytes"] == 4 * (1024 + 1_024_000 + 1000 + 1000)
    # streaming the 4 MB of weights (1027.0 us) outlasts the MACs (853.3 us)
    assert bm.event_us("cpu", work) == pytest.approx(1100 * 100 / MHZ + work["bytes"] / 4000)
    assert bm.step_work("Gemm", {"transA": 1}, [a.T, w], [y])["macs"] == 1_024_000
    x = np.zeros((1, 8, 10, 10), np.float32)
    k = np.zeros((16, 4, 3, 3), np.float32)             # group 2
    out = np.zeros((1, 16, 10, 10), np.float32)
    conv = bm.step_work("Conv", {"group": 2}, [x, k], [out])
    assert conv["macs"] == 1600 * 4 * 9                  # each output: 4 channels x 3x3
    im2col = 8 * 100 * 4 * 9 * 2                         # 100 pixels x 36 taps x 2 groups
    assert conv["bytes"] == x.nbytes + k.nbytes + out.nbytes + im2col
    t = bm.step_work("ConvTranspose", {}, [x, np.zeros((8, 2, 2, 2), np.float32)],
                     [np.zeros((1, 2, 20, 20), np.float32)])
    assert t["macs"] == 800 * 2 * 2 * 2


def test_views_cost_their_python_only_and_pools_their_window():
    x = np.zeros((1, 8, 4, 4), np.float32)
    view = bm.step_work("Reshape", {}, [x, np.array([1, -1])], [x.reshape(1, -1)])
    assert view["elements"] == 0
    assert bm.event_us("cpu", view) == pytest.approx(1100 * 100 / MHZ)  # no memory term
    pool = bm.step_work("MaxPool", {"kernel_shape": [3, 3]}, [x], [x])
    assert pool["elements"] == 128 * 9


def test_params_scale_with_the_clock():
    slow = dataclasses.replace(bm.DEFAULT, cpu_mhz=600.0)
    assert bm.segment_us(slow) == pytest.approx(1850 * 100 / 600 + 20)
    work = bm.fused_work("Add", 1000, 1000)
    assert bm.event_us("cpu", work, slow) == pytest.approx(2 * bm.event_us("cpu", work))


def test_estimate_sums_the_events():
    events = [("pack", "x", 0, 5, {"bytes": 800}), ("sync", "x", 5, 1, {"bytes": 800}),
              ("device", "segment0", 6, 900, {"predicted_us": 12.5, "cycles": 3750}),
              ("sync", "y", 906, 1, {"bytes": 128}), ("cpu", "Mul m", 907, 3,
                                                      bm.fused_work("Mul", 64, 64)),
              ("unpack", "y", 910, 2, {"bytes": 128}), ("pack", "ipu", 912, 9, {})]
    b = bm.estimate(events)
    assert (b.steps, b.segments, b.syncs, b.sync_bytes, b.unmodeled) == (1, 1, 2, 928, 1)
    assert b.device_us == 12.5                          # the run's own, not its wall time
    assert b.kick_us == pytest.approx(bm.segment_us())
    assert b.sync_us == pytest.approx(bm.sync_us(800) + bm.sync_us(128))
    assert b.pack_us == pytest.approx(bm.convert_us(800))
    assert b.unpack_us == pytest.approx(bm.convert_us(128))
    assert b.run_us == pytest.approx(bm.run_us())      # once: the run's bookkeeping
    assert b.cpu_us == pytest.approx(b.cpu_steps_us + b.pack_us + b.unpack_us + b.kick_us
                                     + b.run_us)
    assert bm.estimate([]).run_us == 0.0
    assert b.total_us == pytest.approx(b.device_us + b.cpu_us + b.sync_us)
    assert b.fps == pytest.approx(1e6 / b.total_us)
    d = b.as_dict()
    assert d["total_us"] == b.total_us and d["device_predicted"] is True
    lines = b.lines()
    assert "(the simulator's cycle model)" in lines[1] and "Cortex-A53 at 1200 MHz" in lines[2]
    assert lines[3].startswith("  + DMA syncs") and "2 syncs" in lines[3]
    assert "(measured)" in bm.estimate(events, device_predicted=False).lines()[1]


def test_last_run_predicts_the_digits_net_on_the_board():
    with Net(DIGITS, "sim://") as net:
        x = np.zeros(net.inputs[0]["shape"], np.float32)
        net.run(x)
        st = net.last_run
        b = st.board
        net.run(x)
        assert net.last_run.board == b                  # no host timing in it
    assert b.device_predicted and b.device_us == st.device_us > 0
    assert (b.steps, b.segments, b.unmodeled) == (1, 1, 0)
    assert b.syncs == sum(1 for e in st.events if e[0] == "sync") == 2
    # the Softmax over 10 logits on the numpy path: its Python, nothing else to speak of
    assert b.cpu_steps_us == pytest.approx(2000 * 100 / MHZ + 55 * 10 / MHZ)
    assert b.kick_us == pytest.approx(bm.segment_us())
    assert b.total_us == pytest.approx(b.device_us + b.cpu_us + b.sync_us)


@pytest.mark.parametrize("seed", [0, 3])
def test_every_step_of_a_run_records_its_work(seed, monkeypatch):
    """Both CPU-step paths, with and without the compiled loops: no event the model cannot
    cost, and the compiled FP16 path never predicted slower than the reference path."""
    model, feed = random_net(seed)
    netfile = compile_model(model, golden=False)
    saved, got = native.NATIVE, {}
    for compiled in (True, False):
        monkeypatch.setattr(native, "NATIVE", saved if compiled else None)
        for mode in ("device", "unpack"):
            with Net(netfile, "sim://", cpu_steps=mode) as net:
                net.run(feed)
                net.run(feed)
                st = net.last_run
            b = st.board
            assert b.unmodeled == 0
            assert b.steps == sum(1 for s in netfile.meta["program"] if s["kind"] == "cpu")
            for kind, _, _, _, extra in st.events:
                assert kind == "device" or bm.event_us(kind, extra) is not None
            got[compiled, mode] = b
    monkeypatch.setattr(native, "NATIVE", saved)
    assert got[True, "device"].total_us <= got[False, "unpack"].total_us
    assert len({b.device_us for b in got.values()}) == 1


def test_on_a_board_the_device_time_is_the_measured_one(tmp_path):
    """uio:// (a fake board: real files, the simulator behind them): the device part is the
    measured kick-to-interrupt time and says so; the CPU's part is still the model's."""
    from .fakeboard import open_fake_device

    dev = open_fake_device(tmp_path, kick="r5")
    try:
        with Net(DIGITS, dev) as net:
            net.run(np.zeros(net.inputs[0]["shape"], np.float32))
            st = net.last_run
    finally:
        dev.close()
    b = st.board
    assert not st.device_predicted and not b.device_predicted
    assert b.device_us == st.device_us > 0
    assert "(measured)" in b.lines()[1] and "(measured)" in b.summary()
    assert b.cpu_steps_us == pytest.approx(2000 * 100 / MHZ + 55 * 10 / MHZ)  # as on sim://


@pytest.mark.skipif(sys.version_info[:2] != (3, 11),
                    reason="the constants count CPython 3.11's bytecodes (a PetaLinux 2023+ "
                    "board's); 3.12 counts others (digits' numpy step 1607, not 1766)")
def test_the_python_constants_match_the_code(tmp_path):
    """The bytecodes the model charges are the runtime's: counted again here (tests/bytecodes.py,
    as benchmarks/bench_bytecodes.py counts them: one steady run on ``uio://`` against a fake
    board of real files, DMP's R5 kick, u-dma-buf's ioctl sync): each count (with the
    runtime loop's share the constants include) between 3/4 and 3/2 of its constant.  A change that
    makes the driver or the runtime much heavier or lighter fails here: re-count and update
    the constants (and their docstring) with it."""
    from .bytecodes import count, ioctl_sync
    from .fakeboard import open_fake_device
    from .onnx_models import NetBuilder

    b = NetBuilder(5)
    y = b.conv(b.node("HardSwish", [b.conv("x", 3, 8, k=3)]), 8, 8, k=3)
    hswish = compile_model(b.model([("x", [1, 3, 12, 12])], [y], "hswish"), golden=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    with ioctl_sync(True):
        dev = open_fake_device(tmp_path, kick="r5")
        try:
            digits = count(DIGITS, np.zeros((1, 1, 16, 16), np.float32), dev)
            fused = count(hswish, x, dev)
        finally:
            dev.close()
    p = bm.DEFAULT
    loop = 370   # the runtime's loop around a hardware segment (board_model's docstring)
    measured = {
        "run_bytecodes": digits.ops["run"] - loop,
        "segment_bytecodes": digits.ops["segment"] / digits.events["segment"] + loop,
        # digits' one op is its segment's first: the step and the segment's set-up
        "step_numpy_bytecodes": (digits.ops["step (numpy)"] / digits.events["step (numpy)"]
                                 - p.cpu_segment_bytecodes),
        "step_fused_bytecodes": fused.ops["step (fused)"] / fused.events["step (fused)"],
        "convert_bytecodes": digits.ops["convert"] / digits.events["convert"],
        "sync_bytecodes": digits.ops["sync"] / digits.events["sync"],
    }
    assert (digits.events["segment"], digits.events["step (numpy)"]) == (1, 1)
    assert fused.events["step (fused)"] == 1
    for name, n in measured.items():
        assert getattr(p, name) * 3 / 4 <= n <= getattr(p, name) * 3 / 2, (name, n)


@pytest.mark.parametrize("compiled", [True, False])
def test_profile_charges_a_table_step_as_the_run_takes_it(monkeypatch, compiled):
    """An Fp16Table step runs by its gather plan with or without the compiled loops
    (cpusteps.step); the profile's 'board us' must charge that path too: without the
    extension it charged the numpy path and a segment's set-up (330.5 us for 83.0 us)."""
    from dvsdk.runtime.profile import profile_net

    from .onnx_models import NetBuilder

    if compiled and native.NATIVE is None:
        pytest.skip("the compiled loops are not built")
    if not compiled:
        monkeypatch.setattr(native, "NATIVE", None)
    b = NetBuilder(8)
    y = b.conv(b.node("HardSwish", [b.conv("x", 3, 8, k=3)]), 8, 8, k=3)
    nf = compile_model(b.model([("x", [1, 3, 12, 12])], [y], "table"), golden=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    with Net(nf, "sim://") as net:
        assert [p[0] for k, p in net.steps if k != "hw"] == ["Fp16Table"]
        net.run(x)
        rows = [r for r in profile_net(net, x) if r["where"] == "cpu"]
    n = 12 * 12 * 8                                     # the table's one 12x12x8 sweep
    want = bm.event_us("cpu", bm.fused_work("Fp16Table", n, None))
    assert [r["board_us"] for r in rows] == [pytest.approx(want)]
    assert net.last_run.board.cpu_steps_us == pytest.approx(want)


def test_profile_charges_a_step_on_a_fed_input_as_the_run_takes_it():
    """A HardSwish on the fed input (which the device also reads): the run's host holds the
    input unrounded, so cpusteps.step runs it on the numpy path (with the segment's set-up),
    not by its plan; the profile charged the plan (82.5 us for the run's 182.8)."""
    from dvsdk.runtime.profile import profile_net

    from .onnx_models import NetBuilder

    b = NetBuilder(9)
    a = b.node("HardSwish", ["x"])
    y = b.node("Add", [b.conv(a, 8, 8, k=1), b.conv("x", 8, 8, k=1)])
    nf = compile_model(b.model([("x", [1, 8, 12, 12])], [y], "fed"), golden=False)
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    with Net(nf, "sim://") as net:
        assert [p[0] for k, p in net.steps if k != "hw"][:1] == ["HardSwish"]
        net.run(x)
        cpu = [e for e in net.last_run.events if e[0] == "cpu"]
        rows = [r for r in profile_net(net, x) if r["where"] == "cpu"]
    # the numpy path's charge: its 1152 elements, read and written, plus the set-up
    hswish = np.zeros((1, 8, 12, 12), np.float32)
    want = bm.event_us("cpu", {**bm.step_work("HardSwish", {}, [hswish], [hswish]),
                               "enters": True})
    assert bm.event_us("cpu", cpu[0][4]) == pytest.approx(want)
    assert rows[0]["board_us"] == pytest.approx(want)
