"""``dv://``: DMP's own kernel module (dv-kernel-driver) as the backend (reference §2, §5, §10).

Many boards run DMP's module: ``/dev/dv_conv``, ``/dev/dv_ipu``, ``/dev/dv_maximizer`` and
``/sys/class/dmp_dv/dv_*``.  User space never touches a register there; it hands the
module kernel commands and the module builds the stream and kicks the R5 (§10.3, §10.4).
So this backend takes whole command lists (:meth:`KmodDevice.prepare`, the seam above
register access), as libdmpdv does (§2.2, §2.4):

* commit: the commands as kernel structs (:mod:`dvsdk.driver.kabi`), back to back, in one
  ``DMP_DV_IOC_APPEND_CMD`` on a fresh fd of the unit's device (each ``open`` gets its own
  command buffer, §10.1).  The IPU and the maximizer take one command per fd (§15.8), so
  their lists open one fd per command;
* exec: ``DMP_DV_IOC_RUN`` returns the command id; wait: the WAIT of the module's
  generation (:mod:`dvsdk.driver.kmodver`: ``kwait`` with ``cmd_exec_time`` in µs, §10.5,
  or the pre-2019-05-31 bare id), retried while it fails with EBUSY (the kernel's 2 s wait
  ran out) or ERESTARTSYS / EINTR (a signal).  A ``kwait`` WAIT whose ``cmd_exec_time``
  comes back untouched was not handled by the module (it answers 0 to unknown ioctls):
  that is an error, never a completion, so no output is read after an unconfirmed wait;
* how long: the module's worker waits for the hardware up to 10 x 2 s = 20 s and then
  gives up (§10.5); libdmpdv retries WAIT forever.  dv:// waits at least ``timeout``
  (default those 20 s: past them the module itself has given up), the caller's timeout
  when that is longer;
* close after a timeout: closing a device fd makes the kernel flush its worker queue, which
  blocks until the worker of every queued run has ended (up to 20 s each).  The fds of a
  timed-out list are therefore closed by a background thread; :meth:`KmodDevice.close`
  waits for those closes at most ``close_timeout`` s (default 20) and returns, naming the
  fds still closing (they close when the module's worker gives up);
* the module's byte counters (sysfs ``input_bytes``... §10.9) are shared by every process
  and reset by whoever reads them, so they cannot be attributed to one run: dv:// does not
  report them (``ExecStats`` bytes stay 0);
* DMA memory: dma-bufs from a dma-heap, else ION (:mod:`dvsdk.driver.dmabuf`).

URL: ``dv://[?dev=/dev&sysfs=/sys&heap=auto&timeout=20&close_timeout=20&module=VERSION
&hw_version=VERSION]``; ``heap`` is a dma-heap name, ``ion``, or ``auto`` (a contiguous
dma-heap if there is one, else ION); ``module`` declares the module's version where sysfs
does not show it; ``hw_version`` the bitstream's (:mod:`dvsdk.hw.quirks`; default the
module's date).  Device
nodes are opened read-only, as libdmpdv does.  Every ioctl goes through
:meth:`KmodDevice.ioctl` and every close of a device fd through :meth:`KmodDevice.release`,
which tests replace with a fake module (``tests/fakedv.py``).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from ..errors import (
    DeviceBusy,
    DeviceError,
    DeviceNotFound,
    DeviceTimeout,
    DvsdkError,
    InvalidArgument,
    InvalidCommand,
    InvalidURL,
    OutOfDeviceMemory,
)
from ..hw import quirks
from ..hw.spec import SPEC
from . import kabi, kmodver
from .device import MAX_TIMEOUT, UNITS, Device, DeviceInfo, DmaBuffer, check_timeout, parse_url
from .dmabuf import DmaBufPool, Ioctl, KmodDmaBuffer, contiguous_heap
from .submit import ExecStats

KERNEL = SPEC.kernel
DEVICE_NODES: dict[str, str] = dict(KERNEL["devices"])
ONE_PER_FD = tuple(KERNEL["one_command_per_fd"])
RESTART = {errno.EBUSY, errno.EINTR, int(KERNEL["errno_restartsys"])}
FREQ_RANGE = tuple(int(v) for v in KERNEL["conv_freq_range"])
USER_FREQ_RANGE = tuple(int(v) for v in KERNEL["user_freq_range"])
#: the module's worker budget (§10.5): DRM_MAX_WAIT_COUNT x DRM_WAIT_TIMEOUT = 20 s
WORKER_BUDGET = float(KERNEL["wait_timeout_s"]) * int(KERNEL["worker_wait_count"])
DEFAULT_TIMEOUT = WORKER_BUDGET
#: the DMA address limit (§6.8): the module answers EPERM (-1) for a buffer ending above it
DMA_LIMIT = 1 << 32


def system_ioctl(fd: int, request: int, arg: bytearray) -> int:
    """The real ioctl: ``arg`` is passed as a mutable buffer and updated in place."""
    return fcntl.ioctl(fd, request, arg, True)


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def freq_range(module: tuple[int, int] | None = FREQ_RANGE) -> tuple[int, int]:
    """The clock range dvsdk sets: DMP's ``set_ai_freq.sh`` (50..333 MHz) within what the
    module generation accepts (``module``: 30..350 or 30..400, §10.9)."""
    lo, hi = USER_FREQ_RANGE
    if module is None:
        return lo, hi
    return max(lo, module[0]), min(hi, module[1])


def write_conv_freq(conv_dir: str, mhz: int,
                    limits: tuple[int, int] | None = None) -> int:
    """Set the conv clock through DMP's kernel module: write ``mhz`` to ``conv_freq`` in
    ``conv_dir`` (``/sys/class/dmp_dv/dv_conv``; the module programs the RPLL, §10.9) and
    return the MHz it reads back (the PLL may land near, not on, the value).  ``mhz`` must
    lie in ``limits`` (default :func:`freq_range`: 50..333 MHz, DMP's own tool's range)."""
    lo, hi = limits or freq_range()
    if isinstance(mhz, bool) or not isinstance(mhz, int) or not lo <= mhz <= hi:
        raise InvalidArgument("conv clock out of range", field="conv_freq", value=mhz,
                              limit=f"{lo}..{hi} MHz")
    path = os.path.join(conv_dir, "conv_freq")
    if not os.path.exists(path):
        raise DeviceError("this board has no conv_freq to set", field="conv_freq",
                          value=path, hint="the clock is set through DMP's kernel module "
                          "(dv://); on a UIO board set the PL clock in the boot image")
    try:
        with open(path, "w") as f:
            f.write(f"{mhz}\n")
    except PermissionError:
        raise DeviceError(f"cannot write {path}", field="conv_freq", value=mhz,
                          hint="writing the clock needs root (or a udev rule granting "
                               "the dvsdk group write access)") from None
    except OSError as e:
        raise DeviceError(f"the kernel refused conv_freq={mhz}: {e.strerror}",
                          field="conv_freq", value=mhz, limit=f"{lo}..{hi}") from None
    back = _read(path)
    return int(back) if back and back.isdigit() else 0


class KmodDevice(Device):
    """A DV700 driven through DMP's kernel module (module docstring)."""

    has_registers = False

    def __init__(self, dev_root: str = "/dev", sysfs: str = "/sys", heap: str = "auto",
                 timeout: float = DEFAULT_TIMEOUT, ioctl: Ioctl = system_ioctl,
                 url: str = "dv://", module: str | None = None,
                 close_timeout: float = WORKER_BUDGET,
                 release: Callable[[int], None] = os.close,
                 cache_lines: object = "auto", hw_date: int | None = None) -> None:
        self.url = url
        self.dev_root = dev_root
        self.class_dir = os.path.join(sysfs, "class", KERNEL["sysfs_class"])
        self.timeout = timeout
        self.close_timeout = close_timeout
        self._ioctl = ioctl
        self._release = release
        self.closing: list[threading.Thread] = []
        self._hw_date = hw_date
        self.closed = False
        conv = os.path.join(dev_root, DEVICE_NODES["conv"])
        if not os.path.exists(conv):
            raise DeviceNotFound(f"{conv} does not exist: DMP's kernel module is not loaded",
                                 field="dev", value=conv, hint="modprobe dmp_dv (or use "
                                 "uio:// with a device-tree overlay); run: dvsdk doctor")
        if module is not None:
            self.abi = kmodver.identify(module, "dv://?module=")
        else:
            where = os.path.join(sysfs, KERNEL["module_sysfs"])
            self.abi = kmodver.identify(kmodver.read_version(sysfs), where)
        if self.abi.wait == "probe":
            fd = self.open_unit("conv")
            try:
                self.abi = replace(self.abi, wait=kmodver.probe_wait(self.ioctl, fd))
            finally:
                self.release(fd)
        self._units = tuple(u for u in UNITS
                            if os.path.exists(os.path.join(dev_root, DEVICE_NODES[u])))
        heaps = sorted(os.listdir(os.path.join(dev_root, "dma_heap"))) \
            if os.path.isdir(os.path.join(dev_root, "dma_heap")) else []
        if heap == "auto":
            heap = contiguous_heap(heaps) or "ion"
            if heap == "ion" and not os.path.exists(os.path.join(dev_root, "ion")):
                raise DeviceNotFound("no contiguous dma-heap and no ION for DMA memory",
                                     field="heap", value=os.path.join(dev_root, "dma_heap"),
                                     limit=f"a CMA heap (found: {', '.join(heaps) or 'none'}) "
                                           "or /dev/ion", hint="enable CONFIG_DMABUF_HEAPS_CMA "
                                     "(or ION) in the kernel; run: dvsdk doctor --device dv://")
        elif heap != "ion" and heap not in heaps:
            raise DeviceNotFound("no such dma-heap", field="heap", value=heap, limit=heaps)
        self.pool = DmaBufPool(dev_root, heap, self.ioctl, cache_lines)  # type: ignore[arg-type]

    @classmethod
    def from_url(cls, url: str) -> KmodDevice:
        u = parse_url(url)
        if u.netloc or u.path not in ("", "/"):
            raise InvalidURL("dv:// takes options only, as dv://?heap=linux,cma",
                             field="url", value=url)
        dev = u.pop_str("dev", "/dev")
        sysfs = u.pop_str("sysfs", "/sys")
        heap = u.pop_str("heap", "auto")
        timeout = u.pop_float("timeout", DEFAULT_TIMEOUT, lo=0.0, hi=MAX_TIMEOUT)
        close_timeout = u.pop_float("close_timeout", WORKER_BUDGET, lo=0.0, hi=MAX_TIMEOUT)
        module = u.pop_str("module", "") or None
        try:
            hw_date = quirks.parse_hw_version(u.pop_str("hw_version", "")) or None
        except DvsdkError as e:
            raise InvalidURL(e.message, field="hw_version", value=e.value,
                             limit=e.limit) from None
        u.reject_unknown()
        return cls(dev, sysfs, heap, timeout, url=url, module=module,
                   close_timeout=close_timeout, hw_date=hw_date)

    # -- the one place ioctls are issued ------------------------------------------------
    def ioctl(self, fd: int, request: int, arg: bytearray) -> int:
        """Every ioctl of this backend (DMA memory included) goes through here."""
        return self._ioctl(fd, request, arg)

    def release(self, fd: int) -> None:
        """Close a device fd: the kernel's ``release`` flushes the unit's worker queue, so
        this may block until queued runs have ended (module docstring)."""
        self._release(fd)

    def release_later(self, fds: list[int]) -> None:
        """Close ``fds`` on a background thread (after a timeout: module docstring)."""
        t = threading.Thread(target=lambda: [self.release(fd) for fd in fds],
                             name=f"dv-close-{fds}", daemon=True)
        t.start()
        self.closing.append(t)

    # -- Device interface ---------------------------------------------------------------
    @property
    def kick(self) -> str:
        return "kernel"

    @property
    def windows(self) -> tuple[str, ...]:
        return ()

    def _no_registers(self, what: str) -> DeviceError:
        return DeviceError(f"dv:// has no {what}: DMP's kernel module owns the registers",
                           field="device", value=self.url,
                           hint="command lists (CommandList, dvsdk.load) work unchanged")

    def read32(self, unit: str, offset: int) -> int:
        raise self._no_registers("register access")

    def write32(self, unit: str, offset: int, value: int) -> None:
        raise self._no_registers("register access")

    def wait_irq(self, unit: str, timeout: float) -> None:
        raise self._no_registers("interrupt to wait on")

    def alloc(self, nbytes: int, align: int = 64, name: str = "") -> DmaBuffer:
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)
        return self.pool.alloc(int(nbytes), int(align), name, self)

    def leaks(self) -> list[DmaBuffer]:
        return list(self.pool.live.values())

    def sysfs(self, unit: str, attr: str) -> str | None:
        """``/sys/class/dmp_dv/dv_<unit>/<attr>`` as text, or None."""
        return _read(os.path.join(self.class_dir, DEVICE_NODES[unit], attr))

    def _int(self, attr: str, base: int = 10) -> int:
        text = self.sysfs("conv", attr)
        try:
            return int(text, base) if text else 0
        except ValueError:
            return 0

    def info(self) -> DeviceInfo:
        """§10.9: the conv device's sysfs attributes (``hw_version`` is hex)."""
        a = self.abi
        return DeviceInfo(
            ub_size=self._int("ub_size"), mac_num=self._int("mac_num"),
            max_kernel_size=self._int("max_kernel_size") or 3,  # libdmpdv's default (§6.2)
            conv_freq=self._int("conv_freq"), hw_version=self._int("hw_version", 16),
            svn_version=self._int("svn_version"), max_input_size=self._int("max_input_size"),
            backend="dv", units=self._units, simulated=False, kick="kernel",
            io_align=a.io_align, hw_date=self.hw_date,
            extra={"dma": self.pool.source, "heap": self.pool.name,
                   "cache_lines": self.pool.lines_reason,
                   "sysfs": os.path.join(self.class_dir, DEVICE_NODES["conv"]),
                   "conv_kick_count": self._int("conv_kick_count"),
                   "module": a.version, "module_commit": a.commit,
                   "module_source": a.source, "module_wait": a.wait,
                   "module_kick": "r5" if a.r5 else "direct"})

    @property
    def hw_date(self) -> int:
        """The hardware date the quirks are judged by: ``dv://?hw_version=``; else, under a
        pre-R5 module, that module's date (its bitstreams predate the R5 firmware of
        March 2019, so they have every quirk); else unknown (0): the last module
        (7.2.20190729) also drives the bitstreams of 2019-12 and 2020-07, and nothing the
        module shows tells them apart."""
        if self._hw_date:
            return self._hw_date
        return 0 if self.abi.r5 else int(self.abi.version.rsplit(".", 1)[-1])

    def set_clock(self, mhz: int) -> int:
        """Write ``conv_freq`` (§10.9) within :func:`freq_range` of this module generation
        (read-only before the R5 module) and return what reads back."""
        if self.abi.conv_freq is None:
            raise DeviceError(f"DMP's kernel module {self.abi.version} has a read-only "
                              "conv_freq", field="conv_freq", value=mhz,
                              hint="the clock of a pre-R5 board is set in its boot image")
        return write_conv_freq(os.path.join(self.class_dir, DEVICE_NODES["conv"]), mhz,
                               freq_range(self.abi.conv_freq))

    def reset(self) -> None:
        """Nothing to do from user space: the module recovers its queue itself (§10.5)."""
        if self.closed:
            raise DeviceError("device is closed", field="device", value=self.url)

    def prepare(self, unit: str, commands: list, info: DeviceInfo) -> KernelSubmission:
        return KernelSubmission(self, unit, commands)

    def open_unit(self, unit: str) -> int:
        """A fresh fd of the unit's device node (its own command buffer, §10.1)."""
        path = os.path.join(self.dev_root, DEVICE_NODES[unit])
        try:
            return os.open(path, os.O_RDONLY | os.O_CLOEXEC)  # as libdmpdv (§2.2)
        except PermissionError:
            raise DeviceError(f"no permission to open {path}", field="dev", value=path,
                              hint="install udev/99-dmp-dv700.rules and join group dvsdk "
                                   "(run: dvsdk doctor)") from None
        except OSError as e:
            raise DeviceNotFound(f"cannot open {path}: {e.strerror}", field="dev",
                                 value=path) from None

    def close(self) -> None:
        """Free the buffers, then wait at most ``close_timeout`` s for the fds a timed-out
        list left closing (module docstring); those still closing are named in
        ``self.still_closing`` and close on their own when the module's worker ends."""
        if not self.closed:
            self.closed = True
            self.pool.close()
            deadline = time.monotonic() + self.close_timeout
            for t in self.closing:
                t.join(max(0.0, deadline - time.monotonic()))
            self.still_closing = [t.name for t in self.closing if t.is_alive()]

    def __repr__(self) -> str:
        return f"<KmodDevice {self.dev_root} heap={self.pool.name}>"


