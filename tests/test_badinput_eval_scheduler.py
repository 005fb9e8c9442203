"""``dvsdk eval --scheduler`` with a malformed address ("bogus", "tcp://[::1",
"tcp://host:x"): InvalidArgument naming ``scheduler`` and the address form, one line and
exit 2, not distributed's ValueError (dvsdk/qa/evaldask.py).  Nothing is contacted: the
address fails to parse."""

from __future__ import annotations

import pytest

from dvsdk.cli.eval import main as eval_main
from dvsdk.errors import InvalidArgument

from .conftest import ROOT

NET = str(ROOT / "examples" / "models" / "digits.bin")


@pytest.mark.parametrize("address", ["bogus", "tcp://[::1", "tcp://127.0.0.1:x"])
def test_malformed_scheduler_address(tmp_path, address):
    (tmp_path / "zero").mkdir()
    (tmp_path / "zero" / "a.png").write_bytes(
        (ROOT / "examples" / "models" / "samples" / "seven_1442.png").read_bytes())
    with pytest.raises(InvalidArgument) as info:
        eval_main([NET, str(tmp_path), "-q", "--scheduler", address])
    assert info.value.field == "scheduler" and info.value.value == address
    assert info.value.limit == "tcp://HOST:PORT"
