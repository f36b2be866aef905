"""Sorting-family ops with data-dependent sizes on neuron against PyTorch CPU
(torch_neuronx/ops/sorting.py), natively: `unique` and `unique_consecutive`."""

from __future__ import annotations

import pytest
import torch
from opinfo import check_op, fallback_disabled, find

NAN = float("nan")


@pytest.mark.parametrize("name", ["unique", "unique_consecutive"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_opinfo(name: str, dtype: torch.dtype) -> None:
    with fallback_disabled():
        assert check_op(find(name), dtype, max_samples=8) > 0


@pytest.mark.parametrize(
    "x",
    [
        torch.tensor([3.0, NAN, 1.0, NAN, -0.0, 0.0, 3.0]),
        torch.tensor([[2, 1], [2, 2], [1, 1]]),
        torch.tensor([True, False, True]),
        torch.empty(0),
    ],
    ids=["nan_and_signed_zero", "int_2d", "bool", "empty"],
)
@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("counts", [False, True])
def test_unique_outputs(x: torch.Tensor, inverse: bool, counts: bool) -> None:
    with fallback_disabled():
        for fn in (torch.unique, torch.unique_consecutive):
            got = fn(x.to("neuron"), return_inverse=inverse, return_counts=counts)
            want = fn(x, return_inverse=inverse, return_counts=counts)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g.cpu(), w, equal_nan=True)


def test_unique_consecutive_along_dim() -> None:
    x = torch.tensor([[1, 1, 2, 2], [3, 3, 4, 5]])
    with fallback_disabled():
        for dim in (0, 1, -1):
            got = torch.unique_consecutive(x.to("neuron"), return_inverse=True, return_counts=True, dim=dim)
            for g, w in zip(got, torch.unique_consecutive(x, return_inverse=True, return_counts=True, dim=dim)):
                assert torch.equal(g.cpu(), w)
