"""KHR_NN_16 (INT16 Q7.8) and KHR_NN_8 (UINT8, INT8) tensors: conversions in and out with
both overflow policies and both rounding policies on exact boundary values (formats.md
§2.3), on their own and through graphs on the simulator."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
import dvsdk.vx as vx
from dvsdk.vx.convert import from_storage, to_raw

SAT, WRAP = vx.ConvertPolicy.SATURATE, vx.ConvertPolicy.WRAP
ZERO, EVEN = vx.RoundPolicy.TO_ZERO, vx.RoundPolicy.TO_NEAREST_EVEN
WO = vx.Accessor.WRITE_ONLY
Q78 = (vx.Type.INT16, 8)

# real value -> raw Q7.8 for (SAT, ZERO), (SAT, EVEN), (WRAP, ZERO), (WRAP, EVEN)
Q78_CASES = [
    (127.99609375, 32767, 32767, 32767, 32767),
    (-128.0, -32768, -32768, -32768, -32768),
    (1.0, 256, 256, 256, 256),
    (-0.5, -128, -128, -128, -128),
    (0.75, 192, 192, 192, 192),
    (3.14159, 804, 804, 804, 804),
    (128.0, 32767, 32767, -32768, -32768),
    (-128.00390625, -32768, -32768, 32767, 32767),
    (1.5 / 256, 1, 2, 1, 2),
    (2.5 / 256, 2, 2, 2, 2),
    (-1.5 / 256, -1, -2, -1, -2),
    (127.998, 32767, 32767, 32767, 32767),          # 32767.49 -> 32767 either way
    (200.0, 32767, 32767, -14336, -14336),          # 51200 - 65536
]


@pytest.mark.parametrize("real,sz,se,wz,we", Q78_CASES)
def test_q78_from_real(real, sz, se, wz, we):
    for (o, r), want in zip(((SAT, ZERO), (SAT, EVEN), (WRAP, ZERO), (WRAP, EVEN)),
                            (sz, se, wz, we)):
        got = to_raw(np.array([real]), np.dtype(np.int16), 8, o, r)
        assert got.dtype == np.int16 and int(got[0]) == want, (o.name, r.name)


@pytest.mark.parametrize("raw,real", [(32767, 127.99609375), (-32768, -128.0), (256, 1.0),
                                      (-128, -0.5), (804, 3.140625), (1, 1 / 256)])
def test_q78_to_real_is_exact(raw, real):
    got = from_storage(np.array([raw], np.int16), 8, np.float64, SAT, EVEN)
    assert got[0] == real


@pytest.mark.parametrize("dtype,real,sz,se,wz,we", [
    (np.uint8, 255.5, 255, 255, 255, 0), (np.uint8, -1.0, 0, 0, 255, 255),
    (np.uint8, 0.5, 0, 0, 0, 0), (np.uint8, 1.5, 1, 2, 1, 2), (np.uint8, 300.7, 255, 255, 44, 45),
    (np.int8, 127.5, 127, 127, 127, -128), (np.int8, -129.0, -128, -128, 127, 127),
    (np.int8, -2.5, -2, -2, -2, -2)])
def test_8bit_from_real(dtype, real, sz, se, wz, we):
    for (o, r), want in zip(((SAT, ZERO), (SAT, EVEN), (WRAP, ZERO), (WRAP, EVEN)),
                            (sz, se, wz, we)):
        got = to_raw(np.array([real]), np.dtype(dtype), 0, o, r)
        assert got.dtype == dtype and int(got[0]) == want, (o.name, r.name)


def test_non_finite_values():
    got = to_raw(np.array([np.nan, np.inf, -np.inf]), np.dtype(np.int16), 8, WRAP, EVEN)
    assert got.tolist() == [0, 32767, -32768]


def test_copy_patch_converts_from_the_users_type():
    with vx.Context("sim://") as ctx:
        t = vx.Tensor(ctx, (4,), *Q78)
        t.copy_patch(np.array([127.99609375, -128, 128.0, 1.5 / 256], np.float32), WO,
                     overflow_policy=WRAP, rounding_policy=ZERO)
        assert t.copy_patch().tolist() == [32767, -32768, -32768, 1]       # raw, own type
        assert t.copy_patch(user_type=np.float64).tolist() == [127.99609375, -128.0, -128.0,
                                                                1 / 256]
        t.copy_patch(np.array([70000, -5, 3, 0], np.int32), WO)          # raw integers
        assert t.copy_patch().tolist() == [32767, -5, 3, 0]               # saturated
        out = np.zeros(4, np.uint8)
        t.copy_patch(out, vx.Accessor.READ_ONLY, overflow_policy=WRAP)   # raw -> uint8
        assert out.tolist() == [255, 251, 3, 0]
        u = vx.Tensor(ctx, (3,), vx.Type.UINT8)
        u.copy_patch(np.array([255.5, -1, 1.5]), WO)                      # SAT, EVEN defaults
        assert u.copy_patch().tolist() == [255, 0, 2]
        f = vx.Tensor(ctx, (2,), vx.Type.FLOAT16)
        f.copy_patch(np.array([1 / 3, 70000.0]), WO)
        assert f.copy_patch().tolist() == [float(np.float16(1 / 3)), float("inf")]


@pytest.fixture(scope="module")
def device():
    dev = dvsdk.open_device("sim://")
    yield dev
    dev.close()


def _fc(ctx, x_raw, w_raw, out_policy, out_round, dtype=Q78):
    """out = in * w through a fully connected layer of Q7.8 tensors; returns out's raw."""
    g = ctx.graph()
    x = vx.Tensor(ctx, (len(x_raw), 1), *dtype)
    x.copy_patch(np.array(x_raw, np.int16).reshape(-1, 1), WO)
    w = vx.Tensor(ctx, (len(x_raw), len(x_raw)), *dtype)
    w.copy_patch(np.diag(w_raw).astype(np.int16), WO)
    y = vx.Tensor(ctx, (len(x_raw), 1), *dtype)
    vx.fully_connected_layer(g, x, w, None, out_policy, out_round, y)
    assert g.process() == vx.Status.SUCCESS, g.error
    return y.copy_patch()[:, 0].tolist()


