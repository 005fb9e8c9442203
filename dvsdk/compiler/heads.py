"""Output heads and patch embeddings in shapes the DV700 computes (issues 27, 28): graph
passes.

=======================  ==================================================================
pass                     effect
=======================  ==================================================================
merge_sibling_heads      Convs with the same input and window whose results only leave the
                         device (graph outputs, Softmax) -> one Conv with their kernels one
                         after another + a Split: one read of the input instead of one per
                         head, and a single consumer, so the conv before can chain into it
                         through the unified buffer (MTCNN's P-Net: face score and box)
deconv_to_pixels         ConvTranspose with kernel == stride, no padding, whose result (or
                         an element-wise activation of it) only leaves the device -> a 1x1
                         Conv to M·s² channels + DepthToSpace (CRD) on the CPU: each output
                         pixel takes exactly one tap, so the DV700 runs a 1x1 conv on the
                         input pixels instead of an s x s window over the zero-inserted
                         output (DBNet's probability map: 16 -> 1 channel at full size)
deconv_to_phases         a kernel == stride ConvTranspose (+ activation) read only by such a
                         head -> per output phase, its tap's 1x1 Conv (+ activation) and
                         the head's conv, chained on chip over the input's pixels, the
                         phases interleaved on the CPU (DBNet's 2x2/2 + 2x2/2 head: 4
                         short chains instead of a deconvolution over the zero-inserted map)
patchify_to_pixels       Conv with kernel == stride larger than the DV700's 7x7 (a vision
                         transformer's 16x16/16 patch embedding), no padding -> SpaceToDepth
                         on the CPU + a 1x1 Conv over the k·k·C channels of each patch
=======================  ==================================================================

The first three keep every bit (tests/test_compile_heads.py): a merged conv's output channel is
the same sum as the head's own (firmware_spec/arithmetic.md sums per output channel), the
split, the DepthToSpace and the phases' interleave only move values, and a kernel ==
stride deconv's sum over the zero-inserted window adds, besides the one live tap, only the
exact zeros of inserted pixels (products with finite weights: the passes require finite
FP16 weights).  The
third moves a conv the DV700 cannot run (the kernel) from the CPU to the device: its sums
are then the device's (firmware_spec/arithmetic.md; SpaceToDepth puts the taps in the
device's order, row-major taps, channels ascending within each), within FP16 tolerance of
the CPU's.
"""

from __future__ import annotations

import numpy as np

from .fold import infer_shapes
from .ir import Graph, Op

__all__ = ["merge_sibling_heads", "deconv_to_pixels", "deconv_to_phases", "HEAD_PASSES"]

#: ops that run on the CPU whatever their input: a result read only by them (or a graph
#: output) leaves the device anyway, so how the device lays it out is free
_LEAVES = frozenset({"Softmax", "LogSoftmax"})
_ELEMENTWISE_TAIL = frozenset({"Sigmoid", "Relu", "Tanh"})


def _leaves(g: Graph, tensor: str, cons: dict[str, list[Op]]) -> bool:
    readers = cons.get(tensor, [])
    return (tensor in g.outputs or bool(readers)) and all(r.type in _LEAVES for r in readers)


def _finite_fp16(w: np.ndarray) -> bool:
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.asarray(w, np.float32).astype(np.float16)).all())


