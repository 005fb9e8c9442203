"""What a net.bin's commands and CPU steps mean, checked before anything reaches a device.

:func:`dvsdk.netfile.check` bounds and types META and its indexes into the sections; this
module checks what needs the command decoder and the CPU kernels (netbin.md, "What a reader
rejects"):

* every ``CMDS`` record is a conv command (v0/v1) of its exact size whose buffer handles
  name the arena (input, output, eltwise) or the weights region (weights, u8 table), and
  which validates (reference §6, against the hardware META declares) within those regions:
  in range, large enough and aligned as the DV700 requires (§6.8);
* every device tensor lies where a command reads or writes it, in that command's layout
  (same H and W, starting on an 8-channel chunk); tensors the CPU uploads are read by a
  command, tensors it downloads were written by an earlier one (or uploaded);
* every CPU step's op has a kernel, its inputs have values when it runs, and its attributes
  have the types and ranges the kernel expects (an ``axis`` within the input's rank, a
  ``perm`` that is a permutation, ...), arrays decoded with their dtype and shape checked.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, NoReturn

import numpy as np

from ..cpu.dtypes import ONNX_DTYPES
from ..cpu.ops import KERNELS
from ..driver.commands import DEVICE_TYPE, POOL_ENABLE, BufferRef, ConvCommand
from ..driver.device import DeviceInfo
from ..driver.validate import validate_conv
from ..errors import DvsdkError, NetFileError
from ..hw import dims
from ..hw.spec import SPEC
from ..netfile import ALIGNMENT, LIMITS, NB, REGIONS, MetaReader, NetFile
from .schedule import Access, Piece, PieceIndex, check_schedule, merge
from .views import covered

#: element types an input or output may have: those the CPU kernels handle
IO_DTYPES = tuple(sorted({np.dtype(t).name for t in ONNX_DTYPES.values()}))

_HEADER = SPEC.struct("cmdraw_header")
PREPROCESS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in NB["preprocess"].items()}
_STRUCTS = {0: SPEC.struct("conv_v0"), 1: SPEC.struct("conv_v1")}


def _fail(path: str, what: str, value: Any = None, limit: Any = None) -> NoReturn:
    raise NetFileError(f"net.bin {path} {what}", field=path, value=value, limit=limit)


# --------------------------------------------------------------------------- commands
class _Region:
    """Stand-in for the DMA buffer of one region: validation sees offsets and sizes only."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.size, self.phys, self.freed = name, size, 0, False


def hardware_info(meta: dict[str, Any]) -> DeviceInfo:
    """The device META says the commands were made for."""
    hw = meta.get("hardware", {})
    return DeviceInfo(ub_size=hw.get("ub_size_min") or 524288,
                      max_kernel_size=hw.get("max_kernel_size", SPEC.limits["max_kernel_size"]),
                      svn_version=hw.get("svn_version_min", 93))


def decode_command(k: int, raw: bytes, arena: Any, weights: Any) -> ConvCommand:
    """Record ``k`` of CMDS as a command over the stand-in regions, or NetFileError."""
    path = f"CMDS[{k}]"
    hdr = _HEADER.unpack(raw)
    if hdr["device_type"] != DEVICE_TYPE.conv:
        _fail(f"{path}.header.device_type", "is not a conv command", hdr["device_type"],
              DEVICE_TYPE.conv)
    struct = _STRUCTS.get(hdr["version"])
    if struct is None:
        _fail(f"{path}.header.version", "is unknown", hdr["version"], sorted(_STRUCTS))
    if hdr["size"] != struct.size:
        _fail(f"{path}.header.size", f"is not the size of a v{hdr['version']} command",
              hdr["size"], struct.size)
    regions = {REGIONS["arena"]: arena, REGIONS["weights"]: weights}

    def resolve(mem: int, offs: int) -> BufferRef:
        if mem not in regions:
            raise NetFileError("command refers to an unknown memory region", field=f"{path}.mem",
                               value=mem, limit=sorted(REGIONS.values()))
        return BufferRef(regions[mem], offs)

    cmd = ConvCommand.from_raw(raw, resolve)
    wants = [("input_buf", cmd.input_buf, arena), ("output_buf", cmd.output_buf, arena),
             ("eltwise_buf", cmd.eltwise_buf, arena), ("u8tofp16_table", cmd.u8tofp16_table,
                                                       weights)]
    wants += [(f"run[{i}].weight_buf", r.weight_buf, weights) for i, r in enumerate(cmd.runs)]
    for name, ref, region in wants:
        if ref and ref.buffer is not region:
            _fail(f"{path}.{name}", f"must lie in the {region.name} region", ref.buffer.name,
                  region.name)
    return cmd


