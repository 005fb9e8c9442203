"""Annotating an RGB image with Pillow's ImageDraw: boxes with label and score, a
colour-blended class map, a line of text.  Every function returns a new uint8 (H, W, 3)
array; the input is never changed."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: class colours (index mod 16), the same as ``dvsdk-run --save-mask``
PALETTE = np.array([[0, 0, 0], [230, 25, 75], [60, 180, 75], [255, 225, 25], [0, 130, 200],
                    [245, 130, 48], [145, 30, 180], [70, 240, 240], [240, 50, 230],
                    [210, 245, 60], [250, 190, 212], [0, 128, 128], [220, 190, 255],
                    [170, 110, 40], [255, 250, 200], [128, 0, 0]], np.uint8)


def colour(k: int) -> tuple[int, int, int]:
    """The colour of class ``k`` (class 0 of a detector is not black: boxes start at 1)."""
    return tuple(int(v) for v in PALETTE[1 + int(k) % (len(PALETTE) - 1)])


def _image(rgb: np.ndarray):
    from PIL import Image

    from ..runtime.images import as_rgb

    return Image.fromarray(as_rgb(rgb).copy())


def boxes(rgb: np.ndarray, xyxy: np.ndarray, classes: Sequence[int],
          captions: Sequence[str]) -> np.ndarray:
    """Rectangles (2 px, the class colour) with a caption on a filled strip above."""
    from PIL import ImageDraw

    img = _image(rgb)
    d = ImageDraw.Draw(img)
    for (x0, y0, x1, y1), k, text in zip(np.asarray(xyxy, np.float64).reshape(-1, 4),
                                         classes, captions):
        c = colour(k)
        d.rectangle([x0, y0, max(x0, x1), max(y0, y1)], outline=c, width=2)
        tx0, ty0, tx1, ty1 = d.textbbox((x0, y0), text)
        h = ty1 - ty0 + 2
        top = y0 - h if y0 - h >= 0 else y0
        d.rectangle([x0, top, x0 + (tx1 - tx0) + 4, top + h], fill=c)
        d.text((x0 + 2, top), text, fill=(0, 0, 0) if sum(c) > 380 else (255, 255, 255))
    return np.asarray(img, np.uint8)


def blend(rgb: np.ndarray, class_map: np.ndarray, alpha: float = 0.5) -> np.ndarray:
    """The image with each pixel mixed ``alpha`` with its class colour (class 0, the
    background of most segmenters, left as it is)."""
    from ..runtime.images import as_rgb

    base = as_rgb(rgb).astype(np.float32)
    cm = np.asarray(class_map, np.int64)
    col = PALETTE[cm % len(PALETTE)].astype(np.float32)
    mix = np.where((cm != 0)[..., None], base * (1 - alpha) + col * alpha, base)
    return np.clip(np.rint(mix), 0, 255).astype(np.uint8)


def text(rgb: np.ndarray, lines: Sequence[str]) -> np.ndarray:
    """Lines of text at the top left, on a dark strip."""
    from PIL import ImageDraw

    img = _image(rgb)
    d = ImageDraw.Draw(img)
    y = 2
    for line in lines:
        x0, y0, x1, y1 = d.textbbox((4, y), line)
        d.rectangle([2, y - 1, x1 + 2, y1 + 1], fill=(0, 0, 0))
        d.text((4, y), line, fill=(255, 255, 255))
        y = y1 + 3
    return np.asarray(img, np.uint8)
