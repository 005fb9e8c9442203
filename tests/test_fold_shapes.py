"""Shape subgraphs as exporters write them (issue 28 item 3): computed from static tensor shapes
and constants, they fold at compile time (dvsdk.compiler.fold.infer_and_fold) and the compiled
net, run on sim://, matches onnxruntime on the same model.

Each graph reads its shapes from a graph input with free dimensions (``N``, ``H``, ``W``: a
dynamic-axes export), fixed at compile time by ``input_size``; the shape arithmetic is integer
(exact) or, in the tf2onnx style, float32 arithmetic on small integers (exact too).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from dvsdk.compiler.fold import infer_and_fold
from dvsdk.compiler.frontends.onnx import load_onnx

from .compile_harness import run_case
from .onnx_models import make_feeds

SIZE = (8, 10)
#: ops that only these graphs' shape arithmetic uses: none may be left after folding (Div,
#: Sqrt, Mul also act on the data and stay there)
SHAPE_OPS = {"Shape", "Size", "Gather", "Unsqueeze", "Squeeze", "Concat", "Cast", "Range",
             "ConstantOfShape", "Equal", "Where", "ReduceProd", "Mod", "Slice"}


def _c(name: str, v) -> onnx.TensorProto:
    return nh.from_array(np.asarray(v), name)


def _model(nodes, inits, channels: int = 4, opset: int = 17) -> onnx.ModelProto:
    g = h.make_graph(nodes, "shapes",
                     [h.make_tensor_value_info("x", T.FLOAT, ["N", channels, "H", "W"])],
                     [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)])


def _conv(out: str = "x1") -> tuple[list, list]:
    """A 3x3 conv first, so the shapes are read from a computed tensor (and the DV700 runs)."""
    w = np.random.default_rng(4).standard_normal((4, 4, 3, 3)).astype(np.float32) * 0.3
    return [h.make_node("Conv", ["x", "cw"], [out], pads=[1, 1, 1, 1])], [_c("cw", w)]


def torch_flatten() -> onnx.ModelProto:
    """torch.flatten(x, 1) with a dynamic batch: Shape -> Gather(0) -> Unsqueeze -> Concat
    with -1 -> Reshape."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]), h.make_node("Gather", ["s", "i0"], ["b"], axis=0),
          h.make_node("Unsqueeze", ["b", "ax0"], ["bu"]),
          h.make_node("Concat", ["bu", "m1"], ["sh"], axis=0),
          h.make_node("Reshape", ["x1", "sh"], ["y"])]
    return _model(n, i + [_c("i0", np.int64(0)), _c("ax0", [0]), _c("m1", [-1])])


def torch_heads() -> onnx.ModelProto:
    """Multi-head split of a (N, C, H*W) sequence: heads = 2, head dim = C // 2 from Shape."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]),
          h.make_node("Gather", ["s", "i1"], ["c"], axis=0),
          h.make_node("Div", ["c", "two"], ["hd"]),
          h.make_node("Unsqueeze", ["hd", "ax0"], ["hdu"]),
          h.make_node("Slice", ["s", "b0", "b1"], ["nb"]),
          h.make_node("Concat", ["nb", "two1", "hdu", "m1"], ["sh"], axis=0),
          h.make_node("Reshape", ["x1", "sh"], ["r"]),
          h.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
          h.make_node("Shape", ["t"], ["st"]),
          h.make_node("Gather", ["st", "i3"], ["dh"], axis=0),
          h.make_node("Cast", ["dh"], ["dhf"], to=T.FLOAT),
          h.make_node("Sqrt", ["dhf"], ["sq"]),
          h.make_node("Div", ["t", "sq"], ["y"])]
    return _model(n, i + [_c("i1", np.int64(1)), _c("two", np.int64(2)), _c("ax0", [0]),
                          _c("b0", [0]), _c("b1", [1]), _c("two1", [2]), _c("m1", [-1]),
                          _c("i3", np.int64(3))])


def torch_positions() -> onnx.ModelProto:
    """Position ids: Range(0, W) from Shape, Cast to float, added along the last axis."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]), h.make_node("Gather", ["s", "i3"], ["w"], axis=0),
          h.make_node("Range", ["z", "w", "one"], ["r"]),
          h.make_node("Cast", ["r"], ["rf"], to=T.FLOAT),
          h.make_node("Mul", ["rf", "k"], ["rk"]),
          h.make_node("Add", ["x1", "rk"], ["y"])]
    return _model(n, i + [_c("i3", np.int64(3)), _c("z", np.int64(0)), _c("one", np.int64(1)),
                          _c("k", np.float32(0.1))])


