"""Tensors: ``vxCreateTensor``, ``vxCreateVirtualTensor``, ``vxCreateTensorFromView`` and
``vxCopyTensorPatch`` (``formats.md`` §2.1, §3).

Dimensions are OpenVX's, dimension 0 first and varying fastest in memory:
``[width, height, #IFM, #batches...]`` for activations, ``[kernel_x, kernel_y, #IFM, #OFM]``
for weights, ``[#IFM, #batches]`` for a fully connected layer's input.  Host arrays are
indexed the same way: ``a[x, y, c, n]`` with ``a.shape == tensor.dims``.  (The storage is
OpenVX's memory order, dimension 0 contiguous, i.e. ``a.T`` is C-contiguous; NCHW is the
same bytes, which is how the graph hands tensors to the compiler without copying.)

A **virtual** tensor belongs to one graph, may leave its rank, dimensions (0) or type
(``Type.INVALID``) undefined until verification resolves them from the node that writes
it, and cannot be read or written by the host.  A **view** is a box ``[start, end)`` of a
tensor (or of a view): it shares the parent's storage, a node writing views of one tensor
along a dimension is a concatenation and a node reading a view is a split, without copies
(OpenVX's way, §2.1).  Views of a virtual tensor need its dimensions defined.

Host access follows the core spec's concurrency rule: while a scheduled graph writes a
tensor, or reads it, the host may not write it, and may not read a tensor it writes, until
``graph.wait()`` (``ERROR_GRAPH_SCHEDULED``).  Writing a tensor that a verified graph uses
as a static parameter (weights, biases) marks that graph unverified.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .convert import from_storage, to_storage
from .reference import Reference
from .types import (
    DTYPES,
    Accessor,
    ConvertPolicy,
    RoundPolicy,
    Status,
    Type,
    VxError,
    enum_value,
    type_name,
)

__all__ = ["Tensor", "MAX_DIMS"]

MAX_DIMS = 6


def _dims(dims: Any, what: str, allow_undefined: bool) -> tuple[int, ...] | None:
    if dims is None and allow_undefined:
        return None
    try:
        items = list(dims)
        out = tuple(int(d) for d in items)
    except (TypeError, ValueError, OverflowError):
        raise VxError(Status.ERROR_INVALID_DIMENSION, f"{what}: dimensions must be integers",
                      field=what, value=dims) from None
    if any(isinstance(d, (bool, np.bool_)) or d != o for d, o in zip(items, out)):  # not 8.5
        raise VxError(Status.ERROR_INVALID_DIMENSION, f"{what}: dimensions must be integers",
                      field=what, value=tuple(items))
    if not 1 <= len(out) <= MAX_DIMS:
        raise VxError(Status.ERROR_INVALID_DIMENSION, f"{what}: 1 to {MAX_DIMS} dimensions",
                      field=what, value=out, limit=f"1..{MAX_DIMS}")
    low = 0 if allow_undefined else 1
    if any(d < low for d in out):
        raise VxError(Status.ERROR_INVALID_DIMENSION,
                      f"{what}: dimensions must be >= {low}"
                      + (" (0 = undefined, virtual tensors only)" if allow_undefined else ""),
                      field=what, value=out, limit=f">= {low}")
    return out


def _allocate(dims: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """The host array of a tensor: no larger than a compiled program's largest tensor
    (:data:`dvsdk.compiler.limits.MAX_TENSOR_BYTES`; a bigger one could never be processed),
    else ``VX_ERROR_NO_MEMORY`` naming the dimensions, not numpy's ValueError or
    MemoryError."""
    from ..compiler.limits import MAX_TENSOR_BYTES

    size = math.prod(dims) * dtype.itemsize          # exact: no int64 wrap
    if size > MAX_TENSOR_BYTES:
        raise VxError(Status.ERROR_NO_MEMORY, f"dims: the tensor would need {size:,} bytes",
                      field="dims", value=dims, limit=f"{MAX_TENSOR_BYTES:,} bytes")
    try:
        return np.zeros(dims[::-1], dtype)
    except MemoryError:
        raise VxError(Status.ERROR_NO_MEMORY, f"dims: cannot allocate {size:,} bytes",
                      field="dims", value=dims) from None


class Tensor(Reference):
    """``vx_tensor``.  ``Tensor(ctx, dims, data_type, fixed_point_position=0)``."""

    vx_type = Type.TENSOR

    def __init__(self, context: Any, dims: Sequence[int], data_type: int = Type.FLOAT32,
                 fixed_point_position: int = 0, *, _virtual_in: Any = None,
                 _parent: Tensor | None = None, _start: tuple[int, ...] | None = None
                 ) -> None:
        virtual = _virtual_in is not None
        self._dims = _dims(dims, "dims", allow_undefined=virtual)
        open_type = virtual or (_parent is not None and _parent.is_virtual)
        if open_type and int(data_type or 0) == Type.INVALID:
            dt: Type | None = None
        else:
            dt = enum_value(Type, data_type, "data_type")
            if dt not in DTYPES:
                raise VxError(Status.ERROR_INVALID_TYPE,
                              f"data_type {type_name(dt)} is not an NN tensor type",
                              field="data_type", value=type_name(dt),
                              limit=[type_name(t) for t in DTYPES])
        fpp = int(fixed_point_position)
        if dt is not None and not 0 <= fpp < DTYPES[dt].itemsize * 8 and DTYPES[dt].kind != "f":
            raise VxError(Status.ERROR_INVALID_VALUE, "fixed_point_position out of range",
                          field="fixed_point_position", value=fpp,
                          limit=f"0..{DTYPES[dt].itemsize * 8 - 1}")
        self._type = dt
        self._fpp = fpp if dt is not None and DTYPES[dt].kind != "f" else 0
        self._graph = _virtual_in
        self._parent = _parent
        self._start = _start
        self._resolved: tuple[int, ...] | None = None
        self._resolved_type: Type | None = None
        self._data: np.ndarray | None = None
        self._written = False
        self.value_range: tuple[float, float] | None = None
        self._locks: dict[int, tuple[Any, str]] = {}   # graph id -> (graph, "r"/"w")
        super().__init__(context)
        if _parent is not None:
            _parent._hold()
        elif not virtual:
            self._data = _allocate(self._dims, DTYPES[dt])

    def _prefix(self) -> str:
        return "view" if self._parent is not None else (
            "virtual" if self._graph is not None else "tensor")

    # -- attributes ------------------------------------------------------------------------
    @property
    def dims(self) -> tuple[int, ...] | None:
        """``VX_TENSOR_DIMS``: as created (0 = undefined); after verification of a virtual
        tensor, the resolved dimensions."""
        return self._resolved or self._dims

    @property
    def num_dims(self) -> int:
        d = self.dims
        return 0 if d is None else len(d)

    @property
    def data_type(self) -> Type:
        return self._resolved_type or self._type or Type.INVALID

    @property
    def fixed_point_position(self) -> int:
        return self._fpp

    @property
    def is_virtual(self) -> bool:
        return self.root._graph is not None

    @property
    def parent(self) -> Tensor | None:
        return self._parent

    @property
    def view_start(self) -> tuple[int, ...] | None:
        return self._start

    @property
    def root(self) -> Tensor:
        t = self
        while t._parent is not None:
            t = t._parent
        return t

    def box(self) -> tuple[tuple[int, int], ...]:
        """This tensor's ``[start, end)`` per dimension inside its root."""
        if self._parent is None:
            d = self.dims or ()
            return tuple((0, n) for n in d)
        pbox = self._parent.box()
        return tuple((p0 + s, p0 + s + n) for (p0, _), s, n in zip(pbox, self._start,
                                                                      self._dims))

    @property
    def defined(self) -> bool:
        d = self.dims
        return d is not None and all(d) and self.data_type != Type.INVALID

    def set_value_range(self, low: float, high: float) -> None:
        """Declare the real values this tensor holds (a vendor attribute): the verifier's
        range analysis uses it, e.g. to place a normalization layer on the DV700's LRN
        unit (``firmware_spec/lrn.md``).  A promise: values outside make results wrong."""
        self._check()
        lo, hi = float(low), float(high)
        if not lo <= hi:
            raise VxError(Status.ERROR_INVALID_VALUE, "value range needs low <= high",
                          field="value_range", value=(low, high))
        self.value_range = (lo, hi)
        self._touch_graphs(static_only=False)

    # -- views -----------------------------------------------------------------------------
    def view(self, start: Sequence[int], end: Sequence[int]) -> Tensor:
        """``vxCreateTensorFromView``: the box ``[start, end)`` of this tensor."""
        self._check()
        d = self.dims
        if d is None or not all(d):
            raise VxError(Status.ERROR_INVALID_DIMENSION,
                          f"a view needs the dimensions of {self.name!r} defined",
                          field="dims", value=d)
        s = _dims(start, "view_start", allow_undefined=True)
        e = _dims(end, "view_end", allow_undefined=False)
        if len(s) != len(d) or len(e) != len(d):
            raise VxError(Status.ERROR_INVALID_DIMENSION, "view rank differs from the tensor",
                          field="view_start/view_end", value=(s, e), limit=len(d))
        if any(not 0 <= a < b <= n for a, b, n in zip(s, e, d)):
            raise VxError(Status.ERROR_INVALID_PARAMETERS,
                          f"view [{s}, {e}) is not inside {self.name!r} {d}",
                          field="view_start/view_end", value=(s, e), limit=d)
        dims = tuple(b - a for a, b in zip(s, e))
        return Tensor(self.context, dims, self.data_type, self._fpp, _parent=self, _start=s)

    # -- host access -----------------------------------------------------------------------
    def _storage(self) -> np.ndarray:
        """The root's storage indexed in OpenVX order, restricted to this tensor's box."""
        root = self.root
        return root._data.T[tuple(slice(a, b) for a, b in self.box())]

    def copy_patch(self, user: np.ndarray | None = None, usage: int = Accessor.READ_ONLY,
                   view_start: Sequence[int] | None = None,
                   view_end: Sequence[int] | None = None, *, user_type: Any = None,
                   overflow_policy: int = ConvertPolicy.SATURATE,
                   rounding_policy: int = RoundPolicy.TO_NEAREST_EVEN) -> np.ndarray | None:
        """``vxCopyTensorPatch``: copy the box ``[view_start, view_end)`` (default: all).

        ``WRITE_ONLY``: ``user`` (shape = the box, OpenVX order) into the tensor, converted
        from the user's type (see :mod:`dvsdk.vx.convert`) with the given policies.
        ``READ_ONLY``: the box out, into ``user`` if given (its dtype decides the
        conversion), else as a new array of ``user_type`` (default: the tensor's own type).
        """
        self._check()
        usage = enum_value(Accessor, usage, "usage")
        if usage == Accessor.READ_AND_WRITE:
            raise VxError(Status.ERROR_INVALID_PARAMETERS, "copy_patch is READ_ONLY or "
                          "WRITE_ONLY", field="usage", value=usage.name)
        root = self.root
        if root._data is None:
            raise VxError(Status.ERROR_OPTIMIZED_AWAY,
                          f"{self.name!r} is virtual: the host cannot access it",
                          field=self.name)
        self._check_locks(usage)
        dims = self.dims
        s = (0,) * len(dims) if view_start is None else _dims(view_start, "view_start", True)
        e = dims if view_end is None else _dims(view_end, "view_end", False)
        if len(s) != len(dims) or len(e) != len(dims) or any(
                not 0 <= a < b <= n for a, b, n in zip(s, e, dims)):
            raise VxError(Status.ERROR_INVALID_PARAMETERS,
                          f"patch [{s}, {e}) is not inside {self.name!r} {dims}",
                          field="view_start/view_end", value=(s, e), limit=dims)
        region = self._storage()[tuple(slice(a, b) for a, b in zip(s, e))]
        policies = (int(enum_value(ConvertPolicy, overflow_policy, "overflow_policy")),
                    int(enum_value(RoundPolicy, rounding_policy, "rounding_policy")))
        if usage == Accessor.WRITE_ONLY:
            if user is None:
                raise VxError(Status.ERROR_INVALID_PARAMETERS, "WRITE_ONLY needs user data",
                              field="user")
            arr = self._user_array(user, region.shape)
            region[...] = to_storage(arr, region.dtype, self._fpp, *policies)
            root._written = True
            root._touch_graphs(static_only=True)
            return None
        if user is not None:
            target = user if isinstance(user, np.ndarray) else None
            if target is None or target.shape != region.shape:
                raise VxError(Status.ERROR_INVALID_PARAMETERS,
                              "READ_ONLY needs a numpy array of the patch's shape (or None)",
                              field="user", value=getattr(user, "shape", type(user).__name__),
                              limit=region.shape)
            target[...] = from_storage(region, self._fpp, target.dtype, *policies)
            return target
        dt = region.dtype if user_type is None else np.dtype(user_type)
        return from_storage(region, self._fpp, dt, *policies)

    def _user_array(self, user: Any, shape: tuple[int, ...]) -> np.ndarray:
        arr = np.asarray(user)
        if arr.dtype.kind not in "fiub":
            raise VxError(Status.ERROR_INVALID_TYPE, f"cannot copy {arr.dtype} data into a "
                          "tensor", field="user", value=str(arr.dtype))
        if arr.shape != shape:
            if arr.size == int(np.prod(shape)) and arr.ndim == 1:
                return arr.reshape(shape, order="F")    # OpenVX memory order
            raise VxError(Status.ERROR_INVALID_DIMENSION,
                          f"user data {arr.shape} does not match the patch {shape} "
                          "(OpenVX order: dimension 0 = width first)",
                          field="user", value=arr.shape, limit=shape)
        return arr

    def _check_locks(self, usage: Accessor) -> None:
        for graph, mode in self.root._locks.values():
            if mode == "w" or usage != Accessor.READ_ONLY:
                raise VxError(Status.ERROR_GRAPH_SCHEDULED,
                              f"{self.name!r} is {'written' if mode == 'w' else 'read'} by "
                              f"graph {graph.name!r}, which is scheduled: call wait() first",
                              field=self.name, value=graph.name)

    def _touch_graphs(self, static_only: bool) -> None:
        """A static parameter (or a declared range) changed: unverify the graphs using it."""
        if self._context is not None:
            self._context._changed(self, static_only)

    # -- graph-side helpers ----------------------------------------------------------------
    def _read_real(self) -> np.ndarray:
        """The root's values as float32 in NCHW-compatible (reversed-dims) order."""
        data = self.root._data
        if data.dtype.kind == "f":
            return data.astype(np.float32, copy=False)
        return (data.astype(np.float64) / 2.0 ** self._fpp).astype(np.float32)

    def _destroy(self) -> None:
        if self._parent is not None:
            self._parent._unhold()
        self._data = None
        super()._destroy()
