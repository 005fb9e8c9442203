"""``vx_graph``: construction, verification, execution (``formats.md`` §3).

Lifecycle (OpenVX core): build nodes, ``verify()``, then ``process()`` (synchronous) or
``schedule()`` + ``wait()`` (asynchronous) any number of times, ``release()``.

``verify()`` checks the graph formalisms (:mod:`dvsdk.vx.verify`), turns the graph into the
compiler's IR (:mod:`dvsdk.vx.toir`), runs the compiler's passes and lowering (each node
becomes DV700 commands or CPU steps, with the reason in ``node.placement``), plans memory,
packs and uploads the weights and commits the command lists on the context's device.  It
returns a :class:`Status`; on failure ``graph.error`` is a :class:`VxError` naming node and
parameter, and nothing stays allocated.  A change after verification (a node parameter, a
static parameter's data, a scalar, a target) marks the graph unverified; ``process`` and
``schedule`` then verify again first, as ``vxProcessGraph`` does.

Execution: the host converts the input tensors to real values, the device runs the
program, the output tensors receive the results converted to their types with the writing
node's overflow and rounding policies.  One execution per graph is in flight at a time; a
device runs one graph at a time, so scheduling a graph while another graph of the context
is in flight first completes that one (its results wait for its ``wait()``).  Node
callbacks run in ``wait()`` (and ``process()``) after the device finished, node by node in
dependency order, each when its outputs are readable; ``Action.ABANDON`` stops there
(later nodes' outputs are not written, the status is ``ERROR_GRAPH_ABANDONED``).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from ..compiler.build import Options, compile_graph
from ..compiler.fold import infer_and_fold
from ..compiler.simplify import optimize
from ..errors import DeviceError, DvsdkError, OutOfDeviceMemory
from ..netfile import write
from ..runtime.net import Net
from .convert import to_storage
from .kernels import KernelDef, kernel_def
from .node import Node, Parameter
from .perf import Perf
from .reference import Reference
from .tensor import Tensor
from .toir import Built, build, canonical
from .types import (
    Action,
    ConvertPolicy,
    Direction,
    GraphState,
    KernelEnum,
    RoundPolicy,
    Status,
    Type,
    VxError,
)
from .verify import check

__all__ = ["Graph", "RAW_RUNS"]

#: runs kept uncounted at most before perf is computed anyway (a profile run)
RAW_RUNS = 1000


class Graph(Reference):
    """``vx_graph``: ``Graph(ctx)`` or ``ctx.graph()``."""

    vx_type = Type.GRAPH

    def __init__(self, context: Any) -> None:
        self._nodes: list[Node] = []
        self._params: list[Parameter] = []
        self._state = GraphState.UNVERIFIED
        self._net: Net | None = None
        self._built: Built | None = None
        self._ir: Any = None
        self._order: list[Node] = []
        self._handle: Any = None
        self._done: tuple[dict | None, Any, DvsdkError | None] | None = None
        self._feeds: dict[str, np.ndarray] = {}
        self._shares: dict[str, dict[int, float]] | None = None
        self._raw: list[tuple[Any, int, int]] = []     # runs not yet in perf (see _account)
        self._profile_feeds: dict[str, np.ndarray] | None = None
        self._t0 = 0
        self._perf = Perf()
        self.error: VxError | None = None
        super().__init__(context)
        context._check()

    # -- construction ----------------------------------------------------------------------
    def generic_node(self, kernel: Any) -> Node:
        """``vxCreateGenericNode``: a node of ``kernel`` (a Kernel, its name or its enum)
        with no parameters set yet."""
        self._check()
        kdef = kernel if isinstance(kernel, KernelDef) else kernel_def(
            kernel.kdef.name if hasattr(kernel, "kdef") else kernel)
        node = Node(self, kdef)
        node._hold()
        self._nodes.append(node)
        self._unverify("a node was added")
        return node

    def virtual_tensor(self, dims: Any = None, data_type: int = Type.INVALID,
                       fixed_point_position: int = 0) -> Tensor:
        """``vxCreateVirtualTensor``: dims may be None (rank undefined) or hold 0s, and
        ``data_type`` may be ``Type.INVALID``; verification resolves them."""
        self._check()
        return Tensor(self.context, dims, data_type, fixed_point_position, _virtual_in=self)

    @property
    def nodes(self) -> list[Node]:
        return [n for n in self._nodes if n._alive]

    def remove_node(self, node: Node) -> Status:
        """``vxRemoveNode``."""
        if node not in self._nodes:
            return Status.ERROR_INVALID_NODE
        self._nodes.remove(node)
        node._unhold()
        if node._alive and node._count > 0:
            node.release()
        self._unverify("a node was removed")
        return Status.SUCCESS

    # -- graph parameters ------------------------------------------------------------------
    def add_parameter(self, parameter: Parameter) -> Status:
        """``vxAddParameterToGraph``: expose a node parameter as graph parameter #n."""
        self._check()
        if not isinstance(parameter, Parameter) or parameter.node.graph is not self:
            return Status.ERROR_INVALID_PARAMETERS
        self._params.append(parameter)
        return Status.SUCCESS

    @property
    def num_parameters(self) -> int:
        return len(self._params)

    def parameter(self, index: int) -> Parameter:
        """``vxGetGraphParameterByIndex``."""
        if not 0 <= index < len(self._params):
            raise VxError(Status.ERROR_INVALID_PARAMETERS, f"graph {self.name!r} has no "
                          f"parameter #{index}", field="index", value=index,
                          limit=f"0..{len(self._params) - 1}")
        return self._params[index]

    def set_parameter_by_index(self, index: int, value: Any) -> Status:
        """``vxSetGraphParameterByIndex``: bind a new object to graph parameter ``index``.

        A tensor like the old one (same dimensions and type, not static, used by no other
        node here) is swapped in without re-verification; anything else changes the graph,
        which verifies again before it next runs."""
        self._check()
        if not 0 <= index < len(self._params):
            return Status.ERROR_INVALID_PARAMETERS
        if self.busy:
            return Status.ERROR_GRAPH_SCHEDULED
        p = self._params[index]
        if self._rebind(p, value):
            return Status.SUCCESS
        return p.node.set_parameter_by_index(p.index, value)

    def _rebind(self, p: Parameter, new: Any) -> bool:
        old = p.node._values[p.index]
        if not (self.verified and isinstance(old, Tensor) and isinstance(new, Tensor)
                and new._alive and not p.spec.static and not new.is_virtual
                and not old.is_virtual and new.dims == old.dims
                and new.data_type == old.data_type
                and new.fixed_point_position == old.fixed_point_position
                and new._context is self._context):
            return False
        for n in self.nodes:
            for i, v in enumerate(n._values):
                if not isinstance(v, Tensor) or (n is p.node and i == p.index):
                    continue
                if v.root is old.root or v.root is new.root:
                    return False
        built = self._built
        built.inputs = [(name, new if t is old else t) for name, t in built.inputs]
        built.outputs = [(name, new if t is old else t, n) for name, t, n in built.outputs]
        new._hold()
        p.node._values[p.index] = new
        old._unhold()
        return True

    # -- verification ----------------------------------------------------------------------
    @property
    def state(self) -> GraphState:
        return self._state

    @property
    def busy(self) -> bool:
        """Scheduled and not yet waited for."""
        return self._handle is not None or self._done is not None

    @property
    def verified(self) -> bool:
        """``vxIsGraphVerified``."""
        return self._state != GraphState.UNVERIFIED

    def _unverify(self, reason: str) -> None:
        if self._state != GraphState.UNVERIFIED:
            self._state = GraphState.UNVERIFIED
            self.unverified_because = reason

    def uses(self, obj: Reference, static_only: bool) -> bool:
        """Does a node of this graph take ``obj`` (a tensor: anything sharing its root)?"""
        for n in self.nodes:
            for spec, v in zip(n.kdef.params, n._values):
                if static_only and not spec.static:
                    continue
                if v is obj or (isinstance(v, Tensor) and isinstance(obj, Tensor)
                                and v.root is obj.root):
                    return True
        return False

    def verify(self) -> Status:
        """``vxVerifyGraph``: check, compile for the DV700, allocate, upload weights."""
        self._check()
        if self.busy:
            return self._fail(VxError(Status.ERROR_GRAPH_SCHEDULED, f"graph {self.name!r} is "
                                      "scheduled: wait() first", field=self.name))
        self._release_net()
        self._state = GraphState.UNVERIFIED
        try:
            plan = check(self)
            built = build(plan)
            ir = optimize(infer_and_fold(built.graph))
            netfile = compile_graph(ir, Options(golden=False), source=f"dvsdk.vx {self.name}")
            net = Net(netfile, self.context.device)
        except VxError as e:
            return self._fail(e)
        except OutOfDeviceMemory as e:
            return self._fail(VxError(Status.ERROR_NO_MEMORY, str(e), field=self.name))
        except DeviceError as e:
            return self._fail(VxError(Status.ERROR_NO_RESOURCES, str(e), field=self.name))
        except DvsdkError as e:
            return self._fail(VxError(Status.ERROR_NOT_SUPPORTED, f"the compiler refused "
                                      f"graph {self.name!r}: {e}", field=e.field,
                                      value=e.value, limit=e.limit))
        for rid, (dims, typ) in plan.resolved.items():
            root = plan.roots[rid]
            if root._graph is not None:
                root._resolved, root._resolved_type = tuple(dims), typ
        for n in plan.order:
            n.derived = plan.derived[id(n)]
        self._net, self._built, self._ir, self._order = net, built, ir, plan.order
        self._shares, self._raw, self._profile_feeds = None, [], None
        self._place(netfile.meta.get("report", []), built)
        self._state = GraphState.VERIFIED
        self.error = None
        return Status.SUCCESS

    def _fail(self, e: VxError) -> Status:
        self.error = e
        return e.status

    def _place(self, report: list[dict], built: Built) -> None:
        by_name = {n.name: n for n in self.nodes}
        for n in self.nodes:
            n.placement = []
        for entry in report:
            nodes = _nodes_of(entry["op"], built, by_name)
            for node in nodes:
                where = "DV700" if entry["where"] == "hw" else "CPU"
                detail = entry["detail"]
                note = built.notes.get(id(node))
                if note and where == "CPU":         # the verifier's reason, not the hook's
                    detail = note
                elif note:                           # LRN unit, fixed-point bound
                    detail = f"{detail}: {note}"
                if len(nodes) > 1:
                    detail += f" (one grouped convolution of {len(nodes)} nodes)"
                node.placement.append({"op": entry["op"], "type": entry["type"],
                                       "where": where, "detail": detail})

    def report(self) -> str:
        """One line per node: kernel, where it runs, why."""
        lines = []
        for n in self._order or self.nodes:
            why = "; ".join(sorted({f"{p['type']} {p['where']}: {p['detail']}"
                                    for p in n.placement})) or "folded into another node"
            lines.append(f"{n.name:<16s} {n.kdef.short:<22s} {n.where or '-':<9s} {why}")
        return "\n".join(lines)

    # -- execution ---------------------------------------------------------------------------
    def process(self) -> Status:
        """``vxProcessGraph``: run once, synchronously."""
        status = self.schedule()
        return status if status != Status.SUCCESS else self.wait()

    def schedule(self) -> Status:
        """``vxScheduleGraph``: start one execution; ``wait()`` completes it."""
        self._check()
        if self.busy:
            return self._fail(VxError(Status.ERROR_GRAPH_SCHEDULED, f"graph {self.name!r} is "
                                      "already scheduled: wait() first", field=self.name))
        if not self.verified:
            status = self.verify()
            if status != Status.SUCCESS:
                return status
        ctx = self.context
        if ctx._in_flight is not None and ctx._in_flight is not self:
            ctx._in_flight._finish_device()        # the device runs one graph at a time
        self._feeds = {name: _host_value(t) for name, t in self._built.inputs}
        for n in self._order:                # everything the nodes read (weights too) ...
            for _, t in n.tensors(Direction.INPUT):
                t.root._locks.setdefault(id(self), (self, "r"))
        for _, t, _ in self._built.outputs:  # ... and what they write, until wait()
            t.root._locks[id(self)] = (self, "w")
        self._t0 = time.perf_counter_ns()
        try:
            self._handle = self._net.run_async(self._feeds)
        except DvsdkError as e:
            self._unlock()
            return self._fail(VxError(Status.FAILURE, f"graph {self.name!r} could not start: "
                                      f"{e}", field=self.name))
        ctx._in_flight = self
        self._state = GraphState.RUNNING
        return Status.SUCCESS

    def _finish_device(self) -> None:
        """Complete the device's part of the execution in flight (results kept)."""
        if self._handle is None:
            return
        result, err = None, None
        try:
            result = self._handle.wait()
        except DvsdkError as e:
            err = e
        self._done = (result, self._net.last_run, err)
        self._handle = None
        if self._context is not None and self._context._in_flight is self:
            self._context._in_flight = None

    def wait(self) -> Status:
        """``vxWaitGraph``: complete the execution, write the outputs, run the callbacks."""
        self._check()
        if self._handle is None and self._done is None:
            return Status.FAILURE
        self._finish_device()
        result, stats, err = self._done
        t1 = time.perf_counter_ns()
        try:
            if err is not None:
                self._settle(GraphState.ABANDONED)
                return self._fail(VxError(Status.FAILURE, f"graph {self.name!r} failed on the "
                                          f"device: {err}", field=self.name))
            self._raw.append((stats, self._t0, t1))
            if self._profile_feeds is None:
                self._profile_feeds = dict(self._feeds)
            if self._shares is not None or len(self._raw) >= RAW_RUNS:
                self._account()
            outputs: dict[int, list[tuple[str, Tensor]]] = {}
            for name, t, node in self._built.outputs:
                outputs.setdefault(id(node), []).append((name, t))
            for node in self._order:
                for name, t in outputs.get(id(node), []):
                    _store(t, result[name], node)
                    t.root._locks.pop(id(self), None)
                cb = node._callback
                if cb is not None and cb(node) == Action.ABANDON:
                    self._settle(GraphState.ABANDONED)
                    return self._fail(VxError(Status.ERROR_GRAPH_ABANDONED,
                                              f"node {node.name!r}'s callback abandoned graph "
                                              f"{self.name!r}", field=node.name))
            self._settle(GraphState.COMPLETED)
            return Status.SUCCESS
        finally:
            self._done = None
            self._unlock()

    def _settle(self, state: GraphState) -> None:
        """The execution's end state, unless a change made the graph unverified meanwhile."""
        if self._state != GraphState.UNVERIFIED:
            self._state = state

    def _unlock(self) -> None:
        for n in self._order:
            for v in n._values:
                if isinstance(v, Tensor) and v._alive:
                    v.root._locks.pop(id(self), None)
        if self._built is not None:
            for _, t, _ in self._built.outputs:
                t.root._locks.pop(id(self), None)

    # -- performance ---------------------------------------------------------------------------
    @property
    def perf(self) -> Perf:
        """``VX_GRAPH_PERFORMANCE`` (see :mod:`dvsdk.vx.perf`)."""
        self._account()
        return self._perf

    def _account(self) -> None:
        """Fold the runs not yet counted into node and graph perf.  The nodes' shares of
        each hardware segment come from one ``Net.profile()`` run, made the first time
        perf is asked for (or after ``RAW_RUNS`` runs), so runs cost nothing extra."""
        if not self._raw:
            return
        if self._shares is None:
            self._shares = self._profile_shares()
        built, by_name = self._built, {n.name: n for n in self.nodes}
        for stats, t0, t1 in self._raw:
            times: dict[int, float] = {id(n): 0.0 for n in self._order}
            for seg in stats.segments:
                for nid, share in self._shares.get(seg.name, {}).items():
                    times[nid] = times.get(nid, 0.0) + seg.device_us * share
            for kind, label, _start, dur, _ in stats.events:
                if kind == "cpu":
                    nodes = _nodes_of(label.split(" ", 1)[-1], built, by_name)
                    for node in nodes:
                        times[id(node)] = times.get(id(node), 0.0) + dur / len(nodes)
            for n in self._order:
                n._perf.add(times.get(id(n), 0.0) * 1e3)
            host = stats.pack_us + stats.sync_us + stats.unpack_us
            self._perf.add((sum(times.values()) + host) * 1e3, t0, t1)
        self._raw = []

    def _profile_shares(self) -> dict[str, dict[int, float]]:
        """Per hardware segment, each node's share of its device time, from one run of
        every command on its own (``Net.profile``)."""
        by_name = {n.name: n for n in self.nodes}
        ctx = self.context
        if ctx._in_flight is not None:
            ctx._in_flight._finish_device()       # results stay for that graph's wait()
        shares: dict[str, dict[int, float]] = {}
        totals: dict[str, float] = {}
        try:
            rows = self._net.profile(self._profile_feeds)
        except DvsdkError:                    # no per-command times: share by command count
            rows = [{"where": "hw", "segment": s["name"], "us": 1.0, "sources": src}
                    for s in self._net.meta["program"] if s["kind"] == "hw"
                    for src in s.get("command_sources", [])]
        for row in rows:
            if row["where"] != "hw":
                continue
            seg, us = row["segment"], float(row["us"] or 0.0)
            nodes = [n for s in row["sources"] for n in _nodes_of(s, self._built, by_name)]
            for n in nodes:
                d = shares.setdefault(seg, {})
                d[id(n)] = d.get(id(n), 0.0) + us / len(nodes)
            totals[seg] = totals.get(seg, 0.0) + us
        for seg, d in shares.items():
            for k in d:
                d[k] = d[k] / totals[seg] if totals[seg] else 1.0 / len(d)
        return shares

    # -- export ----------------------------------------------------------------------------------
    def export(self, path: Any, golden: bool = True) -> int:
        """Write the verified graph as a net.bin (``dvsdk-run`` and ``dvsdk.load`` run it):
        inputs and outputs are the graph's boundary tensors as float32 real values in their
        canonical NCHW shapes, named after the tensors.  ``golden`` adds the self-test pair.
        Returns the file size."""
        self._check()
        if not self.verified and self.verify() != Status.SUCCESS:
            raise self.error
        nf = self._net.file
        out = copy.copy(nf)
        out.meta = copy.deepcopy(nf.meta)
        if golden:
            from ..compiler.golden import add_golden

            add_golden(out, self._ir)
        return write(out, path)

    # -- release ---------------------------------------------------------------------------------
    def _release_net(self) -> None:
        if self._handle is not None:
            self._finish_device()
        self._done = None
        self._unlock()
        if self._net is not None:
            self._net.close()
        self._net = None

    def _destroy(self) -> None:
        self._release_net()
        for n in list(self._nodes):
            n._unhold()
            if n._alive and n._count > 0:
                n._count = 0
                n._maybe_destroy()
        self._nodes = []
        super()._destroy()


