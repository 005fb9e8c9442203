"""The builds of DMP's kernel module the fake module (``tests/fakedv.py``) can be, by the
commit of dv-kernel-driver each models; checked against the version strings of DMP's
facts (``tests/data/dmp_abi_facts.json`` ``module_versions``)."""

from __future__ import annotations

from dataclasses import dataclass

from .abi_facts import FACTS


@dataclass(frozen=True)
class Build:
    """One build of DMP's module (facts ``module_versions``; commit of dv-kernel-driver)."""

    version: str
    r5: bool = True
    wait: str = "kwait"          # "u64": _IOW(0x82, 3, __u64), before 96130ca
    io_mask: int = 1             # input/output/eltwise offset mask (15 before 107f6a2)
    conv_v1: bool = True
    conv_freq: tuple[int, int] | None = (30, 400)


#: the generations the fake can be, by the commit it models
BUILDS = {
    "51be037": Build("7.0.20181214", r5=False, wait="u64", io_mask=15, conv_v1=False,
                     conv_freq=None),
    "2994b64": Build("7.0.20190215", r5=False, wait="u64", io_mask=15, conv_v1=False,
                     conv_freq=None),
    "fd4fbba": Build("7.0.20190328", wait="u64", io_mask=15, conv_v1=False,
                     conv_freq=(30, 350)),
    "82bc07f": Build("7.1.20190410", wait="u64", io_mask=15, conv_v1=False,
                     conv_freq=(30, 350)),
    "5d4d343": Build("7.1.20190410", io_mask=15, conv_freq=(30, 350)),
    "86b271f": Build("7.2.20190621", io_mask=15, conv_freq=(30, 350)),
    "107f6a2": Build("7.2.20190716", conv_freq=(30, 350)),
    "2defa8b": Build("7.2.20190729"),
    "46c438e": Build("7.40.20200824"),
}
GENERATIONS = {"2018-12": "51be037", "2019-02": "2994b64", "2019-03": "fd4fbba",
               "2019-04": "82bc07f", "2019-05": "5d4d343", "2019-06": "86b271f",
               "2019-07": "107f6a2", "7.2.x": "2defa8b", "dv740": "46c438e"}
for _commit, _b in BUILDS.items():  # the table agrees with the facts' version strings
    _known = FACTS["module_versions"][_b.version]
    assert _commit in [_known["commit"], *_known.get("also_at", [])], _commit
