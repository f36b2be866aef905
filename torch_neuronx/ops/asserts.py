"""Device-side asserts: `torch._assert_async` (what `torch._check` and data-dependent guards in
models such as DBRX lower to). As on CUDA, a failed assert is reported at the next host sync."""

from __future__ import annotations

from typing import Any

import torch

from . import check, lowering

aten = torch.ops.aten


@lowering(aten._assert_async.default, aten._assert_async.msg)
def assert_async(x: Any, message: str = "Expected Tensor with single nonzero value, but got zero") -> None:
    if x.size != 1:
        raise RuntimeError("neuron: _assert_async: Boolean value of Tensor with more than one value is ambiguous")
    check(x.reshape(()) != 0, RuntimeError, message)
