"""Which generation of DMP's kernel module ``dv://`` talks to, and the ABI it speaks there.

DMP's module changed its user-space ABI without changing the ioctl magic (reference §5.1,
§14; facts with commits in ``firmware_spec/kernel.yaml`` ``module_versions``):

* before 96130ca (2019-05-31) ``DMP_DV_IOC_WAIT`` is ``_IOW(0x82, 3, __u64)`` =
  0x40088203 and returns no exec time; from it on it takes ``struct dmp_dv_kwait``
  (0x40108203).  Every generation returns 0 for an ioctl number it does not know, so the
  wrong WAIT "succeeds" at once and outputs would be read before the hardware finished;
* input/output/eltwise offsets need 16-byte alignment before 107f6a2 (2019-07-23), 2 after;
* u8 input (``kconv_v1``) exists since 5d4d343 (2019-05-31);
* ``conv_freq`` is writable since the R5 module (fd4fbba), up to 350 MHz, 400 since 4a04f54.

The generation is read from ``/sys/module/dmp_dv/version`` (the module's MODULE_VERSION),
or declared with ``dv://?module=VERSION`` where sysfs does not show it.  One version string,
7.1.20190410, spans both WAITs; there dvsdk asks the module itself (:func:`probe_wait`).
A version dvsdk does not know, one it refuses, or none at all is an
:class:`~dvsdk.errors.UnsupportedDevice` naming it: dvsdk never guesses an ABI.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import DeviceError, UnsupportedDevice
from ..hw.spec import SPEC

KERNEL = SPEC.kernel
KNOWN: dict[str, dict] = {str(k): dict(v) for k, v in KERNEL["module_versions"].items()}
REFUSED: dict[str, str] = {str(k): str(v) for k, v in KERNEL["module_refused"].items()}
WAIT_V0 = SPEC.ioctl("DMP_DV_IOC_WAIT_V0")
WAIT = SPEC.ioctl("DMP_DV_IOC_WAIT")
KWAIT = SPEC.struct("kwait")
#: what ``cmd_exec_time`` holds before WAIT: a module that handled the call overwrites it
#: (now - start, µs, §10.5), one that did not know the number leaves it
UNTOUCHED = -(1 << 63)


@dataclass(frozen=True)
class ModuleAbi:
    """What one module generation takes (module docstring)."""

    version: str
    commit: str
    r5: bool
    wait: str                      # "v0" or "kwait"
    io_align: int                  # bytes, input / output / eltwise offsets
    conv_v1: bool | None           # None: this version string spans builds with and without
    conv_freq: tuple[int, int] | None   # writable range (MHz); None: read-only
    source: str                    # where the version came from

    @property
    def exec_time(self) -> bool:
        """Whether WAIT reports the exec time (``cmd_exec_time``)."""
        return self.wait == "kwait"


def read_version(sysfs: str) -> str | None:
    """``/sys/module/dmp_dv/version`` under the sysfs root ``sysfs``, or None."""
    try:
        with open(os.path.join(sysfs, KERNEL["module_sysfs"])) as f:
            return f.read().strip() or None
    except OSError:
        return None


def supported() -> list[str]:
    return sorted(KNOWN)


def identify(version: str | None, source: str) -> ModuleAbi:
    """The ABI of module ``version`` (from ``source``); :class:`UnsupportedDevice` for a
    missing, refused or unknown version.  ``wait`` may still be ``"probe"``."""
    if version is None:
        raise UnsupportedDevice(
            "cannot tell which version of DMP's kernel module is loaded", field="module",
            value=source, limit=supported(),
            hint="its ABI changed in 2019 (WAIT, alignment): declare the version the board's "
                 "module was built as, e.g. dv://?module=7.2.20190729 (modinfo dmp_dv)")
    if version in REFUSED:
        raise UnsupportedDevice(f"DMP's kernel module {version} is not supported: "
                                f"{REFUSED[version]}", field="module", value=version,
                                limit=supported(), hint="build DMP's module at 7.2.20190729")
    if version not in KNOWN:
        raise UnsupportedDevice(f"DMP's kernel module {version} is a version dvsdk does not "
                                "know", field="module", value=version, limit=supported(),
                                hint="its ABI cannot be assumed; if it is one of these "
                                     "builds renamed, declare it: dv://?module=VERSION")
    d = KNOWN[version]
    v1 = d["conv_v1"]
    freq = d.get("conv_freq")
    return ModuleAbi(version, str(d["commit"]), bool(d["r5"]), str(d["wait"]),
                     int(d["io_align"]), None if v1 == "maybe" else bool(v1),
                     (int(freq[0]), int(freq[1])) if freq else None, source)


def probe_wait(ioctl: Callable[[int, int, bytearray], int], fd: int) -> str:
    """Ask the module which WAIT it speaks: ``DMP_DV_IOC_WAIT`` (kwait) for id 0, which every
    module answers at once (``hw_id >= 0``).  A module that knows the number writes
    ``cmd_exec_time``; one from before 96130ca returns 0 and leaves it.  "kwait" or "v0"."""
    arg = bytearray(KWAIT.pack({"cmd_id": 0, "cmd_exec_time": UNTOUCHED}))
    try:
        ioctl(fd, WAIT, arg)
    except OSError as e:
        raise DeviceError(f"the WAIT probe failed: {os.strerror(e.errno or 0)}",
                          field="WAIT", value=e.errno) from None
    return "v0" if KWAIT.unpack(arg)["cmd_exec_time"] == UNTOUCHED else "kwait"
