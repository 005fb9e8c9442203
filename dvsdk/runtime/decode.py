"""Image files to 8-bit RGB, decoded as an image viewer shows them.

A network's preprocessing (``--mean``, ``--scale``, ``--std``) is recorded for 8-bit
pixels, 0..255, so every file becomes an RGB ``uint8`` array (H, W, 3):

* **orientation**: the EXIF orientation tag is applied (a phone stores a portrait photo
  rotated and tags it, e.g. orientation 6; viewers show it upright, and so does this);
* **16-bit** (PNG, TIFF, PGM/PPM with a large maxval): 0..65535 scaled to 0..255
  (``round(v / 257)``), not clipped at 255;
* **float** (TIFF, PFM): taken as [0, 1] and scaled by 255; a float image with values
  outside [0, 1] has no agreed scale and is refused, as is one holding NaN or infinity;
* **32-bit integer** pixels (no agreed range either) are refused;
* palette, CMYK, YCbCr, bilevel, LA/RGBA (composited on black) are converted.

Decoding is bounded by a pixel limit (:func:`max_pixels`; the environment variable
``DVSDK_MAX_IMAGE_PIXELS`` sets it): a larger image is an :class:`~dvsdk.errors.ImageError`
naming the limit, whether Pillow's own decompression-bomb check or ours finds it, and
Pillow's ``DecompressionBombWarning`` for an image under the limit is not shown.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from ..errors import ImageError

__all__ = ["DEFAULT_MAX_PIXELS", "ENV_MAX_PIXELS", "max_pixels", "open_image", "load_image",
           "to_rgb"]

#: Pillow's own refusal threshold (twice its warning threshold of 89,478,485 pixels): a
#: 12,000 x 12,000 image (144 Mpx) decodes, a 20,000 x 20,000 one (400 Mpx) does not.
DEFAULT_MAX_PIXELS = 2 * 89_478_485
ENV_MAX_PIXELS = "DVSDK_MAX_IMAGE_PIXELS"
_HINT = f"set {ENV_MAX_PIXELS}=N to allow larger images (3 bytes of memory a pixel)"


def max_pixels() -> int:
    """The largest image decoded (width x height): ``$DVSDK_MAX_IMAGE_PIXELS``, else
    :data:`DEFAULT_MAX_PIXELS`."""
    text = os.environ.get(ENV_MAX_PIXELS, "").strip()
    if not text:
        return DEFAULT_MAX_PIXELS
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ImageError("the pixel limit must be a whole number >= 1", field=ENV_MAX_PIXELS,
                         value=text, limit=">= 1")
    return value


def _too_large(path: Any, pixels: int | None, limit: int, size: str = "") -> ImageError:
    what = f"{size} = {pixels:,} pixels" if size else (
        f"{pixels:,} pixels" if pixels is not None else "more pixels than allowed")
    return ImageError(f"image too large: {what}", field="image", value=str(path),
                      limit=f"{limit:,} pixels", hint=_HINT)


def _open(path: Any, limit: int) -> Any:
    """Pillow's ``Image.open`` with its decompression-bomb check as a typed error."""
    from PIL import Image

    if Image.MAX_IMAGE_PIXELS is not None and limit > 2 * Image.MAX_IMAGE_PIXELS:
        Image.MAX_IMAGE_PIXELS = limit   # the user raised our limit: Pillow's must follow
    try:
        img = Image.open(path)
    except Image.DecompressionBombError as e:
        m = re.search(r"\((\d+) pixels\)", str(e))
        raise _too_large(path, int(m.group(1)) if m else None, limit) from None
    w, h = img.size
    if w * h > limit:
        img.close()
        raise _too_large(path, w * h, limit, f"{w}x{h}")
    return img


@contextmanager
def open_image(path: Any) -> Iterator[Any]:
    """``PIL.Image.open(path)`` within the pixel limit (ImageError beyond it), Pillow's
    warnings silenced while the image is used: the limit is ours, and its other warnings
    (a palette's transparency ...) concern Pillow's own API, not the user."""
    from PIL import Image

    limit = max_pixels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        warnings.filterwarnings("ignore", module=r"PIL(\.|$)")
        with _open(path, limit) as img:
            yield img


