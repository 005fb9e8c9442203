"""What a run would take on the board's CPU: a cost model of one Cortex-A53 core.

A ZIA board runs this same runtime on the Zynq UltraScale+'s Cortex-A53 cores: the CPU
steps between hardware segments, the packing and unpacking of tensors, the cache syncs
around every hand-over and the kick and interrupt of every segment.  On ``sim://`` the
host measures its own times for these, which say nothing about the board (an x86 host
takes as long for YOLOv8n's CPU steps as the device for the whole net).  This module
predicts them for the board instead, from what each step of a run did (op, element
count, bytes, MACs: recorded in ``RunStats.events``), with the constants below.  Every
figure it gives is labelled a prediction wherever it is shown.

Facts (published):

* **Clock** ``cpu_mhz = 1200``: the top operating point of the A53 cluster in Linux's
  device tree for the family (``arch/arm64/boot/dts/xilinx/zynqmp.dtsi``, 1199999988
  Hz), what PetaLinux boards run; AMD's UG1228 gives the APU "up to 1.5 GHz" (the
  fastest speed grade).  Times scale with 1 / clock, the memory term excepted.
* **NEON**: a 128-bit register holds 4 float32 lanes, but the A53's ASIMD datapath is
  64 bits wide: a Q-form floating-point instruction occupies its pipe for 2 cycles
  (LLVM's Cortex-A53 model, ``AArch64SchedA53.td``, after Arm's "Cortex-A53 Software
  Optimisation Specification"; in-order, 2 instructions issued per cycle, one FP/ASIMD
  ALU pipe and one FP multiply pipe).  So one float32 operation costs 0.5 cycle per
  element; loads, stores and loop counters issue beside it.  dvsdk's kernels do not
  fuse multiply and add (bit-exact with numpy), so a*x+b is two operations.
* **Lines**: 64 bytes (the A53's L1 and L2; :data:`dvsdk.driver.cacheline.LINE`).

Estimates (derived, each a constant of :class:`BoardParams` a calibration replaces):

* **Streaming bandwidth** ``stream_gbps = 4.0`` (reads plus writes, one core): TI
  measured one A53 core copying 2.13 GB/s (AM62A, SPRAD90) and 1.96 GB/s (AM62P,
  SPRADG0A) with memcpy over 8 MB (LMBench ``bw_mem bcopy``), i.e. about 4 GB/s read
  and written.  A single core is bounded by the misses it can keep in flight, not by
  the ZU+'s 64-bit DDR4/LPDDR4 interface (DS925 lists its rates: several times one
  core's).  Tensors the device wrote come from DRAM (a sync invalidated them), so every
  byte a step reads or writes is charged at this rate.
* **MACs** ``mac_cycles = 1.0`` per multiply-accumulate of a Conv, ConvTranspose, MatMul
  or Gemm left on the CPU: a Q-form FMLA does 4 MACs in 2 cycles (2 per cycle at peak);
  numpy's BLAS reaches about half of that on an in-order core.  A Conv's im2col matrix
  (float32, written and read once) adds to its bytes.
* **Divide** 7 cycles per element: the divider is busy 14 cycles per single-precision
  divide (LLVM's model, scalar); a vector divide is taken to overlap two lanes.
* **float64** 50 cycles per element: Sigmoid, Tanh, Exp and the like run in float64 for
  the same bits on every machine (:mod:`dvsdk.hw.elementary`): a degree-13 polynomial
  and its range reduction (about 25 operations, one float64 lane per cycle) and a divide.
* **Table lookup** 3 cycles per element (``Fp16Table``, :mod:`dvsdk.compiler.table`):
  the step's input is already binary16 bits, so each element is one indexed load from a
  128 KiB table of binary16 results; most activations fall in a few thousand entries
  (L1 hits), the rest are L2 hits whose latency an in-order core only partly hides.
* **Python** ``bytecode_cycles = 100``: the runtime is CPython.  Its work per event is
  counted in bytecodes by ``benchmarks/bench_bytecodes.py`` (``sys.settrace`` opcode
  events, one steady run on ``uio://`` against a fake board of real files, DMP's R5 kick,
  u-dma-buf's ioctl sync; CPython 3.11; digits, PP-OCR cls and rec, MobileNetV3- and
  YOLOv8n-like nets): 1556-1613 per hardware segment (digits, cls, MobileNetV3; the kick, the
  interrupt wait and its acknowledge, the byte counters) and 360-400 for the runtime's
  loop around it; 925-990 per CPU step on the compiled FP16 path; on the numpy path 840
  per op inside a segment
  (rec's LayerNorm chains) to 1790 (YOLOv8n's head), and a segment's first op about 900
  more (its set-up: digits' one-op segment 1754); 212-229 per pack or unpack; 242 per
  cache sync; and about 1400 per run (the feeds, the handle, the statistics).
  ``tests/test_board_model.py`` counts them again (CPython 3.11) and fails if a count has
  left 3/4..3/2 of its constant.
  On a 2.6 GHz x86 server core this runtime retires one such
  bytecode in about 17 ns (44 cycles, numpy call overhead included); an in-order,
  dual-issue A53 runs interpreter code at roughly 2-2.5x fewer instructions per cycle,
  hence 100 cycles.  The least certain constant: calibrate it first.
* **Cache maintenance** ``line_cycles = 10`` per 64-byte line of a sync (``DC CVAC`` or
  ``DC CIVAC`` by address, each a look-up in L1 and L2 through the load/store pipe); the
  write-back of a dirty line is charged to the step that wrote it (its bytes), not here.
* **Interrupt** ``irq_us = 20``: from the device's interrupt to the waiting thread
  running again (Linux, UIO).

A CPU step costs ``fixed + max(compute, memory)`` (a roofline: the A53 prefetches while
it computes): fixed = its bytecodes x ``bytecode_cycles``; compute = elements x the
op's cycles per element (:data:`OPS`) + MACs x ``mac_cycles``; memory = the bytes the
step reads and writes x the op's sweeps / ``stream_gbps``.  Sweeps are the passes the
kernel of :mod:`dvsdk.cpu.ops` makes over a tensor (each numpy temporary one, a boolean
mask counted as a full pass).  A step on the compiled FP16 path (one element-wise op
between two hardware segments: ``fused.FusedPlan``) makes one sweep over FP16 bytes
and pays 0.5 cycle per element for each FP16<->float32 conversion.  A pack or unpack
converts float32 <-> FP16 in one compiled sweep (6 bytes per element).  A sync costs its
bytecodes + ``line_cycles`` per line.  A hardware segment costs its bytecodes +
``irq_us`` on the CPU; the device time itself is the run's (the simulator's cycle model
on ``sim://``, measured on a board).  A run adds its own bookkeeping once
(``run_bytecodes``).

Not modeled: preprocessing an image, the IPU, other processes, a second core, ``dv://``'s
``DMA_BUF_IOCTL_SYNC`` (which syncs the whole buffer, not the range: the line term above
is ``uio://``'s range sync).  Expect the totals within about 2x of a board's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class BoardParams:
    """The model's constants (module docstring: where each comes from)."""

    cpu_mhz: float = 1200.0
    stream_gbps: float = 4.0
    mac_cycles: float = 1.0
    bytecode_cycles: float = 100.0
    line_cycles: float = 10.0
    line_bytes: int = 64
    irq_us: float = 20.0
    #: Python work per event, in bytecodes (module docstring: counted)
    step_fused_bytecodes: int = 950
    step_numpy_bytecodes: int = 1100
    #: entering a CPU segment on the numpy path (charged to its first step)
    cpu_segment_bytecodes: int = 900
    convert_bytecodes: int = 220
    sync_bytecodes: int = 240
    #: a hardware segment: the kick, the wait, the runtime's loop around it
    segment_bytecodes: int = 1850
    #: once a run: feeding the inputs, the run's handle, its statistics
    run_bytecodes: int = 1400
    #: cycles per element of one FP16 <-> float32 conversion (one NEON instruction)
    convert_cycles: float = 0.5


