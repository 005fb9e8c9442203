"""Register programs of the IPU and the maximizer (reference §10.6, §10.7).

These units take no command stream: the driver replays (offset, value) writes
from the CPU and then writes the start register.  Offsets come from
``firmware_spec/registers.yaml``.
"""

from __future__ import annotations

import math

from ..hw.fp16 import fp24
from ..hw.spec import SPEC
from .commands import IpuCommand, MaximizerCommand


def _r(unit: str, name: str) -> int:
    return SPEC.reg(unit, name)


def ipu_scale(size: int) -> int:
    """``FP24(1.0f / size)`` as libdmpdv computes the IPU scale registers: always, so a
    command without a texture (size 0) gets FP24(1/0) = FP24(inf) = 0x7F0000 (§9.1, §10.6)."""
    return fp24(1.0 / size if size else math.inf)


def maximizer_writes(cmd: MaximizerCommand) -> list[tuple[int, int]]:
    """§10.7, including the literal LAST_BLOCK_SRC arithmetic ([AMBIG])."""
    px = cmd.width * cmd.height
    block_size = px * min(cmd.nclass, 8) * 2
    src = cmd.input_buf.phys + px * cmd.nclass
    if src % block_size:
        src -= src % block_size
    return [
        (_r("maximizer", "SIZE"), (cmd.nclass << 24) | (px & 0xFFFFFF)),
        (_r("maximizer", "IN_ADDR"), cmd.input_buf.phys),
        (_r("maximizer", "OUT_ADDR"), cmd.output_buf.phys),
        (_r("maximizer", "BLOCK_SIZE"), block_size),
        (_r("maximizer", "LAST_BLOCK"), (px % 128) * 2 * (cmd.nclass % 8)),
        (_r("maximizer", "LAST_BLOCK_SRC"), src & 0xFFFFFFFF),
    ]


def ipu_writes(cmd: IpuCommand) -> list[tuple[int, int]]:
    """§10.6, in the kernel's order; scales are FP24(1/size) as libdmpdv computes them."""
    w: list[tuple[int, int]] = [
        (_r("ipu", "RECT"), (cmd.rect_width << 16) | cmd.rect_height),
        (_r("ipu", "TRANSPOSE"), 1 if cmd.transpose else 0),
        (_r("ipu", "SCALE_H"), ipu_scale(cmd.tex_height)),
        (_r("ipu", "SCALE_W"), ipu_scale(cmd.tex_width)),
        (_r("ipu", "USE_TEX"), 0x00FF0002 if cmd.use_tex else 0),
    ]
    if cmd.use_tex:
        swz = ((cmd.ridx & 3) << 6) | ((cmd.gidx & 3) << 4) | ((cmd.bidx & 3) << 2) | (cmd.aidx & 3)
        size = (cmd.tex_width << 16) | cmd.tex_height
        w += [
            (_r("ipu", "TEX_ADDR"), cmd.tex.phys),
            (_r("ipu", "TEX_FMT"), (swz << 16) | cmd.fmt_tex),
            (_r("ipu", "TEX_SIZE"), size),
            (_r("ipu", "TEX_SIZE2"), size),
            (_r("ipu", "TEX_FILTER"), 7 if cmd.blf else 1),
            (_r("ipu", "TEX_ORIGIN"), 1),
        ]
    if cmd.use_rd:
        w += [(_r("ipu", "RD_ADDR"), cmd.rd.phys),
              (_r("ipu", "RD_STRIDE"), cmd.stride_rd & 0xFFFFFFFF)]
    w += [
        (_r("ipu", "WR_ADDR"), cmd.wr.phys),
        (_r("ipu", "WR_STRIDE"), cmd.stride_wr & 0xFFFFFFFF),
        (_r("ipu", "MODE"), (cmd.alpha << 24) | (0x10 if cmd.use_const_alpha else 0)
         | (0x08 if cmd.use_rd else 0) | ((cmd.fmt_wr & 3) << 1) | (cmd.fmt_rd & 1)),
    ]
    if cmd.cnv_type == 0:
        p0, p1, p2 = cmd.cnv_param
        w.append((_r("ipu", "CONVERSION"), (p0 << 16) | (p1 << 8) | p2))
    else:
        w.append((_r("ipu", "CONVERSION"), 0x01000000))
    if cmd.use_tex and cmd.fmt_tex == SPEC.enum("image_format").LUT:
        w += [(_r("ipu", "LUT"), v & 0xFFFFFFFF) for v in cmd.lut[: cmd.ncolor_lut]]
    return w
