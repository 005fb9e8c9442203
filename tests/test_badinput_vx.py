"""``dvsdk.vx.Tensor`` with dimensions too large to hold: VxError
``VX_ERROR_NO_MEMORY`` naming ``dims`` and the byte limit (a compiled program's largest
tensor), not numpy's ValueError ("array is too big") or an 8 GiB allocation
(dvsdk/vx/tensor.py)."""

from __future__ import annotations

import numpy as np
import pytest

import dvsdk.vx as vx
from dvsdk.compiler.limits import MAX_TENSOR_BYTES
from dvsdk.vx.types import Status, VxError


@pytest.mark.parametrize("dims", [[2 ** 40, 2 ** 40], [2 ** 31, 1, 1, 1], [1 << 16, 1 << 16, 2, 1]])
def test_tensor_too_large(dims):
    with vx.Context("sim://") as ctx, pytest.raises(VxError) as info:
        vx.Tensor(ctx, dims, vx.Type.FLOAT32)
    assert info.value.status == Status.ERROR_NO_MEMORY
    assert info.value.field == "dims" and info.value.value == tuple(dims)
    assert f"{MAX_TENSOR_BYTES:,}" in str(info.value.limit)


def test_tensor_at_the_limit_is_allowed():
    """The largest allowed INT8 tensor (exactly the limit) is made; one byte more is not."""
    n = MAX_TENSOR_BYTES // (1 << 20)
    with vx.Context("sim://") as ctx:
        assert vx.Tensor(ctx, [1 << 10, 1 << 10, n, 1], vx.Type.INT8).dims == \
            (1 << 10, 1 << 10, n, 1)
        with pytest.raises(VxError):
            vx.Tensor(ctx, [MAX_TENSOR_BYTES + 1], vx.Type.INT8)


@pytest.mark.parametrize("dims", [[8.5, 8], [True, 4], ["8", 4.0000001], [np.True_, 4]])
def test_tensor_dims_that_are_not_whole_numbers(dims):
    """8.5 was truncated to 8 (and True taken as 1): refused as an invalid dimension."""
    with vx.Context("sim://") as ctx, pytest.raises(VxError) as info:
        vx.Tensor(ctx, dims, vx.Type.FLOAT32)
    assert info.value.status == Status.ERROR_INVALID_DIMENSION and info.value.field == "dims"


def test_tensor_dims_of_whole_floats_and_numpy_integers_are_taken():
    with vx.Context("sim://") as ctx:
        assert vx.Tensor(ctx, [np.int64(3), 4.0], vx.Type.FLOAT32).dims == (3, 4)
