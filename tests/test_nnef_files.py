"""NNEF files: the binary tensor format (``.dat``), ``graph.quant`` and the container.

Tensor files are written by the Khronos ``nnef`` package (``nnef.write_tensor``, the later
item-type header) or, for the 1.0.0-1.0.2 item-code header no current tool writes, byte by
byte from the layout and test vectors of ``formats.md`` §4.5 (copied here).  Every bad file
must be a ModelError naming the file, the header field, the value found and the limit;
archives are checked member by member before anything is written.
"""

from __future__ import annotations

import io
import struct
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest

from dvsdk.compiler.frontends import load
from dvsdk.compiler.frontends import nnef as nnef_frontend
from dvsdk.compiler.frontends.nnef_dat import read_dat
from dvsdk.errors import ModelError

from .conftest import DATA

nnef = pytest.importorskip("nnef")

DIGITS = DATA / "nnef" / "digits.nnef"


def _dat(arr: np.ndarray, quantized: bool = False) -> bytes:
    """The bytes ``nnef.write_tensor`` writes (it needs a real file)."""
    with tempfile.TemporaryFile() as f:
        nnef.write_tensor(f, arr, quantized=quantized)
        f.seek(0)
        return f.read()


def _header(shape, bits: int, code: int, length: int, params: bytes = b"") -> bytes:
    """A 128-byte header of formats.md §4.5 (little-endian)."""
    ext = list(shape) + [0] * (8 - len(shape))
    h = b"\x4e\xef\x01\x00" + struct.pack("<II8III", length, len(shape), *ext, bits, code)
    return h + params.ljust(32, b"\0") + b"\0" * 44


# --------------------------------------------------------------------------- item types
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "int16", "int32",
                                   "int64", "uint8", "uint16", "uint32", "uint64", "bool"])
def test_every_item_type_written_by_the_khronos_package(tmp_path, dtype):
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal((3, 5, 2)) * 50).astype(dtype) if dtype != "bool" \
        else rng.random((3, 5, 2)) > 0.5
    path = tmp_path / "t.dat"
    path.write_bytes(_dat(arr))
    got, h = read_dat(path)
    assert got.dtype == arr.dtype and got.shape == arr.shape and h.shape == arr.shape
    np.testing.assert_array_equal(got, arr)


def test_the_spec_header_vector_float32_bias(tmp_path):
    """formats.md §4.5: float32 bias [1, 32] = 4e ef 01 00 | 80 00 00 00 | 02 00 00 00 |
    01 00 00 00 20 00 00 00 (+6 x 0) | 20 00 00 00 | 00 00 00 00 | 76 x 00, 256 bytes."""
    raw = bytes.fromhex("4eef0100" "80000000" "02000000" "01000000" "20000000" + "00" * 24
                        + "20000000" "00000000") + b"\0" * 76
    values = np.arange(32, dtype="<f4") / 8
    path = tmp_path / "bias.dat"
    path.write_bytes(raw + values.tobytes())
    assert path.stat().st_size == 256
    got, h = read_dat(path)
    assert h.shape == (1, 32) and h.kind == "float" and h.bits == 32
    np.testing.assert_array_equal(got, values.reshape(1, 32))
    assert _dat(values.reshape(1, 32))[:128] == raw  # the Khronos writer agrees


def test_old_linear_quantized_codes_decode_as_the_spec_table(tmp_path):
    """formats.md §4.5: 8-bit linear, min -1, max 1: codes 128, 0, 255, 191 decode to
    0.0039216, -1, 1, 0.49804 (header: length 1728 for [64,3,3,3], code 0x10)."""
    h = _header((64, 3, 3, 3), 8, 0x10, 1728, struct.pack("<ff", -1.0, 1.0))
    assert h[4:8] == bytes.fromhex("c0060000") and h[48:52] == bytes.fromhex("10000000")
    assert h[52:60] == bytes.fromhex("000080bf0000803f")
    codes = np.zeros(1728, np.uint8)
    codes[:4] = [128, 0, 255, 191]
    path = tmp_path / "w.dat"
    path.write_bytes(h + codes.tobytes())
    got, hdr = read_dat(path)
    assert got.dtype == np.float32 and got.shape == (64, 3, 3, 3) and hdr.kind == "linear"
    np.testing.assert_allclose(got.reshape(-1)[:4], [0.0039216, -1.0, 1.0, 0.49804], atol=1e-5)


