"""CPU steps in the device's layout give the reference path's bits, with one sync per
segment boundary.

Random networks mix hardware convolutions with CPU steps: element-wise ones (HardSwish,
SiLU as x*Sigmoid(x), HardSigmoid, Clip, Softsign, Add and Mul of two tensors, a
squeeze-excitation scale over channel counts that are and are not multiples of 8) and
others (Softmax over channels, a CPU-side Transpose pair), with outputs made by the
device and by the CPU, compiled with and without ``--transpose``.  Each runs four ways on
``sim://``: CPU steps in the device layout or unpacked to NCHW per op (``cpu_steps``),
with and without the compiled loops; every output must have the same bits.  The
reference path itself is checked against onnxruntime elsewhere (test_compile_nets).
"""

from __future__ import annotations

import numpy as np
import pytest

from dvsdk import native
from dvsdk.compiler.build import compile as compile_model
from dvsdk.errors import InvalidArgument
from dvsdk.hw import layout
from dvsdk.runtime.cpusteps import ELEMENTWISE
from dvsdk.runtime.net import Net

from .onnx_models import NetBuilder

pytestmark = pytest.mark.filterwarnings("ignore::dvsdk.native.NativeFallbackWarning")


def silu(b: NetBuilder, x: str) -> str:
    return b.node("Mul", [x, b.node("Sigmoid", [x])])


def se(b: NetBuilder, x: str, c: int) -> str:
    s = b.node("GlobalAveragePool", [x])
    s = b.node("Relu", [b.conv(s, c, 8, k=1)])
    s = b.node("HardSigmoid", [b.conv(s, 8, c, k=1)], alpha=1 / 6, beta=0.5)
    return b.node("Mul", [x, s])


def random_net(seed: int):
    """A chain of conv blocks with random CPU work in between, and its input."""
    rng = np.random.default_rng(seed)
    b = NetBuilder(seed)
    size = int(rng.choice([9, 12, 16]))
    cin = c = int(rng.choice([3, 8]))
    x, outs = "x", []
    for i in range(5):
        cout = int(rng.choice([5, 8, 12, 16, 20]))
        x = b.conv(x, c, cout, k=int(rng.choice([1, 3])), s=1 + int(i == 2))
        c = cout
        kind = ["hswish", "silu", "se", "mix", "clip", "softmax", "transpose"][
            int(rng.integers(7))]
        if kind == "hswish":
            x = b.node("HardSwish", [x])
        elif kind == "silu":
            x = silu(b, x)
        elif kind == "se":
            x = se(b, b.node("HardSwish", [x]), c)
        elif kind == "mix":  # Add and Mul of two CPU-made tensors of the same shape
            a, s = b.node("Softsign", [x]), silu(b, x)
            x = b.node("Add", [b.node("Mul", [a, s]), a])
        elif kind == "clip":
            x = b.node("Clip", [b.node("HardSwish", [x]), b.const(np.float32(-0.25), "lo"),
                                b.const(np.float32(1.5), "hi")])
        elif kind == "softmax":  # not element-wise: NCHW, once per segment
            x = b.node("Mul", [b.node("Softmax", [b.node("HardSwish", [x])], axis=1),
                               b.const(np.float32(3.0), "k")])
        else:
            t = b.node("Transpose", [b.node("HardSwish", [x])], perm=[0, 2, 3, 1])
            x = silu(b, b.node("Transpose", [t], perm=[0, 3, 1, 2]))
        if i in (1, 3):
            outs.append(x)  # a CPU-made output, read from the host
    outs.append(b.conv(x, c, 4, k=1))  # a device-made output
    model = b.model([("x", (1, cin, size, size))], outs, f"cpu_steps_{seed}")
    feed = np.random.default_rng(seed + 100).uniform(-1, 1, (1, cin, size, size))
    return model, feed.astype(np.float32)


def run_all_ways(netfile, feed, monkeypatch) -> dict:
    results = {}
    saved = native.NATIVE
    for compiled in (True, False):
        monkeypatch.setattr(native, "NATIVE", saved if compiled else None)
        for mode in ("device", "unpack"):
            with Net(netfile, "sim://", cpu_steps=mode) as net:
                first = net.run(feed)
                again = net.run(feed)  # warm caches, the other arena
                stats = net.last_run
            assert bits(first) == bits(again)
            results[compiled, mode] = (bits(first), stats)
    monkeypatch.setattr(native, "NATIVE", saved)
    return results


def bits(outputs: dict) -> dict:
    return {k: (v.shape, v.dtype.str, v.tobytes()) for k, v in outputs.items()}


