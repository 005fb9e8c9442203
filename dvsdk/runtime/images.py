"""Images in, tensors out: Pillow decoding and the preprocessing a net.bin records.

PNG, JPEG, BMP, TIFF (anything Pillow reads), decoded to 8-bit RGB as a viewer shows
them (:mod:`.decode`: EXIF orientation, 16-bit and float pixels scaled, a pixel limit).
:func:`preprocess` resizes (stretch, letterbox, or crop: resize then centre crop), orders channels,
subtracts the mean, multiplies by the scale and divides by the std, and returns
the model's float32 input in its own layout (NCHW, or NHWC for Keras).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..errors import ImageError
from .decode import load_image

__all__ = ["IMAGE_SUFFIXES", "load_image", "as_rgb", "resize", "preprocess", "crop_geometry"]

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm",
                  ".pgm")


def as_rgb(image: Any) -> np.ndarray:
    """A path (decoded by :func:`~.decode.load_image`), or an (H, W), (H, W, 1|3|4) array,
    as RGB uint8 (H, W, 3).  Arrays: uint8 as they are, uint16 scaled from 0..65535, float
    in [0, 1] scaled by 255 (else taken as 0..255), other integers clipped to 0..255; NaN,
    infinity and complex values are refused."""
    if isinstance(image, (str, os.PathLike)):
        return load_image(image)
    arr = np.asarray(image)
    if arr.ndim == 2:
        arr = arr[..., None]
    if arr.ndim != 3 or arr.shape[2] not in (1, 3, 4) or min(arr.shape[:2]) < 1:
        raise ImageError("image array must be (H, W) or (H, W, 1|3|4)", field="image",
                         value=arr.shape)
    if arr.dtype.kind not in "buif":
        raise ImageError("image array must hold real numbers", field="image",
                         value=str(arr.dtype), limit="bool, integer or float")
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ImageError("image array holds NaN or infinity", field="image",
                         value=int(np.count_nonzero(~np.isfinite(arr))), limit="finite values")
    if arr.dtype == np.uint16:
        arr = ((arr.astype(np.uint32) + 128) // 257).astype(np.uint8)
    elif arr.dtype != np.uint8:
        if arr.dtype.kind == "f" and arr.size and arr.max() <= 1.0:
            arr = arr * 255.0
        arr = np.clip(arr, 0, 255).astype(np.uint8)
    if arr.shape[2] == 1:
        arr = np.repeat(arr, 3, axis=2)
    return np.ascontiguousarray(arr[..., :3])


#: ``crop``: the share of the resized image's tighter side kept (ImageNet: 224 of 256)
CROP_RATIO = 0.875


def crop_geometry(h: int, w: int, height: int, width: int, ratio: float = CROP_RATIO
                  ) -> tuple[int, int, int, int]:
    """(nh, nw, top, left) of ``crop``: the image scaled by s = max(height / h, width / w) /
    ratio to (nh, nw) = (round(h·s), round(w·s)) (a square input: the shorter side becomes
    height / ratio, 256 for 224), then the centred (height, width) window, top =
    round((nh − height) / 2) and left likewise (Python's round, as torchvision's
    CenterCrop)."""
    if not 0 < ratio <= 1:
        raise ImageError("crop ratio out of range", field="crop_ratio", value=ratio,
                         limit="(0, 1]")
    s = max(height / h, width / w) / ratio
    nh, nw = max(height, round(h * s)), max(width, round(w * s))
    return nh, nw, int(round((nh - height) / 2)), int(round((nw - width) / 2))


def resize(rgb: np.ndarray, height: int, width: int, mode: str = "stretch",
           crop_ratio: float = CROP_RATIO) -> np.ndarray:
    """Bilinear resize to (height, width); ``letterbox`` keeps the aspect ratio, pads with 0;
    ``crop`` is ImageNet's resize-then-centre-crop (:func:`crop_geometry`)."""
    from PIL import Image

    if mode == "crop":
        nh, nw, top, left = crop_geometry(*rgb.shape[:2], height, width, crop_ratio)
        img = Image.fromarray(rgb).resize((nw, nh), Image.BILINEAR)
        return np.asarray(img.crop((left, top, left + width, top + height)), np.uint8)
    if rgb.shape[:2] == (height, width):
        return rgb
    img = Image.fromarray(rgb)
    if mode == "stretch":
        return np.asarray(img.resize((width, height), Image.BILINEAR), np.uint8)
    if mode != "letterbox":
        raise ImageError("unknown resize mode", field="resize", value=mode,
                         limit=("stretch", "letterbox", "crop"))
    h, w = rgb.shape[:2]
    s = min(height / h, width / w)
    nh, nw = max(1, round(h * s)), max(1, round(w * s))
    out = np.zeros((height, width, 3), np.uint8)
    top, left = (height - nh) // 2, (width - nw) // 2
    out[top : top + nh, left : left + nw] = np.asarray(img.resize((nw, nh), Image.BILINEAR))
    return out


def preprocess(image: Any, shape: tuple[int, ...], spec: dict[str, Any],
               layout: str = "NCHW") -> np.ndarray:
    """An image (path or array) → the model's float32 input of ``shape`` in its ``layout``
    (NCHW, or NHWC for Keras models)."""
    nhwc = layout == "NHWC"
    if len(shape) != 4 or shape[3 if nhwc else 1] not in (1, 3):
        raise ImageError("this network's input is not an image", field="input shape",
                         value=tuple(shape), limit="(N, H, W, 1|3)" if nhwc else "(N, 1|3, H, W)")
    if nhwc:
        _, h, w, c = shape
    else:
        _, c, h, w = shape
    rgb = resize(as_rgb(image), h, w, spec.get("resize", "stretch"),
                 spec.get("crop_ratio") or CROP_RATIO)
    x = rgb.astype(np.float32)
    if spec.get("channel_order", "RGB") == "BGR":
        x = x[..., ::-1]
    if c == 1:  # (three float32 products added in order: no BLAS, the same bits anywhere)
        x = (x[..., :1] * np.float32(0.299) + x[..., 1:2] * np.float32(0.587)
             + x[..., 2:3] * np.float32(0.114))
    mean = np.asarray(spec.get("mean") or [0.0], np.float32)[:c]
    x = (x - mean) * float(spec.get("scale", 1.0) or 1.0)
    std = spec.get("std")
    if std:
        x = x / np.asarray(std, np.float32)[:c]
    return np.ascontiguousarray(x[None] if nhwc else x.transpose(2, 0, 1)[None], np.float32)
