"""``dvsdk doctor [--device URL] [net.bin]``: is this board ready to run the DV700?

Checks, in order, each printed with what to do about it:

1. discovery (pyudev or the sysfs walk, linux-dma.md §5.6) and the DMP kernel
   driver (``/sys/class/dmp_dv``, dv700-interface.md §10.9), which would own the
   hardware instead of UIO;
2. UIO support and the DV700 UIO node(s) and sub-units (§10.11, udev/README.md);
3. FPGA state (``fpga_manager``): registers are not touched unless the PL is
   programmed, since reading an unprogrammed PL address can hang the bus;
4. device nodes: exist, readable and writable; the ``dvsdk`` group;
5. DMA memory: a u-dma-buf (§5.2), below 4 GiB, large enough for the net.bin,
   its coherence mode and how caches will be maintained (ioctl or sysfs);
6. the kick protocol the bitstream expects and why (:mod:`.doctor_boards`): the R5 kick
   when the device tree exposes the ``ipi`` and ``shm`` nodes, else the direct kick;
7. the device itself, opened read-only (``init=0``): exclusive lock, HW version
   (``0x128 & 0xFFFF``), UBUF size (``0x11C``, else DT ``ubuf-size``), MACs
   (``0x120 * 72``) on an R5 board, at 0x140, 0x148 (KiB) and 0x14C on a pre-R5 one
   (:mod:`dvsdk.driver.convid`), the conv clock (kernel sysfs, else ``clock_mhz``), IRQ count.

A board running DMP's kernel module (``--device dv://``; the default when the module is
loaded and no DV700 is bound to UIO) gets its own checks (:mod:`.doctor_boards`): device
nodes, the module's sysfs facts, DMA memory (dma-heap or ION), the clock.

Exit status: 0 when nothing failed (warnings allowed), 3 for device problems
(including "no board on this machine"), 2 for bad arguments.

With a net.bin argument the DMA size is checked against what the network needs (from
its META, :func:`dvsdk.netfile.dma_bytes`; callers may also pass ``required_dma``), and
the network against the device it would run on, with the runtime's own check
(:func:`dvsdk.netfile.check_hardware`, which ``dvsdk.load`` applies): unified buffer
size, kernel size, hardware revision and units.
"""

from __future__ import annotations

import argparse
import grp
import os
import pwd
import stat
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import urlsplit

from .. import native
from ..driver import convid
from ..driver.device import default_url, open_device, parse_url
from ..driver.discovery import (
    DV700_COMPATIBLE,
    DVSDK_GROUP,
    UDMABUF_SUBSYSTEMS,
    UDMABUF_SYNC_ATTRS,
    Inventory,
    UdmabufNode,
    discover,
    parse_int,
    read_attr,
)
from ..errors import DeviceBusy, DvsdkError, InvalidURL
from .doctor_boards import check_kick, check_kmod

RULES_HINT = ("sudo cp udev/99-dmp-dv700.rules /etc/udev/rules.d/ && sudo udevadm control "
              "--reload && sudo udevadm trigger")
GROUP_HINT = (f"sudo groupadd -f --system {DVSDK_GROUP} && sudo usermod -aG {DVSDK_GROUP} "
              "$USER, then log out and back in")
BIND_HINT = (f"give the DT node compatible = \"{DV700_COMPATIBLE}\" and bind it to UIO: boot "
             f"with uio_pdrv_genirq.of_id={DV700_COMPATIBLE} (or modprobe uio_pdrv_genirq "
             f"of_id={DV700_COMPATIBLE}); see udev/README.md")
UDMABUF_HINT = ("load u-dma-buf with enough memory below 4 GiB, e.g. sudo modprobe u-dma-buf "
                "udmabuf0=67108864 (or a DT node compatible 'ikwzm,u-dma-buf')")
MIN_IOCTL_VERSION = (4, 7, 0)

OK, WARN, FAIL, INFO = "ok", "warn", "fail", "info"
_TAGS = {OK: "[ OK ]", WARN: "[WARN]", FAIL: "[FAIL]", INFO: "[INFO]"}


@dataclass
class Finding:
    status: str
    check: str
    detail: str
    fix: str = ""

    def render(self) -> str:
        text = f"  {_TAGS[self.status]} {self.check}: {self.detail}"
        if self.fix:
            text += f"\n         fix: {self.fix}"
        return text


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} B"


