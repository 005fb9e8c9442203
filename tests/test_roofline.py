"""The simulator's cycle model against a roofline: no command may beat physics.

A DV700 (ZIA-C2) does at most ``mac_num`` = 576 multiply-accumulates and moves at most 16
bytes (one 128-bit beat, §10.10, §11) per cycle, so every command takes at least
``max(MACs / 576, bytes / 16)`` cycles.  The MACs are counted here from the command, in
the test: the conv stage at its own output size (before a fused pool), ``M · C · kx · ky``
per output pixel (``C`` = 1 for depthwise), times the batch; the bytes are what the
bandwidth counters report (§10.10).  Networks: the realistic shapes of
``tests/realistic_nets.py`` at reduced input sizes, and a VGG-style net whose convs carry
fused 2x2 max-pools (the case once timed at the pooled size: 399% of the MAC peak)."""

from __future__ import annotations

import pytest

from dvsdk.compiler.build import compile
from dvsdk.hw import dims
from dvsdk.runtime.net import Net
from dvsdk.runtime.profile import profile_net

from . import realistic_nets as R
from .onnx_models import NetBuilder

PEAK_MACS, BEAT = 576, 16


def vgg_fused_pools(size: int = 64) -> object:
    """VGG-16's pattern in miniature: 3x3 convs with ReLU, each block ending in a 2x2/2
    max-pool that fuses into its last conv."""
    b = NetBuilder(16)
    x, c = "x", 3
    for width, convs in ((16, 2), (32, 2), (64, 3), (64, 3)):
        for _ in range(convs):
            x = b.node("Relu", [b.conv(x, c, width, k=3, p=1)])
            c = width
        x = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    return b.model([("x", (1, 3, size, size))], [x], "vgg_fused_pools")


def _macs(cmd) -> int:
    """Multiply-accumulates of a conv command, written out from §4 (not the profiler's)."""
    total, shape = 0, (cmd.w, cmd.h, 1, cmd.c)
    for i, run in enumerate(cmd.runs[: cmd.num_runs]):
        out, _ = dims.run_output_shape(run, shape)
        if run.conv_enable:
            pre = dict(m=run.m, conv_enable=run.conv_enable, p=run.p, pz=1,
                       conv_pad=run.conv_pad, conv_stride=run.conv_stride,
                       conv_dilation=run.conv_dilation, pool_enable=0)
            (tw, th, _, _), _ = dims.run_output_shape(pre, shape)
            kx, ky = run.p & 0xFF, (run.p >> 8) or run.p & 0xFF
            cin = 1 if run.conv_enable & 2 else shape[3]
            total += tw * th * run.m * cin * kx * ky
        shape = (cmd.w, cmd.h, 1, cmd.c) if cmd.topo >> i & 1 else out
    return total * cmd.batch


NETS = {
    "mobilenetv3_small": lambda: R.mobilenetv3_small(64, 10),
    "efficientnet_lite0": lambda: R.efficientnet_lite0(64, 10),
    "yolov8n": lambda: R.yolov8n(64, 80),
    "dbnet": lambda: R.dbnet(64),
    "vgg_fused_pools": vgg_fused_pools,
}


@pytest.mark.parametrize("name", sorted(NETS))
def test_no_command_beats_the_roofline(name):
    # (VGG's convs, a command each: every block's pool is checked on its conv's row;
    # chained, the whole net is one command, checked against the roofline as one)
    net = compile(NETS[name](), golden=False, chain=name != "vgg_fused_pools")
    with Net(net, "sim://") as n:
        rows = [r for r in profile_net(n) if r["where"] == "hw"]
        commands = n._contexts[0].commands
    assert len(rows) == len(commands) > 5
    pooled = 0
    for row, cmd in zip(rows, commands, strict=True):
        macs, cycles = _macs(cmd), row["cycles"]
        assert macs == row["macs"], row
        assert macs <= PEAK_MACS * cycles, f"{row['kind']}: {macs / (PEAK_MACS * cycles):.0%} " \
            "of the MAC peak"
        assert row["bytes"] <= BEAT * cycles, f"{row['kind']}: faster than the bus"
        pooled += any(r.conv_enable and r.pool_enable == 1 for r in cmd.runs)
    total_macs = sum(_macs(c) for c in commands)
    assert total_macs <= PEAK_MACS * sum(r["cycles"] for r in rows)
    if name == "vgg_fused_pools":
        assert pooled == 4  # every block's pool rode on its conv
        util = max(r["mac_util"] for r in rows)
        assert 0.5 < util <= 1.0  # the 3x3 convs keep the array busy, within physics