DEFAULT = BoardParams()

#: op kinds: (cycles per element, sweeps of the numpy kernel, the ops).  Cycles are 0.5
#: per float32 operation of the kernel's arithmetic (its NEON instructions per element);
#: "elements" is the largest tensor a step reads or writes (a pool's window and LRN's size
#: multiply it).
KINDS: dict[str, tuple[float, int, str]] = {
    "view": (0.0, 0, "Reshape Flatten Squeeze Unsqueeze Identity Dropout Shape Size"),
    "copy": (0.25, 1, "Concat Split Slice Pad Expand Tile Gather GatherElements Transpose "
                      "DepthToSpace SpaceToDepth Resize Cast ConstantOfShape Range Where "
                      "ScatterND CastLike Trilu ScatterElements Scatter GatherND OneHot "
                      "EyeLike CenterCropPad ReverseSequence"),
    "arith": (0.5, 1, "Add Sub Mul Sum Neg Abs Floor Ceil Round Sign Not And Or Xor Equal "
                      "Less LessOrEqual Greater GreaterOrEqual CumSum CumProd BitShift "
                      "BitwiseAnd BitwiseOr BitwiseXor BitwiseNot"),
    "quantize": (2.0, 3, "QuantizeLinear DequantizeLinear DynamicQuantizeLinear"),
    "select": (1.0, 4, "Relu Max Min"),          # compare, NaN test, or, select
    "clamp": (2.0, 8, "Clip"),                   # two of them
    "leaky": (1.5, 4, "LeakyRelu PRelu"),        # multiply, compare, select
    "hardsigmoid": (2.0, 6, "HardSigmoid"),      # multiply, add, clamp (2)
    "hardswish": (2.5, 7, "HardSwish"),          # hardsigmoid's, then a multiply
    "lookup": (3.0, 1, "Fp16Table"),              # one indexed load (docstring)
    "divide": (7.0, 1, "Div Reciprocal Sqrt Mod"),  # the divider (docstring)
    "float64": (50.0, 3, "Sigmoid Tanh Exp Log Elu Selu Softplus Softsign Pow"),  # docstring
    "erf": (150.0, 3, "Erf Gelu"),               # erf's 64-term series and an exp, float64
    "sort": (20.0, 3, "TopK"),                   # a stable sort along the axis
    "sample": (8.0, 2, "GridSample RoiAlign AffineGrid"),  # 4 to 16 gathered taps per output
    "softmax": (55.0, 5, "Softmax LogSoftmax"),  # an exp, a sum, a divide per element
    "reduce": (0.5, 1, "GlobalAveragePool GlobalMaxPool ReduceSum ReduceMean ReduceMax "
                       "ReduceMin ReduceProd ReduceL2 ReduceSumSquare ArgMax ArgMin MaxPool "
                       "AveragePool LRN MaxRoiPool LpPool Col2Im MaxUnpool"),
    "normalize": (1.0, 3, "BatchNormalization InstanceNormalization Mean LayerNormalization"),
    "select2": (1.0, 3, "ThresholdedRelu Shrink IsInf IsNaN Hardmax"),  # compares, selects
    "activation64": (60.0, 3, "Celu Mish Swish"),  # exp / log / tanh in float64
    "reduce64": (50.0, 2, "ReduceL1 ReduceLogSum ReduceLogSumExp"),  # float64 sum (exp, log)
    "norm64": (2.0, 4, "RMSNormalization LpNormalization GroupNormalization "
                       "MeanVarianceNormalization"),  # float64 sums, a square root per row
    "loss": (60.0, 4, "NegativeLogLikelihoodLoss SoftmaxCrossEntropyLoss"),  # log-softmax
    "mac": (0.0, 1, "Conv ConvTranspose MatMul Gemm Einsum Attention MsAttention LSTM GRU RNN "
                    "MatMulInteger ConvInteger QLinearMatMul QLinearConv VxFixedPoint"),  # per MAC
}
#: op -> (kind, cycles per element, sweeps)
OPS: dict[str, tuple[str, float, int]] = {
    op: (kind, cycles, sweeps)
    for kind, (cycles, sweeps, ops) in KINDS.items() for op in ops.split()}