class Doctor:
    """Runs the checks for one device URL and collects :class:`Finding` s."""

    def __init__(self, url: str, required_dma: int | None = None, net: object = None,
                 net_name: str = "net.bin") -> None:
        self.url = url
        self.required_dma = required_dma
        self.net, self.net_name, self.net_checked = net, net_name, False
        self.findings: list[Finding] = []
        self.no_board = False

    def add(self, status: str, check: str, detail: str, fix: str = "") -> None:
        self.findings.append(Finding(status, check, detail, fix))

    @property
    def failed(self) -> bool:
        return any(f.status == FAIL for f in self.findings)

    # -- entry -------------------------------------------------------------------
    def run(self) -> list[Finding]:
        parsed = parse_url(self.url)
        if parsed.scheme == "dv":
            self.add(INFO, "board", "DMP's kernel module (dv://): dvsdk hands it kernel "
                     "commands; the module builds the stream and kicks the R5 (§10.3, §10.4)")
            if check_kmod(self, parsed.options):
                self._check_generic(board=True)
            else:
                self.no_board = True
            self._net_unchecked()
            return self.findings
        if parsed.scheme != "uio":
            self._check_generic()
            self._net_unchecked()
            return self.findings
        opts = parsed.options
        sysfs = opts.get("sysfs") or None
        dev = opts.get("dev") or "/dev"
        inv = discover(sysfs, dev)
        self.add(INFO, "discovery", f"{inv.source} under {inv.sysfs} (device nodes in {dev})")
        for note in inv.notes:
            self.add(INFO, "discovery", note)
        nodes_ok = self._check_uio(inv)
        if nodes_ok:
            nodes_ok = check_kick(self, inv, opts.get("kick", "auto"))
        pl_ok = self._check_fpga(inv)
        access_ok = self._check_nodes(inv) if nodes_ok else False
        dma_ok = self._check_dma(inv, opts.get("dma", ""))
        self._check_group(access_ok or not nodes_ok)
        if nodes_ok and pl_ok and access_ok and dma_ok:
            self._check_device()
        self._net_unchecked()
        return self.findings

    # -- the network against the device ---------------------------------------------
    def _check_net(self, info) -> None:
        """The runtime's own check (what ``dvsdk.load`` refuses), not a copy of it."""
        if self.net is None:
            return
        from ..netfile import check_hardware

        self.net_checked = True
        try:
            check_hardware(self.net, info)
        except DvsdkError as e:
            detail = str(e).removesuffix(f"; {e.hint}") if e.hint else str(e)
            self.add(FAIL, "net.bin", f"{self.net_name} does not fit this device: {detail}",
                     e.hint or "")
            return
        hw = self.net.meta.get("hardware", {})
        self.add(OK, "net.bin", f"{self.net_name} fits this device (needs unified buffer "
                 f"{hw.get('ub_size_min', 0)} of {info.ub_size} bytes, kernels up to "
                 f"{hw.get('max_kernel_size', 1)}x{hw.get('max_kernel_size', 1)}, units "
                 f"{', '.join(hw.get('units', ['conv']))})")

    def _net_unchecked(self) -> None:
        if self.net is not None and not self.net_checked:
            self.add(INFO, "net.bin", f"{self.net_name} not checked against the device: it "
                     "could not be opened (see above)")

    # -- non-board URLs --------------------------------------------------------------
    def _check_generic(self, board: bool = False) -> None:
        try:
            with open_device(self.url) as dev:
                info = dev.info()
        except DvsdkError as e:
            self.add(FAIL, "device", f"cannot open {self.url}: {e}", e.hint or "")
            return
        self.add(OK, "device", f"{info.backend} opened: ub_size={info.ub_size} "
                 f"mac_num={info.mac_num} conv_freq={info.conv_freq} MHz, units "
                 f"{', '.join(info.units)}, kick {info.kick or 'direct'}")
        self._check_net(info)
        if not board:
            self.add(INFO, "device", "not a board URL: the UIO/DMA checks do not apply "
                     "(use --device uio:// or dv://)")
        if info.backend == "sim":
            self.add(INFO, "simulator", native.describe())

    # -- UIO ---------------------------------------------------------------------------
    def _check_uio(self, inv: Inventory) -> bool:
        if inv.dmp_dv_loaded:
            status = INFO if inv.dv700_nodes else FAIL
            self.add(status, "kernel driver",
                     f"the DMP kernel driver is loaded ({inv.sysfs}/class/dmp_dv)",
                     "" if inv.dv700_nodes else
                     "this board runs DMP's kernel module: check it with --device dv:// "
                     "(or unload the module and " + BIND_HINT + ")")
        if not inv.has_uio_class:
            self.no_board = True
            self.add(FAIL, "uio", f"no UIO devices at all ({inv.sysfs}/class/uio is missing): "
                     "the UIO driver is not loaded or no DT node is bound to it", BIND_HINT)
            return False
        boards = inv.boards()
        if not boards:
            self.no_board = True
            others = ", ".join(f"{n.sys_name} ({n.name!r})" for n in inv.other_uio)
            self.add(FAIL, "uio", "no DV700 UIO device found"
                     + (f"; other UIO devices: {others}" if others else ""), BIND_HINT)
            return False
        for i, b in enumerate(boards):
            self.add(OK, "uio", f"board {i}: {b.describe()}")
            if b.mode == "combined" and len(b.units) > 1:
                self.add(WARN, "interrupts",
                         f"{b.nodes[0].sys_name} carries {len(b.units)} units on one UIO "
                         "interrupt; generic UIO delivers only the node's first IRQ",
                         "prefer one DT node per unit (dv700-conv, dv700-ipu, "
                         "dv700-maximizer), see udev/README.md")
            missing = {"conv"} - set(b.units)
            if missing:
                self.add(FAIL, "uio", f"board {i} has no conv unit", BIND_HINT)
                return False
        return True

    def _check_fpga(self, inv: Inventory) -> bool:
        states = inv.fpga_states()
        if not states:
            self.add(INFO, "fpga", "no fpga_manager in sysfs; assuming the PL is programmed")
            return True
        if any(s == "operating" for s in states.values()):
            self.add(OK, "fpga", ", ".join(f"{k}: {v}" for k, v in states.items()))
            return True
        self.add(FAIL, "fpga", "PL not programmed ("
                 + ", ".join(f"{k}: {v}" for k, v in states.items())
                 + "); registers will not be read", "load the DV700 bitstream "
                 "(fpgautil -b <bit> or a device-tree overlay)")
        return False

    def _node_access(self, check: str, path: str) -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self.add(FAIL, check, f"{path} does not exist",
                     "is udev running? check: ls -l " + os.path.dirname(path))
            return False
        except OSError as e:
            self.add(FAIL, check, f"cannot stat {path}: {e}", RULES_HINT)
            return False
        try:
            group = grp.getgrgid(st.st_gid).gr_name
        except KeyError:
            group = str(st.st_gid)
        kind = "char device" if stat.S_ISCHR(st.st_mode) else "regular file"
        desc = f"{path} ({kind}, mode {stat.S_IMODE(st.st_mode):04o}, group {group})"
        if os.access(path, os.R_OK | os.W_OK):
            self.add(OK, check, f"{desc} is readable and writable")
            return True
        self.add(FAIL, check, f"{desc}: permission denied for this user",
                 f"{RULES_HINT}; then {GROUP_HINT}")
        return False

    def _check_nodes(self, inv: Inventory) -> bool:
        ok = True
        for b in inv.boards():
            for node in b.nodes:
                ok &= self._node_access("device node", node.dev_path)
        return ok

    def _check_group(self, access_ok: bool) -> None:
        if os.geteuid() == 0:
            self.add(OK, "group", f"running as root; membership of '{DVSDK_GROUP}' not needed")
            return
        bad = WARN if access_ok else FAIL
        try:
            gr = grp.getgrnam(DVSDK_GROUP)
        except KeyError:
            self.add(bad, "group", f"group '{DVSDK_GROUP}' does not exist", GROUP_HINT)
            return
        if gr.gr_gid in os.getgroups() or gr.gr_gid == os.getegid():
            self.add(OK, "group", f"this session is in group '{DVSDK_GROUP}'")
            return
        try:
            user = pwd.getpwuid(os.geteuid()).pw_name
        except KeyError:
            user = str(os.geteuid())
        if user in gr.gr_mem:
            self.add(bad, "group", f"{user} was added to '{DVSDK_GROUP}' after this session "
                     "started", "log out and back in (or run: newgrp dvsdk)")
        else:
            self.add(bad, "group", f"{user} is not in group '{DVSDK_GROUP}'", GROUP_HINT)

    # -- DMA -------------------------------------------------------------------------
    def _check_dma(self, inv: Inventory, name: str) -> bool:
        """Checks the DMA buffer; True if the device can be opened with it."""
        if name.startswith("heap:") or not inv.udmabufs:
            heaps = ", ".join(h.name for h in inv.heaps)
            self.add(FAIL, "dma", "no u-dma-buf buffer"
                     + (f" (dma-heaps {heaps} exist, but userspace cannot learn a dma-heap "
                        "buffer's physical address)" if heaps else ""), UDMABUF_HINT)
            return False
        try:
            buf = inv.find_udmabuf(name)
        except DvsdkError as e:
            self.add(FAIL, "dma", str(e), "use dma=<one of the listed buffers> in the URL")
            return False
        ok = self._node_access("dma node", buf.dev_path)
        if buf.subsystem != UDMABUF_SUBSYSTEMS[0]:
            self.add(WARN, "dma", f"{buf.sys_name} comes from the old '{buf.subsystem}' "
                     "driver", "upgrade to u-dma-buf 4.7.0 or newer")
        if buf.phys_addr is None or not buf.size:
            self.add(FAIL, "dma", f"{buf.sys_path}: phys_addr/size unreadable", UDMABUF_HINT)
            return False
        end = buf.phys_addr + buf.size
        if end > 1 << 32:
            self.add(FAIL, "dma", f"{buf.sys_name} ends at {end:#x}, above the DV700's 32-bit "
                     "DMA range", "reserve the u-dma-buf memory-region below 4 GiB")
            ok = False
        else:
            self.add(OK, "dma", f"{buf.sys_name}: {_mib(buf.size)} at {buf.phys_addr:#010x}")
        if self.required_dma is not None:  # too small: a failure, but the board is usable
            if self.required_dma > buf.size:
                self.add(FAIL, "dma size", f"the network needs {_mib(self.required_dma)}, "
                         f"{buf.sys_name} has {_mib(buf.size)}",
                         f"reload u-dma-buf with udmabuf0={self.required_dma} or more")
            else:
                self.add(OK, "dma size", f"the network needs {_mib(self.required_dma)} of "
                         f"{_mib(buf.size)}")
        return self._check_coherence(buf) and ok

    def _check_coherence(self, buf: UdmabufNode) -> bool:
        if buf.dma_coherent:
            self.add(OK, "coherence", "dma_coherent=1: hardware-coherent, no cache maintenance")
            return True
        if buf.dma_coherent is None:
            self.add(WARN, "coherence", "dma_coherent not reported; assuming non-coherent")
        if buf.version_tuple >= MIN_IOCTL_VERSION:
            self.add(OK, "coherence", f"non-coherent; caches synced with the u-dma-buf ioctls "
                     f"(driver {buf.driver_version})")
            return True
        files = [buf.attr_path(a) for a in UDMABUF_SYNC_ATTRS]
        if all(os.access(p, os.W_OK) for p in files):
            self.add(OK, "coherence", f"non-coherent; caches synced through sysfs "
                     f"(driver {buf.driver_version or 'unknown'})")
            return True
        self.add(FAIL, "coherence", f"non-coherent and driver {buf.driver_version or '?'} has "
                 "no sync ioctl, and the sysfs sync files are not writable",
                 f"upgrade u-dma-buf to 4.7.0+, or {RULES_HINT} (its RUN rule opens them "
                 f"to group {DVSDK_GROUP})")
        return False

    # -- the device --------------------------------------------------------------------
    def _check_device(self) -> None:
        url = self.url + ("&" if urlsplit(self.url).query else "?") + "init=0"
        try:
            dev = open_device(url)
        except DeviceBusy as e:
            self.add(FAIL, "open", str(e), "wait for that process, or stop it")
            return
        except DvsdkError as e:
            detail = str(e).removesuffix(f"; {e.hint}") if e.hint else str(e)
            self.add(FAIL, "open", detail, e.hint or "")
            return
        with dev:
            info = dev.info()
            self.add(OK, "open", f"{info.backend}: units {', '.join(info.units)}; "
                     f"exclusive lock taken and released")
            ident = convid.identity_registers(info.kick)  # this kick's register map
            if info.hw_version in (0, 0xFFFF):
                self.add(FAIL, "hw version", f"reg {ident['hw_version'][0]:#x} reads "
                         f"{info.hw_version:#06x}: the "
                         "DV700 is not answering", "check the bitstream and the DT 'reg' base")
            else:
                self.add(OK, "hw version", f"{info.hw_version:04x}")
            src = info.extra.get("ub_size_source")
            if not info.ub_size:
                self.add(FAIL, "ubuf", f"UBUF size is 0 (reg {ident['ub_size'][0]:#x} and DT "
                         "ubuf-size): every "
                         "conv will fail the tile check", "check the bitstream, or add "
                         "ubuf-size = <bytes> to the DT node")
            else:
                self.add(OK if src == "register" else WARN, "ubuf",
                         f"{info.ub_size} bytes (from {src})")
            if not info.mac_num:
                off, scale = ident["mac_num"]
                self.add(FAIL, "mac", f"reg {off:#x} reads 0 "
                         + ("MAC groups" if scale == 72 else "MACs"), "check the bitstream")
            else:
                self.add(OK, "mac", f"{info.mac_num} MACs ({info.mac_num // 72} x 72)")
            self._check_clock(info.conv_freq, info.extra.get("clock_source", "unknown"),
                              dev.inventory)
            self._check_net(info)
            for node in dev.board.nodes:  # type: ignore[attr-defined]
                self.add(INFO, "irq", f"{node.sys_name}: {node.event_count() or 0} interrupts "
                         "so far")

    def _check_clock(self, freq: int, source: str, inv: Inventory) -> None:
        if freq:
            where = "kernel sysfs conv_freq" if source == "sysfs" else "the URL (clock_mhz)"
            self.add(OK, "clock", f"{freq} MHz from {where}")
            return
        rate = parse_int(read_attr(os.path.join(inv.sysfs, "kernel/debug/clk/pl0_ref/clk_rate")))
        hint = "pass clock_mhz=<MHz> in the device URL"
        if rate:
            hint += f" (debugfs reports pl0_ref = {rate / 1e6:.0f} MHz)"
        self.add(WARN, "clock", "conv clock unknown: no conv_freq in sysfs and no clock_mhz",
                 hint)

    # -- report ---------------------------------------------------------------------------
    def report(self, out: TextIO) -> int:
        print(f"dvsdk doctor: {self.url}", file=out)
        last_fix = ""
        for f in self.findings:
            same = f.fix and f.fix == last_fix
            print(Finding(f.status, f.check, f.detail, "(as above)" if same else f.fix).render(),
                  file=out)
            last_fix = f.fix or last_fix
        fails = sum(f.status == FAIL for f in self.findings)
        warns = sum(f.status == WARN for f in self.findings)
        if self.no_board:
            print("No DV700 board found on this machine. Use the simulator (--device sim://) "
                  "or fix the problems above.", file=out)
        if fails:
            print(f"{fails} problem(s), {warns} warning(s).", file=out)
            return 3
        print("All checks passed" + (f" ({warns} warning(s))." if warns else "."), file=out)
        return 0