def torch_expand_as() -> onnx.ModelProto:
    """x.expand_as as torch writes it: Where(Equal(shape, -1), 1, shape) -> Expand; plus
    ConstantOfShape(Shape(x)) ones."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]),
          h.make_node("ConstantOfShape", ["four"], ["ones"],
                      value=h.make_tensor("v", T.INT64, [1], [1])),
          h.make_node("Mul", ["ones", "m1"], ["neg"]),
          h.make_node("Equal", ["s", "neg"], ["eq"]),
          h.make_node("Where", ["eq", "ones", "s"], ["s2"]),
          h.make_node("Expand", ["bias", "s2"], ["e"]),
          h.make_node("ConstantOfShape", ["s"], ["half"],
                      value=h.make_tensor("h", T.FLOAT, [1], [0.5])),
          h.make_node("Mul", ["x1", "half"], ["xh"]),
          h.make_node("Add", ["xh", "e"], ["y"])]
    bias = np.arange(4, dtype=np.float32).reshape(1, 4, 1, 1)
    return _model(n, i + [_c("four", [4]), _c("m1", np.int64(-1)), _c("bias", bias)])


def torch_slice_half() -> onnx.ModelProto:
    """x[:, :, : H // 2] with the end computed from Shape; Pad to a multiple of 3 (W)."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]), h.make_node("Gather", ["s", "i2"], ["hh"], axis=0),
          h.make_node("Div", ["hh", "two"], ["half"]),
          h.make_node("Unsqueeze", ["half", "ax0"], ["e"]),
          h.make_node("Slice", ["x1", "st", "e", "ax2"], ["sl"]),
          h.make_node("Gather", ["s", "i3"], ["w"], axis=0),
          h.make_node("Mod", ["w", "three"], ["r"]), h.make_node("Sub", ["three", "r"], ["p"]),
          h.make_node("Mod", ["p", "three"], ["p3"]),
          h.make_node("Unsqueeze", ["p3", "ax0"], ["pu"]),
          h.make_node("Concat", ["zeros7", "pu"], ["pads"], axis=0),
          h.make_node("Pad", ["sl", "pads"], ["y"])]
    return _model(n, i + [_c("i2", np.int64(2)), _c("two", np.int64(2)), _c("ax0", [0]),
                          _c("st", [0]), _c("ax2", [2]), _c("i3", np.int64(3)),
                          _c("three", np.int64(3)), _c("zeros7", np.zeros(7, np.int64))])


def tf2onnx_resize() -> onnx.ModelProto:
    """tf.image.resize(x, 2 * shape[1:3]) as tf2onnx writes it (after its NHWC transposes):
    Shape -> Slice -> Cast(float) -> Mul -> Cast(int64) -> Concat -> Resize sizes."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]), h.make_node("Slice", ["s", "b2", "e4"], ["hw"]),
          h.make_node("Cast", ["hw"], ["hwf"], to=T.FLOAT),
          h.make_node("Mul", ["hwf", "sc"], ["hw2f"]),
          h.make_node("Cast", ["hw2f"], ["hw2"], to=T.INT64),
          h.make_node("Slice", ["s", "b0", "b2"], ["nc"]),
          h.make_node("Concat", ["nc", "hw2"], ["sz"], axis=0),
          h.make_node("Resize", ["x1", "", "", "sz"], ["y"], mode="nearest")]
    return _model(n, i + [_c("b2", [2]), _c("e4", [4]), _c("b0", [0]),
                          _c("sc", np.array([2.0], np.float32))])


def paddle_flatten() -> onnx.ModelProto:
    """paddle2onnx's flatten: int32 shapes (Cast), ReduceProd of C*H*W, Concat, Cast back."""
    n, i = _conv()
    n += [h.make_node("Shape", ["x1"], ["s"]), h.make_node("Cast", ["s"], ["s32"], to=T.INT32),
          h.make_node("Slice", ["s32", "b1", "e4"], ["chw"]),
          h.make_node("ReduceProd", ["chw"], ["p"], keepdims=1),
          h.make_node("Slice", ["s32", "b0", "b1"], ["nb"]),
          h.make_node("Concat", ["nb", "p"], ["sh32"], axis=0),
          h.make_node("Cast", ["sh32"], ["sh"], to=T.INT64),
          h.make_node("Reshape", ["x1", "sh"], ["y"])]
    return _model(n, i + [_c("b1", [1]), _c("e4", [4]), _c("b0", [0])])


def keras_global_pool_size() -> onnx.ModelProto:
    """A mean over H*W written as ReduceSum / Cast(Size / (N*C)): the divisor from Size."""
    n, i = _conv()
    n += [h.make_node("ReduceSum", ["x1", "ax23"], ["sm"], keepdims=1),
          h.make_node("Size", ["x1"], ["sz"]), h.make_node("Shape", ["x1"], ["s"]),
          h.make_node("Slice", ["s", "b0", "b2"], ["nc"]),
          h.make_node("ReduceProd", ["nc"], ["ncp"], keepdims=0),
          h.make_node("Div", ["sz", "ncp"], ["hw"]),
          h.make_node("Cast", ["hw"], ["hwf"], to=T.FLOAT),
          h.make_node("Div", ["sm", "hwf"], ["y"])]
    return _model(n, i + [_c("ax23", [2, 3]), _c("b0", [0]), _c("b2", [2])])


CASES = {f.__name__: f for f in (torch_flatten, torch_heads, torch_positions, torch_expand_as,
                                 torch_slice_half, tf2onnx_resize, paddle_flatten,
                                 keras_global_pool_size)}


@pytest.mark.parametrize("name", list(CASES))
def test_exporter_shape_subgraphs_fold_and_match_onnxruntime(name):
    model = CASES[name]()
    g = infer_and_fold(load_onnx(model, {"x": (1, 4) + SIZE}))
    data_slice = 1 if name == "torch_slice_half" else 0      # x[:, :, :H // 2] itself
    assert len([t for t in g.op_types() if t in SHAPE_OPS]) == data_slice, g.op_types()
    feeds = make_feeds(model, seed=2, input_sizes={"x": (1, 4) + SIZE})
    run_case(model, feeds, input_size=SIZE)
