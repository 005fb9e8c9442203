"""NNEF binary tensor files (``<label>.dat``): read, check every header field, decode.

Implements the NNEF 1.0 container's tensor file (S1 "Tensor File Format";
``formats.md`` §4.5): a 128-byte little-endian header, then the items row-major and
bit-packed.  Both header flavours that write version 1.0 are read:

* the 1.0.0-1.0.2 *item code* (vendor in the high 16 bits, algorithm in the low 16):
  0x00 IEEE float, 0x01 integer (parameter word 0 non-zero: signed), 0x10 linear-quantized
  indices (float32 min/max at offsets 52/56), 0x11 logarithmic-quantized indices;
* the later *item type*: 0 float, 1 unsigned, 2 quantized unsigned, 3 quantized signed,
  4 signed, 5 logical (1 or 8 bits).  Quantized items are integer codes whose float value is
  given by the ``graph.quant`` entry of the variable (§4.6): :func:`dequantize`.

Nothing is trusted: magic, version, rank, every extent, bits per item, item code, the data
length (``ceil(volume x bits / 8)``) and the file size (``128 + data length``) are checked
before any data is read, so a truncated or lying file is a :class:`~dvsdk.errors.ModelError`
naming the file, the field, the value found and the limit -- never a misread tensor.
Sub-byte items are unpacked most significant bit first (how NNEF-Tools packs logicals; S1
leaves the bit order open).  numpy only, no per-item Python loops.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ModelError

__all__ = ["DatHeader", "read_header", "read_dat", "dequantize", "HEADER_SIZE"]

HEADER_SIZE = 128
MAGIC = b"\x4e\xef"
MAX_RANK = 8
#: item codes of the 1.0.0-1.0.2 header (vendor 0 = Khronos)
CODE_FLOAT, CODE_INT, CODE_LINEAR, CODE_LOG = 0x00, 0x01, 0x10, 0x11
#: item types of the later header (same offset)
T_FLOAT, T_UINT, T_QUINT, T_QINT, T_INT, T_BOOL = 0, 1, 2, 3, 4, 5
_KINDS = {T_FLOAT: "float", T_UINT: "uint", T_QUINT: "quint", T_QINT: "qint", T_INT: "int",
          T_BOOL: "bool", CODE_LINEAR: "linear", CODE_LOG: "log"}
_INT_BITS = (*range(1, 33), 64)  # sub-byte and odd widths are bit-packed
_KNOWN_CODES = "0 float, 1 uint (int if param 0 != 0), 2 quint, 3 qint, 4 int, 5 bool, " \
               "0x10 linear-quantized, 0x11 log-quantized"


@dataclass(frozen=True)
class DatHeader:
    """The checked header of one tensor file."""

    shape: tuple[int, ...]
    bits: int
    kind: str            # float, uint, int, bool, quint, qint, linear, log
    data_length: int
    params: bytes        # the 32 algorithm-parameter bytes (offset 52)

    @property
    def quantized(self) -> bool:
        """Items are codes whose float value needs quantization parameters."""
        return self.kind in ("quint", "qint", "linear", "log")


def _fail(name: str, field: str, message: str, value: Any, limit: Any) -> ModelError:
    return ModelError(message, field=f"{name} {field}", value=value, limit=limit)


def parse_header(raw: bytes, name: str, file_size: int) -> DatHeader:
    """Check a 128-byte header against the format and the file's real size."""
    if len(raw) < HEADER_SIZE:
        raise _fail(name, "header", "tensor file is shorter than its header", file_size,
                    f">= {HEADER_SIZE} bytes")
    if raw[:2] != MAGIC:
        raise _fail(name, "magic", "not an NNEF tensor file", raw[:2].hex(), MAGIC.hex())
    if (raw[2], raw[3]) != (1, 0):
        raise _fail(name, "version", "unsupported tensor file version", f"{raw[2]}.{raw[3]}",
                    "1.0")
    words = np.frombuffer(raw[:52], dtype="<u4")
    data_length, rank = int(words[1]), int(words[2])
    extents = [int(e) for e in words[3:3 + MAX_RANK]]
    bits, code = int(words[11]), int(words[12])
    params = raw[52:84]
    if rank > MAX_RANK:
        raise _fail(name, "rank", "tensor rank out of range", rank, f"<= {MAX_RANK}")
    shape = tuple(extents[:rank])
    if any(e == 0 for e in shape):
        raise _fail(name, "extents", "tensor extent must be positive", list(shape), ">= 1")
    if any(extents[rank:]):
        raise _fail(name, "extents", "extent set beyond the rank", extents, f"rank {rank}")
    if code >> 16:
        raise _fail(name, "item_type", "vendor-specific item code", hex(code),
                    "vendor 0 (Khronos)")
    signed_flag = int.from_bytes(params[:4], "little") != 0
    kind = _KINDS.get(code)
    if code == T_UINT and signed_flag:
        kind = "int"
    if kind is None:
        raise _fail(name, "item_type", "unknown item type", hex(code), _KNOWN_CODES)
    allowed = {"float": (16, 32, 64), "bool": (1, 8), "uint": _INT_BITS,
               "int": _INT_BITS}.get(kind, _INT_BITS[:-1])
    if bits not in allowed:
        lim = ", ".join(map(str, allowed)) if len(allowed) < 8 else \
            "1..32" + (", 64" if 64 in allowed else "")
        raise _fail(name, "bits", f"bits per item not valid for {kind} items", bits, lim)
    volume = math.prod(shape)  # Python ints: 8 extents of 2^32 must not wrap
    expected = (volume * bits + 7) // 8
    if data_length != expected:
        raise _fail(name, "data_length", "data length does not match extents x bits",
                    data_length, f"{expected} (= ceil({volume} items x {bits} bits / 8))")
    if file_size != HEADER_SIZE + data_length:
        what = "tensor file is truncated" if file_size < HEADER_SIZE + data_length \
            else "tensor file has bytes after its data"
        raise _fail(name, "size", what, file_size, HEADER_SIZE + data_length)
    return DatHeader(shape, bits, kind, data_length, bytes(params))


