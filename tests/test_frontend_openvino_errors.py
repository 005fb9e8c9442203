"""Bad OpenVINO IR files: each is a typed ModelError (or one UnsupportedOps listing every
layer), the CLI says so in one line with exit status 2, and no net.bin is written."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from dvsdk.compiler.frontends import load
from dvsdk.errors import ModelError, UnsupportedOps

from .conftest import DATA

pytest.importorskip("defusedxml")
OV = DATA / "openvino"


@pytest.fixture
def digits(tmp_path):
    """A writable copy of digits_fp32.xml/.bin."""
    for suffix in (".xml", ".bin"):
        shutil.copy(OV / f"digits_fp32{suffix}", tmp_path / f"d{suffix}")
    return tmp_path / "d.xml"


def edit(xml, old: str, new: str, count: int = 1) -> None:
    text = xml.read_text()
    assert old in text, old
    xml.write_text(text.replace(old, new, count))


def test_truncated_bin_names_layer_offset_size_and_file_size(digits):
    b = digits.with_suffix(".bin")
    data = b.read_bytes()
    b.write_bytes(data[:1000])
    with pytest.raises(ModelError, match="outside the .bin") as e:
        load(digits)
    assert "Const" in e.value.field and "file size 1000" in str(e.value)
    assert "offset" in str(e.value.value) and "size" in str(e.value.value)


def test_offset_past_the_end(digits):
    edit(digits, 'offset="0" size="288"', 'offset="999999999" size="288"')
    with pytest.raises(ModelError, match="outside the .bin") as e:
        load(digits)
    assert "offset 999999999 size 288" in str(e.value)


def test_size_disagreeing_with_the_shape(digits):
    edit(digits, 'offset="0" size="288"', 'offset="0" size="284"')
    with pytest.raises(ModelError, match="does not match the declared shape"):
        load(digits)


def test_negative_offset(digits):
    edit(digits, 'offset="0" size="288"', 'offset="-8" size="288"')
    with pytest.raises(ModelError, match="outside the .bin"):
        load(digits)


def test_missing_bin(digits):
    digits.with_suffix(".bin").unlink()
    with pytest.raises(ModelError, match=r"weights file \(.bin\) beside the IR XML is missing"):
        load(digits)


BOMB = """<?xml version="1.0"?>
<!DOCTYPE net [
 <!ENTITY a "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa">
 <!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
 <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">
 <!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">
 <!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;">
 <!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">
]>
<net name="&f;" version="11"><layers/><edges/></net>
"""

EXTERNAL = """<?xml version="1.0"?>
<!DOCTYPE net [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<net name="&secret;" version="11"><layers/><edges/></net>
"""


@pytest.mark.parametrize("text", [BOMB, EXTERNAL], ids=["billion_laughs", "external_entity"])
def test_entities_are_refused_before_expansion(tmp_path, text):
    xml = tmp_path / "evil.xml"
    xml.write_text(text)
    with pytest.raises(ModelError, match="declares a DTD or entities"):
        load(xml)


def test_not_xml_and_not_an_ir(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<net version='11'><layers>")
    with pytest.raises(ModelError, match="not well-formed"):
        load(bad)
    bad.write_text("<svg/>")
    with pytest.raises(ModelError, match="root element is not <net>"):
        load(bad)


def test_unknown_ir_version(digits):
    edit(digits, 'version="11"', 'version="9"')
    with pytest.raises(ModelError, match="unsupported OpenVINO IR version"):
        load(digits)


def test_edge_to_a_missing_layer_or_port(digits):
    edit(digits, '<edge from-layer="0" from-port="0" to-layer="2" to-port="0" />',
         '<edge from-layer="0" from-port="0" to-layer="77" to-port="0" />')
    with pytest.raises(ModelError, match="edge names a layer the IR does not have"):
        load(digits)


def test_edge_from_a_missing_port(digits):
    edit(digits, '<edge from-layer="0" from-port="0" to-layer="2" to-port="0" />',
         '<edge from-layer="0" from-port="5" to-layer="3" to-port="0" />')
    with pytest.raises(ModelError, match="not an output of its layer"):
        load(digits)


def test_edge_precision_mismatch(digits):
    edit(digits, '<port id="0" precision="FP32" names="image">',
         '<port id="0" precision="I32" names="image">')
    with pytest.raises(ModelError, match="different precisions"):
        load(digits)


def test_unconnected_input_port(digits):
    edit(digits, '<edge from-layer="0" from-port="0" to-layer="2" to-port="0" />', "")
    with pytest.raises(ModelError, match="input port is not connected"):
        load(digits)


def test_unknown_layer_types_listed_in_one_error():
    with pytest.raises(UnsupportedOps) as e:
        load(OV / "unsupported.xml")
    assert sorted(e.value.ops) == [("Gelu", "gelu"), ("Sin", "sine")]


def test_missing_defusedxml_names_the_extra(digits, monkeypatch):
    monkeypatch.setitem(sys.modules, "defusedxml", None)
    with pytest.raises(ModelError, match=r"defusedxml") as e:
        load(digits)
    assert "dvsdk[openvino]" in str(e.value)


@pytest.mark.parametrize("case", ["truncated", "unsupported", "bomb"])
def test_cli_one_line_exit_2_nothing_written(digits, tmp_path, case):
    xml = digits
    if case == "truncated":
        digits.with_suffix(".bin").write_bytes(b"\0" * 100)
    elif case == "unsupported":
        xml = OV / "unsupported.xml"
    else:
        xml = tmp_path / "bomb.xml"
        xml.write_text(BOMB)
    out = tmp_path / "net.bin"
    proc = subprocess.run([sys.executable, "-m", "dvsdk.cli.compile", str(xml), "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob("net.bin*"))
