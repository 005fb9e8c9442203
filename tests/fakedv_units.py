"""The IPU and maximizer register programs of the fake module (``tests/fakedv.py``), as
DMP's module builds them at APPEND (§10.6, §10.7), from the kernel structs of DMP's header
facts; ``resolve(kbuf, align_mask, need, what)`` is the module's ``get_dma_addr``."""

from __future__ import annotations

from collections.abc import Callable

from dvsdk.hw.spec import SPEC

from .abi_facts import fact

Resolve = Callable[[dict, int, int, str], int]
KIPU, KMAX = fact("dmp_dv_kcmdraw_ipu_v0"), fact("dmp_dv_kcmdraw_maximizer_v0")
IPU = {n: SPEC.reg("ipu", n) for n in SPEC.unit("ipu")["registers"]}
MAXR = {n: SPEC.reg("maximizer", n) for n in SPEC.unit("maximizer")["registers"]}


def ipu_program(raw: bytes, resolve: Resolve) -> list[tuple[int, int]]:
    """§10.6: the IPU register program the module stores at APPEND (one per fd)."""
    k = KIPU.unpack(raw.ljust(KIPU.size, b"\0"))
    r = IPU
    w = [(r["RECT"], k["rect_width"] << 16 | k["rect_height"]),
         (r["TRANSPOSE"], 1 if k["transpose"] else 0), (r["SCALE_H"], k["scale_height"]),
         (r["SCALE_W"], k["scale_width"]), (r["USE_TEX"], 0x00FF0002 if k["use_tex"] else 0)]
    if k["use_tex"]:
        swz = ((k["ridx"] & 3) << 6 | (k["gidx"] & 3) << 4 | (k["bidx"] & 3) << 2
               | (k["aidx"] & 3))
        size = k["tex_width"] << 16 | k["tex_height"]
        w += [(r["TEX_ADDR"], resolve(k["tex"], 15, 1, "tex")),
              (r["TEX_FMT"], swz << 16 | k["fmt_tex"]), (r["TEX_SIZE"], size),
              (r["TEX_SIZE2"], size), (r["TEX_FILTER"], 7 if k["blf"] else 1),
              (r["TEX_ORIGIN"], 1)]
    if k["use_rd"]:
        w += [(r["RD_ADDR"], resolve(k["rd"], 15, 1, "rd")),
              (r["RD_STRIDE"], k["stride_rd"] & 0xFFFFFFFF)]
    w += [(r["WR_ADDR"], resolve(k["wr"], 15, 1, "wr")),
          (r["WR_STRIDE"], k["stride_wr"] & 0xFFFFFFFF),
          (r["MODE"], k["alpha"] << 24 | (0x10 if k["use_const_alpha"] else 0)
           | (0x08 if k["use_rd"] else 0) | (k["fmt_wr"] & 3) << 1 | (k["fmt_rd"] & 1)),
          (r["CONVERSION"], (k["cnv_param"][0] << 16 | k["cnv_param"][1] << 8
                             | k["cnv_param"][2]) if k["cnv_type"] == 0 else 0x01000000)]
    if k["use_tex"] and k["fmt_tex"] == 7:
        w += [(r["LUT"], k["lut"][j]) for j in range(k["ncolor_lut"])]
    return w

def maximizer_program(raw: bytes, resolve: Resolve) -> list[tuple[int, int]]:
    """§10.7: the maximizer register program."""
    k = KMAX.unpack(raw.ljust(KMAX.size, b"\0"))
    px, nc = k["width"] * k["height"], k["nclass"]
    src = resolve(k["input_buf"], 15, px * nc * 2, "input")
    block = px * min(nc, 8) * 2
    last = src + px * nc
    last -= last % block if last % block else 0
    return [(MAXR["SIZE"], nc << 24 | (px & 0xFFFFFF)), (MAXR["IN_ADDR"], src),
            (MAXR["OUT_ADDR"], resolve(k["output_buf"], 15, px, "output")),
            (MAXR["BLOCK_SIZE"], block), (MAXR["LAST_BLOCK"], (px % 128) * 2 * (nc % 8)),
            (MAXR["LAST_BLOCK_SRC"], last & 0xFFFFFFFF)]