def _board_url() -> str:
    """``dv://`` when DMP's kernel module is loaded and no DV700 is bound to UIO, else
    ``uio://``."""
    inv = discover()
    if inv.dmp_dv_loaded and not inv.dv700_nodes and os.path.exists("/dev/dv_conv"):
        return "dv://"
    return "uio://"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dvsdk doctor",
                                description="Check that this machine can run the DV700.")
    p.add_argument("--device", default=None,
                   help="device URL (default $DVSDK_DEVICE if it is a uio:// or dv:// URL, "
                        "else dv:// where DMP's kernel module runs the DV700, else uio://)")
    p.add_argument("net", nargs="?", default=None,
                   help="net.bin to check: DMA memory size, and that it fits the device")
    return p


def main(argv: list[str] | None = None, *,
         required_dma: int | Callable[[str], int] | None = None,
         out: TextIO | None = None) -> int:
    """Run the doctor; returns the exit status (0 all well, 3 problems, 2 bad input).

    ``required_dma`` overrides the net.bin hook: a byte count, or ``fn(net_path)``.
    """
    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    url = args.device
    if url is None:
        env = default_url()
        url = env if env.startswith(("uio:", "dv:")) else _board_url()
    need: int | None = None
    net = None
    if args.net is not None:
        if not os.path.isfile(args.net):
            print(f"dvsdk doctor: cannot read {args.net}", file=out)
            return 2
        try:
            from .. import netfile

            net = netfile.read(args.net)
            if callable(required_dma):
                need = int(required_dma(args.net))
            elif required_dma is None:
                need = netfile.dma_bytes(net)
        except DvsdkError as e:
            print(f"dvsdk doctor: {args.net}: {e}", file=out)
            return e.exit_code
    if isinstance(required_dma, int):
        need = required_dma
    doc = Doctor(url, need, net, os.path.basename(args.net or "net.bin"))
    try:
        doc.run()
    except InvalidURL as e:
        print(f"dvsdk doctor: {e}", file=out)
        return e.exit_code
    return doc.report(out)


if __name__ == "__main__":  # python -m dvsdk.cli.doctor
    sys.exit(main())
