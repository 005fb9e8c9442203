"""``dvsdk-run net.bin clip.mp4 | /dev/video0 | folder/ --save-annotated ... --show --serve``:
the frame pipeline (:mod:`dvsdk.apps`) behind ``dvsdk-run``.

``dvsdk-run`` takes this path when its input is a video file or a camera, or when an
output of the pipeline is asked for (``--save-annotated``, ``--save-json``, ``--show``,
``--serve``); otherwise (``dvsdk-run net.bin image.png``) it runs as it always has.
``--json`` prints one JSON line a frame (:func:`dvsdk.apps.sinks.record`) and a last line
``{"summary": ...}`` (:meth:`dvsdk.apps.pipeline.PipelineReport.as_dict`); otherwise the
summary is printed as a table at the end (``-v``: a line a frame as well).  Ctrl-C ends a
camera's run as its normal end: the frames so far are written (the video closed, the JSON
lines saved) and the summary printed, exit 0.

``--ipu`` has the device's IPU resize and convert each frame (:mod:`dvsdk.apps.pipeline`);
a net whose preprocessing the IPU cannot do (letterbox, std, a batch) is refused in one
line before any output is made.  Frames whose outputs hold NaN/inf (FP16 overflow) are
counted: the first one is named in a warning line, the summary counts them, and the run
exits 4 at its end, as ``dvsdk-run net.bin image.png`` does for such an image.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from ..errors import InvalidArgument
from . import positive_float, positive_int

#: dvsdk-run's options that belong to single images or tensors, not to a frame stream
_NOT_HERE = {"input": "--input", "save": "--save", "record": "--record", "bench": "--bench",
             "time": "--time", "selftest": "--selftest", "profile": "--profile",
             "trace": "--trace", "save_mask": "--save-mask"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("video, camera and annotated output (dvsdk.apps)")
    g.add_argument("--save-annotated", metavar="OUT.mp4|DIR",
                   help="the frames with the results drawn: a video file (.mp4 .mkv .mov "
                        ".avi, one frame per input frame) or a folder of PNGs")
    g.add_argument("--save-json", metavar="OUT.jsonl",
                   help="one JSON line a frame: frame index, time, the result")
    g.add_argument("--show", action="store_true",
                   help="show the annotated frames on the Linux framebuffer (--fb)")
    g.add_argument("--fb", default="/dev/fb0", metavar="/dev/fbN",
                   help="the framebuffer of --show (default /dev/fb0)")
    g.add_argument("--serve", metavar="[ADDR:]PORT",
                   help="live preview over HTTP (MJPEG and results) on ADDR (default "
                        "127.0.0.1, this machine only)")
    g.add_argument("--linger", type=float, metavar="SECONDS",
                   help="with --serve: keep serving the last frame this long after a file "
                        "ends (default: until Ctrl-C; 0: exit at the end)")
    g.add_argument("--max-frames", type=positive_int, metavar="N",
                   help="stop after N frames")
    g.add_argument("--camera-size", metavar="WxH", help="ask the camera for this size")
    g.add_argument("--camera-fps", type=positive_float, metavar="FPS",
                   help="ask the camera for this frame rate")


def wanted(args: argparse.Namespace) -> bool:
    """Whether this run is the pipeline's: a video or camera input, or one of its outputs."""
    from ..apps.sources import is_camera, is_video

    if args.save_annotated or args.save_json or args.show or args.serve:
        return True
    return any(is_camera(i) or (is_video(i) and not Path(i).is_dir()) for i in args.images)


def _check(args: argparse.Namespace) -> None:
    from ..apps.sinks import VIDEO_FORMATS
    from ..apps.sources import VIDEO_SUFFIXES, is_camera, is_video
    from ..fsutil import check_outputs

    for attr, flag in _NOT_HERE.items():
        if getattr(args, attr, None):
            raise InvalidArgument(f"{flag} is for images and tensors, not for a video, a "
                                  "camera or annotated output", field=flag)
    if not args.images:
        raise InvalidArgument("give a video file, a camera (/dev/videoN), an image or a "
                              "folder of images", field="inputs", value=None)
    streams = [i for i in args.images if is_camera(i) or (is_video(i) and not Path(i).is_dir())]
    if streams and len(args.images) > 1:
        raise InvalidArgument("a video or a camera runs alone: give one input", field="inputs",
                              value=args.images, limit=1)
    if args.linger is not None and not args.linger >= 0:
        raise InvalidArgument("--linger must be 0 or more seconds", field="--linger",
                              value=args.linger, limit=">= 0")
    suffix = Path(args.save_annotated or "").suffix.lower()
    if suffix in VIDEO_SUFFIXES and suffix not in VIDEO_FORMATS:
        raise InvalidArgument("cannot write this kind of video", field="--save-annotated",
                              value=args.save_annotated, limit=sorted(VIDEO_FORMATS))
    video_out = args.save_annotated if suffix in VIDEO_FORMATS else None
    check_outputs({"--save-annotated": video_out, "--save-json": args.save_json},
                  [("the net.bin", args.net), *(("an input", i) for i in args.images)],
                  force=args.force)