def read_header(path: str | os.PathLike, name: str | None = None) -> DatHeader:
    """The checked header of the tensor file at ``path`` (``name`` labels errors)."""
    p = Path(path)
    label = name or p.name
    with open(p, "rb") as f:
        return parse_header(f.read(HEADER_SIZE), label, os.fstat(f.fileno()).st_size)


def _unpack(data: np.ndarray, count: int, bits: int, signed: bool) -> np.ndarray:
    """``count`` items of ``bits`` bits each, packed MSB-first, as int64."""
    stream = np.unpackbits(data, bitorder="big")[: count * bits].reshape(count, bits)
    weights = np.left_shift(np.int64(1), np.arange(bits - 1, -1, -1, dtype=np.int64))
    values = stream.astype(np.int64) @ weights
    if signed:
        values = np.where(values >= (1 << (bits - 1)), values - (1 << bits), values)
    return values


def _items(data: np.ndarray, h: DatHeader) -> np.ndarray:
    """Raw items (floats, ints, bools or integer codes) in the tensor's shape."""
    count = math.prod(h.shape)
    if h.kind == "float":
        arr = data.view(f"<f{h.bits // 8}")
    elif h.kind == "bool":
        arr = (np.unpackbits(data, bitorder="big")[:count] if h.bits == 1 else data) != 0
    else:
        signed = h.kind in ("int", "qint")
        if h.bits in (8, 16, 32, 64):
            arr = data.view(f"<{'i' if signed else 'u'}{h.bits // 8}")
        else:
            arr = _unpack(data, count, h.bits, signed)
    return np.asarray(arr[:count]).reshape(h.shape)


