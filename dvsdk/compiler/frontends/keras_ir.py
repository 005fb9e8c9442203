"""The Keras frontend's building blocks: Keras tensors, the IR builder, activations.

A Keras tensor of rank 4 is NHWC; the IR holds it as NCHW (``Graph.layout = "NHWC"`` tells
the runtime to transpose at the boundary).  Tensors of any other rank keep Keras's own order.
Each converter reads the layer's config and weights, checks every weight's shape against
what the config and the input shape imply, emits ONNX-typed IR ops tagged with
``origin = "<Keras class> <layer name>"`` and returns the output's Keras shape.

Numerical meanings follow the Keras 2 (tf-keras) and Keras 3 layer definitions:

* ``padding="same"`` pads ``max((ceil(n/s) - 1) s + k_eff - n, 0)`` with the odd pixel at the
  end (bottom/right), as TensorFlow does; ``ZeroPadding2D`` is ``((top, bottom), (left,
  right))``;
* ``Conv2DTranspose`` produces Keras's ``deconv_output_length`` and crops/extends the full
  transposed convolution the way the gradient of the matching ``Conv2D`` does;
* ``Flatten`` of an (H, W, C) tensor is in H, W, C order: the IR flattens in C, H, W order
  and a following ``Dense`` gets its kernel rows permuted instead (no runtime op); any other
  reader gets an explicit ``Transpose`` first;
* ``hard_sigmoid`` is ``clip(0.2 x + 0.5, 0, 1)`` in Keras 2 and ``relu6(x + 3) / 6`` in
  Keras 3: the file's ``keras_version`` decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import ModelError
from ..ir import Op, Tensor

#: Keras axis of a rank-4 (NHWC) tensor -> IR (NCHW) axis, and back
TO_IR = (0, 2, 3, 1)
NHWC_TO_NCHW = [0, 3, 1, 2]
NCHW_TO_NHWC = [0, 2, 3, 1]


@dataclass
class KT:
    """A Keras tensor: the IR tensor holding it and its Keras shape (batch 1)."""

    name: str
    shape: tuple[int, ...]
    #: set when the IR tensor is a Flatten of an (H, W, C) tensor held in C, H, W order:
    #: (H, W, C, the rank-4 IR tensor it flattens, origin of the Flatten)
    chw: tuple[int, int, int, str, str] | None = None


@dataclass
class Layer:
    """One Keras layer as the converters see it."""

    cls: str
    name: str
    cfg: dict[str, Any]
    #: weight(role, expected shape) -> float32 array (ModelError if absent or misshapen)
    weight: Callable[[str, tuple[int, ...]], np.ndarray]

    @property
    def origin(self) -> str:
        return f"{self.cls} {self.name}"

    def err(self, message: str, **kw: Any) -> ModelError:
        kw.setdefault("field", self.origin)
        return ModelError(message, **kw)


class Builder:
    """Collects IR tensors and ops; names are unique, every op carries its layer's origin."""

    def __init__(self, keras_major: int) -> None:
        self.keras_major = keras_major
        self.tensors: dict[str, Tensor] = {}
        self.ops: list[Op] = []
        self.origin = ""
        self._names: set[str] = set()
        self._op_names: set[str] = set()
        self._plain: dict[str, KT] = {}
        #: IR tensor made by a constant affine layer (Rescaling, Normalization ...) ->
        #: (its input, a, b): the tensor is ``a x + b`` (float64 arrays in Keras's shape)
        self.affine: dict[str, tuple[KT, np.ndarray, np.ndarray]] = {}

    def fresh(self, hint: str) -> str:
        name, i = hint, 1
        while name in self._names:
            name = f"{hint}_{i}"
            i += 1
        self._names.add(name)
        return name

    def const(self, hint: str, value: Any, dtype: Any = np.float32) -> str:
        name = self.fresh(hint)
        self.tensors[name] = Tensor(name, const=np.ascontiguousarray(value, dtype=dtype))
        return name

    def input(self, name: str, shape: tuple[int, ...]) -> str:
        self._names.add(name)
        self.tensors[name] = Tensor(name, shape, np.float32)
        return name

    def op(self, op_type: str, inputs: Sequence[str], attrs: dict | None = None,
           hint: str = "") -> str:
        layer = self.origin.split(" ", 1)[-1]
        out = self.fresh(hint or f"{layer}_{op_type.lower()}")
        self.tensors[out] = Tensor(out)
        name, i = layer, 1   # ops are named after their layer: conv2d_1, conv2d_1_1 ...
        while name in self._op_names:
            name, i = f"{layer}_{i}", i + 1
        self._op_names.add(name)
        self.ops.append(Op(op_type, name, list(inputs), [out], dict(attrs or {}), self.origin))
        return out

    def rename(self, old: str, new: str, first_op: int) -> bool:
        """Give the tensor ``old`` (made by ops from index ``first_op`` on) the name ``new``."""
        if old == new or new in self.tensors:
            return False
        made = [op for op in self.ops[first_op:] if old in op.outputs]
        if not made:
            return False
        self._names.add(new)
        for op in self.ops[first_op:]:
            op.inputs = [new if n == old else n for n in op.inputs]
            op.outputs = [new if n == old else n for n in op.outputs]
        t = self.tensors.pop(old)
        self.tensors[new] = Tensor(new, t.shape, t.dtype, t.const)
        self._plain = {k: KT(new, v.shape) if v.name == old else v
                       for k, v in self._plain.items()}
        if old in self.affine:
            self.affine[new] = self.affine.pop(old)
        return True

    def plain(self, x: KT) -> KT:
        """``x`` in Keras's own element order (undo a pending C, H, W flatten order)."""
        if x.chw is None:
            return x
        if x.name not in self._plain:
            h, w, c, src, origin = x.chw
            saved, self.origin = self.origin, origin
            t = self.op("Transpose", [src], {"perm": NCHW_TO_NHWC}, hint=f"{x.name}_nhwc")
            y = self.op("Reshape", [t, self.const(f"{x.name}_shape",
                                                  [1, h * w * c], np.int64)], hint=x.name + "_hwc")
            self.origin = saved
            self._plain[x.name] = KT(y, x.shape)
        return self._plain[x.name]


