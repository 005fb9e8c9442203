"""dvsdk: the Python SDK for the DMP DV700 neural-network accelerator.

Data flow: model -> :mod:`dvsdk.compiler` -> net.bin -> runtime -> :mod:`dvsdk.driver`
-> device (hardware over UIO, the :mod:`dvsdk.sim` simulator, or a remote agent).
"""

from __future__ import annotations

__version__ = "0.1.0"

from .driver.device import Device, DeviceInfo, DmaBuffer, open_device  # noqa: E402


def load(path, device=None, cpu_steps=None):  # noqa: ANN001, ANN201 - see runtime.net.load
    """Load a net.bin on a device (see :func:`dvsdk.runtime.net.load`); ``cpu_steps``
    (``"device"``, the default, or ``"unpack"``) chooses how CPU steps run."""
    from .runtime.net import load as _load

    return _load(path, device, cpu_steps)


def compile(model, output=None, **options):  # noqa: A001, ANN001, ANN201
    """Compile a model to a net.bin (see :func:`dvsdk.compiler.build.compile`)."""
    from .compiler.build import compile as _compile

    return _compile(model, output, **options)


__all__ = ["__version__", "Device", "DeviceInfo", "DmaBuffer", "compile", "load", "open_device"]
