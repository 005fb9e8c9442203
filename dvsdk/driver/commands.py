"""DV700 commands as typed objects (reference §3).

Each dataclass mirrors one raw command struct field for field, with the packed
words kept in their hardware encoding (``p``, ``conv_pad``, ``pool_size`` ...) so
that nothing is lost between a net.bin, a command list and the wire.  Readable
constructors (:meth:`ConvRun.make`) and properties (``kx``, ``pads`` ...) sit on
top; the bit layouts come from ``firmware_spec/commands.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import InvalidArgument, InvalidCommand
from ..hw.fp16 import fp16_bits
from ..hw.spec import SPEC
from .device import DmaBuffer

_XY = SPEC.bits("xy")
_PAD7 = SPEC.bits("pad7")
_PAD8 = SPEC.bits("pad8")
_LRN = SPEC.bits("lrn")
CONV_ENABLE = SPEC.enum("conv_enable")
POOL_ENABLE = SPEC.enum("pool_enable")
ACTFUNC = SPEC.enum("actfunc")
WEIGHT_FMT = SPEC.enum("weight_fmt")
DEVICE_TYPE = SPEC.enum("device_type")


@dataclass(frozen=True)
class BufferRef:
    """A place in DMA memory: a buffer and a byte offset into it (``dmp_dv_buf``)."""

    buffer: DmaBuffer | None = None
    offset: int = 0

    def __bool__(self) -> bool:
        return self.buffer is not None

    @property
    def phys(self) -> int:
        """The bus address, or 0xDEADBEEF for "no buffer" as the kernel writes (§6.8)."""
        if self.buffer is None:
            return 0xDEADBEEF
        return self.buffer.phys + self.offset

    @property
    def available(self) -> int:
        """Bytes from the offset to the end of the buffer."""
        return 0 if self.buffer is None else self.buffer.size - self.offset


BufLike = BufferRef | DmaBuffer | tuple | None


def as_ref(buf: BufLike) -> BufferRef:
    """Accept a BufferRef, a DmaBuffer, a (DmaBuffer, offset) tuple or None."""
    if buf is None:
        return BufferRef()
    if isinstance(buf, BufferRef):
        return buf
    if isinstance(buf, DmaBuffer):
        return BufferRef(buf, 0)
    if isinstance(buf, tuple) and len(buf) == 2 and isinstance(buf[0], DmaBuffer):
        return BufferRef(buf[0], int(buf[1]))
    raise InvalidArgument("not a buffer reference", field="buffer", value=type(buf).__name__,
                          limit="BufferRef | DmaBuffer | (DmaBuffer, offset) | None")


def _pair(v: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    if len(v) != 2:
        raise InvalidArgument(f"{name} needs (x, y)", field=name, value=v)
    return int(v[0]), int(v[1])


def _pads(v: int | Sequence[int], name: str) -> tuple[int, int, int, int]:
    if isinstance(v, int):
        return v, v, v, v
    if len(v) == 2:
        return int(v[0]), int(v[0]), int(v[1]), int(v[1])
    if len(v) != 4:
        raise InvalidArgument(f"{name} needs (left, right, top, bottom)", field=name, value=v)
    return int(v[0]), int(v[1]), int(v[2]), int(v[3])


def _code(enum_name: str, value: int | str) -> int:
    enum = SPEC.enum(enum_name)
    if isinstance(value, str):
        if value not in enum.codes:
            raise InvalidArgument(f"unknown {enum_name}", field=enum_name, value=value,
                                  limit=sorted(enum.codes))
        return enum.codes[value]
    return int(value)


@dataclass
class ConvRun:
    """One fused run (§3.2, §4.1): conv → [add] → [max-pool] → activation, or a pool/LRN run."""

    m: int = 0
    conv_enable: int = 0
    p: int = 0x0101
    pz: int = 1
    conv_pad: int = 0
    conv_stride: int = 0x0101
    conv_dilation: int = 0x0101
    weight_buf: BufferRef = field(default_factory=BufferRef)
    weight_fmt: int = 0
    pool_enable: int = 0
    pool_avg_param: int = 0
    pool_size: int = 0
    pool_stride: int = 0x0101
    pool_pad: int = 0
    actfunc: int = 0
    actfunc_param: int = 0
    rectifi_en: int = 0
    lrn: int = 0
    rsvd: int = 0

    # -- decoded views ------------------------------------------------------------------
    @property
    def kx(self) -> int:
        return _XY.get(self.p, "x")

    @property
    def ky(self) -> int:
        return _XY.get(self.p, "y") or self.kx

    @property
    def pads(self) -> tuple[int, int, int, int]:
        """Conv pads (left, right, top, bottom) as the size math reads them (7/8/7/8 bits)."""
        d = _PAD7.unpack(self.conv_pad)
        return d["left"], d["right"], d["top"], d["bottom"]

    @property
    def stride(self) -> tuple[int, int]:
        return _XY.get(self.conv_stride, "x"), _XY.get(self.conv_stride, "y")

    @property
    def dilation(self) -> tuple[int, int]:
        """Dilation with 0 read as 1, as both drivers patch it (§5.2)."""
        return max(1, _XY.get(self.conv_dilation, "x")), max(1, _XY.get(self.conv_dilation, "y"))

    @property
    def pool_kernel(self) -> tuple[int, int]:
        return _XY.get(self.pool_size, "x"), _XY.get(self.pool_size, "y")

    @property
    def pool_strides(self) -> tuple[int, int]:
        return _XY.get(self.pool_stride, "x"), _XY.get(self.pool_stride, "y")

    @property
    def pool_pads(self) -> tuple[int, int, int, int]:
        d = _PAD8.unpack(self.pool_pad)
        return d["left"], d["right"], d["top"], d["bottom"]

    @property
    def quantized(self) -> bool:
        return bool(self.weight_fmt & 2)

    @property
    def depthwise(self) -> bool:
        return bool(self.conv_enable & 2)

    @property
    def deconv(self) -> bool:
        return bool(self.conv_enable & 4)

    @property
    def is_lrn(self) -> bool:
        return bool(self.lrn & 1)

    # -- a readable constructor --------------------------------------------------------
    @classmethod
    def make(
        cls,
        m: int = 0,
        *,
        conv: str | int = "off",
        kernel: int | Sequence[int] = 1,
        weights: BufLike = None,
        quantized: bool = False,
        pads: int | Sequence[int] = 0,
        stride: int | Sequence[int] = 1,
        dilation: int | Sequence[int] = 1,
        pool: str | int = "none",
        pool_size: int | Sequence[int] = 0,
        pool_stride: int | Sequence[int] = 1,
        pool_pads: int | Sequence[int] = 0,
        pool_scale: float | None = None,
        act: str | int = "none",
        act_param: float = 0.0,
        rectify: bool = False,
        lrn: bool = False,
        lrn_sf_log2: int = 5,
    ) -> ConvRun:
        """Build a run from readable arguments; every value is encoded through the spec.

        ``act`` is a code or a name of the ``actfunc`` enum; ``"relu"`` is leaky ReLU with
        slope 0 (§4.5).
        ``pool_scale`` defaults to 1/(kx*ky) for average pooling (§4.3).
        """
        conv_code = _code("conv_enable", conv)
        pool_code = _code("pool_enable", pool)
        kx, ky = _pair(kernel, "kernel")
        sx, sy = _pair(stride, "stride")
        dx, dy = _pair(dilation, "dilation")
        l, r, t, b = _pads(pads, "pads")
        pl, pr, pt, pb = _pads(pool_pads, "pool_pads")
        psx, psy = _pair(pool_size, "pool_size")
        pssx, pssy = _pair(pool_stride, "pool_stride")
        if pool_code == POOL_ENABLE.avg and pool_scale is None and psx and psy:
            pool_scale = 1.0 / (psx * psy)
        fmt = 0
        if conv_code:
            fmt = WEIGHT_FMT.q8 if quantized else WEIGHT_FMT.fp16
        try:
            return cls(
                m=m,
                conv_enable=conv_code,
                p=_XY.pack(x=kx, y=ky),
                pz=1,
                conv_pad=_PAD7.pack(left=l, right=r, top=t, bottom=b),
                conv_stride=_XY.pack(x=sx, y=sy),
                conv_dilation=_XY.pack(x=dx, y=dy),
                weight_buf=as_ref(weights),
                weight_fmt=fmt,
                pool_enable=pool_code,
                pool_avg_param=fp16_bits(pool_scale) if pool_scale is not None else 0,
                pool_size=_XY.pack(x=psx, y=psy),
                pool_stride=_XY.pack(x=pssx, y=pssy),
                pool_pad=_PAD8.pack(left=pl, right=pr, top=pt, bottom=pb),
                actfunc=_code("actfunc", "leaky_relu" if act == "relu" else act),
                actfunc_param=fp16_bits(act_param),
                rectifi_en=int(rectify),
                lrn=_LRN.pack(enable=1, power=1, sf_log2=lrn_sf_log2) if lrn else 0,
            )
        except InvalidArgument as e:
            raise InvalidCommand(e.message, field=e.field, value=e.value, limit=e.limit) from None


@dataclass
class ConvCommand:
    """A conv command (§3.2, §3.3): input/output/eltwise tensors and up to 32 runs.

    ``input_circular_offset`` carries the batch size N (0 means 1, §4.10).  A
    non-null ``u8tofp16_table`` makes this a version-1 command with uint8 input.
    """

    input_buf: BufferRef
    output_buf: BufferRef
    w: int
    h: int
    c: int
    runs: list[ConvRun]
    topo: int = 1
    z: int = 1
    eltwise_buf: BufferRef = field(default_factory=BufferRef)
    input_circular_offset: int = 1
    output_mode: int = 0
    u8tofp16_table: BufferRef = field(default_factory=BufferRef)
    to_bgr: int = 0

    device_type = "conv"

    def __post_init__(self) -> None:
        self.input_buf = as_ref(self.input_buf)
        self.output_buf = as_ref(self.output_buf)
        self.eltwise_buf = as_ref(self.eltwise_buf)
        self.u8tofp16_table = as_ref(self.u8tofp16_table)
        self.runs = list(self.runs)

    @property
    def batch(self) -> int:
        return self.input_circular_offset or 1

    @property
    def version(self) -> int:
        return 1 if self.u8tofp16_table else 0

    @property
    def num_runs(self) -> int:
        """Runs the hardware executes: highest set topo bit + 1 (§4.1)."""
        return int(self.topo).bit_length()

    def buffers(self) -> list[BufferRef]:
        refs = [self.input_buf, self.output_buf, self.eltwise_buf, self.u8tofp16_table]
        refs += [r.weight_buf for r in self.runs]
        return [r for r in refs if r]

    # -- raw struct encoding (§3.2/§3.3); mem ids are chosen by the caller ------------
    def to_raw(self, mem_id: Callable[[DmaBuffer], int]) -> bytes:
        if len(self.runs) > SPEC.limits["max_runs"]:
            raise InvalidCommand("too many runs", field="runs", value=len(self.runs),
                                 limit=SPEC.limits["max_runs"])

        def buf(ref: BufferRef) -> dict[str, int]:
            return {"mem": mem_id(ref.buffer) if ref.buffer else 0, "offs": ref.offset}

        v0 = {
            "header": {"size": SPEC.struct("conv_v0").size,
                       "device_type": DEVICE_TYPE.conv, "version": 0},
            "input_buf": buf(self.input_buf), "output_buf": buf(self.output_buf),
            "eltwise_buf": buf(self.eltwise_buf), "topo": self.topo, "w": self.w, "h": self.h,
            "z": self.z, "c": self.c, "input_circular_offset": self.input_circular_offset,
            "output_mode": self.output_mode,
            "run": [
                {f.name: (buf(getattr(r, f.name)) if f.name == "weight_buf"
                          else getattr(r, f.name)) for f in fields(ConvRun)}
                for r in self.runs
            ],
        }
        if self.version == 0:
            return SPEC.struct("conv_v0").pack(v0)
        return SPEC.struct("conv_v1").pack({
            "header": {"size": SPEC.struct("conv_v1").size,
                       "device_type": DEVICE_TYPE.conv, "version": 1},
            "u8tofp16_table": buf(self.u8tofp16_table), "to_bgr": self.to_bgr, "conv_cmd": v0,
        })

    @classmethod
    def from_raw(cls, data: bytes, resolve: Callable[[int, int], BufferRef]) -> ConvCommand:
        """Decode a raw v0/v1 struct; ``resolve(mem, offs)`` turns a handle into a BufferRef."""
        hdr = SPEC.struct("cmdraw_header").unpack(data)
        table, to_bgr = BufferRef(), 0
        if hdr["version"] == 1:
            v1 = SPEC.struct("conv_v1").unpack(data)
            table = resolve(**v1["u8tofp16_table"]) if v1["u8tofp16_table"]["mem"] else table
            to_bgr, raw = v1["to_bgr"], v1["conv_cmd"]
        elif hdr["version"] == 0:
            raw = SPEC.struct("conv_v0").unpack(data)
        else:
            raise InvalidCommand("unknown conv command version", field="header.version",
                                 value=hdr["version"], limit=(0, 1))

        def ref(b: dict[str, int]) -> BufferRef:
            return resolve(b["mem"], b["offs"]) if b["mem"] else BufferRef()

        nruns = int(raw["topo"]).bit_length()
        runs = []
        for r in raw["run"][:nruns]:
            kw = {f.name: r[f.name] for f in fields(ConvRun) if f.name != "weight_buf"}
            runs.append(ConvRun(weight_buf=ref(r["weight_buf"]), **kw))
        return cls(
            input_buf=ref(raw["input_buf"]), output_buf=ref(raw["output_buf"]),
            eltwise_buf=ref(raw["eltwise_buf"]), w=raw["w"], h=raw["h"], z=raw["z"], c=raw["c"],
            topo=raw["topo"], input_circular_offset=raw["input_circular_offset"],
            output_mode=raw["output_mode"], runs=runs, u8tofp16_table=table, to_bgr=to_bgr,
        )

    def replace(self, **changes: Any) -> ConvCommand:
        return replace(self, **changes)


@dataclass
class FcCommand:
    """The legacy fully-connected command (§3.4), lowered to a 1×1 conv (§6.4).

    ``weight_buf`` holds a blob packed by :func:`dvsdk.hw.weights.pack_fc_weights`
    for (input_size, 1, 1) → (output_size, 1, 1).  ``actfunc`` uses the FC codes.
    """

    weight_buf: BufferRef
    input_buf: BufferRef
    output_buf: BufferRef
    input_size: int
    output_size: int
    weight_fmt: int = 0
    actfunc: int = 0
    actfunc_param: int = 0

    device_type = "conv"  # executed by the conv engine (there is no FC unit any more)

    def __post_init__(self) -> None:
        self.weight_buf = as_ref(self.weight_buf)
        self.input_buf = as_ref(self.input_buf)
        self.output_buf = as_ref(self.output_buf)

    def buffers(self) -> list[BufferRef]:
        return [b for b in (self.weight_buf, self.input_buf, self.output_buf) if b]


@dataclass
class MaximizerCommand:
    """Per-pixel argmax over ``nclass`` FP16 channels into uint8 (§3.6, §9.2)."""

    input_buf: BufferRef
    output_buf: BufferRef
    width: int
    height: int
    nclass: int

    device_type = "maximizer"

    def __post_init__(self) -> None:
        self.input_buf = as_ref(self.input_buf)
        self.output_buf = as_ref(self.output_buf)

    def buffers(self) -> list[BufferRef]:
        return [b for b in (self.input_buf, self.output_buf) if b]


@dataclass
class IpuCommand:
    """Image processing unit command (§3.5, §9.1): texture → resize/swizzle → RGB/FP16."""

    wr: BufferRef
    rect_width: int
    rect_height: int
    fmt_wr: int = 2
    tex: BufferRef = field(default_factory=BufferRef)
    rd: BufferRef = field(default_factory=BufferRef)
    fmt_tex: int = 1
    fmt_rd: int = 1
    tex_width: int = 0
    tex_height: int = 0
    stride_rd: int = 0
    stride_wr: int = 0
    lut: list[int] = field(default_factory=list)
    ncolor_lut: int = 0
    alpha: int = 255
    transpose: int = 0
    use_const_alpha: int = 0
    use_tex: int = 1
    use_rd: int = 0
    blf: int = 0
    ridx: int = 0
    gidx: int = 1
    bidx: int = 2
    aidx: int = 3
    cnv_type: int = 1
    cnv_param: tuple[int, int, int] = (0, 0, 0)

    device_type = "ipu"

    def __post_init__(self) -> None:
        self.wr = as_ref(self.wr)
        self.tex = as_ref(self.tex)
        self.rd = as_ref(self.rd)

    def buffers(self) -> list[BufferRef]:
        return [b for b in (self.tex, self.rd, self.wr) if b]


Command = ConvCommand | FcCommand | MaximizerCommand | IpuCommand
