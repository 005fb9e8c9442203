"""A frame and a source of frames: what every source of :mod:`dvsdk.apps` yields and is.

A source yields :class:`Frame` objects (an index from 0, an RGB uint8 (H, W, 3) array, a
time in seconds and a name for messages and file names) and says whether it is ``live``:
a live source (a camera) produces frames at its own pace whether or not anyone takes them,
so the pipeline keeps only the newest one (:mod:`.pipeline`); the others wait for it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import SourceError


@dataclass
class Frame:
    """One frame: ``index`` from 0 in the source's order, ``rgb`` (H, W, 3) uint8,
    ``time`` in seconds (the video's presentation time, the camera's capture time, else
    the index over the frame rate or 0), ``name`` for messages and output file names."""

    index: int
    rgb: np.ndarray
    time: float
    name: str
    #: set by the pipeline when the network's outputs for this frame hold NaN/inf
    nonfinite: bool = False


class Source:
    """A stream of :class:`Frame`: iterate it once; ``close()`` releases what it holds.
    ``live``: frames arrive at the source's pace (a camera); ``fps``: its nominal rate,
    when known; ``count``: how many frames it will give, when known."""

    live: bool = False
    fps: float | None = None
    count: int | None = None
    name: str = ""

    def __iter__(self) -> Iterator[Frame]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def import_av() -> Any:
    """PyAV, or a SourceError saying how to install it."""
    try:
        import av
    except ImportError:
        raise SourceError("video files and cameras need PyAV, which is not installed",
                          field="av", hint='pip install "dvsdk[video]"') from None
    return av
