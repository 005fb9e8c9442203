"""dvsdk: the Python SDK for the DMP DV700 neural-network accelerator.

Data flow: model -> :mod:`dvsdk.compiler` -> net.bin -> runtime -> :mod:`dvsdk.driver`
-> device (hardware over UIO, the :mod:`dvsdk.sim` simulator, or a remote agent).
"""

from __future__ import annotations

__version__ = "0.1.0"

from .driver.device import Device, DeviceInfo, DmaBuffer, open_device  # noqa: E402

__all__ = ["__version__", "Device", "DeviceInfo", "DmaBuffer", "open_device"]
