"""net.bin robustness (firmware_spec/netbin.md): roundtrip, and every rejection a reader owes.

A net.bin that is cut short, bit-flipped, foreign, from the future or for other hardware
must fail at load time with a :class:`NetFileError` that names what is wrong (the section,
the version, the hardware requirement), never with a crash deep in the runtime or, worse, a
run on garbage.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.build import compile
from dvsdk.driver.commands import BufferRef, ConvCommand
from dvsdk.errors import NetFileError
from dvsdk.netfile import (
    FORMAT_VERSION,
    HEADER,
    LIMITS,
    MAGIC,
    SECTION,
    NetFile,
    decode,
    encode,
    json_depth,
    read,
    write,
)
from dvsdk.runtime.net import Net

from . import onnx_models as M

SIM = "sim://"
TAGS = ("META", "CMDS", "WGTS", "CNST", "GOLD")


@pytest.fixture(scope="module")
def net() -> NetFile:
    """Every section non-empty: hardware commands, weights, a CPU Pad whose pads input is a
    constant (CNST), and the golden pair (GOLD)."""
    n = compile(M.pad_conv())
    assert all((n.commands, n.weights, n.constants, n.golden))
    return n


@pytest.fixture(scope="module")
def data(net: NetFile) -> bytes:
    return encode(net)


def sections(data: bytes) -> dict[str, tuple[int, int]]:
    """tag -> (offset, size) from the section table."""
    hdr = HEADER.unpack(data)
    out = {}
    for i in range(hdr["section_count"]):
        e = SECTION.unpack(data, HEADER.size + i * SECTION.size)
        out[bytes(e["tag"]).rstrip(b"\0").decode()] = (e["offset"], e["size"])
    return out


def container(parts: list[tuple[str, bytes]], version: int = FORMAT_VERSION,
              magic: bytes = MAGIC) -> bytes:
    """A net.bin built by hand from (tag, body) pairs, CRCs valid (to test what lies
    beyond the CRC checks: a missing META, META that is not JSON ...)."""
    import zlib

    table_end = HEADER.size + SECTION.size * len(parts)
    pos = -(-table_end // 64) * 64
    entries, bodies = [], []
    for tag, body in parts:
        entries.append({"tag": list(tag.encode().ljust(8, b"\0")), "offset": pos,
                        "size": len(body), "crc32": zlib.crc32(body) & 0xFFFFFFFF})
        bodies.append((pos, body))
        pos = -(-(pos + len(body)) // 64) * 64
    table = b"".join(SECTION.pack(e) for e in entries)
    header = {"magic": list(magic), "format_version": version, "header_size": HEADER.size,
              "section_count": len(parts), "file_size": pos,
              "compiler_version": list(b"test".ljust(16, b"\0"))}
    crc = zlib.crc32(HEADER.pack(header) + table) & 0xFFFFFFFF
    out = bytearray(pos)
    out[: HEADER.size] = HEADER.pack({**header, "header_crc32": crc})
    out[HEADER.size : table_end] = table
    for p, body in bodies:
        out[p : p + len(body)] = body
    return bytes(out)


def parts_of(net: NetFile, **replace: bytes) -> list[tuple[str, bytes]]:
    meta = json.dumps(net.meta).encode()
    base = {"META": meta, "CMDS": net.commands, "WGTS": net.weights, "CNST": net.constants,
            "GOLD": net.golden}
    base.update(replace)
    return [(t, b) for t, b in base.items() if b is not None]


def with_meta(net: NetFile, **changes) -> NetFile:
    meta = json.loads(json.dumps(net.meta))
    for path, value in changes.items():
        node = meta
        keys = path.split("__")
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return dataclasses.replace(net, meta=meta)


# --------------------------------------------------------------------------- roundtrip
def test_roundtrip_bytes(net: NetFile, data: bytes) -> None:
    back = decode(data)
    assert back.meta == json.loads(json.dumps(net.meta))
    assert (back.commands, back.weights, back.constants, back.golden) == (
        net.commands, net.weights, net.constants, net.golden)
    assert back.format_version == FORMAT_VERSION
    assert back.compiler_version.startswith("dvsdk")
    assert encode(back) == data                      # deterministic
    assert len(data) % 64 == 0
    for tag, (off, _) in sections(data).items():
        assert off % 64 == 0, tag


def test_roundtrip_file_runs_the_same(net: NetFile, tmp_path: Path) -> None:
    path = tmp_path / "net.bin"
    n = write(net, path)
    assert n == path.stat().st_size
    assert read(path).meta == decode(encode(net)).meta
    feeds = M.make_feeds(M.pad_conv(), seed=2)
    with Net(net, SIM) as a, Net(path, SIM) as b:
        ya, yb = a.run(feeds), b.run(feeds)
        assert b.selftest()["passed"] is True
    for k in ya:
        np.testing.assert_array_equal(ya[k], yb[k])


def test_unknown_sections_are_kept(net: NetFile) -> None:
    extra = dataclasses.replace(net, extra={"NOTE": b"hello", "ZZ": b"\x00" * 100})
    back = decode(encode(extra))
    assert back.extra == {"NOTE": b"hello", "ZZ": b"\x00" * 100}
    with Net(back, SIM) as n:
        assert n.selftest()["passed"] is True


# --------------------------------------------------------------------------- truncation
def test_truncated_everywhere(data: bytes) -> None:
    secs = sections(data)
    cuts = {0, 1, 8, HEADER.size - 1, HEADER.size, HEADER.size + SECTION.size,
            len(data) - 1, len(data) - 64}
    for off, size in secs.values():
        cuts |= {off, off + 1, off + size // 2, off + size - 1}
    cuts |= set(range(0, len(data), max(1, len(data) // 40)))
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        with pytest.raises(NetFileError, match="truncated") as ei:
            decode(data[:cut])
        assert ei.value.field in ("size", "file_size"), cut


def test_padded_file(data: bytes) -> None:
    with pytest.raises(NetFileError, match="padded"):
        decode(data + b"\0" * 64)


def test_truncated_file_on_disk(data: bytes, tmp_path: Path) -> None:
    path = tmp_path / "cut.bin"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(NetFileError, match="cut.bin is truncated"):
        Net(path, SIM)
    with pytest.raises(NetFileError, match="cannot read") as ei:
        read(tmp_path / "missing.bin")
    assert ei.value.field == "path"


# --------------------------------------------------------------------------- corruption
@pytest.mark.parametrize("tag", TAGS)
@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_flipped_byte_names_the_section(data: bytes, tag: str, where: str) -> None:
    off, size = sections(data)[tag]
    assert size > 0
    pos = {"first": off, "middle": off + size // 2, "last": off + size - 1}[where]
    bad = bytearray(data)
    bad[pos] ^= 0x10
    with pytest.raises(NetFileError) as ei:
        decode(bytes(bad))
    assert ei.value.field == tag
    assert f"section {tag} is corrupt" in str(ei.value)


@pytest.mark.parametrize("pos", [9, 12, 30, 50, HEADER.size + 2, HEADER.size + 20])
def test_flipped_header_or_table_byte(data: bytes, pos: int) -> None:
    """compiler_version, flags, reserved and the section table are under the header CRC
    (bytes 8..23 would fail earlier, as a version or size mismatch)."""
    bad = bytearray(data)
    bad[pos] ^= 0x01
    with pytest.raises(NetFileError) as ei:
        decode(bytes(bad))
    assert ei.value.field in ("header_crc32", "format_version", "file_size", "section_count")


def test_padding_between_sections_must_be_zero(data: bytes) -> None:
    """Bytes between sections belong to no CRC, so the reader requires them zero: a flip
    there is refused (it was accepted before issue 25), as is a gap of a whole 64-byte
    block or more, or bytes after the last section."""
    off, size = sections(data)["META"]
    gap = off + size
    if gap % 64 == 0:
        pytest.skip("META fills its last 64-byte block")
    bad = bytearray(data)
    bad[gap] ^= 0xFF
    with pytest.raises(NetFileError, match="non-zero padding before section") as ei:
        decode(bytes(bad))
    assert ei.value.field == "padding" and ei.value.value == gap


def _retable(data: bytes, edit) -> bytes:
    """``data`` with its header and section table changed by ``edit(header, entries)``
    (dicts, edited in place), the header CRC recomputed: what lies beyond the CRC."""
    import zlib

    hdr = HEADER.unpack(data)
    entries = [SECTION.unpack(data, HEADER.size + i * SECTION.size)
               for i in range(hdr["section_count"])]
    edit(hdr, entries)
    table = b"".join(SECTION.pack(e) for e in entries)
    crc = zlib.crc32(HEADER.pack({**hdr, "header_crc32": 0}) + table) & 0xFFFFFFFF
    head = HEADER.pack({**hdr, "header_crc32": crc}) + table
    out = bytearray(data)
    out[: len(head)] = head
    return bytes(out)


@pytest.mark.parametrize("field, value, message", [
    ("header_size", 128, "header size"),
    ("flags", 1, "header has flags"),
    ("rsvd", [0, 0, 7, 0], "reserved fields"),
])
def test_header_fields_fixed_by_version_1_are_checked(data: bytes, field, value, message):
    """header_size, flags and the reserved words were read and ignored before issue 25."""
    def edit(hdr, entries):
        hdr[field] = value

    with pytest.raises(NetFileError, match=message) as ei:
        decode(_retable(data, edit))
    assert ei.value.field == field


def test_section_flags_are_checked(data: bytes) -> None:
    def edit(hdr, entries):
        entries[1]["flags"] = 2

    with pytest.raises(NetFileError, match="section CMDS has flags") as ei:
        decode(_retable(data, edit))
    assert ei.value.field == "CMDS.flags" and ei.value.value == 2


def test_overlapping_sections_are_refused(data: bytes) -> None:
    """A sixth table entry (an unknown tag, which readers keep and otherwise ignore) over
    META's first 64 bytes, its CRC made to match: accepted before issue 25."""
    import zlib

    meta_off, _ = sections(data)["META"]
    assert HEADER.size + 6 * SECTION.size <= meta_off   # room for the entry

    def edit(hdr, entries):
        hdr["section_count"] += 1
        entries.append({"tag": list(b"XTRA\0\0\0\0"), "offset": meta_off, "size": 64,
                        "crc32": zlib.crc32(data[meta_off : meta_off + 64]) & 0xFFFFFFFF,
                        "flags": 0})

    with pytest.raises(NetFileError, match="overlaps") as ei:
        decode(_retable(data, edit))
    assert ei.value.field in ("META", "XTRA")


