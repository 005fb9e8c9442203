"""End-to-end compiler matrix: ONNX model -> compile() -> net.bin -> sim:// -> compare.

Every case is built with onnx.helper (the builders of ``tests/onnx_models.py`` plus the ones
below), compiled, run on the simulator and compared with onnxruntime run on the *original*
model with graph optimizations disabled (see :func:`ort_reference`).  Each case also states
WHERE its ops ran (``net.meta["report"]``, ``net.meta["program"]``): which op types stay on
the CPU, which ops share one hardware command, and what the command does, so a regression
in the mapping fails here even when the numbers still match.

Metric (per output):  max|y - ref| <= tol_abs + tol_rel * (max(ref) - min(ref)).

Tolerances, derived rather than tuned:

* FP16 (``TOL_REL = 1e-2``, ``TOL_ABS = 1e-3``).  The device stores activations and
  weights in FP16, unit roundoff u = 2**-11 ~ 4.9e-4; a conv step rounds its input, its
  weights and its output (3u relative to the largest magnitude, which for these zero-centred
  random tensors is about the output range) and a K-term dot product adds up to ~sqrt(K)*u
  when the rounding errors are independent (K <= 1000 here).  So one layer is ~3-30u
  (1.5e-3..1.5e-2 of the range) in the worst case and a few u typically; errors of a deep
  chain grow roughly with sqrt(depth).  Measured worst case over the matrix: 1.4e-3 of the
  range (a staged global max-pool, where the range of the maxima is small against their
  magnitude), 2.7e-4 median, 9.5e-4 for the 50-layer MobileNetV2-like.  1e-2 (~20u) keeps
  a 7x margin yet catches a wrong tap, pad, channel order, coordinate map or activation
  (those give 1e-1..1 of the range: the Resize and PRelu bugs below were 0.55-0.8).
  ``TOL_ABS`` covers outputs whose range is tiny (a nearly constant sigmoid or softmax).
* Quantized weights (``quantize=True``: each run's weights become a 256-entry k-means
  codebook).  On Gaussian weights the per-weight error is ~0.5-1 % of the weight scale, one
  such layer adds ~0.3 % of the range: the single-op and pattern cases keep ``TOL_REL``
  (measured <= 3.3e-3; layers with <= 255 distinct weights are even exact).  Whole
  networks use ``Q_TOL_REL = 5e-2``: measured 5.5e-3 (ResNet-like, 11 layers) and 2.2e-2
  (MobileNetV2-like at 64x64, 50 layers, ending in a Softmax that amplifies logit errors).

The reference must be onnxruntime with ``ORT_DISABLE_ALL``: onnxruntime 1.31's default
optimizer fuses a zero-constant Pad into a following MaxPool, gives it -inf padding and
returns wrong values (``test_onnxruntime_optimizer_pad_maxpool_fusion_bug`` in
test_compile_nets.py records it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
import pytest

from dvsdk.runtime.net import Net

from . import onnx_models as M
from .compile_harness import (
    Q_TOL_REL,
    SIM,
    S,
    cpu_types,
    detail,
    hw_commands,
    hw_stage_count,
    max_err,
    ort_reference,
    resize_after_conv,
    run_case,
    where,
)
from .onnx_models import NetBuilder, _i, single, w

# --------------------------------------------------------------------------- builders
X8 = (1, 8, 6, 6)


def conv_act(act: str, **attrs) -> Callable[[], onnx.ModelProto]:
    """Conv 3x3 -> one activation (extra inputs for PRelu / Clip)."""
    def build() -> onnx.ModelProto:
        b = NetBuilder(20)
        y = b.conv("x", 3, 8)
        if act == "PRelu":
            y = b.node("PRelu", [y, b.const(np.linspace(-0.5, 0.5, 8, dtype=np.float32)
                                            .reshape(8, 1, 1), "slope")])
        elif act == "Clip":
            y = b.relu6(y)
        else:
            y = b.node(act, [y], **attrs)
        return b.model([("x", (1, 3, 8, 8))], [y], f"conv_{act}")
    return build


def conv_pool_order(first: str) -> onnx.ModelProto:
    """conv -> maxpool -> relu (``first="pool"``) or conv -> relu -> maxpool."""
    b = NetBuilder(21)
    y = b.conv("x", 3, 8)
    ops = ["MaxPool", "Relu"] if first == "pool" else ["Relu", "MaxPool"]
    for op in ops:
        y = (b.node(op, [y], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
             if op == "MaxPool" else b.node(op, [y]))
    return b.model([("x", (1, 3, 9, 9))], [y], "conv_pool_" + first)


def conv_even_rect() -> onnx.ModelProto:
    """2x4 kernel (even, non-square), asymmetric pads, stride (2, 1)."""
    return single("Conv", [(1, 3, 8, 9), w(60, 5, 3, 2, 4), w(61, 5)],
                  {"pads": [0, 1, 1, 2], "strides": [2, 1]})


def conv_dilated_5x5() -> onnx.ModelProto:
    """Dilation (2, 1) on a 5x5 kernel, 'same' padding."""
    return single("Conv", [(1, 4, 9, 10), w(62, 6, 4, 5, 5), w(63, 6)],
                  {"dilations": [2, 1], "pads": [4, 2, 4, 2]})


def conv_7x7_s2() -> onnx.ModelProto:
    return single("Conv", [(1, 3, 15, 16), w(64, 8, 3, 7, 7, scale=0.1)],
                  {"strides": [2, 2], "pads": [3, 3, 3, 3]})


def grouped_split8() -> onnx.ModelProto:
    """group 2 with 8 channels per group: split on the CPU, zero-copy concat."""
    b = NetBuilder(22)
    y = b.node("Relu", [b.conv("x", 16, 16, group=2)])
    return b.model([("x", (1, 16, 6, 6))], [b.conv(y, 16, 8, k=1)], "grouped_split8")


def convT_depthwise() -> onnx.ModelProto:
    return single("ConvTranspose", [(1, 4, 5, 5), w(65, 4, 1, 3, 3), w(66, 4)],
                  {"group": 4, "strides": [2, 2], "pads": [1, 1, 1, 1],
                   "output_padding": [1, 1]})


def convT_relu_k4() -> onnx.ModelProto:
    """The usual 4x4/2 decoder upsampling, fused ReLU."""
    b = NetBuilder(23)
    t = b.node("ConvTranspose", ["x", b.const(w(67, 8, 8, 4, 4, scale=0.2), "W")],
               strides=[2, 2], pads=[1, 1, 1, 1])
    return b.model([("x", (1, 8, 4, 5))], [b.node("Relu", [t])], "convT_relu_k4")


def tensor_add() -> onnx.ModelProto:
    return single("Add", [X8, X8])


def scalar_affine() -> onnx.ModelProto:
    """x * 0.5 + 1.25 (scalars, constant second): two depthwise 1x1 runs, or one."""
    b = NetBuilder(24)
    y = b.node("Add", [b.node("Mul", ["x", b.const(np.float32(0.5))]),
                       b.const(np.float32(1.25))])
    return b.model([("x", X8)], [y], "scalar_affine")


def clip_relu() -> onnx.ModelProto:
    return single("Clip", [X8, np.float32(0), None])


def clip_between_convs() -> onnx.ModelProto:
    b = NetBuilder(25)
    y = b.node("Clip", [b.conv("x", 3, 8), b.const(np.float32(-0.5)), b.const(np.float32(1))])
    return b.model([("x", (1, 3, 6, 6))], [b.conv(y, 8, 8)], "clip_between_convs")


def avgpool_k2s2() -> onnx.ModelProto:
    return single("AveragePool", [(1, 8, 8, 6)], {"kernel_shape": [2, 2], "strides": [2, 2]})


def gap(h: int, w_: int, c: int = 8) -> Callable[[], onnx.ModelProto]:
    return lambda: single("GlobalAveragePool", [(1, c, h, w_)])


def gmp(h: int, w_: int, c: int = 8) -> Callable[[], onnx.ModelProto]:
    return lambda: single("GlobalMaxPool", [(1, c, h, w_)])


def conv_flatten_gemm(c: int, hw: int) -> Callable[[], onnx.ModelProto]:
    """conv (C channels, hw x hw) -> Flatten -> Gemm: the FC reads the chunked layout."""
    def build() -> onnx.ModelProto:
        b = NetBuilder(26)
        y = b.node("Flatten", [b.node("Relu", [b.conv("x", 3, c)])])
        y = b.node("Gemm", [y, b.const(w(68, 10, c * hw * hw, scale=0.1), "fcW"),
                            b.const(w(69, 10), "fcB")], transB=1)
        return b.model([("x", (1, 3, hw, hw))], [y], f"conv_flatten_gemm_c{c}")
    return build


def gemm_row() -> onnx.ModelProto:
    """Gemm on a (1, K) row, B not transposed, alpha/beta: canonicalized, one FC run."""
    return single("Gemm", [(1, 12), w(70, 12, 6), w(71, 6)], {"alpha": 0.5, "beta": 2.0})


def matmul_row() -> onnx.ModelProto:
    return single("MatMul", [(1, 12), w(72, 12, 5)])


def gap_views() -> onnx.ModelProto:
    """GAP -> Squeeze -> Gemm -> Relu -> Unsqueeze -> 1x1 Conv, and GAP -> Reshape -> Gemm:
    every view of a 1x1xC tensor is free."""
    b = NetBuilder(27)
    g = b.node("GlobalAveragePool", [b.conv("x", 3, 16)])
    s = b.node("Squeeze", [g, b.const(_i(2, 3), "axes")])
    f = b.node("Relu", [b.node("Gemm", [s, b.const(w(73, 8, 16), "W1"),
                                        b.const(w(74, 8), "B1")], transB=1)])
    u = b.node("Unsqueeze", [f, b.const(_i(2, 3), "axes")])
    y1 = b.conv(u, 8, 4, k=1)
    r = b.node("Reshape", [g, b.const(_i(1, -1), "shape")])
    y2 = b.node("Gemm", [r, b.const(w(75, 5, 16), "W2")], transB=1)
    return b.model([("x", (1, 3, 6, 6))], [y1, y2], "gap_views")


def reshape_cpu() -> onnx.ModelProto:
    b = NetBuilder(28)
    y = b.node("Reshape", [b.conv("x", 3, 8), b.const(_i(1, 8, -1), "shape")])
    return b.model([("x", (1, 3, 5, 5))], [y], "reshape_cpu")


def concat(c1: int, c2: int) -> Callable[[], onnx.ModelProto]:
    """Two convs of one input -> Concat(axis 1) -> 1x1 conv."""
    def build() -> onnx.ModelProto:
        b = NetBuilder(29)
        a = b.node("Relu", [b.conv("x", 4, c1)])
        c = b.conv("x", 4, c2, k=1)
        y = b.node("Concat", [a, c], axis=1)
        return b.model([("x", (1, 4, 6, 6))], [b.conv(y, c1 + c2, 8, k=1)], "concat")
    return build


def split_convs() -> onnx.ModelProto:
    b = NetBuilder(30)
    s1, s2 = b.node("Split", [b.conv("x", 3, 16), b.const(_i(8, 8), "split")], n_out=2,
                    axis=1)
    y = b.node("Add", [b.conv(s1, 8, 8), b.conv(s2, 8, 8)])
    return b.model([("x", (1, 3, 6, 6))], [y], "split_convs")


def softmax_after_conv() -> onnx.ModelProto:
    b = NetBuilder(31)
    return b.model([("x", (1, 3, 5, 5))], [b.node("Softmax", [b.conv("x", 3, 8)], axis=1)],
                   "softmax")




def transpose_after_conv() -> onnx.ModelProto:
    b = NetBuilder(33)
    y = b.node("Transpose", [b.conv("x", 3, 8)], perm=[0, 2, 3, 1])
    return b.model([("x", (1, 3, 5, 4))], [y], "transpose")




def prelu_per_column() -> onnx.ModelProto:
    """PRelu slope of shape (C,) on NCHW broadcasts over W (valid because W == C)."""
    return single("PRelu", [(1, 4, 5, 4), np.linspace(-1, 1, 4).astype(np.float32)])


def conv_prelu_per_column() -> onnx.ModelProto:
    b = NetBuilder(34)
    y = b.node("PRelu", [b.conv("x", 3, 5), b.const(np.linspace(-1, 1, 5).astype(np.float32))])
    return b.model([("x", (1, 3, 6, 5))], [y], "conv_prelu_per_column")


def dw_dilated() -> onnx.ModelProto:
    return single("Conv", [(1, 16, 9, 9), w(76, 16, 1, 3, 3)],
                  {"group": 16, "dilations": [2, 2], "pads": [2, 2, 2, 2]})


def dilated_strided() -> onnx.ModelProto:
    """Not 'same' (out * stride != in): the driver refuses it, the CPU runs it."""
    return single("Conv", [(1, 8, 9, 9), w(77, 8, 8, 3, 3)],
                  {"dilations": [2, 2], "pads": [2, 2, 2, 2], "strides": [2, 2]})


def conv_add_relu6_pool() -> onnx.ModelProto:
    """The whole hardware chain in one run: conv -> add -> ReLU6 -> max-pool (ReLU6 is
    monotonic, so it commutes with the max and runs after it)."""
    b = NetBuilder(35)
    y = b.relu6(b.node("Add", [b.conv("x", 8, 8), "x"]))
    y = b.node("MaxPool", [y], kernel_shape=[3, 3], strides=[2, 2])
    return b.model([("x", (1, 8, 9, 9))], [y], "conv_add_relu6_pool")


def leaky_negative_pool() -> onnx.ModelProto:
    """LeakyRelu with a negative slope is not monotonic: it must not move past the pool."""
    b = NetBuilder(36)
    y = b.node("LeakyRelu", [b.conv("x", 3, 8)], alpha=-0.5)
    y = b.node("MaxPool", [y], kernel_shape=[2, 2], strides=[2, 2])
    return b.model([("x", (1, 3, 8, 8))], [y], "leaky_negative_pool")


def gap_staged_sigmoid() -> onnx.ModelProto:
    b = NetBuilder(37)
    y = b.node("Sigmoid", [b.node("GlobalAveragePool", [b.conv("x", 3, 8)])])
    return b.model([("x", (1, 3, 20, 20))], [y], "gap_staged_sigmoid")


def concat_member_shared() -> onnx.ModelProto:
    """A zero-copy concat member that another conv also reads (it lives in the concat)."""
    b = NetBuilder(38)
    a, c = b.conv("x", 4, 8), b.conv("x", 4, 8)
    y = b.node("Concat", [a, c], axis=1)
    return b.model([("x", (1, 4, 6, 6))], [b.conv(y, 16, 8, k=1), b.conv(a, 8, 8)], "m")


def flatten_two_gemms() -> onnx.ModelProto:
    b = NetBuilder(39)
    f = b.node("Flatten", [b.conv("x", 3, 8)])
    g1 = b.node("Gemm", [f, b.const(w(78, 4, 128)), b.const(w(79, 4))], transB=1)
    g2 = b.node("Gemm", [f, b.const(w(80, 5, 128))], transB=1)
    return b.model([("x", (1, 3, 4, 4))], [g1, g2], "flatten_two_gemms")


def squeeze_excite() -> onnx.ModelProto:
    """SE block: the channel gate is a Mul of two tensors (broadcast): CPU."""
    b = NetBuilder(40)
    a = b.conv("x", 3, 8)
    g = b.node("Sigmoid", [b.node("GlobalAveragePool", [a])])
    return b.model([("x", (1, 3, 6, 6))], [b.conv(b.node("Mul", [a, g]), 8, 8)], "se")


def conv_tanh_abs() -> onnx.ModelProto:
    """Abs after the activation: the run's rectification stage."""
    b = NetBuilder(41)
    y = b.node("Abs", [b.node("Tanh", [b.conv("x", 3, 8)])])
    return b.model([("x", (1, 3, 6, 6))], [y], "conv_tanh_abs")


