"""The CONV command stream (reference §10.2-10.4), as the hardware fetches it from DRAM.

A conv command becomes a run of 32-bit words: set the controller memory pointer
to 0x2000, stream the configuration image (§10.3) through the data port, and
write 1 to the start register.  Commands are laid into DMA chunks; a full chunk
ends with a jump packet to the next, the last chunk with the interrupt write.
Packet bit layouts come from ``firmware_spec/stream.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgument
from ..hw.spec import SPEC
from .commands import POOL_ENABLE, ConvCommand, ConvRun
from .device import Device, DmaBuffer

PACKET = SPEC.packet
WRITE_MAGIC = int(SPEC.stream["write_magic"])
MAX_WORDS = int(SPEC.stream["max_words_per_packet"])
CFG_IMAGE_ADDR = int(SPEC.stream["cfg_image_address"])
CHUNK_BYTES = int(SPEC.stream["chunk_bytes"])
REG_CFG_ADDR = SPEC.stream_reg("cfg_addr")
REG_CFG_DATA = SPEC.stream_reg("cfg_data")
REG_START = SPEC.stream_reg("start")
REG_IRQ = SPEC.stream_reg("irq")
REG_U8_TABLE = SPEC.stream_reg("u8_table")
CONFIG = SPEC.struct("conv_config")
CONFIG_RUN = SPEC.struct("conv_config_run")
NO_BUFFER = 0xDEADBEEF


def write_header(reg_index: int, nwords: int, increment: bool = False) -> int:
    """Header word of a write packet of ``nwords`` data words (§10.2)."""
    if not 1 <= nwords <= MAX_WORDS:
        raise InvalidArgument("write packet word count out of range", field="nwords",
                              value=nwords, limit=f"1..{MAX_WORDS}")
    return PACKET.pack(reg_index=reg_index, magic=WRITE_MAGIC, count_minus_1=nwords - 1,
                       write=1, increment=int(increment), jump=0)


def write_packet(reg_index: int, *values: int) -> list[int]:
    return [write_header(reg_index, len(values)), *(int(v) & 0xFFFFFFFF for v in values)]


def jump_packet(length_bytes: int, address: int) -> list[int]:
    """Jump to a chunk of ``length_bytes`` (a multiple of 8) at ``address`` (§10.2)."""
    if length_bytes % 8 or length_bytes <= 0:
        raise InvalidArgument("jump target length must be a positive multiple of 8",
                              field="length_bytes", value=length_bytes, limit="8k")
    return [length_bytes | 1, address]


def hw_run_fields(run: ConvRun) -> dict[str, int]:
    """The run record the hardware sees (§5.2): dilation 0 → 1 per axis, and the dummy
    1×1 average pool (identity) on runs with neither conv nor pool — except LRN runs,
    which must stay standalone (§15.1: DMP's driver breaks LRN here; we do not)."""
    dil = run.conv_dilation
    if dil & 0xFF == 0:
        dil |= 0x01
    if dil & 0xFF00 == 0:
        dil |= 0x0100
    rec = {
        "m": run.m, "conv_enable": run.conv_enable, "p": run.p, "pz": run.pz,
        "conv_pad": run.conv_pad, "conv_stride": run.conv_stride, "conv_dilation": dil,
        "weight_base_addr": run.weight_buf.phys, "weight_fmt": run.weight_fmt,
        "pool_enable": run.pool_enable, "pool_avg_param": run.pool_avg_param,
        "pool_size": run.pool_size, "pool_stride": run.pool_stride, "pool_pad": run.pool_pad,
        "actfunc": run.actfunc, "actfunc_param": run.actfunc_param,
        "rectifi_en": run.rectifi_en, "lrn": run.lrn,
    }
    if run.conv_enable == 0 and run.pool_enable == 0 and not run.is_lrn:
        rec.update(pool_enable=POOL_ENABLE.avg, pool_size=0x0101, pool_stride=0x0101,
                   pool_pad=0, pool_avg_param=0x3C00)
    return rec


def config_image(cmd: ConvCommand, tiles: int) -> bytes:
    """The conv configuration image (§10.3): 32-byte header + 44 bytes per run."""
    header = CONFIG.pack({
        "topo": cmd.topo, "w": cmd.w, "h": cmd.h, "z": cmd.z, "c": cmd.c,
        "input_base_addr": cmd.input_buf.phys,
        "input_circular_offset": cmd.input_circular_offset, "tiles": tiles,
        "output_base_addr": cmd.output_buf.phys,
        "eltwise_base_addr": cmd.eltwise_buf.phys if cmd.eltwise_buf else NO_BUFFER,
        "output_mode": cmd.output_mode,
    })
    runs = b"".join(CONFIG_RUN.pack(hw_run_fields(r)) for r in cmd.runs[: cmd.num_runs])
    return header + runs


def conv_words(cmd: ConvCommand, tiles: int) -> np.ndarray:
    """The words one conv command contributes to the stream (§10.3): ``52 + 44·runs`` bytes,
    plus 8 for a v1 command's u8 table packet."""
    image = np.frombuffer(config_image(cmd, tiles), "<u4")
    words: list[int] = []
    if cmd.version == 1:
        words += write_packet(REG_U8_TABLE, cmd.u8tofp16_table.phys | (1 if cmd.to_bgr else 0))
    words += write_packet(REG_CFG_ADDR, CFG_IMAGE_ADDR)
    words.append(write_header(REG_CFG_DATA, image.size))
    head = np.array(words, "<u4")
    tail = np.array(write_packet(REG_START, 1), "<u4")
    return np.concatenate([head, image, tail])


@dataclass
class Stream:
    """A stream laid into DMA chunks; ``address``/``length8`` go to CMD_ADDR/CMD_LEN."""

    chunks: list[DmaBuffer] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)

    @property
    def address(self) -> int:
        return self.chunks[0].phys

    @property
    def length8(self) -> int:
        return self.lengths[0] // 8

    @property
    def nbytes(self) -> int:
        return sum(self.lengths)

    def free(self) -> None:
        for c in self.chunks:
            c.free()
        self.chunks.clear()
        self.lengths.clear()


