"""Command validation: every rule of reference §6, before anything touches a device.

We apply the union of the user-driver (§6.1) and kernel (§6.7) checks, DMP's converter's
DV700 limits (every run's input W <= 2047, H <= 1024, C <= 32768; a batch below 0x8000,
whose bit 15 the converter uses as its transposed-weight flag; ELU with
``actfunc_param = 0`` as DMP sends it), and close
their gaps (§15): buffer sizes count bytes (not elements) and the whole batch,
kernel-size and window checks apply to every conv kind, a max-pool window is
checked against the tensor it pools, PReLU needs a conv, LRN runs keep
``pool_enable = 0`` (no dummy pool, §15.1), and a zero ``pool_stride`` is
reported instead of dividing by zero (§15.4).  Choices where the reference is
[AMBIG] are listed in ``firmware_spec/README.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..errors import InvalidArgument, InvalidCommand
from ..hw import dims, quirks
from ..hw.spec import SPEC
from ..hw.weights import fc_weight_size
from .commands import (
    ACTFUNC,
    CONV_ENABLE,
    POOL_ENABLE,
    BufferRef,
    ConvCommand,
    ConvRun,
    FcCommand,
    IpuCommand,
    MaximizerCommand,
)
from .device import DeviceInfo

LIMITS = SPEC.limits
IMAGE_FORMAT = SPEC.enum("image_format")
PIXEL_BYTES = {IMAGE_FORMAT.RGB888: 3, IMAGE_FORMAT.RGBA8888: 4, IMAGE_FORMAT.RGBFP16: 6,
               IMAGE_FORMAT.LUT: 1}


@dataclass
class ConvPlan:
    """What validation learned about a conv command; the stream encoder uses it."""

    tiles: int
    out_shapes: list[tuple[int, int, int, int]] = field(default_factory=list)
    out_bytes: int = 0
    weight_bytes: list[int] = field(default_factory=list)
    run_tiles: list[int] = field(default_factory=list)
    ubuf_usage: int = 0


def _fail(msg: str, run: int | None = None, **kw: object) -> None:
    raise InvalidCommand(msg, run=run, **kw)


def check_buffer(ref: BufferRef, required: int, name: str, align: int) -> None:
    """§6.8 / §2.4: present, aligned, in range and large enough."""
    if not ref:
        _fail(f"{name} buffer is missing", field=name, value=None, limit="a DMA buffer")
    if ref.buffer.freed:
        _fail(f"{name} buffer was freed", field=name, value=ref.buffer.name)
    if required <= 0:
        _fail(f"{name} would need {required} bytes", field=name, value=required, limit=">= 1")
    if ref.phys % align:
        _fail(f"{name} address is not {align}-byte aligned", field=f"{name}.offs",
              value=ref.offset, limit=f"multiple of {align}")
    if ref.phys + required > 1 << 32:
        _fail(f"{name} lies above 4 GiB", field=name, value=hex(ref.phys), limit="32-bit")
    if ref.offset < 0 or ref.available < required:
        _fail(f"{name} buffer too small", field=name, value=ref.available, limit=required)


def validate_conv(cmd: ConvCommand, info: DeviceInfo) -> ConvPlan:
    """Validate a conv command against §6.1 + §6.7 for the device described by ``info``."""
    if not isinstance(cmd, ConvCommand):
        raise InvalidArgument("not a ConvCommand", field="cmd", value=type(cmd).__name__)
    ub, svn = info.ub_size, info.svn_version
    kmax = min(info.max_kernel_size, LIMITS["max_kernel_size"])
    topo = int(cmd.topo)
    if not 0 < topo < 1 << LIMITS["max_runs"]:
        _fail("topo must select 1..32 runs", field="topo", value=topo, limit="1..0xFFFFFFFF")
    nruns = cmd.num_runs
    if len(cmd.runs) < nruns:
        _fail("fewer runs than topo selects", field="runs", value=len(cmd.runs), limit=nruns)
    if len(cmd.runs) > nruns:
        _fail("more runs than topo selects (the hardware would ignore them)", field="runs",
              value=len(cmd.runs), limit=nruns)
    for name in ("w", "h", "c"):
        v = getattr(cmd, name)
        if not 1 <= v <= 0xFFFF:
            _fail(f"input {name} out of range", field=name, value=v, limit="1..65535")
    if cmd.z != 1:
        _fail("3-D input (z > 1) is not supported: its memory layout is unspecified (§1)",
              field="z", value=cmd.z, limit=1)
    if not 1 <= cmd.batch <= LIMITS["batch_max"]:
        # bit 15 (0x8000) is DMP's converter's transposed-weight flag, not a batch
        _fail("batch (input_circular_offset) out of range", field="input_circular_offset",
              value=cmd.input_circular_offset, limit=f"0..{LIMITS['batch_max']}")
    if cmd.output_mode not in (0, 1):
        _fail("unknown output_mode", field="output_mode", value=cmd.output_mode,
              limit="0 concat, 1 eltwise")
    if cmd.output_mode == 1 and not cmd.eltwise_buf:
        _fail("output_mode 1 (element-wise add) needs eltwise_buf", field="eltwise_buf",
              value=None, limit="a DMA buffer")
    if cmd.output_mode == 1 and topo != 1:
        # [AMBIG] §4.4: where a multi-run command would find each run's addend is not
        # specified; dvsdk supports the element-wise add on single-run commands only.
        _fail("element-wise add needs a single-run command", field="topo", value=hex(topo),
              limit="topo == 1 with output_mode 1")

    plan = ConvPlan(tiles=0)
    shape = (cmd.w, cmd.h, cmd.z, cmd.c)
    multirun_ok = True
    for i in range(nruns):
        run = cmd.runs[i]
        out_shape, out_bytes, wbytes, tiles = _check_run(cmd, i, run, shape, kmax, svn, ub)
        dil = run.dilation
        if run.pz > 1 or max(dil) > 1 or tiles != 1:
            multirun_ok = False
        plan.out_shapes.append(out_shape)
        plan.weight_bytes.append(wbytes)
        plan.run_tiles.append(tiles)
        if topo >> i & 1:
            if out_bytes == 0:
                _fail("run writes an empty output", run=i, field="output", value=out_shape)
            plan.out_bytes += out_bytes
            shape = (cmd.w, cmd.h, cmd.z, cmd.c)
        else:
            if tiles != 1:
                _fail("a run kept in the unified buffer must fit in one tile", run=i,
                      field="tiles", value=tiles, limit=1)
            shape = out_shape
    if topo != 1:
        for i, run in enumerate(cmd.runs[:nruns]):
            if 0 in run.pool_strides:  # §15.4: the UBUF math would divide by it
                _fail("pool_stride must be non-zero on every run of a multi-run command "
                      "(use 0x0101 when the run does not pool)", run=i, field="pool_stride",
                      value=hex(run.pool_stride), limit="x, y >= 1")
        if not multirun_ok:
            _fail("multi-run commands cannot hold 3-D, dilated or multi-tile runs", field="topo",
                  value=hex(topo), limit="topo == 1")
        try:
            usage = dims.ubuf_single_tile_usage(cmd, cmd.runs, ub)
        except InvalidArgument as e:
            raise InvalidCommand(e.message, field=e.field, value=e.value, limit=e.limit) from None
        if usage > ub:
            _fail(f"unified buffer should be at least {usage} bytes", field="ub_size", value=ub,
                  limit=usage)
        kept = dims.ubuf_kept_bytes(cmd, cmd.runs)
        if kept > ub:  # (what §7.3's peak can miss: deconv and non-square avg-pool runs)
            _fail(f"a run kept in the unified buffer holds {kept} bytes of input and output",
                  field="ub_size", value=ub, limit=kept)
        plan.ubuf_usage = usage
        plan.tiles = 1
    else:
        plan.tiles = plan.run_tiles[0]

    hw_date = int(getattr(info, "hw_date", 0) or 0)
    for i, quirk in quirks.violations(cmd.runs[:nruns], plan.run_tiles, cmd.output_mode == 1,
                                      hw_date):
        _fail(f"hardware {hw_date} cannot run this: {quirks.describe(quirk)}", run=i,
              field=quirk, value=hw_date, limit=int(quirks.QUIRKS[quirk]["fixed"]))
    n = cmd.batch
    io = max(2, int(getattr(info, "io_align", 2)))  # 16 on DMP's modules before 2019-07 (§6.8)
    if cmd.version == 1:
        check_buffer(cmd.u8tofp16_table, LIMITS["u8_table_bytes"], "u8tofp16_table", 16)
        check_buffer(cmd.input_buf, cmd.w * cmd.h * cmd.c * cmd.z * n, "input_buf", io)
    else:
        check_buffer(cmd.input_buf, cmd.w * cmd.h * cmd.c * cmd.z * 2 * n, "input_buf", io)
    check_buffer(cmd.output_buf, plan.out_bytes * n, "output_buf", io)
    if cmd.output_mode == 1:
        # the addend has the shape of the stage before max-pool/upsample (§4.4)
        r0 = cmd.runs[0]
        pre = replace(r0, pool_enable=0) if r0.pool_enable != POOL_ENABLE.avg else r0
        (ew, eh, _, ec), _ = dims.run_output_shape(pre, (cmd.w, cmd.h, cmd.z, cmd.c))
        check_buffer(cmd.eltwise_buf, ew * eh * ec * 2 * n, "eltwise_buf", io)
    for i, (run, wbytes) in enumerate(zip(cmd.runs, plan.weight_bytes)):
        if wbytes:
            try:
                check_buffer(run.weight_buf, wbytes, "weight_buf", 16)
            except InvalidCommand as e:
                raise InvalidCommand(e.message, run=i, field=e.field, value=e.value,
                                     limit=e.limit) from None
    return plan


def _check_run(cmd: ConvCommand, i: int, run: ConvRun, shape: tuple[int, int, int, int],
               kmax: int, svn: int, ub: int) -> tuple[tuple[int, int, int, int], int, int, int]:
    w, h, z, c = shape
    ce, pe = run.conv_enable, run.pool_enable
    kx, ky = run.kx, run.ky
    for name, v, key in (("w", w, "max_conv_width"), ("h", h, "max_conv_height"),
                         ("c", c, "max_conv_channels")):
        if v > LIMITS[key]:  # what DMP's converter lets through (dmp-convertor.md §3)
            _fail(f"run input {name} = {v} exceeds the DV700's limit", run=i, field=name,
                  value=v, limit=f"1..{LIMITS[key]} (DMP converter, DV700)")
    if ce not in CONV_ENABLE:
        _fail("unknown conv_enable", run=i, field="conv_enable", value=ce,
              limit=sorted(CONV_ENABLE.codes.values()))
    if pe not in (POOL_ENABLE.none, POOL_ENABLE.max, POOL_ENABLE.avg, POOL_ENABLE.upsample):
        _fail("unsupported pool_enable", run=i, field="pool_enable", value=pe,
              limit="0 none, 1 max, 2 avg, 4 upsample")
    if run.actfunc not in ACTFUNC:
        _fail("unknown actfunc", run=i, field="actfunc", value=run.actfunc, limit="0..6")
    if not (1 <= kx <= kmax and 1 <= ky <= kmax):
        _fail("kernel size out of range", run=i, field="p", value=(kx, ky), limit=f"1..{kmax}")
    if run.conv_pad & 0x00800080:
        _fail("conv_pad bits 7 and 23 are not pad bits", run=i, field="conv_pad",
              value=hex(run.conv_pad), limit="left/top < 128")
    if run.pz != 1:
        _fail("kernel depth pz must be 1 (3-D convolution is not supported)", run=i, field="pz",
              value=run.pz, limit=1)
    is_lrn = run.is_lrn
    if ce and pe not in (POOL_ENABLE.none, POOL_ENABLE.max):
        _fail(f"pooling of type {pe} cannot be combined with convolution", run=i,
              field="pool_enable", value=pe, limit="0 or 1 with conv")
    if not (ce or pe or run.actfunc or is_lrn):
        _fail("run specifies no operation", run=i, field="conv_enable", value=0,
              limit="conv, pool, activation or LRN")
    if run.actfunc == ACTFUNC.elu and run.actfunc_param != 0:
        _fail("ELU takes no parameter: DMP's converter and tests send actfunc_param 0 "
              "(alpha 1, §4.5); run other alphas on the CPU", run=i, field="actfunc_param",
              value=hex(run.actfunc_param), limit=0)
    if run.actfunc == ACTFUNC.prelu and not ce:
        _fail("PReLU slopes come from the weight buffer: it needs a conv", run=i,
              field="actfunc", value=run.actfunc, limit="conv_enable != 0")
    if run.actfunc == ACTFUNC.prelu and run.quantized:
        _fail("PReLU cannot be used with quantized weights", run=i, field="weight_fmt",
              value=run.weight_fmt, limit="1 (FP16) with PReLU")
    if ce:
        if run.weight_fmt not in (1, 3):
            _fail("unsupported weight_fmt", run=i, field="weight_fmt", value=run.weight_fmt,
                  limit="1 FP16, 3 8-bit")
        if not run.weight_buf:
            _fail("a conv run needs weights", run=i, field="weight_buf", value=None)
        sx, sy = run.stride
        if sx < 1 or sy < 1:
            _fail("conv stride must be >= 1", run=i, field="conv_stride", value=(sx, sy),
                  limit=">= 1")
        l, r, t, b = run.pads
        dx, dy = run.dilation
        kex, key = (kx - 1) * dx + 1, (ky - 1) * dy + 1
        if not run.deconv and (kex > l + w + r or key > t + h + b):
            _fail("kernel larger than the padded input", run=i, field="p", value=(kex, key),
                  limit=(l + w + r, t + h + b))
        if run.depthwise and run.m != c:
            _fail("depthwise convolution needs m == c", run=i, field="m", value=run.m, limit=c)
        if run.deconv and svn < 93:
            _fail("deconvolution needs svn_version >= 93", run=i, field="conv_enable", value=ce,
                  limit="svn >= 93")
        if dx > 1 or dy > 1:
            _check_dilated(cmd, i, run, w, h)
        if not 1 <= run.m <= 0xFFFF:
            _fail("output channels out of range", run=i, field="m", value=run.m, limit="1..65535")
    elif run.weight_fmt not in (0, 1, 3):
        _fail("unsupported weight_fmt", run=i, field="weight_fmt", value=run.weight_fmt)
    if is_lrn:
        if c % 16:
            _fail("LRN needs C to be a multiple of 16", run=i, field="c", value=c, limit="C % 16")
        if ce or pe or cmd.topo != 1:
            _fail("LRN must be a standalone layer", run=i, field="lrn", value=run.lrn,
                  limit="no conv, no pool, topo == 1")
        if run.lrn & ~0x0F03:
            _fail("unknown LRN bits", run=i, field="lrn", value=hex(run.lrn), limit="0x0F03")
    try:
        (tw, th, _, _), _ = dims.run_output_shape(replace(run, pool_enable=0), shape)
        if pe in (POOL_ENABLE.max, POOL_ENABLE.avg):
            _check_pool(i, run, tw, th, kmax, svn)
        out_shape, out_bytes = dims.run_output_shape(run, shape)
        wbytes = dims.run_weight_size(run, c)
    except InvalidArgument as e:
        raise InvalidCommand(e.message, run=i, field=e.field, value=e.value,
                             limit=e.limit) from None
    if min(out_shape[:2]) < 1 or tw < 1 or th < 1:
        _fail("run output is empty", run=i, field="output", value=out_shape, limit=">= 1x1")
    if out_shape[3] > 0xFFFF or out_shape[0] > 0xFFFF or out_shape[1] > 0xFFFF:
        _fail("run output too large", run=i, field="output", value=out_shape, limit="65535")
    tiles = _run_tiles(run, shape, ub)
    if tiles < 1:
        _fail("run needs more unified buffer than the device has", run=i, field="ub_size",
              value=ub, limit="enough for one tile")
    return out_shape, out_bytes, wbytes, tiles


def _check_pool(i: int, run: ConvRun, tw: int, th: int, kmax: int, svn: int) -> None:
    pkx, pky = run.pool_kernel
    if run.pool_enable == POOL_ENABLE.max:
        if not (2 <= pkx <= 3 and 1 <= pky <= 3):
            _fail("max-pool window out of range", run=i, field="pool_size", value=(pkx, pky),
                  limit="width 2..3, height 1..3")
    elif not (1 <= pkx <= kmax and 1 <= pky <= kmax):
        _fail("average-pool window out of range", run=i, field="pool_size", value=(pkx, pky),
              limit=f"1..{kmax}")
    psx, psy = run.pool_strides
    if psx < 1 or psy < 1:
        _fail("pool stride must be >= 1", run=i, field="pool_stride", value=(psx, psy),
              limit=">= 1 (0x0101 when unused)")
    l, r, t, b = run.pool_pads
    if pkx > l + tw + r or pky > t + th + b:
        _fail("pool window larger than the padded input", run=i, field="pool_size",
              value=(pkx, pky), limit=(l + tw + r, t + th + b))
    if pkx != pky and svn < 93:
        _fail("non-square pooling needs svn_version >= 93", run=i, field="pool_size",
              value=(pkx, pky), limit="svn >= 93")


def _check_dilated(cmd: ConvCommand, i: int, run: ConvRun, w: int, h: int) -> None:
    kx, ky = run.kx, run.ky
    if cmd.topo != 1 or run.pool_enable:
        _fail("a dilated conv must be a single run without pooling", run=i,
              field="conv_dilation", value=run.dilation, limit="topo == 1, no pool")
    if kx % 2 == 0 or ky % 2 == 0:
        _fail("a dilated conv needs an odd kernel", run=i, field="p", value=(kx, ky), limit="odd")
    if run.depthwise:
        # the dilated weight stream (§8.2) has no depthwise form
        _fail("a dilated conv cannot be depthwise", run=i, field="conv_enable",
              value=run.conv_enable, limit="1 or 5 with dilation")
    if run.actfunc == ACTFUNC.prelu:
        _fail("PReLU cannot be used with dilation", run=i, field="actfunc", value=run.actfunc)
    sx, sy = run.stride
    if run.deconv and (sx, sy) != (1, 1):
        _fail("a dilated deconvolution needs stride 1", run=i, field="conv_stride",
              value=(sx, sy), limit=(1, 1))
    (ow, oh, _, _), _ = dims.run_output_shape(run, (w, h, 1, cmd.c))
    if ow * sx != w or oh * sy != h:
        _fail("a dilated conv needs 'same' output (ox*sx == w and oy*sy == h)", run=i,
              field="conv_pad", value=(ow, oh), limit=(w // max(sx, 1), h // max(sy, 1)))


def _run_tiles(run: ConvRun, shape: tuple[int, int, int, int], ub: int) -> int:
    w, h, _, c = shape
    if run.is_lrn:
        return dims.lrn_tiles(w, h, c, ub)[0]
    if run.conv_enable == 0 or run.depthwise:
        return dims.pool_tiles(w, h, c)[0] if run.pool_enable else 1
    return dims.conv_tiles(w, h, c, run.m, run.kx, run.ky, run.pads, run.stride, run.dilation,
                           ub, deconv=run.deconv)[0]


# -- FC (§6.3), maximizer (§6.6), IPU (§6.5) ---------------------------------------------

def validate_fc(cmd: FcCommand, info: DeviceInfo) -> None:
    limit = 16384
    for name in ("input_size", "output_size"):
        v = getattr(cmd, name)
        if not 1 <= v <= limit:
            _fail(f"FC {name} out of range", field=name, value=v, limit=f"1..{limit}")
    if cmd.weight_fmt not in (0, 1):
        _fail("unknown FC weight_fmt", field="weight_fmt", value=cmd.weight_fmt,
              limit="0 FP16, 1 8-bit")
    if cmd.actfunc not in SPEC.commands["fc_to_conv_actfunc"]:
        _fail("FC activation has no conv equivalent", field="actfunc", value=cmd.actfunc,
              limit="0..4 (PReLU is not supported)")
    check_buffer(cmd.input_buf, 2 * cmd.input_size, "input_buf", 2)
    check_buffer(cmd.output_buf, 2 * cmd.output_size, "output_buf", 2)
    check_buffer(cmd.weight_buf, fc_weight_size(cmd.input_size, cmd.output_size,
                                                bool(cmd.weight_fmt)), "weight_buf", 16)


def validate_maximizer(cmd: MaximizerCommand, info: DeviceInfo) -> None:
    if cmd.width < 1 or cmd.height < 1:
        _fail("maximizer width and height must be >= 1", field="width",
              value=(cmd.width, cmd.height), limit=">= 1")
    if cmd.width > 0xFFFF or cmd.height > 0xFFFF:
        _fail("maximizer size out of range", field="width", value=(cmd.width, cmd.height),
              limit="65535")
    if cmd.width * cmd.height >= LIMITS["maximizer_pixels"]:
        _fail("maximizer image too large", field="width*height", value=cmd.width * cmd.height,
              limit=LIMITS["maximizer_pixels"] - 1)
    if not 2 <= cmd.nclass <= 255:
        _fail("maximizer needs 2..255 classes", field="nclass", value=cmd.nclass, limit="2..255")
    px = cmd.width * cmd.height
    check_buffer(cmd.input_buf, px * cmd.nclass * 2, "input_buf", 16)
    check_buffer(cmd.output_buf, px, "output_buf", 16)


def validate_ipu(cmd: IpuCommand, info: DeviceInfo) -> None:
    fmts = IMAGE_FORMAT
    if cmd.fmt_wr not in (fmts.RGBA8888, fmts.RGB888, fmts.RGBFP16):
        _fail("unknown IPU output format", field="fmt_wr", value=cmd.fmt_wr, limit="0, 1, 2")
    smax = LIMITS["ipu_stride_max"]
    if not -smax - 1 <= cmd.stride_wr <= smax:
        _fail("stride_wr out of range", field="stride_wr", value=cmd.stride_wr,
              limit=f"{-smax - 1}..{smax}")
    rmax = LIMITS["ipu_rect_max"]
    for name in ("rect_width", "rect_height"):
        v = getattr(cmd, name)
        if not 1 <= v <= rmax:
            _fail(f"IPU {name} out of range", field=name, value=v, limit=f"1..{rmax}")
    if not (cmd.use_tex or cmd.use_rd):
        _fail("IPU needs a texture or a read buffer", field="use_tex", value=0,
              limit="use_tex or use_rd")
    if len(cmd.lut) > 32 or cmd.ncolor_lut > 32:
        _fail("IPU palette holds at most 32 colours", field="ncolor_lut",
              value=max(len(cmd.lut), cmd.ncolor_lut), limit=32)
    if cmd.cnv_type not in (0, 1):
        _fail("unknown IPU conversion", field="cnv_type", value=cmd.cnv_type, limit="0 SUB, 1 DIV")
    if cmd.use_tex:
        tmax = LIMITS["ipu_tex_max"]
        for name in ("tex_width", "tex_height"):
            v = getattr(cmd, name)
            if not 1 <= v <= tmax:
                _fail(f"IPU {name} out of range", field=name, value=v, limit=f"1..{tmax}")
        idx = (cmd.ridx, cmd.gidx, cmd.bidx, cmd.aidx)
        if cmd.fmt_tex in (fmts.RGBA8888, fmts.LUT):
            if sorted(idx) != [0, 1, 2, 3]:
                _fail("swizzle indices must be a permutation of 0..3", field="ridx..aidx",
                      value=idx, limit="{0,1,2,3}")
        elif cmd.fmt_tex == fmts.RGB888:
            if sorted(idx[:3]) != [0, 1, 2]:
                _fail("swizzle indices must be a permutation of 0..2", field="ridx..bidx",
                      value=idx[:3], limit="{0,1,2}")
        else:
            _fail("unknown IPU texture format", field="fmt_tex", value=cmd.fmt_tex,
                  limit="0, 1, 7")
        check_buffer(cmd.tex, cmd.tex_width * cmd.tex_height * PIXEL_BYTES[cmd.fmt_tex],
                     "tex", 16)
    if cmd.use_rd:
        if cmd.fmt_rd not in (fmts.RGBA8888, fmts.RGB888):
            _fail("unknown IPU read format", field="fmt_rd", value=cmd.fmt_rd, limit="0, 1")
        if cmd.stride_rd == 0 or not -smax - 1 <= cmd.stride_rd <= smax:
            _fail("stride_rd out of range", field="stride_rd", value=cmd.stride_rd,
                  limit=f"non-zero, {-smax - 1}..{smax}")
        check_buffer(cmd.rd, cmd.rect_width * cmd.rect_height * PIXEL_BYTES[cmd.fmt_rd],
                     "rd", 16)
    check_buffer(cmd.wr, cmd.rect_width * cmd.rect_height * PIXEL_BYTES[cmd.fmt_wr], "wr", 16)


VALIDATORS: dict[type, Callable] = {
    ConvCommand: validate_conv,
    FcCommand: validate_fc,
    MaximizerCommand: validate_maximizer,
    IpuCommand: validate_ipu,
}


def validate(cmd: object, info: DeviceInfo) -> object:
    fn = VALIDATORS.get(type(cmd))
    if fn is None:
        raise InvalidArgument("not a DV700 command", field="cmd", value=type(cmd).__name__,
                              limit=[c.__name__ for c in VALIDATORS])
    return fn(cmd, info)