def relocate(cmd: ConvCommand, arena: Any, weights: Any) -> ConvCommand:
    """``cmd`` (decoded over the stand-in regions) over the real arena and weights buffers."""
    def ref(r: BufferRef) -> BufferRef:
        return BufferRef(arena if r.buffer.name == "arena" else weights, r.offset) if r else r

    return replace(cmd, input_buf=ref(cmd.input_buf), output_buf=ref(cmd.output_buf),
                   eltwise_buf=ref(cmd.eltwise_buf), u8tofp16_table=ref(cmd.u8tofp16_table),
                   runs=[replace(r, weight_buf=ref(r.weight_buf)) for r in cmd.runs])


def command_access(k: int, cmd: ConvCommand, info: DeviceInfo) -> Access:
    """Validate command ``k`` (§6: sizes, ranges, alignment within its regions) and list the
    arena pieces it reads and writes."""
    try:
        plan = validate_conv(cmd, info)
    except DvsdkError as e:
        raise NetFileError(f"net.bin CMDS[{k}] is not a valid command: {e.message}",
                           field=f"CMDS[{k}].{e.field}", value=e.value, limit=e.limit) from None
    # a v1 command reads uint8, which the runtime never uploads; every buffer holds the
    # batch's samples one sample's size of that buffer apart (§4.10)
    n = cmd.batch
    inputs = [Piece(cmd.input_buf.offset, cmd.h, cmd.w, cmd.c, n) if cmd.version == 0
              else None]
    if cmd.output_mode == 1:   # the addend has the shape before max-pool/upsample (§4.4)
        r0 = cmd.runs[0]
        pre = r0 if r0.pool_enable == POOL_ENABLE.avg else replace(r0, pool_enable=0)
        (ew, eh, _, ec), _ = dims.run_output_shape(pre, (cmd.w, cmd.h, cmd.z, cmd.c))
        inputs.append(Piece(cmd.eltwise_buf.offset, eh, ew, ec, n))
    writes, base = [], cmd.output_buf.offset
    for i, (w, h, _, c) in enumerate(plan.out_shapes):
        if cmd.topo >> i & 1:
            writes.append(Piece(base, h, w, c, n, plan.out_bytes if n > 1 else 0))
            base += 2 * w * h * c
    return Access([p for p in inputs if p is not None], merge(writes), inputs)


# --------------------------------------------------------------------------- attributes
_FLAGS = {"keepdims", "noop_with_empty_axes", "select_last_index", "allowzero", "transA",
          "transB", "ceil_mode", "count_include_pad", "storage_order", "antialias",
          "exclude_outside", "largest", "sorted", "is_causal", "input_forget",
          "linear_before_reset", "align_corners", "layout", "upper", "exclusive", "reverse",
          "saturate", "detect_negative", "detect_positive", "unidirectional", "do_rotary",
          "past_present_share_buffer"}
_REALS = {"alpha", "beta", "gamma", "epsilon", "bias", "cubic_coeff_a", "extrapolation_value",
          "clip", "scale", "softcap", "spatial_scale", "lambd", "mask_filter_value"}
_COUNTS = {"group": 1 << 16, "blocksize": 1 << 16, "size": 1 << 16, "num_outputs": 1 << 16,
           "opset": 1000, "hidden_size": 1 << 16, "q_num_heads": 1 << 16,
           "kv_num_heads": 1 << 16, "p": 1 << 8, "output_height": LIMITS["dim"],
           "output_width": LIMITS["dim"], "num_groups": 1 << 16, "num_heads": 1 << 16}