# ----------------------------------------------------------------------------- helpers
def ints(v: Any, n: int, what: str, layer: Layer) -> tuple[int, ...]:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = [v] * n
    if not isinstance(v, (list, tuple)) or len(v) != n or not all(
            isinstance(i, (int, float)) and not isinstance(i, bool)
            and (isinstance(i, int) or math.isfinite(i)) and int(i) == i for i in v):
        raise layer.err(f"{what} must be {n} integers", value=v)
    return tuple(int(i) for i in v)


def positive(vals: Sequence[int], what: str, layer: Layer, low: int = 1) -> None:
    if any(v < low for v in vals):
        raise layer.err(f"{what} out of range", value=tuple(vals), limit=f">= {low}")


def one(layer: Layer, xs: list[KT]) -> KT:
    if len(xs) != 1:
        raise layer.err("layer takes one input", value=len(xs), limit=1)
    return xs[0]


def rank(layer: Layer, x: KT, *ranks: int) -> None:
    if len(x.shape) not in ranks:
        raise layer.err("input rank not supported by this layer", value=x.shape,
                        limit=" or ".join(f"rank {r}" for r in ranks))


def ir_axis(layer: Layer, axis: Any, r: int) -> int:
    """Keras axis (may be negative) of a rank-``r`` tensor -> the IR axis."""
    if isinstance(axis, (list, tuple)) and len(axis) == 1:
        axis = axis[0]
    if not isinstance(axis, int) or isinstance(axis, bool) or not -r <= axis < r or axis % r == 0:
        raise layer.err("axis out of range", value=axis, limit=f"1..{r - 1} or -{r - 1}..-1")
    a = axis % r
    return TO_IR[a] if r == 4 else a


def ir_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], shape[3], shape[1], shape[2]) if len(shape) == 4 else shape