def merge_sibling_heads(graph: Graph) -> Graph:
    """Sibling head convs -> one conv + Split (module docstring)."""
    g = infer_shapes(graph)
    cons = g.consumers()
    groups: dict[tuple, list[Op]] = {}
    for op in g.ops:
        if op.type != "Conv" or int(op.attrs.get("group", 1)) != 1 or len(op.outputs) != 1:
            continue
        w = g.const(op.input(1))
        if w is None or (op.input(2) and g.const(op.input(2)) is None) or \
                not _finite_fp16(w) or not _leaves(g, op.outputs[0], cons):
            continue
        key = (op.inputs[0], tuple(w.shape[1:]), w.dtype.str,
               tuple(sorted((k, str(v)) for k, v in op.attrs.items())))
        groups.setdefault(key, []).append(op)
    for ops in groups.values():
        if len(ops) < 2:
            continue
        ws = [np.asarray(g.const(o.input(1))) for o in ops]
        bs = [np.asarray(g.const(o.input(2))) if o.input(2) else np.zeros(w.shape[0], w.dtype)
              for o, w in zip(ops, ws)]
        first = ops[0]
        merged = g.add_tensor(f"{first.name}_heads")
        conv = Op("Conv", g.unique_name(f"{first.name}_heads"),
                  [first.inputs[0], g.add_const(f"{first.name}_heads_w", np.concatenate(ws)),
                   g.add_const(f"{first.name}_heads_b", np.concatenate(bs))],
                  [merged], dict(first.attrs), first.origin)
        sizes = g.add_const(f"{first.name}_heads_split",
                            np.array([w.shape[0] for w in ws], np.int64))
        split = Op("Split", g.unique_name(f"{first.name}_heads_split"), [merged, sizes],
                   [o.outputs[0] for o in ops], {"axis": 1}, first.origin)
        g.replace_op(first, [conv, split])
        for o in ops[1:]:
            g.ops.remove(o)
    g.dead_code_elimination()
    return infer_shapes(g.topo_sort())


def _pixel_deconv(g: Graph, op: Op) -> tuple[np.ndarray, np.ndarray | None, int] | None:
    """(weights, bias, stride) of a ConvTranspose each output pixel of which takes exactly
    one tap (kernel == stride, square, no padding, dilation or groups; finite FP16
    weights), else None."""
    a = op.attrs
    w = g.const(op.input(1))
    b = g.const(op.input(2)) if op.input(2) else None
    ks = [int(k) for k in a.get("kernel_shape", w.shape[2:] if w is not None else [])]
    st = [int(s) for s in a.get("strides", [1, 1])]
    if (w is None or w.ndim != 4 or (op.input(2) and b is None)
            or int(a.get("group", 1)) != 1 or len(ks) != 2 or ks != st or ks[0] != ks[1]
            or ks[0] < 2 or any(int(p) for p in a.get("pads", [0, 0, 0, 0]))
            or any(int(p) for p in a.get("output_padding", [0, 0]))
            or any(int(d) != 1 for d in a.get("dilations", [1, 1]))
            or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
            or a.get("output_shape") or not _finite_fp16(w)):
        return None
    return np.asarray(w), b, ks[0]


def _origin(op: Op) -> str:
    """What a rewritten op stems from, "<type> <name>" (a frontend's own origin, else the
    model's op): ``--quantize-skip`` and the report name it so."""
    return op.origin or f"{op.type} {op.name}"


def _tail(g: Graph, y: str, cons: dict[str, list[Op]]) -> list[Op]:
    """The element-wise activation that alone reads ``y`` (a list of 0 or 1 op)."""
    readers = cons.get(y, [])
    if len(readers) == 1 and y not in g.outputs and readers[0].type in _ELEMENTWISE_TAIL:
        return readers
    return []


def deconv_to_pixels(graph: Graph) -> Graph:
    """Kernel == stride ConvTranspose heads -> 1x1 Conv + DepthToSpace (module docstring)."""
    g = infer_shapes(graph)
    cons = g.consumers()
    for op in [o for o in g.ops if o.type == "ConvTranspose"]:
        found = _pixel_deconv(g, op)
        if found is None:
            continue
        w, b, _ = found
        y = op.outputs[0]
        tail = _tail(g, y, cons)
        end = tail[0].outputs[0] if tail else y
        if not _leaves(g, end, cons):
            continue
        s = found[2]
        cin, m = w.shape[0], w.shape[1]
        # out[m, h*s + i, w*s + j] = sum_c x[c, h, w] W[c, m, i, j] + b[m]
        # = channel m*s*s + i*s + j of a 1x1 conv, DepthToSpace CRD puts it there
        w1 = np.ascontiguousarray(np.asarray(w).transpose(1, 2, 3, 0).reshape(m * s * s, cin,
                                                                               1, 1))
        b1 = np.repeat(np.asarray(b if b is not None else np.zeros(m, w.dtype)), s * s)
        packed = g.add_tensor(f"{op.name}_pixels")
        conv = Op("Conv", g.unique_name(f"{op.name}_pixels"),
                  [op.inputs[0], g.add_const(f"{op.name}_pixels_w", w1.astype(w.dtype)),
                   g.add_const(f"{op.name}_pixels_b", b1.astype(w.dtype))], [packed],
                  {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                   "dilations": [1, 1], "group": 1}, _origin(op))
        if tail:
            act = tail[0]
            mid = g.add_tensor(f"{act.name}_pixels")
            new_act = Op(act.type, act.name, [packed], [mid], dict(act.attrs), act.origin)
            d2s = Op("DepthToSpace", g.unique_name(f"{op.name}_d2s"), [mid], [end],
                     {"blocksize": s, "mode": "CRD"}, op.origin)
            g.replace_op(op, [conv])
            g.replace_op(act, [new_act, d2s])
        else:
            d2s = Op("DepthToSpace", g.unique_name(f"{op.name}_d2s"), [packed], [end],
                     {"blocksize": s, "mode": "CRD"}, op.origin)
            g.replace_op(op, [conv, d2s])
        cons = g.consumers()
    g.dead_code_elimination()
    return infer_shapes(g)