_WINDOWS = {"kernel_shape": (1, 1 << 16), "strides": (1, 1 << 16), "dilations": (1, 1 << 16),
            "pads": (-(1 << 16), 1 << 16), "output_padding": (0, 1 << 16),
            "output_shape": (0, LIMITS["dim"]), "split": (0, LIMITS["dim"])}
_NAMES = {
    "auto_pad": ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", ""),
    "coordinate_transformation_mode": ("half_pixel", "pytorch_half_pixel", "align_corners",
                                       "asymmetric", "tf_half_pixel_for_nn",
                                       "half_pixel_symmetric"),
    "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"),
    "keep_aspect_ratio_policy": ("stretch", "not_larger", "not_smaller"),
    "approximate": ("none", "tanh"),
    "reduction": ("none", "add", "mul", "max", "min"),
    "padding_mode": ("zeros", "border", "reflection"),
    "direction": ("forward", "reverse", "bidirectional"),
}
#: recurrent activations (dvsdk.cpu.recurrent)
_RNN_ACTS = ("Sigmoid", "Tanh", "Relu", "Softsign", "Softplus", "HardSigmoid", "LeakyRelu",
             "ThresholdedRelu", "ScaledTanh", "Affine", "Elu")
_MODES = {"Pad": ("constant", "reflect", "edge", "wrap"), "Resize": ("nearest", "linear", "cubic"),
          "GridSample": ("linear", "bilinear", "nearest", "cubic", "bicubic"),
          "DepthToSpace": ("DCR", "CRD"), "RoiAlign": ("avg", "max")}
_REQUIRED = {"LRN": ("size",), "DepthToSpace": ("blocksize",), "SpaceToDepth": ("blocksize",),
             "MaxUnpool": ("kernel_shape",), "LpPool": ("kernel_shape",),
             "MaxPool": ("kernel_shape",), "AveragePool": ("kernel_shape",), "Cast": ("to",),
             "MsAttention": ("num_heads",),
             "VxFixedPoint": ("kind", "vx_output_shape", "out_fpp", "out_dtype", "overflow",
                              "rounding")}
#: attributes whose meaning is the op's own (checked by :func:`_op_attr`)
_OP_ATTRS = {"BitShift": {"direction"}, "EyeLike": {"k", "dtype"},
             "GatherND": {"batch_dims"}, "ReverseSequence": {"batch_axis", "time_axis"},
             "RoiAlign": {"coordinate_transformation_mode", "sampling_ratio"},
             **{t: {"block_size", "output_dtype", "precision"}
                for t in ("QuantizeLinear", "DequantizeLinear")},
             "VxFixedPoint": {"kind", "overflow", "rounding", "in_dtype", "out_dtype", "in_fpp",
                              "w_fpp", "b_fpp", "out_fpp", "acc_fpp", "vx_output_shape",
                              "vx_pads", "vx_strides", "vx_dilations", "vx_output_padding"}}
#: loss ops (their ``reduction`` is none / sum / mean)
_LOSSES = {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}
#: ops whose ``axis`` may also be the rank itself (ONNX Flatten: [-r, r])
_AXIS_INCLUSIVE = {"Flatten"}