def _sinks(args: argparse.Namespace, fps: float | None) -> list[Any]:
    from ..apps.sinks import VIDEO_FORMATS, ImageFolderSink, JsonLinesSink, VideoSink

    sinks: list[Any] = []
    try:
        if args.save_annotated:
            if Path(args.save_annotated).suffix.lower() in VIDEO_FORMATS:
                sinks.append(VideoSink(args.save_annotated, fps, force=True))
            else:
                sinks.append(ImageFolderSink(args.save_annotated, force=args.force))
        if args.save_json:
            sinks.append(JsonLinesSink(args.save_json, force=True))
        if args.json:
            sinks.append(JsonLinesSink(sys.stdout))
        if args.show:
            from ..apps.framebuffer import FramebufferSink

            sinks.append(FramebufferSink(args.fb))
        if args.serve:
            from ..apps.preview import PreviewServer, parse_address

            server = PreviewServer(*parse_address(args.serve))
            sinks.append(server)
            if not args.quiet:
                print(f"dvsdk-run: preview at {server.url}", file=sys.stderr, flush=True)
    except BaseException:
        from ..apps.pipeline import _takes_ok

        for s in sinks:
            s.close(False) if _takes_ok(s) else s.close()
        raise
    return sinks


def main(args: argparse.Namespace) -> int:
    """The pipeline run of ``dvsdk-run`` (module docstring)."""
    from ..apps.pipeline import Pipeline, _takes_ok
    from ..apps.sources import open_source
    from ..runtime.net import load

    _check(args)
    if not Path(args.net).exists():
        raise InvalidArgument("net.bin not found", field="net", value=args.net)
    cam = {k: v for k, v in (("size", args.camera_size), ("fps", args.camera_fps)) if v}
    with load(args.net, args.device) as net:
        if args.ipu:   # refused before any source or output is opened
            from ..runtime.ipu import check_ipu

            check_ipu(net)
        source = open_source(args.images if len(args.images) > 1 else args.images[0], **cam)
        ok = False
        sinks: list[Any] = []
        try:
            sinks = _sinks(args, source.fps)
            verbose = args.verbose and not args.json and not args.quiet
            pipe = Pipeline(net, source, sinks, timeout=args.timeout,
                            max_frames=args.max_frames,
                            on_result=_say if verbose else None, ipu=bool(args.ipu),
                            on_nonfinite=None if args.quiet else _warn_nonfinite(verbose))
            try:
                report = pipe.run()
            except KeyboardInterrupt:   # Ctrl-C: how a camera run ends; keep what was made
                report = pipe.report
                if not args.quiet:
                    print("dvsdk-run: interrupted; finishing the outputs", file=sys.stderr)
            ok = True
            serving = [s for s in sinks if hasattr(s, "url")]
            if serving:
                serving[0].stats = {"summary": report.as_dict()}
                _linger(serving[0].url, args, source.live)
        finally:
            source.close()
            for s in sinks:
                s.close(ok) if _takes_ok(s) else s.close()
        if args.json:
            print(json.dumps({"summary": report.as_dict()}), flush=True)
        elif not args.quiet:
            print("\n".join(report.lines()))
            if args.save_annotated:
                print(f"annotated frames: {args.save_annotated}")
    if report.nonfinite:
        from . import EXIT_NONFINITE

        return EXIT_NONFINITE
    return 0


def _warn_nonfinite(every: bool) -> Any:
    """The warning of frames with NaN/inf outputs: the first one (each one with ``-v``)."""
    from . import nonfinite

    seen = [0]

    def warn(frame: Any, outputs: dict) -> None:
        seen[0] += 1
        if every or seen[0] == 1:
            more = "" if every else " (the summary counts the frames that follow)"
            print(f"dvsdk-run: warning: {frame.name}: {nonfinite(outputs)}{more}",
                  file=sys.stderr, flush=True)
    return warn


def _say(frame: Any, result: Any) -> None:
    summary = result.summary().replace("\n", "; ") if hasattr(result, "summary") else ""
    print(f"{frame.name}: {summary}", flush=True)


def _linger(url: str, args: argparse.Namespace, live: bool) -> None:
    """After a file's last frame, keep the preview up (--linger, or until Ctrl-C)."""
    if live or args.linger == 0:
        return
    if not args.quiet:
        how = "until Ctrl-C" if args.linger is None else f"for {args.linger:g} s"
        print(f"dvsdk-run: the source has ended; serving its last frame at {url} {how}",
              file=sys.stderr, flush=True)
    end = None if args.linger is None else time.monotonic() + args.linger
    try:
        while end is None or time.monotonic() < end:
            time.sleep(0.1 if end is None else max(0.0, min(0.1, end - time.monotonic())))
    except KeyboardInterrupt:
        pass   # the user has seen it: a normal end