@pytest.mark.parametrize("seed", range(8))
def test_random_networks_give_the_same_bits_every_way(seed, monkeypatch):
    model, feed = random_net(seed)
    netfile = compile_model(model, golden=False, transpose=seed % 3 == 2)
    assert any(s["kind"] == "cpu" and s["op"] in ELEMENTWISE for s in netfile.meta["program"])
    results = run_all_ways(netfile, feed, monkeypatch)
    ref = results[False, "unpack"][0]
    for key, (got, _) in results.items():
        assert got == ref, key


def _syncs(netfile, feed) -> dict:
    out = {}
    for mode in ("device", "unpack"):
        with Net(netfile, "sim://", cpu_steps=mode) as net:
            out[mode, "out"] = bits(net.run(feed))
            out[mode] = [(kind, name) for kind, name, *_ in net.last_run.events
                         if kind in ("sync", "pack", "unpack")]
    assert out["device", "out"] == out["unpack", "out"]
    return out


def test_one_sync_per_byte_range_and_segment_boundary_and_no_layout_moves(monkeypatch):
    """conv (+ its Sigmoid, a second output of the same command) -> Mul, HardSwish on the
    CPU -> conv.  Entering the segment syncs each input's bytes once (they are not
    adjacent: two ranges), leaving it syncs the one result once; nothing is unpacked to
    NCHW or packed back, the FP16 is converted element by element in place."""
    b = NetBuilder(5)
    h = b.conv("x", 12, 20, k=3)
    y = b.node("HardSwish", [silu(b, h)])
    model = b.model([("x", (1, 12, 10, 10))], [b.conv(y, 20, 8, k=1)], "one_segment")
    netfile = compile_model(model, golden=False, tables=False)  # (the steps, not a table)
    program = netfile.meta["program"]
    assert [(s["kind"], s.get("op")) for s in program] == [
        ("hw", None), ("cpu", "Mul"), ("cpu", "HardSwish"), ("hw", None)]
    sig, out = program[1]["inputs"][1], program[3]["command_outputs"][0]
    feed = np.random.default_rng(0).uniform(-1, 1, (1, 12, 10, 10)).astype(np.float32)
    import dvsdk.runtime.cpusteps as cs

    moves = []

    class Spy:  # the layout module as cpusteps sees it, counting element moves
        def __getattr__(self, fn):
            real = getattr(layout, fn)
            return lambda *a, **k: moves.append(fn) or real(*a, **k)

    monkeypatch.setattr(cs, "layout", Spy())
    ev = _syncs(netfile, feed)
    assert ev["device"] == [("pack", "x"), ("sync", "x"),                # the input
                            ("sync", h), ("sync", sig), ("unpack", h), ("unpack", sig),
                            ("pack", y), ("sync", y),                    # the segment
                            ("sync", out), ("unpack", out)]              # the output
    assert moves == []


def test_results_side_by_side_in_the_arena_are_synced_at_once():
    """Two CPU results the next command reads back to back (a concat along channels in
    place) leave the segment with one sync of both.  The setting is the compiler's
    zero-copy concat (test_compile_nets), asserted here rather than assumed: if the
    compiler ever places them otherwise, this fails and needs another way to put two CPU
    results side by side."""
    b = NetBuilder(7)
    h = b.conv("x", 8, 16, k=3)
    cat = b.node("Concat", [b.node("HardSwish", [h]), b.node("Softsign", [h])], axis=1)
    model = b.model([("x", (1, 8, 6, 6))], [b.conv(cat, 32, 8, k=1)], "side_by_side")
    netfile = compile_model(model, golden=False, multirun=False, chain=False)
    program = netfile.meta["program"]
    assert [(s["kind"], s.get("op")) for s in program] == [
        ("hw", None), ("cpu", "HardSwish"), ("cpu", "Softsign"), ("hw", None)]
    a, c = program[1]["outputs"][0], program[2]["outputs"][0]
    concat = next(r for r in netfile.meta["report"] if r["type"] == "Concat")
    assert "zero-copy" in concat["detail"]
    offsets = netfile.meta["arena"]["offsets"]
    assert offsets[c] == offsets[a] + 16 * 6 * 6 * 2  # (1, 16, 6, 6) FP16, then the next
    feed = np.random.default_rng(2).uniform(-1, 1, (1, 8, 6, 6)).astype(np.float32)
    ev = _syncs(netfile, feed)
    assert ("sync", f"{a}+{c}") in ev["device"]
    assert ("sync", a) in ev["unpack"] and ("sync", c) in ev["unpack"]


