"""Where an input pixel came from: the resize a net.bin records, and its inverse.

:func:`dvsdk.runtime.images.resize` maps an (h, w) image onto the network's (H, W) input:

* ``stretch``: x_in = x · W / w, y_in = y · H / h;
* ``letterbox``: s = min(H / h, W / w), the image scaled to (nh, nw) = (round(h·s),
  round(w·s)) and placed at (top, left) = ((H − nh) // 2, (W − nw) // 2), zeros around;
  x_in = x · nw / w + left, y_in = y · nh / h + top;
* ``crop`` (:func:`crop_geometry`, ImageNet's resize then centre crop): the same with the
  scaled image larger than the input, at a negative (top, left); pixels cropped away take
  the nearest class of the map.

:class:`Geometry` holds those numbers; :meth:`Geometry.boxes_to_original` inverts them
for boxes (clipped to the image), :meth:`Geometry.map_to_original` for a per-pixel map
(the padding cropped, then nearest-neighbour back to (h, w)).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ImageError

#: ``crop``: the share of the resized image's tighter side kept (ImageNet: 224 of 256)
CROP_RATIO = 0.875


def crop_geometry(h: int, w: int, height: int, width: int, ratio: float = CROP_RATIO
                  ) -> tuple[int, int, int, int]:
    """(nh, nw, top, left) of ``crop``: the image scaled so that the side that binds (the
    one with the larger input/image ratio; the shorter side for a square input) becomes
    round(side / ratio) (256 for 224 at 0.875) and the other int(that · other / side),
    truncated as torchvision's Resize(int) computes its longer side; then the centred
    (height, width) window, top = round((nh − height) / 2) and left likewise (Python's
    round, as torchvision's CenterCrop)."""
    if not 0 < ratio <= 1:
        raise ImageError("crop ratio out of range", field="crop_ratio", value=ratio,
                         limit="(0, 1]")
    if height / h >= width / w:
        nh = max(height, round(height / ratio))
        nw = max(width, int(nh * w / h))
    else:
        nw = max(width, round(width / ratio))
        nh = max(height, int(nw * h / w))
    return nh, nw, int(round((nh - height) / 2)), int(round((nw - width) / 2))


@dataclass(frozen=True)
class Geometry:
    """The input rectangle an (height, width) image occupies in the network's input."""

    height: int          # the original image
    width: int
    in_height: int       # the network input
    in_width: int
    top: int = 0         # where the scaled image starts in the input
    left: int = 0
    scaled_height: int = 0   # its size there (the input's for stretch)
    scaled_width: int = 0

    @classmethod
    def of(cls, height: int, width: int, in_height: int, in_width: int,
           mode: str = "stretch", crop_ratio: float | None = None) -> Geometry:
        """The geometry :func:`dvsdk.runtime.images.resize` applies (module docstring)."""
        for field, value in (("height", height), ("width", width), ("input height", in_height),
                             ("input width", in_width)):
            if not isinstance(value, (int, np.integer)) or value < 1:
                raise ImageError("an image side must be a positive whole number of pixels",
                                 field=field, value=value, limit=">= 1")
        if mode == "crop":
            nh, nw, top, left = crop_geometry(height, width, in_height, in_width,
                                              crop_ratio or CROP_RATIO)
            return cls(height, width, in_height, in_width, -top, -left, nh, nw)
        if mode != "letterbox" or (height, width) == (in_height, in_width):
            return cls(height, width, in_height, in_width, 0, 0, in_height, in_width)
        s = min(in_height / height, in_width / width)
        nh, nw = max(1, round(height * s)), max(1, round(width * s))
        return cls(height, width, in_height, in_width, (in_height - nh) // 2,
                   (in_width - nw) // 2, nh, nw)

    def boxes_to_original(self, boxes: np.ndarray) -> np.ndarray:
        """(n, 4) x0, y0, x1, y1 in input pixels → the original image's, clipped to it."""
        b = np.asarray(boxes, np.float64).reshape(-1, 4)
        sx, sy = self.scaled_width / self.width, self.scaled_height / self.height
        out = (b - np.array([self.left, self.top, self.left, self.top])) \
            / np.array([sx, sy, sx, sy])
        out = np.clip(out, 0.0, np.array([self.width, self.height, self.width, self.height]))
        return out.astype(np.float32)

    def map_to_original(self, values: np.ndarray) -> np.ndarray:
        """An (in_height, in_width) per-pixel map → (height, width), nearest neighbour on
        the scaled image's pixel centres (the letterbox padding dropped)."""
        m = np.asarray(values)
        ys = self.top + np.minimum(
            ((np.arange(self.height) + 0.5) * self.scaled_height / self.height).astype(np.int64),
            self.scaled_height - 1)
        xs = self.left + np.minimum(
            ((np.arange(self.width) + 0.5) * self.scaled_width / self.width).astype(np.int64),
            self.scaled_width - 1)
        ys = np.clip(ys, 0, self.in_height - 1) * m.shape[0] // self.in_height
        xs = np.clip(xs, 0, self.in_width - 1) * m.shape[1] // self.in_width
        return m[ys[:, None], xs[None, :]]
