"""Execution: process, schedule/wait, host access while scheduled, graphs interleaving on
one device, node callbacks in dependency order, graph parameters, perf from the device's
own timing, and export to a net.bin that dvsdk-run and dvsdk.load run."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx

from .conftest import ROOT

F32 = vx.Type.FLOAT32
WO, RO = vx.Accessor.WRITE_ONLY, vx.Accessor.READ_ONLY
S = vx.Status


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


@pytest.fixture
def ctx(device):
    with vx.Context(device) as c:
        yield c


def filled(ctx, data, dtype=F32):
    data = np.asarray(data, np.float32)
    t = vx.Tensor(ctx, data.shape, dtype)
    t.copy_patch(data, WO)
    return t


def chain(ctx, scale=2.0):
    """x -> conv 1x1 (times scale) -> relu -> y, plus a non-virtual middle tensor."""
    g = ctx.graph()
    x = filled(ctx, np.arange(-8, 8, dtype=np.float32).reshape(4, 4, 1, 1))
    mid = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    y = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    a = vx.convolution_layer(g, x, filled(ctx, np.full((1, 1, 1, 1), scale)), None,
                             vx.ConvolutionParams(), mid)
    b = vx.activation_layer(g, mid, vx.ActivationFunction.RELU, 0, 0, y)
    return g, x, mid, y, a, b


def test_process_and_schedule_wait_give_the_same_results(ctx):
    g, x, mid, y, _, _ = chain(ctx)
    assert g.process() == S.SUCCESS
    first = y.copy_patch()
    assert np.array_equal(first, np.maximum(2 * x.copy_patch(), 0))
    assert np.array_equal(mid.copy_patch(), 2 * x.copy_patch())
    assert g.schedule() == S.SUCCESS
    assert g.state == vx.GraphState.RUNNING
    assert g.schedule() == S.ERROR_GRAPH_SCHEDULED            # one in flight per graph
    assert g.verify() == S.ERROR_GRAPH_SCHEDULED
    assert g.wait() == S.SUCCESS and g.state == vx.GraphState.COMPLETED
    assert np.array_equal(y.copy_patch(), first)
    assert g.wait() == S.FAILURE                              # nothing scheduled


def test_host_access_refused_while_scheduled(ctx):
    g, x, mid, y, _, _ = chain(ctx)
    assert g.schedule() == S.SUCCESS
    for t in (y, mid):
        with pytest.raises(vx.VxError) as e:
            t.copy_patch()                                    # the graph writes it
        assert e.value.status == S.ERROR_GRAPH_SCHEDULED and "wait()" in str(e.value)
    with pytest.raises(vx.VxError):
        x.copy_patch(np.zeros((4, 4, 1, 1), np.float32), WO)  # the graph reads it
    with pytest.raises(vx.VxError):
        y.view((0, 0, 0, 0), (2, 2, 1, 1)).copy_patch()        # a view of it, too
    with pytest.raises(vx.VxError):                           # its weights too
        g.nodes[0]._values[1].copy_patch(np.zeros((1, 1, 1, 1), np.float32), WO)
    assert g.nodes[0].set_parameter_by_index(0, y) == S.ERROR_GRAPH_SCHEDULED
    assert x.copy_patch().shape == (4, 4, 1, 1)               # read while read: allowed
    assert g.wait() == S.SUCCESS
    assert y.copy_patch().max() == 14
    x.copy_patch(np.zeros((4, 4, 1, 1), np.float32), WO)


def test_two_graphs_interleave_on_one_device(ctx):
    g1, x1, _, y1, _, _ = chain(ctx, 2.0)
    g2, x2, _, y2, _, _ = chain(ctx, 3.0)
    x2.copy_patch(np.ones((4, 4, 1, 1), np.float32), WO)
    assert g1.schedule() == S.SUCCESS
    assert g2.schedule() == S.SUCCESS
    assert g2.wait() == S.SUCCESS                             # waited out of order
    assert g1.wait() == S.SUCCESS
    assert np.array_equal(y1.copy_patch(), np.maximum(2 * x1.copy_patch(), 0))
    assert np.all(y2.copy_patch() == 3)
    for _ in range(2):                                        # and again, alternating
        assert g1.schedule() == S.SUCCESS and g2.schedule() == S.SUCCESS
        assert g1.wait() == S.SUCCESS and g2.wait() == S.SUCCESS
    assert np.all(y2.copy_patch() == 3)


def test_callbacks_in_dependency_order_with_outputs_readable(ctx):
    g = ctx.graph()
    x = filled(ctx, np.ones((4, 4, 2, 1)))
    ts = [vx.Tensor(ctx, (4, 4, 2, 1), F32) for _ in range(4)]
    # created out of order: c reads b's output, b reads a's; d is independent
    c = vx.activation_layer(g, ts[1], vx.ActivationFunction.LINEAR, 1, 1, ts[2])
    b = vx.activation_layer(g, ts[0], vx.ActivationFunction.LINEAR, 1, 1, ts[1])
    a = vx.activation_layer(g, x, vx.ActivationFunction.LINEAR, 1, 1, ts[0])
    d = vx.activation_layer(g, x, vx.ActivationFunction.ABS, 0, 0, ts[3])
    seen = []

    def record(node):
        out = node._values[-1]
        seen.append((node.name, float(out.copy_patch().max())))
        return vx.Action.CONTINUE

    for n in (a, b, c, d):
        assert n.assign_callback(record) == S.SUCCESS
    assert a.assign_callback(record) == S.ERROR_NOT_SUPPORTED  # one at a time
    assert g.process() == S.SUCCESS
    names = [s[0] for s in seen]
    assert names.index(a.name) < names.index(b.name) < names.index(c.name)
    assert dict(seen) == {a.name: 2.0, b.name: 3.0, c.name: 4.0, d.name: 1.0}


def test_abandon_stops_the_graph(ctx):
    g = ctx.graph()
    x = filled(ctx, np.ones((4, 4, 1, 1)))
    t1, t2 = vx.Tensor(ctx, (4, 4, 1, 1), F32), vx.Tensor(ctx, (4, 4, 1, 1), F32)
    a = vx.activation_layer(g, x, vx.ActivationFunction.LINEAR, 1, 1, t1)
    b = vx.activation_layer(g, t1, vx.ActivationFunction.LINEAR, 1, 1, t2)
    called = []
    a.assign_callback(lambda n: vx.Action.ABANDON)
    b.assign_callback(lambda n: called.append(n))
    assert g.process() == S.ERROR_GRAPH_ABANDONED
    assert g.state == vx.GraphState.ABANDONED and called == []
    assert np.all(t1.copy_patch() == 2) and np.all(t2.copy_patch() == 0)   # b never landed
    a.assign_callback(None)
    assert g.process() == S.SUCCESS and np.all(t2.copy_patch() == 3) and len(called) == 1


def test_graph_parameters_rebind_inputs_and_outputs_without_reverifying(ctx):
    g, x, _, y, a, b = chain(ctx)
    assert g.add_parameter(a.parameter(0)) == S.SUCCESS
    assert g.add_parameter(b.parameter(4)) == S.SUCCESS
    assert g.num_parameters == 2
    assert g.verify() == S.SUCCESS
    net = g._net
    x2 = filled(ctx, np.full((4, 4, 1, 1), 5.0))
    y2 = vx.Tensor(ctx, (4, 4, 1, 1), F32)
    assert g.set_parameter_by_index(0, x2) == S.SUCCESS
    assert g.set_parameter_by_index(1, y2) == S.SUCCESS
    assert g.verified and g._net is net                        # no recompilation
    assert g.process() == S.SUCCESS
    assert np.all(y2.copy_patch() == 10) and g.parameter(0).ref is x2
    big = filled(ctx, np.full((6, 6, 1, 1), 4.0))
    assert g.set_parameter_by_index(0, big.view((1, 1, 0, 0), (5, 5, 1, 1))) == S.SUCCESS
    assert g.verified and g.process() == S.SUCCESS and np.all(y2.copy_patch() == 8)
    x3 = filled(ctx, np.full((2, 2, 1, 1), 1.0))               # another shape: re-verify,
    assert g.set_parameter_by_index(0, x3) == S.SUCCESS and not g.verified
    assert g.process() == S.ERROR_INVALID_DIMENSION            # which the middle refuses
    assert f"{a.name!r} parameter #4" in str(g.error)
    assert g.set_parameter_by_index(0, x2) == S.SUCCESS
    assert g.process() == S.SUCCESS and np.all(y2.copy_patch() == 10)
    assert g.set_parameter_by_index(5, x3) == S.ERROR_INVALID_PARAMETERS


def test_perf_comes_from_the_device_timing(ctx):
    g = ctx.graph()
    x = filled(ctx, np.random.default_rng(0).standard_normal((16, 16, 8, 1)))
    y = vx.Tensor(ctx, (14, 14, 16, 1), F32)
    z = vx.Tensor(ctx, (14, 14, 16, 1), F32)
    conv = vx.convolution_layer(g, x, filled(ctx, np.ones((3, 3, 8, 16)) * 0.1), None,
                                vx.ConvolutionParams(), y)
    soft = vx.softmax_layer(g, y, z)
    for _ in range(3):
        assert g.process() == S.SUCCESS
    device_us = g._net.last_run.device_us                      # the simulator's cycle model
    p = conv.perf
    assert p.num == 3 and p.min <= p.avg <= p.max and p.sum == pytest.approx(3 * p.avg, abs=3)
    assert p.tmp == round(device_us * 1e3)                     # the only hardware node
    assert soft.perf.num == 3 and soft.perf.tmp > 0            # a CPU step: host time
    gp = g.perf
    assert gp.num == 3 and gp.tmp >= p.tmp + soft.perf.tmp
    assert "runs" in str(gp)


def test_perf_shares_a_segment_among_its_nodes(ctx):
    g = ctx.graph()
    x = filled(ctx, np.random.default_rng(1).standard_normal((16, 16, 8, 1)))
    mid = g.virtual_tensor((16, 16, 16, 1), F32)
    y = vx.Tensor(ctx, (8, 8, 16, 1), F32)
    a = vx.convolution_layer(g, x, filled(ctx, np.ones((3, 3, 8, 16)) * 0.1), None,
                             vx.ConvolutionParams(padding_x=1, padding_y=1), mid)
    b = vx.pooling_layer(g, mid, vx.PoolingType.AVG, 2, 2, 0, 0, vx.RoundingType.FLOOR, y)
    assert g.process() == S.SUCCESS
    total = g._net.last_run.device_us * 1e3
    assert a.perf.tmp > 0 and b.perf.tmp > 0
    assert a.perf.tmp + b.perf.tmp == pytest.approx(total, abs=2)
    # the conv hands its output to the pool in the unified buffer: one command
    # (dvsdk.compiler.chain), whose time its nodes share alike
    assert [len(s) for s in g._net.meta["program"][0]["command_sources"]] == [2]
    assert a.perf.tmp == pytest.approx(b.perf.tmp, abs=2)


def test_export_runs_with_dvsdk_load_and_dvsdk_run(ctx, device, tmp_path):
    g, x, mid, y, _, _ = chain(ctx)
    x.name, y.name, mid.name = "image", "score", "middle"
    assert g.process() == S.SUCCESS
    path = tmp_path / "vx.bin"
    assert g.export(path) == path.stat().st_size
    feed = x.copy_patch().T                                    # canonical NCHW
    with dvsdk.load(path, device) as net:
        assert [i["name"] for i in net.inputs] == ["image"]
        out = net.run({"image": feed})
        assert np.array_equal(out["score"], y.copy_patch().T)
        assert net.selftest()["passed"]
    np.save(tmp_path / "x.npy", feed)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("DVSDK_DEVICE", None)
    proc = subprocess.run([sys.executable, "-m", "dvsdk.cli.run", str(path), "--input",
                           f"image={tmp_path / 'x.npy'}", "--save", str(tmp_path / "o.npz"),
                           "-q"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with np.load(tmp_path / "o.npz") as saved:
        got = {k: saved[k] for k in saved.files}
    assert any(np.array_equal(v.reshape(-1), y.copy_patch().T.reshape(-1))
               for v in got.values()), list(got)
