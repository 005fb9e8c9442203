"""Predicted DV700 time of each realistic network against an independent roofline (issue 27).

For every network of ``tests/realistic_nets.py`` (stand-ins of the networks users deploy:
EfficientNet-Lite0, YOLOv8n, PP-OCRv4 det/rec, PP-OCR's direction classifier, MTCNN P-Net,
and the MobileNetV3/DBNet nets of issue 14) this compiles the model, runs it once on
``sim://`` and prints:

* the simulator's predicted device time per run (its cycle model, ``dvsdk/hw/timing.py``)
  and the DRAM bytes its commands move;
* the roofline, computed here from the ONNX graph alone, independent of the compiler:
  ``max(MACs / 576, compulsory bytes / 16)`` cycles at 300 MHz, where MACs are the
  multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul (shapes from
  onnx's own shape inference), and the compulsory bytes are the FP16 weights of those ops
  plus the network's input and outputs, each moved once;
* their ratio (1.0: the device would do no better), and the number of commands and of
  device<->CPU transitions;
* a structural floor, also from the graph alone: the roofline's bytes plus what the
  DV700's structure forces through DRAM whatever the compiler does, ``max(MACs / 576,
  (compulsory + forced bytes) / 16)``.  Forced: every Conv/ConvTranspose output larger
  than the 512 KiB unified buffer (sim:// ``ub_size``) that is not a network output is
  written once and read back once (a command's whole output stays on chip only if it
  fits); every product of two activations (``Mul`` with no constant operand, as SiLU,
  HardSwish split in two and squeeze-excitation write it, and ``HardSwish``) of a tensor a
  conv made (and activations, pools and adds continued) needs the CPU,
  because the device multiplies by constants only (§4.2): its result, at least, goes to
  the CPU and comes back (written once, read once; smaller than the unified buffer, or
  it is already counted).  MatMuls of activations of rank 3 and more (attention) run on the
  CPU and are not in the floor (they are in the roofline, as issue 27 defines it: such a
  network's ratio understates its device's).  The floor ignores the per-command overhead
  and the depthwise convolutions' low MAC use.  It bounds whole-tensor schedules only
  (see :func:`segment_floor`): bands of columns chained on chip avoid the round trips
  (dvsdk makes them for a chain on an input of up to 8 channels);
* a geometry floor: the same bytes against the MAC array's shape instead of its MAC
  count, ``max(array cycles, (compulsory + forced bytes) / 16)``.  The array applies one
  72-slot weight block of each of 8 output channels to one output pixel a cycle
  (``firmware_spec``/``dvsdk/hw/timing.py``, from §11's 576 = 8 x 72 and the weight
  packing of §7.4/§8.1), so a conv costs at least ``output pixels x ceil(M / 8) x
  blocks(C, kernel)`` cycles whatever a compiler does: 3 input channels fill 3 of a 3x3
  block's 8 channel slots, 10 output channels 10 of 16 lanes.  Gemm/MatMul count as 1x1
  convs over their rows.  No whole-tensor schedule that runs each op as itself beats it
  (:func:`segment_floor` says which others do); ``/geom`` is how far the prediction is
  above it;
* a segment floor (:func:`segment_floor`): the geometry floor taken per device segment,
  the parts of the graph between the CPU's products of activations, since the device's MAC
  and DMA work can overlap within a command but not across a CPU step; ``+cmd`` adds the
  simulator's per-command overhead (an [AMBIG] placeholder, 1500 cycles) for the fewest
  commands each segment needs;
* ``any``: a bound of every schedule (:func:`segment_roofline`), bands and re-mapped ops
  included, as long as the CPU does the products of activations: per segment its MACs at
  full array use or its compulsory bytes, whichever is more, plus one command.

``target`` is issue 27's goal, 1.5x faster than the prediction when it was filed.  A
target below ``any`` cannot be met on the modelled hardware; one between ``any`` and
``+cmd`` only with schedules dvsdk does not make (bands on inputs of more than 8 channels,
re-mapped ops).
tests/test_bench_floors.py checks the floors on graphs worked out by hand and against every
network's compiled prediction.

Nothing here is timed on the host: the numbers are the same on every machine.

    python benchmarks/bench_predicted.py [--nets yolov8n,ppocr_rec] [--fuse-adds]
"""

from __future__ import annotations

