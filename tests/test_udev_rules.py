"""udev/99-dmp-dv700.rules matches what discovery.py looks for (names imported, not copied).

A small evaluator applies the rules to fake sysfs trees: ``SUBSYSTEM``, ``KERNEL``,
``ACTION``, ``ATTR{}`` and ``ATTRS{}`` (walking up the parent directories, the
attribute value ending at the first NUL as udev reads it), with ``|`` alternatives
and shell globs; then ``GROUP``, ``MODE``, ``SYMLINK`` and ``RUN`` with the ``%s{}``,
``%n``, ``%k`` and ``%p`` substitutions.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dvsdk.driver.discovery import (
    DMA_HEAP_SUBSYSTEM,
    DMP_DV_SUBSYSTEM,
    DV700_COMPATIBLE,
    DV700_UIO_NAMES,
    DVSDK_GROUP,
    ION_KERNEL,
    ION_SUBSYSTEM,
    OF_COMPATIBLE_PARENT_ATTR,
    R5_WINDOW_NAMES,
    UDMABUF_SUBSYSTEMS,
    UDMABUF_SYMLINK_FORMAT,
    UDMABUF_SYNC_ATTRS,
    UIO_SUBSYSTEM,
    UIO_SYMLINK_FORMAT,
)

from .fakeboard import make_fake_board

RULES = Path(__file__).resolve().parent.parent / "udev" / "99-dmp-dv700.rules"
TOKEN = re.compile(r'\s*([A-Z]+)(?:\{([^}]*)\})?\s*(==|!=|\+=|:=|=)\s*"([^"]*)"\s*(,|$)')
MATCH_KEYS = {"SUBSYSTEM", "KERNEL", "ACTION", "ATTR", "ATTRS"}
ASSIGN_KEYS = {"GROUP", "MODE", "SYMLINK", "RUN"}


@dataclass
class Token:
    key: str
    attr: str | None
    op: str
    value: str


def parse_rules(text: str) -> list[list[Token]]:
    rules = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        assert not line.rstrip().endswith("\\"), f"line {lineno}: udev has no continuation"
        tokens, pos = [], 0
        while pos < len(line):
            m = TOKEN.match(line, pos)
            assert m, f"line {lineno}: cannot parse at {line[pos:]!r}"
            tokens.append(Token(m[1], m[2], m[3], m[4]))
            pos = m.end()
        for t in tokens:
            assert t.key in MATCH_KEYS | ASSIGN_KEYS, f"line {lineno}: unexpected key {t.key}"
            assert (t.op in ("==", "!=")) == (t.key in MATCH_KEYS), f"line {lineno}: {t}"
        rules.append(tokens)
    return rules


@pytest.fixture(scope="module")
def rules() -> list[list[Token]]:
    return parse_rules(RULES.read_text())


def _value(t: Token) -> list[str]:
    return t.value.split("|")


# -- the rules against the names discovery uses ---------------------------------------------------
def test_every_rule_targets_a_subsystem_discovery_reads(rules):
    known = {UIO_SUBSYSTEM, *UDMABUF_SUBSYSTEMS, DMP_DV_SUBSYSTEM, DMA_HEAP_SUBSYSTEM,
             ION_SUBSYSTEM}
    for rule in rules:
        subsystems = [t.value for t in rule if t.key == "SUBSYSTEM"]
        assert len(subsystems) == 1 and subsystems[0] in known, rule
        for t in rule:
            if t.key == "GROUP":
                assert t.value == DVSDK_GROUP
            if t.key == "MODE":
                assert t.value == "0660"


def test_uio_names_and_compatible_match_discovery(rules):
    name_sets = [set(_value(t)) for r in rules for t in r if t.key == "ATTR" and t.attr == "name"]
    r5 = {n for names in R5_WINDOW_NAMES.values() for n in names}
    assert set(DV700_UIO_NAMES) in name_sets
    assert all(s == set(DV700_UIO_NAMES) or s <= r5 for s in name_sets)
    assert set().union(*(s for s in name_sets if s <= r5)) == r5
    compat = [t for r in rules for t in r if t.key == "ATTRS"]
    assert [(t.attr, t.value) for t in compat] == [(OF_COMPATIBLE_PARENT_ATTR, DV700_COMPATIBLE)]


def test_every_udmabuf_class_gets_group_and_sync_files(rules):
    for subsystem in UDMABUF_SUBSYSTEMS:
        mine = [r for r in rules if any(t.key == "SUBSYSTEM" and t.value == subsystem for t in r)]
        assert any(t.key == "GROUP" for r in mine for t in r), subsystem
        runs = " ".join(t.value for r in mine for t in r if t.key == "RUN")
        for attr in UDMABUF_SYNC_ATTRS:
            assert f"/sys%p/{attr}" in runs, (subsystem, attr)


# -- the rules applied to fake boards --------------------------------------------------------------
@dataclass
class Result:
    group: str | None = None
    mode: str | None = None
    symlinks: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read().split(b"\0", 1)[0].decode().strip()
    except OSError:
        return None


def _matches(value: str | None, t: Token) -> bool:
    hit = value is not None and any(fnmatch.fnmatchcase(value, p) for p in _value(t))
    return hit if t.op == "==" else not hit


def _subst(text: str, sys_path: str, sysfs: str) -> str:
    name = os.path.basename(sys_path)
    number = re.search(r"(\d+)$", name)
    text = re.sub(r"%s\{([^}]*)\}", lambda m: _read(os.path.join(sys_path, m[1])) or "", text)
    text = text.replace("%n", number[1] if number else "").replace("%k", name)
    return text.replace("%p", "/" + os.path.relpath(sys_path, sysfs))


def apply_rules(rules, sysfs: Path, subsystem: str, class_link: Path) -> Result:
    sys_path = os.path.realpath(class_link)
    root = os.path.realpath(sysfs)
    res = Result()
    for rule in rules:
        ok = True
        for t in rule:
            if t.key == "SUBSYSTEM":
                ok &= _matches(subsystem, t)
            elif t.key == "KERNEL":
                ok &= _matches(os.path.basename(sys_path), t)
            elif t.key == "ACTION":
                ok &= _matches("add", t)
            elif t.key == "ATTR":
                ok &= _matches(_read(os.path.join(sys_path, t.attr)), t)
            elif t.key == "ATTRS":
                d, found = os.path.dirname(sys_path), None
                while d.startswith(root) and found is None:
                    found = _read(os.path.join(d, t.attr))
                    d = os.path.dirname(d)
                ok &= _matches(found, t)
        if not ok:
            continue
        for t in rule:
            if t.key == "GROUP":
                res.group = t.value
            elif t.key == "MODE":
                res.mode = t.value
            elif t.key == "SYMLINK":
                res.symlinks += _subst(t.value, sys_path, root).split()
            elif t.key == "RUN":
                res.runs.append(_subst(t.value, sys_path, root))
    return res


def _uio(board, n: int) -> Path:
    return board.sysfs / "class" / "uio" / f"uio{n}"


def test_per_unit_board_gets_group_mode_and_unit_links(rules, tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub")
    try:
        for n, unit in enumerate(("conv", "maximizer", "ipu")):
            res = apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, n))
            name = f"dv700-{unit}"
            assert (res.group, res.mode) == (DVSDK_GROUP, "0660")
            assert res.symlinks == [UIO_SYMLINK_FORMAT.format(name=name)] == [name]
        decoy = apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, 3))
        assert decoy == Result()  # the GPIO's UIO node is left alone
        dma = apply_rules(rules, b.sysfs, "u-dma-buf", b.sysfs / "class/u-dma-buf/udmabuf0")
        assert (dma.group, dma.mode) == (DVSDK_GROUP, "0660")
        assert dma.symlinks == [UDMABUF_SYMLINK_FORMAT.format(n=0)] == ["dv700-dma0"]
        sync = "/devices/virtual/u-dma-buf/udmabuf0/sync_for_cpu"
        assert any(sync in r and r.startswith("/bin/chgrp dvsdk") for r in dma.runs)
    finally:
        b.close()


def test_combined_and_compatible_only_nodes(rules, tmp_path):
    b = make_fake_board(tmp_path, mode="combined", start=False, core="stub",
                        udmabuf_class="udmabuf")
    try:
        res = apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, 0))
        assert res.symlinks == ["dv700"] and res.group == DVSDK_GROUP
        (_uio(b, 0) / "name").write_text("accel\n")  # named otherwise; compatible dmp,dv700
        res = apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, 0))
        assert res.symlinks == ["dv700-uio0"] and res.group == DVSDK_GROUP
        old = apply_rules(rules, b.sysfs, "udmabuf", b.sysfs / "class/udmabuf/udmabuf0")
        assert old.symlinks == ["dv700-dma0"] and old.group == DVSDK_GROUP
    finally:
        b.close()


def test_compatible_is_only_matched_as_the_first_string(rules, tmp_path):
    b = make_fake_board(tmp_path, start=False, core="stub")
    try:
        of = Path(os.path.realpath(_uio(b, 0) / "device")) / "of_node" / "compatible"
        of.write_bytes(b"generic-uio\0dmp,dv700\0")
        (_uio(b, 0) / "name").write_text("accel\n")
        assert apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, 0)) == Result()
    finally:
        b.close()


def test_r5_windows_and_dmps_module_get_group_and_links(rules, tmp_path):
    b = make_fake_board(tmp_path, start=False, kick="r5")
    try:
        for n, name in ((3, "ipi"), (4, "shm")):  # never /dev/shm, the POSIX shm mount
            res = apply_rules(rules, b.sysfs, UIO_SUBSYSTEM, _uio(b, n))
            assert (res.group, res.mode, res.symlinks) == (DVSDK_GROUP, "0660",
                                                           [f"dv700-{name}"])
        dv = b.sysfs / "devices" / "virtual" / "dmp_dv" / "dv_conv"
        dv.mkdir(parents=True)
        (b.sysfs / "class" / "dmp_dv").mkdir(parents=True)
        (b.sysfs / "class" / "dmp_dv" / "dv_conv").symlink_to(dv)
        res = apply_rules(rules, b.sysfs, DMP_DV_SUBSYSTEM, b.sysfs / "class/dmp_dv/dv_conv")
        assert (res.group, res.mode) == (DVSDK_GROUP, "0660")
        assert "/bin/chmod g+w /sys/devices/virtual/dmp_dv/dv_conv/conv_freq" in res.runs
        for heap, group in (("linux,cma", DVSDK_GROUP), ("system", None)):
            d = b.sysfs / "devices" / "virtual" / "dma_heap" / heap
            d.mkdir(parents=True)
            res = apply_rules(rules, b.sysfs, DMA_HEAP_SUBSYSTEM, d)
            assert res.group == group
        for name, group in ((ION_KERNEL, DVSDK_GROUP), ("fuse", None)):  # /dev/ion only
            d = b.sysfs / "devices" / "virtual" / "misc" / name
            d.mkdir(parents=True)
            res = apply_rules(rules, b.sysfs, ION_SUBSYSTEM, d)
            assert res.group == group and (group is None or res.mode == "0660")
    finally:
        b.close()
