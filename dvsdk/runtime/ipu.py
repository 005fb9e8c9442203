"""The image units around a network: IPU preprocessing in, maximizer class maps out.

:func:`ipu_preprocess` lets the IPU (§9.1) do resize and u8→FP16 conversion,
writing straight into the network's input tensor: with ``transpose`` the IPU's
row-major output is the x-major 8-channel-chunked layout of a 3-channel tensor
(§1), so no CPU packing is needed.  :func:`class_map` runs the maximizer (§9.2)
on a (N, K, H, W) output still in the arena.

Both units take one image a command (§3.5, §3.6: no batch field).  A network compiled for
N samples (``batch``) gets one maximizer command per sample, each on its sample's bytes
(N back to back, §1); the IPU fills single-image inputs only (``run_image`` with
``ipu=True`` on a batch-N network is refused).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..driver.cmdlist import CommandList
from ..driver.commands import BufferRef, IpuCommand, MaximizerCommand
from ..errors import InvalidArgument

_RGB888, _RGBFP16 = 1, 2
_SUB, _DIV_255 = 0, 1


def _conversion(pre: dict[str, Any]) -> tuple[int, tuple[int, int, int]]:
    """The IPU conversion equal to the recorded preprocessing, or InvalidArgument."""
    mean = [float(v) for v in (pre.get("mean") or [0.0])]
    mean = (mean * 3)[:3] if len(mean) == 1 else mean[:3]
    scale = float(pre.get("scale", 1.0) or 1.0)
    if pre.get("resize", "stretch") != "stretch":
        raise InvalidArgument("the IPU resizes by stretching only", field="resize",
                              value=pre.get("resize"), limit="stretch")
    if not pre.get("std"):
        if not any(mean) and abs(scale * 255.0 - 1.0) < 1e-6:
            return _DIV_255, (0, 0, 0)
        if scale == 1.0 and all(m == int(m) and 0 <= m <= 255 for m in mean):
            return _SUB, tuple(int(m) for m in mean)
    raise InvalidArgument("this network's preprocessing has no IPU equivalent (needs x/255, "
                          "or x - integer mean with scale 1, and no std)", field="preprocess",
                          value={"mean": mean, "scale": scale, "std": pre.get("std")},
                          limit="DIV_255 or SUB")


def check_ipu(net: Any) -> None:
    """Raise InvalidArgument (naming the field) unless :func:`ipu_preprocess` can fill
    ``net``'s input: a device with an IPU, a single 3-channel image input of one sample
    in the arena (``batch``), stretch resize (``resize``), and a conversion the IPU has
    (``preprocess``: x/255, or x - integer mean; no ``std``).  What a frame pipeline
    checks once before its first frame (:class:`dvsdk.apps.pipeline.Pipeline`)."""
    if "ipu" not in net.device.info().units:
        raise InvalidArgument("this device has no IPU", field="device",
                              value=net.device.info().units, limit="ipu")
    if len(net.inputs) != 1:
        raise InvalidArgument("the IPU fills a single-input network", field="inputs",
                              value=[i["name"] for i in net.inputs], limit=1)
    spec = net.inputs[0]
    shape = tuple(spec["shape"])
    if len(shape) == 4 and shape[0] != 1:
        raise InvalidArgument("the IPU fills one image; this network takes a batch",
                              field="batch", value=shape[0], limit=1)
    if spec.get("layout") == "NHWC" and len(shape) == 4:
        shape = (shape[0], shape[3], shape[1], shape[2])
    if len(shape) != 4 or shape[1] != 3 or net._dev(spec["tensor"]) is None:
        raise InvalidArgument("the IPU fills a 3-channel image input on the device",
                              field="input", value=shape, limit="(1, 3, H, W)")
    _conversion(spec.get("preprocess", {}))


def ipu_preprocess(net: Any, ctx: Any, spec: dict[str, Any], rgb: np.ndarray,
                   timeout: float) -> None:
    info = net.device.info()
    if "ipu" not in info.units:
        raise InvalidArgument("this device has no IPU", field="device", value=info.units,
                              limit="ipu")
    shape = tuple(spec["shape"])
    if spec.get("layout") == "NHWC" and len(shape) == 4:   # the device tensor is NCHW
        shape = (shape[0], shape[3], shape[1], shape[2])
    dev = net._dev(spec["tensor"])
    if len(shape) != 4 or shape[1] != 3 or dev is None or shape[0] != 1:
        raise InvalidArgument("the IPU fills a 3-channel image input of one sample on the "
                              "device", field="input", value=shape, limit="(1, 3, H, W)")
    cnv, param = _conversion(spec.get("preprocess", {}))
    _, _, height, width = shape
    th, tw = rgb.shape[:2]
    order = spec.get("preprocess", {}).get("channel_order", "RGB")
    r, b = (2, 0) if order == "BGR" else (0, 2)
    tex = net.device.alloc(max(rgb.nbytes, 16), align=64, name="ipu-texture")
    try:
        tex.write(0, np.ascontiguousarray(rgb))
        tex.sync_for_device(0, rgb.nbytes)
        # A normal net reads x-major [W][H][3]: the IPU writes the texture transposed (row x,
        # column y).  A --transpose net reads row-major [H][W][3]: no IPU transpose.
        flip = not spec.get("transpose")
        rw, rh = (height, width) if flip else (width, height)
        cmd = IpuCommand(wr=BufferRef(ctx.arena, dev["offset"]), rect_width=rw,
                         rect_height=rh, fmt_wr=_RGBFP16, tex=BufferRef(tex, 0),
                         fmt_tex=_RGB888, tex_width=tw, tex_height=th, transpose=int(flip),
                         blf=1, ridx=r, gidx=1, bidx=b, aidx=3, cnv_type=cnv, cnv_param=param)
        with CommandList(net.device) as cl:
            cl.add(cmd)
            cl.commit()
            cl.run(timeout)
    finally:
        tex.free()


def class_map(net: Any, output: str | None = None) -> np.ndarray:
    outs = getattr(net, "_last_result", None)
    if outs is None:
        raise InvalidArgument("run the network first", field="class_map")
    names = [o["name"] for o in net.outputs]
    if output is not None and not isinstance(output, str):
        raise InvalidArgument("an output is named by a string", field="output",
                              value=type(output).__name__, limit=names)
    name = output or names[0]
    if name not in outs:
        raise InvalidArgument("no such output", field="output", value=name, limit=names)
    scores = outs[name]
    spec = next(o for o in net.outputs if o["name"] == name)
    if spec.get("layout") == "NHWC" and scores.ndim == 4:   # Keras: classes last
        scores = scores.transpose(0, 3, 1, 2)
    if scores.ndim != 4 or scores.shape[1] < 2:
        raise InvalidArgument("a class map needs a (N, K, H, W) output", field=name,
                              value=scores.shape, limit="(N, K>=2, H, W)")
    n, k, height, width = scores.shape
    tensor = next(o["tensor"] for o in net.outputs if o["name"] == name)
    dev = net._dev(tensor)
    info = net.device.info()
    px = height * width
    sample = px * k * 2  # the maximizer's buffers are 16-byte aligned (§6.8)
    if dev is None or "maximizer" not in info.units or k > 255 or (n > 1 and sample % 16):
        maps = np.argmax(scores, axis=1).astype(np.uint8)
        return maps[0] if n == 1 else maps
    stride = -(-px // 16) * 16
    out = net.device.alloc(max(n * stride, 16), align=64, name="class-map")
    try:
        # the device tensor of a --transpose net is x/y-exchanged: its x-major argmax map
        # is the model's row-major one
        dw, dh = (height, width) if spec.get("transpose") else (width, height)
        with CommandList(net.device) as cl:
            for i in range(n):  # one image a command: sample i's bytes (§1)
                cl.add(MaximizerCommand(
                    input_buf=BufferRef(net._last_ctx.arena, dev["offset"] + i * sample),
                    output_buf=BufferRef(out, i * stride), width=dw, height=dh, nclass=k))
            cl.commit()
            cl.run()
        out.sync_for_cpu(0, n * stride)
        raw = out.read(0, n * stride).reshape(n, stride)[:, :px]
        if spec.get("transpose"):
            maps = raw.reshape(n, height, width).copy()
        else:
            maps = raw.reshape(n, width, height).transpose(0, 2, 1).copy()  # x-major
        return maps[0] if n == 1 else maps
    finally:
        out.free()
