"""Shared fixtures: paths to the golden data in ../shared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _shared_dir() -> Path:
    env = os.environ.get("DVSDK_SHARED")
    for cand in ([Path(env)] if env else []) + [ROOT.parent / "shared", ROOT / "shared"]:
        if (cand / "vectors").is_dir():
            return cand
    raise RuntimeError("cannot find ../shared (golden vectors)")


SHARED = _shared_dir()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return SHARED


@pytest.fixture(scope="session")
def weight_golden() -> dict:
    return json.loads((SHARED / "vectors" / "dmp_weight_golden.json").read_text())


@pytest.fixture(scope="session")
def layout_vectors() -> dict:
    return json.loads((SHARED / "vectors" / "layout_offsets.json").read_text())


# -- devices -----------------------------------------------------------------------------
# Every driver test takes `device`; BACKENDS lists the URLs (or factories) it runs against.
# The fake board (uio://) and the link (socket://, pty) join this list as they land.

def _sim_url() -> str:
    return "sim://"


BACKENDS = {"sim": _sim_url}


@pytest.fixture(params=sorted(BACKENDS))
def device(request):
    import dvsdk

    url = BACKENDS[request.param]()
    dev = dvsdk.open_device(url) if isinstance(url, str) else url
    try:
        yield dev
    finally:
        dev.close()


@pytest.fixture
def sim():
    """The simulator itself, for tests of simulator-only behaviour (faults, coherence)."""
    import dvsdk

    dev = dvsdk.open_device("sim://")
    try:
        yield dev
    finally:
        dev.close()
