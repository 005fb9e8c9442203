"""A fake of DMP's kernel module (dv-kernel-driver), at the ioctl and mmap level, for dv://.

:class:`FakeKmod` builds under a directory what the module and the kernel expose
(dv700-interface.md §2, §5, §10; linux-dma.md §5.3-5.4):

* ``dev/dv_conv``, ``dev/dv_ipu``, ``dev/dv_maximizer``, ``dev/dma_heap/{linux,cma,
  system}`` (and ``dev/ion`` with ``ion=True``) as regular files: the backend opens them
  for real;
* ``sys/class/dmp_dv/dv_conv/{ub_size,max_kernel_size,conv_freq,...}`` (§10.9);
* :meth:`FakeKmod.ioctl`, the function the backend calls instead of ``fcntl.ioctl``.  It
  tells the files apart by inode, and each ``open`` of a device node by its file
  position: a fresh fd is at 0, so the first ioctl on it creates the open's state (its
  command buffer, §10.1) and moves the position to that state's number.

The module is one of DMP's generations (``generation=``, :data:`GENERATIONS`, by the
commit of dv-kernel-driver it models): its MODULE_VERSION in ``sys/module/dmp_dv/version``,
its WAIT (the bare ``__u64`` before 96130ca, ``struct dmp_dv_kwait`` after), its alignment
for input/output/eltwise (16 bytes before 107f6a2, then 2), u8 input (conv v1, 5d4d343),
and before fd4fbba the direct conv kick on a pre-R5 register map (``sim://?kick=direct``).
Like every generation of the real module it answers 0 to an ioctl number it does not
know.  Its struct layouts and ioctl numbers are not dvsdk's: they come from DMP's header
facts (``tests/abi_facts.py``, ``tests/data/dmp_abi_facts.json``), so a spec that drifts
from DMP's headers sends the fake what the real module would misread.  (The §10.3
configuration image it writes is the stream format of ``commands.yaml``, not a header.)

What the ioctls do is what the reference says the module does: APPEND converts each
kernel conv struct into the register stream of §10.3 (the configuration image, written
here from ``commands.yaml``'s layouts, and ``get_conv_tiles_v0``'s tile count) after the
§6.7 checks it makes (sizes, alignments, contiguous buffers, kernel sizes, tiles); an IPU
or maximizer command becomes its register program (§10.6, §10.7), one per fd (a second
IPU APPEND is EBUSY, a second maximizer one silently replaces the first, §15.8).  RUN
gives the next id of the sub-device and queues the work on an ordered worker, which kicks
the simulator (``sim://?kick=r5``) through shared memory and the IPI exactly as §10.4
describes; WAIT returns once the id is done, else EBUSY after ``wait_timeout`` (the
kernel's 2 s), and writes ``cmd_exec_time`` (µs since the work started).  dma-bufs are
files backed by simulator DRAM: ``DMA_BUF_IOCTL_SYNC`` END|WRITE cleans the CPU's bytes
out to DRAM, START|READ reloads them (a non-coherent cache), and unbalanced START/END
pairs are recorded in :attr:`FakeKmod.problems`.  The ``system`` heap's buffers are not
contiguous, so the module refuses commands that use them.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import mmap
import os
import queue
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from dvsdk.hw import dims
from dvsdk.hw.fields import topo_num_runs
from dvsdk.hw.spec import SPEC
from dvsdk.sim.core import SimParams
from dvsdk.sim.device import SimDevice

from .abi_facts import FACTS, IOCTLS, fact
from .fakedv_builds import BUILDS, GENERATIONS
from .fakedv_units import ipu_program, maximizer_program

IOC = dict(IOCTLS)  # DMP's numbers (facts), not the spec's
S = fact
KH, KV0, KV1 = (S("dmp_dv_kcmdraw"), S("dmp_dv_kcmdraw_conv_v0"),
                S("dmp_dv_kcmdraw_conv_v1"))
CONFIG, CONFIG_RUN = SPEC.struct("conv_config"), SPEC.struct("conv_config_run")  # §10.3 image
SYNC_FLAGS = {"read": 1, "write": 2, "start": 0, "end": 4}  # linux/dma-buf.h
ERESTARTSYS = 512
NO_BUFFER = 0xDEADBEEF
ION_HEAPS = [("system", 0, 0), ("cma", 4, 1)]  # (name, type, id): ION_HEAP_TYPE_DMA = 4
PRE_R5 = FACTS["pre_r5_conv_registers"]


SHM = {n: SPEC.reg("shm", n) for n in SPEC.unit("shm")["registers"]}
IPI = {n: SPEC.reg("ipi", n) for n in SPEC.unit("ipi")["registers"]}


def _oserror(code: int, what: str) -> OSError:
    return OSError(code, f"{os.strerror(code) if code < 512 else 'ERESTARTSYS'}: {what}")


@dataclass
class DmaBuf:
    path: Path
    size: int
    contiguous: bool
    sim: Any  # the SimDmaBuffer holding the bytes in simulator DRAM
    mm: mmap.mmap
    open_sync: int = 0  # flags of a START not yet ENDed


@dataclass
class Session:
    """One open() of a device node: its command buffer (§10.1)."""

    unit: str
    words: list[np.ndarray] = field(default_factory=list)  # conv: stream words
    program: list[tuple[int, int]] | None = None            # IPU / maximizer


class SubDevice:
    """Ids, the ordered work queue and the exec-time ring of one sub-device (§10.5)."""

    def __init__(self, kmod: FakeKmod, unit: str) -> None:
        self.kmod, self.unit = kmod, unit
        self.cmd_id = self.hw_id = 0
        self.start_time = [0.0] * 16
        self.cond = threading.Condition()
        self.work: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._worker, name=f"fake-dv-{unit}",
                                       daemon=True)
        self.thread.start()

    def _worker(self) -> None:
        while True:
            item = self.work.get()
            if item is None:
                return
            cmd_id, job = item
            if cmd_id is None:  # a flush marker
                job.set()
                continue
            self.start_time[cmd_id & 0xF] = time.monotonic()
            done = False
            try:
                done = job()
            except Exception as e:  # noqa: BLE001 - a broken job hangs the unit, like hw
                self.kmod.problems.append(f"{self.unit} job {cmd_id}: {e!r}")
            if done:
                with self.cond:
                    self.hw_id = max(self.hw_id, cmd_id)
                    self.cond.notify_all()
            # else: the kernel's worker gives up silently and hw_id stays behind (§10.5)

    def flush(self) -> None:
        """``flush_workqueue``: return once every job queued so far has ended."""
        done = threading.Event()
        self.work.put((None, done))
        done.wait()

    def stop(self) -> None:
        self.work.put(None)
        self.thread.join(timeout=10)


class FakeKmod:
    """The fake module (module docstring); ``.ioctl`` is what the backend calls."""

    def __init__(self, root: Path, *, ub_size: int = 524288, mac_num: int = 576,
                 conv_freq: int = 300, units: tuple[str, ...] = ("conv", "ipu", "maximizer"),
                 ion: bool = False, heaps: tuple[str, ...] = ("linux,cma", "system"),
                 wait_timeout: float = 2.0, hw_wait: float = 2.0,
                 generation: str = "7.2.x", version_file: bool = True,
                 high_memory: bool = False) -> None:
        self.root = Path(root)
        self.dev, self.sys = self.root / "dev", self.root / "sys"
        self.wait_timeout, self.hw_wait = wait_timeout, hw_wait
        self.build = BUILDS[GENERATIONS.get(generation, generation)]
        self.high_memory = high_memory  # the heap's buffers end above 4 GiB (EPERM, §6.8)
        self.sim = SimDevice(SimParams(clock_mhz=conv_freq, mac_num=mac_num, ub_size=ub_size,
                                       units=units,
                                       kick="r5" if self.build.r5 else "direct"),
                             dram_mb=256)
        self.ub_size = ub_size
        self.lock = threading.RLock()
        self.problems: list[str] = []
        self.calls: list[tuple[str, int]] = []   # (what, request) of every ioctl
        self.unknown: list[int] = []             # ioctl numbers answered 0 unhandled
        self.give_up = threading.Event()         # a hung job's worker gives up now (§10.5)
        self.released: list[int] = []            # fds whose release (flush) has ended
        self.sessions: dict[int, Session] = {}
        self.bufs: dict[int, DmaBuf] = {}        # inode -> dma-buf
        self.nodes: dict[int, str] = {}          # inode -> "conv" | "heap:<name>" | "ion"
        self.restart_next_wait = 0               # inject ERESTARTSYS into WAITs
        self.hang_next = 0                       # the next conv job never completes
        self.dev.mkdir(parents=True)
        for unit in units:
            self._node(self.dev / f"dv_{'maximizer' if unit == 'maximizer' else unit}", unit)
        for heap in heaps:
            self._node(self.dev / "dma_heap" / heap, f"heap:{heap}")
        if ion:
            self._node(self.dev / "ion", "ion")
        conv = self.sys / "class" / "dmp_dv" / "dv_conv"
        conv.mkdir(parents=True)
        if version_file:
            (self.sys / "module" / "dmp_dv").mkdir(parents=True)
            (self.sys / "module" / "dmp_dv" / "version").write_text(f"{self.build.version}\n")
        if self.build.r5:
            facts = (("ub_size", ub_size), ("max_kernel_size", 7), ("conv_freq", conv_freq),
                     ("svn_version", 93), ("mac_num", mac_num), ("max_input_size", 0x4000),
                     ("conv_kick_count", 0), ("input_bytes", 0), ("output_bytes", 0),
                     ("weights_bytes", 0), ("hw_version", "0700"))
        else:
            facts = self._pre_r5_sysfs()
        for name, value in facts:
            (conv / name).write_text(f"{value}\n")
        for unit in units[1:]:
            (self.sys / "class" / "dmp_dv" / f"dv_{unit}").mkdir()
        (self.root / "dmabuf").mkdir()
        self.sub = {u: SubDevice(self, u) for u in units}
        self.kicks = 0

    def _pre_r5_sysfs(self) -> list[tuple[str, object]]:
        """The 2019-02 module's probe and sysfs (src/dmp-dv.c at 2994b64): command-list
        mode and ROM firmware written, the facts read from the pre-R5 offsets (facts
        ``pre_r5_conv_registers``): UBUF in KiB, the MAC count itself, no writable clock."""
        sim = self.sim
        for off, value in PRE_R5["probe_writes"]:
            sim.write32("conv", off, value)

        def reg(name: str) -> int:
            return sim.read32("conv", PRE_R5[name])

        self.ub_size = (reg("ubuf_size_kib") or PRE_R5["default_ubuf_kib"]) << 10
        return [("ub_size", self.ub_size), ("max_kernel_size", 7),
                ("conv_freq", reg("conv_freq") & PRE_R5["conv_freq_mask"]),
                ("svn_version", reg("svn_version")), ("mac_num", reg("mac_num")),
                ("max_input_size", reg("max_input_size")),
                ("hw_version", f"{reg('hw_version') & 0xFFFF:04x}"),
                ("conv_kick_count", reg("kick_count")), ("fc_freq", 0),
                ("max_fc_vector_size", 16384), ("loop_control", reg("loop_control")),
                ("input_bytes", 0), ("output_bytes", 0), ("weights_bytes", 0)]

    def release(self, fd: int) -> None:
        """The kernel's ``release`` of a device fd: ``flush_workqueue`` of the unit (waits
        for every queued job's worker, §10.1), then the close."""
        with self.lock:
            pos = os.lseek(fd, 0, os.SEEK_CUR)
            session = self.sessions.get(pos)
        if session is not None:
            self.sub[session.unit].flush()
        os.close(fd)
        self.released.append(fd)

    def _node(self, path: Path, kind: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")
        self.nodes[path.stat().st_ino] = kind

    # -- the ioctl entry point ----------------------------------------------------------
    def ioctl(self, fd: int, request: int, arg: bytearray) -> int:
        ino = os.fstat(fd).st_ino
        if ino in self.bufs:
            return self._dma_buf(self.bufs[ino], request, arg)
        kind = self.nodes.get(ino)
        if kind is None:
            raise _oserror(errno.ENOTTY, "not a node of the fake module")
        self.calls.append((kind, request))
        if kind.startswith("heap:"):
            return self._heap_alloc(kind[5:], request, arg)
        if kind == "ion":
            return self._ion(request, arg)
        with self.lock:
            pos = os.lseek(fd, 0, os.SEEK_CUR)
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE != os.O_RDONLY:
                self.problems.append(f"{kind} opened for writing (libdmpdv: O_RDONLY)")
            if pos == 0:  # a new open(): its own command buffer
                pos = len(self.sessions) + 1
                self.sessions[pos] = Session(kind)
                os.lseek(fd, pos, os.SEEK_SET)
            session = self.sessions[pos]
        if request == IOC["DMP_DV_IOC_APPEND_CMD"]:
            return self._append(session, arg)
        if request == IOC["DMP_DV_IOC_RUN"]:
            return self._run(session, arg)
        wait = IOC["DMP_DV_IOC_WAIT" if self.build.wait == "kwait"
                   else "DMP_DV_IOC_WAIT_before_96130ca"]
        if request == wait:
            return self._wait(session, arg)
        self.unknown.append(request)  # every generation: `default: break;` returns 0
        return 0

    # -- memory ---------------------------------------------------------------------------
    def _new_buf(self, size: int, contiguous: bool) -> int:
        with self.lock:
            path = self.root / "dmabuf" / f"buf{len(self.bufs)}"
            try:
                sim_buf = self.sim.alloc(size, align=4096, name=path.name)
            except Exception:
                raise _oserror(errno.ENOMEM, "no contiguous memory") from None
            with open(path, "wb") as f:
                f.truncate(size)
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
            mm = mmap.mmap(fd, size, mmap.MAP_SHARED)
            self.bufs[os.fstat(fd).st_ino] = DmaBuf(path, size, contiguous, sim_buf, mm)
            return fd

    def _heap_alloc(self, heap: str, request: int, arg: bytearray) -> int:
        st = S("dma_heap_allocation_data")  # linux/dma-heap.h
        if request != IOC["DMA_HEAP_IOCTL_ALLOC"]:
            raise _oserror(errno.ENOTTY, "dma-heap knows one ioctl")
        a = st.unpack(arg)
        if a["heap_flags"] or a["fd_flags"] & ~(os.O_RDWR | os.O_CLOEXEC) or not a["len"]:
            raise _oserror(errno.EINVAL, f"heap allocation {a}")
        fd = self._new_buf(-(-a["len"] // 4096) * 4096, contiguous=heap != "system")
        arg[:] = st.pack(dict(a, fd=fd))
        return 0

    def _ion(self, request: int, arg: bytearray) -> int:
        if request == IOC["ION_IOC_HEAP_QUERY"]:
            st, hd = S("ion_heap_query"), S("ion_heap_data")
            q = st.unpack(arg)
            if q["cnt"] == 0:
                arg[:] = st.pack(dict(q, cnt=len(ION_HEAPS)))
                return 0
            data = b"".join(hd.pack({"name": list(n.encode().ljust(32, b"\0")), "type": t,
                                     "heap_id": i}) for n, t, i in ION_HEAPS[: q["cnt"]])
            ctypes.memmove(q["heaps"], data, len(data))
            return 0
        if request == IOC["ION_IOC_ALLOC"]:
            st = S("ion_allocation_data")
            a = st.unpack(arg)
            ids = [i for _, t, i in ION_HEAPS if a["heap_id_mask"] >> i & 1]
            if not ids or not a["len"]:
                raise _oserror(errno.EINVAL, f"ION allocation {a}")
            self.ion_flags = a["flags"]
            fd = self._new_buf(-(-a["len"] // 4096) * 4096,
                               contiguous=ION_HEAPS[ids[-1]][1] == 4)
            arg[:] = st.pack(dict(a, fd=fd))
            return 0
        raise _oserror(errno.ENOTTY, "unknown ION ioctl")

    def _dma_buf(self, buf: DmaBuf, request: int, arg: bytearray) -> int:
        if request != IOC["DMA_BUF_IOCTL_SYNC"]:
            raise _oserror(errno.ENOTTY, "dma-buf knows one ioctl")
        flags = S("dma_buf_sync").unpack(arg)["flags"]
        rw = flags & (SYNC_FLAGS["read"] | SYNC_FLAGS["write"])
        if not rw or flags & ~(rw | SYNC_FLAGS["end"]):
            raise _oserror(errno.EINVAL, f"sync flags {flags:#x}")
        with self.lock:
            cpu = np.frombuffer(buf.mm, np.uint8)
            if flags & SYNC_FLAGS["end"]:
                if buf.open_sync != rw:
                    self.problems.append(f"{buf.path.name}: END {rw} after START "
                                         f"{buf.open_sync}")
                buf.open_sync = 0
                if rw & SYNC_FLAGS["write"]:  # the CPU's stores go out to memory
                    buf.sim.write(0, cpu)
                    buf.sim.sync_for_device()
            else:
                if buf.open_sync:
                    self.problems.append(f"{buf.path.name}: START inside START")
                buf.open_sync = rw
                if rw & SYNC_FLAGS["read"]:  # the CPU's view reloads from memory
                    buf.sim.sync_for_cpu()
                    cpu[:] = buf.sim.view
        return 0

    def _resolve(self, kbuf: dict, align_mask: int, need: int, what: str) -> int:
        """§6.8 get_dma_addr: fd -1 -> 0xDEADBEEF; aligned, contiguous, large enough."""
        if kbuf["fd"] == -1 or kbuf["fd"] == 0xFFFFFFFF:
            return NO_BUFFER
        try:
            ino = os.fstat(kbuf["fd"]).st_ino
        except OSError:
            raise _oserror(errno.EINVAL, f"{what}: bad fd {kbuf['fd']}") from None
        buf = self.bufs.get(ino)
        if buf is None or not buf.contiguous:
            raise _oserror(errno.EINVAL, f"{what}: not one contiguous dma-buf")
        if kbuf["offs"] & align_mask or buf.size - kbuf["offs"] < need:
            raise _oserror(errno.EINVAL, f"{what}: offset {kbuf['offs']} / size")
        if self.high_memory:  # dma_addr + size > 4 GiB on a 64-bit kernel: -1 (§6.8)
            raise _oserror(errno.EPERM, f"{what}: lies in high memory")
        return buf.sim.phys + kbuf["offs"]

    # -- APPEND ---------------------------------------------------------------------------
    def _append(self, session: Session, arg: bytearray) -> int:
        k = S("dmp_dv_kcmd").unpack(arg)
        ptr = k["cmd_pointer"]
        for _ in range(k["cmd_num"]):
            size = KH.unpack(ctypes.string_at(ptr, KH.size))["size"]
            raw = ctypes.string_at(ptr, size)
            ptr += size
            if session.unit == "conv":
                session.words.append(self._conv_words(raw))
            elif session.unit == "ipu":
                if session.program is not None:
                    raise _oserror(errno.EBUSY, "one IPU command per fd")
                session.program = ipu_program(raw, self._resolve)
            else:  # the maximizer's size counter is never bumped: it overwrites (§15.8)
                session.program = maximizer_program(raw, self._resolve)
        return 0

    def _conv_words(self, raw: bytes) -> np.ndarray:
        hdr = KH.unpack(raw)
        prefix: list[int] = []
        if hdr["version"] == 1 and self.build.conv_v1:
            v1 = KV1.unpack(raw.ljust(KV1.size, b"\0"))
            table = self._resolve(v1["u8tofp16_table"], 15, 1536, "u8 table")
            prefix = [0x2000F004, (table | (1 if v1["to_bgr"] else 0)) & 0xFFFFFFFF]
            raw = raw[24:]  # the v0 body, behind the 8 bytes at 24 (§5.1)
        elif hdr["version"] != 0:  # (v1 before 5d4d343: "Invalid CONV command version")
            raise _oserror(errno.EINVAL, f"conv struct version {hdr['version']}")
        kc = KV0.unpack(raw.ljust(KV0.size, b"\0"))
        io = self.build.io_mask
        n = topo_num_runs(kc["topo"])
        if len(raw) < 128 or len(raw) < 72 + 56 * n or n == 0:
            raise _oserror(errno.EINVAL, f"conv struct of {len(raw)} bytes for {n} runs")
        runs = kc["run"][:n]
        for r in runs:
            if r["conv_enable"]:
                d = r["conv_dilation"]
                r["conv_dilation"] = (d & 0xFF or 1) | ((d >> 8 or 1) << 8)
            px, py = r["p"] & 0xFF, (r["p"] >> 8) & 0xFF or r["p"] & 0xFF
            if not (1 <= px <= 7 and 1 <= py <= 7):
                raise _oserror(errno.EINVAL, "Invalid kernel size")
        tiles = dims.command_tiles(kc, runs, self.ub_size)
        if tiles == 0:
            raise _oserror(errno.EINVAL, "Required more unified buffer")
        if n > 1 and dims.ubuf_single_tile_usage(kc, runs, self.ub_size) > self.ub_size:
            raise _oserror(errno.EINVAL, "multi-run UBUF")
        hdr_img = CONFIG.pack({
            "topo": kc["topo"], "w": kc["w"], "h": kc["h"], "z": kc["z"], "c": kc["c"],
            "input_base_addr": self._resolve(kc["input_buf"], io,
                                             kc["w"] * kc["h"] * kc["z"] * kc["c"] * 2,
                                             "input"),
            "input_circular_offset": kc["input_circular_offset"], "tiles": tiles,
            "output_base_addr": self._resolve(kc["output_buf"], io, 2, "output"),
            "eltwise_base_addr": self._resolve(kc["eltwise_buf"], io, 2, "eltwise"),
            "output_mode": kc["output_mode"]})
        recs = b"".join(CONFIG_RUN.pack(dict(
            {f.name: r[f.name] for f in CONFIG_RUN.fields if f.name in r},
            weight_base_addr=self._resolve(r["weight_buf"], 15, 16, "weights")))
            for r in runs)
        image = np.frombuffer(hdr_img + recs, "<u4")
        head = prefix + [0x0020F004, 0x2000, 0x0021F004 | ((image.size - 1) << 3)]
        return np.concatenate([np.array(head, "<u4"), image,
                               np.array([0x0010F004, 1], "<u4")])

    # -- RUN / WAIT -----------------------------------------------------------------------
    def _run(self, session: Session, arg: bytearray) -> int:
        sub = self.sub[session.unit]
        with sub.cond:
            sub.cmd_id += 1
            cmd_id = sub.cmd_id
        words = list(session.words)
        program = session.program
        job = (lambda: self._run_conv(words)) if session.unit == "conv" else \
            (lambda: self._run_unit(session.unit, program))
        sub.work.put((cmd_id, job))
        arg[:] = S("run_argument").pack({"cmd_id": cmd_id})
        return 0

    def _run_conv(self, words: list[np.ndarray]) -> bool:
        """§10.4: terminate the buffer with the interrupt write and kick the R5 (or, before
        fd4fbba, the conv block itself: 0x400/0x404/0x408, the IRQ acked by writing 0)."""
        sim = self.sim
        stream = np.concatenate(words + [np.array([0x0108F004, 1], "<u4")])
        if stream.size % 2:
            stream = np.concatenate([stream, np.zeros(1, "<u4")])
        if self.hang_next:  # the hardware never answers: the worker waits its budget
            self.hang_next -= 1
            self.kicks += 1
            self.give_up.wait(self.hw_wait)
            return False
        chunk = sim.alloc(stream.nbytes, align=64, name="cmb")
        try:
            chunk.write(0, stream)
            chunk.sync_for_device()
            self.kicks += 1
            if self.build.r5:
                sim.write32("shm", SHM["STREAM_ADDR"], chunk.phys)
                sim.write32("shm", SHM["STREAM_LEN8"], stream.nbytes // 8)
                sim.write32("shm", SHM["STREAM_START"], 1)
                sim.write32("ipi", IPI["TRIG"], 0x100)
                line = "ipi"
            else:
                sim.write32("conv", PRE_R5["cmd_addr"], chunk.phys)
                sim.write32("conv", PRE_R5["cmd_len8"], stream.nbytes // 8)
                sim.write32("conv", PRE_R5["kick"], 1)
                line = "conv"
            try:
                sim.wait_irq(line, self.hw_wait)
            except Exception:  # noqa: BLE001 - the worker gives up silently
                sim.reset()
                return False
            if not self.build.r5:
                sim.write32("conv", PRE_R5["irq"], 0)
                self._pre_r5_counters()
                return True
            if sim.read32("ipi", IPI["ISR"]) & 0x100:
                sim.write32("ipi", IPI["ISR"], 0x100)
            self._counters()
            return True
        finally:
            chunk.free()

    def _pre_r5_counters(self) -> None:
        """The 2019-02 module's counters: raw registers 0x180/0x184/0x188 x 16, read-only
        sysfs (no post function, no reset), kick count from 0x100."""
        conv = self.sys / "class" / "dmp_dv" / "dv_conv"
        for name, reg in (("input_bytes", "input_beats"), ("output_bytes", "output_beats"),
                          ("weights_bytes", "weights_beats")):
            (conv / name).write_text(f"{self.sim.read32('conv', PRE_R5[reg]) << 4}\n")
        (conv / "conv_kick_count").write_text(
            f"{self.sim.read32('conv', PRE_R5['kick_count'])}\n")

    def _counters(self) -> None:
        """§10.10: 16 counters in 16-byte beats, classified by index bits."""
        lo, hi = SPEC.reg("conv", "BYTE_COUNTERS_LO"), SPEC.reg("conv", "BYTE_COUNTERS_HI")
        v = [self.sim.read32("conv", lo + 4 * i) for i in range(8)]
        v += [self.sim.read32("conv", hi + 4 * i) for i in range(8)]
        conv = self.sys / "class" / "dmp_dv" / "dv_conv"
        for name, total in (("output_bytes", sum(x for i, x in enumerate(v) if i & 3 == 3)),
                            ("weights_bytes", sum(x for i, x in enumerate(v) if i & 4)),
                            ("input_bytes", sum(x for i, x in enumerate(v) if i & 8))):
            (conv / name).write_text(f"{16 * total}\n")  # (read-resets: one run's worth)
        (conv / "conv_kick_count").write_text(f"{self.kicks}\n")

    def _run_unit(self, unit: str, program: list[tuple[int, int]] | None) -> bool:
        """§10.6 / §10.7: replay the pairs, start, wait, the handler writes 0 to 0x020."""
        if program is None:
            return True
        sim = self.sim
        for off, value in program:
            sim.write32(unit, off, value)
        sim.write32(unit, SPEC.reg(unit, "START"), 1)
        try:
            sim.wait_irq(unit, self.hw_wait)
        except Exception:  # noqa: BLE001
            return False
        sim.write32(unit, SPEC.reg(unit, "IRQ"), 0)
        return True

    def _wait(self, session: Session, arg: bytearray) -> int:
        st = S("dmp_dv_kwait" if self.build.wait == "kwait"
               else "wait_argument_before_96130ca")
        cmd_id = st.unpack(arg)["cmd_id"]
        sub = self.sub[session.unit]
        if self.restart_next_wait:
            self.restart_next_wait -= 1
            raise _oserror(ERESTARTSYS, "a signal")
        with sub.cond:
            done = sub.cond.wait_for(lambda: sub.hw_id >= cmd_id, self.wait_timeout)
            spent = time.monotonic() - sub.start_time[cmd_id & 0xF]
        if self.build.wait == "kwait":  # 96130ca: the exec time, in every case
            arg[:] = st.pack({"cmd_id": cmd_id, "cmd_exec_time": int(spent * 1e6)})
        if not done:
            raise _oserror(errno.EBUSY, f"timeout: cmd_id={cmd_id}")
        return 0

    def close(self) -> None:
        for sub in self.sub.values():
            sub.stop()
        for buf in self.bufs.values():
            try:
                buf.mm.close()
            except BufferError:
                pass
        self.sim.close()


def open_fake_kmod(tmp_dir: str | Path | None = None, **kw: Any) -> Any:
    """A :class:`~dvsdk.driver.kmod.KmodDevice` on a fresh fake module; ``close()`` tears
    both down.  ``dev.fake_kmod`` is the fake."""
    from dvsdk.driver.kmod import KmodDevice

    own = tmp_dir is None
    root = Path(tempfile.mkdtemp(prefix="dvsdk-fakedv-")) if own else Path(tmp_dir)
    heap = kw.pop("heap", "auto")
    device_kw = {k: kw.pop(k) for k in ("timeout", "module", "close_timeout", "cache_lines",
                                        "hw_date")
                 if k in kw}
    fake = FakeKmod(root, **kw)
    try:
        dev = KmodDevice(str(fake.dev), str(fake.sys), heap=heap, ioctl=fake.ioctl,
                         release=fake.release,
                         url=f"dv://?dev={fake.dev}&sysfs={fake.sys}", **device_kw)
    except BaseException:
        fake.close()
        raise
    device_close = dev.close

    def close() -> None:
        try:
            device_close()
        finally:
            fake.close()
            if own:
                shutil.rmtree(root, ignore_errors=True)

    dev.close = close  # type: ignore[method-assign]
    dev.fake_kmod = fake  # type: ignore[attr-defined]
    return dev