def test_a_squeeze_excitation_scale_from_the_device_is_a_channel_operand(monkeypatch):
    """The (1, C, 1, 1) scale the device computes multiplies the (1, C, H, W) tensor on
    the chunked order (C = 20: two full chunks and a partial one), with the reference's
    bits."""
    b = NetBuilder(6)
    x = b.node("HardSwish", [b.conv("x", 8, 20, k=3)])
    model = b.model([("x", (1, 8, 9, 9))], [b.conv(se(b, x, 20), 20, 8, k=1)], "se")
    netfile = compile_model(model, golden=False, tables=False)
    muls = [s for s in netfile.meta["program"] if s.get("op") == "Mul"]
    assert len(muls) == 1 and netfile.meta["tensors"][muls[0]["inputs"][1]]["shape"] == [
        1, 20, 1, 1]
    feed = np.random.default_rng(1).uniform(-1, 1, (1, 8, 9, 9)).astype(np.float32)
    import dvsdk.runtime.cpusteps as cs

    calls = []
    real = cs._run_chunked
    monkeypatch.setattr(cs, "_run_chunked", lambda op, *a: calls.append(op) or real(op, *a))
    # the compiled loop (FP16 to FP16, one value per channel), then the general chunked path
    with Net(netfile, "sim://") as net:
        net.run(feed)
        plans = [p for p in net._fused.values() if p]
    if native.NATIVE is not None:
        assert [(p.code, p.per_channel) for p in plans] == [(cs.FUSED["HardSwish"], False),
                                                            (cs.FUSED["Mul"], True)]
        assert calls.count("Mul") == 0
    before = calls.count("Mul")  # (0 with the compiled loops, 1 without: DVSDK_NATIVE=0)
    monkeypatch.setattr(native, "NATIVE", None)
    _syncs(netfile, feed)
    assert calls.count("Mul") == before + 1


def test_unknown_cpu_steps_mode_is_refused(monkeypatch):
    model, _ = random_net(0)
    netfile = compile_model(model, golden=False)
    with pytest.raises(InvalidArgument) as e:
        Net(netfile, "sim://", cpu_steps="fast")
    assert e.value.field == "cpu_steps"
    monkeypatch.setenv("DVSDK_CPU_STEPS", "unpack")
    with Net(netfile, "sim://") as net:
        assert net.cpu_steps == "unpack"


def test_dvsdk_load_takes_cpu_steps_as_the_readme_says(monkeypatch):
    """``dvsdk.load(..., cpu_steps="unpack")`` (README, "One inference", step 4)."""
    import dvsdk

    monkeypatch.delenv("DVSDK_CPU_STEPS", raising=False)
    model, _ = random_net(0)
    netfile = compile_model(model, golden=False)
    with dvsdk.load(netfile, "sim://", cpu_steps="unpack") as net:
        assert net.cpu_steps == "unpack"
    with dvsdk.load(netfile, "sim://") as net:
        assert net.cpu_steps == "device"
    with pytest.raises(InvalidArgument):
        dvsdk.load(netfile, "sim://", cpu_steps="fast")


def test_one_op_segments_run_fp16_to_fp16_compiled_with_the_reference_bits(monkeypatch):
    """HardSwish and a squeeze-excitation Mul (its scale first: y_first), each alone
    between two hardware segments, go through the compiled FP16 -> FP16 loop; an input
    scaled until the device's FP16 overflows (inf, then NaN where inf meets 0 or -inf)
    gives the unpack path's bits.  The last step (it feeds the output, unrounded in both
    paths) and the step on the network's input (the host holds it unrounded) take the
    general path."""
    import dvsdk.runtime.cpusteps as cs

    b = NetBuilder(8)
    x0 = b.node("HardSwish", ["x"])                      # on the host's own input
    h = b.node("HardSwish", [b.conv(x0, 8, 20, k=3)])
    s = b.node("HardSigmoid", [b.conv(b.node("Relu", [b.conv(b.node(
        "GlobalAveragePool", [h]), 20, 8, k=1)]), 8, 20, k=1)], alpha=1 / 6, beta=0.5)
    h = b.node("Mul", [s, h])
    y = b.node("HardSwish", [b.conv(h, 20, 12, k=1)])   # the program's last step
    netfile = compile_model(b.model([("x", (1, 8, 9, 9))], [y], "fused"), golden=False,
                            tables=False)
    program = netfile.meta["program"]
    assert [s.get("op") for s in program if s["kind"] == "cpu"] == [
        "HardSwish", "HardSwish", "Mul", "HardSwish"]
    ran = []
    real = cs.run_fused
    monkeypatch.setattr(cs, "run_fused", lambda net, h, plan: ran.append(
        plan.label.split(" ")[0]) or real(net, h, plan))
    for scale in (1.0, 3e4):
        feed = (np.random.default_rng(3).uniform(-1, 1, (1, 8, 9, 9)) * scale).astype(
            np.float32)
        got = {}
        for mode in ("device", "unpack"):
            with Net(netfile, "sim://", cpu_steps=mode) as net:
                got[mode] = bits(net.run(feed))
                if mode == "device":
                    plans = dict(net._fused)
        assert got["device"] == got["unpack"]
    if native.NATIVE is None:
        return
    assert ran == ["HardSwish", "Mul"] * 2  # per scale: not the first step, not the last
    mul = next(p for p in plans.values() if p and p.code == cs.FUSED["Mul"])
    assert mul.per_channel and mul.y_first
    assert plans[len(program) - 1] is False