def test_old_integer_codes_signed_flag_sub_byte_and_log(tmp_path):
    p = tmp_path / "t.dat"
    # code 1 with parameter word 0 != 0: signed
    p.write_bytes(_header((4,), 8, 0x01, 4, struct.pack("<I", 1)) + bytes([0xFD, 0xFF, 0, 3]))
    got, h = read_dat(p)
    assert h.kind == "int" and got.tolist() == [-3, -1, 0, 3]
    # 4-bit unsigned items, packed continuously, most significant bit first
    p.write_bytes(_header((5,), 4, 0x01, 3) + bytes([0x1F, 0x70, 0x90]))
    got, _ = read_dat(p)
    assert got.tolist() == [1, 15, 7, 0, 9]
    # 3-bit logarithmic, min 0, max 8: m = 3, r = 7, x = 2^(q + m - r)
    codes = bytes([0b000_111_10, 0b0_0000000])  # 0, 7, 4
    p.write_bytes(_header((3,), 3, 0x11, 2, struct.pack("<ff", 0.0, 8.0)) + codes)
    got, _ = read_dat(p)
    np.testing.assert_array_equal(got, [2.0 ** -4, 2.0 ** 3, 2.0 ** 0])
    p.write_bytes(_header((3,), 3, 0x11, 2, struct.pack("<ff", -8.0, 8.0)) + bytes(2))
    with pytest.raises(ModelError, match="unsigned logarithmic"):
        read_dat(p)


# --------------------------------------------------------------------------- lying files
def _mutate(raw: bytes, offset: int, value: bytes) -> bytes:
    return raw[:offset] + value + raw[offset + len(value):]


