"""Which DRAM ranges a DV700 kick reads and writes, worked out without running it.

``dvsdk-agent`` lets a unit start only when every address it will touch lies in
memory the requesting client owns (``firmware_spec/link.md`` §10).  This module
derives those addresses from the descriptions the driver encodes with
(``firmware_spec/``, :mod:`dvsdk.hw.dims`), and never imports the simulator:

* conv (reference §10.2-10.4): the command stream at ``CMD_ADDR`` (``CMD_LEN``
  8-byte units), its write packets and the jumps between chunks.  Stream writes
  to the controller memory (``CFG_ADDR``/``CFG_DATA``) are replayed into
  :class:`Controller`, and each ``START`` decodes the configuration image at
  0x2000 (§10.3): the input (``w·h·z·c`` elements of 2 bytes, 1 with a u8 table,
  §1, §3.3), the u8 table (§10.3), each conv run's weights
  (:func:`dims.run_weight_size`, §7.4), the output (the output runs' sizes one
  after another, §4.1, :func:`dims.run_output_shape`) and the eltwise addend at
  the first run's pre-max-pool size (§4.4), each times the batch (§4.10);
* IPU (§10.6, §9.1) and maximizer (§10.7, §9.2): the register values the CPU wrote.

Nothing is read here: the caller's ``fetch(address, nbytes)`` returns the bytes
the device would fetch (and may refuse the range).  Whatever cannot be vetted
raises :class:`~dvsdk.errors.InvalidCommand` naming the packet's address: an
unknown packet, a stream write to a register other than the five of §10.2, a
``START`` whose image was not written, a stream that loops, a configuration
the size arithmetic rejects.  What the hardware does with those is not
documented, so the agent does not let it happen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgument, InvalidCommand
from ..hw import dims
from ..hw.spec import SPEC

PACKET = SPEC.packet
WRITE_MAGIC = int(SPEC.stream["write_magic"])
CFG_IMAGE_ADDR = int(SPEC.stream["cfg_image_address"])
CFG_MEM_BYTES = int(SPEC.stream["controller_memory_bytes"])
CONFIG = SPEC.struct("conv_config")
CONFIG_RUN = SPEC.struct("conv_config_run")
NO_BUFFER = 0xDEADBEEF
U8_TABLE_BYTES = int(SPEC.limits["u8_table_bytes"])
POOL = SPEC.enum("pool_enable")
FMT = SPEC.enum("image_format")
PIXEL_BYTES = {FMT[name]: int(n) for name, n in SPEC.commands["image_format_bytes"].items()}

#: stream register word indices (stream.yaml) -> role
_STREAM_REGS = {SPEC.stream_reg(n): n for n in ("cfg_addr", "cfg_data", "start", "irq",
                                                 "u8_table")}
_CFG_DATA = SPEC.stream_reg("cfg_data")
#: CPU-visible conv registers that reach the controller (registers.yaml byte offsets)
CONV_CFG_ADDR = SPEC.reg("conv", "CFG_ADDR")
CONV_CFG_DATA = SPEC.reg("conv", "CFG_DATA")
CONV_START = SPEC.reg("conv", "START")
CMD_ADDR = SPEC.reg("conv", "CMD_ADDR")
CMD_LEN = SPEC.reg("conv", "CMD_LEN")
#: jumps one kick may take before the walk gives up (a real stream has one per 64 KiB)
MAX_JUMPS = 1 << 16

Fetch = Callable[[int, int], np.ndarray]


@dataclass(frozen=True)
class Access:
    """One DRAM range a unit reads or writes: ``[address, address + nbytes)``."""

    address: int
    nbytes: int
    write: bool
    what: str

    @property
    def end(self) -> int:
        return self.address + self.nbytes

    @property
    def kind(self) -> str:
        return "write" if self.write else "read"


def _refuse(message: str, where: int, field_name: str = "stream") -> InvalidCommand:
    return InvalidCommand(message, field=field_name, value=f"{where:#x}")


@dataclass
class Controller:
    """What the conv controller memory may hold, as far as the walker knows.

    ``known`` marks bytes written since the model was last forgotten; ``ptr`` is
    ``CFG_ADDR`` (None: unknown); ``u8_tables`` is every value the u8-table word may
    have (§10.3: consumed by each START, so normally ``{NO_BUFFER}``).
    """

    mem: np.ndarray = field(default_factory=lambda: np.zeros(CFG_MEM_BYTES, np.uint8))
    known: np.ndarray = field(default_factory=lambda: np.zeros(CFG_MEM_BYTES, bool))
    ptr: int | None = None
    u8_tables: frozenset[int] = frozenset({NO_BUFFER})

    def copy(self) -> Controller:
        return Controller(self.mem.copy(), self.known.copy(), self.ptr, self.u8_tables)

    def forget(self, u8_seen: frozenset[int] = frozenset()) -> None:
        """After a kick the device may have stopped anywhere in the stream: its controller
        memory and pointer are unknown, and any u8-table word it set may still be pending."""
        self.known[:] = False
        self.ptr = None
        self.u8_tables = self.u8_tables | u8_seen | {NO_BUFFER}

    def store(self, words: np.ndarray, where: int) -> None:
        """CFG_DATA writes: each word goes to CFG_ADDR, which advances by 4 (§10.3)."""
        ptr = self.ptr
        n = 4 * words.size
        if ptr is None:
            raise _refuse("CFG_DATA written before CFG_ADDR", where)
        if ptr % 4 or ptr < 0 or ptr + n > CFG_MEM_BYTES:
            raise _refuse(f"CFG_DATA stores outside controller memory at {ptr:#x}", where)
        self.mem[ptr:ptr + n] = words.astype("<u4").view(np.uint8)
        self.known[ptr:ptr + n] = True
        self.ptr = ptr + n

    def start(self, where: int) -> list[Access]:
        """START: the accesses of the configuration image at 0x2000; consumes the u8 word."""
        out = image_accesses(self, where)
        self.u8_tables = frozenset({NO_BUFFER})
        return out


def image_accesses(ctrl: Controller, where: int = CFG_IMAGE_ADDR) -> list[Access]:
    """The DRAM ranges of the configuration image in ``ctrl`` (§10.3, §4.1, §4.4, §4.10)."""
    base = CFG_IMAGE_ADDR
    if not ctrl.known[base:base + CONFIG.size].all():
        raise _refuse("START of a configuration image that was not written", where)
    hdr = CONFIG.unpack(ctrl.mem, base)
    nruns = int(hdr["topo"]).bit_length()
    end = base + CONFIG.size + nruns * CONFIG_RUN.size
    if end > CFG_MEM_BYTES or not ctrl.known[base:end].all():
        raise _refuse(f"START of a {nruns}-run configuration image that was not written",
                      where)
    runs = [CONFIG_RUN.unpack(ctrl.mem, base + CONFIG.size + i * CONFIG_RUN.size)
            for i in range(nruns)]
    try:
        return _conv_accesses(hdr, runs, ctrl.u8_tables)
    except InvalidArgument as exc:
        raise InvalidCommand(f"configuration image cannot be sized: {exc.message}",
                             field=exc.field, value=exc.value, limit=exc.limit) from None


def _conv_accesses(hdr: Mapping, runs: list[Mapping], u8_tables: frozenset[int]) -> list[Access]:
    if not runs:
        return []
    topo = int(hdr["topo"])
    w, h, z, c = (int(hdr[k]) for k in ("w", "h", "z", "c"))
    if min(w, h, z, c) < 1:
        raise InvalidCommand("configuration input shape is empty", field="w,h,z,c",
                             value=(w, h, z, c))
    batch = int(hdr["input_circular_offset"]) or 1
    tables = sorted(t for t in u8_tables if t != NO_BUFFER)
    elem = 2 if NO_BUFFER in u8_tables else 1  # a u8 input has one byte per element
    out: list[Access] = [Access(int(hdr["input_base_addr"]), w * h * z * c * elem * batch,
                                False, "input")]
    out += [Access(t & ~1, U8_TABLE_BYTES, False, "u8 table") for t in tables]
    shape = (w, h, z, c)
    out_total = 0
    for i, run in enumerate(runs):
        (ow, oh, oz, oc), _ = dims.run_output_shape(run, shape)
        if min(ow, oh, oz, oc) < 1:
            raise InvalidCommand(f"run {i} output {(ow, oh, oz, oc)} is empty", run=i,
                                 field="output shape", value=(ow, oh, oz, oc))
        if run["conv_enable"]:
            wsize = dims.run_weight_size(run, shape[3])
            out.append(Access(int(run["weight_base_addr"]), wsize, False, f"weights of run {i}"))
        if topo >> i & 1:
            out_total += ow * oh * oz * oc * 2
            shape = (w, h, z, c)
        else:
            shape = (ow, oh, oz, oc)
    out.append(Access(int(hdr["output_base_addr"]), out_total * batch, True, "output"))
    if hdr["output_mode"] == 1:
        r0 = dict(runs[0])
        if r0["pool_enable"] != POOL.avg:  # the addend meets the result before max-pool
            r0["pool_enable"] = 0
        (ew, eh, ez, ec), _ = dims.run_output_shape(r0, (w, h, z, c))
        out.append(Access(int(hdr["eltwise_base_addr"]), ew * eh * ez * ec * 2 * batch, False,
                          "eltwise"))
    return [a for a in out if a.nbytes > 0]


class _Walk:
    """One conv kick: chunks fetched, packets replayed into a copy of the controller."""

    def __init__(self, fetch: Fetch, ctrl: Controller) -> None:
        self.fetch = fetch
        self.ctrl = ctrl
        self.accesses: list[Access] = []
        self.u8_seen: set[int] = set()

    def chunk(self, addr: int, nbytes: int) -> np.ndarray:
        self.accesses.append(Access(addr, nbytes, False, "command stream"))
        raw = np.asarray(self.fetch(addr, nbytes), np.uint8)
        if raw.size != nbytes:
            raise _refuse("command stream chunk could not be fetched", addr)
        return raw[: nbytes - nbytes % 4].view("<u4")

    def run(self, addr: int, length: int) -> None:
        if length <= 0:
            return  # the device fetches nothing
        words = self.chunk(addr, length)
        visited = {(addr, length)}
        pos = 0
        while pos < words.size:
            word = int(words[pos])
            here = addr + 4 * pos
            if word == 0:  # pad words
                nz = np.flatnonzero(words[pos:])
                if not nz.size:
                    break
                pos += int(nz[0])
                continue
            if word & 1:  # jump (§10.2): length | 1, address
                if pos + 1 >= words.size:
                    raise _refuse("jump packet cut by the chunk end", here)
                nlen, naddr = word & ~1, int(words[pos + 1])
                if nlen % 8 or naddr % 8:
                    raise _refuse(f"jump to {naddr:#x} (+{nlen}) is not 8-byte aligned", here)
                if (naddr, nlen) in visited or len(visited) > MAX_JUMPS:
                    raise _refuse(f"command stream loops (jump back to {naddr:#x})", here)
                visited.add((naddr, nlen))
                addr, words, pos = naddr, self.chunk(naddr, nlen), 0
                continue
            hdr = PACKET.unpack(word)
            if not hdr["write"] or hdr["magic"] != WRITE_MAGIC:
                raise _refuse(f"unknown packet word {word:#010x}", here)
            n = hdr["count_minus_1"] + 1
            if pos + 1 + n > words.size:
                raise _refuse("write packet cut by the chunk end", here)
            data = words[pos + 1:pos + 1 + n]
            index = hdr["reg_index"]
            if not hdr["increment"] and index == _CFG_DATA:
                self.ctrl.store(data, here)  # a configuration image
            else:
                for k in range(n):
                    self.reg(index + k if hdr["increment"] else index, int(data[k]), here)
            pos += 1 + n

    def reg(self, index: int, value: int, where: int) -> None:
        role = _STREAM_REGS.get(index)
        if role is None:
            raise _refuse(f"stream writes register word {index:#x}, which the agent cannot "
                          "vet", where)
        if role == "u8_table":
            self.ctrl.u8_tables = frozenset({value})
            self.u8_seen.add(value)
        elif role == "cfg_addr":
            self.ctrl.ptr = value
        elif role == "cfg_data":
            self.ctrl.store(np.array([value], "<u4"), where)
        elif role == "start" and value & 1:
            self.accesses += self.ctrl.start(where)


def conv_kick_accesses(fetch: Fetch, cmd_addr: int, cmd_len8: int,
                       ctrl: Controller | None = None) -> tuple[list[Access], Controller]:
    """Every DRAM range a conv ``KICK`` touches -- stream chunks, then each command's
    operands -- and what the controller may hold afterwards (``ctrl`` is not modified;
    default: nothing known)."""
    after = ctrl.copy() if ctrl is not None else Controller()
    walk = _Walk(fetch, after)
    walk.run(int(cmd_addr), int(cmd_len8) * 8)
    after.forget(frozenset(walk.u8_seen))
    return walk.accesses, after


def conv_register_accesses(ctrl: Controller, offset: int,
                           value: int) -> tuple[list[Access], Controller]:
    """A CPU write to a conv register that reaches the controller (CFG_ADDR, CFG_DATA,
    START): the image's accesses for START, and the controller afterwards."""
    after = ctrl.copy()
    if offset == CONV_CFG_ADDR:
        after.ptr = value
    elif offset == CONV_CFG_DATA:
        after.store(np.array([value], "<u4"), offset)
    elif offset == CONV_START and value & 1:
        return after.start(offset), after
    return [], after


