"""Bad input to the runtime's public entry points and device URLs: a typed error naming
the field, never a ValueError/TypeError from numpy, pathlib or urllib (found by the
bad-input hunt)."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk
from dvsdk.driver.device import parse_url
from dvsdk.errors import InvalidArgument, InvalidURL
from dvsdk.runtime.board_model import step_work

from .test_bundled_model import MODELS

DIGITS = str(MODELS / "digits.bin")


@pytest.mark.parametrize("url", ["socket://[::1", "serial://[x", "socket://[::1/x"])
def test_malformed_device_urls_are_invalid_url(url):
    with pytest.raises(InvalidURL) as e:
        parse_url(url)
    assert e.value.field == "url"


@pytest.mark.parametrize("source", [None, 5, b"net.bin", ["net.bin"]])
def test_load_refuses_what_is_not_a_path(source):
    with pytest.raises(InvalidArgument) as e:
        dvsdk.load(source, "sim://")
    assert e.value.field == "net"


def test_a_ragged_input_and_an_array_output_name_are_refused():
    with dvsdk.load(DIGITS, "sim://") as net:
        with pytest.raises(InvalidArgument, match="not an array"):
            net.run([[1.0, 2.0], [3.0]])
        net.run(np.zeros(net.inputs[0]["shape"], np.float32))
        from dvsdk.runtime.ipu import class_map
        with pytest.raises(InvalidArgument) as e:
            class_map(net, np.zeros(3))
        assert e.value.field == "output"


def test_board_model_of_a_conv_with_no_output_channels_does_not_divide_by_zero():
    work = step_work("Conv", {}, [np.zeros((1, 3, 4, 4)), np.zeros((0, 3, 1, 1))],
                     [np.zeros((1, 0, 4, 4))])
    assert work["macs"] == 0 and work["bytes"] >= 0