def big_conv() -> onnx.ModelProto:
    """112x112x32 -> 32: several UBUF tiles at ub_size 262144."""
    return single("Conv", [(1, 32, 112, 112), w(81, 32, 32, 3, 3, scale=0.1)],
                  {"pads": [1, 1, 1, 1]})


# --------------------------------------------------------------------------- the matrix
@dataclass(frozen=True)
class E2E:
    """A model and what the compiler must do with it.

    ``cpu``: the op types that run on the CPU, exactly (everything else in the report is
    hardware or a free view).  ``fused``: groups of op types that must share one hardware
    command.  ``commands``: number of hardware commands.  ``detail``: (op type, substring
    of its report detail).  ``absent``: op types folded away before lowering.
    ``quant``: also compiled with quantize=True."""

    name: str
    build: Callable[[], onnx.ModelProto]
    cpu: tuple[str, ...] = ()
    fused: tuple[tuple[str, ...], ...] = ()
    commands: int | None = None
    detail: tuple[tuple[str, str], ...] = ()
    absent: tuple[str, ...] = ()
    quant: bool = False
    positive: bool = False




CASES: list[E2E] = [
    # -- Conv ------------------------------------------------------------------------------
    E2E("conv_group1", S("conv_basic"), commands=1, detail=(("Conv", "conv 3x3"),),
        quant=True),
    E2E("conv_stride_asym_pads", S("conv_stride_asym_pads"), commands=1),
    E2E("conv_even_same_upper", S("conv_same_upper"), detail=(("Conv", "conv 4x4"),)),
    E2E("conv_even_same_lower", S("conv_same_lower"), commands=1),
    E2E("conv_valid_strided", S("conv_valid"), commands=1),
    E2E("conv_rect_1x5", S("conv_rect_kernel"), detail=(("Conv", "conv 5x1"),)),
    E2E("conv_even_rect_2x4", conv_even_rect, detail=(("Conv", "conv 4x2"),), quant=True),
    E2E("conv_7x7_s2", conv_7x7_s2, detail=(("Conv", "conv 7x7"),)),
    E2E("conv_dilated_same", S("conv_dilation"), detail=(("Conv", "dilated conv 3x3"),),
        quant=True),
    E2E("conv_dilated_5x5_d21", conv_dilated_5x5, detail=(("Conv", "dilated conv 5x5"),)),
    E2E("conv_depthwise_s2", S("conv_depthwise"), detail=(("Conv", "depthwise conv 3x3"),),
        quant=True),
    E2E("conv_grouped_split_copy", S("conv_group2"), cpu=("Concat", "Split"), commands=2),
    E2E("conv_grouped_split_zero_copy", grouped_split8,
        detail=(("Split", "zero-copy"), ("Concat", "zero-copy"))),
    # -- ConvTranspose ---------------------------------------------------------------------
    E2E("convT_group1_outpad", S("convT_outpad"), detail=(("ConvTranspose", "deconv 3x3"),),
        quant=True),
    E2E("convT_output_shape", S("convT_output_shape"), commands=1),
    E2E("convT_same_upper", S("convT_same_upper"), commands=1),
    E2E("convT_depthwise_outpad", convT_depthwise,
        detail=(("ConvTranspose", "depthwise deconv 3x3"),), quant=True),
    E2E("convT_k4s2_relu", convT_relu_k4, fused=(("ConvTranspose", "Relu"),), commands=1),
    E2E("convT_bn_grouped", M.convT_bn, cpu=("ConvTranspose",), absent=("BatchNormalization",)),
    # -- BatchNormalization ----------------------------------------------------------------
    E2E("bn_folded", M.conv_bn_relu, fused=(("Conv", "Relu"),), commands=1,
        absent=("BatchNormalization",), quant=True),
    E2E("bn_standalone_single", S("batchnorm"),
        detail=(("BatchNormalization", "depthwise 1x1"),)),
    E2E("bn_standalone_after_add", M.bn_standalone, commands=3,
        detail=(("Add", "element-wise add"), ("BatchNormalization", "depthwise 1x1"))),
    # -- element-wise ----------------------------------------------------------------------
    *[E2E(f"{op}_const_channel", S(f"{op}_const_channel"), commands=1,
          detail=((op.capitalize(), "depthwise 1x1"),)) for op in ("add", "sub", "mul", "div")],
    E2E("scalar_mul_add", scalar_affine, commands=2),
    E2E("affine_folded_into_convs", M.conv_affine, commands=3, absent=("Mul", "Div", "Add")),
    E2E("add_tensors", tensor_add, commands=1, detail=(("Add", "element-wise add"),)),
    E2E("conv_add_relu_fused", M.conv_add_relu, fused=(("Conv", "Add", "Relu"),), commands=2,
        detail=(("Add", "+add"),), quant=True),
    # -- activations -----------------------------------------------------------------------
    E2E("relu", S("relu"), commands=1),
    E2E("leaky_relu", S("leaky_relu"), commands=1),
    E2E("prelu", S("prelu"), detail=(("PRelu", "PReLU"),), quant=True),
    E2E("sigmoid", S("sigmoid"), commands=1),
    E2E("tanh", S("tanh"), commands=1),
    E2E("elu_alpha_half_cpu", S("elu"), cpu=("Elu",)),  # DMP's ELU has no alpha (§4.5)
    E2E("elu", S("elu_alpha1"), commands=1),
    E2E("clip_relu6", S("clip_inputs_relu6"), commands=1),
    E2E("clip_relu", clip_relu, commands=1),
    E2E("clip_general_cpu", S("clip_attrs_opset6"), cpu=("Clip",)),
    E2E("clip_general_between_convs", clip_between_convs, cpu=("Clip",), commands=2),
    *[E2E(f"conv_{act.lower()}{kw.get('alpha', '')}_fused", conv_act(act, **kw),
          fused=(("Conv", act),),
          commands=1, detail=(("Conv", f"+{word}"),), quant=act == "PRelu")
      for act, word, kw in (("Relu", "relu", {}), ("LeakyRelu", "leaky_relu 0.1", {"alpha": 0.1}),
                            ("PRelu", "prelu", {}), ("Sigmoid", "sigmoid", {}),
                            ("Tanh", "tanh", {}), ("Elu", "elu", {"alpha": 1.0}),
                            ("Clip", "relu6", {}))],
    E2E("conv_elu0.5_cpu", conv_act("Elu", alpha=0.5), cpu=("Elu",), commands=1),
    # -- pools -----------------------------------------------------------------------------
    E2E("maxpool_k3s2p1", S("maxpool_k3s2p1"), commands=1),
    E2E("maxpool_ceil", S("maxpool_ceil"), detail=(("MaxPool", "max-pool 3x3"),)),
    E2E("maxpool_same_upper", S("maxpool_same_upper"), commands=1),
    E2E("maxpool_k2s2", S("maxpool_k2s2"), commands=1),
    E2E("maxpool_dilated_cpu", S("maxpool_dilation"), cpu=("MaxPool",)),
    E2E("conv_relu_maxpool_fused", lambda: conv_pool_order("relu"),
        fused=(("Conv", "Relu", "MaxPool"),), commands=1,
        detail=(("Conv", "+maxpool 3x3 +relu"),), quant=True),
    E2E("conv_maxpool_relu_fused", lambda: conv_pool_order("pool"),
        fused=(("Conv", "MaxPool", "Relu"),), commands=1),
    E2E("avgpool_pads_cip1", S("avgpool_pads_cip1"), detail=(("AveragePool", "avg-pool 3x3"),)),
    E2E("avgpool_ceil_cip1", S("avgpool_ceil_cip1"), commands=1),
    E2E("avgpool_k2s2", avgpool_k2s2, commands=1),
    E2E("avgpool_pads_cip0_cpu", S("avgpool_pads_cip0"), cpu=("AveragePool",)),
    E2E("avgpool_ceil_cip0_cpu", S("avgpool_ceil_cip0"), cpu=("AveragePool",)),
    E2E("avgpool_dilated_cpu", S("avgpool_dilation_opset19"), cpu=("AveragePool",),
        detail=(("AveragePool", "dilated average pool"),)),
    E2E("gap_7x7", gap(7, 7), commands=1),
    E2E("gap_5x3", gap(5, 3), commands=1),
    E2E("gap_20x20_staged", gap(20, 20), commands=2),
    E2E("gap_16x9_staged", gap(16, 9, 12), commands=2),
    E2E("gmp_7x7_staged", gmp(7, 7), commands=2),
    E2E("gmp_10x12_staged", gmp(10, 12), commands=3),
    # -- Pad -------------------------------------------------------------------------------
    E2E("pad_folded", M.pad_conv, cpu=("Pad",), commands=3),
    # -- FC --------------------------------------------------------------------------------
    E2E("matmul_add_flatten_input", M.matmul_add, fused=(("Gemm", "Relu"),),
        detail=(("Gemm", "in place"),), absent=("MatMul", "Add"), quant=True),
    E2E("conv_flatten_gemm_c12", conv_flatten_gemm(12, 3), fused=(("Conv", "Relu"),),
        commands=2, detail=(("Gemm", "reads flattened conv output in place"),
                            ("Flatten", "absorbed"))),
    E2E("conv_flatten_gemm_c16", conv_flatten_gemm(16, 4), commands=2,
        detail=(("Gemm", "in place"),), quant=True),
    E2E("gemm_row_canonicalized", gemm_row, commands=1, detail=(("Gemm", "fc 12->6"),)),
    E2E("matmul_row", matmul_row, commands=1, detail=(("Gemm", "fc 12->5"),)),
    E2E("gemm_batch2", S("gemm_transB"), commands=1, detail=(("Gemm", "fc 6->5"),)),
    # -- views, concat, split --------------------------------------------------------------
    E2E("gap_squeeze_unsqueeze_reshape", gap_views, fused=(("Gemm", "Relu"),), commands=5,
        detail=(("Squeeze", "free view"), ("Unsqueeze", "free view"),
                ("Reshape", "free view"))),
    E2E("reshape_cpu", reshape_cpu, cpu=("Reshape",)),
    E2E("concat_multirun_8_8", concat(8, 8), commands=2,
        detail=(("Concat", "multi-run topo 0x3"),)),
    E2E("concat_multirun_8_5", concat(8, 5), commands=2,
        detail=(("Concat", "multi-run topo 0x3"),)),
    E2E("concat_cpu_copy_3_5", concat(3, 5), cpu=("Concat",), commands=3),
    E2E("split_views", split_convs, detail=(("Split", "zero-copy"),)),
    # -- CPU-only and removed ops ----------------------------------------------------------
    E2E("softmax_cpu", softmax_after_conv, cpu=("Softmax",), commands=1),
    E2E("transpose_cpu", transpose_after_conv, cpu=("Transpose",), commands=1),
    E2E("identity_dropout_removed", M.identity_chain, commands=1,
        absent=("Identity", "Dropout")),
    # -- Resize / Upsample -----------------------------------------------------------------
    E2E("resize_2x_nearest", resize_after_conv(), commands=3,
        detail=(("Resize", "2x nearest upsample"),)),
    E2E("resize_2x_nearest_asymmetric_floor", resize_after_conv(
        coordinate_transformation_mode="asymmetric", nearest_mode="floor"), commands=3),
    E2E("upsample_opset9_nearest", S("upsample_opset9_nearest"), commands=1),
    E2E("resize_2x_linear_cpu", resize_after_conv("linear"), cpu=("Resize",)),
    E2E("resize_3x_nearest_cpu", resize_after_conv(scales=(1, 1, 3, 3)), cpu=("Resize",)),
    # 2x output size, but not a replicate: scale 2.1 (floor(2.1*5) = 10, floor(2.1*4) = 8;
    # asymmetric/floor reads source rows 0,0,0,1,1,2,2,3,3,4),
    # and tf_half_pixel_for_nn / half_pixel with floor rounding shift the source pixels
    E2E("resize_scale_2p1_cpu", resize_after_conv(
        scales=(1, 1, 2.1, 2.1), coordinate_transformation_mode="asymmetric",
        nearest_mode="floor"), cpu=("Resize",)),
    E2E("resize_tf_half_pixel_cpu", S("resize_nearest_tf_half_pixel_for_nn"),
        cpu=("Resize",)),
    E2E("resize_half_pixel_floor_cpu", resize_after_conv(
        coordinate_transformation_mode="half_pixel", nearest_mode="floor"), cpu=("Resize",)),
    # -- found while writing this matrix (wrong results or a device fault before the fix) -
    E2E("prelu_per_column_cpu", prelu_per_column, cpu=("PRelu",)),
    E2E("conv_prelu_per_column", conv_prelu_per_column, cpu=("PRelu",), commands=1),
    E2E("dilated_depthwise_cpu", dw_dilated, cpu=("Conv",)),
    # -- more mapping rules ----------------------------------------------------------------
    E2E("dilated_strided_cpu", dilated_strided, cpu=("Conv",)),
    E2E("conv_add_relu6_maxpool_fused", conv_add_relu6_pool,
        fused=(("Conv", "Add", "Clip", "MaxPool"),), commands=1, quant=True),
    E2E("leaky_negative_not_past_pool", leaky_negative_pool,
        fused=(("Conv", "LeakyRelu"),), commands=2),
    E2E("gap_staged_sigmoid", gap_staged_sigmoid,
        fused=(("GlobalAveragePool", "Sigmoid"),), commands=3),
    E2E("concat_member_shared", concat_member_shared, commands=4,
        detail=(("Concat", "zero-copy"),)),
    E2E("flatten_two_gemms", flatten_two_gemms, commands=3, detail=(("Gemm", "in place"),)),
    E2E("squeeze_excite_mul_cpu", squeeze_excite, cpu=("Mul",), commands=3),
    E2E("conv_tanh_abs_fused", conv_tanh_abs, fused=(("Conv", "Tanh", "Abs"),), commands=1),
]


