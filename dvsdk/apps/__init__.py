"""On-device apps: frames in (images, video, a V4L2 camera, arrays), a compiled network with
its task head, annotated frames and results out (image folders, video, JSON lines, the
Linux framebuffer, an MJPEG preview over HTTP), pipelined so the DV700 does not wait.

One module per concept: :mod:`.sources`, :mod:`.camera`, :mod:`.sinks`,
:mod:`.framebuffer`, :mod:`.preview`, :mod:`.pipeline`.  Video and camera need PyAV
(``pip install "dvsdk[video]"``); everything else needs only the core dependencies.
"""

from __future__ import annotations

from .pipeline import Pipeline, PipelineReport, run_pipeline
from .sources import ArraySource, Frame, ImageSource, Source, VideoSource, open_source

__all__ = ["Frame", "Source", "ImageSource", "VideoSource", "ArraySource", "open_source",
           "Pipeline", "PipelineReport", "run_pipeline"]