def encode_attr(v: Any) -> Any:
    """An attribute value as net.bin's META holds it (JSON): the inverse of
    :func:`decode_attr`; arrays become ``{"__array__", "dtype", "shape"}``."""
    if isinstance(v, np.ndarray):
        return {"__array__": v.tolist(), "dtype": v.dtype.str, "shape": list(v.shape)}
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, (list, tuple)):
        return [encode_attr(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("latin-1")
    return v


def decode_attr(v: Any, path: str = "attrs") -> Any:
    """A JSON attribute value as the kernel takes it; arrays (``{"__array__", "dtype",
    "shape"}``) become numpy arrays whose dtype, shape and element values are checked."""
    if isinstance(v, dict) and "__array__" in v:
        m = MetaReader("net.bin")
        if set(v) != {"__array__", "dtype", "shape"}:
            m.fail(path, "is not {__array__, dtype, shape}", sorted(v))
        dtype = m.dtype(v["dtype"], f"{path}.dtype")
        shape = m.shape(v["shape"], f"{path}.shape")
        if math.prod(shape) > LIMITS["attr_elements"]:
            m.fail(f"{path}.shape", "is too large for an inline array", math.prod(shape),
                   LIMITS["attr_elements"])
        try:
            raw = np.array(v["__array__"])
        except (ValueError, TypeError):
            raw = np.array(None)
        if raw.dtype.kind not in "biuf" or raw.shape != shape:
            m.fail(f"{path}.__array__", "is not a numeric array of its shape", list(raw.shape)
                   if raw.dtype.kind in "biuf" else raw.dtype.kind, list(shape))
        if dtype.kind in "iu" and raw.size and (raw.dtype.kind == "f" or raw.min() <
                                                np.iinfo(dtype).min or raw.max() >
                                                np.iinfo(dtype).max):
            m.fail(f"{path}.__array__", f"does not fit {dtype}", None, dtype.str)
        with np.errstate(over="ignore", invalid="ignore"):
            return raw.astype(dtype)
    if isinstance(v, list):
        return [decode_attr(x, f"{path}[{i}]") for i, x in enumerate(v)]
    return v


def _int_list(m: MetaReader, v: Any, path: str, lo: int, hi: int, n: int | None = None
              ) -> list[int]:
    vals = np.asarray(v).reshape(-1).tolist() if isinstance(v, np.ndarray) else m.lst(v, path)
    if n is not None and len(vals) != n:
        m.fail(path, "has the wrong number of values", len(vals), n)
    return [m.integer(x, f"{path}[{i}]", lo, hi) for i, x in enumerate(vals)]


def _fixed_attr(m: MetaReader, key: str, v: Any, p: str) -> None:
    """dvsdk.cpu.fixedpoint's attributes (dvsdk.vx's exact fixed-point layers)."""
    choices = {"kind": ("conv", "deconv", "fc", "requantize"),
               "overflow": ("saturate", "wrap"), "rounding": ("to_zero", "to_nearest_even"),
               "in_dtype": ("uint8", "int8", "int16"), "out_dtype": ("uint8", "int8", "int16")}
    if key in choices:
        m.text(v, p, choices[key])
    elif key.endswith("_fpp"):
        m.integer(v, p, 0, 15)
    elif key == "vx_output_shape":
        _int_list(m, v, p, 0, LIMITS["dim"])
    else:                                                 # pads, strides, dilations
        _int_list(m, v, p, 0 if key in ("vx_pads", "vx_output_padding") else 1,
                  LIMITS["dim"], n=4 if key == "vx_pads" and len(m.lst(v, p)) == 4 else 2)


def _op_attr(m: MetaReader, op: str, key: str, v: Any, p: str, r: int | None) -> None:
    if op == "VxFixedPoint":
        _fixed_attr(m, key, v, p)
    elif key == "direction":
        m.text(v, p, ("LEFT", "RIGHT"))
    elif key == "k":
        m.integer(v, p, -LIMITS["dim"], LIMITS["dim"])
    elif key == "coordinate_transformation_mode":         # RoiAlign
        m.text(v, p, ("half_pixel", "output_half_pixel"))
    elif key == "sampling_ratio":
        m.integer(v, p, 0, 1 << 16)
    elif key == "block_size":
        m.integer(v, p, 0, LIMITS["dim"])
    elif key in ("dtype", "output_dtype", "precision"):
        m.integer(v, p, 0, 1 << 8)
        if v == 0 and key != "dtype":
            return                                        # 0: the default
        if v not in ONNX_DTYPES:
            m.fail(p, "is not an element type the CPU handles", v, sorted(ONNX_DTYPES))
    elif key == "batch_dims":
        m.integer(v, p, 0, LIMITS["rank"] if r is None else max(r - 1, 0))
    else:                                                 # batch_axis, time_axis
        m.integer(v, p, 0, LIMITS["rank"] if r is None else r - 1)


def check_attrs(op: str, attrs: dict[str, Any], ranks: list[int | None], path: str) -> None:
    """Types and ranges of the attributes ``op``'s kernel reads (``ranks``: of each input)."""
    m = MetaReader("net.bin")
    for key in _REQUIRED.get(op, ()):
        if key not in attrs:
            m.fail(f"{path}.{key}", f"is required by {op}", None, "present")
    r = ranks[0] if ranks else None
    spatial = None if r is None or op == "Col2Im" else max(r - 2, 0)  # (Col2Im: image_shape's)
    for key, v in attrs.items():
        p = f"{path}.{key}"
        if key in _FLAGS:
            m.integer(v, p, 0, 1)
        elif key in _REALS:
            m.number(v, p)
        elif key in ("min", "max") and v is not None:       # Clip: +-inf are bounds too
            m.number(v, p, finite=False)
        elif key == "p" and op == "LpNormalization":     # (LpPool's p: any count)
            m.integer(v, p, 1, 2)
        elif key in _COUNTS:
            m.integer(v, p, 1, _COUNTS[key])
        elif key in _WINDOWS:
            n = None
            if spatial is not None and key in ("kernel_shape", "strides", "dilations",
                                                "output_padding", "output_shape"):
                n = spatial
            elif spatial is not None and key == "pads":
                n = 2 * spatial if op != "Pad" else None
            if not (key in ("pads", "split") and isinstance(v, list) and not v):
                _int_list(m, v, p, *_WINDOWS[key], n=n)
        elif op in _OP_ATTRS and key in _OP_ATTRS[op]:
            _op_attr(m, op, key, v, p, r)
        elif key == "reduction" and op in _LOSSES:
            m.text(v, p, ("none", "sum", "mean"))
        elif key == "ignore_index":
            m.integer(v, p, -LIMITS["int_abs"], LIMITS["int_abs"])
        elif key in _NAMES:
            m.text(v, p, _NAMES[key])
        elif key == "mode" and op in _MODES:
            m.text(v, p, _MODES[op])
        elif key == "to":
            m.integer(v, p, 0, 1 << 8)
            if v not in ONNX_DTYPES:
                m.fail(p, "is not an element type the CPU handles", v, sorted(ONNX_DTYPES))
        elif key == "axis":   # ONNX: [-r, r - 1] of the first input's rank r
            if op == "OneHot" and r is not None:                # (of the output's, r + 1)
                m.integer(v, p, -r - 1, r)
                continue
            hi = LIMITS["rank"] if r is None else r if op in _AXIS_INCLUSIVE else r - 1
            m.integer(v, p, -LIMITS["rank"] if r is None else -r, hi)
        elif key == "axes" and v is not None:
            rank = None if r is None else r + (len(np.asarray(v).reshape(-1))
                                               if op == "Unsqueeze" else 0)
            lo, hi = (-rank, rank - 1) if rank else (-LIMITS["rank"], LIMITS["rank"])
            axes = _int_list(m, v, p, lo, hi)
            if rank and len({a % rank for a in axes}) != len(axes):
                m.fail(p, "names an axis twice", axes, "distinct axes")
        elif key == "perm" and v is not None:
            perm = _int_list(m, v, p, 0, LIMITS["rank"] - 1)
            if sorted(perm) != list(range(len(perm))) or (r is not None and len(perm) != r):
                m.fail(p, "is not a permutation of the input's axes", perm, r)
        elif key in ("start", "end") and v is not None:
            m.integer(v, p, -LIMITS["int_abs"], LIMITS["int_abs"])
        elif key == "k":                                     # TopK < 10
            m.integer(v, p, 0, LIMITS["dim"])
        elif key == "qkv_hidden_sizes":                      # com.microsoft Attention
            _int_list(m, v, p, 1, LIMITS["dim"], n=3)
        elif key == "qk_matmul_output_mode":
            m.integer(v, p, 0, 3)
        elif key == "stash_type":
            m.integer(v, p, 0, 1 << 8)
            if v not in ONNX_DTYPES or ONNX_DTYPES[v].kind != "f":
                m.fail(p, "is not a float element type the CPU handles", v, [1, 10, 11])
        elif key == "equation":
            m.text(v, p)
        elif key == "activations":
            for i, a in enumerate(m.lst(v, p)):
                m.text(a, f"{p}[{i}]", _RNN_ACTS)
        elif key in ("activation_alpha", "activation_beta"):
            for i, a in enumerate(m.lst(v, p)):
                m.number(a, f"{p}[{i}]")


# --------------------------------------------------------------------------- I/O, golden
def _swap_hw(shape: tuple[int, ...]) -> tuple[int, ...]:
    return shape[:2] + (shape[3], shape[2])


def _check_io(m: MetaReader, meta: dict, side: str, tensors: dict, constants: dict,
              transposed: bool) -> None:
    """Inputs/outputs: unique names, known tensors, the tensor's shape (H and W exchanged
    exactly for the 4-D tensors of a ``--transpose`` net), float32, image preprocessing."""
    seen: set[str] = set()
    for i, spec in enumerate(m.lst(meta[side], side)):
        path = f"{side}[{i}]"
        spec = m.obj(spec, path)
        name = m.text(spec.get("name"), f"{path}.name")
        if name in seen:
            m.fail(f"{path}.name", "is used twice", name, "unique names")
        seen.add(name)
        tname = m.text(spec.get("tensor"), f"{path}.tensor")
        known = tensors if side == "inputs" else {**tensors, **constants}
        if tname not in known:
            m.fail(f"{path}.tensor", "does not name a tensor", tname)
        shape = m.shape(spec.get("shape"), f"{path}.shape")
        flip = m.flag(spec.get("transpose", False), f"{path}.transpose")
        if flip != (transposed and len(shape) == 4):
            m.fail(f"{path}.transpose", "disagrees with META.transposed (true exactly for "
                   "4-D tensors of a --transpose net)", flip, transposed and len(shape) == 4)
        nhwc = spec.get("layout") == "NHWC"      # (checked by netfile.check)
        ir = (shape[0], shape[3], shape[1], shape[2]) if nhwc else shape
        want = m.shape(known[tname].get("shape"), f"{path}.tensor")
        if (_swap_hw(ir) if flip else ir) != want:
            m.fail(f"{path}.shape", "does not match its tensor", list(shape), list(want))
        if "dtype" in spec:  # the model's own element type (integer and bool I/O run on the CPU)
            m.text(spec["dtype"], f"{path}.dtype", IO_DTYPES)
        if side == "inputs":
            _check_preprocess(m, spec.get("preprocess"), f"{path}.preprocess")


def _check_preprocess(m: MetaReader, pre: Any, path: str) -> None:
    pre = m.obj(pre, path)
    for key in ("mean", "std"):
        if pre.get(key) is not None:
            vals = m.lst(pre[key], f"{path}.{key}")
            if not 1 <= len(vals) <= 4:
                m.fail(f"{path}.{key}", "needs 1..4 values", len(vals), "1..4")
            for j, v in enumerate(vals):
                if m.number(v, f"{path}.{key}[{j}]") == 0 and key == "std":
                    m.fail(f"{path}.{key}[{j}]", "is zero", v, "non-zero")
    if pre.get("scale") is not None:
        m.number(pre["scale"], f"{path}.scale")
    m.text(pre.get("channel_order", "RGB"), f"{path}.channel_order", PREPROCESS["channel_order"])
    m.text(pre.get("resize", "stretch"), f"{path}.resize", PREPROCESS["resize"])
    if pre.get("crop_ratio") is not None:   # resize "crop": the share of the image kept
        r = m.number(pre["crop_ratio"], f"{path}.crop_ratio")
        if not 0 < r <= 1:
            m.fail(f"{path}.crop_ratio", "is not in (0, 1]", r, "(0, 1]")


def _check_golden(m: MetaReader, net: NetFile, meta: dict) -> None:
    """Names and shapes the self-test feeds and compares, in GOLD."""
    if meta.get("golden") is None:
        return
    gold = m.obj(meta["golden"], "golden")
    for side in ("inputs", "outputs"):
        specs = {s["name"]: tuple(s["shape"]) for s in meta[side]}
        entries = m.obj(gold.get(side), f"golden.{side}")
        # a self-test feeds every input and compares the outputs it names
        if (set(entries) != set(specs)) if side == "inputs" else not set(entries) <= set(specs):
            m.fail(f"golden.{side}", f"does not match the network's {side}", sorted(entries),
                   sorted(specs))
        for gname, e in entries.items():
            _, shape = m.entry(e, f"golden.{side}.{gname}", len(net.golden),
                               ALIGNMENT["golden"])
            if shape != specs[gname]:
                m.fail(f"golden.{side}.{gname}.shape", "does not match the network's",
                       list(shape), list(specs[gname]))
    tol = m.obj(gold.get("tolerance"), "golden.tolerance")
    if set(tol) != set(gold["outputs"]):
        m.fail("golden.tolerance", "needs a number per golden output", sorted(tol),
               sorted(gold["outputs"]))
    for key, v in tol.items():
        m.number(v, f"golden.tolerance.{key}", 0.0)
    for key, v in m.obj(gold.get("sim_max_abs_error", {}), "golden.sim_max_abs_error").items():
        m.number(v, f"golden.sim_max_abs_error.{key}", 0.0)


# --------------------------------------------------------------------------- the whole file
def verify(net: NetFile) -> list[ConvCommand]:
    """Everything :class:`dvsdk.runtime.net.Net` relies on, checked without a device (the
    META checks of :func:`dvsdk.netfile.check` are assumed done); returns the CMDS records
    decoded over stand-in regions (see :func:`relocate`)."""
    meta = net.meta
    m = MetaReader("net.bin")
    tensors, constants = meta["tensors"], meta.get("constants") or {}
    transposed = m.flag(meta.get("transposed", False), "transposed")
    for side in ("inputs", "outputs"):
        _check_io(m, meta, side, tensors, constants, transposed)
    _check_golden(m, net, meta)
    used = {t for s in meta["program"] if s["kind"] == "cpu" for t in s["inputs"]}
    for cname in constants.keys() - used - {s["tensor"] for s in meta["outputs"]}:
        # e.g. a bias input renamed away: the file contradicts itself
        m.fail(f"constants.{cname}", "is read by no step and is no output", cname)
    arena = _Region("arena", max(int(meta["arena"]["size"]), 64))
    weights = _Region("weights", max(len(net.weights), 64))
    info = hardware_info(meta)
    records = net.command_records()
    commands = [decode_command(k, raw, arena, weights) for k, raw in enumerate(records)]
    access = [command_access(k, cmd, info) for k, cmd in enumerate(commands)]
    dev = {n: (t["device"]["offset"], tuple(t["device"]["hwc"]),
               int(t["device"].get("batch", 1)))
           for n, t in tensors.items() if t.get("device") is not None}
    reads = PieceIndex(merge(p for a in access for p in a.reads))
    writes = PieceIndex(merge(p for a in access for p in a.writes))
    unheld = {name for name, place in dev.items()
              if not (reads.holds(place) or writes.holds(place))}
    bad = unheld - covered(dev, set(dev) - unheld)   # (held by its views, all of it)
    for name in (n for n in dev if n in bad):
        place = dev[name]
        _fail(f"tensors.{name}.device", "is not where any command reads or writes it "
              "(offset, H, W, channel chunk or batch; or its views, all of it)",
              [place[0], list(place[1]), place[2]], "a command buffer")
    for i, step in enumerate(meta["program"]):
        if step["kind"] == "hw":
            continue
        path = f"program[{i}]"
        if step["op"] not in KERNELS:
            _fail(f"{path}.op", "has no CPU kernel", step["op"], "an op of dvsdk.cpu.ops")
        ranks = [len((constants.get(t) or tensors.get(t) or {"shape": []})["shape"])
                 if t else None for t in step["inputs"]]
        attrs = {k: decode_attr(v, f"{path}.attrs.{k}")
                 for k, v in step.get("attrs", {}).items()}
        check_attrs(step["op"], attrs, ranks, f"{path}.attrs")
    check_schedule(meta, dev, access)
    return commands


__all__ = ["Access", "Piece", "check_attrs", "command_access", "decode_attr", "decode_command",
           "hardware_info", "merge", "relocate", "verify"]
