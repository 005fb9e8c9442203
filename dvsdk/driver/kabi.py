"""DMP's kernel-module ABI: the kernel command structs and the ioctls (reference §5, §10.5).

The structs (``kconv_v0``, ``kconv_v1``, ``kipu_v0``, ``kmaximizer_v0``, ``kcmd``,
``kwait``) are in ``firmware_spec/commands.yaml``; the ioctl numbers are derived from
their sizes (``firmware_spec/kernel.yaml``, :meth:`~dvsdk.hw.spec.Spec.ioctl`).  This
module fills them the way libdmpdv's ``FillKCommand`` does (§5.2):

* every buffer becomes a kbuf ``{fd, 0, offs}`` (fd -1 for "no buffer");
* conv v0: header ``{72 + 56·runs, 0}``, the scalar fields copied, ``conv_dilation``
  patched from 0 to 1 per axis, and the dummy 1×1 average pool (``pool_avg_param`` 1.0)
  on runs with neither conv nor pool, except LRN runs (which must stay standalone, §15.1;
  :func:`dvsdk.driver.stream.hw_run_fields`, the same record the stream carries);
* conv v1: the v0 body at byte 24 behind ``{96 + 56·runs, 1}``, the table kbuf, and
  ``to_bgr`` at 24 (the nested v0 header's size field, as libdmpdv overwrites it);
* IPU: the user fields plus ``scale_width/height = FP24(1.0f / tex_width/height)``
  (FP24 of 1/0 = 0x7F0000 when there is no texture, as libdmpdv computes it, §9.1);
* maximizer: the fields as they are.

Nothing here touches a device: :mod:`dvsdk.driver.kmod` issues the ioctls.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidCommand
from ..hw.spec import SPEC
from .commands import BufferRef, ConvCommand, IpuCommand, MaximizerCommand
from .device import DmaBuffer
from .stream import hw_run_fields
from .unitregs import ipu_scale

KERNEL = SPEC.kernel
IOCTL = {name: SPEC.ioctl(name) for name in KERNEL["ioctls"]}
APPEND_CMD = IOCTL["DMP_DV_IOC_APPEND_CMD"]
RUN = IOCTL["DMP_DV_IOC_RUN"]
WAIT = IOCTL["DMP_DV_IOC_WAIT"]
WAIT_V0 = IOCTL["DMP_DV_IOC_WAIT_V0"]  # modules before 96130ca (dvsdk.driver.kmodver)
KCONV_V0 = SPEC.struct("kconv_v0")
KCONV_V1 = SPEC.struct("kconv_v1")
KIPU = SPEC.struct("kipu_v0")
KMAXIMIZER = SPEC.struct("kmaximizer_v0")
KCMD = SPEC.struct("kcmd")
KWAIT = SPEC.struct("kwait")
KWAIT_V0 = SPEC.struct("kwait_v0")
KCMD_ID = SPEC.struct("kcmd_id")
#: the v0 body sits at this offset of a v1 struct (§5.1)
V1_BODY = KCONV_V1.offset("input_buf") - KCONV_V0.offset("input_buf")

FdOf = Callable[[DmaBuffer], int]


def kbuf(ref: BufferRef, fd_of: FdOf) -> dict[str, int]:
    """A ``dmp_dv_kbuf``: the buffer's dma-buf fd and the offset (fd -1: none, §5.2)."""
    if not ref:
        return {"fd": -1, "rsvd": 0, "offs": 0}
    return {"fd": fd_of(ref.buffer), "rsvd": 0, "offs": ref.offset}


def _run_record(run, fd_of: FdOf) -> dict:
    rec = hw_run_fields(run)
    del rec["weight_base_addr"]
    rec["weight_buf"] = kbuf(run.weight_buf, fd_of)
    rec["rsvd"] = run.rsvd  # copied to the kernel struct, never sent to hardware (§3.2)
    return rec


