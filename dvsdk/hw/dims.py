"""Output sizes, tile counts and unified-buffer usage of DV700 CONV commands.

A Python transcription of the driver's size arithmetic, written from the
reference fact sheet (``dv700-interface.md``): §4.2 (convolution sizes), §4.3
(pooling sizes), §6.1 (which tile function applies to a run), §7 (``uapi/
dimensions.h``) and §3.2 (raw field bit layouts).

C integer semantics throughout, so the verdicts (does a layer fit, how many
bytes) agree bit for bit with the driver: ``/`` truncates toward zero (:func:`cdiv`;
Python's ``//`` floors), and where §7.3 says ``uint16``/``uint32`` the value wraps,
including the unsigned subtraction and division of the pool tile.

Run and command descriptors are passed as mappings (``dict``) or as objects with
attributes, holding the raw §3.2 field values (packed bitfields undecoded).  A
field that is absent reads as 0, like a zero-initialised C struct.

Bad input (negative sizes, kernel sizes outside 1..7, zero strides, a run list
shorter than ``topo`` implies) raises :class:`~dvsdk.errors.InvalidArgument`
naming the field, the value and the limit, never ``ZeroDivisionError`` or
``IndexError``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..errors import InvalidArgument
from .fields import (
    I32_MAX,
    MAX_KERNEL_SIZE,
    U16,
    U32,
    byte_pair,
    cdiv,
    ceil8,
    check_int,
    check_ints,
    conv_pads,
    divup,
    i32,
    int_field,
    kernel_xy,
    nonzero_pair,
    pool_pads,
    popcount,
    raw_field,
    run_dilation,
    run_field,
    topo_num_runs,
    u16,
    u32,
)

__all__ = [
    "MAX_KERNEL_SIZE", "MAX_NUM_RUNS", "DEFAULT_UB_SIZE", "cdiv", "divup", "ceil8", "popcount",
    "topo_num_runs", "conv_out_size", "deconv_out_size", "pool_out_size", "upsample_out_size",
    "run_output_shape", "eltwise_shape", "run_shapes", "command_output_shape",
    "run_weight_size", "conv_tiles", "lrn_tiles", "pool_tiles", "command_tiles",
    "ubuf_single_tile_usage", "ubuf_kept_bytes",
]  # fmt: skip

#: Runs per CONV command (§4.1 ``MAX_NUM_RUNS``).
MAX_NUM_RUNS = 32
#: UBUF of the ZIA-C2 board in bytes (§7.6); the default for :func:`conv_tiles`.
DEFAULT_UB_SIZE = 524288

#: Element budget of ``calc_num_tiles_pool`` (§7.2): ``131072·1024/2``.
_POOL_TILE_BUDGET = 131072 * 1024 // 2


def _out_width(w: int, k: int, pa: int, pb: int, s: int, deconv: bool) -> int:
    """``get_conv_out_width`` (§7.1), C ``int`` arithmetic, arguments already checked."""
    if deconv:
        return (pa + (w - 1) * s + 1 + pb - k) + 1
    return cdiv(pa + w + pb - k, s) + 1


# ---- §4.2 / §4.3 output sizes ----


def conv_out_size(
    in_size: int, k: int, pad_a: int, pad_b: int, stride: int, dilation: int = 1,
    deconv: bool = False,
) -> int:  # fmt: skip
    """Output length of a (dilated / de-) convolution along one axis (§4.2, §7.1).

    ``get_conv_out_width(in, k_eff, pad_a, pad_b, stride, deconv)`` with
    ``k_eff = (k-1)·dilation + 1`` (a dilation of 0 means 1, as in §4.2).  Plain
    conv: ``(pad_a + in + pad_b - k_eff) / stride + 1`` with C truncating
    division; deconv: ``pad_a + (in-1)·stride + 1 + pad_b - k_eff + 1``.  The
    result is the raw C ``int``: a value <= 0 means the window does not fit.
    """
    in_size, k, pad_a, pad_b, stride = _axis_args(in_size, k, pad_a, pad_b, stride)
    dil = max(1, check_int(dilation, "dilation"))
    return _out_width(in_size, (k - 1) * dil + 1, pad_a, pad_b, stride, bool(deconv))


def _axis_args(in_size: Any, k: Any, pad_a: Any, pad_b: Any, stride: Any) -> tuple[int, ...]:
    """Validate the per-axis arguments shared by the conv and pool size functions."""
    return (
        check_int(in_size, "in_size"), check_int(k, "k", 1, MAX_KERNEL_SIZE),
        check_int(pad_a, "pad_a"), check_int(pad_b, "pad_b"), check_int(stride, "stride", 1),
    )  # fmt: skip


def deconv_out_size(
    in_size: int, k: int, pad_a: int, pad_b: int, stride: int, dilation: int = 1
) -> int:
    """Deconvolution output length (§4.2): ``pad_a + (in-1)·stride + 1 + pad_b - k_eff + 1``.

    The pads are the FPGA pads (``k_eff - 1 - pad`` of the framework, §4.2).
    """
    return conv_out_size(in_size, k, pad_a, pad_b, stride, dilation, deconv=True)


def pool_out_size(in_size: int, k: int, pad_a: int, pad_b: int, stride: int) -> int:
    """Max/average pooling output length (§4.3): ``(pad_a + in + pad_b - k) / stride + 1``.

    C truncating division; the raw ``int`` is returned (<= 0: the window does not fit).
    """
    in_size, k, pad_a, pad_b, stride = _axis_args(in_size, k, pad_a, pad_b, stride)
    return cdiv(pad_a + in_size + pad_b - k, stride) + 1


def upsample_out_size(n: int) -> int:
    """2× nearest-neighbour upsampling (pool_enable 4, §4.3): ``2·n``."""
    return 2 * check_int(n, "n")


# ---- §7.5 output shape and weight size of one run ----


def run_output_shape(
    run_fields: Any, in_shape: tuple[int, int, int, int]
) -> tuple[tuple[int, int, int, int], int]:
    """Output shape and bytes of one run: ``get_conv_output_size_v0`` of §7.5, output part.

    ``in_shape`` is the run's input ``(w, h, z, c)``.  With conv enabled,
    ``t_w = get_conv_out_width(w, (kx-1)·dil_x + 1, pad_l, pad_r, sx, deconv)``
    (likewise ``t_h``), ``t_z = z - (pz & 0x7F) + 1``, ``t_c = m``; otherwise
    ``t = in``.  Pooling (``pool_enable & 7``): 4 and 5 double w and h, the
    others apply ``(pp_l + t_w + pp_r - pool_w) / pool_sx + 1``.  Returns
    ``((w, h, z, c), bytes)`` where ``bytes = w·h·z·c·2`` wrapped to uint32.
    Dimensions are raw C ints (<= 0 means the window does not fit).  The weight
    size of §7.5 is :func:`run_weight_size`.
    """
    w, h, z, c = check_ints(in_shape, ("w", "h", "z", "c"), "in_shape")
    conv_enable = run_field(run_fields, "conv_enable")
    if conv_enable:
        kx, ky = kernel_xy(run_fields)
        pl, pr, pt, pb = conv_pads(run_fields)
        sx, sy = nonzero_pair(run_fields, "conv_stride")
        dx, dy = run_dilation(run_fields)
        deconv = bool(conv_enable & 4)
        tw = _out_width(w, (kx - 1) * dx + 1, pl, pr, sx, deconv)
        th = _out_width(h, (ky - 1) * dy + 1, pt, pb, sy, deconv)
        tz = z - (run_field(run_fields, "pz") & 0x7F) + 1
        tc = run_field(run_fields, "m")
    else:
        tw, th, tz, tc = w, h, z, c
    pool_enable = run_field(run_fields, "pool_enable") & 7
    if pool_enable in (4, 5):
        ow, oh = 2 * tw, 2 * th
    elif pool_enable:
        pw, ph = byte_pair(run_fields, "pool_size")
        psx, psy = nonzero_pair(run_fields, "pool_stride")
        ql, qr, qt, qb = pool_pads(run_fields)
        ow = cdiv(ql + tw + qr - pw, psx) + 1
        oh = cdiv(qt + th + qb - ph, psy) + 1
    else:
        ow, oh = tw, th
    return (ow, oh, tz, tc), u32(ow * oh * tz * tc * 2)


def eltwise_shape(run_fields: Any, in_shape: tuple[int, int, int, int]
                  ) -> tuple[int, int, int, int]:
    """``(w, h, z, c)`` of the element-wise addend of a run whose input is ``in_shape``
    (§4.4): the conv's result before a max pool or an upsample (the add comes first,
    §4.1), after an average pool (that add follows the average)."""
    keep = 2 if run_field(run_fields, "pool_enable") == 2 else 0   # (2: average, §3.2)
    if isinstance(run_fields, Mapping):
        run_fields = dict(run_fields, pool_enable=keep)
    else:
        run_fields = replace(run_fields, pool_enable=keep)
    return run_output_shape(run_fields, in_shape)[0]


def run_shapes(cmd_fields: Any, runs: Sequence[Any] | None = None
               ) -> list[tuple[tuple[int, int, int, int], tuple[int, int, int, int]]]:
    """Per run of a command, its input and output ``(w, h, z, c)`` (§4.1): run 0 and every
    run after one whose ``topo`` bit is 1 read the command's input; a run whose bit is 0
    feeds its output to the next one through the unified buffer."""
    topo = int_field(cmd_fields, "topo", U32)
    first = (int_field(cmd_fields, "w"), int_field(cmd_fields, "h"),
             int_field(cmd_fields, "z") or 1, int_field(cmd_fields, "c"))
    shape, out = first, []
    for i, run in enumerate(_runs_of(cmd_fields, runs, topo_num_runs(topo))[
            : topo_num_runs(topo)]):
        o, _ = run_output_shape(run, shape)
        out.append((shape, o))
        shape = first if topo >> i & 1 else o
    return out


def command_output_shape(cmd_fields: Any, runs: Sequence[Any] | None = None
                         ) -> tuple[int, int, int]:
    """``(h, w, c)`` a command writes: the outputs of its runs with ``topo`` bit 1, appended
    along channels (§4.1; a concat when the branches agree on ``w`` and ``h``, the last
    run's ``w`` and ``h`` otherwise)."""
    topo = int_field(cmd_fields, "topo", U32)
    hw, channels = (0, 0), 0
    for i, (_, (ow, oh, _, oc)) in enumerate(run_shapes(cmd_fields, runs)):
        if topo >> i & 1:
            hw, channels = (oh, ow), channels + oc
    return hw[0], hw[1], channels


def _fp16_blocks_bytes(shape: tuple[int, int, int, int]) -> int:
    w, h, z, c = shape
    return max(w, 0) * max(h, 0) * max(z, 1) * 8 * ceil8(max(c, 0)) * 2


def ubuf_kept_bytes(cmd_fields: Any, runs: Sequence[Any] | None = None) -> int:
    """The most unified-buffer bytes a run whose output stays there holds at once: its whole
    input and its whole output, FP16 in 8-channel blocks (0 for a single run).

    A floor :func:`ubuf_single_tile_usage` does not always reach: as the C computes it, a
    deconvolution run (``ce = conv_enable & 1``) gets a strided conv's output size, 1/4 of
    a stride-2 deconv's, and an average pool only ``pool_size & 0xFF`` as its window, so a
    1x7 pool counts a 7x7 one's output.  dvsdk requires both (:func:`validate_conv`)."""
    topo = int_field(cmd_fields, "topo", U32)
    return max((_fp16_blocks_bytes(i) + _fp16_blocks_bytes(o)
                for k, (i, o) in enumerate(run_shapes(cmd_fields, runs))
                if not topo >> k & 1), default=0)


def run_weight_size(run_fields: Any, in_c: int) -> int:
    """Weight-buffer bytes of one run: the ``w_size`` of ``get_conv_output_size_v0`` (§7.5).

    0 when conv is off.  Dilated (either axis > 1): ``dilated_weight_size(in_c, m,
    kx, ky, quantized)``; otherwise ``conv_weight_size(in_c, m, kx, ky, quantized,
    depthwise, prelu)`` (both from :mod:`dvsdk.hw.weights`, §7.4), with quantized =
    ``weight_fmt & 2``, depthwise = ``conv_enable & 2``, prelu = ``actfunc == 4``.
    """
    in_c = check_int(in_c, "in_c")
    conv_enable = run_field(run_fields, "conv_enable")
    if not conv_enable:
        return 0
    from .weights import conv_weight_size, dilated_weight_size  # lazy: sibling module

    kx, ky = kernel_xy(run_fields)
    m = run_field(run_fields, "m")
    quantized = bool(run_field(run_fields, "weight_fmt") & 2)
    dx, dy = run_dilation(run_fields)
    if dx > 1 or dy > 1:
        return int(dilated_weight_size(in_c, m, kx, ky, quantized))
    depthwise = bool(conv_enable & 2)
    prelu = run_field(run_fields, "actfunc") == 4
    return int(conv_weight_size(in_c, m, kx, ky, quantized, depthwise, prelu))


# ---- §7.2 tile counts ----


def conv_tiles(
    w: int, h: int, c: int, m: int, kx: int, ky: int,
    pads: tuple[int, int, int, int] = (0, 0, 0, 0), strides: tuple[int, int] = (1, 1),
    dilation: tuple[int, int] = (1, 1), ub_size: int = DEFAULT_UB_SIZE,
    deconv: bool = False, is_conv: bool = True,
) -> tuple[int, int, int]:  # fmt: skip
    """Vertical-strip tile count of a conv or LRN run: ``calc_num_tiles_conv_lrn`` (§7.2).

    ``pads`` is (left, right, top, bottom), ``strides`` and ``dilation`` are
    (x, y); a dilation of 0 means 1.  ``ub_size`` is the UBUF size in **bytes**:
    the C callers pass ``u_kb = ub_size >> 10`` and the function uses
    ``u_kb·1024/2`` FP16 elements, so the same ``>> 10`` is done here (a UBUF
    that is not a multiple of 1 KiB is rounded down).

    Returns ``(tiles, in_bytes, out_bytes)``; ``tiles == 0`` means the run does
    not fit the UBUF however it is split.  The byte counts are those of the last
    tile count tried (0 if none was).
    """
    w, h, c, m = (check_int(v, n, 0, U16) for v, n in ((w, "w"), (h, "h"), (c, "c"), (m, "m")))
    p_x = check_int(kx, "kx", 1, MAX_KERNEL_SIZE)
    p_y = check_int(ky, "ky", 1, MAX_KERNEL_SIZE)
    pl, pr, pt, pb = check_ints(pads, ("pad_l", "pad_r", "pad_t", "pad_b"), "pads")
    sx, sy = check_ints(strides, ("stride_x", "stride_y"), "strides", lo=1)
    dx, dy = check_ints(dilation, ("dilation_x", "dilation_y"), "dilation")
    ub_size = check_int(ub_size, "ub_size", 0, I32_MAX)

    u = (ub_size >> 10) * 1024 // 2
    c_blocks = ceil8(c)
    is_dil = dx > 1 or dy > 1
    if not is_dil:
        p_x = p_y = max(p_x, p_y) | 1
    p = 1 if is_dil else p_x
    k_x = (p_x - 1) * dx + 1 if is_dil else p
    k_y = (p_y - 1) * dy + 1 if is_dil else p

    if is_conv and p <= 7 and not is_dil and c <= 8 and m <= 8:
        return 1, 0, 0  # no UBUF needed at all
    no_ob = (
        bool(is_conv)
        and not is_dil
        and ((p <= 7 and c <= 8) or (7 < p <= 11 and c <= 4) or (p > 11 and c == 1))
    )
    oh = _out_width(h, k_y, pt, pb, sy, bool(deconv))  # does not depend on the tile
    ts = os_ = 0
    t = 1
    while True:
        tw = divup(w, t) + k_x - 1
        if tw < k_x or t > w:
            t = 0  # does not fit
            break
        ow = _out_width(tw, k_x, pl, pr, sx, bool(deconv))
        os_ = ow * oh * min(m, 8)
        b128 = ceil8(tw * h * min(c, 8))
        b128 += (2 - b128) & 15
        t128 = b128 * c_blocks
        t128 += (-t128) & 15
        ts = t128 * 8
        if ts + (0 if no_ob else os_) <= u:
            break
        t += 1
    return t, 2 * ts, 0 if no_ob else 2 * os_


def lrn_tiles(w: int, h: int, c: int, ub_size: int = DEFAULT_UB_SIZE) -> tuple[int, int, int]:
    """LRN tile count: ``calc_num_tiles_lrn`` (§7.2), i.e. :func:`conv_tiles` with m = c,
    a 1×1 kernel, no pads, stride 1 and ``is_conv`` false.  ``ub_size`` in bytes.
    """
    return conv_tiles(w, h, c, c, 1, 1, (0, 0, 0, 0), (1, 1), (1, 1), ub_size, False, False)


def pool_tiles(w: int, h: int, c: int) -> tuple[int, int, int]:
    """Pooling tile count: ``calc_num_tiles_pool`` (§7.2), as ``(tiles, 0, 0)``.

    The first ``t`` in ``1..w`` with ``w·h·min(c, 8) / t <= 131072·1024/2`` (a
    hard-coded budget, not the real UBUF), else 0.  In practice always 1.
    """
    w, h, c = (check_int(v, n, 0, U16) for v, n in ((w, "w"), (h, "h"), (c, "c")))
    total = w * h * min(c, 8)
    for t in range(1, w + 1):
        if total // t <= _POOL_TILE_BUDGET:
            return t, 0, 0
    return 0, 0, 0


def _runs_of(cmd_fields: Any, runs: Sequence[Any] | None, needed: int) -> Sequence[Any]:
    """The run list: ``runs``, else ``cmd_fields.runs`` / ``.run``; at least ``needed`` long."""
    if runs is None:
        for name in ("runs", "run"):
            if runs is None:
                runs = raw_field(cmd_fields, name)
    try:
        count = len(runs)  # type: ignore[arg-type]
    except TypeError:
        count = -1
    if count < needed:
        raise InvalidArgument(
            "fewer run descriptors than topo implies", field="runs", value=count, limit=needed
        )
    return runs  # type: ignore[return-value]


def command_tiles(cmd_fields: Any, runs: Sequence[Any] | None, ub_size: int) -> int:
    """Tile count of a CONV command: ``get_conv_tiles_v0`` (§7.2, used by §6.7 step 5).

    More than one run → 1 (multi-run commands are single-tile by construction).
    Otherwise from ``runs[0]``: LRN (``lrn & 1``) → :func:`lrn_tiles`; not a 2-D
    conv (conv off, or depthwise) → :func:`pool_tiles` if pooling else 1; else
    :func:`conv_tiles` with the decoded kernel, pads (7/8/7/8-bit masks),
    strides and dilation.  ``cmd_fields`` carries w, h, c and topo; ``runs`` may
    be None to read ``cmd_fields.runs``.  ``ub_size`` in bytes.
    """
    topo = int_field(cmd_fields, "topo", U32)
    if topo_num_runs(topo) > 1:
        return 1
    run = _runs_of(cmd_fields, runs, 1)[0]
    w, h, c = (int_field(cmd_fields, n) for n in ("w", "h", "c"))
    ub_size = check_int(ub_size, "ub_size", 0, I32_MAX)
    if run_field(run, "lrn") & 1:
        return lrn_tiles(w, h, c, ub_size)[0]
    conv_enable = run_field(run, "conv_enable")
    if conv_enable == 0 or conv_enable & 2:
        return pool_tiles(w, h, c)[0] if run_field(run, "pool_enable") else 1
    kx, ky = kernel_xy(run)
    m, pads, strides = run_field(run, "m"), conv_pads(run), nonzero_pair(run, "conv_stride")
    dil, deconv = run_dilation(run), bool(conv_enable & 4)
    return conv_tiles(w, h, c, m, kx, ky, pads, strides, dil, ub_size, deconv)[0]


# ---- §7.3 multi-run UBUF peak ----


def _footprint(pixels: int, ch: int) -> tuple[int, int, int]:
    """(x128, xs128, bytes) of a ``pixels × ch`` tile (§7.3 steps 11 and 13), uint32.

    ``x128``: one 8-channel block in 16-byte units, forced to ``≡ 2 (mod 16)``;
    ``xs128``: all blocks, rounded up to a multiple of 16; bytes = ``16·xs128``.
    """
    x16 = u32(pixels * min(ch, 8))
    x128 = ceil8(x16)
    x128 = u32(x128 + ((2 - x128) & 15))
    xs128 = u32(x128 * ceil8(ch))
    xs128 = u32(xs128 + ((-xs128) & 15))
    return x128, xs128, u32(16 * xs128)


def ubuf_single_tile_usage(cmd_fields: Any, runs: Sequence[Any] | None, ub_size: int) -> int:
    """Peak UBUF bytes of a multi-run command: ``ubuf_get_single_tile_usage`` (§7.3).

    Reproduces the C exactly: pads and external sizes wrap as ``uint16``, tile
    sizes as ``uint32`` (including the unsigned subtraction/division of the pool
    tile), average pooling is rewritten as a conv, a conv-less last output
    branch works in place, a pure chain (one output run) uses ping-pong
    offsets, output runs count one 8-channel block, and the peak is compared as
    a signed ``int``.  ``topo == 0`` → 0.

    Where the C would divide by zero, :class:`InvalidArgument` is raised: a zero
    byte in ``pool_stride`` of any run (the "zero pool-stride trap", §15.4; use
    0x0101 on runs without pooling) or in ``conv_stride`` of a conv run.
    """
    topo = int_field(cmd_fields, "topo", U32)
    ub_size = check_int(ub_size, "ub_size", 0, U32)
    if topo == 0:
        return 0
    n_runs = topo_num_runs(topo)
    node_w = popcount(topo)
    runs = _runs_of(cmd_fields, runs, n_runs)
    cmd_w, cmd_h, cmd_c = (int_field(cmd_fields, n) for n in ("w", "h", "c"))

    best, run_w, is_input = 0, 0, True
    prev_dims = (0, 0, 0)  # (ow, oh, m) of the previous UBUF-resident run
    prev_foot = (0, 0, 0, 0)  # (ofm_off, o128, os128, out_size) of that run
    for r in range(n_runs):
        run = runs[r]
        is_out = bool(topo & 1)
        W, H, C = (cmd_w, cmd_h, cmd_c) if is_input else prev_dims  # noqa: N806
        m = run_field(run, "m")
        pool_enable = run_field(run, "pool_enable")
        ce = run_field(run, "conv_enable") & 1
        ups = pool_enable == 4
        pmax = bool(pool_enable & 1) or ups
        pavg = pool_enable == 2

        # Step 3: average pooling runs on the conv engine.
        if pavg:  # pool_stride becomes the conv stride, pool_size & 0xFF the kernel
            conv_pad, pool_pad = run_field(run, "pool_pad"), 0
            pool_w, pool_h, psw, psh = 0, 0, 1, 1
            sw, sh = nonzero_pair(run, "pool_stride")
            p, ce = run_field(run, "pool_size") & 0xFF, 1
        else:
            conv_pad = run_field(run, "conv_pad")
            pool_pad = run_field(run, "pool_pad")
            psw, psh = nonzero_pair(run, "pool_stride")  # divides even without pooling
            p = run_field(run, "p")
            pool_w, pool_h = byte_pair(run, "pool_size")
            # A conv run divides by its stride; a conv-less one resets it to 1 below.
            sw, sh = (nonzero_pair if ce else byte_pair)(run, "conv_stride")

        # Step 4: pads, kernel, the odd-square window P and its extra pads.
        pw0, pw1 = conv_pad & 0x7F, (conv_pad >> 8) & 0xFF
        ph0, ph1 = (conv_pad >> 16) & 0x7F, (conv_pad >> 24) & 0xFF
        px, py = p & 0xFF, ((p >> 8) & 0xFF) or p & 0xFF
        P = max(px, py) | 1  # noqa: N806
        pw1, ph0 = u16(pw1 + P - px), u16(ph0 + P - py)

        # Step 5: conv-less runs have no pads; max pool/upsample pads scale by the stride.
        if not pavg:
            if not ce:
                pw0 = pw1 = ph0 = ph1 = 0
                sw = sh = 1
            if pmax:
                pw0 = u16(pw0 + sw * (pool_pad & 0xFF))
                pw1 = u16(pw1 + sw * ((pool_pad >> 8) & 0xFF))
                ph0 = u16(ph0 + sh * ((pool_pad >> 16) & 0xFF))
                ph1 = u16(ph1 + sh * ((pool_pad >> 24) & 0xFF))

        # Step 6: first-line / first-column zero-padding flags (only shape tile_in).
        half = P >> 1
        fflzp = px == py and sw == 1 and bool(ce) and pw0 != 0
        fftzp = px == py and sh == 1 and bool(ce) and ph0 >= half

        # Step 8: external output dims, computed in C int and stored as uint16 (the
        # operands are uint16, so they promote to signed int), kept for the next run.
        if ce:
            ow = u16(cdiv(pw0 + W + pw1 - P, sw) + 1)
            oh = u16(cdiv(ph0 + H + ph1 - P, sh) + 1)
        else:
            ow = u16(pw0 + W + pw1)
            oh = u16(ph0 + H + ph1)
        if pmax:
            if ups:
                ow, oh = u16(2 * ow), u16(2 * oh)
            else:
                ow = u16(cdiv(ow - pool_w, psw) + 1)
                oh = u16(cdiv(oh - pool_h, psh) + 1)

        # Step 9: the single tile, uint32.  [AMBIG] core_w/core_h are modelled as
        # uint16 like the pads they are summed from.
        core_w = u16(pw0 + W + pw1)
        core_h = u16(ph0 + H + ph1)
        tile_in_x = u32(H * W)
        tile_in = u32((core_h - (half if fftzp else 0)) * (core_w - (half if fflzp else 0)))
        if ce:
            tow = u32(cdiv(core_w - P, sw) + 1)
            toh = u32(cdiv(core_h - P, sh) + 1)
            tile_out = u32(tow * toh)
        else:
            tow, toh, tile_out = core_w, core_h, tile_in

        # Step 10: pool tile, unsigned 32-bit subtraction and division.
        if ups:
            pool_tile = u32(u32(2 * tow) * u32(2 * toh))
        else:
            ptw = u32(u32(tow - pool_w) // psw + 1)
            pth = u32(u32(toh - pool_h) // psh + 1)
            pool_tile = u32(ptw * pth)

        # Step 11: input footprint (or the previous UBUF run's output footprint).
        if is_input:
            i128, is128, in_size = _footprint(tile_in_x, C)
            ifm_off = 0
        else:
            ifm_off, i128, is128, in_size = prev_foot

        # Step 12: a conv-less last output branch works in place.
        in_place = run_w == node_w - 1 and ce == 0
        ofm_off = u32(ifm_off + (0 if in_place else in_size))

        # Step 13: output footprint.
        o128, os128, out_size = _footprint(tile_out if ce else pool_tile, m)
        slot = 16 * (o128 if is_out else os128)

        # Step 14: ping-pong in a pure chain (kept for faithfulness: with node_w == 1
        # step 16 uses in_size, so these offsets never reach the result).
        if node_w == 1:
            if r & 1:
                ofm_off = 0
            else:
                ifm_off = 0
                ofm_off = u32(ub_size - slot)

        # Step 15: remember this run's output for the next one.
        if not is_out:
            prev_dims = (ow, oh, m)
            prev_foot = (ofm_off, o128, os128, out_size)

        # Steps 16-17: the peak, compared as a signed int.
        peak = i32((in_size if node_w == 1 else ofm_off) + slot)
        best = max(best, peak)
        topo >>= 1
        if is_out:
            run_w += 1
        is_input = is_out
    return best