def test_a_gap_or_tail_no_section_holds_is_refused(data: bytes) -> None:
    """Room for bytes no CRC covers: a whole zero block between sections, or after the
    last one."""
    def grow(hdr, entries):
        hdr["file_size"] += 64

    with pytest.raises(NetFileError, match="after its last section"):
        decode(_retable(data + bytes(64), grow))
    last = max(range(len(TAGS)), key=lambda i: sections(data)[TAGS[i]][0])
    off = sections(data)[TAGS[last]][0]

    def shift(hdr, entries):
        hdr["file_size"] += 64
        entries[last]["offset"] += 64

    moved = data[:off] + bytes(64) + data[off:]
    with pytest.raises(NetFileError, match="bytes no section holds") as ei:
        decode(_retable(moved, shift))
    assert ei.value.field == "padding"


def test_bad_magic(data: bytes) -> None:
    with pytest.raises(NetFileError, match="not a dvsdk net.bin") as ei:
        decode(b"ONNXPROT" + data[8:])
    assert ei.value.field == "magic"
    with pytest.raises(NetFileError, match="not a dvsdk net.bin"):
        decode(b"\x08\x07" * 64)    # e.g. an .onnx file passed by mistake


@pytest.mark.parametrize("version", [FORMAT_VERSION + 1, 0xFFFF, 0])
def test_unknown_format_version(net: NetFile, version: int) -> None:
    data = encode(dataclasses.replace(net, format_version=version))
    with pytest.raises(NetFileError) as ei:
        decode(data)
    e = ei.value
    assert e.field == "format_version" and e.value == version
    assert f"format version {version}" in str(e) and str(FORMAT_VERSION) in str(e)
    assert "upgrade dvsdk or recompile" in str(e)