def test_q78_graph_applies_the_nodes_policies_on_output(device):
    with vx.Context(device) as ctx:
        x = [25600, 3, -3, 32767]              # 100.0, 3/256, -3/256, 127.99609375
        w = [512, 128, 128, 256]               # 2.0, 0.5, 0.5, 1.0
        # 200.0 overflows; 1.5/256 and -1.5/256 are exact ties; 127.996 * 1.0 is exact
        assert _fc(ctx, x, w, SAT, ZERO) == [32767, 1, -1, 32767]
        assert _fc(ctx, x, w, SAT, EVEN) == [32767, 2, -2, 32767]
        assert _fc(ctx, x, w, WRAP, ZERO) == [-14336, 1, -1, 32767]
        assert _fc(ctx, x, w, WRAP, EVEN) == [-14336, 2, -2, 32767]


def test_q78_fully_connected_is_exact_beyond_fp16(device):
    """FP16 has 11 significant bits, so the DV700 would read 100.00390625 (raw 25601) as
    100.0; the layer's sum is exact instead (dvsdk.vx.exact runs it in int64 on the CPU:
    no declared range bounds it within FP16)."""
    with vx.Context(device) as ctx:
        assert _fc(ctx, [25601, 1025], [256, 256], SAT, EVEN) == [25601, 1025]


def test_u8_graph_saturates_and_rounds(device):
    with vx.Context(device) as ctx:
        g = ctx.graph()
        x = vx.Tensor(ctx, (4, 1, 1, 1), vx.Type.UINT8)
        x.copy_patch(np.array([255, 0, 1, 100], np.uint8).reshape(4, 1, 1, 1), WO)
        y = vx.Tensor(ctx, (4, 1, 1, 1), vx.Type.UINT8)
        vx.activation_layer(g, x, vx.ActivationFunction.LINEAR, 1.0, 0.5, y)
        assert g.process() == vx.Status.SUCCESS, g.error
        # 255.5 -> 256 -> saturated; 0.5 -> 0 and 1.5 -> 2 (to nearest even); 100.5 -> 100
        assert y.copy_patch().ravel().tolist() == [255, 0, 2, 100]
