"""Maximizer and IPU execution from their register files (reference §9, §10.6, §10.7).

A register program is checked against the unit's limits, formats, alignments and DRAM
ranges before anything is read or allocated; what fails is reported through SIM_STATUS,
SIM_FAULT_ADDR and the interrupt, like a conv fault (:mod:`dvsdk.sim.engine`)."""

from __future__ import annotations

import numpy as np

from ..errors import InvalidArgument
from ..hw.fp16 import fp24
from ..hw.spec import SPEC
from ..hw.timing import ipu_cycles, maximizer_cycles
from .core import CoreState, R
from .ipu_ops import PIXEL_BYTES, check_swizzle, ipu_render, maximizer
from .status import Hang, HardwareError

FMT = SPEC.enum("image_format")


LIMITS = SPEC.limits
#: host bytes the maximizer and the IPU work on at a time (pixel chunks, bands of rows),
#: so a legal command of any size runs in bounded memory
CHUNK_BYTES = 32 << 20


def run_maximizer(core: CoreState) -> int:
    """Argmax per pixel (§9.2).  Only W·H matters: input and output are both indexed by
    the x-major pixel number, so the input is read as a 1 × (W·H) × nclass tensor, in
    chunks of pixels (class block k of 8 holds pixel p at element ``8k·px + p·bs``).
    Everything is checked before anything is read; the result is written at the end."""
    reg = lambda name: core.read_reg("maximizer", R["maximizer"][name])  # noqa: E731
    size = reg("SIZE")
    nclass, px = size >> 24, size & 0xFFFFFF
    src, dst = reg("IN_ADDR"), reg("OUT_ADDR")
    if nclass < 2 or px == 0:
        raise HardwareError("bad_config", src, f"maximizer size word {size:#x}")
    for addr in (src, dst):
        if addr % 16:
            raise HardwareError("misaligned", addr, "maximizer buffers need 16-byte alignment")
    if reg("BLOCK_SIZE") != px * min(nclass, 8) * 2:
        raise HardwareError("bad_config", src, "maximizer block size disagrees with SIZE")
    core.mem.check_range(src, px * nclass * 2)
    core.mem.check_range(dst, px)
    cycles = maximizer_cycles(px, 1, nclass, core.params.timing)
    if cycles > core.kick_cycle_limit:
        raise Hang(src, f"watchdog: {cycles} cycles exceed {core.kick_cycle_limit}")
    out = np.empty(px, np.uint8)
    step = max(1, CHUNK_BYTES // (8 * nclass))
    for p0 in range(0, px, step):
        p1 = min(px, p0 + step)
        parts = []
        for k in range(0, nclass, 8):
            bs = min(8, nclass - k)
            raw = core.mem.read(src + 2 * (k * px + p0 * bs), 2 * (p1 - p0) * bs)
            parts.append(raw.view("<f2").reshape(p1 - p0, bs))
        scores = np.concatenate(parts, axis=1)[None]
        out[p0:p1] = maximizer(scores, nclass)
    core.mem.write(dst, out)
    return cycles


def _extent(addr: int, rows: int, row_bytes: int, pitch: int) -> tuple[int, int]:
    """First byte and length of the memory ``rows`` rows span (``pitch`` may be < 0)."""
    lo = addr + min(0, (rows - 1) * pitch)
    hi = addr + max(0, (rows - 1) * pitch) + row_bytes
    return lo, hi - lo


def _rows(core: CoreState, addr: int, width: int, a: int, b: int, bpp: int,
          pitch: int) -> np.ndarray:
    """Rows ``[a, b)`` of an image as a ``(b - a, width, bpp)`` copy; ``pitch`` in bytes,
    negative = bottom-up ([AMBIG] §9.1: the application treats strides as pixels)."""
    rb = width * bpp
    if pitch == rb:
        data = core.mem.read(addr + a * pitch, (b - a) * rb).copy()
    else:
        data = np.concatenate([core.mem.read(addr + y * pitch, rb) for y in range(a, b)])
    return data.reshape(b - a, width, bpp)


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


def run_ipu(core: CoreState) -> int:
    """One IPU command from its registers (§9.1, §10.6).  Every limit, format, alignment and
    DRAM range is checked before anything is read or allocated (§6.5: rectangle
    1..4094, texture 1..4095, strides -32768..32767 pixels); the rectangle is then
    rendered in bands of rows, so memory stays bounded whatever its size."""
    reg = lambda name: core.read_reg("ipu", R["ipu"][name])  # noqa: E731
    rect = reg("RECT")
    rw, rh = rect >> 16, rect & 0xFFFF
    mode = reg("MODE")
    fmt_wr, fmt_rd = (mode >> 1) & 3, mode & 1
    use_rd, const_alpha, alpha = bool(mode & 0x08), bool(mode & 0x10), mode >> 24
    use_tex = reg("USE_TEX") != 0
    wr = reg("WR_ADDR")
    rmax, tmax, smax = LIMITS["ipu_rect_max"], LIMITS["ipu_tex_max"], LIMITS["ipu_stride_max"]
    if wr % 16:
        raise HardwareError("misaligned", wr, "IPU buffers need 16-byte alignment")
    if not (1 <= rw <= rmax and 1 <= rh <= rmax):
        raise HardwareError("bad_config", wr, f"IPU rectangle {rw}x{rh} outside 1..{rmax}")
    if fmt_wr not in (FMT.RGBA8888, FMT.RGB888, FMT.RGBFP16):
        raise HardwareError("bad_config", wr, f"IPU output format {fmt_wr}")
    if not (use_tex or use_rd):
        raise HardwareError("bad_config", wr, "IPU needs a texture or a read buffer")
    strides = {}
    for name in ("WR_STRIDE", "RD_STRIDE") if use_rd else ("WR_STRIDE",):
        strides[name] = np.int32(np.uint32(reg(name))).item()
        if not -smax - 1 <= strides[name] <= smax:
            raise HardwareError("bad_config", wr, f"IPU {name} {strides[name]} outside "
                                f"{-smax - 1}..{smax}")
    wr_pitch = (strides["WR_STRIDE"] or rw) * PIXEL_BYTES[fmt_wr]
    wr_span = _extent(wr, rh, rw * PIXEL_BYTES[fmt_wr], wr_pitch)
    core.mem.check_range(*wr_span)
    tex = lut = None
    fmt_tex, swizzle, bilinear = 1, (0, 1, 2, 3), False
    read_bytes = 0
    if use_tex:
        size = reg("TEX_SIZE")
        tw, th = size >> 16, size & 0xFFFF
        fmt_word = reg("TEX_FMT")
        fmt_tex = fmt_word & 0xFF
        swz = fmt_word >> 16
        swizzle = ((swz >> 6) & 3, (swz >> 4) & 3, (swz >> 2) & 3, swz & 3)
        bilinear = reg("TEX_FILTER") == 7
        tex_addr = reg("TEX_ADDR")
        if fmt_tex not in PIXEL_BYTES or fmt_tex == FMT.RGBFP16:
            raise HardwareError("bad_config", tex_addr, f"texture format {fmt_tex}")
        if not (1 <= tw <= tmax and 1 <= th <= tmax):
            raise HardwareError("bad_config", tex_addr, f"texture {tw}x{th} outside 1..{tmax}")
        if tex_addr % 16:
            raise HardwareError("misaligned", tex_addr, "IPU buffers need 16-byte alignment")
        if reg("SCALE_W") != fp24(1.0 / tw) or reg("SCALE_H") != fp24(1.0 / th):
            raise HardwareError("bad_config", tex_addr, "scale registers disagree")
        try:
            check_swizzle(fmt_tex, swizzle)
        except InvalidArgument as e:
            raise HardwareError("bad_config", tex_addr, str(e)) from None
        lut = core.ipu_lut if fmt_tex == FMT.LUT else None
        if lut is not None and not 1 <= lut.size <= 256:
            raise HardwareError("bad_config", tex_addr, "LUT texture without a palette")
        tex_span = (tex_addr, tw * th * PIXEL_BYTES[fmt_tex])
        core.mem.check_range(*tex_span)
        read_bytes += tex_span[1]
    rd_addr = reg("RD_ADDR")
    rd_pitch = (strides.get("RD_STRIDE", 0) or rw) * PIXEL_BYTES[fmt_rd]
    if use_rd:
        if rd_addr % 16:
            raise HardwareError("misaligned", rd_addr, "IPU buffers need 16-byte alignment")
        rd_span = _extent(rd_addr, rh, rw * PIXEL_BYTES[fmt_rd], rd_pitch)
        core.mem.check_range(*rd_span)
        read_bytes += rw * rh * PIXEL_BYTES[fmt_rd]
    write_bytes = rw * rh * PIXEL_BYTES[fmt_wr]
    cycles = ipu_cycles(rw, rh, read_bytes, write_bytes, core.params.timing)
    if cycles > core.kick_cycle_limit:
        raise Hang(wr, f"watchdog: {cycles} cycles exceed {core.kick_cycle_limit}")
    # reads never see this command's own writes: sources that overlap the output are
    # read whole first (bounded by the limits above)
    if use_tex:
        tex = core.mem.read(*tex_span).reshape(th, tw, PIXEL_BYTES[fmt_tex])
        if _overlap(tex_span, wr_span):
            tex = tex.copy()
    rd_all = _rows(core, rd_addr, rw, 0, rh, PIXEL_BYTES[fmt_rd], rd_pitch) \
        if use_rd and _overlap(rd_span, wr_span) else None
    conv = reg("CONVERSION")
    cnv_type = 1 if conv == 0x01000000 else 0
    cnv_param = ((conv >> 16) & 0xFF, (conv >> 8) & 0xFF, conv & 0xFF)
    band = max(1, CHUNK_BYTES // (rw * 4 * 4 * 6))  # int32/float32 RGBA, a few copies
    for a in range(0, rh, band):
        b = min(rh, a + band)
        rd = None
        if use_rd:
            rd = rd_all[a:b] if rd_all is not None else \
                _rows(core, rd_addr, rw, a, b, PIXEL_BYTES[fmt_rd], rd_pitch)
        out = ipu_render(tex, fmt_tex, lut, rw, rh, transpose=bool(reg("TRANSPOSE")),
                         bilinear=bilinear, swizzle=swizzle, fmt_wr=fmt_wr, cnv_type=cnv_type,
                         cnv_param=cnv_param, rd=rd, fmt_rd=fmt_rd if use_rd else None,
                         alpha=alpha, use_const_alpha=const_alpha, rows=(a, b))
        raw = np.ascontiguousarray(out).view(np.uint8).reshape(b - a, -1)
        if wr_pitch == raw.shape[1]:
            core.mem.write(wr + a * wr_pitch, raw)
        else:
            for y in range(a, b):
                core.mem.write(wr + y * wr_pitch, raw[y - a])
    return cycles