def test_section_past_end_and_corrupt_table(net: NetFile) -> None:
    good = container(parts_of(net))
    hdr = HEADER.unpack(good)
    # a section table entry whose size runs past the end (header CRC recomputed)
    import zlib

    entry = SECTION.unpack(good, HEADER.size + SECTION.size)      # CMDS
    entry["size"] = len(good)
    table = bytearray(good[HEADER.size : HEADER.size + SECTION.size * hdr["section_count"]])
    table[SECTION.size : 2 * SECTION.size] = SECTION.pack(entry)
    fields = {k: v for k, v in hdr.items() if k != "header_crc32"}
    crc = zlib.crc32(HEADER.pack(fields) + bytes(table)) & 0xFFFFFFFF
    bad = HEADER.pack({**fields, "header_crc32": crc}) + bytes(table)
    bad += good[len(bad):]
    with pytest.raises(NetFileError, match="section CMDS runs past the end") as ei:
        decode(bad)
    assert ei.value.field == "CMDS"
    # an absurd section count
    hdr2 = {**hdr, "section_count": 100000}
    bad2 = HEADER.pack(hdr2) + good[HEADER.size:]
    with pytest.raises(NetFileError, match="section table is corrupt"):
        decode(bad2)


def test_missing_meta(net: NetFile) -> None:
    data = container([p for p in parts_of(net) if p[0] != "META"])
    with pytest.raises(NetFileError, match="no META section") as ei:
        decode(data)
    assert ei.value.field == "META"