def read_dat(path: str | os.PathLike, name: str | None = None) -> tuple[np.ndarray, DatHeader]:
    """Read a tensor file: (items in native byte order, checked header).

    Float items come back as their stored float type, integers as their integer type, logicals
    as bool.  Old-format linear-quantized codes are decoded with the header's min/max;
    quantized codes of the later format come back as integers (``header.quantized``): turn
    them into floats with :func:`dequantize` and the ``graph.quant`` entry.
    """
    p = Path(path)
    label = name or p.name
    with open(p, "rb") as f:
        h = parse_header(f.read(HEADER_SIZE), label, os.fstat(f.fileno()).st_size)
        data = np.fromfile(f, dtype=np.uint8, count=h.data_length)
    if data.size != h.data_length:  # the file shrank under us
        raise _fail(label, "size", "tensor file is truncated", HEADER_SIZE + data.size,
                    HEADER_SIZE + h.data_length)
    items = _items(data, h)
    if h.kind == "linear":
        lo, hi = (float(v) for v in np.frombuffer(h.params[:8], "<f4"))
        r = float((1 << h.bits) - 1)
        items = (items.astype(np.float64) / r * (hi - lo) + lo).astype(np.float32)
    elif h.kind == "log":
        lo, hi = (float(v) for v in np.frombuffer(h.params[:8], "<f4"))
        if lo != 0.0 or not hi > 0.0:
            raise _fail(label, "params", "only unsigned logarithmic quantization (min 0, "
                        "max > 0) is supported", (lo, hi), "min = 0, max > 0")
        m = float(np.ceil(np.log2(hi)))
        r = float((1 << h.bits) - 1)
        items = np.exp2(items.astype(np.float64) + m - r).astype(np.float32)
    return items, h


def _per_channel(v: Any, shape: tuple[int, ...], what: str, label: str) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    if a.size == 1:
        return a.reshape(())
    if a.ndim == 1 and shape and a.shape[0] == shape[0]:
        return a.reshape((-1,) + (1,) * (len(shape) - 1))
    raise _fail(label, f"quant.{what}", "quantization parameter does not fit the tensor",
                list(a.shape), f"a scalar or {shape[0] if shape else 1} values (axis 0)")


def dequantize(codes: np.ndarray, h: DatHeader, quant: dict[str, Any] | None,
               label: str) -> np.ndarray:
    """Float32 values of quantized codes from their ``graph.quant`` entry (S1 chapter 7).

    Supported algorithms (scalars, or one value per index of axis 0):
    ``zero_point_linear_quantize`` (``(q - zero_point) * scale``), ``linear_quantize`` and
    ``min_max_linear_quantize`` (``(q + p) / r * (max - min) + min``).
    """
    if not quant:
        raise _fail(label, "item_type", "quantized tensor data has no graph.quant entry",
                    h.kind, "a graph.quant line for the variable giving its float equivalent")
    algo = quant.get("op-name", quant.get("op_name", "?"))
    bits = int(quant.get("bits", h.bits))
    if bits != h.bits:
        raise _fail(label, "bits", "graph.quant bits differ from the tensor file", h.bits,
                    bits)
    q = codes.astype(np.float64)
    if algo == "zero_point_linear_quantize":
        z = _per_channel(quant["zero_point"], h.shape, "zero_point", label)
        s = _per_channel(quant["scale"], h.shape, "scale", label)
        y = (q - z) * s
    elif algo in ("linear_quantize", "min_max_linear_quantize"):
        signed = bool(quant.get("signed", False))
        symmetric = bool(quant.get("symmetric", False))
        lo = _per_channel(quant["min"], h.shape, "min", label)
        hi = _per_channel(quant["max"], h.shape, "max", label)
        r = float(2 ** bits - 1 - int(signed and symmetric))
        p = float(2 ** (bits - 1) - int(symmetric)) if signed else 0.0
        y = (q + p) / r * (hi - lo) + lo
    else:
        raise _fail(label, "quant", "quantization algorithm has no float equivalent here",
                    algo, "zero_point_linear_quantize, linear_quantize, "
                    "min_max_linear_quantize")
    return np.asarray(y, dtype=np.float32)
