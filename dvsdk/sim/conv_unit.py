"""The conv engine: executes the configuration image at controller address 0x2000.

Reference §4 (semantics), §10.3 (image layout), §4.10 (batch).  Tensors are read
from DRAM in the 8-channel-chunked FP16 layout (§1), computed as HWC float32
with float32 accumulation, and rounded to FP16 wherever the hardware stores a
value: after the conv stage, after the element-wise add, after pooling and
activation, and for every tensor kept in the unified buffer between runs
([AMBIG] §4.2: our documented choice).  Runs follow the hardware order
``conv → add → max-pool/upsample → activation → rectify`` (§4.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .. import native
from ..errors import DvsdkError
from ..hw import dims, layout, quirks
from ..hw.fp16 import fp16_value
from ..hw.spec import SPEC
from ..hw.timing import run_cycles
from ..hw.weights import unpack_conv_weights, unpack_dilated_weights
from . import kernels, ops
from .core import CoreState
from .status import Hang, HardwareError

CONFIG = SPEC.struct("conv_config")
CONFIG_RUN = SPEC.struct("conv_config_run")
CFG_ADDR = int(SPEC.stream["cfg_image_address"])
_TOPO = CFG_ADDR + CONFIG.offset("topo")  # the header's u32 run mask
_RUNS_ADDR, _RUN_SIZE = CFG_ADDR + CONFIG.size, CONFIG_RUN.size  # where the run records are
POOL = SPEC.enum("pool_enable")
NO_BUFFER = 0xDEADBEEF
#: per-command work limit of the simulator (a 300 MHz ZIA-C2 does ~1.7e11 MAC/s; this is
#: minutes of numpy): a garbage configuration is reported, not computed
MAX_MACS = 5 * 10**10


@dataclass
class ConvTotals:
    """What one stream moved and cost (summed over its commands)."""

    cycles: int = 0
    in_bytes: int = 0
    weight_bytes: int = 0
    out_bytes: int = 0


def _xy(word: int) -> tuple[int, int]:
    return word & 0xFF, (word >> 8) & 0xFF


def _pads(word: int, mask_a: int) -> tuple[int, int, int, int]:
    return word & mask_a, (word >> 8) & 0xFF, (word >> 16) & mask_a, (word >> 24) & 0xFF


def run_configuration(core: CoreState) -> None:
    """START was written: decode the image and run every sample of the batch."""
    table_word, core.u8_table = core.u8_table, NO_BUFFER  # consumed per command
    try:
        image, plan = core.image, None
        if image is not None:  # written whole by a CFG packet of this chunk: its plan
            key = (image[1], table_word != NO_BUFFER)
            plan = image[0].get(key)
        if plan is None:
            plan = plan_of(core, core.cfg_mem, table_word)
            if image is not None and image[2] >= _RUNS_ADDR - CFG_ADDR + len(plan.runs) \
                    * _RUN_SIZE:  # (the packet wrote every byte plan_of looked at)
                image[0][key] = plan
        cost = core.params.timing.command_overhead + plan.batch * plan.one.cycles
        if core.totals.cycles + cost > core.kick_cycle_limit:
            raise Hang(CFG_ADDR, f"watchdog: this command's {cost} cycles take the kick past "
                       f"{core.kick_cycle_limit} cycles")
        _execute(core, plan, table_word)  # (under the engine's np.errstate: inf and NaN
        # are values to the hardware, not errors)
    except HardwareError:
        raise
    except (DvsdkError, ValueError, IndexError, ZeroDivisionError, OverflowError) as e:
        raise HardwareError("bad_config", CFG_ADDR, f"configuration cannot run: {e}") from None


def plan_of(core: CoreState, cfg_mem: np.ndarray, table_word: int) -> ConvPlan:
    """The :class:`ConvPlan` of the image at ``CFG_ADDR`` of controller memory ``cfg_mem``
    (``table_word``: the u8 table register), worked out once per image; HardwareError
    (or a decoding error) where the hardware cannot run it."""
    topo = int.from_bytes(cfg_mem[_TOPO : _TOPO + 4], "little")
    nruns = topo.bit_length()
    end = _RUNS_ADDR + nruns * _RUN_SIZE
    if nruns == 0 or end > cfg_mem.size:
        raise HardwareError("bad_config", CFG_ADDR, f"topo {topo:#x} selects no runs")
    key = (cfg_mem[CFG_ADDR:end].tobytes(), table_word != NO_BUFFER)
    plan = core.conv_plans.get(key)
    if plan is None:
        hdr = _decoded(CONFIG, cfg_mem, CFG_ADDR)
        runs = [_decoded(CONFIG_RUN, cfg_mem, CFG_ADDR + CONFIG.size + i * CONFIG_RUN.size)
                for i in range(nruns)]
        plan = _plan(core, hdr, runs, table_word != NO_BUFFER)
        if len(core.conv_plans) > 1024:
            core.conv_plans.clear()
        core.conv_plans[key] = plan
    return plan  # type: ignore[return-value]


_DECODED: dict[tuple, dict] = {}


def _decoded(struct, mem: np.ndarray, offset: int) -> dict:
    """``struct.unpack(mem, offset)``, memoized on the record's bytes (a fresh dict each
    call, so callers may modify it)."""
    key = (struct.size, offset, mem[offset : offset + struct.size].tobytes())
    hit = _DECODED.get(key)
    if hit is None:
        if len(_DECODED) > 4096:
            _DECODED.clear()
        hit = _DECODED[key] = struct.unpack(mem, offset)
    return dict(hit)


def _check_addr(addr: int, align: int, what: str) -> None:
    if addr == NO_BUFFER:
        raise HardwareError("bad_address", addr, f"{what} address is unset (0xDEADBEEF)")
    if addr % align:
        raise HardwareError("misaligned", addr, f"{what} address not {align}-byte aligned")


@dataclass
class ConvPlan:
    """What a configuration image means, worked out once per distinct image: the checks,
    shapes, output offsets and the cost of one sample (§4.10: a batch repeats it)."""

    hdr: dict
    runs: list[dict]
    shapes: list[tuple]                  # per run: (input WHZC, output WHZC)
    weight_sizes: list[int]              # per run, 0 without conv
    out_offs: list[int | None]           # per run: offset in the sample's output, or None
    out_total: int                       # output bytes of one sample
    elt_shape: tuple[int, int, int] | None
    in_bytes_one: int
    one: ConvTotals
    #: per run, its prepared step (kernels.make_step), by whether the compiled loops are on
    steps: dict = field(default_factory=dict)
    #: per run, its weight cache key (:func:`_weight_key`; size 0 without conv)
    weight_keys: list = field(default_factory=list)
    #: worked out from the above once (``__post_init__``): samples, input (H, W, C), and
    #: whether the command is one run of one sample storing its output (the common case)
    batch: int = field(init=False)
    hwc: tuple = field(init=False)
    single: bool = field(init=False)
    #: the single case's (run, weight key, input address, eltwise address, output address)
    one_run: tuple = field(init=False)

    def __post_init__(self) -> None:
        hdr = self.hdr
        self.batch = hdr["input_circular_offset"] or 1
        self.hwc = (hdr["h"], hdr["w"], hdr["c"])
        self.single = self.batch == 1 and len(self.runs) == 1 and self.out_offs[0] == 0
        self.one_run = (self.runs[0], self.weight_keys[0] if self.weight_keys else None,
                        hdr["input_base_addr"], hdr["eltwise_base_addr"],
                        hdr["output_base_addr"])


def _plan(core: CoreState, hdr: dict, runs: list[dict], u8_input: bool) -> ConvPlan:
    w, h, c, z = hdr["w"], hdr["h"], hdr["c"], hdr["z"]
    if min(w, h, c) < 1 or z != 1:
        raise HardwareError("bad_config", CFG_ADDR, f"input {w}x{h}x{z}x{c} unsupported")
    topo = hdr["topo"]
    batch = hdr["input_circular_offset"] or 1
    _check_addr(hdr["input_base_addr"], 1 if u8_input else 2, "input")
    _check_addr(hdr["output_base_addr"], 2, "output")
    eltwise = hdr["output_mode"] == 1
    if eltwise:
        _check_addr(hdr["eltwise_base_addr"], 2, "eltwise")
    shapes, sizes, out_offs, elt_shape = [], [], [], None
    shape = (w, h, 1, c)
    out_total = 0
    for i, run in enumerate(runs):
        out_shape, _ = dims.run_output_shape(run, shape)
        if min(out_shape) < 1:
            raise HardwareError("bad_config", CFG_ADDR, f"run {i} output {out_shape} is empty")
        if run["conv_enable"]:
            sizes.append(dims.run_weight_size(run, shape[3]))
            _check_addr(run["weight_base_addr"], 16, "weight")
            core.mem.check_range(run["weight_base_addr"], sizes[-1])  # before later runs
        else:
            sizes.append(0)
        shapes.append((shape, out_shape))
        if topo >> i & 1:
            out_offs.append(out_total)
            out_total += out_shape[0] * out_shape[1] * out_shape[3] * 2
            shape = (w, h, 1, c)
        else:
            out_offs.append(None)
            shape = out_shape
    _check_ubuf(core, hdr, runs)
    _check_quirks(core, hdr, runs)
    # a garbage configuration must fail fast: outputs inside DRAM, bounded work
    core.mem.check_range(hdr["output_base_addr"], out_total * batch)
    macs = sum(_run_macs(r, shp) for r, shp in zip(runs, shapes)) * batch
    if macs > MAX_MACS:
        raise HardwareError("bad_config", CFG_ADDR, f"{macs} MACs exceed the simulator's "
                            f"per-command limit of {MAX_MACS}")
    work = _work_bytes(runs, shapes, sizes, w * h * c)
    if work > core.work_limit:
        raise HardwareError("bad_config", CFG_ADDR, f"the command needs ~{work} bytes of host "
                            f"memory, over the simulator's limit of {core.work_limit}")
    one = ConvTotals()
    elt_bytes = 0
    if eltwise:
        ew, eh, _, ec = dims.eltwise_shape(runs[0], (w, h, 1, c))
        elt_shape = (eh, ew, ec)
        elt_bytes = eh * ew * ec * 2  # the addend streams in with run 0's input
    tiles = hdr["tiles"] if len(runs) == 1 else 1
    for i, run in enumerate(runs):
        in_ubuf = i > 0 and not topo >> (i - 1) & 1
        one.cycles += _run_cycles(core, run, shapes[i], tiles, sizes[i], in_ubuf,
                                  out_offs[i] is None, one, elt_bytes if i == 0 else 0)
    return ConvPlan(hdr, runs, shapes, sizes, out_offs, out_total, elt_shape,
                    w * h * c * (1 if u8_input else 2), one,
                    weight_keys=[_weight_key(run, shp[0][3], size)
                                 for run, shp, size in zip(runs, shapes, sizes)])


def _check_quirks(core: CoreState, hdr: dict, runs: list[dict]) -> None:
    """Given a hardware version (``sim://?hw_version=``), refuse what that hardware could not
    do (:mod:`dvsdk.hw.quirks`): its results are not published, so a refusal, not a guess."""
    date = core.params.hw_date
    tiles = [int(hdr["tiles"])] + [1] * (len(runs) - 1)
    for i, quirk in quirks.violations(runs, tiles, hdr["output_mode"] == 1, date):
        raise HardwareError("bad_config", CFG_ADDR, f"run {i}: hardware {date}: "
                            f"{quirks.describe(quirk)}")


def _check_ubuf(core: CoreState, hdr: dict, runs: list[dict]) -> None:
    """What the hardware would get wrong, refused: a ``tiles`` field other than the tile
    math's (``get_conv_tiles_v0``, §7.2, for this unified buffer), and a multi-run command
    whose peak unified-buffer use (§7.3) exceeds it (§6.7 steps 5 and 11)."""
    ub = core.params.ub_size
    expected = dims.command_tiles(hdr, runs, ub)
    if expected == 0:
        raise HardwareError("bad_config", CFG_ADDR, f"the first run does not fit a {ub}-byte "
                            "unified buffer in any number of tiles")
    if hdr["tiles"] != expected:
        raise HardwareError("bad_config", CFG_ADDR, f"tiles field {hdr['tiles']} disagrees "
                            f"with the tile math ({expected} for a {ub}-byte unified buffer)")
    if len(runs) > 1:
        # (§7.3's peak, and the whole tensors of each run kept in the UBUF, which the peak
        # under-counts for deconv and non-square average-pool runs: firmware_spec/README.md)
        usage = max(dims.ubuf_single_tile_usage(hdr, runs, ub), dims.ubuf_kept_bytes(hdr, runs))
        if usage > ub:
            raise HardwareError("bad_config", CFG_ADDR, f"the multi-run command needs {usage} "
                                f"bytes of unified buffer, the device has {ub}")


def _execute(core: CoreState, plan: ConvPlan, table_word: int) -> None:
    runs = plan.runs
    steps = plan.steps.get(native.NATIVE is not None)
    if steps is None:
        steps = plan.steps[native.NATIVE is not None] = [kernels.make_step(run, _run)
                                                         for run in runs]
    if plan.single and table_word == NO_BUFFER:  # _samples' loop for one run and sample
        run, key, in_addr, elt_addr, out_addr = plan.one_run
        mem = core.mem
        wb = _load_weights(core, run, key) if key[1] else None
        x = mem.read_tensor(in_addr, plan.hwc)
        elt = plan.elt_shape
        addend = None if elt is None else mem.read_tensor(elt_addr, elt)
        mem.write_tensor(out_addr, steps[0](x, wb, addend))
    else:
        weights = [_load_weights(core, run, key) if key[1] else None
                   for run, key in zip(runs, plan.weight_keys)]
        _samples(core, plan, table_word, weights, steps)
    one, totals, batch = plan.one, core.totals, plan.batch
    totals.cycles += core.params.timing.command_overhead + batch * one.cycles
    totals.in_bytes += batch * one.in_bytes
    totals.weight_bytes += batch * one.weight_bytes
    totals.out_bytes += batch * one.out_bytes


def _samples(core: CoreState, plan: ConvPlan, table_word: int, weights: list,
             steps: list) -> None:
    """Every sample of the batch through every run (a run whose topo bit is clear feeds
    the next; a set bit stores its output, and the next run reads the input again)."""
    hdr, topo, hwc, mem, out_offs = plan.hdr, plan.hdr["topo"], plan.hwc, core.mem, plan.out_offs
    in_addr, out_addr = hdr["input_base_addr"], hdr["output_base_addr"]
    for n in range(plan.batch):
        if table_word == NO_BUFFER:
            x = mem.read_tensor(in_addr + n * plan.in_bytes_one, hwc)
        else:
            x = _read_u8_input(core, in_addr + n * plan.in_bytes_one, hwc, table_word)
        addend = None
        if plan.elt_shape is not None:
            eb = 2 * math.prod(plan.elt_shape)
            addend = mem.read_tensor(hdr["eltwise_base_addr"] + n * eb, plan.elt_shape)
        cur = x
        for i, step in enumerate(steps):
            src = x if i == 0 or topo >> (i - 1) & 1 else cur
            y = step(src, weights[i], addend if i == 0 else None)
            if out_offs[i] is not None:
                mem.write_tensor(out_addr + n * plan.out_total + out_offs[i], y)
            else:
                cur = y


def _work_bytes(runs: list[dict], shapes: list[tuple], sizes: list[int], in_elems: int
                ) -> int:
    """Host memory (bytes) one command needs at its peak, estimated from the shapes before
    anything is allocated (samples of a batch run one after the other): the float32 input
    kept for the runs, and per run its input, the conv stage's output before pooling (a
    few copies: conv, add, pool, activation), a deconv's zero-inserted input and decoding
    the weights (measured: at most ~11 bytes per byte of packed weights); im2col blocks
    (``ops._IM2COL_BUDGET``) count at their size."""
    peak = 0
    for run, ((w, h, _, c), (ow, oh, _, m)), size in zip(runs, shapes, sizes):
        pre = dict(run, pool_enable=0)
        (tw, th, _, tc), _ = dims.run_output_shape(pre, (w, h, 1, c))
        elems = w * h * c + 3 * max(tw, 1) * max(th, 1) * tc + ow * oh * m + 3 * size
        if run["conv_enable"]:
            kx, ky = _xy(run["p"])
            cin = 1 if run["conv_enable"] & 2 else c
            cols = max(tw, 1) * max(th, 1) * cin * max(kx, 1) * max(ky or kx, 1)
            elems += min(cols, ops._IM2COL_BUDGET // 4)
            if run["conv_enable"] & 4:
                elems += max(tw, 1) * max(th, 1) * c
        peak = max(peak, elems)
    return 4 * (in_elems + peak)


def _run_macs(run: dict, shapes: tuple) -> int:
    """An upper bound of one run's multiply-accumulates (per sample): the conv stage at the
    larger of its input, its pre-pooling output (a deconv's is larger) and the run's
    output."""
    (w, h, _, c), (ow, oh, _, m) = shapes
    if not run["conv_enable"]:
        return ow * oh * m
    (tw, th, _, _), _ = dims.run_output_shape(dict(run, pool_enable=0), (w, h, 1, c))
    kx, ky = _xy(run["p"])
    cin = 1 if run["conv_enable"] & 2 else c
    return max(ow, w, tw) * max(oh, h, th) * m * cin * kx * (ky or kx)


def _read_u8_input(core: CoreState, addr: int, hwc: tuple[int, int, int],
                   table_word: int) -> np.ndarray:
    hh, ww, cc = hwc
    # conv v1: uint8 input converted through 3 x 256 FP16 tables ([AMBIG] §3.3, our choice:
    # the same chunked layout with one byte per element, channel c uses table c % 3, and the
    # to_bgr flag (bit 0 of the table address) swaps the first and third tables).
    taddr, bgr = table_word & ~1, table_word & 1
    _check_addr(taddr, 16, "u8 table")
    table = core.mem.read(taddr, 1536).view("<f2").reshape(3, 256).astype(np.float32)
    raw = core.mem.read(addr, hh * ww * cc)
    idx = layout.unpack(raw.astype(np.float16), hwc).astype(np.int64)
    t = np.arange(cc) % 3
    if bgr:
        t = 2 - t
    return table[t[None, None, :], idx]


def _weight_key(run: dict, in_c: int, size: int) -> tuple:
    """What a run's decoded weights depend on: address, size and layout (``size`` 0: the
    run has no conv)."""
    return (run["weight_base_addr"], size, in_c, run["m"], run["p"], run["conv_enable"],
            run["conv_dilation"], run["weight_fmt"], run["actfunc"] == 4)


def _load_weights(core: CoreState, run: dict, key: tuple) -> tuple:
    """Fetch and decode a run's weights (``key``: :func:`_weight_key`).  Decoded blocks are
    cached per address and layout and reused only while the bytes in DRAM are unchanged
    (the hardware re-reads them every run; the cache changes wall time, not results or
    byte counters)."""
    addr, size, in_c = key[:3]
    version = core.mem.version(addr, size)
    cache = core.weight_cache
    hit = cache.get(key)
    if hit is not None and version is not None and hit[0] == version:
        core.mem.check_read(addr, size)  # read as the hardware does (coherence), unchanged
        return hit[2]
    blob = core.mem.read(addr, size)
    if hit is not None and version is None and np.array_equal(hit[1], blob):
        return hit[2]
    decoded = _decode_weights(blob, run, in_c, size)
    nbytes = sum(a.nbytes for a in decoded[:3] if a is not None)
    nbytes += 0 if version is not None else size
    _cache_weights(core, key, (version, blob.copy() if version is None else None, decoded),
                   nbytes)
    return decoded


def warm_weights(core: CoreState, run: dict, key: tuple) -> tuple | None:
    """:func:`_load_weights` ahead of the kick (:mod:`.warm`): the decoded block from the
    cache, or decoded from the bytes DRAM holds now and cached under their write clock,
    without a device read (no coherence check, nothing written out); None where the
    clock is unknown (eager DRAM) or the bytes are not in DRAM yet."""
    addr, size = key[:2]
    version = core.mem.version(addr, size)
    if version is None:
        return None
    hit = core.weight_cache.get(key)
    if hit is not None and hit[0] == version:
        return hit[2]
    blob = core.mem.peek(addr, size)
    if blob is None:
        return None
    decoded = _decode_weights(blob, run, key[2], size)
    _cache_weights(core, key, (version, None, decoded),
                   sum(a.nbytes for a in decoded[:3] if a is not None))
    return decoded


def _cache_weights(core: CoreState, key: tuple, entry: tuple, nbytes: int) -> None:
    cache = core.weight_cache
    if len(cache) > 512 or core.weight_cache_bytes + nbytes > core.cache_limit:
        cache.clear()
        core.weight_cache_bytes = 0
    cache[key] = entry
    core.weight_cache_bytes += nbytes


def _decode_weights(blob: np.ndarray, run: dict, in_c: int, size: int) -> tuple:
    kx, ky = _xy(run["p"])
    ky = ky or kx
    q = bool(run["weight_fmt"] & 2)
    dx, dy = _xy(run["conv_dilation"])
    dw = bool(run["conv_enable"] & 2)
    if max(dx, dy) > 1:
        wts, bias = unpack_dilated_weights(blob, in_c, run["m"], kx, ky, q)
        prelu = None
    else:
        wts, bias, prelu = unpack_conv_weights(blob, in_c, run["m"], kx, ky, q, dw,
                                               run["actfunc"] == 4)
    if not dw:  # (M, C, ky, kx) over (ky, kx, C, M) memory: the matmul operand, no copy
        wts = np.ascontiguousarray(wts.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)
    return wts, bias, prelu, size, {}  # {}: what kernels.make_step derives from them


def _run(run: dict, x: np.ndarray, wb: tuple | None, addend: np.ndarray | None) -> np.ndarray:
    """One run on one sample (§4.1 order), in float32 through the pipeline; the result is
    rounded to FP16 as the hardware stores it, in DRAM or in the unified buffer between
    runs ([AMBIG] §4.2, firmware_spec/README.md)."""
    ce, pe = run["conv_enable"], run["pool_enable"]
    prelu = None
    if run["lrn"] & 1:
        t = ops.lrn(x, (run["lrn"] >> 8) & 0xF)
    elif ce:
        wts, bias, prelu = wb[:3]
        kx, ky = _xy(run["p"])
        stride = _xy(run["conv_stride"])
        pads = _pads(run["conv_pad"], 0x7F)
        dil = tuple(max(1, d) for d in _xy(run["conv_dilation"]))
        if ce & 4:  # (binary16 operands: exact products, firmware_spec/arithmetic.md)
            t = ops.deconv2d(x, wts, bias, stride, pads, depthwise=bool(ce & 2), dilation=dil,
                             exact_products=True)
        else:
            t = ops.conv2d(x, wts, bias, stride, pads, dil, depthwise=bool(ce & 2),
                           exact_products=True)
    elif pe == POOL.avg:
        t = ops.avg_pool(x, _xy(run["pool_size"]), _xy(run["pool_stride"]),
                         _pads(run["pool_pad"], 0xFF), fp16_value(run["pool_avg_param"]))
    else:
        t = x
    if addend is not None:
        t = t + addend
    if pe == POOL.max:
        t = ops.max_pool(t, _xy(run["pool_size"]), _xy(run["pool_stride"]),
                         _pads(run["pool_pad"], 0xFF))
    elif pe == POOL.upsample:
        t = ops.upsample2x(t)
    return ops.finish(t, run["actfunc"], fp16_value(run["actfunc_param"]), prelu,
                      bool(run["rectifi_en"]), owned=t is not x)


def _run_cycles(core: CoreState, run: dict, shapes: tuple, tiles: int, wsize: int,
                in_ubuf: bool, out_ubuf: bool, totals: ConvTotals, extra_in: int = 0) -> int:
    """One run's cycles (:func:`dvsdk.hw.timing.run_cycles`), its bytes added to ``totals``.  A
    conv's MAC array works at the conv output's size, before a fused max-pool or upsample
    shrinks or grows it (timing the pooled size made a conv with a 2x2 pool 4x too fast:
    399% MAC use); ``extra_in`` bytes (an element-wise addend) stream in with the input and
    count in the DMA term."""
    timing, (in_b, w_b, out_b) = run_cycles(run, shapes[0], shapes[1], tiles, wsize, in_ubuf,
                                            out_ubuf, extra_in, core.params.timing)
    totals.in_bytes += in_b
    totals.weight_bytes += w_b
    totals.out_bytes += out_b
    return timing.total_cycles