#: an op no row names (a kernel added since): two operations, two sweeps
UNKNOWN = ("unknown", 1.0, 2)


def op_cost(op: str) -> tuple[str, float, int]:
    """(kind, cycles per element, sweeps) of ``op``."""
    return OPS.get(op, UNKNOWN)


# -- per event --------------------------------------------------------------------------------
def step_us(op: str, elements: int, nbytes: int, macs: int = 0, fused: bool = False,
            operands: int = 1, p: BoardParams = DEFAULT, enters: bool = False) -> float:
    """One CPU step: ``elements`` (the compute basis), ``nbytes`` read and written (as the
    path holds them: FP16 on the compiled path), ``macs``; ``operands`` full-size or
    per-channel inputs the compiled path converts from FP16; ``enters``: the first step of
    its CPU segment on the numpy path (it pays the segment's set-up)."""
    _, cycles, sweeps = op_cost(op)
    if fused:
        cycles += p.convert_cycles * (operands + 1)
        sweeps, bytecodes = 1, p.step_fused_bytecodes
    else:
        bytecodes = p.step_numpy_bytecodes + (p.cpu_segment_bytecodes if enters else 0)
    compute = (elements * cycles + macs * p.mac_cycles) / p.cpu_mhz
    memory = sweeps * nbytes / (p.stream_gbps * 1e3)
    return bytecodes * p.bytecode_cycles / p.cpu_mhz + max(compute, memory)