BAD = {  # name -> (how to spoil a good float32 [2, 3] file, field, message)
    "truncated": (lambda g: g[:-5], "size", "truncated"),
    "short header": (lambda g: g[:100], "header", "shorter than its header"),
    "trailing bytes": (lambda g: g + b"\0\0\0\0", "size", "bytes after its data"),
    "bad magic": (lambda g: _mutate(g, 0, b"\x4f"), "magic", "not an NNEF tensor file"),
    "version 2.0": (lambda g: _mutate(g, 2, b"\x02"), "version", "version"),
    "version 1.1": (lambda g: _mutate(g, 3, b"\x01"), "version", "version"),
    "lying length": (lambda g: _mutate(g, 4, struct.pack("<I", 28)), "data_length",
                     "extents x bits"),
    "lying extents": (lambda g: _mutate(g, 16, struct.pack("<I", 4)), "data_length",
                      "extents x bits"),
    "unknown item type": (lambda g: _mutate(g, 48, struct.pack("<I", 7)), "item_type",
                          "unknown"),
    "vendor code": (lambda g: _mutate(g, 48, struct.pack("<I", 0x10000)), "item_type",
                    "vendor"),
    "rank 9": (lambda g: _mutate(g, 8, struct.pack("<I", 9)), "rank", "rank"),
    "extent beyond rank": (lambda g: _mutate(g, 20, struct.pack("<I", 2)), "extents",
                           "beyond"),
    "zero extent": (lambda g: _mutate(g, 12, struct.pack("<I", 0)), "extents", "positive"),
    "huge extents": (lambda g: _mutate(_mutate(g, 8, struct.pack("<I", 8)), 12,
                                       struct.pack("<8I", *[1 << 31] * 8)), "data_length",
                     "extents x bits"),
    "float of 8 bits": (lambda g: _mutate(g, 44, struct.pack("<I", 8)), "bits", "not valid"),
    "bool of 4 bits": (lambda g: _mutate(_mutate(g, 48, struct.pack("<I", 5)), 44,
                                         struct.pack("<I", 4)), "bits", "not valid"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_lying_or_truncated_file_is_refused_by_field(tmp_path, case):
    spoil, field, message = BAD[case]
    path = tmp_path / "bad.dat"
    path.write_bytes(spoil(_dat(np.arange(6, dtype=np.float32).reshape(2, 3))))
    with pytest.raises(ModelError, match=message) as e:
        read_dat(path)
    assert e.value.field == f"bad.dat {field}"
    assert e.value.value is not None and e.value.limit is not None


def _model(tmp_path: Path, body: str, quant: str | None = None) -> Path:
    d = tmp_path / "m"
    d.mkdir(exist_ok=True)
    (d / "graph.nnef").write_text(
        "version 1.0;\ngraph G(x) -> (y)\n{\n    x = external(shape = [1, 2, 4, 4]);\n"
        + body + "}\n")
    if quant is not None:
        (d / "graph.quant").write_text(quant)
    return d


CONV = ("    w = variable(shape = [3, 2, 1, 1], label = 'w');\n"
        "    y = conv(x, w);\n")


def test_a_bad_dat_in_a_model_names_the_file(tmp_path):
    d = _model(tmp_path, CONV)
    (d / "w.dat").write_bytes(_dat(np.ones((3, 2, 1, 1), np.float32))[:-1])
    with pytest.raises(ModelError, match="truncated") as e:
        load(d)
    assert e.value.field == "w.dat size"


def test_extents_must_match_the_declared_shape(tmp_path):
    d = _model(tmp_path, CONV)
    (d / "w.dat").write_bytes(_dat(np.ones((3, 2, 2), np.float32)))
    with pytest.raises(ModelError, match="extents differ") as e:
        load(d)
    assert e.value.value == [3, 2, 2] and e.value.limit == [3, 2, 1, 1]
    (d / "w.dat").write_bytes(_dat(np.ones((3, 2), np.float32)))  # trailing 1s are implicit
    assert load(d).const("w").shape == (3, 2, 1, 1)


def test_float16_and_float64_weights_become_float32(tmp_path):
    d = _model(tmp_path, CONV)
    w = np.array([0.5, -1.25, 3.0, 0.1, 2.0, -0.3]).reshape(3, 2, 1, 1)
    for dt in (np.float16, np.float64):
        (d / "w.dat").write_bytes(_dat(w.astype(dt)))
        got = load(d).const("w")
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, w.astype(dt).astype(np.float32))


def test_missing_dat_and_labels_leaving_the_directory(tmp_path):
    d = _model(tmp_path, CONV)
    with pytest.raises(ModelError, match="tensor file of a variable is missing") as e:
        load(d)
    assert e.value.value == "w.dat" and "<label>.dat" in str(e.value.limit)
    d = _model(tmp_path, CONV.replace("label = 'w'", "label = '../w'"))
    (tmp_path / "w.dat").write_bytes(_dat(np.ones((3, 2, 1, 1), np.float32)))
    with pytest.raises(ModelError, match="leaves the model directory"):
        load(d)
    d = _model(tmp_path, CONV.replace("label = 'w'", "label = 'conv1/w'"))
    (d / "conv1").mkdir()
    (d / "conv1" / "w.dat").write_bytes(_dat(np.full((3, 2, 1, 1), 2.0, np.float32)))
    assert load(d).const("w").tolist() == np.full((3, 2, 1, 1), 2.0).tolist()


# --------------------------------------------------------------------------- graph.quant
def test_quantized_weights_take_their_value_from_graph_quant(tmp_path):
    codes = np.array([-128, -1, 0, 5, 127, 64], np.int8).reshape(3, 2, 1, 1)
    zp, scale = [1, -2, 0], [0.5, 0.25, 2.0]
    quant = ('"w": zero_point_linear_quantize(zero_point = [1, -2, 0], scale = [0.5, 0.25, '
             '2.0], bits = 8, signed = true, symmetric = false);\n'
             '"x": linear_quantize(min = 0.0, max = 1.0, bits = 8);\n')  # activation: a hint
    d = _model(tmp_path, CONV, quant)
    (d / "w.dat").write_bytes(_dat(codes, quantized=True))
    want = (codes.astype(np.float64) - np.reshape(zp, (3, 1, 1, 1))) * np.reshape(scale,
                                                                                 (3, 1, 1, 1))
    np.testing.assert_array_equal(load(d).const("w"), want.astype(np.float32))

    ucodes = np.array([0, 255, 128, 1, 17, 200], np.uint8).reshape(3, 2, 1, 1)
    d = _model(tmp_path, CONV, '"w": linear_quantize(min = -1.0, max = 1.0, bits = 8);\n')
    (d / "w.dat").write_bytes(_dat(ucodes, quantized=True))
    np.testing.assert_allclose(load(d).const("w"), ucodes / 255.0 * 2.0 - 1.0, rtol=1e-6)


@pytest.mark.parametrize("quant,message", [
    (None, "no graph.quant entry"),
    ('"w": linear_quantize(min = -1.0, max = 1.0, bits = 4);\n', "bits differ"),
    ('"w": logarithmic_quantize(max = 1.0, bits = 8);\n', "no float equivalent"),
    ('"w": zero_point_linear_quantize(zero_point = [1, 2], scale = 0.5, bits = 8, '
     'signed = false, symmetric = false);\n', "does not fit"),
])
def test_quantized_weights_without_a_usable_float_equivalent(tmp_path, quant, message):
    d = _model(tmp_path, CONV, quant)
    (d / "w.dat").write_bytes(_dat(np.arange(6, dtype=np.uint8).reshape(3, 2, 1, 1), True))
    with pytest.raises(ModelError, match=message) as e:
        load(d)
    assert e.value.field.startswith(("w.dat", "graph.quant"))


# --------------------------------------------------------------------------- archives
def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _digits_members(prefix: str = "") -> list[tuple[tarfile.TarInfo, bytes]]:
    return [_file(prefix + f.name, f.read_bytes()) for f in sorted(DIGITS.iterdir())]


def test_archive_with_one_top_folder_and_temp_dir_removed(tmp_path, monkeypatch):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    a = _tar(tmp_path / "digits.tar.gz", _digits_members("digits/"))
    g = load(a)
    assert g.op_types()[0] == "Conv" and list(tmp.iterdir()) == []


@pytest.mark.parametrize("name", ["../evil.dat", "/tmp/evil.dat", "a/../../evil.dat",
                                  "..\\evil.dat", "c:evil.dat"])
def test_archive_paths_leaving_the_archive(tmp_path, name):
    a = _tar(tmp_path / "m.tgz", [*_digits_members(), _file(name, b"x")])
    with pytest.raises(ModelError, match="leaves the archive") as e:
        load(a)
    assert e.value.value == name
    assert not (tmp_path / "evil.dat").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.FIFOTYPE])