def load_image(path: str | os.PathLike) -> np.ndarray:
    """Decode an image file to RGB uint8 (H, W, 3) as the module docstring says."""
    from PIL import UnidentifiedImageError

    try:
        with open_image(path) as img:
            img.load()
            return to_rgb(img, str(path))
    except FileNotFoundError:
        raise ImageError("image file not found", field="image", value=str(path)) from None
    except IsADirectoryError:
        raise ImageError("is a directory, not an image", field="image",
                         value=str(path)) from None
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError, EOFError) as e:
        raise ImageError(f"cannot decode image: {e}", field="image", value=str(path)) from None


def _oriented(img: Any, path: str) -> Any:
    from PIL import ImageOps

    try:
        return ImageOps.exif_transpose(img)
    except Exception as e:  # noqa: BLE001 - a damaged EXIF block raises many kinds
        raise ImageError(f"cannot read the image's EXIF orientation: {e}", field="image",
                         value=path) from None


def _integer_maximum(img: Any) -> int | None:
    """The largest value of a mode-"I" image's format: 65535 for 16-bit files (PNG,
    PGM/PPM, 16-bit TIFF), None where the range is not known (32-bit integers)."""
    if img.format in ("PNG", "PPM"):
        return 65535
    if img.format == "TIFF":
        bits = getattr(img, "tag_v2", {}).get(258)
        bits = bits[0] if isinstance(bits, tuple) and bits else bits
        return 65535 if bits == 16 else None
    return None


def _from_16bit(a: np.ndarray) -> np.ndarray:
    return ((a.astype(np.uint32) + 128) // 257).astype(np.uint8)


def _from_float(a: np.ndarray, path: str) -> np.ndarray:
    if not np.all(np.isfinite(a)):
        n = int(np.count_nonzero(~np.isfinite(a)))
        raise ImageError(f"float image holds NaN or infinity ({n} of {a.size} pixels)",
                         field="image", value=path, limit="finite values in [0, 1]")
    lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
    if lo < 0.0 or hi > 1.0:
        raise ImageError(f"float image values span [{lo:.6g}, {hi:.6g}]: a float image is "
                         "read as [0, 1], and this one has no agreed scale", field="image",
                         value=path, limit="[0, 1]",
                         hint="save it as 8- or 16-bit, or scaled to [0, 1]")
    return np.rint(a * 255.0).astype(np.uint8)


def to_rgb(img: Any, path: str = "<image>") -> np.ndarray:
    """A decoded Pillow image as RGB uint8 (H, W, 3), oriented upright."""
    from PIL import Image

    img = _oriented(img, path)
    mode = img.mode
    if mode.startswith("I;16"):
        gray = _from_16bit(np.asarray(img))
    elif mode == "I":
        top = _integer_maximum(img)
        a = np.asarray(img)
        if top is None or (a.size and (int(a.min()) < 0 or int(a.max()) > top)):
            raise ImageError("32-bit integer pixels have no agreed range", field="image",
                             value=path, limit="8- or 16-bit integers, or float [0, 1]",
                             hint="save the image as 8- or 16-bit")
        gray = _from_16bit(a)
    elif mode == "F":
        gray = _from_float(np.asarray(img, np.float32), path)
    else:
        gray = None
    if gray is not None:
        return np.ascontiguousarray(np.repeat(gray[..., None], 3, axis=2))
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in img.info):
        img = img.convert("RGBA")
        bg = Image.new("RGBA", img.size, (0, 0, 0, 255))
        img = Image.alpha_composite(bg, img)
    try:
        return np.asarray(img.convert("RGB"), np.uint8)
    except ValueError as e:
        raise ImageError(f"image mode {mode} cannot be converted to RGB: {e}", field="image",
                         value=path) from None
