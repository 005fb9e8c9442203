#!/usr/bin/env python3
"""A camera through a detector, pipelined, onto the display, a preview page or a file.

Opens the V4L2 camera (``/dev/video0`` by default; PyAV's v4l2 input, :mod:`dvsdk.apps.camera`)
and runs every frame through a detection network with :class:`dvsdk.apps.Pipeline`: the
camera's frames are decoded and prepared while the DV700 runs the previous one and the one
before is decoded into boxes, drawn and shown.  A camera produces frames at its own pace,
so stale ones are dropped rather than queued: what is shown is the present.

Where there is no camera (this machine, a CI job), the refusal is printed as one line and
the script falls back to a short clip it makes itself (two seconds of moving shapes,
encoded with PyAV into a temporary folder), so the same pipeline runs anyway.

Outputs, any together: ``--show`` the Linux framebuffer (/dev/fb0: the board's HDMI
display), ``--serve 8080`` a preview page at http://127.0.0.1:8080/ (MJPEG and results),
``-o out.mp4`` an annotated video.  The network is ``--net det.bin`` (compiled with
``--task detect``) or, by default, the random-weight YOLOv8n-like one of ``detect.py``.

    python3 examples/camera.py                          # camera or the fallback clip
    python3 examples/camera.py --serve 8080 --seconds 30
    python3 examples/camera.py --net yolo.bin --show    # on the board

Needs PyAV (``pip install "dvsdk[video]"``) and, without --net, the compiler extra.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

import dvsdk
from dvsdk.cli import entry


def make_clip(path: Path, seconds: float = 2.0, fps: int = 15, size=(160, 120)) -> Path:
    """A short clip of a red square and a blue disc crossing a grey field (PyAV)."""
    import av

    w, h = size
    yy, xx = np.mgrid[:h, :w]
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=fps)
        s.width, s.height, s.pix_fmt = w, h, "yuv420p"
        n = int(seconds * fps)
        for i in range(n):
            f = np.full((h, w, 3), 110, np.uint8)
            x = int((w - 40) * i / max(n - 1, 1))
            f[20:60, x:x + 40] = (210, 50, 40)
            cx, cy = w - 30 - x // 2, 85
            f[(xx - cx) ** 2 + (yy - cy) ** 2 < 18 ** 2] = (40, 90, 220)
            c.mux(s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")))
        c.mux(s.encode(None))
    return path


def open_camera_or_clip(device: str, tmp: str):
    """The camera, or (saying why, in one line) the fallback clip."""
    from dvsdk.apps.camera import CameraSource
    from dvsdk.apps.sources import open_source
    from dvsdk.errors import CameraError

    try:
        return CameraSource(device), device
    except CameraError as e:
        print(f"camera.py: {e}", file=sys.stderr)
        clip = make_clip(Path(tmp) / "fallback.mp4")
        print(f"no camera: running on a generated {clip.name} (2 s of moving shapes) instead")
        return open_source(str(clip)), str(clip)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--camera", default="/dev/video0", help="V4L2 node (default /dev/video0)")
    p.add_argument("--net", help="a net.bin compiled with --task detect (default: build one)")
    p.add_argument("--show", action="store_true", help="draw on the framebuffer /dev/fb0")
    p.add_argument("--serve", metavar="[ADDR:]PORT", help="preview page (MJPEG + results)")
    p.add_argument("-o", "--output", help="write the annotated frames to a video file")
    p.add_argument("--seconds", type=float, default=10.0, help="stop a camera after this long")
    p.add_argument("--device", default=None, help="device URL (default $DVSDK_DEVICE or sim://)")
    p.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    args = p.parse_args(argv)
    return entry("camera.py", lambda _: _main(args), [])


def _main(args) -> int:
    from dvsdk.apps import run_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        net_path = args.net
        if net_path is None:
            sys.path.insert(0, str(Path(__file__).parent))
            from detect import compile_detector

            net_path = os.path.join(tmp, "detect.bin")
            compile_detector(Path(net_path), None, 128, None)
        source, name = open_camera_or_clip(args.camera, tmp)
        sinks = []
        if args.show:
            from dvsdk.apps.framebuffer import FramebufferSink

            sinks.append(FramebufferSink("/dev/fb0"))
        if args.serve:
            from dvsdk.apps.preview import PreviewServer, parse_address

            sinks.append(PreviewServer(*parse_address(args.serve)))
            print(f"preview at {sinks[-1].url}")
        if args.output:
            from dvsdk.apps.sinks import VideoSink

            sinks.append(VideoSink(args.output, source.fps, force=True))
        with dvsdk.load(net_path, args.device) as net:
            # a camera never ends: stop it after --seconds worth of frames
            frames = int(args.seconds * (source.fps or 30)) if source.live else None
            report = run_pipeline(net, source, sinks, max_frames=frames)  # closes the sinks
        print(f"{Path(name).name}:")
        print("\n".join(report.lines()))
        if args.output:
            print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
