"""Small helpers for driver tests: move tensors and blobs in and out of DMA memory."""

from __future__ import annotations

import numpy as np

from dvsdk.hw import layout


def upload(dev, data, align: int = 64, name: str = ""):
    """A DMA buffer holding ``data`` (bytes or array), synced for the device."""
    raw = np.frombuffer(bytes(data), np.uint8) if isinstance(data, (bytes, bytearray)) else \
        np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    buf = dev.alloc(max(raw.size, 16), align=align, name=name)
    buf.write(0, raw)
    buf.sync_for_device()
    return buf


def upload_tensor(dev, x: np.ndarray, name: str = "input"):
    """An HWC (or NHWC batch) float tensor in the chunked FP16 layout."""
    return upload(dev, layout.pack(x), name=name)


def download_tensor(buf, shape, offset: int = 0) -> np.ndarray:
    n = int(np.prod(shape)) * 2
    buf.sync_for_cpu(offset, n)
    return layout.unpack(buf.read(offset, n), shape)


def fp16(x) -> np.ndarray:
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def kick_stream(dev, address: int, length8: int) -> None:
    """Start the conv stream at ``address`` (``length8`` 8-byte units) the way ``dev``'s
    kick protocol does (R5: shared memory + IPI; direct: conv 0x400-0x408; §10.4), with
    the raw values (no checks), as a test of the hardware's own handling needs."""
    from dvsdk.driver.kick import protocol

    proto = protocol(dev.kick)
    proto.acknowledge(dev)
    for window, offset, value in proto.start_writes:
        dev.write32(window, offset, {"address": address, "length8": length8}.get(value, value)
                    if isinstance(value, str) else value)


def wait_stream(dev, timeout: float) -> None:
    """Wait for the completion of :func:`kick_stream` (DeviceTimeout after ``timeout``)."""
    from dvsdk.driver.kick import protocol

    protocol(dev.kick).wait(dev, timeout)


def ones_conv(dev, in_offset: int = 0, dilation: int | None = None):
    """(command, output buffer): a 4x4x8 input of ones through a 1x1 conv summing the 8
    channels, so every output is 8.0; the input ``in_offset`` bytes into its buffer, the
    run's ``conv_dilation`` field as given (None: ConvRun.make's)."""
    from dataclasses import replace

    from dvsdk.driver.commands import BufferRef, ConvCommand, ConvRun
    from dvsdk.hw.weights import pack_conv_weights

    x = dev.alloc(4 * 4 * 8 * 2 + in_offset, name="x")
    x.write(in_offset, np.frombuffer(layout.pack(np.ones((4, 4, 8), np.float32)), np.uint8))
    x.sync_for_device()
    w = upload(dev, pack_conv_weights(np.ones((8, 8, 1, 1), np.float32),
                                      np.zeros(8, np.float32)), name="weights")
    out = dev.alloc(4 * 4 * 8 * 2, name="out")
    run = ConvRun.make(8, conv="conv", kernel=1, weights=w)
    if dilation is not None:
        run = replace(run, conv_dilation=dilation)
    src = BufferRef(x, in_offset) if in_offset else x
    return ConvCommand(input_buf=src, output_buf=out, w=4, h=4, c=8, runs=[run]), out


def run_ones_conv(dev, **kw) -> None:
    """Commit and run :func:`ones_conv` on ``dev`` and check its output (every value 8.0)."""
    from dvsdk.driver.cmdlist import CommandList

    cmd, out = ones_conv(dev, **kw)
    with CommandList(dev) as cl:
        cl.add(cmd)
        cl.commit()
        cl.run()
    np.testing.assert_array_equal(download_tensor(out, (4, 4, 8)), 8.0)