def _fd_of(buf: DmaBuffer) -> int:
    if not isinstance(buf, KmodDmaBuffer) or buf.freed:
        raise InvalidCommand("dv:// commands need this device's dma-bufs", field="buffer",
                             value=getattr(buf, "name", buf), limit="KmodDevice.alloc()")
    return buf.fd


class KernelSubmission:
    """A committed list handed to the kernel module (module docstring)."""

    def __init__(self, device: KmodDevice, unit: str, commands: Sequence) -> None:
        self.device, self.unit = device, unit
        abi = device.abi
        if abi.conv_v1 is False and any(getattr(c, "version", 0) == 1 for c in commands):
            raise InvalidCommand(f"DMP's kernel module {abi.version} predates u8 input "
                                 "(conv v1, 5d4d343 of 2019-05-31)", field="version",
                                 value=1, limit=0, hint="convert the input to FP16 first, "
                                 "or update the module to 7.2.20190729")
        structs = [kabi.pack_command(c, _fd_of) for c in commands]
        groups = [[s] for s in structs] if unit in ONE_PER_FD else [structs]
        self.fds: list[int] = []
        self.timed_out = False
        try:
            for group in groups:
                fd = device.open_unit(unit)
                self.fds.append(fd)
                self._append(fd, group)
        except BaseException:
            self.free()
            raise
        self._ids: list[int] = []

    def _call(self, fd: int, request: int, arg: bytearray, what: str) -> None:
        try:
            self.device.ioctl(fd, request, arg)
        except OSError as e:
            code = e.errno or 0
            abi = self.device.abi
            if code == errno.EINVAL:
                hint = ("if the list takes u8 input (conv v1): builds of 7.1.20190410 before "
                        "5d4d343 lack it" if abi.conv_v1 is None else None)
                raise InvalidCommand(f"the kernel module ({abi.version}) refused the "
                                     f"{self.unit} {what} (EINVAL; its log says why)",
                                     field=what, value=self.unit, hint=hint) from None
            if code == errno.EPERM and request == kabi.APPEND_CMD:
                raise OutOfDeviceMemory(
                    f"a buffer of this {self.unit} list lies above 4 GiB: the DV700 "
                    "addresses 32 bits and the module refuses it (EPERM)", field="dma_addr",
                    value=self.unit, limit=f"dma_addr + size <= {DMA_LIMIT:#x}",
                    hint="give the CMA area (or the dma-heap's reserved memory) an address "
                         "below 4 GiB in the device tree or the kernel command line") from None
            if code == errno.EBUSY:
                raise DeviceBusy(f"the {self.unit} device is busy ({what})", field=what,
                                 value=self.unit) from None
            raise DeviceError(f"{what} on {DEVICE_NODES[self.unit]} failed: "
                              f"{os.strerror(code)}", field=what, value=code) from None

    def _append(self, fd: int, structs: list[bytes]) -> None:
        data = ctypes.create_string_buffer(b"".join(structs))
        arg = bytearray(kabi.KCMD.pack({"cmd_num": len(structs),
                                        "cmd_pointer": ctypes.addressof(data)}))
        self._call(fd, kabi.APPEND_CMD, arg, "APPEND_CMD")

    def _run(self, fd: int) -> int:
        arg = bytearray(kabi.KCMD_ID.size)
        self._call(fd, kabi.RUN, arg, "RUN")
        return int(kabi.KCMD_ID.unpack(arg)["cmd_id"])

    def start(self) -> None:
        self._ids = [self._run(self.fds[0])]

    def _wait_once(self, fd: int, cmd_id: int) -> int:
        """One WAIT of the module's generation; the exec time in µs (0 where the module
        reports none).  OSError passes through."""
        if not self.device.abi.exec_time:
            arg = bytearray(kabi.KWAIT_V0.pack({"cmd_id": cmd_id}))
            self.device.ioctl(fd, kabi.WAIT_V0, arg)
            return 0
        arg = bytearray(kabi.KWAIT.pack({"cmd_id": cmd_id,
                                         "cmd_exec_time": kmodver.UNTOUCHED}))
        self.device.ioctl(fd, kabi.WAIT, arg)
        us = int(kabi.KWAIT.unpack(arg)["cmd_exec_time"])
        if us == kmodver.UNTOUCHED:
            raise DeviceError(f"the kernel module did not handle WAIT {kabi.WAIT:#x} "
                              f"(cmd_exec_time untouched): command id {cmd_id} is not known "
                              "to be done, so its outputs are not read", field="WAIT",
                              value=self.device.abi.version,
                              hint="the module is older than its version string says; "
                                   "declare its version: dv://?module=VERSION")
        return us

    def _wait_id(self, fd: int, cmd_id: int, timeout: float) -> int:
        """WAIT until done, retrying EBUSY / ERESTARTSYS / EINTR as libdmpdv does, up to
        ``timeout`` s; returns ``cmd_exec_time`` (µs)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._wait_once(fd, cmd_id)
            except OSError as e:
                if e.errno not in RESTART:
                    raise DeviceError(f"WAIT on {DEVICE_NODES[self.unit]} failed: "
                                      f"{os.strerror(e.errno or 0)}", field="WAIT",
                                      value=e.errno) from None
            if time.monotonic() >= deadline:
                self.timed_out = True
                raise DeviceTimeout(f"the kernel module did not complete {self.unit} command "
                                    f"id {cmd_id} within {timeout:g} s",
                                    registers={"cmd_id": cmd_id}, field="timeout",
                                    value=timeout, hint="the module's log (dmesg) says more; "
                                    "its worker gives up 20 s after the start")

    def wait(self, timeout: float) -> ExecStats:
        """Wait for every command; at least the device's ``timeout`` (module docstring).
        No byte counters: the module's are shared by all processes (module docstring)."""
        timeout = max(check_timeout(timeout), self.device.timeout)
        total = 0
        for i, fd in enumerate(self.fds):
            if i:
                self._ids.append(self._run(fd))
            total += self._wait_id(fd, self._ids[-1], timeout)
        return ExecStats(exec_time_us=float(total))

    def free(self) -> None:
        """Close the fds; after a timeout on a background thread, since the kernel's
        release blocks until the unit's worker has ended (module docstring)."""
        fds, self.fds = self.fds, []
        if self.timed_out:
            self.device.release_later(fds)
        else:
            for fd in fds:
                self.device.release(fd)
