"""Element-wise tails of a device tensor as one CPU table lookup (issue 27).

The DV700 multiplies a tensor only by constants (reference §4.2), so SiLU ``y * sigmoid(y)``
and HardSwish ``y * hardsigmoid(y)`` (as YOLOv8 and PaddleOCR export them) cannot finish
on the device: lowering gives a stand-alone activation command for the sigmoid (which
reads ``y`` back from DRAM and writes ``sigmoid(y)``) and a CPU step for the product,
which reads both.  Every element of the product is a function of one FP16 value ``y``
alone, so it takes at most 65,536 values: this pass tabulates it at compile time and
replaces the whole tail (the activation commands and the CPU steps) by one CPU step,
``Fp16Table(y, table)``: ``table[bits of y]`` (firmware_spec/netbin.md).  The device
writes ``y`` once and no longer reads it back; the CPU gathers instead of computing.

The table is made by running the tail itself on every binary16 value: each activation
command through the device's arithmetic (:mod:`dvsdk.hw.activation`, rounded to binary16;
firmware_spec/arithmetic.md), each CPU step through its CPU kernel
(:func:`dvsdk.cpu.ops.run_op`) with the attributes and constants the net.bin gives the
runtime.  The lookup therefore gives the bits the tail gave, on the simulator and on
the CPU (``tests/test_compile_table.py`` compares whole networks with and without it).
On a board it replaces the hardware's own sigmoid curve, which the sources leave
unspecified ([AMBIG] §4.5), by the simulator's.

A tail qualifies when it starts at a tensor a command writes (so it holds binary16
values), consists of CPU steps of :data:`TABLE_OPS` and of activation-only commands,
reads nothing else but constants of one element, keeps the shape, and has one result
that anything outside it reads; at least one of its units must be a CPU step (a tail
of commands alone stays on the device).  ``Options.tables = False``
(``dvsdk-compile --no-tables``) keeps the ops as they are.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ..cpu import ops as cpu_ops
from ..hw.activation import activation, rectify
from ..hw.fp16 import fp16_value, round_f16, to_f32
from ..runtime.records import decode_attr, encode_attr
from .ir import Op
from .program import CpuStep, HwCmd, HwStep, Program, as_steps, unit_io

#: CPU ops a table may replace: element-wise, and computed with exactly rounded IEEE
#: operations or the fixed float64 sequences of :mod:`dvsdk.hw.elementary`, so the
#: kernel gives each element the same bits in a 65,536-vector as in a tensor
TABLE_OPS = frozenset({
    "Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Clip", "HardSigmoid", "HardSwish",
    "Neg", "Abs", "Sqrt", "Exp", "Log", "Reciprocal", "Softsign", "Identity",
    "Add", "Sub", "Mul", "Div",
})
#: the op type of the lookup step (dvsdk.cpu.ops)
TABLE_OP = "Fp16Table"

Unit = HwCmd | CpuStep


def _activation_only(cmd: HwCmd) -> bool:
    """One run that only applies an activation (no conv, pool, LRN or addend)."""
    if len(cmd.runs) != 1 or cmd.topo != 1 or cmd.eltwise or cmd.blobs != [None]:
        return False
    r = cmd.runs[0]
    return not (r.conv_enable or r.pool_enable or r.lrn) and r.actfunc not in (0, 4)


def _all_fp16() -> np.ndarray:
    """Every binary16 value, by bit pattern, as float32."""
    return to_f32(np.arange(1 << 16, dtype=np.uint16).view(np.float16))


def tabulate(program: Program) -> Program:
    """``program`` with every qualifying element-wise tail (module docstring) replaced by
    one :data:`TABLE_OP` CPU step."""
    units: list[Unit] = [u for s in program.steps
                         for u in (s.commands if isinstance(s, HwStep) else [s])]
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for i, u in enumerate(units):
        ins, outs = unit_io(u)
        for t in ins:
            readers.setdefault(t, []).append(i)
        for t in outs:
            producer[t] = i
    g = program.graph
    pinned = set(g.outputs) | set(program.aliases)
    pinned |= {base for base, _ in program.aliases.values()}
    taken: set[int] = set()
    replace: dict[int, CpuStep] = {}
    tables: dict[str, str] = {}
    report: dict[str, str] = {}
    for i, u in enumerate(units):
        if not isinstance(u, HwCmd) or u.output not in program.device or i in taken:
            continue
        tail = _tail(u.output, units, readers, producer, taken, g)
        found = _result(tail, u.output, units, readers, pinned, g) if tail else None
        if found is None:
            continue
        z, last = found
        with np.errstate(all="ignore"):  # (every NaN and inf among the inputs)
            table = _evaluate(u.output, sorted(tail), units, z, g)
        key = hashlib.sha256(table.tobytes()).hexdigest()
        if key not in tables:
            tables[key] = g.add_const("fp16_table", table)
        names = [n for k in sorted(tail) for n in _names(units[k])]
        op = Op(TABLE_OP, names[-1] + "/table", [u.output, tables[key]], [z],
                {"ops": " > ".join(_types(units[k]) for k in sorted(tail))})
        replace[last] = CpuStep(op)
        taken |= tail
        for n in names:
            report[n] = f"table lookup {op.attrs['ops']} of {u.output} (one CPU step)"
    if not replace:
        return program
    kept: list[Unit] = []
    dropped: set[str] = set()
    for i, u in enumerate(units):
        if i in taken and i not in replace:
            dropped.update(t for t in unit_io(u)[1])
            continue
        kept.append(replace.get(i, u))
    steps = as_steps(kept)
    device = {n: v for n, v in program.device.items() if n not in dropped}
    rep = [dict(r, where="cpu", detail=report[r["op"]]) if r["op"] in report else r
           for r in program.report]
    samples = {n: k for n, k in program.samples.items() if n not in dropped}
    return Program(g, steps, device, program.aliases, rep, samples)


def _names(u: Unit) -> list[str]:
    return list(u.sources) if isinstance(u, HwCmd) else [u.op.name]


def _types(u: Unit) -> str:
    return "device " + u.kind.removeprefix("activation ") if isinstance(u, HwCmd) \
        else u.op.type


def _scalar_const(g, name: str) -> bool:
    c = g.const(name)
    return c is not None and np.asarray(c).size == 1 and np.asarray(c).dtype == np.float32


def _tail(y: str, units: list[Unit], readers: dict[str, list[int]],
          producer: dict[str, int], taken: set[int], g) -> set[int]:
    """The units that compute element-wise from ``y`` alone (and one-element constants)."""
    shape = g.shape(y)
    have, tail, work = {y}, set(), [y]
    while work:
        t = work.pop()
        for k in readers.get(t, []):
            if k in tail or k in taken:
                continue
            u = units[k]
            ins, outs = unit_io(u)
            if isinstance(u, HwCmd):
                # a command reads binary16: only what a command of the tail wrote
                ok = _activation_only(u) and ins[0] in have and (
                    ins[0] == y or isinstance(units[producer[ins[0]]], HwCmd))
            else:
                ok = (u.op.type in TABLE_OPS and len(outs) == 1
                      and all(n in have or _scalar_const(g, n) for n in ins)
                      and any(n in have for n in ins))
            if not ok or g.shape(outs[0]) != shape or \
                    np.dtype(g.tensors[outs[0]].dtype or np.float32) != np.float32:
                continue
            tail.add(k)
            have.add(outs[0])
            work.append(outs[0])
    return tail if any(isinstance(units[k], CpuStep) for k in tail) else set()


def _result(tail: set[int], y: str, units: list[Unit], readers: dict[str, list[int]],
            pinned: set[str], g) -> tuple[str, int] | None:
    """The tail's one result (read outside it, a graph output, or a view's or concat's
    slot) and the unit writing it; None when there are several."""
    made = {unit_io(units[k])[1][0]: k for k in tail}
    # (a view's base or a concat member is read through other names: it counts as read)
    results = [t for t in made if t in pinned
               or any(r not in tail for r in readers.get(t, []))]
    if len(results) != 1:
        return None
    z = results[0]  # the lookup writes the slot its last op wrote
    return z, made[z]


def _as_stored(attrs: dict) -> dict:
    """The attributes as the runtime takes them from net.bin (through its JSON)."""
    return {k: decode_attr(json.loads(json.dumps(encode_attr(v)))) for k, v in attrs.items()}


def _evaluate(y: str, order: list[int], units: list[Unit], z: str, g) -> np.ndarray:
    """The tail run on every binary16 value of ``y``: float32, one value per bit pattern."""
    v = {y: _all_fp16()}
    for k in order:
        u = units[k]
        if isinstance(u, HwCmd):
            r = u.runs[0]
            t = activation(v[u.input], r.actfunc, fp16_value(r.actfunc_param))
            v[u.output] = round_f16(rectify(t) if r.rectifi_en else t)
            continue
        args = [v[n] if n in v else np.asarray(g.const(n)) if n else None
                for n in u.op.inputs]
        (v[u.op.outputs[0]],) = cpu_ops.run_op(u.op.type, args, _as_stored(u.op.attrs))[:1]
    out = np.asarray(v[z], np.float32)
    return np.ascontiguousarray(out.reshape(-1))

