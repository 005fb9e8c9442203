"""Whole networks built node by node with dvsdk.vx give the same outputs on the simulator as
the same networks written in ONNX (onnx.helper, here) and compiled by dvsdk.compile, and
onnxruntime agrees with both within FP16 tolerance."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
import dvsdk.vx as vx

from .onnx_models import ort_run

F32 = vx.Type.FLOAT32
WO = vx.Accessor.WRITE_ONLY


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


class Twin:
    """Builds one network twice: an ONNX model (NCHW, OIHW) and a dvsdk.vx graph
    (OpenVX order), from the same weights."""

    def __init__(self, ctx: vx.Context, shape_nchw: tuple[int, ...], seed: int = 0) -> None:
        self.ctx, self.graph = ctx, ctx.graph()
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], {}
        self.x = vx.Tensor(ctx, shape_nchw[::-1], F32)
        self.cur, self.name, self.shape = self.x, "x", shape_nchw
        self.input_shape = shape_nchw
        self.k = 0

    def _w(self, *shape: int, scale: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def _const(self, arr: np.ndarray) -> vx.Tensor:
        t = vx.Tensor(self.ctx, arr.shape, F32)
        t.copy_patch(arr, WO)
        return t

    def _next(self, shape: tuple[int, ...], out: vx.Tensor | None = None) -> tuple[str, vx.Tensor]:
        self.k += 1
        name = f"t{self.k}"
        y = out if out is not None else self.graph.virtual_tensor(shape[::-1], F32)
        self.shape = shape
        return name, y

    def conv(self, cout: int, k: int, stride: int = 1, pad: int = 0, group: int = 1) -> None:
        n, c, h, w = self.shape
        wt = self._w(cout, c // group, k, k, scale=1.0 / np.sqrt(k * k * c / group))
        b = self._w(cout, scale=0.1)
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        name, y = self._next((n, cout, oh, ow))
        self.inits[name + "_w"], self.inits[name + "_b"] = wt, b
        self.nodes.append(helper.make_node("Conv", [self.name, name + "_w", name + "_b"], [name],
                                           kernel_shape=[k, k], strides=[stride, stride],
                                           pads=[pad] * 4, group=group))
        p = vx.ConvolutionParams(padding_x=pad, padding_y=pad)
        if group == 1:
            vx.convolution_layer(self.graph, self.cur, self._const(wt.transpose(3, 2, 1, 0)),
                                 self._const(b), p, y)
        else:                              # OpenVX: one node per group, over channel views
            ci, co = c // group, cout // group
            for g in range(group):
                xv = self.cur.view((0, 0, g * ci, 0), (w, h, (g + 1) * ci, 1))
                yv = y.view((0, 0, g * co, 0), (ow, oh, (g + 1) * co, 1))
                vx.convolution_layer(self.graph, xv,
                                     self._const(wt[g * co:(g + 1) * co].transpose(3, 2, 1, 0)),
                                     self._const(b[g * co:(g + 1) * co]), p, yv)
        self.cur, self.name = y, name

    def act(self, kind: str) -> None:
        name, y = self._next(self.shape)
        if kind == "relu":
            self.nodes.append(helper.make_node("Relu", [self.name], [name]))
            vx.activation_layer(self.graph, self.cur, vx.ActivationFunction.RELU, 0, 0, y)
        else:                                               # relu6
            lo, hi = name + "_lo", name + "_hi"
            self.inits[lo], self.inits[hi] = np.float32(0), np.float32(6)
            self.nodes.append(helper.make_node("Clip", [self.name, lo, hi], [name]))
            vx.activation_layer(self.graph, self.cur, vx.ActivationFunction.BRELU, 6.0, 0, y)
        self.cur, self.name = y, name

    def pool(self, kind: str, k: int, stride: int) -> None:
        n, c, h, w = self.shape
        name, y = self._next((n, c, (h - k) // stride + 1, (w - k) // stride + 1))
        if (k, k) == (h, w):
            op = "GlobalMaxPool" if kind == "max" else "GlobalAveragePool"
            self.nodes.append(helper.make_node(op, [self.name], [name]))
        else:
            op = "MaxPool" if kind == "max" else "AveragePool"
            self.nodes.append(helper.make_node(op, [self.name], [name], kernel_shape=[k, k],
                                               strides=[stride, stride]))
        vx.pooling_layer(self.graph, self.cur, vx.PoolingType.MAX if kind == "max" else
                         vx.PoolingType.AVG, k, k, 0, 0, vx.RoundingType.FLOOR, y)
        self.cur, self.name = y, name

    def fc(self, nout: int, flatten: bool = False) -> None:
        k = int(np.prod(self.shape[1:]))
        wt = self._w(k, nout, scale=1.0 / np.sqrt(k))
        b = self._w(nout, scale=0.1)
        src = self.name
        if flatten:
            self.nodes.append(helper.make_node("Flatten", [src], [src + "_flat"], axis=1))
            src += "_flat"
        name, y = self._next((1, nout))
        self.inits[name + "_w"], self.inits[name + "_b"] = wt, b
        self.nodes.append(helper.make_node("Gemm", [src, name + "_w", name + "_b"], [name]))
        vx.fully_connected_layer(self.graph, self.cur, self._const(wt), self._const(b),
                                 vx.ConvertPolicy.SATURATE, vx.RoundPolicy.TO_NEAREST_EVEN, y)
        self.cur, self.name = y, name

    def softmax(self) -> vx.Tensor:
        out = vx.Tensor(self.ctx, self.shape[::-1], F32)
        name, y = self._next(self.shape, out)
        self.nodes.append(helper.make_node("Softmax", [self.name], [name], axis=1))
        vx.softmax_layer(self.graph, self.cur, y)
        self.cur, self.name = y, name
        return out

    def onnx(self) -> onnx.ModelProto:
        g = helper.make_graph(
            self.nodes, "twin",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, self.input_shape)],
            [helper.make_tensor_value_info(self.name, TensorProto.FLOAT, None)],
            [numpy_helper.from_array(np.asarray(v), k) for k, v in self.inits.items()])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def lenet(t: Twin) -> vx.Tensor:
    t.conv(16, 5)
    t.act("relu")
    t.pool("max", 2, 2)
    t.conv(32, 5)
    t.act("relu")
    t.pool("max", 2, 2)
    t.fc(64, flatten=True)
    t.act("relu")
    t.fc(10)
    return t.softmax()


def mobilenet(t: Twin) -> vx.Tensor:
    t.conv(16, 3, stride=2, pad=1)
    t.act("relu6")
    for cout, stride in ((24, 1), (32, 2), (32, 1)):
        c = t.shape[1]
        t.conv(c, 3, stride=stride, pad=1, group=c)        # depthwise: one node per channel
        t.act("relu6")
        t.conv(cout, 1)                                    # pointwise
        t.act("relu6")
    t.pool("avg", t.shape[2], 1)                           # global average
    t.fc(10, flatten=True)
    return t.softmax()


@pytest.mark.parametrize("net,shape", [(lenet, (1, 1, 28, 28)), (mobilenet, (1, 3, 32, 32))])
def test_vx_network_equals_the_onnx_compiled_one(device, net, shape):
    with vx.Context(device) as ctx:
        t = Twin(ctx, shape)
        out = net(t)
        assert t.graph.verify() == vx.Status.SUCCESS, t.graph.error
        x = np.random.default_rng(5).uniform(0, 1, shape).astype(np.float32)
        t.x.copy_patch(x.transpose(3, 2, 1, 0), WO)
        assert t.graph.process() == vx.Status.SUCCESS, t.graph.error
        got = out.copy_patch().T                            # [10, 1] -> (1, 10)
        model = t.onnx()
        with dvsdk.load(dvsdk.compile(model.SerializeToString(), golden=False), device) as net_:
            want = net_.run({"x": x})[t.name]
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        np.testing.assert_allclose(got, ort_run(model, {"x": x})[0], atol=2e-3)
        hw = [n for n in t.graph.nodes if n.where == "DV700"]
        assert len(hw) >= len(t.graph.nodes) - 1             # all but the softmax
