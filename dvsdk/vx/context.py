"""The OpenVX context: owner of every object, of the device, and of the kernel table.

``Context(device=None)`` takes a :class:`~dvsdk.driver.device.Device`, a device URL
(``"sim://"``, ``"uio://"``, ``"socket://host:port"`` ...) or None for the default
(``$DVSDK_DEVICE``, else the simulator).  A URL or None is opened at the first graph
verification and closed with the context; a Device object stays the caller's.

Releasing the context (``release()``, or leaving ``with vx.Context() as ctx:``) releases
every object it still holds, whatever their counts (``vxReleaseContext`` garbage-collects),
and frees every verified graph's device memory.

Extensions (``extensions``): the DV700 computes in FP16, which neither KHR_NN_8 nor
KHR_NN_16 describes, so this context does not claim them (a conformant implementation must
compute the fixed-point types with their rounding and saturation at every node).  It reports
``"DVSDK_nn_fp16"``: the eight NN kernels computed in FP16/float32, with INT16 (Q7.8),
UINT8 and INT8 tensors accepted at the API and converted at the graph's boundary with the
nodes' overflow and rounding policies.  Where results differ from a conformant fixed-point
implementation is listed in the README section "OpenVX graphs (dvsdk.vx)".
"""

from __future__ import annotations

import itertools
from typing import Any

from ..driver.device import Device, open_device
from .reference import Reference
from .types import Status, Type, VxError

__all__ = ["Context", "EXTENSIONS", "VENDOR", "VERSION"]

EXTENSIONS = "DVSDK_nn_fp16"
VENDOR = "dvsdk (DMP DV700)"
VERSION = (1, 2)


class Context(Reference):
    """``vx_context``: create one per application (or per device)."""

    vx_type = Type.CONTEXT

    def __init__(self, device: Device | str | None = None) -> None:
        self._objects: dict[int, Reference] = {}
        self._names = itertools.count(1)
        self._device_arg = device
        self._device: Device | None = device if isinstance(device, Device) else None
        self._own_device = not isinstance(device, Device)
        self._in_flight: Any = None   # the graph whose run occupies the device
        super().__init__(None, "context")

    # -- bookkeeping -----------------------------------------------------------------------
    def _next_name(self, prefix: str) -> str:
        return f"{prefix}_{next(self._names)}"

    def _adopt(self, obj: Reference) -> None:
        self._check()
        self._objects[id(obj)] = obj

    def _forget(self, obj: Reference) -> None:
        self._objects.pop(id(obj), None)

    def _changed(self, obj: Reference, static_only: bool) -> None:
        """``obj`` changed: graphs using it (as a static parameter) are no longer verified."""
        for g in list(self._objects.values()):
            if g.vx_type == Type.GRAPH and g._alive and g.uses(obj, static_only):
                g._unverify(f"{obj.name!r} changed after verification")

    def _same(self, obj: Reference, what: str) -> None:
        """Mixing objects of two contexts is refused (OpenVX leaves it undefined)."""
        if obj._context is not self:
            raise VxError(Status.ERROR_INVALID_SCOPE,
                          f"{what} {obj.name!r} belongs to another context", field=what)

    # -- attributes ------------------------------------------------------------------------
    @property
    def device(self) -> Device:
        """The device graphs run on (opened on first use)."""
        self._check()
        if self._device is None:
            arg = self._device_arg
            self._device = open_device(arg if isinstance(arg, str) else None)
        return self._device

    @property
    def extensions(self) -> str:
        """``VX_CONTEXT_EXTENSIONS``: space-separated; see the module docstring."""
        return EXTENSIONS

    @property
    def vendor(self) -> str:
        return VENDOR

    @property
    def version(self) -> tuple[int, int]:
        return VERSION

    @property
    def references(self) -> int:
        """``VX_CONTEXT_REFERENCES``: live objects of this context."""
        return len(self._objects)

    @property
    def max_tensor_dims(self) -> int:
        return 6

    # -- factories -------------------------------------------------------------------------
    def graph(self) -> Any:
        from .graph import Graph

        return Graph(self)

    def tensor(self, dims: Any, data_type: int = Type.FLOAT32,
               fixed_point_position: int = 0) -> Any:
        from .tensor import Tensor

        return Tensor(self, dims, data_type, fixed_point_position)

    def scalar(self, data_type: int, value: Any) -> Any:
        from .scalar import Scalar

        return Scalar(self, data_type, value)

    def kernel(self, name_or_enum: str | int) -> Any:
        """``vxGetKernelByName`` / ``vxGetKernelByEnum``."""
        from .kernels import get_kernel

        return get_kernel(self, name_or_enum)

    # -- release ---------------------------------------------------------------------------
    def _destroy(self) -> None:
        from .graph import Graph

        objects = list(self._objects.values())
        for obj in objects:                       # graphs first: they free device memory
            if isinstance(obj, Graph) and obj._alive:
                obj._destroy()
        for obj in objects:
            if obj._alive:
                obj._alive = False
        self._objects.clear()
        if self._own_device and self._device is not None:
            self._device.close()
        self._device = None
        self._alive = False