def window(layer: Layer, size: tuple[int, int], k: tuple[int, int], s: tuple[int, int],
            d: tuple[int, int] = (1, 1)) -> tuple[list[int], tuple[int, int]]:
    """IR pads [top, left, bottom, right] and the output (H, W) of Keras ``padding``."""
    padding = str(layer.cfg.get("padding", "valid")).lower()
    begins, ends, out = [], [], []
    for n, kk, ss, dd in zip(size, k, s, d):
        k_eff = (kk - 1) * dd + 1
        if padding == "valid":
            o = (n - k_eff) // ss + 1
            b = e = 0
        elif padding == "same":
            o = -(-n // ss)
            total = max((o - 1) * ss + k_eff - n, 0)
            b, e = total // 2, total - total // 2
        else:
            raise layer.err("padding not supported", value=padding, limit=("valid", "same"))
        if o < 1:
            raise layer.err("window larger than the input", value={"input": size, "kernel": k},
                            limit="output >= 1")
        begins.append(b)
        ends.append(e)
        out.append(o)
    return begins + ends, (out[0], out[1])


def channels_last(layer: Layer) -> str | None:
    fmt = layer.cfg.get("data_format") or "channels_last"
    return None if fmt == "channels_last" else f"{layer.cls}[data_format={fmt}]"


# ----------------------------------------------------------------------------- activations
def softmax(b: Builder, x: KT, axis: int = -1, layer: Layer | None = None) -> str:
    ax = ir_axis(layer, axis, len(x.shape)) if layer else (1 if len(x.shape) == 4
                                                           else len(x.shape) - 1)
    return b.op("Softmax", [x.name], {"axis": ax, "opset": 13})


def _hard_sigmoid(b: Builder, x: KT) -> str:
    alpha = 0.2 if b.keras_major < 3 else 1.0 / 6.0
    return b.op("HardSigmoid", [x.name], {"alpha": alpha, "beta": 0.5})


def clip(b: Builder, x: str, lo: float | None, hi: float | None) -> str:
    ins = [x, "" if lo is None else b.const("clip_min", lo),
           "" if hi is None else b.const("clip_max", hi)]
    while ins and not ins[-1]:
        ins.pop()
    return b.op("Clip", ins)


#: activation name -> (emitter, IR ops it uses)
ACTIVATIONS: dict[str, tuple[Callable[[Builder, KT], str], tuple[str, ...]]] = {
    "relu": (lambda b, x: b.op("Relu", [x.name]), ("Relu",)),
    "relu6": (lambda b, x: clip(b, x.name, 0.0, 6.0), ("Clip",)),
    "sigmoid": (lambda b, x: b.op("Sigmoid", [x.name]), ("Sigmoid",)),
    "tanh": (lambda b, x: b.op("Tanh", [x.name]), ("Tanh",)),
    "softmax": (lambda b, x: softmax(b, x), ("Softmax",)),
    "log_softmax": (lambda b, x: b.op("LogSoftmax", [x.name], {"axis": 1 if len(x.shape) == 4
                                                                else len(x.shape) - 1,
                                                                "opset": 13}), ("LogSoftmax",)),
    "elu": (lambda b, x: b.op("Elu", [x.name], {"alpha": 1.0}), ("Elu",)),
    "selu": (lambda b, x: b.op("Selu", [x.name], {"alpha": 1.6732632423543772,
                                                  "gamma": 1.0507009873554805}), ("Selu",)),
    "hard_sigmoid": (_hard_sigmoid, ("HardSigmoid",)),
    "swish": (lambda b, x: b.op("Mul", [x.name, b.op("Sigmoid", [x.name])]),
              ("Sigmoid", "Mul")),
    "hard_silu": (lambda b, x: b.op("HardSwish", [x.name]), ("HardSwish",)),
    "leaky_relu": (lambda b, x: b.op("LeakyRelu", [x.name], {"alpha": 0.2}), ("LeakyRelu",)),
    "softplus": (lambda b, x: b.op("Softplus", [x.name]), ("Softplus",)),
    "softsign": (lambda b, x: b.op("Softsign", [x.name]), ("Softsign",)),
    "exponential": (lambda b, x: b.op("Exp", [x.name]), ("Exp",)),
    "mish": (lambda b, x: b.op("Mul", [x.name, b.op("Tanh", [b.op("Softplus", [x.name])])]),
             ("Softplus", "Tanh", "Mul")),
}
ACTIVATIONS["gelu"] = (lambda b, x: b.op("Gelu", [x.name], {"approximate": "none"}),
                       ("Gelu",))
ACTIVATIONS["silu"] = ACTIVATIONS["swish"]
ACTIVATIONS["hard_swish"] = ACTIVATIONS["hard_silu"]


def activation_name(v: Any) -> str | None:
    """The activation a config value names ('linear' for none), or None if not a plain name."""
    if v is None:
        return "linear"
    if isinstance(v, str):
        return v.lower()
    return None


def check_activation(layer: Layer) -> str | None:
    name = activation_name(layer.cfg.get("activation"))
    if name == "linear" or name in ACTIVATIONS:
        return None
    return f"{layer.cls}[activation={name or type(layer.cfg.get('activation')).__name__}]"


def activate(b: Builder, layer: Layer, x: KT) -> KT:
    name = activation_name(layer.cfg.get("activation"))
    if name in (None, "linear"):
        return x
    return KT(ACTIVATIONS[name][0](b, x), x.shape)


