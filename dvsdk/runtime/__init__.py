"""The runtime: a net.bin on a device (:mod:`.net`), its runs (:mod:`.handle`), per-command
profiles (:mod:`.profile`), image preprocessing on the CPU (:mod:`.images`) or the IPU
(:mod:`.ipu`)."""

from .handle import RunHandle, RunStats
from .net import Net, load

__all__ = ["Net", "RunHandle", "RunStats", "load"]