import argparse
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import shape_inference

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dvsdk.compiler.build import compile as compile_model  # noqa: E402
from dvsdk.hw.timing import TimingParams  # noqa: E402
from dvsdk.netfile import program_shape  # noqa: E402
from dvsdk.runtime.net import Net  # noqa: E402
from tests.realistic_nets import NETWORKS, input_of  # noqa: E402

MACS_PER_CYCLE, BYTES_PER_CYCLE, CLOCK_MHZ = 576, 16, 300

#: each network's predicted device time (us) when issue 27 was filed (commit 0b71b06, the
#: same stand-ins); its goal is 1.5x faster, the ``target`` column
ISSUE_27_BEFORE_US = {"efficientnet_lite0": 7598, "yolov8n": 12635, "ppocr_det": 5164,
                      "ppocr_rec": 2330, "ppocr_cls": 513, "mtcnn_pnet": 438}


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    inferred = shape_inference.infer_shapes(model)
    out = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + \
            list(inferred.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if dims and all(d.dim_value > 0 for d in dims):
            out[vi.name] = tuple(d.dim_value for d in dims)
    for init in model.graph.initializer:
        out[init.name] = tuple(init.dims)
    return out


def node_macs(model: onnx.ModelProto, device_only: bool = False) -> dict[str, int]:
    """Multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul by node name;
    ``device_only``: without the MatMuls of activations of rank 3 and more (the attention
    blocks of a recognizer), which stay on the CPU."""
    shapes = _shapes(model)
    macs: dict[str, int] = {}
    for i, node in enumerate(model.graph.node):
        name = node.name or f"#{i}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Conv", "ConvTranspose"):
            w = shapes[node.input[1]]
            if node.op_type == "Conv":  # each output: Cin/group x kernel products
                macs[name] = math.prod(shapes[node.output[0]]) * w[1] * math.prod(w[2:])
            else:  # each input element: Cout/group x kernel products
                macs[name] = math.prod(shapes[node.input[0]]) * w[1] * math.prod(w[2:])
        elif node.op_type in ("Gemm", "MatMul"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            if device_only and len(a) > 2:
                continue
            k = a[-1] if not (node.op_type == "Gemm" and attrs.get("transA")) else a[0]
            macs[name] = math.prod(out) * k
    return macs


def roofline(model: onnx.ModelProto, device_only: bool = False) -> tuple[int, int, float]:
    """(MACs, compulsory bytes, roofline cycles) of ``model`` as the module docstring says;
    ``device_only`` as :func:`node_macs` says."""
    shapes = _shapes(model)
    consts = {i.name for i in model.graph.initializer}
    macs = sum(node_macs(model, device_only).values())
    weight_elems = 0
    for node in model.graph.node:
        if node.op_type in ("Conv", "ConvTranspose"):
            weight_elems += math.prod(shapes[node.input[1]])
        elif node.op_type in ("Gemm", "MatMul") and not (
                device_only and len(shapes[node.input[0]]) > 2):
            weight_elems += sum(math.prod(shapes[i]) for i in node.input[1:2] if i in consts)
    io = sum(math.prod(shapes[v.name]) for v in list(model.graph.input) +
             list(model.graph.output) if v.name in shapes)
    nbytes = 2 * (weight_elems + io)
    return macs, nbytes, max(macs / MACS_PER_CYCLE, nbytes / BYTES_PER_CYCLE)


#: ops that continue a conv's result on the device (its tensor stays "made by a conv")
_DEVICE_TAILS = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh", "Add",
                 "MaxPool", "AveragePool", "BatchNormalization"}


def floor(model: onnx.ModelProto, ub_size: int = 524288) -> float:
    """The structural floor in cycles, as the module docstring says."""
    macs, nbytes, _ = roofline(model, device_only=True)
    shapes = _shapes(model)
    consts = {i.name for i in model.graph.initializer}
    outputs = {v.name for v in model.graph.output}
    forced, device = 0, set()  # device: tensors a conv makes (then activations and adds)
    for node in model.graph.node:
        size = 2 * math.prod(shapes.get(node.output[0], (0,)))
        if node.op_type in ("Conv", "ConvTranspose") or (
                node.op_type in _DEVICE_TAILS and node.input[0] in device):
            device.add(node.output[0])
        if node.output[0] in outputs:
            continue
        if node.op_type in ("Conv", "ConvTranspose") and size > ub_size:
            forced += 2 * size
        elif (node.op_type == "HardSwish" or node.op_type == "Mul" and not any(
                i in consts for i in node.input)) and any(i in device for i in node.input):
            forced += 2 * size if size <= ub_size else 0
    return max(macs / MACS_PER_CYCLE, (nbytes + forced) / BYTES_PER_CYCLE)


