"""Graph simplification passes: each a pure ``Graph -> Graph`` function.

Run them after :func:`dvsdk.compiler.fold.infer_and_fold` (they need shapes and explicit
attributes); :func:`optimize` runs the whole pipeline from a freshly loaded graph.

=======================  ==================================================================
pass                     effect
=======================  ==================================================================
remove_identity          drops Identity and Dropout (inference: both pass data through)
fold_pad                 constant zero spatial Pad -> pads of the following Conv, or of an
                         AveragePool with count_include_pad=1 (never MaxPool: its padding is
                         -inf, not 0)
canonicalize_gemm        Gemm with constant B -> B as [N, K] with transB=1, alpha folded into
                         B, beta into C, a per-column C as a 1-D [N] vector
matmul_to_gemm           MatMul(2-D A, constant 2-D B) [+ Add(constant bias)] -> Gemm;
                         rank >= 3 A: its rows as a one-row image, a 1x1 Conv over them
fold_batchnorm           BatchNormalization after Conv/ConvTranspose/Gemm (single consumer) ->
                         folded into its weights and bias (float64 math, then the weight dtype).
                         A BatchNormalization that cannot be folded stays a
                         ``BatchNormalization`` op (the lowering maps it to a depthwise 1x1 run)
fold_affine              constant per-channel Mul/Div/Add/Sub after a Conv/ConvTranspose/Gemm
                         -> its weights/bias; Mul/Div before a Conv -> its weights (exact with
                         any padding); Add/Sub before a Conv -> its bias, only when the Conv has
                         no padding (padded zeros would otherwise see the offset)
fold_hardsigmoid         HardSigmoid(a, b) after a Conv/ConvTranspose/Gemm (single consumer) ->
                         its weights and bias times 6a, plus 6b, then Clip(0, 6) (the DV700's
                         ReLU6); the 1/6 goes into the weights of the convs that read
                         MobileNetV3's squeeze-excitation Mul(x, s), else a constant Mul.
                         fold_affine runs before it as well as after: OpenVINO IR writes a
                         conv's bias as a separate Add between the conv and the HardSigmoid
normalize_clip           Clip with constant bounds -> ``Clip(x)`` with float attrs ``min``/
                         ``max`` (+-inf when absent); Clip(0, 6) is the ReLU6 marker
reduce_to_global_pool    ReduceMean / ReduceMax of a 4-D float tensor over exactly its spatial
                         axes (2, 3) -> GlobalAveragePool / GlobalMaxPool (keepdims=0: then a
                         Reshape to [N, C]); OpenVINO writes ONNX's global pools that way
split_grouped_conv       Conv with 1 < group < C_in -> Split + one Conv per group + Concat
                         (depthwise convs, group == C_in, are kept)
merge_sibling_heads,     output heads in cheaper shapes, patch embeddings in shapes the
deconv_to_pixels,        DV700 runs (:mod:`.heads`)
deconv_to_phases,
patchify_to_pixels
=======================  ==================================================================
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..cpu.nn import pool_output_shape
from ..errors import ModelError
from .fold import infer_and_fold, infer_shapes
from .heads import HEAD_PASSES
from .ir import Graph, Op

__all__ = [
    "remove_identity", "fold_pad", "canonicalize_gemm", "matmul_to_gemm", "fold_batchnorm",
    "fold_affine", "fold_hardsigmoid", "normalize_clip", "split_grouped_conv",
    "reduce_to_global_pool", "optimize",
    "PASSES",
]


# --------------------------------------------------------------------------- helpers
def _sole_reader(g: Graph, tensor: str, cons: dict[str, list[Op]]) -> Op | None:
    """The only op reading ``tensor`` (None if several, none, or it is a graph output)."""
    readers = cons.get(tensor, [])
    if len(readers) != 1 or tensor in g.outputs:
        return None
    return readers[0]


def _channel_vector(c: np.ndarray, out_shape: tuple[int, ...], axis: int = 1) -> np.ndarray | None:
    """Length-C float64 vector if ``c`` broadcast against ``out_shape`` varies only on ``axis``."""
    if c.ndim > len(out_shape) or len(out_shape) <= axis:
        return None
    cs = (1,) * (len(out_shape) - c.ndim) + tuple(c.shape)
    for i, (d, o) in enumerate(zip(cs, out_shape, strict=True)):
        if d != 1 and (i != axis or d != o):
            return None
    v = c.astype(np.float64).reshape(-1)
    return np.broadcast_to(v, (out_shape[axis],)).copy()


def _is_float(g: Graph, name: str) -> bool:
    dt = g.tensors[name].dtype if name in g.tensors else None
    return dt is not None and dt.kind == "f"


def _is_canonical_gemm(g: Graph, op: Op) -> bool:
    a = op.attrs
    return (g.is_const(op.inputs[1]) and a.get("transB", 0) == 1 and a.get("alpha", 1.0) == 1.0
            and a.get("beta", 1.0) == 1.0 and (not op.input(2) or g.is_const(op.input(2))))


def _foldable_producer(g: Graph, op: Op | None) -> bool:
    if op is None or op.type not in ("Conv", "ConvTranspose", "Gemm") \
            or not g.is_const(op.input(1)):
        return False
    if op.type in ("Conv", "ConvTranspose"):
        return not op.input(2) or g.is_const(op.input(2))
    return op.type == "Gemm" and _is_canonical_gemm(g, op)


def _n_out(g: Graph, op: Op) -> int:
    return int(g.shape(op.outputs[0])[1])


def _bias(g: Graph, op: Op) -> np.ndarray:
    """The producer's per-output-channel bias as float64 (zeros when absent)."""
    b = g.const(op.input(2))
    n = _n_out(g, op)
    if b is None:
        return np.zeros(n)
    return np.broadcast_to(b.astype(np.float64), np.broadcast_shapes(b.shape, (n,))).copy()