def _check_mapping(net, case: E2E) -> None:
    assert cpu_types(net) == sorted(case.cpu), f"CPU ops {where(net)}"
    cmds = hw_commands(net)
    if case.commands is not None:  # (as lowered: a chain counts its commands)
        assert hw_stage_count(net) == case.commands, f"hardware commands {cmds}"
    for group in case.fused:
        assert any(all(t in cmd for t in group) for cmd in cmds), \
            f"{group} not fused into one command: {cmds}"
    for op_type, text in case.detail:
        assert text in detail(net, op_type), where(net)
        if op_type not in case.cpu:
            assert ("hw", op_type) in [(wh, t) for t, wh in where(net)]
    for op_type in case.absent:
        assert op_type not in [t for t, _ in where(net)], f"{op_type} not folded: {where(net)}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_matrix(case: E2E) -> None:
    net, _ = run_case(case.build(), positive=case.positive)
    _check_mapping(net, case)
    assert net.meta["weights"]["quantized"] is False


QCASES = [c for c in CASES if c.quant]


@pytest.mark.parametrize("case", QCASES, ids=[c.name for c in QCASES])
def test_op_matrix_quantized(case: E2E) -> None:
    """Same mapping with 8-bit codebook weights; one or two small quantized layers stay
    within the FP16 tolerance (see the module docstring)."""
    net, _ = run_case(case.build(), quantize=True, positive=case.positive)
    _check_mapping(net, case)
    assert net.meta["weights"]["quantized"] is True


