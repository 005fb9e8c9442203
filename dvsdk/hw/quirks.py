"""Hardware-version quirks: what DV700 bitstreams before a date cannot do (§14).

DMP's libdmpdv gated three things on the hardware's date (``firmware_spec/registers.yaml``
``hw_quirks``, with the commits):

* ``conv_pool_tiles``: a run with both convolution and pooling over more than one tile,
  broken before hardware 20190729;
* ``dilated_stride``: a dilated convolution with a stride other than 1, before 20191223;
* ``eltwise_without_conv``: an element-wise add in a run whose conv is off and whose
  pooling is not average, before 20200710 (the conv module had to be active; libdmpdv
  added a dummy 1x1 average pool or depthwise conv).

A hardware version is ``HWMAJOR.HWMINOR.YYYYMMDD`` (the form of DMP's version strings,
§2.2) or the date alone; 0 means unknown, taken as the newest hardware.  The driver
refuses what the device's version cannot do (:func:`violations` from
:mod:`dvsdk.driver.validate`), the compiler keeps such work off the device or splits it,
and the simulator, given a version, refuses it as that hardware's controller would not run
it (``bad_config``).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import InvalidArgument
from .spec import SPEC

QUIRKS: dict[str, dict[str, Any]] = {k: dict(v) for k, v in SPEC.registers["hw_quirks"].items()}
_FORM = re.compile(r"^(?:(\d+)\.(\d+)\.)?(\d{8})$")


def parse_hw_version(text: object) -> int:
    """``"7.2.20190729"``, ``"20190729"`` or an int date -> 20190729; ``""``/0 -> 0."""
    if text in (None, "", 0, "0"):
        return 0
    m = _FORM.match(str(text).strip())
    date = int(m.group(3)) if m else 0
    if not m or not (19000101 <= date <= 29991231 and 1 <= date // 100 % 100 <= 12
                     and 1 <= date % 100 <= 31):
        raise InvalidArgument("a hardware version is HWMAJOR.HWMINOR.YYYYMMDD or YYYYMMDD",
                              field="hw_version", value=text, limit="e.g. 7.2.20190729")
    return date


def broken(quirk: str, hw_date: int) -> bool:
    """Whether hardware of ``hw_date`` has ``quirk`` (unknown dates have none)."""
    return bool(hw_date) and hw_date < int(QUIRKS[quirk]["fixed"])


def _get(run: Any, name: str) -> int:
    return int(run[name] if isinstance(run, dict) else getattr(run, name))


def run_quirk(run: Any, tiles: int, eltwise: bool) -> str | None:
    """The quirk a run (a ``ConvRun`` or a decoded run record) depends on, if any."""
    conv, pool = _get(run, "conv_enable"), _get(run, "pool_enable")
    dil, stride = _get(run, "conv_dilation"), _get(run, "conv_stride")
    if conv and pool and tiles > 1:
        return "conv_pool_tiles"
    if conv and max(dil & 0xFF, dil >> 8) > 1 and max(stride & 0xFF, stride >> 8) > 1:
        return "dilated_stride"
    if eltwise and not conv and pool not in (0, 2):
        return "eltwise_without_conv"
    return None


def violations(runs: list, tiles: list[int], eltwise: bool,
               hw_date: int) -> list[tuple[int, str]]:
    """``(run index, quirk)`` for each run that hardware of ``hw_date`` cannot execute."""
    out = []
    for i, run in enumerate(runs):
        q = run_quirk(run, tiles[i] if i < len(tiles) else 1, eltwise and i == 0)
        if q is not None and broken(q, hw_date):
            out.append((i, q))
    return out


def describe(quirk: str) -> str:
    d = QUIRKS[quirk]
    return f"{d['doc']} needs hardware {d['fixed']} or later"
