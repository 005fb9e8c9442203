"""FP16 bit patterns: the DV700 stores parameters (bias, slopes, pool scale) as raw binary16."""

from __future__ import annotations

import numpy as np


def fp16_bits(value: float) -> int:
    """IEEE binary16 bit pattern of ``value`` (round to nearest even)."""
    return int(np.array(value, np.float16).view(np.uint16))


def fp16_value(bits: int) -> float:
    """The float a binary16 bit pattern stands for."""
    return float(np.array(int(bits) & 0xFFFF, np.uint16).view(np.float16))


def fp24(f: float) -> int:
    """Encode a float as the IPU's FP24 (s1 e7 m16, bias 63) (§9.1).

    ``f`` is first rounded to float32 (the driver computes ``1.0f/width``).
    With ``exp8``/``mant23`` the float32 exponent/mantissa fields and
    ``e = exp8 - 64``:

    * ``exp8 == 0`` or ``e <= 0`` → 0 (sign dropped);
    * ``exp8 == 255`` or ``e >= 127`` → ``0x7F0000 | sign << 23`` (inf and NaN too);
    * else ``(e << 16) | sign << 23 | (mant23 >> 7)``, plus 1 if bit 6 of mant23
      is set (round half up; the carry may ripple into the exponent).

    Examples: ``fp24(1/3) == 0x3D5555``, ``fp24(1/256) == 0x370000``.
    """
    bits = int(np.array(f, dtype=np.float32).view(np.uint32))
    sign = bits >> 31
    exp8 = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    e = exp8 - 64
    if exp8 == 0 or e <= 0:
        return 0
    if exp8 == 255 or e >= 127:
        return 0x7F0000 | (sign << 23)
    v = (e << 16) | (sign << 23) | (mant >> 7)
    if mant & 0x40:
        v += 1
    return v
