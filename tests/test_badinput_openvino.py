"""Adversarial OpenVINO IR attributes: an integer list holding a number too large for an
integer ("1e309", infinite as a float) is a ModelError naming the layer attribute, as
"x" and "nan" already were, not an OverflowError (frontends/openvino_ir.py, Layer.ints)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dvsdk
from dvsdk.errors import ModelError

DATA = Path(__file__).resolve().parent / "data" / "openvino"


@pytest.mark.parametrize("value", ["1, 1e309", "1, -1e309", "1, nan", "1, x"])
def test_unrepresentable_integer_attribute(value, tmp_path):
    text = (DATA / "convs.xml").read_text()
    first = 'strides="1, 1"'
    assert first in text
    (tmp_path / "m.xml").write_text(text.replace(first, f'strides="{value}"', 1))
    shutil.copy(DATA / "convs.bin", tmp_path / "m.bin")
    with pytest.raises(ModelError) as info:
        dvsdk.compile(str(tmp_path / "m.xml"), tmp_path / "out.bin")
    assert info.value.field.endswith(".strides") and info.value.value == value
    assert not (tmp_path / "out.bin").exists()

