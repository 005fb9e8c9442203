"""Maximizer and IPU execution from their register files (reference §9, §10.6, §10.7)."""

from __future__ import annotations

import numpy as np

from ..hw import layout
from ..hw.fp16 import fp24
from ..hw.spec import SPEC
from .core import CoreState, R
from .ipu_ops import PIXEL_BYTES, ipu_render, maximizer
from .status import HardwareError
from .timing import ipu_cycles, maximizer_cycles

FMT = SPEC.enum("image_format")


def run_maximizer(core: CoreState) -> int:
    """Argmax per pixel (§9.2).  Only W·H matters: input and output are both indexed by
    the x-major pixel number, so the input is read as a 1 × (W·H) × nclass tensor."""
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
    raw = core.mem.read(src, px * nclass * 2)
    scores = layout.unpack(raw, (1, px, nclass))
    core.mem.write(dst, maximizer(scores, nclass))
    return maximizer_cycles(px, 1, nclass, core.params.timing)


def _image(core: CoreState, addr: int, width: int, height: int, fmt: int,
           stride: int) -> np.ndarray:
    """Read a (height, width, bytes-per-pixel) image; stride in pixels, 0 = packed,
    negative = bottom-up ([AMBIG] §9.1: the application treats strides as pixels)."""
    bpp = PIXEL_BYTES[fmt]
    pitch = (stride or width) * bpp
    if stride >= 0:
        rows = [core.mem.read(addr + y * pitch, width * bpp) for y in range(height)] \
            if pitch != width * bpp else [core.mem.read(addr, width * height * bpp)]
        data = np.concatenate(rows)
    else:
        data = np.concatenate([core.mem.read(addr + y * pitch, width * bpp)
                               for y in range(height)])
    return data.reshape(height, width, bpp)


def run_ipu(core: CoreState) -> int:
    reg = lambda name: core.read_reg("ipu", R["ipu"][name])  # noqa: E731
    rect = reg("RECT")
    rw, rh = rect >> 16, rect & 0xFFFF
    mode = reg("MODE")
    fmt_wr, fmt_rd = (mode >> 1) & 3, mode & 1
    use_rd, const_alpha, alpha = bool(mode & 0x08), bool(mode & 0x10), mode >> 24
    use_tex = reg("USE_TEX") != 0
    wr = reg("WR_ADDR")
    if wr % 16:
        raise HardwareError("misaligned", wr, "IPU buffers need 16-byte alignment")
    if not rw or not rh:
        raise HardwareError("bad_config", wr, "IPU rectangle is empty")
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
        if fmt_tex not in PIXEL_BYTES or fmt_tex == FMT.RGBFP16:
            raise HardwareError("bad_config", reg("TEX_ADDR"), f"texture format {fmt_tex}")
        if reg("SCALE_W") != fp24(1.0 / max(tw, 1)) or reg("SCALE_H") != fp24(1.0 / max(th, 1)):
            raise HardwareError("bad_config", reg("TEX_ADDR"), "scale registers disagree")
        tex = _image(core, reg("TEX_ADDR"), tw, th, fmt_tex, 0)
        read_bytes += tex.size
        lut = core.ipu_lut if fmt_tex == FMT.LUT else None
    rd = None
    if use_rd:
        stride = np.int32(np.uint32(reg("RD_STRIDE"))).item()
        rd = _image(core, reg("RD_ADDR"), rw, rh, fmt_rd, stride)
        read_bytes += rd.size
    conv = reg("CONVERSION")
    cnv_type = 1 if conv == 0x01000000 else 0
    cnv_param = ((conv >> 16) & 0xFF, (conv >> 8) & 0xFF, conv & 0xFF)
    out = ipu_render(tex, fmt_tex, lut, rw, rh, transpose=bool(reg("TRANSPOSE")),
                     bilinear=bilinear, swizzle=swizzle, fmt_wr=fmt_wr, cnv_type=cnv_type,
                     cnv_param=cnv_param, rd=rd, fmt_rd=fmt_rd if use_rd else None,
                     alpha=alpha, use_const_alpha=const_alpha)
    raw = np.ascontiguousarray(out).view(np.uint8).reshape(rh, -1)
    stride = np.int32(np.uint32(reg("WR_STRIDE"))).item()
    pitch = (stride or rw) * PIXEL_BYTES[fmt_wr]
    if pitch == raw.shape[1]:
        core.mem.write(wr, raw)
    else:
        for y in range(rh):
            core.mem.write(wr + y * pitch, raw[y])
    return ipu_cycles(rw, rh, read_bytes, raw.size, core.params.timing)