def pack_conv(cmd: ConvCommand, fd_of: FdOf) -> bytes:
    """The kernel conv struct libdmpdv sends for ``cmd``: only ``72 + 56·runs`` bytes
    (v0) or ``96 + 56·runs`` (v1) (§5.1, §5.2)."""
    n = cmd.num_runs
    body = {
        "input_buf": kbuf(cmd.input_buf, fd_of), "output_buf": kbuf(cmd.output_buf, fd_of),
        "eltwise_buf": kbuf(cmd.eltwise_buf, fd_of), "topo": cmd.topo, "w": cmd.w,
        "h": cmd.h, "z": cmd.z, "c": cmd.c,
        "input_circular_offset": cmd.input_circular_offset, "output_mode": cmd.output_mode,
        "run": [_run_record(r, fd_of) for r in cmd.runs[:n]],
    }
    if cmd.version == 1:
        size = KCONV_V1.bytes_sent(n)
        body.update(header={"size": size, "version": 1}, to_bgr=1 if cmd.to_bgr else 0,
                    u8tofp16_table=kbuf(cmd.u8tofp16_table, fd_of))
        return KCONV_V1.pack(body)[:size]
    size = KCONV_V0.bytes_sent(n)
    body["header"] = {"size": size, "version": 0}
    return KCONV_V0.pack(body)[:size]


def pack_ipu(cmd: IpuCommand, fd_of: FdOf) -> bytes:
    """``kipu_v0`` (232 bytes): the user struct plus the FP24 scales (§3.5, §5.2)."""
    lut = list(cmd.lut[:32]) + [0] * (32 - min(len(cmd.lut), 32))
    return KIPU.pack({
        "header": {"size": KIPU.size, "version": 0},
        "tex": kbuf(cmd.tex, fd_of), "rd": kbuf(cmd.rd, fd_of), "wr": kbuf(cmd.wr, fd_of),
        "fmt_tex": cmd.fmt_tex, "fmt_rd": cmd.fmt_rd, "fmt_wr": cmd.fmt_wr,
        "tex_width": cmd.tex_width, "tex_height": cmd.tex_height,
        "rect_width": cmd.rect_width, "rect_height": cmd.rect_height,
        "scale_width": ipu_scale(cmd.tex_width), "scale_height": ipu_scale(cmd.tex_height),
        "stride_rd": cmd.stride_rd, "stride_wr": cmd.stride_wr,
        "lut": [v & 0xFFFFFFFF for v in lut], "ncolor_lut": cmd.ncolor_lut,
        "alpha": cmd.alpha, "transpose": int(bool(cmd.transpose)),
        "use_const_alpha": int(bool(cmd.use_const_alpha)), "use_tex": int(bool(cmd.use_tex)),
        "use_rd": int(bool(cmd.use_rd)), "blf": int(bool(cmd.blf)), "ridx": cmd.ridx,
        "gidx": cmd.gidx, "bidx": cmd.bidx, "aidx": cmd.aidx, "cnv_type": cmd.cnv_type,
        "cnv_param": list(cmd.cnv_param),
    })


def pack_maximizer(cmd: MaximizerCommand, fd_of: FdOf) -> bytes:
    """``kmaximizer_v0`` (48 bytes)."""
    return KMAXIMIZER.pack({
        "header": {"size": KMAXIMIZER.size, "version": 0},
        "input_buf": kbuf(cmd.input_buf, fd_of), "output_buf": kbuf(cmd.output_buf, fd_of),
        "width": cmd.width, "height": cmd.height, "nclass": cmd.nclass,
    })


def pack_command(cmd: object, fd_of: FdOf) -> bytes:
    """The kernel struct of any (validated) conv, IPU or maximizer command."""
    if isinstance(cmd, ConvCommand):
        return pack_conv(cmd, fd_of)
    if isinstance(cmd, IpuCommand):
        return pack_ipu(cmd, fd_of)
    if isinstance(cmd, MaximizerCommand):
        return pack_maximizer(cmd, fd_of)
    raise InvalidCommand("no kernel struct for this command", field="cmd",
                         value=type(cmd).__name__, limit="conv, IPU, maximizer")
