"""How single ONNX-semantics ops map onto DV700 run fields (reference §4, dmp-convertor §2).

Each mapper takes an :class:`~dvsdk.compiler.ir.Op` and its graph and returns the
pieces of a :class:`~dvsdk.driver.commands.ConvRun`, or raises :class:`NoMapping`
with the reason the op stays on the CPU.  The tables at the bottom are the
compiler's own statement of what runs where; the README's supported-ops table
is generated from them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw.fp16 import fp16_bits, fp16_value
from ..hw.spec import SPEC
from .ir import Graph, Op


class NoMapping(Exception):
    """The op (or fusion) has no hardware mapping; ``str(e)`` says why."""


@dataclass
class Act:
    code: int
    param: float = 0.0
    prelu: np.ndarray | None = None
    monotonic: bool = True


def hwc(shape: tuple[int, ...] | None) -> tuple[int, int, int] | None:
    """Device tensor shape (H, W, C) of one sample of an IR shape (N, C, H, W) or (N, C), or
    None if it cannot live on the device.  The N samples lie back to back (§1, §4.10): see
    :func:`samples`."""
    if shape is None or 0 in shape:
        return None
    if len(shape) == 4:
        return int(shape[2]), int(shape[3]), int(shape[1])
    if len(shape) == 2:
        return 1, 1, int(shape[1])
    return None


def samples(shape: tuple[int, ...]) -> int:
    """N of an (N, C, H, W) or (N, C) device tensor: the batch a command over it carries in
    ``input_circular_offset`` (§4.10)."""
    return int(shape[0])


def _fp16_exact(v: float, what: str) -> float:
    f = float(np.float16(v))
    if not np.isfinite(f) or (v != 0 and abs(f - v) > 1e-3 * abs(v)):
        raise NoMapping(f"{what} {v} is not representable in FP16")
    return f


def activation(op: Op, graph: Graph, channels: int) -> Act:
    """§4.5 activation codes: 1 tanh, 2 leaky ReLU, 3 sigmoid, 4 PReLU, 5 ELU, 6 ReLU6."""
    t = op.type
    if t == "Relu":
        return Act(2, 0.0)
    if t == "LeakyRelu":
        alpha = float(op.attrs.get("alpha", 0.01))
        return Act(2, _fp16_exact(alpha, "LeakyRelu alpha"), monotonic=alpha >= 0)
    if t == "Sigmoid":
        return Act(3)
    if t == "Tanh":
        return Act(1)
    if t == "Elu":
        # DMP's converter and every DMP test send actfunc_param = 0 for ELU (α = 1, §4.5;
        # dmp-convertor.md: "alpha is not passed"); nothing shows the hardware honouring
        # another value, so other alphas stay on the CPU.
        alpha = float(op.attrs.get("alpha", 1.0))
        if alpha != 1.0:
            raise NoMapping(f"Elu alpha {alpha:g}: the DV700's ELU takes no alpha (DMP sends "
                            "actfunc_param 0, alpha 1)")
        return Act(5, 0.0)
    if t == "Clip":
        lo, hi = op.attrs.get("min", -np.inf), op.attrs.get("max", np.inf)
        if lo == 0 and hi == 6:
            return Act(6)
        if lo == 0 and hi == np.inf:
            return Act(2, 0.0)
        raise NoMapping(f"Clip({lo}, {hi}) is neither ReLU nor ReLU6")
    if t == "PRelu":
        slope = graph.const(op.input(1))
        if slope is None:
            raise NoMapping("PRelu slopes are not constant")
        s = np.asarray(slope, np.float32)
        if s.size == 1:
            s = np.full(channels, float(s.reshape(-1)[0]), np.float32)
        else:
            # ONNX broadcasting aligns the slope with the LAST axes of x: (C, 1, 1) is
            # per-channel on NCHW, but (C,) is per-column (W == C); on (N, C) (C,) is per-channel
            xs = graph.shape(op.inputs[0])
            rank = len(xs) if xs is not None else 0
            full = (1,) * (rank - s.ndim) + tuple(s.shape) if s.ndim <= rank else ()
            if rank < 2 or len(full) != rank or full[1] != channels or any(
                    d != 1 for i, d in enumerate(full) if i != 1):
                raise NoMapping(f"PRelu slopes {tuple(s.shape)} are not per-channel")
            s = s.reshape(-1)
        return Act(4, 0.0, s, monotonic=bool((s >= 0).all()))
    raise NoMapping(f"{t} is not an activation")


ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Clip", "PRelu")


def pads_lrtb(op: Op) -> tuple[int, int, int, int]:
    """ONNX pads ``[top, left, bottom, right]`` → DV700 (left, right, top, bottom)."""
    p = [int(v) for v in op.attrs.get("pads", [0, 0, 0, 0])]
    if len(p) != 4:
        raise NoMapping("only 2-D windows map to the DV700")
    return p[1], p[3], p[0], p[2]


def check_pads(pads: tuple[int, int, int, int], what: str, seven_bit: bool = True) -> None:
    l, r, t, b = pads
    lim_a = 127 if seven_bit else 255
    if min(pads) < 0 or l > lim_a or t > lim_a or r > 255 or b > 255:
        raise NoMapping(f"{what} pads {pads} exceed the hardware fields")


def window(op: Op) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kx, ky), (sx, sy), (dx, dy) from ONNX kernel_shape/strides/dilations (H, W order)."""
    k = [int(v) for v in op.attrs["kernel_shape"]]
    s = [int(v) for v in op.attrs.get("strides", [1, 1])]
    d = [int(v) for v in op.attrs.get("dilations", [1, 1])]
    if len(k) != 2:
        raise NoMapping("only 2-D windows map to the DV700")
    return (k[1], k[0]), (s[1], s[0]), (d[1], d[0])