def convert_us(fp16_bytes: int, p: BoardParams = DEFAULT) -> float:
    """A pack or unpack of a tensor of ``fp16_bytes`` in the device's layout."""
    elements = fp16_bytes // 2
    compute = elements * p.convert_cycles / p.cpu_mhz
    memory = 6 * elements / (p.stream_gbps * 1e3)
    return p.convert_bytecodes * p.bytecode_cycles / p.cpu_mhz + max(compute, memory)


def sync_us(nbytes: int, p: BoardParams = DEFAULT) -> float:
    """One cache sync of ``nbytes`` (every line it touches, for the device or the CPU)."""
    lines = math.ceil(nbytes / p.line_bytes)
    return (p.sync_bytecodes * p.bytecode_cycles + lines * p.line_cycles) / p.cpu_mhz


def run_us(p: BoardParams = DEFAULT) -> float:
    """The CPU's bookkeeping of one run, once: the feeds, the handle, the statistics."""
    return p.run_bytecodes * p.bytecode_cycles / p.cpu_mhz


def segment_us(p: BoardParams = DEFAULT) -> float:
    """The CPU's part of one hardware segment: the kick, the interrupt, the bookkeeping."""
    return p.segment_bytecodes * p.bytecode_cycles / p.cpu_mhz + p.irq_us


def event_us(kind: str, extra: Mapping[str, Any], p: BoardParams = DEFAULT) -> float | None:
    """The board's CPU time of one ``RunStats`` event (``device``: the CPU's part of the
    segment); None where the event records no work this model knows."""
    if kind == "device":
        return segment_us(p)
    if kind == "sync" and "bytes" in extra:
        return sync_us(extra["bytes"], p)
    if kind in ("pack", "unpack") and "bytes" in extra:
        return convert_us(extra["bytes"], p)
    if kind == "cpu" and "op" in extra:
        return step_us(extra["op"], extra["elements"], extra["bytes"], extra.get("macs", 0),
                       extra.get("fused", False), extra.get("operands", 1), p,
                       extra.get("enters", False))
    return None


# -- what a step did ----------------------------------------------------------------------------
def _size(v: Any) -> tuple[int, int]:
    """(elements, bytes) of an operand or result as a step holds it."""
    if v is None:
        return 0, 0
    flat = getattr(v, "flat", None)   # a cpusteps.Chunked: its float32 elements
    a = flat if isinstance(flat, np.ndarray) else np.asarray(v)
    return int(a.size), int(a.nbytes)


def _shape(v: Any) -> tuple[int, ...]:
    return tuple(np.shape(v)) if v is not None else ()


