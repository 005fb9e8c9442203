"""``net.run_image`` of a net.bin with a task head (META ``task``, :mod:`dvsdk.tasks`):
decode, preprocess and run as for any net, then the head's ``finish`` in the original
image's pixels.

Segmentation takes its class map from the DV700's maximizer unit (§9.2,
:func:`.ipu.class_map`) while the run's outputs are still in the arena (the net's lock
held from the run to the map), when the device has the unit and the output fits it; else
the head's numpy argmax.
"""

from __future__ import annotations

from typing import Any

from ..errors import InvalidArgument
from ..tasks.heads import SegmentHead, head_for
from ..tasks.results import Result
from .images import as_rgb


def run_task_image(net: Any, image: Any, timeout: float = 10.0, ipu: bool = False
                   ) -> Result | list[Result]:
    """``net.run_image`` of a net with a task: one result per image (a list for a batch-N
    net given a list)."""
    head = getattr(net, "_task_head", None)
    if head is None:
        head = net._task_head = head_for(net)
    many = isinstance(image, (list, tuple))
    rgbs = [as_rgb(i) for i in (image if many else [image])]
    ctxs = [head.geometry(*r.shape[:2]) for r in rgbs]
    with net.lock:
        outs = net.run_image(rgbs if many else rgbs[0], timeout, ipu, raw=True)
        maps = None
        if isinstance(head, SegmentHead) and head.output_names[0] == net.outputs[0]["name"]:
            try:
                maps = net.class_map(head.output_names[0])   # the maximizer, if any
            except InvalidArgument:   # not a (N, K, H, W) output: numpy's argmax instead
                maps = None
    n = len(rgbs)
    results = []
    for i, ctx in enumerate(ctxs):
        one = {k: v[i:i + 1] if n > 1 else v for k, v in outs.items()}
        if maps is not None:
            results.append(head.finish(one, ctx, maps if maps.ndim == 2 else maps[i]))
        else:
            results.append(head.finish(one, ctx))
    return results if many else results[0]