def _pad8(words: list[np.ndarray], n: int) -> int:
    if n % 2:
        words.append(np.zeros(1, "<u4"))
        n += 1
    return n


def build_stream(device: Device, commands: list[np.ndarray],
                 chunk_bytes: int = CHUNK_BYTES) -> Stream:
    """Lay whole commands into chunks of at most ``chunk_bytes`` and chain them (§10.4)."""
    cap = chunk_bytes // 4 - 3  # room for the 2-word terminator and a pad word
    groups: list[list[np.ndarray]] = [[]]
    used = 0
    for words in commands:
        if words.size > cap:
            raise InvalidArgument("a command does not fit in one stream chunk",
                                  field="chunk_bytes", value=chunk_bytes,
                                  limit=4 * (words.size + 3))
        if used + words.size > cap:
            groups.append([])
            used = 0
        groups[-1].append(words)
        used += words.size
    stream = Stream()
    next_len, next_addr = 0, 0
    built: list[tuple[DmaBuffer, int]] = []
    try:
        for i in range(len(groups) - 1, -1, -1):
            parts = list(groups[i])
            if i == len(groups) - 1:
                parts.append(np.array(write_packet(REG_IRQ, 1), "<u4"))
            else:
                parts.append(np.array(jump_packet(next_len, next_addr), "<u4"))
            n = _pad8(parts, sum(p.size for p in parts))
            data = np.concatenate(parts)
            buf = device.alloc(4 * n, align=64, name=f"stream{i}")
            buf.write(0, data)
            buf.sync_for_device(0, 4 * n)
            built.append((buf, 4 * n))
            next_len, next_addr = 4 * n, buf.phys
    except BaseException:
        for buf, _ in built:
            buf.free()
        raise
    built.reverse()
    stream.chunks = [b for b, _ in built]
    stream.lengths = [n for _, n in built]
    return stream