def _needed(regs: Mapping[int, int], unit: str, name: str) -> int:
    off = SPEC.reg(unit, name)
    if off not in regs:
        raise InvalidCommand(f"{unit} register {name} was not written before START",
                             field=name, value=None)
    return int(regs[off]) & 0xFFFFFFFF


def _image(addr: int, width: int, height: int, fmt: int, stride: int, write: bool,
           what: str) -> Access:
    """A ``height`` x ``width`` image: rows ``stride`` pixels apart (0 = packed, negative =
    bottom-up; §9.1 [AMBIG], read as pixels, which covers the byte reading too)."""
    bpp = PIXEL_BYTES.get(fmt)
    if bpp is None:
        raise InvalidCommand(f"{what} has an unknown image format", field=what, value=fmt,
                             limit=sorted(PIXEL_BYTES))
    pitch = (stride or width) * bpp
    span = (height - 1) * pitch
    lo = addr + min(0, span)
    return Access(lo, max(0, span) - min(0, span) + width * bpp, write, what)


def _signed(v: int) -> int:
    return v - (1 << 32) if v & 0x80000000 else v


def ipu_accesses(regs: Mapping[int, int]) -> list[Access]:
    """The IPU's ranges (§10.6, §9.1) from its register values (byte offset -> value)."""
    rect = _needed(regs, "ipu", "RECT")
    rw, rh = rect >> 16, rect & 0xFFFF
    if not rw or not rh:
        return []
    mode = _needed(regs, "ipu", "MODE")
    out = [_image(_needed(regs, "ipu", "WR_ADDR"), rw, rh, (mode >> 1) & 3,
                  _signed(_needed(regs, "ipu", "WR_STRIDE")), True, "IPU output")]
    if _needed(regs, "ipu", "USE_TEX"):
        size = _needed(regs, "ipu", "TEX_SIZE")
        fmt = _needed(regs, "ipu", "TEX_FMT") & 0xFF
        out.append(_image(_needed(regs, "ipu", "TEX_ADDR"), size >> 16, size & 0xFFFF, fmt, 0,
                          False, "IPU texture"))
    if mode & 0x08:
        out.append(_image(_needed(regs, "ipu", "RD_ADDR"), rw, rh, mode & 1,
                          _signed(_needed(regs, "ipu", "RD_STRIDE")), False, "IPU source"))
    return [a for a in out if a.nbytes > 0]


def maximizer_accesses(regs: Mapping[int, int]) -> list[Access]:
    """The maximizer's ranges (§10.7, §9.2): FP16 scores in, one byte per pixel out.
    ``LAST_BLOCK_SRC`` is copied literally by the driver ([AMBIG]) and not taken as an
    address."""
    size = _needed(regs, "maximizer", "SIZE")
    nclass, px = size >> 24, size & 0xFFFFFF
    if not nclass or not px:
        return []
    return [Access(_needed(regs, "maximizer", "IN_ADDR"), px * nclass * 2, False,
                   "maximizer input"),
            Access(_needed(regs, "maximizer", "OUT_ADDR"), px, True, "maximizer output")]


__all__ = ["Access", "Controller", "conv_kick_accesses", "conv_register_accesses",
           "image_accesses", "ipu_accesses", "maximizer_accesses"]