@pytest.mark.parametrize("meta", [b"{not json", b"\xff\xfe\x00", b""])
def test_meta_not_json(net: NetFile, meta: bytes) -> None:
    with pytest.raises(NetFileError, match="metadata is not valid JSON"):
        decode(container(parts_of(net, META=meta)))


@pytest.mark.parametrize("meta", [b"[]", b'"net"', b"null", b"{}"])
def test_meta_wrong_shape(net: NetFile, meta: bytes) -> None:
    """Regression: JSON that is not an object (or lacks what every reader needs) loaded and
    then failed with AttributeError / KeyError inside Net()."""
    with pytest.raises(NetFileError, match="metadata (is not a JSON object|lacks)") as ei:
        decode(container(parts_of(net, META=meta)))
    assert ei.value.field == "META"


@pytest.mark.parametrize("key", ["inputs", "outputs", "tensors", "program", "arena"])
def test_meta_missing_key(net: NetFile, key: str) -> None:
    meta = json.loads(json.dumps(net.meta))
    del meta[key]
    with pytest.raises(NetFileError, match=f"metadata lacks {key}"):
        decode(container(parts_of(net, META=json.dumps(meta).encode())))


def test_container_helper_is_faithful(net: NetFile) -> None:
    back = decode(container(parts_of(net)))
    assert back.commands == net.commands and back.meta == json.loads(json.dumps(net.meta))


# --------------------------------------------------------------------------- contents
def test_command_record_size_out_of_range(net: NetFile) -> None:
    cmds = bytearray(net.commands)
    cmds[0:4] = (len(cmds) + 8).to_bytes(4, "little")
    with pytest.raises(NetFileError, match="command record size out of range"):
        decode(container(parts_of(net, CMDS=bytes(cmds))))       # CRCs valid
    with pytest.raises(NetFileError, match="command record size out of range"):
        Net(dataclasses.replace(net, commands=bytes(cmds)), SIM)
    with pytest.raises(NetFileError, match="cut short"):
        decode(container(parts_of(net, CMDS=net.commands[:4])))


def test_program_refers_to_missing_commands(net: NetFile) -> None:
    program = json.loads(json.dumps(net.meta["program"]))
    hw = next(s for s in program if s["kind"] == "hw")
    hw["commands"] = [0, 999]
    with pytest.raises(NetFileError, match="missing commands") as ei:
        Net(with_meta(net, program=program), SIM)
    assert ei.value.field == f"program[{program.index(hw)}].commands"
    program[0] = {"kind": "gpu"}
    with pytest.raises(NetFileError, match=r"program\[0\].kind is not one of") as ei:
        Net(with_meta(net, program=program), SIM)
    assert ei.value.value == "gpu" and ei.value.limit == ("hw", "cpu")