def test_archive_links_and_devices_are_refused(tmp_path, kind):
    link = tarfile.TarInfo("variable1.dat")
    link.type, link.linkname = kind, "/etc/passwd"
    a = _tar(tmp_path / "m.tgz", [_file("graph.nnef", (DIGITS / "graph.nnef").read_bytes()),
                                  (link, None)])
    with pytest.raises(ModelError, match="not a regular file"):
        load(a)


def test_archive_bounds_and_contents(tmp_path, monkeypatch):
    a = _tar(tmp_path / "m.tgz", _digits_members())
    monkeypatch.setattr(nnef_frontend, "MAX_ARCHIVE_BYTES", 4096)
    with pytest.raises(ModelError, match="too many bytes"):
        load(a)
    monkeypatch.setattr(nnef_frontend, "MAX_ARCHIVE_BYTES", 1 << 30)
    monkeypatch.setattr(nnef_frontend, "MAX_ARCHIVE_MEMBERS", 3)
    with pytest.raises(ModelError, match="too many members"):
        load(a)
    monkeypatch.setattr(nnef_frontend, "MAX_ARCHIVE_MEMBERS", 100)
    assert load(a).name == "digits"
    no_graph = _tar(tmp_path / "n.tgz", [_file("variable1.dat", b"")])
    with pytest.raises(ModelError, match="archive holds no graph.nnef") as e:
        load(no_graph)
    assert "graph.nnef" in str(e.value.limit)
    cut = tmp_path / "cut.tgz"
    cut.write_bytes(a.read_bytes()[: a.stat().st_size // 2])
    with pytest.raises(ModelError, match="cannot unpack archive"):
        load(cut)
    missing = _tar(tmp_path / "miss.tgz", [m for m in _digits_members()
                                           if m[0].name != "variable3.dat"])
    with pytest.raises(ModelError, match="missing") as e:
        load(missing)
    assert e.value.value == "variable3.dat"
