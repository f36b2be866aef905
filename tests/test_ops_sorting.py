"""Sorting-family ops on neuron against PyTorch CPU (torch_neuronx/ops/sorting.py), natively:
`unique` and `unique_consecutive` (data-dependent sizes), and `isin`."""

from __future__ import annotations

import pytest
import torch
from opinfo import check_op, fallback_disabled, find

import torch_neuronx

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


@pytest.mark.parametrize(
    "elements, test_elements",
    [
        (torch.tensor([1.5, 2.0, NAN, -0.0]), torch.tensor([2, 3, 0])),
        (torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([257, 3])),
        (torch.randint(0, 9, (3, 4), generator=torch.Generator().manual_seed(0)), torch.tensor([[1, 4], [7, 7]])),
        (torch.tensor([1, 2, 3]), 2.0),
        (2, torch.tensor([1, 2])),
    ],
    ids=["nan_and_promotion", "uint8_vs_int64", "2d", "scalar_test", "scalar_element"],
)
@pytest.mark.parametrize("invert", [False, True])
def test_isin(elements, test_elements, invert: bool) -> None:
    """One native kernel (no decomposition: stopping criteria in `generate` call it per token)."""
    on_neuron = [x.to("neuron") if isinstance(x, torch.Tensor) else x for x in (elements, test_elements)]
    before = dict(torch_neuronx.metrics()["decompositions"])
    with fallback_disabled():
        got = torch.isin(*on_neuron, invert=invert)
    want = torch.isin(elements, test_elements, invert=invert)
    assert got.device.type == "neuron" and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)
    assert torch_neuronx.metrics()["decompositions"] == before