def extra_pad(in_size: int, k_eff: int, pa: int, pb: int, stride: int, want: int) -> int:
    """Extra right/bottom padding so the hardware's floor formula yields ``want`` outputs."""
    have = (pa + in_size + pb - k_eff) // stride + 1
    if have == want:
        return 0
    extra = (want - 1) * stride + k_eff - (pa + in_size + pb)
    if extra < 0:
        raise NoMapping("output size cannot be matched by padding")
    return extra


def fp16_param(v: float) -> int:
    return fp16_bits(v)


def act_words(code: int, param: int = 0) -> str:
    """A fused activation as ``--report`` shows it: the §4.5 ``actfunc`` name from
    ``firmware_spec/commands.yaml``, ``relu`` for a leaky ReLU of slope 0, and the FP16
    parameter where it matters (the leaky ReLU slope)."""
    name = SPEC.enum("actfunc").name_of(code)
    value = fp16_value(param)
    if name == "leaky_relu":
        return "relu" if value == 0 else f"leaky_relu {value:.3g}"
    return name


# -- the compiler's tables (also used to generate the README's supported-ops table) --------

#: op type -> how it runs on the DV700 when its conditions hold
HARDWARE_OPS: dict[str, str] = {
    "Conv": "conv run (group 1), depthwise run (group = C = M); kernels up to 7x7, dilation "
            "on single-run 'same' convs; grouped convs are split first",
    "ConvTranspose": "deconv run (180-degree kernels, FPGA pads), depthwise deconv",
    "BatchNormalization": "folded into the producing conv, else a depthwise 1x1 run",
    "Add": "folded into a conv bias (constant), fused element-wise add (conv -> add), or an "
           "element-wise run",
    "Sub": "folded (constant) or a depthwise 1x1 run", "Mul": "folded or a depthwise 1x1 run",
    "Div": "folded or a depthwise 1x1 run",
    "Relu": "fused activation (leaky ReLU, slope 0)", "LeakyRelu": "fused activation",
    "PRelu": "fused activation (FP16 weights)", "Sigmoid": "fused activation",
    "Tanh": "fused activation", "Elu": "fused activation (alpha 1; other alphas on the CPU)",
    "Clip": "ReLU6 / ReLU fused activation; other bounds on the CPU",
    "HardSigmoid": "after a conv/FC: ReLU6 fused into it, a*x + b folded into its weights "
                   "(times 6), the 1/6 into the convs after SE's Mul or a constant Mul",
    "MaxPool": "max-pool run or fused into the conv run (2..3 x 1..3), ceil_mode via padding; "
               "k x k / k windows with k = 2^a 3^b as 2x2/3x3 stages; larger windows (5x5, "
               "9x9, 13x13) as cascades of stride-1 pools, the -inf padding spread over them",
    "Abs": "rectification fused after an activation (rectifi_en)",
    "AveragePool": "average-pool run (up to 7x7; count_include_pad or no padding)",
    "GlobalAveragePool": "average-pool run(s), staged for inputs larger than 7x7",
    "GlobalMaxPool": "max-pool runs staged 3x3/3 with -inf padding",
    "ReduceMean": "over the spatial axes (2, 3) of a 4-D tensor: as GlobalAveragePool "
                  "(keepdims 0: then a Reshape); other axes on the CPU",
    "ReduceMax": "over the spatial axes (2, 3) of a 4-D tensor: as GlobalMaxPool "
                 "(keepdims 0: then a Reshape); other axes on the CPU",
    "Gemm": "1x1 conv on a 1x1xN input; flattened conv outputs read in place with "
            "permuted weights", "MatMul": "as Gemm when the weight is constant",
    "Resize": "2x nearest upsample run (4x, 8x ... as 2x stages)",
    "Upsample": "2x nearest upsample run (4x, 8x ... as 2x stages)",
    "LRN": "LRN run (size 5, alpha 1e-4, beta 0.75, bias 1, C % 16 == 0) only when the op "
           "carries dvsdk_target='hw', as dvsdk.vx sets within the unit's error bound "
           "(firmware_spec/lrn.md); otherwise the CPU",
    "Concat": "inception/fire branches as one multi-run command (topo), else zero-copy "
              "placement; every branch but the last needs C % 8 == 0",
    "Split": "channel split: zero-copy views of the input (every part but the last C % 8 "
             "== 0); a concat of all parts in order places the split tensor itself",
    "Flatten": "free view when H = W = 1, else read in place by the following Gemm",
    "Reshape": "free view when H = W = 1", "Squeeze": "free view", "Unsqueeze": "free view",
    "Pad": "folded into the next conv / average pool (constant zero)",
    "Identity": "removed", "Dropout": "removed",
}
