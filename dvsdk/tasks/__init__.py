"""Task heads: what a network's outputs mean (issue 31).

A net.bin compiled with ``--task`` records its post-processing in META ``task``
(:mod:`.spec`); :func:`head_for` builds the head, whose ``prepare`` / ``finish`` wrap
``net.run`` (:mod:`.heads`), and ``net.run_image`` returns a result (:mod:`.results`):
:class:`Classification`, :class:`Detections`, :class:`Segmentation`, :class:`Text`, or
:class:`Raw` for a net without a task.
"""

from __future__ import annotations

from .geometry import Geometry
from .heads import Head, head_for, run_task_image
from .results import Classification, Detections, Raw, Result, Segmentation, Text
from .spec import TaskSpec

__all__ = ["Classification", "Detections", "Geometry", "Head", "Raw", "Result",
           "Segmentation", "TaskSpec", "Text", "head_for", "run_task_image"]
