"""The normalization layer and the DV700's LRN unit (firmware_spec/lrn.md): the compiler
hook, where dvsdk.vx places a layer and why, and the error bound measured on the simulator
against the exact formula written here."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx
from dvsdk.compiler.build import Options, compile_graph
from dvsdk.compiler.fold import infer_and_fold
from dvsdk.compiler.ir import Graph, Op, Tensor
from dvsdk.compiler.simplify import optimize
from dvsdk.vx import lrn

from .conftest import ROOT

F32 = vx.Type.FLOAT32
WO = vx.Accessor.WRITE_ONLY
ACROSS = vx.NormType.ACROSS_MAPS


def caffe_lrn(x: np.ndarray, axis: int, n=5, alpha=1e-4, beta=0.75) -> np.ndarray:
    x = np.asarray(x, np.float64)
    x = np.moveaxis(x, axis, 0)
    r = n // 2
    sq = np.pad(x * x, [(r, r)] + [(0, 0)] * (x.ndim - 1))
    s = sum(sq[d: d + x.shape[0]] for d in range(n))
    return np.moveaxis(x / (1 + alpha / n * s) ** beta, 0, axis)


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


# -- the compiler hook --------------------------------------------------------------------

def _lrn_ir(c: int, **attrs) -> Graph:
    t = {"x": Tensor("x", (1, c, 4, 5), np.float32), "y": Tensor("y")}
    a = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0, **attrs}
    return Graph(t, [Op("LRN", "norm", ["x"], ["y"], a)], ["x"], ["y"])


@pytest.mark.parametrize("c,attrs,where,why", [
    (16, {"dvsdk_target": "hw"}, "hw", "LRN (piecewise linear)"),
    (16, {}, "cpu", "LRN has no hardware mapping"),
    (16, {"dvsdk_target": "hw", "alpha": 2e-4}, "cpu", "fixed parameters"),
    (8, {"dvsdk_target": "hw"}, "cpu", "C % 16 == 0"),
    (16, {"dvsdk_target": "cpu"}, "cpu", "target CPU")])
def test_compiler_places_lrn_by_its_attribute(device, c, attrs, where, why):
    net = compile_graph(optimize(infer_and_fold(_lrn_ir(c, **attrs))), Options(golden=False))
    (entry,) = net.meta["report"]
    assert entry["where"] == where and why in entry["detail"]
    x = np.random.default_rng(0).uniform(-20, 20, (1, c, 4, 5)).astype(np.float32)
    with dvsdk.load(net, device) as loaded:
        y = loaded.run({"x": x})["y"]
    err = np.abs(y / caffe_lrn(x, 1, alpha=attrs.get("alpha", 1e-4)) - 1).max()
    assert err <= (lrn.REL_ERROR if where == "hw" else 1e-6)


def test_cpu_target_keeps_a_fusable_op_off_the_device(device):
    t = {"x": Tensor("x", (1, 8, 6, 6), np.float32),
         "w": Tensor("w", const=np.ones((8, 8, 3, 3), np.float32) * 0.1),
         "c": Tensor("c"), "y": Tensor("y")}
    ops = [Op("Conv", "conv", ["x", "w"], ["c"], {"kernel_shape": [3, 3]}),
           Op("Relu", "relu", ["c"], ["y"], {"dvsdk_target": "cpu"})]
    net = compile_graph(optimize(infer_and_fold(Graph(t, ops, ["x"], ["y"]))),
                        Options(golden=False))
    where = {e["op"]: e["where"] for e in net.meta["report"]}
    assert where == {"conv": "hw", "relu": "cpu"}             # not fused into the conv run


# -- where dvsdk.vx places a normalization layer ----------------------------------------

def _norm_graph(ctx, x_dims=(6, 5, 16, 1), dtype=F32, before=None, **norm):
    g = ctx.graph()
    x = vx.Tensor(ctx, x_dims, dtype)
    src = x
    if before is not None:
        src = g.virtual_tensor(x_dims, dtype)
        before(g, x, src)
    y = vx.Tensor(ctx, x_dims, dtype)
    args = {"type": ACROSS, "size": 5, "alpha": 1e-4, "beta": 0.75, **norm}
    node = vx.normalization_layer(g, src, args["type"], args["size"], args["alpha"],
                                  args["beta"], y)
    return g, x, y, node


@pytest.mark.parametrize("declared,where", [((-57, 57), "DV700"), ((-58, 10), "CPU"),
                                            (None, "CPU")])
def test_declared_range_decides(device, declared, where):
    with vx.Context(device) as ctx:
        g, x, _, node = _norm_graph(ctx)
        if declared:
            x.set_value_range(*declared)
        assert g.verify() == vx.Status.SUCCESS, g.error
        assert node.where == where
        if where == "CPU":
            assert "firmware_spec/lrn.md" in node.placement[0]["detail"]


def test_range_through_a_bounded_activation_and_a_convolution(device):
    with vx.Context(device) as ctx:
        def relu6(g, x, out):
            vx.activation_layer(g, x, vx.ActivationFunction.BRELU, 6.0, 0, out)
        g, _, _, node = _norm_graph(ctx, before=relu6)
        assert g.verify() == vx.Status.SUCCESS and node.where == "DV700"

        def conv(g, x, out):                 # U8 input, |w| sum 16 * 0.01: |out| <= 40.8
            w = vx.Tensor(ctx, (1, 1, 16, 16), vx.Type.UINT8)
            w.copy_patch(np.ones((1, 1, 16, 16)), WO)
            vx.convolution_layer(g, x, w, None, vx.ConvolutionParams(), out)
        g2, x2, _, node2 = _norm_graph(ctx, dtype=vx.Type.UINT8, before=conv)
        assert g2.verify() == vx.Status.SUCCESS and node2.where == "CPU"   # 255 * 16
        x2.set_value_range(0, 3)                                           # 48 <= 57.2
        assert g2.verify() == vx.Status.SUCCESS and node2.where == "DV700"


@pytest.mark.parametrize("norm,dims,target,why", [
    ({"type": vx.NormType.SAME_MAP}, (6, 5, 16, 1), "ANY", "SAME_MAP"),
    ({"size": 3}, (6, 5, 16, 1), "DV700", "n=5, alpha=0.0001, beta=0.75 fixed"),
    ({"alpha": 2e-4}, (6, 5, 16, 1), "DV700", "fixed"),
    ({}, (6, 5, 8, 1), "DV700", "#IFM % 16"),
    ({}, (6, 5, 16, 2), "DV700", "batch"),
    ({}, (6, 5, 16, 1), "CPU", "target CPU")])
def test_layers_the_unit_cannot_take_run_exactly_on_the_cpu(device, norm, dims, target, why):
    with vx.Context(device) as ctx:
        g, x, y, node = _norm_graph(ctx, x_dims=dims, **norm)
        node.set_target(target)
        data = np.random.default_rng(1).uniform(-3, 3, dims).astype(np.float32)
        x.copy_patch(data, WO)
        assert g.process() == vx.Status.SUCCESS, g.error
        assert node.where == "CPU" and why in node.placement[0]["detail"]
        if norm.get("type") != vx.NormType.SAME_MAP:
            want = caffe_lrn(data, 2, norm.get("size", 5), norm.get("alpha", 1e-4))
            assert np.abs(y.copy_patch() - want).max() < 1e-6


def test_target_dv700_uses_the_unit_beyond_the_bound(device):
    with vx.Context(device) as ctx:
        g, x, y, node = _norm_graph(ctx)
        node.set_target(vx.Target.DV700)
        data = np.full((6, 5, 16, 1), 300.0, np.float32)           # s = 450 000: far out
        x.copy_patch(data, WO)
        assert g.process() == vx.Status.SUCCESS and node.where == "DV700"
        err = np.abs(y.copy_patch() / caffe_lrn(data, 2) - 1).max()
        assert err > 0.05                                          # the curve is off there


# -- the measured bound ------------------------------------------------------------------------

def _sweep(ctx, s_values: np.ndarray, width: int = 1500) -> float:
    """Largest relative error of the unit for windows whose sum of squares is each s
    (in rows of ``width`` samples: the DV700 takes W <= 2047)."""
    worst = 0.0
    for start in range(0, s_values.size, width):
        part = s_values[start:start + width]
        x = np.zeros((part.size, 1, 16, 1), np.float32)
        x[:, 0, 7, 0] = np.sqrt(part)            # channel 7 alone: its window sum is v^2
        g, t, y, node = _norm_graph(ctx, x_dims=x.shape)
        node.set_target(vx.Target.DV700)
        t.copy_patch(x, WO)
        assert g.process() == vx.Status.SUCCESS and node.where == "DV700"
        got, want = y.copy_patch()[:, 0, 7, 0], caffe_lrn(x, 2)[:, 0, 7, 0]
        keep = want >= 2.0 ** -14
        worst = max(worst, float(np.abs(got[keep] / want[keep] - 1).max()))
        g.release()
    return worst


def test_measured_error_bound_holds_up_to_the_knot_and_breaks_after(device):
    with vx.Context(device) as ctx:
        inside = _sweep(ctx, np.linspace(0, lrn.SUM_SQ_MAX, 6000))
        beyond = _sweep(ctx, np.linspace(lrn.SUM_SQ_MAX, 4 * lrn.SUM_SQ_MAX, 6000))
    assert inside <= lrn.REL_ERROR
    assert inside > 0.006                    # the bound is tight: the curve's 0.69% shows
    assert beyond > 0.05                     # past the knot 4^7 the error is 5% and more


def test_lrn_md_states_the_constants_the_code_uses():
    text = (ROOT / "firmware_spec" / "lrn.md").read_text()
    k = round(math.log(lrn.SUM_SQ_MAX, 4))
    assert f"| `SUM_SQ_MAX` | 4^{k} = {lrn.SUM_SQ_MAX:,.0f} |" in text
    assert f"| `REL_ERROR` | {lrn.REL_ERROR:.1%} |" in text
    row = re.search(rf"\| 4\^{k} = {lrn.SUM_SQ_MAX:,.0f} \| ([\d.]+)% \|", text)
    assert row and float(row.group(1)) / 100 <= lrn.REL_ERROR
    assert (lrn.HW_SIZE, lrn.HW_ALPHA, lrn.HW_BETA) == (5, 1e-4, 0.75)
    assert "n = 5, alpha = 1e‑4, beta = 0.75" in text
