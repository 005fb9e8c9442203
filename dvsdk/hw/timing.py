"""Cycle-approximate timing model of the DV700 (reference §11, §10.10).

The simulator times every command with it (``dvsdk.sim``) and the compiler weighs its
schedules with it (:mod:`dvsdk.compiler.bands`): one model, below both.

The sources give no cycle model, throughput figure or MAC-array geometry beyond
the facts in §11 ([AMBIG]), so this module is a *model*, documented here:

* **Compute.**  The MAC array has ``mac_num`` MACs arranged as
  ``lanes = mac_num / 72`` weight blocks of 72 slots (ZIA-C2: 576 = 8 × 72).
  Each cycle, one 72-slot weight block of each of ``lanes`` output channels is
  applied to one output pixel.  A block holds 64 input channels for a 1×1
  kernel, 8 for 3×3, 2 for 5×5 and 1 for 7×7 (the weight packing, §8.1/§7.4);
  even/non-square kernels run in the ``P = max(kx, ky) | 1`` window (§4.2).
  So a conv run costs ``out_pixels × ceil(M / lanes) × blocks(C, P)`` cycles,
  with ``blocks = ceil(C/64), ceil(C/8), ceil(C/2), C`` for P = 1, 3, 5, 7 and
  1 for depthwise.  Dilated convs run as ``kx·ky`` passes of a 1×1 conv (the
  dilated packer, §8.2).  Deconv counts the stride-1 correlation over the
  zero-inserted input, i.e. every output pixel of the final output.
* **Non-MAC runs** (pool, upsample, LRN, eltwise-only): the data path moves one
  16-byte beat = 8 FP16 channels per cycle, so they cost
  ``out_pixels × ceil(M/8) × k`` cycles, with k = ``ceil(kx·ky/9)`` for pooling
  (a 3×3 window per cycle), 2 for LRN (a square-sum pass and a scale pass) and
  1 for upsample and eltwise.  These constants are our choice [AMBIG].
* **DMA.**  Input, weight and output streams move over a ``bus_bytes_per_cycle``
  (16-byte, §11) bus: ``dma = Σ ceil(bytes / 16)`` per stream.  The byte counts
  are the bytes the run actually moves (see :func:`conv_run_bytes` for a helper
  that accounts for tile overlap and weight re-reads).
* **Overlap.**  Compute and DMA are double-buffered and overlap completely
  within a run: ``total = max(compute, dma) + run_overhead + tiles·tile_overhead``.
  A command adds ``command_overhead`` (see :func:`command_cycles`).

Default overheads are placeholders of plausible magnitude ([AMBIG]); they are
parameters so a calibration against real exec times (§10.5) can replace them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InvalidArgument
from . import dims
from .fields import raw_field
from .spec import SPEC

__all__ = [
    "TimingParams",
    "DEFAULT_PARAMS",
    "RunTiming",
    "KINDS",
    "WEIGHT_BLOCK_SLOTS",
    "blocks_per_output_channel",
    "conv_run_cycles",
    "conv_run_bytes",
    "command_cycles",
    "run_cycles",
    "mac_bound_cycles",
    "bandwidth_bound_cycles",
    "cycles_to_us",
    "maximizer_cycles",
    "ipu_cycles",
    "byte_counter_values",
    "COUNTER_SLOT_INPUT",
    "COUNTER_SLOT_WEIGHTS",
    "COUNTER_SLOT_OUTPUT",
]

#: Slots of one weight block (the 12×6 block of §11).
WEIGHT_BLOCK_SLOTS = 72

#: Run kinds understood by :func:`conv_run_cycles`.
KINDS = ("conv", "depthwise", "deconv", "dilated", "pool", "upsample", "lrn", "eltwise")
_MAC_KINDS = ("conv", "depthwise", "deconv", "dilated")
_NON_MAC_FACTOR = {"upsample": 1, "lrn": 2, "eltwise": 1}

_POOL_UPSAMPLE = int(SPEC.enum("pool_enable").upsample)

#: Channels per 16-byte beat (8 × FP16), the unit of the non-MAC data path.
_BEAT_CHANNELS = 8


@dataclass(frozen=True)
class TimingParams:
    """Hardware parameters with ZIA-C2 defaults (§11).

    ``clock_mhz``: conv PL clock (30–400 MHz settable); ``mac_num``: MACs, a
    multiple of 72; ``ub_size``: UBUF bytes; ``bus_bytes_per_cycle``: 16
    (128-bit beats).  Overheads are in cycles: per command (config image load,
    kick, completion interrupt), per run (run record decode, pipeline fill) and
    per tile (strip setup).
    """

    clock_mhz: float = 300.0
    mac_num: int = 576
    ub_size: int = 524288
    bus_bytes_per_cycle: int = 16
    command_overhead: int = 1500
    run_overhead: int = 200
    tile_overhead: int = 50

    def __post_init__(self) -> None:
        if not self.clock_mhz > 0:
            raise InvalidArgument("clock must be positive", field="clock_mhz",
                                  value=self.clock_mhz, limit=">0")
        if self.mac_num < WEIGHT_BLOCK_SLOTS or self.mac_num % WEIGHT_BLOCK_SLOTS:
            raise InvalidArgument("mac_num must be a positive multiple of 72", field="mac_num",
                                  value=self.mac_num, limit="72·n")
        if self.bus_bytes_per_cycle < 1:
            raise InvalidArgument("bus width must be positive", field="bus_bytes_per_cycle",
                                  value=self.bus_bytes_per_cycle, limit=">=1")
        if self.ub_size < 0:
            raise InvalidArgument("UBUF size must be non-negative", field="ub_size",
                                  value=self.ub_size, limit=">=0")
        for name in ("command_overhead", "run_overhead", "tile_overhead"):
            if getattr(self, name) < 0:
                raise InvalidArgument("overhead must be non-negative", field=name,
                                      value=getattr(self, name), limit=">=0")

    @property
    def lanes(self) -> int:
        """Output channels computed in parallel: ``mac_num / 72`` (8 on ZIA-C2)."""
        return self.mac_num // WEIGHT_BLOCK_SLOTS


DEFAULT_PARAMS = TimingParams()


@dataclass(frozen=True)
class RunTiming:
    """Cycle breakdown of one run (all values in conv-clock cycles)."""

    compute_cycles: int
    dma_cycles: int
    overhead_cycles: int
    total_cycles: int
    macs: int

    @property
    def bound(self) -> str:
        """``"compute"`` or ``"dma"``: whichever dominates the overlapped part."""
        return "compute" if self.compute_cycles >= self.dma_cycles else "dma"


def _nonneg(**kw: int) -> None:
    for name, v in kw.items():
        if int(v) < 0:
            raise InvalidArgument("value must be non-negative", field=name, value=v, limit=">=0")


def _positive(**kw: int) -> None:
    for name, v in kw.items():
        if int(v) < 1:
            raise InvalidArgument("value must be positive", field=name, value=v, limit=">=1")


def blocks_per_output_channel(c: int, kx: int, ky: int, depthwise: bool = False) -> int:
    """72-slot weight blocks per output channel (§7.4, §11).

    ``P = max(kx, ky) | 1``; ceil(C/64) for P = 1, ceil(C/8) for 3, ceil(C/2)
    for 5, C for 7; 1 for depthwise.
    """
    _positive(c=c, kx=kx, ky=ky)
    if depthwise:
        return 1
    p = max(kx, ky) | 1
    per_block = {1: 64, 3: 8, 5: 2, 7: 1}.get(p)
    if per_block is None:
        raise InvalidArgument("kernel size out of range", field="p", value=(kx, ky),
                              limit="1..7")
    return -(-c // per_block)


def mac_bound_cycles(macs: int, params: TimingParams = DEFAULT_PARAMS) -> int:
    """Lower bound ``ceil(macs / mac_num)``: every MAC busy every cycle."""
    _nonneg(macs=macs)
    return -(-int(macs) // params.mac_num)


def bandwidth_bound_cycles(nbytes: int, params: TimingParams = DEFAULT_PARAMS) -> int:
    """``ceil(nbytes / bus_bytes_per_cycle)``: cycles to move nbytes over the bus."""
    _nonneg(nbytes=nbytes)
    return -(-int(nbytes) // params.bus_bytes_per_cycle)


def conv_run_cycles(
    out_w: int,
    out_h: int,
    m: int,
    c: int,
    kx: int,
    ky: int,
    kind: str,
    tiles: int,
    in_bytes: int,
    out_bytes: int,
    weight_bytes: int,
    params: TimingParams = DEFAULT_PARAMS,
) -> RunTiming:
    """Cycles of one run (model in the module docstring).

    Args:
        out_w, out_h: output extent of the MAC stage (for deconv the final
            output; for pool/upsample/LRN/eltwise runs the run's output).
        m, c: output and input channels (depthwise: m == c).
        kx, ky: kernel (or pool window) size; for "dilated" the undilated kernel.
        kind: one of :data:`KINDS`.  A conv run with fused pooling is "conv"
            (the pool unit is pipelined behind the MAC array).
        tiles: tile count (§7.2), ≥ 1.
        in_bytes, out_bytes, weight_bytes: bytes moved over the bus by this run.
        params: hardware parameters.

    ``macs`` is the true MAC count ``out_pixels × M × C_per_group × kx × ky``
    (C_per_group = 1 for depthwise; deconv counts the zero-inserted taps the
    hardware multiplies; 0 for non-MAC kinds).
    """
    if kind not in KINDS:
        raise InvalidArgument("unknown run kind", field="kind", value=kind, limit=KINDS)
    _nonneg(out_w=out_w, out_h=out_h, in_bytes=in_bytes, out_bytes=out_bytes,
            weight_bytes=weight_bytes)
    _positive(m=m, c=c, kx=kx, ky=ky, tiles=tiles)
    pixels = int(out_w) * int(out_h)
    if kind in _MAC_KINDS:
        dw = kind == "depthwise"
        groups = -(-m // params.lanes)
        if kind == "dilated":
            blocks = kx * ky * blocks_per_output_channel(c, 1, 1)
        else:
            blocks = blocks_per_output_channel(c, kx, ky, dw)
        compute = pixels * groups * blocks
        macs = pixels * m * (1 if dw else c) * kx * ky
    else:
        beats = -(-m // _BEAT_CHANNELS)
        factor = -(-(kx * ky) // 9) if kind == "pool" else _NON_MAC_FACTOR[kind]
        compute = pixels * beats * factor
        macs = 0
    dma = sum(bandwidth_bound_cycles(b, params) for b in (in_bytes, weight_bytes, out_bytes))
    overhead = params.run_overhead + tiles * params.tile_overhead
    return RunTiming(compute, dma, overhead, max(compute, dma) + overhead, macs)


def conv_run_bytes(
    in_w: int,
    in_h: int,
    c: int,
    out_w: int,
    out_h: int,
    m: int,
    kx_eff: int,
    tiles: int,
    weight_size: int,
    in_from_ubuf: bool = False,
    out_to_ubuf: bool = False,
) -> tuple[int, int, int]:
    """Bytes a run moves: ``(in_bytes, weight_bytes, out_bytes)`` (a model, §7.2).

    Tiles are vertical strips overlapping by ``kx_eff − 1`` columns, so the input
    read is ``min(W + (tiles−1)(kx_eff−1), tiles·W)`` columns × H × C × 2 bytes.
    The weight blob (``weight_size``, §7.4) is re-read for every tile.  Output is
    written once (``out_w·out_h·m·2``).  A run whose input (output) stays in the
    UBUF (§4.1) moves no input (output) bytes.
    """
    _nonneg(in_w=in_w, in_h=in_h, c=c, out_w=out_w, out_h=out_h, m=m, weight_size=weight_size)
    _positive(kx_eff=kx_eff, tiles=tiles)
    cols = min(in_w + (tiles - 1) * (kx_eff - 1), tiles * in_w)
    in_b = 0 if in_from_ubuf else cols * in_h * c * 2
    out_b = 0 if out_to_ubuf else out_w * out_h * m * 2
    return in_b, weight_size * tiles, out_b


def _fields(run: Any) -> tuple[int, ...]:
    """The raw fields :func:`run_cycles` reads, of a run record (a mapping or a ConvRun)."""
    return tuple(int(raw_field(run, k, 0)) for k in ("conv_enable", "pool_enable", "p",
                                                     "conv_dilation", "pool_size", "lrn"))


def run_cycles(run: Any, in_shape: tuple[int, int, int, int],
               out_shape: tuple[int, int, int, int], tiles: int, weight_size: int,
               in_ubuf: bool, out_ubuf: bool, extra_in: int = 0,
               params: TimingParams = DEFAULT_PARAMS) -> tuple[RunTiming, tuple[int, int, int]]:
    """One run of a command as the model times it, and its ``(in, weight, out)`` bytes.

    ``run`` is a run record (the simulator's decoded fields or a ``ConvRun``), ``in_shape``
    and ``out_shape`` its ``(w, h, z, c)`` input and output (§4.1, §7.5), ``tiles`` the
    command's tile count (§7.2), ``weight_size`` its weight bytes (§7.4), ``in_ubuf`` /
    ``out_ubuf`` whether its input comes from / its output stays in the unified buffer,
    ``extra_in`` the bytes of an element-wise addend streaming in with it (§4.4).  The
    run's kind picks the compute term of :func:`conv_run_cycles`: LRN, then a conv (its
    MAC array works at the conv output's size, before a fused max-pool or upsample shrinks
    or grows it), a 2x upsample, a pool (its window as the kernel), else an element-wise
    pass.  The simulator times every command with this; the compiler weighs schedules
    with it.
    """
    (w, h, _, c), (ow, oh, _, m) = in_shape, out_shape
    ce, pe, p, dil_word, pool_word, lrn = _fields(run)
    kx, ky = p & 0xFF, (p >> 8) & 0xFF
    ky = ky or kx
    dil = max(dil_word & 0xFF, dil_word >> 8 & 0xFF)
    if lrn & 1:
        kind = "lrn"
    elif ce:
        kind = "depthwise" if ce & 2 else "deconv" if ce & 4 else "dilated" if dil > 1 else "conv"
    elif pe == _POOL_UPSAMPLE:
        kind = "upsample"
    elif pe:
        kind = "pool"
        kx, ky = pool_word & 0xFF, pool_word >> 8 & 0xFF
    else:
        kind = "eltwise"
    tiles = max(tiles, 1)
    in_b, w_b, out_b = conv_run_bytes(w, h, c, ow, oh, m, max(1, (kx - 1) * max(dil, 1) + 1),
                                      tiles, weight_size, in_ubuf, out_ubuf)
    in_b += extra_in
    cw, ch = ow, oh
    if ce:
        no_pool = dict(run, pool_enable=0) if isinstance(run, Mapping) else replace(
            run, pool_enable=0)
        (cw, ch, _, _), _ = dims.run_output_shape(no_pool, (w, h, 1, c))
    timing = conv_run_cycles(cw, ch, m, c, max(kx, 1), max(ky, 1), kind, tiles,
                             in_b, out_b, w_b, params)
    return timing, (in_b, w_b, out_b)


def command_cycles(runs: Iterable[RunTiming], params: TimingParams = DEFAULT_PARAMS) -> int:
    """Cycles of one CONV command: ``command_overhead + Σ run totals`` (runs are serial)."""
    return params.command_overhead + sum(r.total_cycles for r in runs)


def cycles_to_us(cycles: int, params: TimingParams = DEFAULT_PARAMS) -> float:
    """Convert cycles to microseconds at ``clock_mhz`` (exec time is in µs, §10.5)."""
    return float(cycles) / params.clock_mhz


def maximizer_cycles(width: int, height: int, nclass: int,
                     params: TimingParams = DEFAULT_PARAMS) -> int:
    """Maximizer model (§9.2): read ``W·H·nclass·2`` bytes, write ``W·H`` bytes,
    one 16-byte beat per cycle, plus ``command_overhead``.  [AMBIG] a model."""
    _positive(width=width, height=height, nclass=nclass)
    px = width * height
    return params.command_overhead + bandwidth_bound_cycles(px * nclass * 2, params) + \
        bandwidth_bound_cycles(px, params)


def ipu_cycles(rect_w: int, rect_h: int, read_bytes: int, write_bytes: int,
               params: TimingParams = DEFAULT_PARAMS) -> int:
    """IPU model (§9.1): one output pixel per cycle or the bus, whichever is
    slower, plus ``command_overhead``.  [AMBIG] a model."""
    _positive(rect_w=rect_w, rect_h=rect_h)
    _nonneg(read_bytes=read_bytes, write_bytes=write_bytes)
    dma = bandwidth_bound_cycles(read_bytes, params) + bandwidth_bound_cycles(write_bytes, params)
    return params.command_overhead + max(rect_w * rect_h, dma)


# ---------------------------------------------------------------------------
# bandwidth counters (§10.10)

#: Counter slot the simulator uses for each stream.  The kernel classifies slot
#: i as output if (i & 3) == 3, weights if i & 4, input if i & 8 (overlapping
#: classes); these slots fall in exactly one class each.
COUNTER_SLOT_INPUT = int(SPEC.registers["byte_counter_slots"]["input"])
COUNTER_SLOT_WEIGHTS = int(SPEC.registers["byte_counter_slots"]["weights"])
COUNTER_SLOT_OUTPUT = int(SPEC.registers["byte_counter_slots"]["output"])


def byte_counter_values(in_bytes: int, weight_bytes: int, out_bytes: int) -> list[int]:
    """The 16 per-run bandwidth counters (§10.10), in 16-byte beats.

    Input beats go to slot 8 (input only), weight beats to slot 4 (weights only),
    output beats to slot 3 (output only); all other slots are 0.  Summing with
    the kernel's rule (:func:`dvsdk.driver.submit.counter_beats`) therefore gives back exactly
    ``ceil(bytes / 16)`` for each class.
    """
    _nonneg(in_bytes=in_bytes, weight_bytes=weight_bytes, out_bytes=out_bytes)
    vals = [0] * 16
    vals[COUNTER_SLOT_INPUT] = -(-int(in_bytes) // 16)
    vals[COUNTER_SLOT_WEIGHTS] = -(-int(weight_bytes) // 16)
    vals[COUNTER_SLOT_OUTPUT] = -(-int(out_bytes) // 16)
    return vals