def geometry_floor(model: onnx.ModelProto, ub_size: int = 524288) -> float:
    """The geometry floor in cycles: :func:`floor`'s bytes against :func:`array_cycles`."""
    macs, _, _ = roofline(model, device_only=True)
    cycles = floor(model, ub_size)
    byte_cycles = cycles if cycles > macs / MACS_PER_CYCLE else 0.0
    return max(float(array_cycles(model)), byte_cycles)


def _blocks(c: int, kh: int, kw: int) -> int:
    """72-slot weight blocks per output channel (§7.4: 64, 8, 2, 1 input channels for a
    1x1, 3x3, 5x5, 7x7 window); independent of dvsdk's own table."""
    per_block = {1: 64, 3: 8, 5: 2, 7: 1}[max(kh, kw) | 1]
    return -(-c // per_block)


def node_array_cycles(model: onnx.ModelProto, lanes: int = 8) -> dict[str, int]:
    """Cycles of the MAC array's geometry per node name, as the module docstring says
    (device ops only: without the MatMuls of activations of rank 3 and more).  Sibling
    convs (the same input, kernel, strides, pads and dilations; ungrouped) count as one with
    their output channels summed, since a compiler may merge them (dvsdk's heads pass
    does): the group's cycles go to its first node."""
    shapes = _shapes(model)
    consts = {i.name for i in model.graph.initializer}
    cycles: dict[str, int] = {}
    siblings: dict[tuple, tuple[str, int, int, int]] = {}
    for i, node in enumerate(model.graph.node):
        name = node.name or f"#{i}"
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type in ("Conv", "ConvTranspose"):
            w, out = shapes[node.input[1]], shapes[node.output[0]]
            group = int(attrs.get("group", 1))
            pixels = math.prod(out[:1] + out[2:])
            kh, kw = (w[2:] + (1, 1))[:2]
            dil = max(attrs.get("dilations", [1]))
            if node.op_type == "Conv" and group > 1 and w[1] == 1:  # depthwise: 1 block
                cycles[name] = pixels * -(-out[1] // lanes)
                continue
            c_g = w[1] if node.op_type == "Conv" else w[0] // group
            blocks = kh * kw * _blocks(c_g, 1, 1) if dil > 1 else _blocks(c_g, kh, kw)
            if group == 1:
                key = (node.op_type, node.input[0], tuple(w[2:]), str(sorted(attrs.items())))
                first, m, px, b = siblings.get(key, (name, 0, pixels, blocks))
                siblings[key] = (first, m + out[1], px, b)
                cycles.setdefault(name, 0)
            else:
                cycles[name] = pixels * group * -(-(out[1] // group) // lanes) * blocks
        elif node.op_type in ("Gemm", "MatMul"):
            a, out = shapes[node.input[0]], shapes[node.output[0]]
            if node.op_type == "MatMul" and len(a) > 2 and node.input[1] not in consts:
                continue
            k = a[-1] if not (node.op_type == "Gemm" and attrs.get("transA")) else a[0]
            cycles[name] = math.prod(out[:-1]) * -(-out[-1] // lanes) * _blocks(k, 1, 1)
    for first, m, px, b in siblings.values():
        cycles[first] = px * -(-m // lanes) * b
    return cycles


def array_cycles(model: onnx.ModelProto, lanes: int = 8) -> int:
    """Cycles of the MAC array's geometry for the whole network (:func:`node_array_cycles`
    summed)."""
    return sum(node_array_cycles(model, lanes).values())


#: element-wise functions of one tensor the CPU can compute as cheaply as the device
_UNARY = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "HardSigmoid", "Tanh"}

#: element-wise work on one tensor (with constants)
_ELEMENTWISE = _UNARY | {"Add", "Sub", "Mul", "Div", "BatchNormalization", "PRelu", "Elu"}

#: ops the DV700 runs (§4: convolutions, FC, pooling, element-wise add, upsampling,
#: activations; products and sums with constants fold into a conv's weights and bias)
_DEVICE = {"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "Add", "Sub",
           "Mul", "Div", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
           "Resize", "Upsample", "PRelu", "Elu", *_UNARY}

#: ops that join a conv's run (§4.1: [conv] -> [add] -> [pool | upsample] -> [activation])
_RUN_TAILS = _DEVICE_TAILS | {"Resize", "Upsample", "PRelu", "Elu", "Sub", "Mul", "Div"}

#: element-wise ops of two tensors: the device takes the second as the addend (§4.4)
_BINARY = {"Add", "Sub", "Mul", "Div"}

#: ops whose outputs are parts of their first input's bytes
_SLICES = {"Split", "Slice"}

#: ops that move no bytes and keep them all: a reshape is a view, a concatenation places
#: its inputs side by side in memory
_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat"}


def _segments(model: onnx.ModelProto, ub_size: int) -> list[dict[str, float]]:
    """The device segments of ``model`` (:func:`segment_floor`'s docstring), each as
    ``macs``, ``array`` (cycles), ``bytes`` (compulsory), ``forced`` (bytes of run results
    over the unified buffer a device op reads) and ``commands`` (the extra commands those
    need)."""
    shapes = _shapes(model)
    consts = {i.name for i in model.graph.initializer} | {
        o for node in model.graph.node if node.op_type == "Constant" for o in node.output}
    outputs = {v.name for v in model.graph.output}
    nodes = [(node.name or f"#{i}", node) for i, node in enumerate(model.graph.node)
             if node.op_type != "Constant"]
    by_name = dict(nodes)
    made_by = {out: name for name, node in nodes for out in node.output}
    users: dict[str, list[str]] = {}
    for name, node in nodes:
        for t in node.input:
            users.setdefault(t, []).append(name)

    def size(t: str) -> int:
        return 2 * math.prod(shapes.get(t, (0,)))

    def data_inputs(node: onnx.NodeProto) -> list[str]:
        return [t for t in node.input if t and t not in consts]

    cpu, free, device_made = set(), set(), set()
    for name, node in nodes:  # floor()'s rule, in graph order
        if node.op_type in ("Conv", "ConvTranspose") or (
                node.op_type in _DEVICE_TAILS and node.input[0] in device_made):
            device_made.update(node.output)
        if node.op_type == "HardSwish" or (
                node.op_type == "Mul" and len(data_inputs(node)) == 2
                and any(i in device_made for i in node.input)) or (
                node.op_type == "MatMul" and len(shapes.get(node.input[0], ())) > 2
                and node.input[1] not in consts):
            cpu.add(name)

    def kind(name: str | None) -> str:
        if name is None:
            return "input"
        if name in cpu:
            return "cpu"
        if name in free or by_name[name].op_type not in _DEVICE:
            return "other"
        return "device"

    for name, node in reversed(nodes):  # element-wise work only the CPU uses: the CPU's
        outs = [u for o in node.output for u in users.get(o, [])]
        if not outs or node.op_type not in _ELEMENTWISE or len(data_inputs(node)) != 1:
            continue
        if all(u in cpu for u in outs):
            cpu.add(name)        # the device sends its input instead: the same bytes
        elif all(kind(u) != "device" for u in outs) and all(
                kind(made_by.get(t)) in ("cpu", "input") for t in data_inputs(node)):
            free.add(name)       # between CPU ops (a scale before a softmax): not device work

    def sources(t: str) -> set[str]:
        """The tensors made by real ops (or given as input) whose bytes ``t`` is."""
        src = made_by.get(t)
        if src is not None and by_name[src].op_type in _VIEWS:
            return set().union(*(sources(i) for i in by_name[src].input if i not in consts))
        return {t}

    def origin(s: str) -> str:
        """:func:`kind` of what made ``s``, seen through slices: a part of a tensor from
        the CPU or the input is such a tensor's bytes too (its own size)."""
        src = made_by.get(s)
        if src is not None and by_name[src].op_type in _SLICES:
            kinds = {origin(t) for t in sources(by_name[src].input[0])}
            return kinds.pop() if len(kinds) == 1 else "other"
        return kind(src)

    def device_reads(t: str, main: bool = False) -> bool:
        """Whether a device op reads ``t`` (through views); ``main``: as its main input,
        which a command takes from its input tensor (an add may take it as its addend)."""
        return any(kind(u) == "device" and not (main and by_name[u].op_type in _BINARY)
                   or by_name[u].op_type in _VIEWS
                   and any(device_reads(o, main) for o in by_name[u].output)
                   for u in users.get(t, []))

    def run_end(t: str) -> str:
        """The tensor a conv's run ends with: the conv's output carried through the ops
        that join its run (§4.1: add, pooling or upsampling, activation) while each is the
        tensor's only reader."""
        while len(users.get(t, [])) == 1:
            u = by_name[users[t][0]]
            if kind(users[t][0]) != "device" or u.op_type not in _RUN_TAILS or \
                    (u.op_type not in _BINARY and u.input[0] != t):
                break
            t = u.output[0]
        return t

    parent = {name: name for name, _ in nodes if name not in cpu}

    def find(a: str) -> str:
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for name, node in nodes:
        if name in cpu:
            continue
        for t in data_inputs(node):
            src = made_by.get(t)
            if src is not None and src not in cpu:
                parent[find(name)] = find(src)
            for u in users.get(t, []):  # readers of one tensor may share a command
                if u not in cpu:
                    parent[find(u)] = find(name)
    sent: set[str] = set()  # device-made tensors the CPU reads: its costliest operand
    for name in cpu:
        costs = [{s for s in sources(t) if kind(made_by.get(s)) == "device"}
                 for t in data_inputs(by_name[name])]
        if costs:
            sent |= max(costs, key=lambda ts: sum(size(t) for t in ts))
    macs = node_macs(model, device_only=True)
    cycles = node_array_cycles(model)
    segs: dict[str, dict[str, float]] = {}
    read: set[tuple[str, str]] = set()
    for name, node in nodes:
        if kind(name) != "device":
            continue
        root = find(name)
        seg = segs.setdefault(root, dict.fromkeys(
            ("macs", "array", "bytes", "forced", "commands"), 0))
        seg["macs"] += macs.get(name, 0)
        seg["array"] += cycles.get(name, 0)
        if node.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            seg["bytes"] += sum(size(t) for t in node.input[1:] if t in consts)
        for t in node.output:
            if t in outputs or t in sent:
                seg["bytes"] += size(t)
            end = run_end(t) if node.op_type in ("Conv", "ConvTranspose") else None
            if end is not None and size(end) > ub_size and end not in outputs \
                    and device_reads(end):
                seg["forced"] += size(end) if end in sent else 2 * size(end)
                seg["commands"] += device_reads(end, main=True)
        for t in data_inputs(node):
            for s in sources(t):
                if origin(s) in ("input", "cpu") and (root, s) not in read:
                    read.add((root, s))
                    seg["bytes"] += size(s)
    return [s for s in segs.values() if s["array"] or s["bytes"] or s["forced"]]


def segment_floor(model: onnx.ModelProto, ub_size: int = 524288,
                  command_overhead: int = 0) -> float:
    """The segment floor in cycles of whole-tensor schedules: the geometry floor taken per
    device segment.

    The ops the device cannot do (:func:`floor`'s products of two activations, HardSwish,
    attention MatMuls; and element-wise work of one tensor whose every consumer is such an
    op, which the CPU then does itself, so that the device sends the fewest bytes) cut the
    graph into device segments: ops joined through the tensors one makes for another, or
    reading the same tensor (they may share a command).  The device runs one command at a
    time and a command reads one input tensor, so MAC and DMA work overlap within a segment
    at best, never across the CPU step between two.  Each segment costs at least
    ``max(array cycles, bytes / 16)``: its array cycles (:func:`node_array_cycles`) and
    the bytes of its weights, of each tensor it reads from the network's input or the CPU
    (once; a slice of one is its own bytes), of each tensor it writes for the CPU or as a
    network output (once; a CPU op is sent only its costliest operand), and of each conv
    run's result (the conv's output through the add, pooling, upsampling and activation of
    its run) over the unified buffer that a device op reads (written and read once, as
    :func:`floor` says).  Every other op (transposes, softmax, normalisations; element-wise
    work with constants between CPU ops) joins the segments around it and costs nothing.
    ``command_overhead``: cycles per command a segment needs at least (the simulator's
    model charges each command ``TimingParams.command_overhead``, an [AMBIG] placeholder):
    one, and one more for each such run result a device op reads back as its main input,
    since a command reads one input tensor (§4.1) and the command that reads it back cannot
    be the one that wrote it, nor the segment's first.

    **A bound of whole-tensor schedules only**, as DMP's converter makes them: every
    command reads and writes whole tensors in the §1 layout, and each op runs as itself (a
    ConvTranspose in deconvolution mode, a grouped or dilated conv as such).  Other
    schedules beat it (found by review, each run on sim://): bands of columns chained
    through the unified buffer (a band of a tensor of up to 8 channels is contiguous, §1;
    wider ones in a band-major layout) avoid the round trips it counts -- dvsdk's compiler
    makes them for a chain on an input of up to 8 channels (:mod:`dvsdk.compiler.bands`,
    EfficientNet-Lite0's stem), not on wider ones;
    a ConvTranspose whose stride equals its kernel runs as one 1x1 conv per output phase;
    a grouped conv with under 8 outputs a group as a block-diagonal dense one; a dilated
    conv on its input's phases in batch mode; a CPU re-layout between commands packs
    P-Net's 10-channel conv into full lanes.  :func:`segment_roofline` bounds them all."""
    return float(sum(max(s["array"], (s["bytes"] + s["forced"]) / BYTES_PER_CYCLE)
                     + (1 + s["commands"]) * command_overhead
                     for s in _segments(model, ub_size)))


def segment_roofline(model: onnx.ModelProto, command_overhead: int = 0) -> float:
    """A lower bound in cycles of every schedule of the modelled hardware that leaves the
    products of two activations, HardSwish and attention MatMuls to the CPU: per device
    segment (:func:`segment_floor`), ``max(MACs / 576, compulsory bytes / 16)`` plus one
    ``command_overhead``; no byte of a tensor inside a segment is counted (a schedule may
    keep any of it on chip, in bands) and every MAC is assumed to use the array fully."""
    return float(sum(max(s["macs"] / MACS_PER_CYCLE, s["bytes"] / BYTES_PER_CYCLE)
                     + command_overhead for s in _segments(model, 524288)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nets", default=",".join(NETWORKS),
                    help="comma-separated subset of " + ", ".join(NETWORKS))
    ap.add_argument("--fuse-adds", action="store_true",
                    help="compile with fuse_adds (dvsdk-compile --fuse-adds: changes results)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"{'network':19s} {'GMAC':>7s} {'MB min':>7s} {'roofline us':>12s} "
          f"{'predicted us':>13s} {'ratio':>7s} {'floor us':>9s} {'/floor':>7s} {'DRAM MB':>8s} "
          f"{'geom us':>8s} {'/geom':>6s} {'seg us':>7s} {'/seg':>6s} {'+cmd us':>8s} "
          f"{'/+cmd':>6s} {'any us':>7s} {'target us':>9s} {'cmds':>5s} {'switches':>9s}")
    for name in args.nets.split(","):
        build, size = NETWORKS[name]
        model = build(size)
        macs, nbytes, cycles = roofline(model)
        netfile = compile_model(model, golden=False, fuse_adds=args.fuse_adds)
        with Net(netfile, "sim://") as net:
            net.run(input_of(name))
            st = net.last_run
            moved = sum(int(r.get("bytes") or 0) for r in net.profile(input_of(name))
                        if r.get("where") != "cpu")
        roof_us = cycles / CLOCK_MHZ
        floor_us = floor(model) / CLOCK_MHZ
        geom_us = geometry_floor(model) / CLOCK_MHZ
        seg_us = segment_floor(model) / CLOCK_MHZ
        overhead = TimingParams().command_overhead
        cmd_us = segment_floor(model, command_overhead=overhead) / CLOCK_MHZ
        any_us = segment_roofline(model, command_overhead=overhead) / CLOCK_MHZ
        ps = program_shape(netfile.meta)
        before = ISSUE_27_BEFORE_US.get(name)
        target = f"{before / 1.5:9.1f}" if before else f"{'-':>9s}"
        print(f"{name:19s} {macs / 1e9:7.3f} {nbytes / 1e6:7.2f} {roof_us:12.1f} "
              f"{st.device_us:13.1f} {st.device_us / roof_us:6.2f}x "
              f"{floor_us:9.1f} {st.device_us / floor_us:6.2f}x "
              f"{moved / 1e6:8.2f} {geom_us:8.1f} {st.device_us / geom_us:5.2f}x "
              f"{seg_us:7.1f} {st.device_us / seg_us:5.2f}x "
              f"{cmd_us:8.1f} {st.device_us / cmd_us:5.2f}x {any_us:7.1f} {target:9s} "
              f"{netfile.meta['stats']['commands']:5d} {ps.transitions:9d}")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
