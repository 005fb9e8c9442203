"""onnx.helper model builders shared by the compiler tests.

Every builder returns a fresh ``onnx.ModelProto`` (default opset 13) with deterministic
weights (fixed numpy seeds). ``SINGLE_OP_CASES``, ``PATTERN_CASES`` and ``NET_CASES`` list
:class:`Case` objects (name, builder, feed hints) for parametrized tests; :func:`make_feeds`
builds seeded random inputs for any model.

Contents: one or more single-op models for every op the compiler supports (attribute
variants included), fusion patterns (Conv+BN+Relu, residual Add, Conv+MaxPool, Pad+Conv,
MatMul+Add, affine chains, grouped conv), a MobileNetV2-like and a ResNet-like net, a
torch.onnx.export-style model with shape subgraphs, and broken models for error tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
F, I64 = TensorProto.FLOAT, TensorProto.INT64


@dataclass(frozen=True)
class Case:
    """A named model builder plus hints for feeding it."""

    name: str
    build: Callable[[], onnx.ModelProto]
    positive: bool = False  # feed strictly positive values (Log, Sqrt, Pow ...)
    input_sizes: dict = field(default_factory=dict)  # for load_onnx and make_feeds


def w(seed: int, *shape: int, scale: float = 0.5) -> np.ndarray:
    """Deterministic float32 normal weights."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence, outputs: Sequence,
               inits: dict[str, np.ndarray] | None = None, opset: int = OPSET,
               name: str = "model") -> onnx.ModelProto:
    """A model from nodes. ``inputs``: (name, shape[, elem_type]); a shape entry may be a
    string (dim_param). ``outputs``: names or (name, elem_type); output shapes are left open."""
    ins = [helper.make_tensor_value_info(i[0], i[2] if len(i) > 2 else F, i[1]) for i in inputs]
    outs = [helper.make_tensor_value_info(o, F, None) if isinstance(o, str)
            else helper.make_tensor_value_info(o[0], o[1], None) for o in outputs]
    init = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(list(nodes), name, ins, outs, init)
    return helper.make_model_gen_version(graph, opset_imports=[helper.make_opsetid("", opset)],
                                         producer_name="dvsdk-tests")


def single(op: str, inputs: Sequence, attrs: dict | None = None, *, opset: int = OPSET,
           n_out: int = 1, out_type: int = F) -> onnx.ModelProto:
    """One-node model. Each input is a shape tuple (graph input ``x<i>``), an ndarray
    (initializer ``c<i>``) or None (absent optional input)."""
    names, g_in, inits = [], [], {}
    for i, spec in enumerate(inputs):
        if spec is None:
            names.append("")
        elif isinstance(spec, (np.ndarray, np.generic)):
            names.append(f"c{i}")
            inits[f"c{i}"] = np.asarray(spec)
        else:
            names.append(f"x{i}")
            g_in.append((f"x{i}", list(spec)))
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op, names, outs, name=f"{op.lower()}0", **(attrs or {}))
    return make_model([node], g_in, [(o, out_type) for o in outs], inits, opset, f"{op}_model")


def _i(*v: int) -> np.ndarray:
    return np.array(v, dtype=np.int64)


def _f(*v: float) -> np.ndarray:
    return np.array(v, dtype=np.float32)


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run ``model`` with onnxruntime (the independent reference), CPU provider."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    # onnxruntime 1.31's graph optimizer fuses a zero Pad into a following MaxPool (whose
    # padding is -inf) and returns wrong values; the reference runs the graph as written.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_close(y: np.ndarray, ref: np.ndarray, what: str = "") -> float:
    """The suite's metric: shapes equal and max|y - ref| <= 1e-4 * max(1, range(ref)).

    Returns the max-abs error (0 for integer/bool outputs, which must match exactly)."""
    y, ref = np.asarray(y), np.asarray(ref)
    assert y.shape == ref.shape, f"{what}: shape {y.shape} != reference {ref.shape}"
    if ref.dtype.kind not in "fc":
        np.testing.assert_array_equal(y, ref, err_msg=what)
        return 0.0
    if ref.size == 0:
        return 0.0
    err = float(np.max(np.abs(y.astype(np.float64) - ref.astype(np.float64))))
    span = float(ref.max() - ref.min())
    assert err <= 1e-4 * max(1.0, span), f"{what}: max-abs error {err:.3g} (range {span:.3g})"
    return err