def test_a_fused_result_overlapping_its_operand_is_computed_aside(monkeypatch):
    """The planner never lets a CPU step's result meet its operands, so the fused loop
    writes straight into the arena; a hand-made net.bin whose result overlaps its operand
    (here shifted by 64 bytes, where an in-place pass would read values it has just
    overwritten) gets the result computed aside first, as the general path does: the
    bytes the step stores are those of the unpack path."""
    b = NetBuilder(5)
    h = b.node("HardSwish", [b.conv("x", 8, 16, k=3)])
    y = b.conv(h, 16, 8, k=1)
    netfile = compile_model(b.model([("x", (1, 8, 20, 20))], [y], "overlap"), golden=False)
    feed = np.random.default_rng(5).uniform(-2, 2, (1, 8, 20, 20)).astype(np.float32)
    with Net(netfile, "sim://") as net:
        net.run(feed)
        plan = next(p for p in net._fused.values() if p)
        assert plan.in_place
    n = 2 * 20 * 20 * 16
    stored = {}
    real = Net._step

    def step(net, hd, block):  # what the CPU step stored, read back right after it
        kind = net.steps[hd.pc][0]
        done = real(net, hd, block)
        if kind == "cpu":
            off = net.tensors[h]["device"]["offset"]
            hd.ctx.arena.sync_for_cpu(off, n)
            stored[net.cpu_steps] = hd.ctx.arena.read(off, n)
        return done

    monkeypatch.setattr(Net, "_step", step)
    for mode in ("device", "unpack"):
        with Net(netfile, "sim://", cpu_steps=mode) as net:
            dev = net.tensors[h]["device"]
            saved, dev["offset"] = dev["offset"], net.tensors[plan.x]["device"]["offset"] + 64
            net._fused.clear()  # (the plans are made at load: made again after the change)
            try:  # (the file is checked when loaded: the overlap is made after)
                assert dev["offset"] + n <= net.arena.size
                net.run(feed)
                if mode == "device" and native.NATIVE is not None:
                    assert not next(p for p in net._fused.values() if p).in_place
            finally:
                dev["offset"] = saved
    assert stored["device"].tobytes() == stored["unpack"].tobytes()


def test_stepping_one_op_a_call_runs_one_op_and_the_segment_loop_the_same_ops(monkeypatch):
    """``Run.advance`` runs a CPU segment's steps in one call; a caller stepping the program
    itself (dvsdk.qa.analyze) gets one op per ``net._step`` call, each result there after
    its own call, and the same outputs as the reference path (CPU steps unpacked per op)."""
    from dvsdk.runtime.handle import Run

    model, feed = random_net(5)
    netfile = compile_model(model, golden=False)
    kinds = [s["kind"] for s in netfile.meta["program"]]
    assert any(a == b == "cpu" for a, b in zip(kinds, kinds[1:]))  # a segment of 2+ ops
    with Net(netfile, "sim://", cpu_steps="unpack") as net:
        want = bits(net.run(feed))
    with Net(netfile, "sim://") as net:
        assert bits(net.run(feed)) == want
        ctx = net._contexts[0]
        h = Run(net, ctx, 10.0)
        for name, arr in net._feeds(feed).items():
            h.host[name] = arr
            if net._dev(name) is not None:
                net._upload(ctx, name, arr, h.stats)
        for pc, (kind, payload) in enumerate(net.steps):
            assert h.pc == pc
            net._step(h, block=True)
            if kind == "cpu" and payload[3][0] and net._dev(payload[3][0]) is None:
                assert payload[3][0] in h.host
        got = {spec["name"]: np.asarray(net._value(h, spec["tensor"]))
               for spec in net.outputs}
    ref = {k: v[2] for k, v in want.items()}
    for name, v in got.items():
        spec = next(s for s in net.outputs if s["name"] == name)
        assert np.asarray(v, np.float32).reshape(spec["shape"]).tobytes() == ref[name]