def _set_bias(g: Graph, op: Op, b: np.ndarray, dtype: np.dtype) -> None:
    name = g.add_const(f"{op.name}_bias", b.astype(dtype))
    while len(op.inputs) < 3:
        op.inputs.append("")
    op.inputs[2] = name


def _affine_producer(g: Graph, op: Op, scale: np.ndarray | None, shift: np.ndarray | None) -> None:
    """Make ``op``'s output ``y`` become ``y * scale + shift`` (per output channel)."""
    w = g.const(op.inputs[1])
    dtype = w.dtype
    b = _bias(g, op)
    if scale is not None:
        wd = w.astype(np.float64)
        if op.type == "Conv":
            wd = wd * scale.reshape((-1,) + (1,) * (w.ndim - 1))
        elif op.type == "ConvTranspose":
            grp = int(op.attrs.get("group", 1))
            cin, mg = w.shape[0], w.shape[1]
            wd = (wd.reshape(grp, cin // grp, mg, *w.shape[2:])
                  * scale.reshape(grp, 1, mg, *([1] * (w.ndim - 2)))).reshape(w.shape)
        else:  # canonical Gemm: B is [N, K]
            wd = wd * scale[:, None]
        op.inputs[1] = g.add_const(f"{op.name}_weight", wd.astype(dtype))
        b = b * scale
    if shift is not None:
        b = b + shift
    if scale is not None or shift is not None:
        _set_bias(g, op, b, dtype)


def _absorb(g: Graph, producer: Op, follower: Op) -> None:
    """``follower`` is now folded into ``producer``: producer writes follower's output."""
    old = producer.outputs[0]
    producer.outputs[0] = follower.outputs[0]
    g.ops.remove(follower)
    g.tensors.pop(old, None)


def _finish(g: Graph) -> Graph:
    g.dead_code_elimination()
    return infer_shapes(g)


# --------------------------------------------------------------------------- passes
def remove_identity(graph: Graph) -> Graph:
    """Remove Identity and Dropout ops (kept only where a graph output could not be renamed)."""
    g = graph.copy()
    for op in [o for o in g.ops if o.type in ("Identity", "Dropout")]:
        try:
            g.remove_op(op, rewire=True)
        except ModelError:
            continue
    g.dead_code_elimination()
    return g


def fold_pad(graph: Graph) -> Graph:
    """Fold constant-zero spatial Pads into following Convs / include-pad AveragePools."""
    g = infer_shapes(graph)
    cons = g.consumers()
    for pad in [o for o in g.ops if o.type == "Pad"]:
        x = pad.inputs[0]
        rank = len(g.shape(x))
        pads, value = g.const(pad.input(1)), g.const(pad.input(2))
        if (pads is None or (pad.input(2) and value is None) or pad.input(3)
                or pad.attrs.get("mode", "constant") != "constant" or rank < 3):
            continue
        if value is not None and value.size and float(value.ravel()[0]) != 0.0:
            continue
        p = [int(v) for v in pads.ravel()]
        if min(p) < 0 or p[0] or p[1] or p[rank] or p[rank + 1]:
            continue
        sp = p[2:rank] + p[rank + 2:]
        absorbed = 0
        readers = cons.get(pad.outputs[0], [])
        for r in readers:
            if r.inputs[0] != pad.outputs[0] or pad.outputs[0] in r.inputs[1:]:
                continue
            if r.type == "AveragePool":
                if not r.attrs.get("count_include_pad", 0):
                    continue
                if r.attrs.get("ceil_mode", 0):
                    merged = {**r.attrs, "pads": [a + b for a, b in zip(r.attrs["pads"], sp,
                                                                        strict=True)]}
                    if pool_output_shape(g.shape(x), merged) != g.shape(r.outputs[0]):
                        continue
            elif r.type != "Conv":
                continue
            r.attrs["pads"] = [a + b for a, b in zip(r.attrs["pads"], sp, strict=True)]
            r.inputs[0] = x
            absorbed += 1
        if absorbed == len(readers) and pad.outputs[0] not in g.outputs:
            g.ops.remove(pad)
    return _finish(g)


def canonicalize_gemm(graph: Graph) -> Graph:
    """Gemm with constant B -> transB=1, alpha=1, beta=1 (when C is constant), C as [N]."""
    g = infer_shapes(graph)
    for op in [o for o in g.ops if o.type == "Gemm" and g.is_const(o.inputs[1])]:
        a = op.attrs
        b = g.const(op.inputs[1])
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        c_name = op.input(2)
        c = g.const(c_name)
        canon = {"transA": int(a.get("transA", 0)), "transB": 1, "alpha": 1.0, "beta": 1.0}
        if _is_canonical_gemm(g, op) and (c is None or c.ndim == 1):
            op.attrs = canon
            continue
        if c_name and c is None and beta != 1.0:
            continue  # a run-time C with beta: leave as is
        bt = b if a.get("transB", 0) else b.T
        bd = bt.astype(np.float64) * alpha if alpha != 1.0 else bt
        op.inputs[1] = g.add_const(f"{op.name}_weight", np.ascontiguousarray(bd.astype(b.dtype)))
        if c is not None:
            n = bt.shape[0]
            cd = c.astype(np.float64) * beta
            vec = _channel_vector(cd, (1, n)) if cd.ndim <= 2 else None
            cd = vec if vec is not None else cd
            op.inputs[2] = g.add_const(f"{op.name}_bias", cd.astype(c.dtype))
        op.attrs = canon
    return _finish(g)


def _matmul_rows(g: Graph) -> None:
    """MatMul(A of rank >= 3, constant 2-D B) -> A's rows as the columns of a one-row image
    and a 1x1 Conv over them: Transpose(A) to ``[K, *lead]``, Reshape to ``[1, K, 1, rows]``,
    Conv with ``B^T`` as ``[N, K, 1, 1]`` weights, Reshape to ``[N, *lead]``, Transpose back
    to ``[*lead, N]``.  A per-column constant Add after it becomes the Conv's bias.

    On the DV700 the Conv reads its weights once for every row, where an FC command with
    the rows as its samples reads them once a row (§4.10: N commands in one): PP-OCR rec's
    120 x 6625 classifier over 40 rows moves 1.6 MB instead of 64 MB.  Each output is the
    same sum as the FC's and the 2-D MatMul's (the products in k order, then the bias:
    firmware_spec/arithmetic.md), so the same bits; the Transposes are CPU copies."""
    cons = g.consumers()
    for mm in [o for o in g.ops if o.type == "MatMul"]:
        a, a_shape, b = mm.inputs[0], g.shape(mm.inputs[0]), g.const(mm.inputs[1])
        if b is None or b.ndim != 2 or a_shape is None or len(a_shape) < 3 \
                or g.is_const(a) or not _is_float(g, a) or 0 in a_shape:
            continue
        lead, k, n, r = tuple(a_shape[:-1]), int(a_shape[-1]), int(b.shape[1]), len(a_shape)
        rows = int(np.prod(lead))
        dt = g.tensors[a].dtype
        y, bias = mm.outputs[0], None
        add = _sole_reader(g, y, cons)
        if add is not None and add.type == "Add" and add.inputs[0] != add.inputs[1] \
                and g.shape(add.outputs[0]) == (*lead, n):
            c = g.const(add.inputs[1] if add.inputs[0] == y else add.inputs[0])
            bias = None if c is None else _channel_vector(c, (*lead, n), axis=len(lead))
        if bias is not None:
            g.ops.remove(add)
            y = add.outputs[0]
        names = [g.add_tensor(f"{mm.name}_{s}", shape, dt) for s, shape in (
            ("cols", (k, *lead)), ("image", (1, k, 1, rows)), ("conv", (1, n, 1, rows)),
            ("back", (n, *lead)))]
        w = np.ascontiguousarray(b.T).reshape(n, k, 1, 1)
        conv_in = [names[1], g.add_const(f"{mm.name}_w", w)]
        if bias is not None:
            conv_in.append(g.add_const(f"{mm.name}_b", bias.astype(w.dtype)))

        def shape(v: tuple[int, ...], hint: str = f"{mm.name}_shape") -> str:
            return g.add_const(hint, np.array(v, np.int64))

        g.replace_op(mm, [
            Op("Transpose", g.unique_name(f"{mm.name}_to_cols"), [a], [names[0]],
               {"perm": [r - 1, *range(r - 1)]}, mm.origin),
            Op("Reshape", g.unique_name(f"{mm.name}_to_image"), [names[0], shape(
                (1, k, 1, rows))], [names[1]], {"allowzero": 0}, mm.origin),
            Op("Conv", mm.name, conv_in, [names[2]], {"kernel_shape": [1, 1]}, mm.origin),
            Op("Reshape", g.unique_name(f"{mm.name}_from_image"), [names[2], shape(
                (n, *lead))], [names[3]], {"allowzero": 0}, mm.origin),
            Op("Transpose", g.unique_name(f"{mm.name}_from_cols"), [names[3]], [y],
               {"perm": [*range(1, r), 0]}, mm.origin)])


def matmul_to_gemm(graph: Graph) -> Graph:
    """MatMul(2-D A, constant 2-D B) followed by an Add of a constant [N] bias -> Gemm;
    a MatMul of a rank >= 3 A and a constant 2-D B becomes a 1x1 Conv over A's rows
    (:func:`_matmul_rows`)."""
    g = infer_shapes(graph)
    _matmul_rows(g)
    g = infer_shapes(g)
    cons = g.consumers()
    for mm in [o for o in g.ops if o.type == "MatMul"]:
        a_shape, b = g.shape(mm.inputs[0]), g.const(mm.inputs[1])
        if b is None or b.ndim != 2 or len(a_shape) != 2 or g.is_const(mm.inputs[0]) \
                or not _is_float(g, mm.inputs[0]):
            continue
        mm.type = "Gemm"
        mm.inputs[1] = g.add_const(f"{mm.name}_weight", np.ascontiguousarray(b.T))
        mm.attrs = {"transA": 0, "transB": 1, "alpha": 1.0, "beta": 1.0}
        add = _sole_reader(g, mm.outputs[0], cons)
        if add is None or add.type != "Add" or add.inputs[0] == add.inputs[1]:
            continue
        other = add.inputs[1] if add.inputs[0] == mm.outputs[0] else add.inputs[0]
        c = g.const(other)
        vec = None if c is None else _channel_vector(c, g.shape(mm.outputs[0]))
        if vec is None or g.shape(add.outputs[0]) != g.shape(mm.outputs[0]):
            continue
        mm.inputs.append(g.add_const(f"{mm.name}_bias", vec.astype(c.dtype)))
        _absorb(g, mm, add)
    return _finish(g)


def _fold_one_bn(g: Graph, bn: Op, prods: dict, cons: dict) -> bool:
    x = bn.inputs[0]
    prod = prods.get(x)
    params = [g.const(n) for n in bn.inputs[1:5]]
    if (any(p is None for p in params) or not _foldable_producer(g, prod)
            or _sole_reader(g, x, cons) is not bn):
        return False
    gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
    scale = gamma / np.sqrt(var + float(bn.attrs.get("epsilon", 1e-5)))
    _affine_producer(g, prod, scale, beta - mean * scale)
    _absorb(g, prod, bn)
    return True


def _until_fixed(g: Graph, types: tuple[str, ...],
                 rewrite: Callable[[Graph, Op, dict, dict], bool]) -> Graph:
    """Apply ``rewrite`` to ops of ``types`` until none changes (maps rebuilt after each)."""
    changed = True
    while changed:
        changed = False
        prods, cons = g.producers(), g.consumers()
        for op in list(g.ops):
            if op.type in types and rewrite(g, op, prods, cons):
                changed = True
                break
    return _finish(g)


def fold_batchnorm(graph: Graph) -> Graph:
    """Fold BatchNormalization into a preceding Conv/ConvTranspose/canonical Gemm."""
    return _until_fixed(infer_shapes(graph), ("BatchNormalization",), _fold_one_bn)


def _post_affine(g: Graph, op: Op, prods: dict, cons: dict) -> bool:
    xi = [i for i, n in enumerate(op.inputs) if not g.is_const(n)]
    if len(xi) != 1:
        return False
    x, c = op.inputs[xi[0]], g.const(op.inputs[1 - xi[0]])
    prod = prods.get(x)
    if not _foldable_producer(g, prod) or _sole_reader(g, x, cons) is not op:
        return False
    if g.shape(op.outputs[0]) != g.shape(x):
        return False
    v = _channel_vector(c, g.shape(x))
    if v is None:
        return False
    if op.type == "Mul":
        _affine_producer(g, prod, v, None)
    elif op.type == "Add":
        _affine_producer(g, prod, None, v)
    elif op.type == "Div":
        if xi[0] != 0 or np.any(v == 0):
            return False
        _affine_producer(g, prod, 1.0 / v, None)
    elif xi[0] == 0:  # Sub: x - c
        _affine_producer(g, prod, None, -v)
    else:  # c - x
        _affine_producer(g, prod, -np.ones_like(v), v)
    _absorb(g, prod, op)
    return True


def _pre_affine(g: Graph, op: Op, cons: dict) -> bool:
    xi = [i for i, n in enumerate(op.inputs) if not g.is_const(n)]
    if len(xi) != 1:
        return False
    x, c = op.inputs[xi[0]], g.const(op.inputs[1 - xi[0]])
    conv = _sole_reader(g, op.outputs[0], cons)
    if (conv is None or conv.type != "Conv" or conv.inputs[0] != op.outputs[0]
            or op.outputs[0] in conv.inputs[1:] or not g.is_const(conv.inputs[1])
            or (conv.input(2) and not g.is_const(conv.input(2)))):
        return False
    if g.shape(op.outputs[0]) != g.shape(x):
        return False
    v = _channel_vector(c, g.shape(x))
    if v is None:
        return False
    scale = shift = None
    if op.type == "Mul":
        scale = v
    elif op.type == "Div":
        if xi[0] != 0 or np.any(v == 0):
            return False
        scale = 1.0 / v
    elif op.type == "Add":
        shift = v
    elif xi[0] == 0:
        shift = -v
    else:
        scale, shift = -np.ones_like(v), v
    if shift is not None and any(conv.attrs["pads"]):
        return False  # the offset would also apply to padded zeros
    w = g.const(conv.inputs[1])
    grp = int(conv.attrs["group"])
    m, cg = w.shape[0], w.shape[1]
    wg = w.astype(np.float64).reshape(grp, m // grp, cg, -1)
    b = _bias(g, conv)
    if shift is not None:  # y = W (x + a) = W x + sum W a
        # (products and numpy's sums over the last two axes: no einsum, whose order of sums
        # depends on the vector width numpy was built for)
        b = b + (wg * shift.reshape(grp, 1, cg, 1)).sum(axis=(2, 3)).reshape(-1)
        _set_bias(g, conv, b, w.dtype)
    if scale is not None:
        wg = wg * scale.reshape(grp, 1, cg, 1)
        conv.inputs[1] = g.add_const(f"{conv.name}_weight", wg.reshape(w.shape).astype(w.dtype))
    conv.inputs[0] = x
    g.ops.remove(op)
    g.tensors.pop(op.outputs[0], None)
    return True


def _affine_one(g: Graph, op: Op, prods: dict, cons: dict) -> bool:
    if len(op.inputs) != 2:
        return False
    return _post_affine(g, op, prods, cons) or _pre_affine(g, op, cons)


def fold_affine(graph: Graph) -> Graph:
    """Fold constant per-channel Mul/Div/Add/Sub into neighbouring Conv/ConvTranspose/Gemm."""
    return _until_fixed(infer_shapes(graph), ("Mul", "Div", "Add", "Sub"), _affine_one)


def _input_scalable(g: Graph, op: Op, tensor: str) -> bool:
    """``op`` is linear in ``tensor`` through constant weights (a Conv, ConvTranspose or
    canonical Gemm reading it as its data input only): a factor on the tensor can move
    into the weights."""
    return (_foldable_producer(g, op) and op.inputs[0] == tensor
            and tensor not in op.inputs[1:])


def _scale_weights(g: Graph, op: Op, k: float) -> None:
    w = g.const(op.inputs[1])
    op.inputs[1] = g.add_const(f"{op.name}_weight", (w.astype(np.float64) * k).astype(w.dtype))


def _fold_one_hardsigmoid(g: Graph, hs: Op, prods: dict, cons: dict) -> bool:
    x, s = hs.inputs[0], hs.outputs[0]
    alpha, beta = float(hs.attrs.get("alpha", 0.2)), float(hs.attrs.get("beta", 0.5))
    prod = prods.get(x)
    if (alpha == 0 or not _is_float(g, x) or not _foldable_producer(g, prod)
            or _sole_reader(g, x, cons) is not hs):
        return False
    # where the final 1/6 goes: SE's Mul(x, s) feeding only convs takes it into their
    # weights; otherwise a constant Mul (fold_affine folds it into a following conv, the
    # lowering makes it a depthwise 1x1 run)
    mul = _sole_reader(g, s, cons)
    sinks = None
    if mul is not None and mul.type == "Mul" and len(mul.inputs) == 2 \
            and mul.outputs[0] not in g.outputs and _is_float(g, mul.outputs[0]):
        readers = cons.get(mul.outputs[0], [])
        if readers and all(_input_scalable(g, r, mul.outputs[0]) for r in readers):
            sinks = readers
    n = _n_out(g, prod)
    _affine_producer(g, prod, np.full(n, 6.0 * alpha), np.full(n, 6.0 * beta))
    hs.type, hs.attrs = "Clip", {"min": 0.0, "max": 6.0}
    if sinks is not None:  # s and the Mul's output now hold 6x the model's: new names
        six, m6 = g.add_tensor(f"{s}_x6"), g.add_tensor(f"{mul.outputs[0]}_x6")
        hs.outputs[0] = six
        mul.inputs = [six if i == s else i for i in mul.inputs]
        old, mul.outputs[0] = mul.outputs[0], m6
        for r in sinks:
            _scale_weights(g, r, 1.0 / 6.0)
            r.inputs[0] = m6
        g.tensors.pop(s, None)
        g.tensors.pop(old, None)
    else:
        six = g.add_tensor(f"{s}_x6")
        hs.outputs[0] = six
        g.ops.insert(g.ops.index(hs) + 1, Op(
            "Mul", g.unique_name(f"{hs.name}_div6"),
            [six, g.add_const(f"{hs.name}_sixth", np.asarray(1.0 / 6.0, g.tensors[x].dtype))],
            [s], {}, hs.origin))
    return True


def fold_hardsigmoid(graph: Graph) -> Graph:
    """HardSigmoid(y) = clip(a*y + b, 0, 1) = ReLU6(6a*y + 6b) / 6 after a Conv/Gemm."""
    return _until_fixed(infer_shapes(graph), ("HardSigmoid",), _fold_one_hardsigmoid)


def normalize_clip(graph: Graph) -> Graph:
    """Clip with constant (or absent) bounds -> single-input Clip with float min/max attrs."""
    g = infer_shapes(graph)
    for op in [o for o in g.ops if o.type == "Clip"]:
        bounds = [op.input(1), op.input(2)]
        if any(n and not g.is_const(n) for n in bounds) or not _is_float(g, op.inputs[0]):
            continue  # integer Clip keeps its typed bounds (float ones would lose precision)
        lo = float(g.const(bounds[0]).ravel()[0]) if bounds[0] else op.attrs.get("min", -np.inf)
        hi = float(g.const(bounds[1]).ravel()[0]) if bounds[1] else op.attrs.get("max", np.inf)
        op.inputs = [op.inputs[0]]
        op.attrs = {"min": float(lo), "max": float(hi)}
    return _finish(g)


def _reduce_axes(g: Graph, op: Op, rank: int) -> list[int] | None:
    """The reduced axes (non-negative, sorted) of a ReduceMean/ReduceMax, None if unknown or
    empty (ONNX ReduceMean-18: axes is input 1; earlier opsets: the ``axes`` attribute)."""
    if op.input(1):
        v = g.const(op.input(1))
        axes = None if v is None else [int(a) for a in v.ravel()]
    else:
        axes = op.attrs.get("axes")
        axes = None if axes is None else [int(a) for a in axes]
    if not axes:
        return None
    return sorted(a % rank for a in axes)


def reduce_to_global_pool(graph: Graph) -> Graph:
    """ReduceMean/ReduceMax over the spatial axes of NCHW -> GlobalAveragePool/GlobalMaxPool.

    ONNX defines GlobalAveragePool as the mean (GlobalMaxPool: the maximum) over all spatial
    axes with the kept size-1 dimensions, which is ReduceMean (ReduceMax) with axes (2, 3) and
    keepdims=1; keepdims=0 drops them, a Reshape to [N, C].  OpenVINO's ONNX frontend converts
    ONNX's GlobalAveragePool to ReduceMean(keep_dims=true), so an IR from an ONNX model gets
    its global pools back and the same lowering as the ONNX model.
    """
    g = infer_shapes(graph)
    pools = {"ReduceMean": "GlobalAveragePool", "ReduceMax": "GlobalMaxPool"}
    for op in [o for o in g.ops if o.type in pools]:
        shape = g.shape(op.inputs[0])
        if shape is None or len(shape) != 4 or not _is_float(g, op.inputs[0]):
            continue
        if _reduce_axes(g, op, 4) != [2, 3]:
            continue
        out = op.outputs[0]
        if op.attrs.get("keepdims", 1):
            g.replace_op(op, [Op(pools[op.type], op.name, [op.inputs[0]], [out], {},
                                 op.origin)])
            continue
        pooled = g.add_tensor(f"{op.name}_pooled")
        nc = g.add_const(f"{op.name}_shape", np.asarray(shape[:2], np.int64))
        g.replace_op(op, [Op(pools[op.type], op.name, [op.inputs[0]], [pooled], {}, op.origin),
                          Op("Reshape", g.unique_name(f"{op.name}_flat"), [pooled, nc], [out],
                             {}, op.origin)])
    return _finish(g)


def split_grouped_conv(graph: Graph) -> Graph:
    """Conv with 1 < group < C_in -> Split(axis 1) + per-group Convs + Concat(axis 1)."""
    g = infer_shapes(graph)
    for conv in [o for o in g.ops if o.type == "Conv"]:
        grp = int(conv.attrs["group"])
        x = conv.inputs[0]
        cin = g.shape(x)[1]
        w, b = g.const(conv.inputs[1]), g.const(conv.input(2))
        if not 1 < grp < cin or w is None or (conv.input(2) and b is None):
            continue
        mg, cg = w.shape[0] // grp, cin // grp
        sizes = g.add_const(f"{conv.name}_split", np.full(grp, cg, dtype=np.int64))
        parts = [g.add_tensor(f"{conv.name}_in{i}") for i in range(grp)]
        outs = [g.add_tensor(f"{conv.name}_out{i}") for i in range(grp)]
        new = [Op("Split", g.unique_name(f"{conv.name}_split"), [x, sizes], parts, {"axis": 1},
                  conv.origin)]
        for i in range(grp):
            ins = [parts[i], g.add_const(f"{conv.name}_w{i}", w[i * mg:(i + 1) * mg])]
            if b is not None:
                ins.append(g.add_const(f"{conv.name}_b{i}", b[i * mg:(i + 1) * mg]))
            attrs = {**conv.attrs, "group": 1}
            new.append(Op("Conv", g.unique_name(f"{conv.name}_g{i}"), ins, [outs[i]], attrs,
                          conv.origin))
        new.append(Op("Concat", g.unique_name(f"{conv.name}_concat"), outs,
                      [conv.outputs[0]], {"axis": 1}, conv.origin))
        g.replace_op(conv, new)
    return _finish(g)


#: The default pass order used by :func:`optimize`.
PASSES: list[Callable[[Graph], Graph]] = [
    remove_identity, canonicalize_gemm, matmul_to_gemm, fold_pad, reduce_to_global_pool,
    fold_batchnorm, fold_affine, fold_hardsigmoid, fold_affine, normalize_clip,
    split_grouped_conv, *HEAD_PASSES,
]


def optimize(graph: Graph, passes: list[Callable[[Graph], Graph]] | None = None) -> Graph:
    """Fold shapes/constants, run ``passes`` (default :data:`PASSES`), fold again, validate."""
    g = infer_and_fold(remove_identity(graph))
    for p in PASSES if passes is None else passes:
        g = p(g)
    g = infer_and_fold(g)
    g.validate()
    return g