def _nodes_of(op_name: str, built: Built, by_name: dict[str, Node]) -> list[Node]:
    """The node(s) an IR op came from (a grouped convolution has several); ops the
    compiler made up are named after theirs (``name/part``, ``name_g0``...)."""
    if op_name in built.op_nodes:
        return built.op_nodes[op_name]
    made = [k for k in built.op_nodes if op_name.startswith(k) and op_name[len(k)] in "_/#"]
    if made:
        return built.op_nodes[max(made, key=len)]
    base = op_name.split("/", 1)[0].split("#", 1)[0]
    while base and base not in by_name and "_" in base:
        base = base.rsplit("_", 1)[0]
    return [by_name[base]] if base in by_name else []


def _host_value(t: Tensor) -> np.ndarray:
    """A tensor's (or view's) real values, float32, in its canonical IR shape."""
    region = t._storage()
    real = region.astype(np.float32) if region.dtype.kind == "f" else (
        region.astype(np.float64) / 2.0 ** t.fixed_point_position).astype(np.float32)
    return np.ascontiguousarray(real.T).reshape(canonical(t.dims))


def _policies(node: Node) -> tuple[int, int]:
    k = node.kdef.enum
    if k in (KernelEnum.CONVOLUTION_LAYER, KernelEnum.DECONVOLUTION_LAYER):
        p = node.value(3)
        return int(p.overflow_policy), int(p.rounding_policy)
    if k == KernelEnum.FULLY_CONNECTED_LAYER:
        return int(node.value(3)), int(node.value(4))
    return int(ConvertPolicy.SATURATE), int(RoundPolicy.TO_NEAREST_EVEN)


def _store(t: Tensor, value: np.ndarray, node: Node) -> None:
    """An output (canonical shape, real values) into tensor ``t`` with ``node``'s policies."""
    real = np.asarray(value).reshape(t.dims[::-1]).T
    region = t._storage()
    region[...] = to_storage(real, region.dtype, t.fixed_point_position, *_policies(node))