def _macs(op: str, inputs: Sequence[Any], out_elements: int, attrs: Mapping[str, Any]) -> int:
    """Multiply-accumulates of a MAC op (0 for the others)."""
    if op not in OPS or OPS[op][0] != "mac" or len(inputs) < 2:
        return 0
    a, w = _shape(inputs[0]), _shape(inputs[1])
    if not a or not w:
        return 0
    if op in ("LSTM", "GRU", "RNN") and len(inputs) > 2 and len(a) == 3 and len(w) == 3:
        return a[0] * a[1] * w[0] * w[1] * (w[2] + _shape(inputs[2])[-1])
    if op == "Attention":  # Q K^T and P V: per output element of Y, two products per key
        keys = w[-2] if len(w) == 4 else w[1]
        if len(inputs) > 4 and inputs[4] is not None:
            keys += _shape(inputs[4])[2]
        return 2 * out_elements * keys
    if op == "MsAttention":  # the QKV projection, then Q K^T and P V (keys = the sequence)
        if len(a) != 3 or len(w) != 2:
            return 0
        total = w[1]
        q, _, v = [int(n) for n in (attrs.get("qkv_hidden_sizes") or [total // 3] * 3)]
        return a[0] * a[1] * (a[2] * total + a[1] * (q + v))
    if op == "Einsum":  # every combination of the letters' values, once per pair
        from ..cpu.transformer import einsum_parse

        shapes = [_shape(v) for v in inputs]
        try:
            terms, _ = einsum_parse(str(attrs.get("equation", "")), [len(s) for s in shapes])
        except Exception:  # (a malformed equation: the kernel says why)
            return 0
        sizes = {c: d for t, s in zip(terms, shapes, strict=True) for c, d in zip(t, s,
                                                                                strict=True)}
        return math.prod(sizes.values()) * max(len(shapes) - 1, 1)
    if op in ("QLinearMatMul", "QLinearConv"):  # the weights are input 3
        w = _shape(inputs[3]) if len(inputs) > 3 else w
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        return out_elements * a[-1]
    if op == "Gemm":
        return out_elements * (a[0] if attrs.get("transA") else a[-1])
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        return out_elements * math.prod(w[1:])
    if op == "VxFixedPoint":  # dvsdk.cpu.fixedpoint: conv/deconv OIHW, fc (K, O) weights
        return out_elements * (w[0] if attrs.get("kind") == "fc" else math.prod(w[1:]))
    return math.prod(a) * math.prod(w[1:])  # ConvTranspose: every input element, scattered


def step_work(op: str, attrs: Mapping[str, Any], inputs: Sequence[Any],
              outputs: Sequence[Any]) -> dict[str, Any]:
    """What a CPU step on the numpy path did, for :func:`step_us` (an event's ``extra``)."""
    sizes = [_size(v) for v in (*inputs, *outputs)]
    elements = max((n for n, _ in sizes), default=0)
    out_elements = max((_size(v)[0] for v in outputs), default=0)
    kind = op_cost(op)[0]
    if op in ("MaxPool", "AveragePool"):
        elements = out_elements * math.prod(attrs.get("kernel_shape") or [1])
    elif op == "LRN":
        elements *= int(attrs.get("size", 1))
    elif kind == "view":
        elements = 0
    nbytes = sum(b for _, b in sizes)
    if op == "Conv" and len(inputs) > 1 and outputs:
        # im2col: a float32 matrix of (output pixels) x (C/group x kernel) per group,
        # written and read once
        out, w = _shape(outputs[0]), _shape(inputs[1])
        if len(out) > 2 and len(w) > 1:
            pixels = math.prod(out) // out[1] if out[1] else 0
            nbytes += 8 * pixels * math.prod(w[1:]) * int(attrs.get("group", 1))
    return {"op": op, "elements": elements, "bytes": nbytes,
            "macs": _macs(op, inputs, out_elements, attrs), "fused": False}


def signature(values: Sequence[Any], arrays: frozenset) -> tuple | None:
    """(type, shape, dtype) of each operand (None for an absent one), or None when one is
    not of a type in ``arrays``: all :func:`step_work` reads of them.  (One comprehension:
    it runs twice per CPU step and run; a subclass counts as another type.)"""
    sig = tuple([None if v is None else (v.__class__, v.shape, v.dtype)
                 if v.__class__ in arrays else _OTHER for v in values])
    return None if _OTHER in sig else sig


_OTHER = object()  # (signature's mark of an operand of another type)


def step_work_once(memo: dict, pc: int, op: str, attrs: Mapping[str, Any],
                   inputs: Sequence[Any], outputs: Sequence[Any], arrays: frozenset
                   ) -> dict[str, Any]:
    """:func:`step_work` of program step ``pc``, kept in ``memo`` by the signatures of its
    operands and results (it reads only their types, shapes and dtypes: the same every run
    of a net); the memo's dict itself (the caller copies it into the run's event: it must
    not change it)."""
    sig = signature((*inputs, *outputs), arrays)  # (one pass; the count tells them apart)
    if sig is None:
        return step_work(op, attrs, inputs, outputs)
    key = (pc, len(inputs), sig)
    work = memo.get(key)
    if work is None:
        if len(memo) > 4096:
            memo.clear()
        work = memo[key] = step_work(op, attrs, inputs, outputs)
    return work


def fused_work(op: str, elements: int, other_elements: int | None) -> dict[str, Any]:
    """What a step on the compiled FP16 path did: ``elements`` in the result and the
    full-size operand, ``other_elements`` in the second operand (None: unary)."""
    operands = 1 if other_elements is None else 2
    nbytes = 2 * (2 * elements + (other_elements or 0))
    return {"op": op, "elements": elements, "bytes": nbytes, "macs": 0, "fused": True,
            "operands": operands}


# -- a whole run --------------------------------------------------------------------------------
@dataclass(frozen=True)
class BoardEstimate:
    """A run on the board, predicted (µs): the device time of the run (the simulator's
    cycle model on ``sim://``; measured on a board: ``device_predicted``), the CPU's
    work on one Cortex-A53 (CPU steps, packs, unpacks, the CPU's part of each hardware
    segment) and the cache syncs, by this module's model.  In sequence: this runtime
    overlaps none of them within a run."""

    device_us: float
    cpu_steps_us: float
    pack_us: float
    unpack_us: float
    kick_us: float
    sync_us: float
    device_predicted: bool = True
    steps: int = 0
    segments: int = 0
    syncs: int = 0
    sync_bytes: int = 0
    unmodeled: int = 0       # events whose work the model does not know (the IPU)
    cpu_mhz: float = DEFAULT.cpu_mhz
    run_us: float = 0.0      # the run's own bookkeeping (:func:`run_us`)

    @property
    def cpu_us(self) -> float:
        """Everything the A53 does: CPU steps, packs and unpacks, kicks and interrupts, and
        the run's bookkeeping."""
        return self.cpu_steps_us + self.pack_us + self.unpack_us + self.kick_us + self.run_us

    @property
    def total_us(self) -> float:
        return self.device_us + self.cpu_us + self.sync_us

    @property
    def fps(self) -> float:
        return 1e6 / self.total_us if self.total_us > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cpu_us": self.cpu_us, "total_us": self.total_us,
                "fps": self.fps}

    def lines(self) -> list[str]:
        """The total, then the three parts a line each, labelled."""
        f = format_us
        dev = "the simulator's cycle model" if self.device_predicted else "measured"
        return [f"{f(self.total_us)} per run, {self.fps:,.1f} FPS =",
                f"  device {f(self.device_us)} ({dev})",
                f"  + CPU {f(self.cpu_us)} on one Cortex-A53 at {self.cpu_mhz:g} MHz "
                f"(CPU steps {f(self.cpu_steps_us)}, pack/unpack "
                f"{f(self.pack_us + self.unpack_us)}, kick/wait {f(self.kick_us)}, "
                f"run {f(self.run_us)})",
                f"  + DMA syncs {f(self.sync_us)} ({self.syncs} syncs, {self.sync_bytes:,} bytes)"]

    def summary(self) -> str:
        """One line: the three parts, where each comes from, and the total."""
        f = format_us
        dev = "simulator" if self.device_predicted else "measured"
        return (f"device {f(self.device_us)} ({dev}) + CPU {f(self.cpu_us)} on a Cortex-A53 "
                f"at {self.cpu_mhz:g} MHz (CPU steps {f(self.cpu_steps_us)}, pack/unpack "
                f"{f(self.pack_us + self.unpack_us)}, kick/wait {f(self.kick_us)}, run "
                f"{f(self.run_us)}) + DMA syncs "
                f"{f(self.sync_us)} ({self.syncs} syncs) = {f(self.total_us)}, "
                f"{self.fps:,.1f} FPS")


def format_us(v: float) -> str:
    return f"{v / 1e3:.2f} ms" if v >= 1e3 else f"{v:.1f} us"


def estimate(events: Iterable[tuple[str, str, float, float, Mapping[str, Any]]],
             device_predicted: bool = True, p: BoardParams = DEFAULT) -> BoardEstimate:
    """The :class:`BoardEstimate` of a run's ``RunStats.events``."""
    parts = {"cpu": 0.0, "pack": 0.0, "unpack": 0.0, "sync": 0.0, "device": 0.0}
    device = 0.0
    steps = segments = syncs = sync_bytes = unmodeled = 0
    for kind, _, _, dur, extra in events:
        if kind == "device":
            device += float(extra.get("predicted_us", dur))
            segments += 1
        us = event_us(kind, extra, p)
        if us is None:
            unmodeled += kind in parts
            continue
        parts[kind] += us
        steps += kind == "cpu"
        if kind == "sync":
            syncs += 1
            sync_bytes += int(extra["bytes"])
    return BoardEstimate(device, parts["cpu"], parts["pack"], parts["unpack"], parts["device"],
                         parts["sync"], device_predicted, steps, segments, syncs, sync_bytes,
                         unmodeled, p.cpu_mhz, run_us(p) if steps or segments else 0.0)
