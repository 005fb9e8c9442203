"""--transpose: the network runs on x/y-exchanged tensors (DHWC input, formats.md §1.1)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import dvsdk
from dvsdk.errors import ModelError

from . import onnx_models as M


def _close(out, ref, rel=1e-2):
    for y, r in zip(out, ref):
        span = max(float(np.ptp(r)), 1.0)
        assert float(np.max(np.abs(y - r))) <= 1e-3 + rel * span


@pytest.mark.parametrize("build", [M.conv_maxpool, M.matmul_add, M.conv_add_relu,
                                   M.resnet_like, M.torch_export_like, M.pad_conv])
def test_transposed_net_matches_onnxruntime(build):
    model = build()
    net = dvsdk.compile(model, transpose=True)
    assert net.meta["transposed"] is True
    feeds = M.make_feeds(model, seed=3)
    ref = M.ort_run(model, feeds)
    with dvsdk.load(net, "sim://") as n:
        out = n.run(feeds)
        assert n.selftest()["passed"]
    _close([out[o["name"]] for o in net.meta["outputs"]], ref)


def _wide_conv(h=16, w=1024, c=32, m=32):
    rng = np.random.default_rng(0)
    wt = rng.normal(0, 0.1, (m, c, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["y"], ["z"])], "wide",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, m, h, w])],
        [numpy_helper.from_array(wt, "W")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_the_hardware_sees_the_exchanged_geometry():
    """Tiles split the hardware width (§7.2).  A 16x1024 input is 1024 wide as compiled and
    16 wide (1024 tall) when transposed; the tile counts must be those §7.2 gives for each
    geometry.  (For this shape transposing costs a tile: every strip holds the full height,
    and the (k-1)-column overlap grows with it.)"""
    from dvsdk.hw.dims import conv_tiles

    model = _wide_conv()
    x = np.random.default_rng(1).uniform(-1, 1, (1, 32, 16, 1024)).astype(np.float32)
    expect = {False: conv_tiles(1024, 16, 32, 32, 3, 3, (1, 1, 1, 1))[0],
              True: conv_tiles(16, 1024, 32, 32, 3, 3, (1, 1, 1, 1))[0]}
    assert expect == {False: 3, True: 4}
    outs = {}
    for t in (False, True):
        with dvsdk.load(dvsdk.compile(model, transpose=t, golden=False), "sim://") as n:
            rows = n.profile(x)
            assert [r["tiles"] for r in rows if r["where"] == "hw"] == [expect[t]]
            outs[t] = n.run(x)["z"]
    np.testing.assert_allclose(outs[True], outs[False], atol=2e-3)


def test_ops_that_cannot_be_transposed_are_named():
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 3, 2])], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(ModelError, match=r"Transpose \("):
        dvsdk.compile(model, transpose=True)


def test_ipu_and_maximizer_follow_the_orientation():
    rng = np.random.default_rng(0)
    wt = rng.normal(0, 0.3, (5, 3, 3, 3)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1], kernel_shape=[3, 3])],
        "seg", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 12, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5, 12, 20])],
        [numpy_helper.from_array(wt, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    img = rng.integers(0, 256, (12, 20, 3)).astype(np.uint8)
    results = {}
    for t in (False, True):
        with dvsdk.load(dvsdk.compile(model, scale=1 / 255, golden=False, transpose=t),
                        "sim://") as n:
            a = n.run_image(img)["y"]
            np.testing.assert_array_equal(n.class_map(), np.argmax(a[0], axis=0))
            np.testing.assert_allclose(n.run_image(img, ipu=True)["y"], a, atol=1e-3)
            results[t] = a
    np.testing.assert_allclose(results[True], results[False], atol=1e-3)
