"""``dvsdk doctor``'s checks of the two kinds of board (README "Using a real board").

* A UIO board (``uio://``): which kick protocol its bitstream expects and why —
  the R5 kick (§10.4) when the device tree exposes the ``ipi`` and ``shm`` nodes (or
  they sit at the §10.11 default addresses), else the direct kick of bitstreams from
  before March 2019 — and that those nodes are usable.
* A board running DMP's kernel module (``dv://``): the device nodes (§2.4), the sysfs
  facts the runtime depends on (§10.9: ``ub_size``, ``mac_num``, ``max_kernel_size``,
  ``conv_freq``, ``svn_version``), DMA memory (a contiguous dma-heap, else ION, §2.2) and
  whether the clock can be set.
"""

from __future__ import annotations

import os
import stat
from typing import Any

from ..driver import kmodver
from ..driver.discovery import Inventory, UioNode
from ..driver.kick import KICK_PROTOCOLS
from ..driver.kmod import freq_range
from ..driver.uio import choose_kick
from ..errors import DvsdkError

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
#: what the runtime needs from the module's sysfs (§10.9); libdmpdv's defaults (§6.2)
#: would make every conv fail, so a missing one is a failure
KMOD_ATTRS = ("ub_size", "mac_num", "max_kernel_size", "conv_freq", "svn_version")
R5_HINT = ("add the device tree's ipi (0xFF340000) and shm (0x7ED00000) nodes as "
           "compatible = \"generic-uio\" (README 'Using a real board')")


def check_kick(doc: Any, inv: Inventory, requested: str) -> bool:
    """The kick protocol this UIO board gets, and why; False if it cannot work."""
    if requested not in ("auto",) + KICK_PROTOCOLS:
        doc.add(FAIL, "kick", f"unknown kick={requested!r}", "kick=auto, r5 or direct")
        return False
    windows = inv.r5_windows()
    try:
        kick, why = choose_kick(requested, windows)
    except DvsdkError as e:
        doc.add(FAIL, "kick", str(e).removesuffix(f"; {e.hint}"), e.hint or R5_HINT)
        return False
    if kick == "r5":
        doc.add(OK, "kick", f"R5 kick (SHM + IPI, DMP's current firmware): {why}")
        ok = True
        for window in ("ipi", "shm"):
            node = windows[window][0]
            path = node.dev_path
            ok &= doc._node_access(f"{window} node", path)
            if window == "ipi" and isinstance(node, UioNode) and node.maps \
                    and node.maps[0].size < 0x20:
                doc.add(FAIL, "ipi node", f"{node.sys_name}'s map is {node.maps[0].size} bytes"
                        ": the IPI registers need 0x20", R5_HINT)
                ok = False
        return ok
    status = INFO if requested == "direct" else WARN
    doc.add(status, "kick", f"direct kick (conv 0x400-0x40C, bitstreams before March 2019): "
            f"{why}", "" if requested == "direct" else
            f"a board running DMP's current image needs the R5 kick: {R5_HINT}")
    return True


def _char_node(doc: Any, path: str, required: bool) -> bool:
    if not os.path.exists(path):
        if required:
            doc.add(FAIL, "device node", f"{path} does not exist",
                    "load DMP's kernel module (modprobe dmp_dv) or use uio://")
        else:
            doc.add(INFO, "device node", f"{path} does not exist (that unit is not in the "
                    "bitstream)")
        return not required
    if not stat.S_ISCHR(os.stat(path).st_mode):
        doc.add(INFO, "device node", f"{path} is not a character device")
    return doc._node_access("device node", path)


def check_kmod(doc: Any, options: dict[str, str]) -> bool:
    """DMP's kernel module: nodes, sysfs, DMA memory; True if it can be opened."""
    dev = options.get("dev") or "/dev"
    sysfs = options.get("sysfs") or "/sys"
    conv_dir = os.path.join(sysfs, "class", "dmp_dv", "dv_conv")
    ok = _char_node(doc, os.path.join(dev, "dv_conv"), True)
    for unit in ("dv_ipu", "dv_maximizer"):
        _char_node(doc, os.path.join(dev, unit), False)
    if not os.path.isdir(conv_dir):
        doc.add(FAIL, "sysfs", f"{conv_dir} is missing: DMP's kernel module is not loaded",
                "modprobe dmp_dv (with the DV700 in the device tree, compatible dmp,dv700)")
        return False
    declared = options.get("module") or None
    version = declared or kmodver.read_version(sysfs)
    try:
        abi = kmodver.identify(version, "dv://?module=" if declared else
                               os.path.join(sysfs, "module/dmp_dv/version"))
        wait = {"kwait": "with exec time", "v0": "bare id"}.get(abi.wait, "asked of the module")
        doc.add(OK, "module", f"DMP's module {abi.version} ({abi.commit}): "
                f"{'R5' if abi.r5 else 'pre-R5, direct'} kick, WAIT {wait}, "
                f"{abi.io_align}-byte input/output alignment")
    except DvsdkError as e:
        doc.add(FAIL, "module", e.message, e.hint or "")
        ok = False
        abi = None
    for attr in KMOD_ATTRS:
        text = _read(os.path.join(conv_dir, attr))
        if text is None or not text.isdigit() or (attr != "conv_freq" and int(text) == 0):
            doc.add(FAIL, "sysfs", f"{attr} is {text!r}: libdmpdv would assume a default that "
                    "fails every conv (§6.2)", "update DMP's kernel module")
            ok = False
    freq = os.path.join(conv_dir, "conv_freq")
    if abi is not None and abi.conv_freq is None:
        doc.add(INFO, "clock", f"conv_freq is read-only in module {abi.version} (pre-R5)")
    elif os.access(freq, os.W_OK):
        lo, hi = freq_range(abi.conv_freq if abi is not None else None)
        doc.add(OK, "clock", f"conv_freq is writable: dvsdk clock MHZ sets it ({lo}..{hi})")
    elif os.path.exists(freq):
        doc.add(INFO, "clock", "conv_freq is read-only for this user (dvsdk clock needs root)")
    heaps = sorted(os.listdir(os.path.join(dev, "dma_heap"))) \
        if os.path.isdir(os.path.join(dev, "dma_heap")) else []
    contiguous = [h for h in heaps if not h.startswith("system")]
    requested = options.get("heap", "auto")
    if requested not in ("auto", "ion") and requested not in heaps:
        doc.add(FAIL, "dma", f"no dma-heap {requested!r}", f"heaps: {', '.join(heaps)}")
        return False
    if requested == "ion" or (requested == "auto" and not contiguous):
        ion = os.path.join(dev, "ion")
        if os.path.exists(ion):
            doc.add(OK, "dma", f"ION ({ion}), as libdmpdv allocates"
                    + (f"; dma-heaps {', '.join(heaps)} are not contiguous" if heaps else ""))
            ok &= doc._node_access("dma node", ion)
        else:
            doc.add(FAIL, "dma", "no contiguous dma-heap and no /dev/ion"
                    + (f" (dma-heaps: {', '.join(heaps)})" if heaps else ""),
                    "enable a CMA heap (CONFIG_DMABUF_HEAPS_CMA) or ION")
            ok = False
    else:
        name = contiguous[0] if requested == "auto" else requested
        status = WARN if name.startswith("system") else OK
        doc.add(status, "dma", f"dma-heap {name}" + (": not contiguous, the module will refuse "
                                                      "its buffers" if status == WARN else ""))
        ok &= doc._node_access("dma node", os.path.join(dev, "dma_heap", name))
    return ok


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None
