"""The userspace DV700 driver: device seam, commands, command streams, command lists."""

from .device import Device, DeviceInfo, DmaBuffer, open_device

__all__ = ["Device", "DeviceInfo", "DmaBuffer", "open_device"]
