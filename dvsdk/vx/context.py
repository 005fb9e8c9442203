"""The OpenVX context: owner of every object, of the device, and of the kernel table.

``Context(device=None)`` takes a :class:`~dvsdk.driver.device.Device`, a device URL
(``"sim://"``, ``"uio://"``, ``"socket://host:port"`` ...) or None for the default
(``$DVSDK_DEVICE``, else the simulator).  A URL or None is opened at the first graph
verification and closed with the context; a Device object stays the caller's.

Releasing the context (``release()``, or leaving ``with vx.Context() as ctx:``) releases
every object it still holds, whatever their counts (``vxReleaseContext`` garbage-collects),
and frees every verified graph's device memory.

Extensions (``extensions``, ``query(ContextAttribute.EXTENSIONS)`` as
``vxQueryContext(VX_CONTEXT_EXTENSIONS)``): ``"KHR_NN_8 KHR_NN_16 DVSDK_nn_fp16"``.  The
NN extension's legal combination "KHR_NN_8 KHR_NN_16" (its §1): UINT8 and INT8 tensors
(KHR_NN_8) and INT16 Q7.8 ones (KHR_NN_16) are taken by every NN kernel, and the
convolution, fully connected and deconvolution layers on them compute the text's
``sat(round(sum + b))`` exactly, with the node's overflow and rounding policies
(:mod:`dvsdk.vx.exact`: on the DV700 where a bound proves its FP16 path exact, else in
integers on the CPU).  ``DVSDK_nn_fp16`` names the FP16/float32 tensors the DV700 computes
natively.  Where other kernels on fixed-point tensors still differ from a conformant
implementation is listed in the README section "OpenVX graphs (dvsdk.vx)".
"""

from __future__ import annotations

import itertools
from enum import IntEnum
from typing import Any

from ..driver.device import Device, open_device
from .kernels import KERNELS
from .khr_nn import EXTENSION_8, EXTENSION_16
from .reference import Reference
from .types import Status, Type, VxError

__all__ = ["Context", "ContextAttribute", "EXTENSIONS", "VENDOR", "VERSION"]

EXTENSIONS = f"{EXTENSION_8} {EXTENSION_16} DVSDK_nn_fp16"
VENDOR = "dvsdk (DMP DV700)"
VERSION = (1, 2)


class ContextAttribute(IntEnum):
    """``vx_context_attribute_e``: ``VX_ATTRIBUTE_BASE(VX_ID_KHRONOS, VX_TYPE_CONTEXT) + k``
    (``(0x801 << 8) + k``, OpenVX core ``vx_types.h``); the ones :meth:`Context.query`
    answers."""

    VERSION = 0x80101
    UNIQUE_KERNELS = 0x80102
    REFERENCES = 0x80104
    IMPLEMENTATION = 0x80105
    EXTENSIONS_SIZE = 0x80106
    EXTENSIONS = 0x80107
    MAX_TENSOR_DIMS = 0x8010E


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

    def query(self, attribute: int) -> Any:
        """``vxQueryContext``: the value of a :class:`ContextAttribute` (its raw number
        works too).  ``EXTENSIONS_SIZE`` counts the C string's terminating NUL, as the
        buffer a C caller allocates for ``EXTENSIONS`` must; ``VERSION`` is
        ``VX_VERSION(1, 2)`` = ``0x0102``.  Another attribute raises
        :class:`VxError` ``ERROR_NOT_SUPPORTED`` naming it."""
        self._check()
        try:
            attr = ContextAttribute(int(attribute))
        except (TypeError, ValueError):
            raise VxError(Status.ERROR_NOT_SUPPORTED, f"context attribute {attribute!r} is "
                          "not one this context answers", field="attribute", value=attribute,
                          limit=[a.name for a in ContextAttribute]) from None
        return {
            ContextAttribute.VERSION: (VERSION[0] << 8) | VERSION[1],
            ContextAttribute.UNIQUE_KERNELS: len(KERNELS),
            ContextAttribute.REFERENCES: self.references,
            ContextAttribute.IMPLEMENTATION: VENDOR,
            ContextAttribute.EXTENSIONS_SIZE: len(EXTENSIONS.encode()) + 1,
            ContextAttribute.EXTENSIONS: EXTENSIONS,
            ContextAttribute.MAX_TENSOR_DIMS: self.max_tensor_dims,
        }[attr]

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
