"""Fewer CPU steps (issue 14): large stride-1 max-pools as cascades of hardware pools,
HardSigmoid folded into its conv with the hardware's ReLU6, channel Splits and Slices as
zero-copy views, nearest 4x/8x upsampling as 2x stages; each against onnxruntime, with the
cases that must stay on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from dvsdk.compiler.build import compile
from dvsdk.runtime.net import Net

from .compile_harness import SIM, ort_reference, where

OPSET = 17


def _pool_model(shape, **attrs):
    node = helper.make_node("MaxPool", ["x"], ["y"], **attrs)
    g = helper.make_graph([node], "mp", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                        list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)


def _halves(rng, shape, lo=-8.0, hi=-1.0):
    """FP16-representable values (so a max is exact on the device); all negative by
    default, so a border padded with 0 instead of -inf would win the max."""
    return rng.uniform(lo, hi, shape).astype(np.float16).astype(np.float32)


POOLS = [
    # (input NCHW, attrs): YOLO's SPPF and SPP windows, then the padding edge cases
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
    ((1, 16, 13, 11), dict(kernel_shape=[9, 9], pads=[4, 4, 4, 4])),
    ((1, 8, 15, 15), dict(kernel_shape=[13, 13], pads=[6, 6, 6, 6])),
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5])),                               # no padding
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5], pads=[1, 3, 4, 0])),            # asymmetric
    ((1, 8, 9, 12), dict(kernel_shape=[5, 5], pads=[0, 4, 2, 1])),
    ((1, 3, 11, 7), dict(kernel_shape=[3, 5], pads=[1, 2, 1, 2])),            # 5 wide, 3 high
    ((1, 3, 11, 7), dict(kernel_shape=[7, 4], pads=[3, 1, 3, 2])),            # even width
    ((1, 9, 8, 8), dict(kernel_shape=[1, 6], pads=[0, 2, 0, 3])),             # a 1-high row
    ((1, 8, 12, 12), dict(kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2])),
    ((1, 8, 11, 13), dict(kernel_shape=[5, 5], strides=[2, 2], ceil_mode=1)),
    ((1, 8, 11, 13), dict(kernel_shape=[5, 4], strides=[3, 2], pads=[1, 0, 2, 3],
                          ceil_mode=1)),
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2], ceil_mode=1)),
    ((1, 8, 10, 10), dict(kernel_shape=[5, 5], strides=[5, 5])),              # was on the CPU
]


@pytest.mark.parametrize("shape,attrs", POOLS, ids=lambda v: str(v))
def test_large_max_pools_run_as_cascades_of_hardware_pools(shape, attrs):
    model = _pool_model(shape, **attrs)
    net = compile(model, golden=False)
    assert where(net) == [("MaxPool", "hw")], net.meta["report"]
    kh, kw = attrs["kernel_shape"]
    assert net.meta["stats"]["commands"] == max(-(-(kh - 1) // 2), -(-(kw - 1) // 2))
    x = _halves(np.random.default_rng(sum(shape)), shape)
    ref = ort_reference(model, {"x": x})[0]
    with Net(net, SIM) as dev:
        y = dev.run(x)["y"]
    assert np.array_equal(y, ref)  # a max of FP16 values is exact


def test_a_cascade_keeps_the_max_where_positive_and_negative_values_mix():
    model = _pool_model((1, 16, 20, 20), kernel_shape=[5, 5], pads=[2, 2, 2, 2])
    x = _halves(np.random.default_rng(3), (1, 16, 20, 20), -4, 4)
    with Net(compile(model, golden=False), SIM) as dev:
        assert np.array_equal(dev.run(x)["y"], ort_reference(model, {"x": x})[0])


@pytest.mark.parametrize("shape,attrs,why", [
    ((1, 8, 12, 12), dict(kernel_shape=[5, 5], dilations=[2, 2], pads=[4, 4, 4, 4]),
     "dilated"),
    ((1, 8, 12, 12), dict(kernel_shape=[5, 1], pads=[2, 0, 2, 0]), "split into"),
    ((1, 8, 12, 12), dict(kernel_shape=[7, 2]), "split into"),
])
def test_max_pools_a_cascade_cannot_express_stay_on_the_cpu(shape, attrs, why):
    model = _pool_model(shape, **attrs)
    net = compile(model, golden=False)
    assert where(net) == [("MaxPool", "cpu")]
    assert why in net.meta["report"][0]["detail"]
    x = _halves(np.random.default_rng(5), shape)
    with Net(net, SIM) as dev:
        assert np.array_equal(dev.run(x)["y"], ort_reference(model, {"x": x})[0])