def _pointwise_conv(g: Graph, op: Op) -> bool:
    """Whether ``op`` is a 1x1, stride-1, unpadded, ungrouped Conv of constant weights."""
    a = op.attrs
    w = g.const(op.input(1))
    return (op.type == "Conv" and w is not None and w.ndim == 4 and w.shape[2:] == (1, 1)
            and not (op.input(2) and g.const(op.input(2)) is None)
            and int(a.get("group", 1)) == 1
            and all(int(v) == 1 for v in a.get("strides", [1, 1]))
            and not any(int(v) for v in a.get("pads", [0, 0, 0, 0]))
            and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"))


def deconv_to_phases(graph: Graph) -> Graph:
    """Kernel == stride ConvTranspose (+ activation) read only by a head that
    :func:`deconv_to_pixels` made (1x1 Conv (+ activation) + DepthToSpace leaving the
    device) -> per output phase (i, j) of the deconvolution, the 1x1 Conv of its tap
    ``W[:, :, i, j]`` (+ activation) and the head's conv (+ activation), on the input's
    pixels; the phases' results side by side, interleaved by the CPU (Reshape, Transpose,
    Reshape) as the DepthToSpace did.  Each phase's sums are the deconvolution's (one live
    tap, as :func:`deconv_to_pixels` argues) and the head's, so every bit is kept; the
    device runs 1x1 convs on s² times fewer pixels instead of a window over the
    zero-inserted tensor, and keeps each phase's intermediate on chip (DBNet's and
    PP-OCR det's 2x2/2 + 2x2/2 heads)."""
    g = infer_shapes(graph)
    cons = g.consumers()
    for op in [o for o in g.ops if o.type == "ConvTranspose"]:
        found = _pixel_deconv(g, op)
        shape = g.shape(op.inputs[0])
        if found is None or shape is None or len(shape) != 4:
            continue
        w, b, s = found
        tail1 = _tail(g, op.outputs[0], cons)
        end1 = tail1[0].outputs[0] if tail1 else op.outputs[0]
        head = cons.get(end1, [])
        if end1 in g.outputs or len(head) != 1 or not _pointwise_conv(g, head[0]) \
                or head[0].inputs[0] != end1:
            continue
        conv2 = head[0]
        tail2 = _tail(g, conv2.outputs[0], cons)
        end2 = tail2[0].outputs[0] if tail2 else conv2.outputs[0]
        d2s = cons.get(end2, [])
        if end2 in g.outputs or len(d2s) != 1 or d2s[0].type != "DepthToSpace" \
                or d2s[0].attrs.get("mode", "DCR") != "CRD" or not _leaves(
                    g, d2s[0].outputs[0], cons):
            continue
        n, _, h, wd = (int(v) for v in shape)
        k, blk = int(g.const(conv2.input(1)).shape[0]), int(d2s[0].attrs["blocksize"])
        if k % (blk * blk):
            continue
        bias = np.asarray(b if b is not None else np.zeros(w.shape[1], w.dtype))
        new_ops, phases = [], []
        for i in range(s):
            for j in range(s):
                tag = f"{op.name}_phase{i}{j}"
                t = g.add_tensor(tag)   # (each new op is named as its fresh output)
                tap = np.ascontiguousarray(w[:, :, i, j].T[:, :, None, None])
                new_ops.append(Op("Conv", t, [
                    op.inputs[0], g.add_const(f"{tag}_w", tap.astype(w.dtype)),
                    g.add_const(f"{tag}_b", bias.astype(w.dtype))], [t],
                    {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                     "dilations": [1, 1], "group": 1}, _origin(op)))
                for act in (tail1, [conv2], tail2):
                    if act:
                        nxt = g.add_tensor(f"{tag}_{act[0].name}")
                        new_ops.append(Op(act[0].type, nxt, [t, *act[0].inputs[1:]], [nxt],
                                          dict(act[0].attrs), _origin(act[0])))
                        t = nxt
                phases.append(t)
        m = k // (blk * blk)
        joined, split, moved = (g.add_tensor(f"{op.name}_phases{x}") for x in ("", "_8d", "_t"))
        origin = d2s[0].origin
        new_ops += [
            Op("Concat", joined, phases, [joined], {"axis": 1}, origin),
            Op("Reshape", split, [joined, g.add_const(
                f"{op.name}_phases_8d", np.array([n, s, s, m, blk, blk, h, wd], np.int64))],
               [split], {}, origin),
            Op("Transpose", moved, [split], [moved], {"perm": [0, 3, 6, 1, 4, 7, 2, 5]},
               origin),
            Op("Reshape", d2s[0].name, [moved, g.add_const(
                f"{op.name}_interleaved", np.array([n, m, h * s * blk, wd * s * blk],
                                                   np.int64))],
               list(d2s[0].outputs), {}, origin)]
        for old in [*tail1, conv2, *tail2, d2s[0]]:
            g.replace_op(old, [])
        g.replace_op(op, new_ops)
        cons = g.consumers()
    g.dead_code_elimination()
    return infer_shapes(g)


#: the largest kernel side of a DV700 conv (reference §4.2; dvsdk.compiler.lower)
KERNEL_MAX = 7


def patchify_to_pixels(graph: Graph) -> Graph:
    """Kernel == stride Convs too large for the DV700 -> SpaceToDepth + 1x1 Conv (module
    docstring).  ``out[m, h, w] = sum_{c,i,j} x[c, h*k + i, w*k + j] W[m, c, i, j]``, and
    SpaceToDepth's channel ``(i*k + j)*C + c`` holds that tap."""
    g = infer_shapes(graph)
    for op in [o for o in g.ops if o.type == "Conv"]:
        a = op.attrs
        w = g.const(op.input(1))
        shape = g.shape(op.inputs[0])
        ks = [int(k) for k in a.get("kernel_shape", w.shape[2:] if w is not None else [])]
        st = [int(s) for s in a.get("strides", [1, 1])]
        if (w is None or w.ndim != 4 or shape is None or len(shape) != 4 or len(ks) != 2
                or ks != st or ks[0] != ks[1] or ks[0] <= KERNEL_MAX
                or (op.input(2) and g.const(op.input(2)) is None)
                or int(a.get("group", 1)) != 1
                or any(int(p) for p in a.get("pads", [0, 0, 0, 0]))
                or any(int(d) != 1 for d in a.get("dilations", [1, 1]))
                or a.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID")
                or shape[2] % ks[0] or shape[3] % ks[0]):
            continue
        k, (m, c) = ks[0], w.shape[:2]
        w1 = np.ascontiguousarray(np.asarray(w).transpose(0, 2, 3, 1).reshape(m, k * k * c,
                                                                               1, 1))
        cols = g.add_tensor(f"{op.name}_patches")
        s2d = Op("SpaceToDepth", g.unique_name(f"{op.name}_s2d"), [op.inputs[0]], [cols],
                 {"blocksize": k}, op.origin)
        conv = Op("Conv", op.name, [cols, g.add_const(f"{op.name}_patch_w", w1),
                                    *op.inputs[2:]], list(op.outputs),
                  {"kernel_shape": [1, 1], "strides": [1, 1], "pads": [0, 0, 0, 0],
                   "dilations": [1, 1], "group": 1}, op.origin)
        g.replace_op(op, [s2d, conv])
    g.dead_code_elimination()
    return infer_shapes(g)


#: run after the simplification passes (:data:`dvsdk.compiler.simplify.PASSES`)
HEAD_PASSES = [merge_sibling_heads, deconv_to_pixels, deconv_to_phases, patchify_to_pixels]