def make_feeds(model: onnx.ModelProto, seed: int = 0, positive: bool = False,
               input_sizes: dict | None = None) -> dict[str, np.ndarray]:
    """Seeded random feeds for every graph input (free batch -> 1, others from input_sizes)."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if input_sizes and vi.name in input_sizes:
            shape = list(input_sizes[vi.name])
        else:
            shape = [d.dim_value if d.dim_value > 0 else 1 for d in vi.type.tensor_type.shape.dim]
        x = rng.uniform(0.5, 2.0, shape) if positive else rng.standard_normal(shape)
        feeds[vi.name] = x.astype(helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type))
    return feeds


# --------------------------------------------------------------------------- single ops
X4 = (1, 4, 7, 7)
_BN = [w(1, 4), w(2, 4), w(3, 4), np.random.default_rng(4).uniform(0.5, 2, 4).astype(np.float32)]


def _single_cases() -> list[Case]:
    c: list[Case] = []

    def add(name: str, build: Callable[[], onnx.ModelProto], **kw) -> None:
        c.append(Case(name, build, **kw))

    # Conv variants
    add("conv_basic", lambda: single("Conv", [(1, 3, 8, 8), w(1, 4, 3, 3, 3), w(2, 4)],
                                     {"pads": [1, 1, 1, 1]}))
    add("conv_stride_asym_pads", lambda: single(
        "Conv", [(1, 3, 9, 8), w(1, 5, 3, 3, 3), w(2, 5)],
        {"strides": [2, 2], "pads": [0, 1, 2, 1]}))
    add("conv_dilation", lambda: single("Conv", [(1, 3, 9, 9), w(3, 4, 3, 3, 3)],
                                        {"dilations": [2, 2], "pads": [2, 2, 2, 2]}))
    add("conv_group2", lambda: single("Conv", [(1, 4, 7, 7), w(4, 6, 2, 3, 3), w(5, 6)],
                                      {"group": 2, "pads": [1, 1, 1, 1]}))
    add("conv_depthwise", lambda: single("Conv", [X4, w(6, 4, 1, 3, 3), w(7, 4)],
                                         {"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}))
    add("conv_depthwise_mult2", lambda: single("Conv", [X4, w(8, 8, 1, 3, 3)], {"group": 4}))
    add("conv_same_upper", lambda: single("Conv", [(1, 3, 8, 8), w(9, 4, 3, 4, 4)],
                                          {"auto_pad": "SAME_UPPER", "strides": [2, 3]}))
    add("conv_same_lower", lambda: single("Conv", [(1, 3, 8, 8), w(9, 4, 3, 4, 4)],
                                          {"auto_pad": "SAME_LOWER", "strides": [1, 2]}))
    add("conv_valid", lambda: single("Conv", [(1, 3, 8, 8), w(10, 4, 3, 3, 3)],
                                     {"auto_pad": "VALID", "strides": [2, 2]}))
    add("conv_rect_kernel", lambda: single("Conv", [(1, 2, 6, 11), w(11, 3, 2, 1, 5)],
                                           {"strides": [1, 2], "pads": [0, 2, 0, 2]}))
    add("conv_1d", lambda: single("Conv", [(1, 3, 12), w(12, 4, 3, 3), w(13, 4)],
                                  {"pads": [1, 1]}))
    add("conv_3d", lambda: single("Conv", [(1, 2, 4, 5, 5), w(14, 3, 2, 3, 3, 3)],
                                  {"pads": [1, 1, 1, 1, 1, 1]}))
    # ConvTranspose variants
    add("convT_outpad", lambda: single(
        "ConvTranspose", [(1, 4, 5, 5), w(20, 4, 3, 3, 3), w(21, 3)],
        {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}))
    add("convT_group", lambda: single("ConvTranspose", [(1, 4, 4, 4), w(22, 4, 2, 3, 3)],
                                      {"group": 2, "strides": [2, 2]}))
    add("convT_output_shape", lambda: single(
        "ConvTranspose", [(1, 2, 5, 5), w(23, 2, 3, 3, 3)],
        {"strides": [2, 2], "output_shape": [10, 11]}))
    add("convT_same_upper", lambda: single(
        "ConvTranspose", [(1, 2, 4, 5), w(24, 2, 2, 3, 3)],
        {"strides": [2, 2], "auto_pad": "SAME_UPPER"}))
    add("convT_dilation_asym", lambda: single(
        "ConvTranspose", [(1, 2, 4, 4), w(25, 2, 3, 3, 3)],
        {"dilations": [2, 1], "pads": [1, 0, 0, 1]}))
    add("batchnorm", lambda: single("BatchNormalization", [X4, *_BN], {"epsilon": 1e-3}))
    # elementwise
    for op in ("Add", "Sub", "Mul", "Div"):
        add(f"{op.lower()}_const_channel", lambda op=op: single(op, [X4, w(30, 4, 1, 1) + 2]))
        add(f"{op.lower()}_tensors", lambda op=op: single(op, [X4, (1, 4, 1, 7)]),
            positive=op == "Div")
        add(f"{op.lower()}_scalar_first", lambda op=op: single(op, [np.float32(1.5), X4]),
            positive=op == "Div")
    add("pow", lambda: single("Pow", [X4, _f(2.0)]), positive=True)
    add("mod_fmod", lambda: single("Mod", [X4, w(32, 4, 1, 1) + 2], {"fmod": 1}))
    for op in ("Sum", "Max", "Min", "Mean"):
        add(op.lower(), lambda op=op: single(op, [X4, (1, 4, 1, 1), w(31, 7)]))
    add("relu", lambda: single("Relu", [X4]))
    add("leaky_relu", lambda: single("LeakyRelu", [X4], {"alpha": 0.2}))
    add("leaky_relu_default", lambda: single("LeakyRelu", [X4]))
    add("prelu", lambda: single("PRelu", [X4, w(32, 4, 1, 1)]))
    for op in ("Sigmoid", "Tanh", "Neg", "Abs", "Exp", "Softplus", "Softsign", "Floor", "Ceil",
               "Reciprocal", "Sign", "Round"):
        add(op.lower(), lambda op=op: single(op, [X4]), positive=op == "Reciprocal")
    for op in ("Sqrt", "Log"):
        add(op.lower(), lambda op=op: single(op, [X4]), positive=True)
    add("elu", lambda: single("Elu", [X4], {"alpha": 0.5}))
    add("elu_alpha1", lambda: single("Elu", [X4], {"alpha": 1.0}))
    add("selu", lambda: single("Selu", [X4]))
    add("hard_sigmoid", lambda: single("HardSigmoid", [X4], {"alpha": 0.3, "beta": 0.4}))
    add("hard_swish", lambda: single("HardSwish", [(1, 4, 7, 7)], opset=14))
    add("clip_inputs_relu6", lambda: single("Clip", [X4, np.float32(0), np.float32(6)]))
    add("clip_max_only", lambda: single("Clip", [X4, None, np.float32(0.5)]))
    add("clip_attrs_opset6", lambda: single("Clip", [X4], {"min": -0.5, "max": 0.7}, opset=6))
    add("clip_no_bounds", lambda: single("Clip", [X4]))
    # pools
    add("maxpool_k3s2p1", lambda: single("MaxPool", [(1, 3, 9, 9)], {
        "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}))
    add("maxpool_ceil", lambda: single("MaxPool", [(1, 3, 8, 8)], {
        "kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}))
    add("maxpool_ceil_drop_window", lambda: single("MaxPool", [(1, 2, 5, 5)], {
        "kernel_shape": [1, 1], "strides": [3, 3], "ceil_mode": 1}))
    add("maxpool_dilation", lambda: single("MaxPool", [(1, 2, 9, 9)], {
        "kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 0, 1, 0]}))
    add("maxpool_same_upper", lambda: single("MaxPool", [(1, 2, 7, 8)], {
        "kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"}))
    add("maxpool_k2s2", lambda: single("MaxPool", [(1, 3, 8, 6)], {
        "kernel_shape": [2, 2], "strides": [2, 2]}))
    for cip in (0, 1):
        add(f"avgpool_pads_cip{cip}", lambda cip=cip: single("AveragePool", [(1, 3, 7, 7)], {
            "kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
            "count_include_pad": cip}))
        add(f"avgpool_ceil_cip{cip}", lambda cip=cip: single("AveragePool", [(1, 3, 8, 8)], {
            "kernel_shape": [3, 3], "strides": [2, 2], "pads": [0, 0, 1, 1], "ceil_mode": 1,
            "count_include_pad": cip}))
    add("avgpool_dilation_opset19", lambda: single("AveragePool", [(1, 2, 9, 9)], {
        "kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 1, 1, 1],
        "count_include_pad": 1}, opset=19))
    add("avgpool_same_lower", lambda: single("AveragePool", [(1, 2, 6, 7)], {
        "kernel_shape": [2, 3], "auto_pad": "SAME_LOWER"}))
    add("global_avgpool", lambda: single("GlobalAveragePool", [X4]))
    add("global_maxpool", lambda: single("GlobalMaxPool", [X4]))
    add("lrn", lambda: single("LRN", [(1, 6, 5, 5)], {"size": 3, "alpha": 1e-2, "beta": 0.75,
                                                      "bias": 2.0}))
    add("lrn_size5", lambda: single("LRN", [(1, 7, 3, 3)], {"size": 5}))
    # Pad
    add("pad_constant_value", lambda: single(
        "Pad", [X4, _i(0, 0, 1, 2, 0, 0, 2, 1), np.float32(0.5)]))
    add("pad_reflect", lambda: single("Pad", [X4, _i(0, 0, 2, 1, 0, 0, 1, 2)], {"mode": "reflect"}))
    add("pad_edge", lambda: single("Pad", [X4, _i(0, 0, 2, 1, 0, 0, 1, 2)], {"mode": "edge"}))
    add("pad_negative", lambda: single("Pad", [X4, _i(0, 0, -1, 2, 0, 0, 1, -2)]))
    add("pad_attrs_opset10", lambda: single("Pad", [X4], {"pads": [0, 0, 1, 1, 0, 0, 1, 1],
                                                       "value": 1.0}, opset=10))
    add("pad_wrap_opset19", lambda: single("Pad", [X4, _i(0, 0, 1, 2, 0, 0, 2, 1)],
                                           {"mode": "wrap"}, opset=19))
    add("pad_axes_opset18", lambda: single("Pad", [X4, _i(1, 2, 3, 0), None, _i(2, 3)],
                                           opset=18))
    # Gemm / MatMul
    add("gemm_transB", lambda: single("Gemm", [(2, 6), w(40, 5, 6), w(41, 5)], {"transB": 1}))
    add("gemm_transA_alpha_beta", lambda: single(
        "Gemm", [(6, 3), w(42, 6, 5), w(43, 3, 5)], {"transA": 1, "alpha": 0.5, "beta": 2.0}))
    add("gemm_scalar_c", lambda: single("Gemm", [(3, 6), w(44, 6, 4), np.float32(0.3)],
                                        {"beta": 0.5}))
    add("gemm_no_c", lambda: single("Gemm", [(3, 6), w(45, 6, 4)], {"alpha": 2.0}))
    add("gemm_two_inputs", lambda: single("Gemm", [(3, 6), (4, 6), (1, 4)], {"transB": 1}))
    add("matmul_const", lambda: single("MatMul", [(3, 6), w(46, 6, 4)]))
    add("matmul_batched", lambda: single("MatMul", [(2, 3, 6), w(47, 6, 4)]))
    add("matmul_tensors", lambda: single("MatMul", [(2, 3, 6), (2, 6, 5)]))
    # layout ops
    add("flatten", lambda: single("Flatten", [X4]))
    add("flatten_axis2", lambda: single("Flatten", [X4], {"axis": 2}))
    add("flatten_axis0", lambda: single("Flatten", [X4], {"axis": 0}))
    add("reshape", lambda: single("Reshape", [X4, _i(0, -1, 7)]))
    add("squeeze", lambda: single("Squeeze", [(1, 4, 1, 7), _i(0, 2)]))
    add("squeeze_all", lambda: single("Squeeze", [(1, 4, 1, 7)]))
    add("squeeze_opset11", lambda: single("Squeeze", [(1, 4, 1, 7)], {"axes": [-2]}, opset=11))
    add("unsqueeze", lambda: single("Unsqueeze", [(4, 7), _i(0, -1)]))
    add("unsqueeze_opset11", lambda: single("Unsqueeze", [(4, 7)], {"axes": [1]}, opset=11))
    add("concat_axis1", lambda: single("Concat", [X4, (1, 2, 7, 7), w(50, 1, 3, 7, 7)],
                                       {"axis": 1}))
    add("concat_neg_axis", lambda: single("Concat", [X4, (1, 4, 7, 2)], {"axis": -1}))
    add("split_input", lambda: single("Split", [(1, 6, 4, 4), _i(2, 4)], {"axis": 1}, n_out=2))
    add("split_equal", lambda: single("Split", [(1, 6, 4, 4)], {"axis": 1}, n_out=3))
    add("split_attr_opset11", lambda: single("Split", [(1, 6, 4, 4)],
                                             {"axis": -1, "split": [1, 3]}, opset=11, n_out=2))
    add("split_num_outputs_opset18", lambda: single("Split", [(1, 7, 4, 4)],
                                                    {"axis": 1, "num_outputs": 3}, opset=18,
                                                    n_out=3))
    add("transpose", lambda: single("Transpose", [X4], {"perm": [0, 2, 3, 1]}))
    add("transpose_default", lambda: single("Transpose", [(2, 3, 4)]))
    add("identity", lambda: single("Identity", [X4]))
    add("dropout_opset12", lambda: single("Dropout", [X4, np.float32(0.3)], opset=12))
    add("depth_to_space_dcr", lambda: single("DepthToSpace", [(1, 8, 3, 3)], {"blocksize": 2}))
    add("depth_to_space_crd", lambda: single("DepthToSpace", [(1, 8, 3, 3)],
                                             {"blocksize": 2, "mode": "CRD"}))
    add("space_to_depth", lambda: single("SpaceToDepth", [(1, 2, 4, 6)], {"blocksize": 2}))
    add("instance_norm", lambda: single("InstanceNormalization", [X4, w(51, 4), w(52, 4)]))
    # Softmax
    add("softmax_last", lambda: single("Softmax", [(2, 5, 3)]))
    add("softmax_axis1", lambda: single("Softmax", [X4], {"axis": 1}))
    add("softmax_opset11_coerce", lambda: single("Softmax", [(2, 3, 4)], {"axis": 1}, opset=11))
    add("softmax_opset11_default", lambda: single("Softmax", [(2, 3, 4)], opset=11))
    add("logsoftmax", lambda: single("LogSoftmax", [(2, 5)]))
    # Resize / Upsample
    sc2 = _f(1, 1, 2, 2)
    for ctm, nm in (("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                    ("align_corners", "round_prefer_ceil"), ("tf_half_pixel_for_nn", "ceil")):
        add(f"resize_nearest_{ctm}", lambda ctm=ctm, nm=nm: single(
            "Resize", [(1, 2, 4, 5), None, sc2], {"mode": "nearest",
                                                  "coordinate_transformation_mode": ctm,
                                                  "nearest_mode": nm}))
    for ctm in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
        add(f"resize_linear_{ctm}", lambda ctm=ctm: single(
            "Resize", [(1, 2, 4, 5), None, sc2], {"mode": "linear",
                                                  "coordinate_transformation_mode": ctm}))
    add("resize_nearest_sizes", lambda: single(
        "Resize", [(1, 2, 5, 5), None, None, _i(1, 2, 7, 3)], {"mode": "nearest"}))
    add("resize_linear_sizes_ac", lambda: single(
        "Resize", [(1, 2, 5, 5), None, None, _i(1, 2, 9, 3)],
        {"mode": "linear", "coordinate_transformation_mode": "align_corners"}))
    add("resize_linear_down", lambda: single("Resize", [(1, 2, 8, 8), None, _f(1, 1, .5, .5)],
                                             {"mode": "linear"}))
    add("resize_empty_roi_scales", lambda: single(
        "Resize", [(1, 2, 3, 3), _f(), _f(), _i(1, 2, 6, 6)], {"mode": "nearest"}))
    add("resize_axes_sizes_opset18", lambda: single(
        "Resize", [(1, 2, 5, 7), None, None, _i(9, 4)], {"mode": "linear", "axes": [2, 3]},
        opset=18))
    add("resize_axes_scales_opset18", lambda: single(
        "Resize", [(1, 2, 5, 7), None, _f(2.0, 0.5)], {"axes": [3, 2]}, opset=18))
    add("resize_not_smaller_opset18", lambda: single(
        "Resize", [(1, 2, 5, 7), None, None, _i(9, 9)],
        {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}, opset=18))
    add("resize_half_pixel_symmetric_opset19", lambda: single(
        "Resize", [(1, 2, 5, 7), None, _f(1, 1, 1.7, 0.6)],
        {"mode": "linear", "coordinate_transformation_mode": "half_pixel_symmetric"}, opset=19))
    add("resize_opset10", lambda: single("Resize", [(1, 2, 3, 4), _f(1, 1, 2, 1.5)],
                                         {"mode": "nearest"}, opset=10))
    add("upsample_opset9_nearest", lambda: single("Upsample", [(1, 2, 3, 4), _f(1, 1, 2, 2)],
                                                  opset=9))
    add("upsample_opset9_linear", lambda: single("Upsample", [(1, 2, 3, 4), _f(1, 1, 2, 3)],
                                                 {"mode": "linear"}, opset=9))
    add("upsample_opset7_attr", lambda: single("Upsample", [(1, 2, 3, 4)],
                                               {"scales": [1.0, 1.0, 2.0, 2.0]}, opset=7))
    # shape-subgraph ops on data tensors
    add("slice_steps", lambda: single("Slice", [(1, 4, 9, 8), _i(1, -2), _i(100, 0),
                                                _i(2, 3), _i(2, -3)]))
    add("slice_opset9_attrs", lambda: single("Slice", [X4], {"starts": [1], "ends": [-1],
                                                             "axes": [3]}, opset=9))
    add("gather_axis1", lambda: single("Gather", [X4, _i(3, 0, -1)], {"axis": 1}))
    add("gather_scalar", lambda: single("Gather", [X4, np.array(2, np.int64)], {"axis": 2}))
    add("expand", lambda: single("Expand", [(1, 4, 1, 1), _i(2, 1, 3, 3)]))
    add("tile", lambda: single("Tile", [(1, 2, 3, 2), _i(1, 2, 1, 3)]))
    add("cast_to_int", lambda: single("Cast", [X4], {"to": I64}, out_type=I64))
    add("shape", lambda: single("Shape", [X4], out_type=I64))
    add("shape_start_end", lambda: single("Shape", [X4], {"start": 1, "end": -1}, opset=15,
                                          out_type=I64))
    add("constant_of_shape", lambda: single(
        "ConstantOfShape", [_i(2, 3)], {"value": numpy_helper.from_array(_f(1.5))}))
    add("range", lambda: single("Range", [np.float32(1), np.float32(4), np.float32(0.7)]))
    for op in ("ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2"):
        add(op.lower(), lambda op=op: single(op, [X4], {"axes": [2, 3]}))
        add(op.lower() + "_opset18", lambda op=op: single(op, [X4, _i(1)], {"keepdims": 0},
                                                          opset=18))
    add("reducesum_input", lambda: single("ReduceSum", [X4, _i(-1)], {"keepdims": 0}))
    add("reducesum_all", lambda: single("ReduceSum", [X4]))
    add("argmax", lambda: single("ArgMax", [X4], {"axis": 1}, out_type=I64))
    add("argmin_last", lambda: single("ArgMin", [X4], {"axis": -1, "keepdims": 0,
                                                       "select_last_index": 1}, out_type=I64))
    add("where_greater", lambda: make_model(
        [helper.make_node("Greater", ["x", "t"], ["m"]),
         helper.make_node("Where", ["m", "x", "z"], ["y"])],
        [("x", X4), ("z", (1, 4, 1, 1))], ["y"], {"t": _f(0.1)}))
    add("equal_cast", lambda: make_model(
        [helper.make_node("Cast", ["x"], ["xi"], to=I64),
         helper.make_node("Equal", ["xi", "k"], ["e"]),
         helper.make_node("Cast", ["e"], ["y"], to=F)],
        [("x", X4)], ["y"], {"k": _i(0)}))
    return c


SINGLE_OP_CASES: list[Case] = _single_cases()


# --------------------------------------------------------------------------- net builder
class NetBuilder:
    """Accumulates nodes/initializers with generated names and deterministic weights."""

    def __init__(self, seed: int = 0, opset: int = OPSET) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.seed, self.opset, self.n = seed, opset, 0

    def _name(self, hint: str) -> str:
        self.n += 1
        return f"{hint}{self.n}"

    def const(self, value: np.ndarray, hint: str = "c") -> str:
        name = self._name(hint)
        self.inits[name] = np.asarray(value)
        return name

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> str | list[str]:
        outs = [self._name(op.lower() + "_out") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self._name(op), **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x: str, cin: int, cout: int, k: int = 3, s: int = 1, p: int | None = None,
             group: int = 1, bias: bool = True) -> str:
        self.seed += 1
        p = k // 2 if p is None else p
        ins = [x, self.const(w(self.seed, cout, cin // group, k, k,
                                scale=(2.0 / (cin // group * k * k)) ** 0.5), "W")]
        if bias:
            ins.append(self.const(w(self.seed + 1000, cout, scale=0.1), "B"))
        return self.node("Conv", ins, kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                         group=group)

    def bn(self, x: str, c: int) -> str:
        self.seed += 1
        rng = np.random.default_rng(self.seed)
        params = [rng.uniform(0.5, 1.5, c), rng.normal(0, 0.1, c), rng.normal(0, 0.1, c),
                  rng.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x] + [self.const(p.astype(np.float32), "bn")
                                                      for p in params], epsilon=1e-5)

    def relu6(self, x: str) -> str:
        return self.node("Clip", [x, self.const(np.float32(0), "lo"),
                                  self.const(np.float32(6), "hi")])

    def model(self, inputs: Sequence, outputs: Sequence, name: str) -> onnx.ModelProto:
        return make_model(self.nodes, inputs, outputs, self.inits, self.opset, name)


# --------------------------------------------------------------------------- patterns
def conv_bn_relu() -> onnx.ModelProto:
    b = NetBuilder(1)
    y = b.node("Relu", [b.bn(b.conv("x", 3, 8), 8)])
    return b.model([("x", (1, 3, 10, 10))], [y], "conv_bn_relu")


def conv_add_relu() -> onnx.ModelProto:
    """Residual: x -> conv -> relu -> conv -> Add(x) -> relu."""
    b = NetBuilder(2)
    h = b.node("Relu", [b.conv("x", 8, 8)])
    y = b.node("Relu", [b.node("Add", [b.conv(h, 8, 8), "x"])])
    return b.model([("x", (1, 8, 8, 8))], [y], "conv_add_relu")


def conv_maxpool() -> onnx.ModelProto:
    b = NetBuilder(3)
    h = b.node("Relu", [b.conv("x", 3, 6)])
    y = b.node("MaxPool", [h], kernel_shape=[2, 2], strides=[2, 2])
    return b.model([("x", (1, 3, 8, 8))], [y], "conv_maxpool")


def pad_conv() -> onnx.ModelProto:
    """Pad -> Conv (folds), Pad -> AveragePool cip=1 (folds), Pad -> MaxPool (kept)."""
    b = NetBuilder(4)
    p = b.node("Pad", ["x", b.const(_i(0, 0, 1, 2, 0, 0, 2, 1), "pads")])
    c = b.conv(p, 3, 4, k=3, p=0)
    a = b.node("AveragePool", [p], kernel_shape=[3, 3], count_include_pad=1)
    m = b.node("MaxPool", [b.node("Pad", ["x", b.const(_i(0, 0, 1, 1, 0, 0, 1, 1), "pads")])],
               kernel_shape=[3, 3])
    return b.model([("x", (1, 3, 8, 8))], [c, a, m], "pad_conv")


def matmul_add() -> onnx.ModelProto:
    b = NetBuilder(5)
    f = b.node("Flatten", ["x"])
    y = b.node("Add", [b.node("MatMul", [f, b.const(w(5, 48, 10), "W")]),
                       b.const(w(6, 10), "B")])
    return b.model([("x", (1, 3, 4, 4))], [b.node("Relu", [y])], "matmul_add")


def conv_affine() -> onnx.ModelProto:
    """Input normalisation (Sub, Div) before a padded and an unpadded conv, Mul/Add after."""
    b = NetBuilder(6)
    n = b.node("Div", [b.node("Sub", ["x", b.const(w(60, 1, 3, 1, 1), "mean")]),
                       b.const(np.abs(w(61, 3, 1, 1)) + 0.5, "std")])
    c1 = b.conv(n, 3, 4, k=3, p=1)
    c1 = b.node("Add", [b.const(w(62, 4, 1, 1), "shift"),
                        b.node("Mul", [c1, b.const(w(63, 1, 4, 1, 1), "scale")])])
    m = b.node("Mul", [b.const(w(64, 3, 1, 1), "s2"), "x"])
    c2 = b.conv(b.node("Sub", [b.const(np.float32(0.25), "o2"), m]), 3, 4, k=1, p=0)
    c2 = b.node("Sub", [b.node("Div", [c2, b.const(_f(2.0), "d")]), b.const(w(65, 4, 1, 1))])
    return b.model([("x", (1, 3, 6, 6))], [c1, c2], "conv_affine")


def grouped_conv() -> onnx.ModelProto:
    b = NetBuilder(7)
    y = b.node("Relu", [b.bn(b.conv("x", 8, 12, group=4), 12)])
    y = b.conv(y, 12, 12, group=12)
    return b.model([("x", (1, 8, 6, 6))], [y], "grouped_conv")


def convT_bn() -> onnx.ModelProto:
    b = NetBuilder(8)
    ins = ["x", b.const(w(80, 4, 3, 2, 2), "W")]
    t = b.node("ConvTranspose", ins, strides=[2, 2], group=1)
    t2 = b.node("ConvTranspose", [t, b.const(w(81, 3, 2, 3, 3), "W2"),
                                  b.const(w(82, 6), "B2")], group=3, pads=[1, 1, 1, 1])
    return b.model([("x", (1, 4, 4, 4))], [b.bn(b.bn(t2, 6), 6)], "convT_bn")


def gemm_bn() -> onnx.ModelProto:
    b = NetBuilder(9)
    g = b.node("Gemm", ["x", b.const(w(90, 6, 5), "W"), b.const(w(91, 5), "B")], alpha=0.7)
    return b.model([("x", (2, 6))], [b.node("Sigmoid", [b.bn(g, 5)])], "gemm_bn")


def bn_standalone() -> onnx.ModelProto:
    """A BN after an Add (cannot fold) and a Conv whose output is also a graph output."""
    b = NetBuilder(10)
    c = b.conv("x", 3, 3)
    s = b.bn(b.node("Add", [c, "x"]), 3)
    return b.model([("x", (1, 3, 5, 5))], [s, c], "bn_standalone")


def identity_chain() -> onnx.ModelProto:
    b = NetBuilder(11)
    i = b.node("Identity", ["x"])
    r = b.node("Dropout", [b.node("Relu", [i])])
    return b.model([("x", (1, 3, 4, 4))], [b.node("Identity", [r])], "identity_chain")


PATTERN_CASES: list[Case] = [Case(f.__name__, f) for f in (
    conv_bn_relu, conv_add_relu, conv_maxpool, pad_conv, matmul_add, conv_affine,
    grouped_conv, convT_bn, gemm_bn, bn_standalone, identity_chain)]


# --------------------------------------------------------------------------- nets
def mobilenetv2_like(size: int = 96, classes: int = 10) -> onnx.ModelProto:
    """Inverted residual blocks (1x1 expand, depthwise 3x3, 1x1 project) with BN, Clip(0,6)
    and residual Adds; GAP, Flatten, Gemm, Softmax."""
    b = NetBuilder(100)
    x = b.relu6(b.bn(b.conv("input", 3, 16, s=2, bias=False), 16))
    cin = 16
    for t, c, n, s in ((1, 8, 1, 1), (4, 12, 2, 2), (4, 16, 2, 2), (4, 24, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            h = x
            hid = cin * t
            if t != 1:
                h = b.relu6(b.bn(b.conv(h, cin, hid, k=1, bias=False), hid))
            h = b.relu6(b.bn(b.conv(h, hid, hid, s=stride, group=hid, bias=False), hid))
            h = b.bn(b.conv(h, hid, c, k=1, bias=False), c)
            x = b.node("Add", [x, h]) if stride == 1 and cin == c else h
            cin = c
    x = b.relu6(b.bn(b.conv(x, cin, 64, k=1, bias=False), 64))
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    x = b.node("Gemm", [x, b.const(w(101, classes, 64, scale=0.2), "fcW"),
                        b.const(w(102, classes, scale=0.1), "fcB")], transB=1)
    y = b.node("Softmax", [x], axis=1)
    return b.model([("input", (1, 3, size, size))], [y], "mobilenetv2_like")


def resnet_like(size: int = 64, classes: int = 10) -> onnx.ModelProto:
    """7x7/2 stem + BN + ReLU + MaxPool, two basic blocks (one downsampling), GAP, Gemm."""
    b = NetBuilder(200)
    x = b.node("Relu", [b.bn(b.conv("input", 3, 16, k=7, s=2, bias=False), 16)])
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    for cin, cout, s in ((16, 16, 1), (16, 32, 2)):
        h = b.node("Relu", [b.bn(b.conv(x, cin, cout, s=s, bias=False), cout)])
        h = b.bn(b.conv(h, cout, cout, bias=False), cout)
        sc = x if s == 1 and cin == cout else b.bn(b.conv(x, cin, cout, k=1, s=s, bias=False),
                                                     cout)
        x = b.node("Relu", [b.node("Add", [h, sc])])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])])
    y = b.node("Gemm", [x, b.const(w(201, classes, 32, scale=0.2), "fcW"),
                        b.const(w(202, classes, scale=0.1), "fcB")], transB=1)
    return b.model([("input", (1, 3, size, size))], [y], "resnet_like")


def torch_export_like() -> onnx.ModelProto:
    """What torch.onnx.export writes for F.pad + conv + interpolate + flatten + linear with a
    dynamic batch: shape subgraphs (Shape, Gather, Unsqueeze, Concat, ConstantOfShape, Slice,
    Transpose, Reshape, Cast) that must fold to constants."""
    b = NetBuilder(300)
    c = b.const
    # F.pad(x, (1, 2, 0, 1)): pads computed by the usual exporter subgraph
    rank2 = b.node("Mul", [b.node("Shape", [b.node("Shape", ["x"])]), c(_i(2))])
    zeros = b.node("ConstantOfShape", [b.node("Sub", [rank2, c(_i(4))])],
                   value=numpy_helper.from_array(_i(0)))
    cat = b.node("Concat", [c(_i(1, 2, 0, 1)), zeros], axis=0)
    pairs = b.node("Reshape", [cat, c(_i(-1, 2))])
    rev = b.node("Slice", [pairs, c(_i(-1)), c(_i(-(2**63) + 1)), c(_i(0)), c(_i(-1))])
    flat = b.node("Reshape", [b.node("Transpose", [rev], perm=[1, 0]), c(_i(-1))])
    pads = b.node("Cast", [flat], to=I64)
    x = b.node("Pad", ["x", pads, c(np.float32(0))], mode="constant")
    x = b.node("Relu", [b.conv(x, 3, 8, k=3, p=0)])
    # F.interpolate(scale_factor=2, mode="nearest") with sizes computed from Shape
    sh = b.node("Shape", [x])
    hw = b.node("Cast", [b.node("Slice", [sh, c(_i(2)), c(_i(4)), c(_i(0))])], to=F)
    hw2 = b.node("Cast", [b.node("Floor", [b.node("Mul", [hw, c(_f(2.0))])])], to=I64)
    sizes = b.node("Concat", [b.node("Slice", [sh, c(_i(0)), c(_i(2)), c(_i(0))]), hw2], axis=0)
    x = b.node("Resize", [x, "", "", sizes], mode="nearest",
               coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    x = b.node("MaxPool", [x], kernel_shape=[4, 4], strides=[4, 4])
    # x.view(x.size(0), -1)
    n = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", [x]), c(np.array(0, np.int64))],
                                    axis=0), c(_i(0))])
    x = b.node("Reshape", [x, b.node("Concat", [n, c(_i(-1))], axis=0)])
    y = b.node("Gemm", [x, c(w(301, 10, 8 * 7 * 9, scale=0.1)), c(w(302, 10))], transB=1)
    return b.model([("x", ("batch", 3, 16, 17))], [y], "torch_export_like")


NET_CASES: list[Case] = [
    Case("mobilenetv2_like", mobilenetv2_like),
    Case("resnet_like", resnet_like),
    Case("torch_export_like", torch_export_like),
]


# --------------------------------------------------------------------------- broken models
def unknown_ops_model() -> onnx.ModelProto:
    """Two different unsupported ops (and one custom-domain op) between supported ones."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_ok"),
             helper.make_node("NonMaxSuppression", ["a", "a"], ["b"], name="nms_1"),
             helper.make_node("Unique", ["b"], ["c"], name="unique_7"),
             helper.make_node("FancyOp", ["c"], ["y"], name="fancy", domain="com.example")]
    return make_model(nodes, [("x", (1, 4))], ["y"])


def dynamic_spatial_model() -> onnx.ModelProto:
    b = NetBuilder(400)
    y = b.node("Relu", [b.conv("x", 3, 4)])
    return b.model([("x", ("N", 3, "height", "width"))], [y], "dynamic_spatial")


def missing_initializer_model() -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "W_missing"], ["y"], name="conv_no_w")
    return make_model([node], [("x", (1, 3, 4, 4))], ["y"])
