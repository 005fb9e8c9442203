"""Graph verification, part 2: the verified OpenVX graph as the compiler's graph IR.

Tensors: an OpenVX tensor ``[d0, d1, d2, d3...]`` (d0 fastest) is, byte for byte, the
row-major array of shape ``(..., d3, d2, d1, d0)``: NCHW for ``[W, H, C, N]``, OIHW for
weights ``[kx, ky, IFM, OFM]``.  In the IR every tensor takes its *canonical* shape, a
reshape of that array (so converting costs nothing): rank >= 3 -> ``(N, C, H, W)`` with
every batch dimension folded into N; rank 2 ``[K, B]`` -> ``(B, K)``; rank 1 ``[K]`` ->
``(1, K)``.

Data flow: a tensor no node writes is a graph input (one per distinct box read, the host
slices views for free); static parameters are constants of their real values; a tensor (or
view) a node writes is that node's output, and a non-virtual one is also a graph output
(the host reads it).  Reading a view of a written tensor is a ``Slice``; reading across
views written by several nodes is a ``Concat`` of them (zero-copy on the DV700 when the
views split the channels at multiples of 8).

Kernels -> ONNX-semantics ops (:mod:`dvsdk.compiler.ir`): convolution -> ``Conv`` (the
ceil rounding's overhang as extra end padding of zeros; unshared biases -> ``Add``);
deconvolution -> ``ConvTranspose`` with the kernel turned 180 degrees (OpenVX convolves
the upscaled input with the weights as given); fully connected -> [``Flatten``] + ``Gemm``;
pooling -> ``MaxPool``/``AveragePool`` with ``count_include_pad`` (OpenVX pads with zeros:
a max pool whose input may be negative gets an explicit zero ``Pad``; one window over
the whole input is the global pool, which the DV700 runs in stages); softmax ->
``Softmax`` over the canonical axis 1; normalization -> ``LRN`` (ACROSS_MAPS; marked for
the DV700's LRN unit when :mod:`dvsdk.vx.lrn` allows) or, SAME_MAP, ``x / (1 + alpha * n *
avgpool_nxn(x^2)) ** beta`` kept on the CPU; activations -> their ONNX ops; ROI pooling ->
``MaxRoiPool`` (a CPU step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..compiler.ir import Graph as IRGraph
from ..compiler.ir import Op
from ..compiler.ir import Tensor as IRTensor
from ..cpu.fixedpoint import OP as FIXED_OP
from .exact import Decision, decide, is_fixed
from .groups import find_groups
from .lrn import hardware_lrn
from .node import Node
from .ranges import _intersect, _real, analyze
from .tensor import Tensor
from .types import ActivationFunction as F
from .types import KernelEnum, NormType, PoolingType, Status, Target, Type, VxError
from .verify import Box, Plan, Use, overlap

__all__ = ["Built", "build", "canonical"]

CPU, HW = "cpu", "hw"      # the compiler's placement hook (op attribute dvsdk_target)


def canonical(dims: tuple[int, ...]) -> tuple[int, ...]:
    if len(dims) >= 3:
        return (math.prod(dims[3:]), dims[2], dims[1], dims[0])
    if len(dims) == 2:
        return (dims[1], dims[0])
    return (1, dims[0])


def _axis(rank: int, d: int) -> int | None:
    """Canonical axis of OpenVX dimension ``d`` (None: a folded batch dimension)."""
    if rank >= 3:
        return (3, 2, 1)[d] if d < 3 else (0 if rank == 4 else None)
    return 1 - d if rank == 2 else 1


@dataclass
class Built:
    graph: IRGraph
    inputs: list[tuple[str, Tensor]] = field(default_factory=list)
    outputs: list[tuple[str, Tensor, Node]] = field(default_factory=list)
    op_nodes: dict[str, list[Node]] = field(default_factory=dict)   # IR op -> its nodes
    notes: dict[int, str] = field(default_factory=dict)       # node id -> vx-level reason


class _Builder:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.g = IRGraph({}, [], [], [], name="vx")
        self.b = Built(self.g)
        self.values: dict[tuple[int, Box], str] = {}
        self.ranges = analyze(plan)
        self.groups = {k: ns for k, ns in find_groups(plan).items()   # fixed point: alone
                       if not any(is_fixed(n, plan) for n in ns)}
        self.grouping = {id(ns[0]): ns for ns in self.groups.values()}
        self.grouped = {id(n) for nodes in self.groups.values() for n in nodes} - set(self.groups)
        self.node_names: dict[int, str] = {}
        used: set[str] = set()
        for n in plan.order:
            name, k = n.name, 1
            while name in used:
                k += 1
                name = f"{n.name}#{k}"
            used.add(name)
            self.node_names[id(n)] = name

    # -- IR helpers ------------------------------------------------------------------------
    def tensor(self, hint: str, shape: tuple[int, ...]) -> str:
        return self.g.add_tensor(hint, shape, np.float32)

    def const(self, hint: str, value: np.ndarray, dtype: Any = np.float32) -> str:
        return self.g.add_const(hint, np.asarray(value, dtype))

    def op(self, node: Node, typ: str, inputs: list[str], out: str, attrs: dict | None = None,
           suffix: str = "", target: str | None = None) -> str:
        base = self.node_names[id(node)]
        name = self.g.unique_name(f"{base}/{suffix}" if suffix else base)
        a = dict(attrs or {})
        if target is not None:
            a["dvsdk_target"] = target
        elif node.target == Target.CPU:
            a["dvsdk_target"] = CPU
        self.g.ops.append(Op(typ, name, list(inputs), [out], a, origin=f"{node.kdef.short} "
                             f"{node.name}"))
        self.b.op_nodes[name] = self.grouping.get(id(node), [node])
        return out

    def shape(self, name: str) -> tuple[int, ...]:
        return self.g.tensors[name].shape

    def reshape(self, node: Node, x: str, shape: tuple[int, ...]) -> str:
        if self.shape(x) == tuple(shape):
            return x
        out = self.tensor(f"{x}_reshaped", shape)
        return self.op(node, "Reshape", [x, self.const("shape", np.array(shape), np.int64)],
                       out, suffix="reshape")

    # -- values ------------------------------------------------------------------------------
    def read(self, use: Use) -> str:
        rid = id(use.root)
        key = (rid, use.box)
        if key in self.values:
            return self.values[key]
        t = use.tensor
        writers = self.plan.writes.get(rid, [])
        if not writers:                                  # a graph input (per box read)
            name = self.tensor(t.name, canonical(t.dims))
            self.g.inputs.append(name)
            self.b.inputs.append((name, t))
        else:
            name = self._from_writers(use, writers)
        self.values[key] = name
        return name

    def _from_writers(self, use: Use, writers: list[Use]) -> str:
        root = use.root
        dims = self.plan.resolved[id(root)][0]
        box = use.box or tuple((0, n) for n in dims)
        whole = self.values.get((id(root), None))
        if whole is not None:                            # written whole (a grouped conv)
            return self.slice(use.node, whole, tuple((0, n) for n in dims), box)
        inside = [w for w in writers if overlap(w.box, box)]
        for w in inside:
            wbox = w.box or tuple((0, n) for n in dims)
            if all(a0 <= b0 and b1 <= a1 for (a0, a1), (b0, b1) in zip(wbox, box)):
                return self.slice(use.node, self.values[(id(root), w.box)], wbox, box)
        axis = next(a for a in range(len(box)) if len({w.box[a] for w in inside}) > 1)
        pieces = []
        for w in sorted(inside, key=lambda w: w.box[axis][0]):
            part = tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(w.box, box))
            pieces.append(self.slice(use.node, self.values[(id(root), w.box)], w.box, part))
        cax = _axis(len(box), axis)
        out = self.tensor(f"{root.name}_joined", canonical(tuple(b - a for a, b in box)))
        return self.op(use.node, "Concat", pieces, out, {"axis": cax}, suffix="concat")

    def slice(self, node: Node, src: str, have: tuple, want: tuple) -> str:
        """The part ``want`` of the tensor ``src`` holding the box ``have`` (root coords)."""
        if have == want:
            return src
        rank = len(have)
        starts, ends, axes = [], [], []
        for d, ((h0, h1), (w0, w1)) in enumerate(zip(have, want)):
            if (h0, h1) == (w0, w1):
                continue
            ax = _axis(rank, d)
            if ax is None:
                raise VxError(Status.ERROR_NOT_SUPPORTED, f"node {node.name!r}: a view "
                              "across nested batch dimensions", field=node.name)
            starts.append(w0 - h0)
            ends.append(w1 - h0)
            axes.append(ax)
        out = self.tensor(f"{src}_part", canonical(tuple(b - a for a, b in want)))
        ins = [src, self.const("starts", np.array(starts), np.int64),
               self.const("ends", np.array(ends), np.int64),
               self.const("axes", np.array(axes), np.int64)]
        return self.op(node, "Slice", ins, out, suffix="slice")

    def out_name(self, node: Node) -> tuple[str, Tensor]:
        y: Tensor = node._values[len(node._values) - 1]
        dims = self.plan.meta[id(y)].dims
        name = self.tensor(y.name, canonical(dims))
        self.values[(id(y.root), _box_of(self.plan, node))] = name
        if not y.is_virtual:
            self.g.outputs.append(name)
            self.b.outputs.append((name, y, node))
        return name, y

    # -- kernels -----------------------------------------------------------------------------
    def node(self, node: Node) -> None:
        if id(node) in self.grouped:
            return                                      # emitted with its group's last node
        if id(node) in self.groups:
            return self.group(self.groups[id(node)])
        d = self.plan.derived[id(node)]
        x = self.read(_use(self.plan, node, 0))
        k = node.kdef.enum
        out, y = self.out_name(node)
        ydims = self.plan.meta[id(y)].dims
        if is_fixed(node, self.plan):
            return self.fixed(node, d, x, out, y, ydims)
        if k == KernelEnum.CONVOLUTION_LAYER:
            self.conv(node, d, x, out, ydims)
        elif k == KernelEnum.DECONVOLUTION_LAYER:
            self.deconv(node, d, x, out)
        elif k == KernelEnum.FULLY_CONNECTED_LAYER:
            self.fc(node, d, x, out)
        elif k == KernelEnum.POOLING_LAYER:
            self.pool(node, d, x, out, ydims)
        elif k == KernelEnum.SOFTMAX_LAYER:
            self.op(node, "Softmax", [x], out, {"axis": 1})
        elif k == KernelEnum.NORMALIZATION_LAYER:
            self.norm(node, d, x, out)
        elif k == KernelEnum.ACTIVATION_LAYER:
            self.activation(node, d, x, out)
        else:
            self.roi(node, d, x, out)

    def group(self, nodes: list[Node]) -> None:
        """G convolutions over channel views as one ``Conv`` with ``group = G``."""
        first = nodes[0]
        x_root, y_root = first._values[0].root, first._values[4].root
        x = self.read(Use(first, 0, x_root, None))
        ydims = self.plan.resolved[id(y_root)][0]
        out = self.tensor(y_root.name, canonical(ydims))
        self.values[(id(y_root), None)] = out
        if not y_root.is_virtual:
            self.g.outputs.append(out)
            self.b.outputs.append((out, y_root, first))
        ws = [_real(n._values[1]).transpose(3, 2, 1, 0) for n in nodes]
        bs = [_real(n._values[2]) for n in nodes if n._values[2] is not None]
        xd = self.plan.resolved.get(id(x_root), (x_root.dims,))[0] or x_root.dims
        self.conv(first, self.plan.derived[id(first)], x, out, ydims, np.concatenate(ws),
                  np.concatenate(bs) if bs else None, len(nodes), xd)

    def conv(self, node: Node, d: dict, x: str, out: str, ydims: tuple[int, ...],
             w_oihw: np.ndarray | None = None, bias: np.ndarray | None = None, group: int = 1,
             xd: tuple[int, ...] | None = None) -> None:
        if w_oihw is None:
            w_oihw = _real(node._values[1]).transpose(3, 2, 1, 0)
            bias = None if node._values[2] is None else _real(node._values[2])
            xd = self.plan.meta[id(node._values[0])].dims
        w = w_oihw.transpose(3, 2, 1, 0)                  # [kx, ky, IFM/group, OFM]
        pads = []
        for axis in (0, 1):
            k_eff = w.shape[axis] + (w.shape[axis] - 1) * d["dilation"][axis]
            extra = (ydims[axis] - 1) * d["skip"][axis] + k_eff - (xd[axis] + 2 * d["pad"][axis])
            pads.append((d["pad"][axis], d["pad"][axis] + max(0, extra)))
        attrs = {"kernel_shape": [w.shape[1], w.shape[0]],
                 "strides": [d["skip"][1], d["skip"][0]],
                 "dilations": [d["dilation"][1] + 1, d["dilation"][0] + 1],
                 "pads": [pads[1][0], pads[0][0], pads[1][1], pads[0][1]], "group": group}
        ins = [x, self.const(f"{node.name}_w", w_oihw)]
        b = bias
        if b is not None and b.ndim == 1:
            ins.append(self.const(f"{node.name}_b", b))
        if b is not None and b.ndim == 3:                 # unshared: one per output location
            mid = self.tensor(f"{out}_nobias", self.shape(out))
            self.op(node, "Conv", ins, mid, attrs)
            self.op(node, "Add", [mid, self.const(f"{node.name}_b", b.transpose(2, 1, 0)[None])],
                    out, suffix="bias")
        else:
            self.op(node, "Conv", ins, out, attrs)

    def fixed(self, node: Node, d: dict, x: str, out: str, y: Tensor,
              ydims: tuple[int, ...]) -> None:
        """A fixed-point layer (:mod:`dvsdk.vx.exact`): the FP16 op where the bound proves
        it exact (then ``requantize`` for another node reading it), else ``VxFixedPoint``
        on the CPU."""
        xin = node._values[0]
        rin = _intersect(self.ranges.get(id(xin.root), (-math.inf, math.inf)),
                         xin.value_range)
        dec = decide(node, self.plan, rin)
        self.b.notes[id(node)] = dec.why
        k = node.kdef.enum
        if dec.on_hw:
            read = bool(self.plan.reads.get(id(y.root)))
            mid = self.tensor(f"{out}_sum", self.shape(out)) if read else out
            if k == KernelEnum.CONVOLUTION_LAYER:
                self.conv(node, d, x, mid, ydims)
            elif k == KernelEnum.DECONVOLUTION_LAYER:
                self.deconv(node, d, x, mid)
            else:
                self.fc(node, d, x, mid)
            if read:
                self.op(node, FIXED_OP, [mid], out, {
                    **dec.attrs, "kind": "requantize", "acc_fpp": dec.acc_fpp,
                    "vx_output_shape": list(self.shape(out))}, suffix="requantize", target=CPU)
            return
        self.op(node, FIXED_OP, self._fixed_inputs(node, dec, x), out,
                {**dec.attrs, **self._fixed_geometry(node, d, ydims),
                 "vx_output_shape": list(self.shape(out))}, target=CPU)

    def _fixed_inputs(self, node: Node, dec: Decision, x: str) -> list[str]:
        w = dec.w_raw
        if node.kdef.enum == KernelEnum.FULLY_CONNECTED_LAYER:   # K in OpenVX memory order
            w = w.reshape((-1, w.shape[-1]), order="F")        # as fc() takes it
        elif w.ndim == 4:
            w = w.transpose(3, 2, 1, 0)
        ins = [x, self.const(f"{node.name}_w_raw", w, np.int64)]
        if dec.b_raw is not None:
            b = dec.b_raw if dec.b_raw.ndim == 1 else dec.b_raw.transpose(2, 1, 0)
            ins.append(self.const(f"{node.name}_b_raw", b, np.int64))
        return ins

    def _fixed_geometry(self, node: Node, d: dict, ydims: tuple[int, ...]) -> dict:
        k = node.kdef.enum
        if k == KernelEnum.FULLY_CONNECTED_LAYER:
            return {"kind": "fc"}
        if k == KernelEnum.DECONVOLUTION_LAYER:
            return {"kind": "deconv", "vx_pads": [d["pad"][1], d["pad"][0]],
                    "vx_strides": [d["upscale"][1], d["upscale"][0]],
                    "vx_output_padding": [d["a"][1], d["a"][0]]}
        w = node._values[1].dims
        xd = self.plan.meta[id(node._values[0])].dims
        pads = []
        for axis in (0, 1):
            k_eff = w[axis] + (w[axis] - 1) * d["dilation"][axis]
            extra = (ydims[axis] - 1) * d["skip"][axis] + k_eff - (xd[axis] + 2 * d["pad"][axis])
            pads.append((d["pad"][axis], d["pad"][axis] + max(0, extra)))
        return {"kind": "conv", "vx_pads": [pads[1][0], pads[0][0], pads[1][1], pads[0][1]],
                "vx_strides": [d["skip"][1], d["skip"][0]],
                "vx_dilations": [d["dilation"][1] + 1, d["dilation"][0] + 1]}

    def deconv(self, node: Node, d: dict, x: str, out: str) -> None:
        w = _real(node._values[1])[::-1, ::-1]            # OpenVX correlates: turn the kernel
        attrs = {"kernel_shape": [w.shape[1], w.shape[0]],
                 "strides": [d["upscale"][1], d["upscale"][0]],
                 "pads": [d["pad"][1], d["pad"][0], d["pad"][1], d["pad"][0]],
                 "output_padding": [d["a"][1], d["a"][0]], "dilations": [1, 1], "group": 1}
        ins = [x, self.const(f"{node.name}_w", w.transpose(2, 3, 1, 0))]
        b = None if node._values[2] is None else _real(node._values[2])
        if b is not None and b.ndim == 1:
            ins.append(self.const(f"{node.name}_b", b))
        if b is not None and b.ndim == 3:                 # one per output location
            mid = self.tensor(f"{out}_nobias", self.shape(out))
            self.op(node, "ConvTranspose", ins, mid, attrs)
            self.op(node, "Add", [mid, self.const(f"{node.name}_b", b.transpose(2, 1, 0)[None])],
                    out, suffix="bias")
        else:
            self.op(node, "ConvTranspose", ins, out, attrs)

    def fc(self, node: Node, d: dict, x: str, out: str) -> None:
        w = _real(node._values[1])                         # [K, OFM] or [W, H, IFM, OFM]
        w = w.reshape((-1, w.shape[-1]), order="F")        # K in OpenVX memory order
        if d["flatten"]:
            n = self.shape(x)[0]
            flat = self.tensor(f"{x}_flat", (n, int(np.prod(self.shape(x)[1:]))))
            x = self.op(node, "Flatten", [x], flat, {"axis": 1}, suffix="flatten")
        elif len(self.shape(x)) != 2 or self.shape(x)[1] != w.shape[0]:
            # [#IFM, #batches...] with several batch dimensions: rows of #IFM
            n = int(np.prod(self.shape(x))) // w.shape[0]
            x = self.reshape(node, x, (n, w.shape[0]))
        ins = [x, self.const(f"{node.name}_w", w.T)]
        if node._values[2] is not None:
            ins.append(self.const(f"{node.name}_b", _real(node._values[2])))
        natural = (self.shape(x)[0], w.shape[1])
        if natural == self.shape(out):
            self.op(node, "Gemm", ins, out, {"transB": 1})
        else:
            mid = self.tensor(f"{out}_rows", natural)
            self.op(node, "Gemm", ins, mid, {"transB": 1})
            self.op(node, "Reshape", [mid, self.const("shape", np.array(self.shape(out)),
                                                        np.int64)], out, suffix="reshape")

    def pool(self, node: Node, d: dict, x: str, out: str, ydims: tuple[int, ...]) -> None:
        xd = self.plan.meta[id(node._values[0])].dims
        pads = []
        for axis in (0, 1):
            extra = (ydims[axis] - 1) * d["skip"][axis] + d["size"][axis] - (
                xd[axis] + 2 * d["pad"][axis])
            pads.append((d["pad"][axis], d["pad"][axis] + max(0, extra)))
        onnx_pads = [pads[1][0], pads[0][0], pads[1][1], pads[0][1]]
        if tuple(d["size"]) == tuple(xd[:2]) and not any(onnx_pads):   # one window: global
            kind = "GlobalAveragePool" if d["kind"] == PoolingType.AVG else "GlobalMaxPool"
            self.op(node, kind, [x], out)
            return
        attrs = {"kernel_shape": [d["size"][1], d["size"][0]],
                 "strides": [d["skip"][1], d["skip"][0]]}
        if d["kind"] == PoolingType.AVG:
            self.op(node, "AveragePool", [x], out, {**attrs, "pads": onnx_pads,
                                                     "count_include_pad": 1})
            return
        lo = self.ranges.get(id(node._values[0].root), (-math.inf, 0.0))[0]
        if any(onnx_pads) and lo < 0:                      # zero padding is not -inf padding
            n, c, h, w = self.shape(x)
            padded = self.tensor(f"{x}_padded", (n, c, h + pads[1][0] + pads[1][1],
                                                 w + pads[0][0] + pads[0][1]))
            full = [0, 0, pads[1][0], pads[0][0], 0, 0, pads[1][1], pads[0][1]]
            x = self.op(node, "Pad", [x, self.const("pads", np.array(full), np.int64),
                                      self.const("zero", np.array(0.0))], padded,
                        {"mode": "constant"}, suffix="pad")
            onnx_pads = [0, 0, 0, 0]
        self.op(node, "MaxPool", [x], out, {**attrs, "pads": onnx_pads})

    def norm(self, node: Node, d: dict, x: str, out: str) -> None:
        n, alpha, beta = d["size"], d["alpha"], d["beta"]
        if d["kind"] == NormType.ACROSS_MAPS:
            shape = self.shape(x)
            lo, hi = self.ranges.get(id(node._values[0].root), (-math.inf, math.inf))
            ym = self.plan.meta[id(node._values[-1])]
            ytype, yfpp = ym.type, ym.fpp
            fixed = yfpp if ytype in (Type.UINT8, Type.INT8, Type.INT16) else None
            on_hw, why = hardware_lrn(d["kind"], n, alpha, beta, shape[1], shape[0],
                                      max(abs(lo), abs(hi)), node.target, fixed)
            self.b.notes[id(node)] = why
            self.op(node, "LRN", [x], out, {"size": n, "alpha": alpha, "beta": beta,
                                            "bias": 1.0}, target=HW if on_hw else CPU)
            return
        self.b.notes[id(node)] = "SAME_MAP normalization has no DV700 unit (exact on the CPU)"
        shape = self.shape(x)
        sq = self.op(node, "Mul", [x, x], self.tensor(f"{out}_sq", shape), suffix="square",
                     target=CPU)
        r = (n - 1) // 2
        avg = self.op(node, "AveragePool", [sq], self.tensor(f"{out}_avg", shape),
                      {"kernel_shape": [n, n], "strides": [1, 1], "pads": [r, r, r, r],
                       "count_include_pad": 1}, suffix="window", target=CPU)
        scaled = self.op(node, "Mul", [avg, self.const("k", np.array(alpha * n))],
                         self.tensor(f"{out}_scaled", shape), suffix="scale", target=CPU)
        den = self.op(node, "Add", [scaled, self.const("one", np.array(1.0))],
                      self.tensor(f"{out}_den", shape), suffix="plus1", target=CPU)
        pw = self.op(node, "Pow", [den, self.const("beta", np.array(beta))],
                     self.tensor(f"{out}_pow", shape), suffix="pow", target=CPU)
        self.op(node, "Div", [x, pw], out, suffix="divide", target=CPU)

    def activation(self, node: Node, d: dict, x: str, out: str) -> None:
        fn, a, b = d["function"], d["a"], d["b"]
        shape = self.shape(x)
        simple = {F.LOGISTIC: "Sigmoid", F.RELU: "Relu", F.SOFTRELU: "Softplus",
                  F.ABS: "Abs", F.SQRT: "Sqrt"}
        if fn in simple:
            self.op(node, simple[fn], [x], out)
        elif fn == F.SQUARE:
            self.op(node, "Mul", [x, x], out)
        elif fn == F.BRELU:
            self.op(node, "Clip", [x, self.const("lo", np.array(0.0)),
                                   self.const("hi", np.array(a))], out)
        elif fn == F.HYPERBOLIC_TAN:
            if b != 1.0:
                x = self.op(node, "Mul", [x, self.const("b", np.array(b))],
                            self.tensor(f"{out}_bx", shape), suffix="scale_in")
            if a != 1.0:
                t = self.op(node, "Tanh", [x], self.tensor(f"{out}_tanh", shape))
                self.op(node, "Mul", [t, self.const("a", np.array(a))], out, suffix="scale_out")
            else:
                self.op(node, "Tanh", [x], out)
        else:                                               # LINEAR: a x + b
            if b == 0.0:
                self.op(node, "Mul", [x, self.const("a", np.array(a))], out)
            else:
                ax = x if a == 1.0 else self.op(node, "Mul", [x, self.const("a", np.array(a))],
                                                self.tensor(f"{out}_ax", shape))
                self.op(node, "Add", [ax, self.const("b", np.array(b))], out, suffix="add")

    def roi(self, node: Node, d: dict, x: str, out: str) -> None:
        rois = self.read(_use(self.plan, node, 1))
        count = self.plan.meta[id(node._values[1])].dims[1] * d.get("batches", 1)
        rois = self.reshape(node, rois, (count, 4))        # image-major: image b's ROIs
        index = np.repeat(np.arange(d.get("batches", 1)), count // d.get("batches", 1))
        five = self.op(node, "Concat", [self.const("batch_index", index[:, None]), rois],
                       self.tensor(f"{out}_rois", (count, 5)), {"axis": 1}, suffix="rois")
        pw, ph = d["pooled"]
        self.op(node, "MaxRoiPool", [x, five], out,
                {"pooled_shape": [ph, pw], "spatial_scale": 1.0})


def _use(plan: Plan, node: Node, index: int) -> Use:
    t = node._values[index]
    rid = id(t.root)
    for u in plan.reads.get(rid, []):
        if u.node is node and u.index == index:
            return u
    raise AssertionError("unplanned read")


def _box_of(plan: Plan, node: Node) -> Box:
    y = node._values[len(node._values) - 1]
    for u in plan.writes[id(y.root)]:
        if u.node is node:
            return u.box
    raise AssertionError("unplanned write")


def build(plan: Plan) -> Built:
    """The IR graph of a verified plan (shapes set; run the compiler's passes on it)."""
    b = _Builder(plan)
    for node in plan.order:
        b.node(node)
    b.g.tensors = {n: t if t.is_const else IRTensor(n, t.shape, t.dtype)
                   for n, t in b.g.tensors.items()}
    return b.b