def test_command_with_unknown_memory_region(net: NetFile) -> None:
    class Region:
        def __init__(self, region: int) -> None:
            self.region, self.phys, self.size, self.freed, self.name = region, 0, 1 << 30, \
                False, "r"

    records, pos = [], 0
    while pos < len(net.commands):
        size = int.from_bytes(net.commands[pos : pos + 4], "little")
        records.append(net.commands[pos : pos + size])
        pos += -(-size // 8) * 8
    first = ConvCommand.from_raw(records[0], lambda mem, offs: BufferRef(
        Region(7 if mem == 1 else mem), offs))
    raw = first.to_raw(lambda b: b.region)
    raw += b"\0" * (-len(raw) % 8)
    bad = dataclasses.replace(net, commands=raw + net.commands[len(raw):])
    with pytest.raises(NetFileError, match="unknown memory region") as ei:
        Net(bad, SIM)
    assert ei.value.value == 7


def test_constant_index_outside_section(net: NetFile) -> None:
    consts = json.loads(json.dumps(net.meta["constants"]))
    name = next(iter(consts))
    consts[name]["offset"] = len(net.constants) + 64
    with pytest.raises(NetFileError, match="outside its section") as ei:
        Net(with_meta(net, constants=consts), SIM)
    assert ei.value.field == f"constants.{name}" and ei.value.limit == len(net.constants)


def test_selftest_needs_golden(net: NetFile) -> None:
    meta = json.loads(json.dumps(net.meta))
    del meta["golden"]
    with Net(dataclasses.replace(net, meta=meta, golden=b""), SIM) as n:
        with pytest.raises(NetFileError, match="no golden pair"):
            n.selftest()


def test_selftest_fails_on_wrong_weights(net: NetFile) -> None:
    """A bit-exact file with the wrong weights (e.g. a file assembled from two builds) runs,
    and self-test says so."""
    w = np.frombuffer(net.weights, np.uint16).copy()
    w[: len(w) // 2] ^= 0x4000           # flip an exponent bit in half the FP16 words
    with Net(dataclasses.replace(net, weights=w.tobytes()), SIM) as n:
        assert n.selftest()["passed"] is False


# --------------------------------------------------------------------------- hardware
def test_wrong_ub_size() -> None:
    big = compile(M.conv_bn_relu(), ub_size=524288, golden=False)
    with pytest.raises(NetFileError) as ei:
        Net(big, "sim://?ub_size=262144")
    e = ei.value
    assert e.field == "ub_size" and e.value == 262144 and e.limit == 524288
    assert "524288" in str(e) and "262144" in str(e) and "--ub-size" in str(e)
    small = compile(M.conv_bn_relu(), ub_size=262144)
    assert small.meta["hardware"]["ub_size_min"] == 262144
    for url in ("sim://?ub_size=262144", SIM):        # a larger UBUF is fine
        with Net(small, url) as n:
            assert n.selftest()["passed"] is True


def test_wrong_kernel_size_and_svn(net: NetFile) -> None:
    with pytest.raises(NetFileError, match="9x9 kernels") as ei:
        Net(with_meta(net, hardware__max_kernel_size=9), SIM)
    assert ei.value.field == "max_kernel_size"
    with pytest.raises(NetFileError, match="svn_version") as ei:
        Net(with_meta(net, hardware__svn_version_min=200), SIM)
    assert ei.value.limit == 200


def test_units_the_device_lacks(net: NetFile) -> None:
    needs = with_meta(net, hardware__units=["conv", "maximizer"])
    with pytest.raises(NetFileError, match="maximizer unit") as ei:
        Net(needs, "sim://?units=conv,ipu")
    assert ei.value.field == "units" and ei.value.limit == "maximizer"
    with Net(needs, SIM) as n:                        # the default simulator has all units
        assert n.selftest()["passed"] is True
    with pytest.raises(NetFileError, match="npu unit"):
        Net(with_meta(net, hardware__units=["conv", "npu"]), SIM)


def test_kernel_size_recorded(net: NetFile) -> None:
    stem = compile(M.resnet_like(size=32), golden=False)
    assert stem.meta["hardware"]["max_kernel_size"] == 7
    assert net.meta["hardware"]["max_kernel_size"] == 3


def test_written_file_has_ordinary_permissions(tmp_path):
    from dvsdk.netfile import NetFile, write

    path = tmp_path / "perm.bin"
    write(NetFile(meta={"inputs": [], "outputs": [], "tensors": {}, "program": [],
                        "arena": {"size": 0}}), path)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# --------------------------------------------------------------------------- bounded META
@pytest.mark.parametrize("text,depth", [
    ('{"a": [1, {"b": []}]}', 4),
    ('{"a": "[[[[{{{{"}', 1),                       # brackets in strings do not count
    ('{"a": "\\"[[[", "b": [[]]}', 3),               # nor after an escaped quote
    ('{"a": "\\\\", "b": [[]]}', 3),                 # an escaped backslash ends no string
    ('"[[[', 0),                                     # an unterminated string runs to the end
    ("[" * 50 + "]" * 50, 50),
])
def test_json_depth(text, depth):
    assert json_depth(text) == depth
    if depth < 33 and text.startswith("{"):
        assert json.loads(text) is not None            # the cases are valid JSON


def test_json_depth_is_linear_on_adversarial_strings():
    """Stray and escaped quotes cost one scan, not one per quote (a quadratic scan of these
    2 MB would take hours).  Checked on the mechanism, not the clock: the string pattern
    matches from every quote, to the closing one or (unterminated) to the end, so the scan
    never fails at a quote and goes over what follows again (and within a match its one
    loop, an unrolled ``[^"\\]*(?:\\.[^"\\]*)*``, cannot backtrack)."""
    from dvsdk.netfile import _JSON_STRING

    for text, depth in (('"' + '\\"' * 1_000_000, 0), ('"' * 2_000_000, 0),
                        ('["' + "\\" * 2_000_000, 1)):
        assert json_depth(text) == depth, text[:8]
        head = text[:2001]  # the same pattern, short enough to try each quote
        for i in (i for i, ch in enumerate(head) if ch == '"'):
            assert _JSON_STRING.match(head, i), (text[:8], i)


def test_meta_size_limit(net: NetFile) -> None:
    meta = json.loads(json.dumps(net.meta))
    meta["labels"] = ["x" * 4000] * (LIMITS["meta_bytes"] // 4000)
    with pytest.raises(NetFileError, match="too large") as ei:
        decode(container(parts_of(net, META=json.dumps(meta).encode())))
    assert ei.value.limit == LIMITS["meta_bytes"]


@pytest.mark.parametrize("path,value,field", [
    ("labels", ["x" * 4097], "labels[0]"),
    ("source", "x" * 4097, "source"),
    ("stats", {"k" * 4097: 1}, "stats"),
    ("format_version", FORMAT_VERSION + 1, "format_version"),
    ("weights__size", 1, "weights.size"),
    ("arena__size", 1 << 20, "arena.size"),
    ("hardware__units", ["conv", 3], "hardware.units[1]"),
    ("transposed", "yes", "transposed"),
])
def test_meta_values_are_bounded_and_consistent(net: NetFile, path, value, field) -> None:
    bad = with_meta(net, **{path: value})
    with pytest.raises(NetFileError) as ei:
        decode(encode(bad))
    assert ei.value.field == field
    with pytest.raises(NetFileError) as ei:
        Net(bad, SIM)                                 # a NetFile handed over directly, too
    assert ei.value.field == field


def test_meta_with_non_json_values(net: NetFile) -> None:
    """A NetFile built in Python may hold what JSON cannot say; the runtime refuses it."""
    for value in (np.int64(3), object(), b"x", 2**64):
        with pytest.raises(NetFileError) as ei:
            Net(with_meta(net, stats__odd=value), SIM)
        assert ei.value.field == "stats.odd"


def test_sections_must_start_aligned_after_the_table(net: NetFile) -> None:
    import zlib

    good = container(parts_of(net))
    hdr = HEADER.unpack(good)
    for start in (HEADER.size, sections(good)["CMDS"][0] + 8):
        entry = SECTION.unpack(good, HEADER.size + SECTION.size)            # CMDS
        entry["offset"], entry["size"] = start, 8
        entry["crc32"] = zlib.crc32(good[start : start + 8]) & 0xFFFFFFFF
        table = bytearray(good[HEADER.size : HEADER.size + SECTION.size * hdr["section_count"]])
        table[SECTION.size : 2 * SECTION.size] = SECTION.pack(entry)
        fields = {k: v for k, v in hdr.items() if k != "header_crc32"}
        crc = zlib.crc32(HEADER.pack(fields) + bytes(table)) & 0xFFFFFFFF
        bad = HEADER.pack({**fields, "header_crc32": crc}) + bytes(table)
        with pytest.raises(NetFileError, match="64-byte boundary") as ei:
            decode(bad + good[len(bad):])
        assert ei.value.field == "CMDS" and ei.value.value == start


def test_unused_constant_is_refused(net: NetFile) -> None:
    """E.g. a step input renamed away from its constant: the file contradicts itself."""
    program = json.loads(json.dumps(net.meta["program"]))
    step = next(s for s in program if s["kind"] == "cpu" and len(s["inputs"]) > 1)
    name = step["inputs"][1]
    step["inputs"][1] = ""
    with pytest.raises(NetFileError, match="read by no step") as ei:
        Net(with_meta(net, program=program), SIM)
    assert ei.value.field == f"constants.{name}"


@pytest.mark.parametrize("edit,field", [
    (lambda g: g["inputs"].pop("x"), "golden.inputs"),
    (lambda g: g["outputs"].update(nope=g["outputs"][next(iter(g["outputs"]))]),
     "golden.outputs"),
    (lambda g: g["inputs"]["x"].update(shape=[1, 3, 8]), "golden.inputs.x.shape"),
    (lambda g: g["inputs"]["x"].update(offset=8), "golden.inputs.x.offset"),
    (lambda g: g["tolerance"].update({next(iter(g["tolerance"])): -1.0}), "golden.tolerance."),
])
def test_golden_pair_matches_the_network(net: NetFile, edit, field) -> None:
    meta = json.loads(json.dumps(net.meta))
    edit(meta["golden"])
    with pytest.raises(NetFileError) as ei:
        Net(dataclasses.replace(net, meta=meta), SIM)
    assert ei.value.field.startswith(field)


def test_inputs_are_fed_by_their_tensor(net: NetFile) -> None:
    """Regression: the runtime uploaded an input under its *name*; a net whose input name
    differs from its tensor ran on whatever the arena held."""
    meta = json.loads(json.dumps(net.meta))
    meta["inputs"][0]["name"] = "image"
    meta["golden"]["inputs"] = {"image": meta["golden"]["inputs"].pop("x")}
    feeds = M.make_feeds(M.pad_conv(), seed=3)
    with Net(net, SIM) as a, Net(dataclasses.replace(net, meta=meta), SIM) as b:
        ya, yb = a.run(feeds), b.run({"image": feeds["x"]})
        assert b.selftest()["passed"] is True
    for k in ya:
        np.testing.assert_array_equal(ya[k], yb[k])


def test_a_zero_dimensional_constant_keeps_its_shape():
    import numpy as np

    from dvsdk.netfile import BlobBuilder, NetFile

    b = BlobBuilder(align=16)
    entry = b.add_array(np.float32(3.5).reshape(()))
    assert entry["shape"] == []
    value = NetFile(meta={}, commands=b"", weights=b"", constants=b.bytes()).array(entry)
    assert value.shape == () and value == np.float32(3.5)


@pytest.mark.parametrize("kinds,shape,text", [
    ([], (0, 0, 0, 0), "no CPU steps: 0 hardware segments"),
    (["hw"], (1, 0, 0, 0), "no CPU steps: 1 hardware segment,"),
    (["hw", "cpu"], (1, 1, 1, 1), "1 CPU step in 1 segment, 1 device<->CPU transition"),
    (["cpu", "hw", "cpu", "cpu", "hw"], (2, 3, 2, 3),
     "3 CPU steps in 2 segments, 3 device<->CPU transitions"),
])
def test_program_shape_counts_segments_and_transitions(kinds, shape, text):
    from dvsdk.netfile import program_shape

    got = program_shape({"program": [{"kind": k} for k in kinds]})
    assert (got.hw_segments, got.cpu_steps, got.cpu_segments, got.transitions) == shape
    assert str(got).startswith(text)