def test_multi_tile_conv_small_ubuf() -> None:
    """A layer that needs several UBUF tiles on a 256 KiB UBUF, compiled for it."""
    from dvsdk.hw import dims

    tiles, _, _ = dims.conv_tiles(112, 112, 32, 32, 3, 3, (1, 1, 1, 1), ub_size=262144)
    assert tiles > 1
    net, _ = run_case(big_conv(), ub_size=262144, device="sim://?ub_size=262144")
    assert hw_commands(net) == [["Conv"]]


def test_quantize_shrinks_weights_and_stays_close() -> None:
    """A layer with far more than 256 distinct weights: the codebook is lossy, the blob is
    about half the FP16 one, and the result stays within the quantized tolerance."""
    model = single("Conv", [(1, 32, 6, 6), w(80, 64, 32, 3, 3, scale=0.1), w(81, 64)],
                   {"pads": [1, 1, 1, 1]})
    fp16, _ = run_case(model)
    q, out = run_case(model, quantize=True, tol_rel=Q_TOL_REL)
    assert len(q.weights) < 0.6 * len(fp16.weights)
    feeds = M.make_feeds(model, seed=7)
    err_q, _ = max_err(out["y0"], ort_reference(model, feeds)[0])
    with Net(fp16, SIM) as n:
        err_f, _ = max_err(n.run(feeds)["y0"], ort_reference(model, feeds)[0])
    assert err_q > 2 * err_f  # really quantized (18432 distinct weights -> 255 values)


