"""IPU and maximizer arithmetic of the DV700 simulator (reference §9).

Pure numpy functions: the command processor reads the raw buffers, calls these
and writes the results back.  The maximizer is tested bit-exactly by DMP
(§12); the IPU has no test and only its documented intent is implemented
(§9.1), with every unspecified detail chosen and marked [AMBIG] below.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import InvalidArgument
from ..hw.fp16 import fp24

__all__ = [
    "maximizer",
    "fp24",
    "ipu_render",
    "FMT_RGBA8888",
    "FMT_RGB888",
    "FMT_RGBFP16",
    "FMT_LUT",
    "CNV_SUB",
    "CNV_DIV_255",
    "PIXEL_BYTES",
]

FMT_RGBA8888 = 0
FMT_RGB888 = 1
FMT_RGBFP16 = 2
FMT_LUT = 7
CNV_SUB = 0
CNV_DIV_255 = 1

#: Bytes per pixel of each format (§6.5).
PIXEL_BYTES = {FMT_RGBA8888: 4, FMT_RGB888: 3, FMT_RGBFP16: 6, FMT_LUT: 1}


# ---------------------------------------------------------------------------
# maximizer (§9.2)


def maximizer(scores_hwc: np.ndarray, nclass: int) -> np.ndarray:
    """Per-pixel argmax over classes (§9.2).

    Args:
        scores_hwc: ``(H, W, nclass)`` scores (FP16 values; anything else is
            rounded to FP16 first, the comparison is done in FP16).
        nclass: number of classes, 1..255 (libdmpdv requires ≥ 2, §6.6; that
            check belongs to the validator).

    Returns:
        ``uint8 (W*H,)`` class indices stored x-major: ``out[x*H + y]``.

    Classes are scanned in order with a strict ``>``, so among equal maxima the
    lowest index wins (+inf ties included).  [AMBIG] NaN handling is unknown; we
    choose "NaN never wins": a NaN score never replaces the running maximum and
    a NaN running maximum (class 0) is replaced by the first non-NaN score.  A
    pixel whose scores are all NaN gets 0.
    """
    nclass = int(nclass)
    if not 1 <= nclass <= 255:
        raise InvalidArgument("maximizer class count out of range", field="nclass",
                              value=nclass, limit="1..255")
    s = np.asarray(scores_hwc)
    if s.ndim != 3 or s.shape[2] != nclass or s.shape[0] < 1 or s.shape[1] < 1:
        raise InvalidArgument("scores must be (H, W, nclass)", field="scores",
                              value=s.shape, limit=f"(H, W, {nclass})")
    with np.errstate(over="ignore"):
        s16 = s.astype(np.float16)
    best = s16[:, :, 0].copy()
    idx = np.zeros(best.shape, np.uint8)
    best_nan = np.isnan(best)
    for k in range(1, nclass):  # loop over classes; each step is vectorized over pixels
        cand = s16[:, :, k]
        upd = cand > best
        if best_nan.any():
            upd |= best_nan & ~np.isnan(cand)
        best = np.where(upd, cand, best)
        idx[upd] = k
        best_nan &= ~upd
    return np.ascontiguousarray(idx.T).reshape(-1)


# ---------------------------------------------------------------------------
# FP24 (§9.1)


# ---------------------------------------------------------------------------
# IPU render (§9.1)


def _check_fmt(fmt: int, allowed: Sequence[int], field: str) -> int:
    fmt = int(fmt)
    if fmt not in allowed:
        raise InvalidArgument("unsupported IPU pixel format", field=field, value=fmt,
                              limit=tuple(allowed))
    return fmt


def _pixels(a: np.ndarray, fmt: int, field: str) -> np.ndarray:
    arr = np.asarray(a)
    if arr.dtype != np.uint8:
        raise InvalidArgument("IPU images are raw uint8 pixel arrays", field=field,
                              value=str(arr.dtype), limit="uint8")
    bpp = PIXEL_BYTES[fmt]
    if arr.ndim == 2 and bpp == 1:
        arr = arr[:, :, None]
    if arr.ndim != 3 or arr.shape[2] != bpp or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise InvalidArgument("image must be (H, W, bytes_per_pixel)", field=field,
                              value=arr.shape, limit=f"(H, W, {bpp})")
    return arr


def check_swizzle(fmt: int, swizzle: Sequence[int]) -> None:
    """InvalidArgument unless ``swizzle`` is valid for the texture format (§6.5): r, g, b
    distinct byte indices of a pixel, and for 4-byte pixels a permutation of 0..3."""
    ridx, gidx, bidx, aidx = (int(v) for v in swizzle)
    nbytes = 3 if fmt == FMT_RGB888 else 4
    rgb = (ridx, gidx, bidx)
    if min(rgb) < 0 or max(rgb) >= nbytes or len(set(rgb)) != 3:
        raise InvalidArgument("swizzle r/g/b indices must be distinct byte indices",
                              field="swizzle", value=tuple(swizzle), limit=f"0..{nbytes - 1}")
    if nbytes == 4 and (not 0 <= aidx <= 3 or len({ridx, gidx, bidx, aidx}) != 4):
        raise InvalidArgument("swizzle indices must be a permutation of 0..3",
                              field="swizzle", value=tuple(swizzle), limit="0..3")


def _decode_texture(tex: np.ndarray, fmt: int, lut: np.ndarray | Sequence[int] | None,
                    swizzle: Sequence[int]) -> np.ndarray:
    """Raw texels ``(H, W, bpp)`` → ``(H, W, 4)`` int32 RGBA after palette lookup and
    swizzle (texel by texel: the caller may pass only the texels it samples)."""
    check_swizzle(fmt, swizzle)
    if fmt == FMT_LUT:
        if lut is None:
            raise InvalidArgument("LUT texture needs a palette", field="lut", value=None)
        pal = np.asarray(lut, dtype=np.uint32).reshape(-1)
        if not 1 <= pal.shape[0] <= 256:
            raise InvalidArgument("palette size out of range", field="lut", value=pal.shape[0],
                                  limit="1..256")
        full = np.zeros(256, np.uint32)  # [AMBIG] indices past the palette read colour 0
        full[: pal.shape[0]] = pal
        words = full[tex[:, :, 0]]
        src = np.stack([(words >> (8 * i)) & 0xFF for i in range(4)], axis=-1)
    else:
        src = tex
    src = src.astype(np.int32)
    ridx, gidx, bidx, aidx = (int(v) for v in swizzle)
    if src.shape[2] == 4:
        alpha = src[:, :, aidx]
    else:  # RGB888: aidx unchecked (§6.5); [AMBIG] alpha is opaque
        alpha = np.full(src.shape[:2], 255, np.int32)
    return np.stack([src[:, :, ridx], src[:, :, gidx], src[:, :, bidx], alpha], axis=-1)


def _sample(raw: np.ndarray, fmt: int, lut: np.ndarray | Sequence[int] | None,
            swizzle: Sequence[int], rect_w: int, rect_h: int, rows: tuple[int, int],
            bilinear: bool) -> np.ndarray:
    """Output rows ``rows = (a, b)`` of the raw ``(th, tw, bpp)`` texture resampled to
    ``(rect_h, rect_w)``: ``(b - a, rect_w, 4)`` int32 RGBA.  Texels are gathered raw and
    decoded after, so the memory follows the band of rows, not the texture."""
    th, tw = raw.shape[:2]
    a, b = rows

    def texels(ys: np.ndarray, xs: np.ndarray) -> np.ndarray:
        return _decode_texture(raw[ys[:, None], xs[None, :]], fmt, lut, swizzle)

    if not bilinear:
        # nearest: the texel containing the output pixel centre, in exact integers
        ys = ((2 * np.arange(a, b) + 1) * th) // (2 * rect_h)
        xs = ((2 * np.arange(rect_w) + 1) * tw) // (2 * rect_w)
        return texels(ys, xs)
    # bilinear between texel centres, clamp to edge
    u = (np.arange(rect_w, dtype=np.float32) + 0.5) * np.float32(tw / rect_w) - 0.5
    v = (np.arange(a, b, dtype=np.float32) + 0.5) * np.float32(th / rect_h) - 0.5
    u = np.clip(u, 0, tw - 1)
    v = np.clip(v, 0, th - 1)
    x0 = np.floor(u).astype(np.int64)
    y0 = np.floor(v).astype(np.int64)
    x1 = np.minimum(x0 + 1, tw - 1)
    y1 = np.minimum(y0 + 1, th - 1)
    fx = (u - x0).astype(np.float32)[None, :, None]
    fy = (v - y0).astype(np.float32)[:, None, None]
    top = texels(y0, x0).astype(np.float32) * (1 - fx) + \
        texels(y0, x1).astype(np.float32) * fx
    bot = texels(y1, x0).astype(np.float32) * (1 - fx) + \
        texels(y1, x1).astype(np.float32) * fx
    res = top * (1 - fy) + bot * fy
    return np.clip(np.floor(res + 0.5), 0, 255).astype(np.int32)


def ipu_render(
    tex: np.ndarray | None,
    fmt_tex: int,
    lut: np.ndarray | Sequence[int] | None,
    rect_w: int,
    rect_h: int,
    *,
    transpose: bool = False,
    bilinear: bool = False,
    swizzle: Sequence[int] = (0, 1, 2, 3),
    fmt_wr: int = FMT_RGBA8888,
    cnv_type: int = CNV_DIV_255,
    cnv_param: Sequence[int] = (0, 0, 0),
    rd: np.ndarray | None = None,
    fmt_rd: int | None = None,
    alpha: int = 255,
    use_const_alpha: bool = False,
    rows: tuple[int, int] | None = None,
) -> np.ndarray:
    """Render one IPU command's rectangle (§9.1, register programming §10.6).

    Args:
        tex: raw texture ``(tex_h, tex_w, bpp)`` uint8 (bpp 4 RGBA8888, 3 RGB888,
            1 LUT; a 2-D array is accepted for LUT), or None when ``use_tex`` is 0.
        fmt_tex: 0 RGBA8888, 1 RGB888, 7 LUT (8-bit index into ``lut``).
        lut: palette of 32-bit colours (uint32 words; byte i is ``(w >> 8i) & 0xFF``,
            i.e. the little-endian memory bytes); needed for LUT only.
        rect_w, rect_h: output rectangle size.
        transpose: exchange the texture's x and y axes before sampling.
        bilinear: ``blf``; nearest otherwise.
        swizzle: ``(ridx, gidx, bidx, aidx)``: the byte index of each channel in a
            source pixel (R = pixel[ridx], ...).  aidx is ignored for RGB888.
        fmt_wr: output 0 RGBA8888, 1 RGB888, 2 RGBFP16.
        cnv_type, cnv_param: u8 → FP16 conversion for RGBFP16 output:
            0 SUB ``F16(v - param[ch])`` (param[0] = R, [1] = G, [2] = B);
            1 DIV_255 ``F16(v / 255)``.  Ignored for 8-bit outputs.
        rd, fmt_rd: optional source image ``(rect_h, rect_w, 3|4)`` (``use_rd``).
        alpha, use_const_alpha: blend with constant ``alpha`` or texture alpha.
        rows: render only output rows ``[a, b)`` (default all); ``rd`` then holds just
            those rows.  The simulator renders bands of rows to bound its memory.

    Returns:
        ``uint8 (rows, rect_w, 4|3)`` for RGBA8888/RGB888 (bytes R, G, B[, A]),
        or ``float16 (rows, rect_w, 3)`` (R, G, B) for RGBFP16.  Strides are
        the caller's business (it writes the rows).

    [AMBIG] choices (the hardware behaviour is not specified):

    * Sampling: the texture (after transpose) is scaled to cover the rectangle
      (scale = 1/tex_size, §9.1) with sample positions at pixel centres:
      output pixel X samples texture coordinate ``(X + 0.5)·tw/rw``.  Nearest
      takes the texel containing that point (exact integer arithmetic, so equal
      sizes give the identity); bilinear interpolates between texel centres
      (``(X + 0.5)·tw/rw − 0.5``), clamps at the edges and rounds half up to u8.
    * The origin flag (reg 0x15C = 1, "lower-left") applies to texture and
      output alike, so rows are not flipped: texture row 0 lands on output row 0.
    * RGB888 texture or rd pixels are opaque (alpha 255).  rd bytes are in
      R, G, B[, A] order (no swizzle applies to rd).  LUT indices beyond the
      palette read colour 0.
    * Blend (use_rd and use_tex): per channel, including alpha,
      ``out = (tex·a + rd·(255 − a) + 127) // 255`` with ``a = alpha`` if
      use_const_alpha else the texture alpha.  Without a texture the output is rd.
    * Output byte/channel order is R, G, B[, A]; RGBFP16 is computed in float32
      and rounded once to FP16.
    """
    rect_w, rect_h = int(rect_w), int(rect_h)
    for name, v in (("rect_width", rect_w), ("rect_height", rect_h)):
        if not 1 <= v <= 4094:
            raise InvalidArgument("IPU rectangle size out of range", field=name, value=v,
                                  limit="1..4094")
    fmt_wr = _check_fmt(fmt_wr, (FMT_RGBA8888, FMT_RGB888, FMT_RGBFP16), "fmt_wr")
    if tex is None and rd is None:
        raise InvalidArgument("IPU needs a texture or an rd image", field="use_tex", value=0)
    a, b = (0, rect_h) if rows is None else (int(rows[0]), int(rows[1]))
    if not 0 <= a < b <= rect_h:
        raise InvalidArgument("rows outside the rectangle", field="rows", value=rows,
                              limit=f"0 <= a < b <= {rect_h}")

    src: np.ndarray | None = None
    if tex is not None:
        fmt_tex = _check_fmt(fmt_tex, (FMT_RGBA8888, FMT_RGB888, FMT_LUT), "fmt_tex")
        t = _pixels(tex, fmt_tex, "tex")
        if transpose:
            t = t.transpose(1, 0, 2)
        src = _sample(t, fmt_tex, lut, swizzle, rect_w, rect_h, (a, b), bool(bilinear))

    if rd is not None:
        if fmt_rd is None:
            raise InvalidArgument("rd image needs fmt_rd", field="fmt_rd", value=None)
        fmt_rd = _check_fmt(fmt_rd, (FMT_RGBA8888, FMT_RGB888), "fmt_rd")
        r = _pixels(rd, fmt_rd, "rd")
        if r.shape[:2] != (b - a, rect_w):
            raise InvalidArgument("rd image must have the rectangle's size", field="rd",
                                  value=r.shape[:2], limit=(b - a, rect_w))
        r = r.astype(np.int32)
        if fmt_rd == FMT_RGB888:
            r = np.concatenate([r, np.full((b - a, rect_w, 1), 255, np.int32)], axis=2)
        if src is None:
            src = r
        else:
            a_int = int(alpha)
            if not 0 <= a_int <= 255:
                raise InvalidArgument("alpha out of range", field="alpha", value=a_int,
                                      limit="0..255")
            a = np.int32(a_int) if use_const_alpha else src[:, :, 3:4]
            src = (src * a + r * (255 - a) + 127) // 255

    assert src is not None
    if fmt_wr == FMT_RGBA8888:
        return src.astype(np.uint8)
    if fmt_wr == FMT_RGB888:
        return src[:, :, :3].astype(np.uint8)
    rgb = src[:, :, :3].astype(np.float32)
    if int(cnv_type) == CNV_SUB:
        p = np.asarray(cnv_param, dtype=np.float32).reshape(-1)
        if p.shape[0] != 3 or p.min() < 0 or p.max() > 255:
            raise InvalidArgument("SUB needs three u8 parameters", field="cnv_param",
                                  value=tuple(cnv_param), limit="3 × 0..255")
        out = rgb - p
    elif int(cnv_type) == CNV_DIV_255:
        out = rgb / np.float32(255.0)
    else:
        raise InvalidArgument("unknown u8→FP16 conversion", field="cnv_type", value=cnv_type,
                              limit=(CNV_SUB, CNV_DIV_255))
    return out.astype(np.float16)
