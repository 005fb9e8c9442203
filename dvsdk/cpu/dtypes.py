"""Element types: the ONNX type codes we handle and which types each CPU kernel computes right.

The kernels in :mod:`dvsdk.cpu.ops` follow the ONNX type constraints of each op (ONNX
Operators, "Type Constraints"), narrowed to what they compute exactly like the ONNX
reference: integer ``Div`` truncates toward zero, integer ``Pow`` stays integer, ``Clip``
bounds are clamped to the integer range, comparisons give bool.  An op asked to run on an
element type outside its rule is refused by name (:func:`refusal`), at compile time by
:func:`dvsdk.compiler.fold.check_dtypes` and again, as a safety net, by
:func:`dvsdk.cpu.ops.run_op`; it is never computed in another type.

numpy dtype kinds: ``f`` float (float16/32/64), ``i`` signed int, ``u`` unsigned int,
``b`` bool.  Rules go by kind, not width: where ONNX narrows an op to some widths (int8
MatMul, int16 ReduceSum are not valid ONNX) the kernel still computes numpy's integer
arithmetic, wrapping like the valid widths do.  No onnx import here (the board has only
numpy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import ModelError

__all__ = ["ONNX_DTYPES", "ONNX_TYPE_NAMES", "onnx_dtype", "type_name", "refusal",
           "DTYPE_RULES", "cast_array", "onnx_code"]

#: ONNX TensorProto.DataType code -> numpy dtype (our own table; no onnx import).
ONNX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8),
    4: np.dtype(np.uint16), 5: np.dtype(np.int16), 6: np.dtype(np.int32),
    7: np.dtype(np.int64), 9: np.dtype(np.bool_), 10: np.dtype(np.float16),
    11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}

#: ONNX TensorProto.DataType code -> its name (onnx.proto3), for messages.
ONNX_TYPE_NAMES: dict[int, str] = dict(enumerate(
    "UNDEFINED FLOAT UINT8 INT8 UINT16 INT16 INT32 INT64 STRING BOOL FLOAT16 DOUBLE UINT32 "
    "UINT64 COMPLEX64 COMPLEX128 BFLOAT16 FLOAT8E4M3FN FLOAT8E4M3FNUZ FLOAT8E5M2 "
    "FLOAT8E5M2FNUZ UINT4 INT4 FLOAT4E2M1 FLOAT8E8M0 UINT2 INT2".split()))


def type_name(code: int) -> str:
    """``FLOAT``, ``INT64`` ... for an ONNX type code (the number if unknown)."""
    return ONNX_TYPE_NAMES.get(int(code), str(int(code)))


def onnx_dtype(code: int) -> np.dtype:
    """numpy dtype of an ONNX element-type code (ModelError if we do not handle it)."""
    try:
        return ONNX_DTYPES[int(code)]
    except KeyError:
        raise ModelError("unsupported tensor element type", field="dtype",
                         value=type_name(code),
                         limit=[type_name(c) for c in sorted(ONNX_DTYPES)]) from None


def onnx_code(dtype: np.dtype) -> int:
    """The ONNX type code of a numpy dtype we handle (ModelError otherwise)."""
    for code, dt in ONNX_DTYPES.items():
        if dt == np.dtype(dtype):
            return code
    raise ModelError("unsupported tensor element type", field="dtype", value=str(dtype),
                     limit=[type_name(c) for c in sorted(ONNX_DTYPES)])


def cast_array(x: np.ndarray, to: np.dtype) -> np.ndarray:
    """ONNX Cast of ``x`` to ``to``.  A float to an integer type (ONNX leaves NaN, inf and
    values out of range undefined, and x86 and Arm convert them differently): NaN becomes
    0, the rest is clamped to the type's range, then truncated toward zero
    (firmware_spec/arithmetic.md)."""
    to = np.dtype(to)
    if x.dtype.kind == "f" and to.kind in "iu":
        info = np.iinfo(to)
        lo = float(info.min)  # (exact in float64 for every integer type)
        # the largest float64 that converts: the type's max, or for 64-bit types the double
        # just below 2**63 / 2**64 (the max itself rounds up to those and overflows)
        hi = float(info.max) if to.itemsize < 8 else float(np.nextafter(float(info.max), 0.0))
        x = np.clip(np.nan_to_num(x.astype(np.float64), nan=0.0, posinf=hi, neginf=lo), lo,
                    hi)
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(to)


_F, _FI, _NUM, _ANY, _B, _INT = "f", "fi", "fiu", "fiub", "b", "iu"

#: op type -> allowed dtype kinds per input position ("" = not checked: shape parameters,
#: axes and the like, which the kernels read as integers whatever their type).  The last
#: entry repeats for further inputs (variadic ops).
DTYPE_RULES: dict[str, tuple[str, ...]] = {
    **{t: (_F,) for t in (
        "Sigmoid Tanh Elu Selu HardSigmoid HardSwish Softplus Softsign Sqrt Exp Log "
        "Reciprocal Floor Ceil Round LeakyRelu Softmax LogSoftmax AveragePool "
        "GlobalAveragePool GlobalMaxPool LRN Sum Mean Dropout").split()},
    **{t: (_F, _F, _F, _F, _F) for t in
       "Conv ConvTranspose Gemm BatchNormalization InstanceNormalization".split()},
    **{t: (_NUM,) for t in "Add Sub Mul Div Mod Max Min Clip MatMul PRelu Abs Sign".split()},
    **{t: (_NUM, "") for t in "ArgMax ArgMin ReduceSum ReduceMean ReduceProd ReduceL2 "
                              "ReduceSumSquare".split()},
    **{t: (_ANY, "") for t in "ReduceMax ReduceMin".split()},
    **{t: (_NUM,) for t in "Less LessOrEqual Greater GreaterOrEqual MaxPool".split()},
    **{t: (_B,) for t in "Not And Or Xor".split()},
    "Equal": (_ANY,),
    "Relu": (_FI,),
    "Neg": (_FI,),
    "Pow": (_FI, _NUM),
    "Where": (_B, _ANY),
    "Range": (_FI,),
    "Resize": (_ANY, ""),  # linear mode: float only (see refusal)
    **{t: (_ANY, "") for t in (
        "Identity Shape Size Cast Reshape Flatten Squeeze Unsqueeze Split Transpose "
        "Slice Gather GatherElements Pad Expand Tile DepthToSpace SpaceToDepth").split()},
    "Concat": (_ANY,),
    "ConstantOfShape": (_INT,),
    "Fp16Table": (_F, _F),
    # transformer, recurrent and sampling ops (dvsdk.cpu.transformer, attention, recurrent,
    # sample): float arithmetic; index, length and mask inputs unchecked
    **{t: (_F,) for t in "Gelu Erf LayerNormalization GridSample".split()},
    "TopK": (_NUM, ""),
    "CastLike": (_ANY,),
    "ScatterND": (_ANY, "", _ANY),
    "Einsum": (_NUM,),
    "Attention": (_F, _F, _F, "", _F, _F, ""),
    "MsAttention": (_F, _F, _F, "", _F, _F, ""),  # com.microsoft Attention
    **{t: (_F, _F, _F, _F, "", _F, _F, _F) for t in ("LSTM", "GRU", "RNN")},
    # index, scan and bitwise ops (dvsdk.cpu.indexing)
    "Trilu": (_ANY, ""),
    **{t: (_NUM, "") for t in ("CumSum", "CumProd")},
    "BitShift": ("u",),
    **{t: (_INT,) for t in "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot".split()},
    **{t: (_ANY, "", _ANY) for t in ("ScatterElements", "Scatter")},
    "GatherND": (_ANY, ""),
    "OneHot": ("", "", _ANY),
    "EyeLike": (_ANY,),
    "CenterCropPad": (_ANY, ""),
    "ReverseSequence": (_ANY, ""),
    # quantization ops (dvsdk.cpu.quant): integer quantized values, float scales
    "QuantizeLinear": (_F, _F, _INT),
    "DequantizeLinear": (_INT, _F, _INT),
    "DynamicQuantizeLinear": (_F,),
    **{t: (_INT,) for t in ("MatMulInteger", "ConvInteger")},
    **{t: (_INT, _F, _INT, _INT, _F, _INT, _F, _INT, _INT)
       for t in ("QLinearMatMul", "QLinearConv")},
    # spatial ops (dvsdk.cpu.spatial): float arithmetic; indices and shapes unchecked
    **{t: (_F, "", "") for t in "LpPool MaxUnpool Col2Im AffineGrid".split()},
    "RoiAlign": (_F, _F, ""),
    # normalizations, activations, reductions and losses (dvsdk.cpu.norms, losses)
    **{t: (_F,) for t in ("RMSNormalization LpNormalization GroupNormalization "
                          "MeanVarianceNormalization Celu Mish Swish ThresholdedRelu Shrink "
                          "Hardmax IsInf IsNaN").split()},
    "ReduceL1": (_NUM, ""),
    **{t: (_F, "") for t in ("ReduceLogSum", "ReduceLogSumExp")},
    **{t: (_F, _INT, _F) for t in ("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")},
}


def _kind_name(dt: np.dtype) -> str:
    return str(dt) if dt.kind in "fiub" else f"{dt} ({dt.kind!r})"


#: ops whose refusal also depends on attributes (not memoized by element types alone)
_ATTR_RULES = frozenset({"Cast", "Mod", "Resize"})
_KNOWN: dict[tuple, str | None] = {}  # refusal by (op_type, dtypes), for the other ops


def refusal(op_type: str, dtypes: Sequence[np.dtype | None],
            attrs: Mapping[str, Any] | None = None) -> str | None:
    """Why the CPU kernel of ``op_type`` cannot run on inputs of ``dtypes`` (one per input,
    None for absent or unknown), as an op label like ``Div[bool]``; None if it can."""
    if op_type in _ATTR_RULES:
        return _refusal(op_type, dtypes, attrs or {})
    key = (op_type, *dtypes)
    try:
        return _KNOWN[key]
    except KeyError:
        pass
    except TypeError:  # an unhashable stand-in for a dtype: no memo
        return _refusal(op_type, dtypes, {})
    why = _KNOWN[key] = _refusal(op_type, dtypes, {})
    if len(_KNOWN) > 4096:
        _KNOWN.clear()
    return why


def _refusal(op_type: str, dtypes: Sequence[np.dtype | None],
             attrs: Mapping[str, Any]) -> str | None:
    rule = DTYPE_RULES.get(op_type)
    if rule is None:
        return None
    for i, dt in enumerate(dtypes):
        if dt is None:
            continue
        dt = np.dtype(dt)
        allowed = rule[min(i, len(rule) - 1)]
        if allowed and (dt.kind not in allowed or dt not in ONNX_DTYPES.values()):
            return f"{op_type}[{_kind_name(dt)}]"
    if op_type == "Cast" and int(attrs.get("to", 1)) not in ONNX_DTYPES:
        return f"Cast[to={type_name(attrs['to'])}]"
    if op_type == "Mod" and not attrs.get("fmod", 0) and dtypes and dtypes[0] is not None \
            and np.dtype(dtypes[0]).kind == "f":
        return f"Mod[fmod=0, {np.dtype(dtypes[0])}]"  # ONNX: floats need fmod=1
    mode = attrs.get("mode", "nearest")
    if op_type == "Resize" and mode in ("linear", "cubic") and dtypes \
            and dtypes[0] is not None and np.dtype(dtypes[0]).kind != "f":
        return f"Resize[{mode}, {np.dtype(dtypes[0])}]"
    return None
