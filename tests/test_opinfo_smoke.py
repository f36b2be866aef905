"""A first OpInfo slice: the ops the foundation lowers itself."""

from __future__ import annotations

import pytest
import torch
from opinfo import check_op, fallback_disabled, find


@pytest.mark.parametrize("name", ["add", "sub", "mul", "eq", "lt", "exp", "tanh", "sigmoid", "where"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_opinfo_native(name, dtype):
    with fallback_disabled():
        assert check_op(find(name), dtype, max_samples=8) > 0
