"""histogram and histogramdd on neuron against PyTorch CPU (torch_neuronx/ops/histogram.py),
natively: OpInfo's samples, and the edge rules (equal values, no data, weights, density)."""

from __future__ import annotations

import pytest
import torch
from compare import assert_same, to
from families import check_family
from opinfo import fallback_disabled, find


@pytest.mark.parametrize("name", ["histogram", "histogramdd"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_opinfo(name: str, dtype: torch.dtype) -> None:
    assert check_family(("histogram",), find(name), dtype, grad=False, max_samples=8) > 0


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.histogram(x[:2] * 0 + 2, 2),  # equal values: widened by 0.5 each way
        lambda x: torch.histogram(x[:0], 3),  # no data: edges 0..1
        lambda x: torch.histogram(x, 7, range=(-1.0, 2.0), weight=x.abs(), density=True),
        lambda x: torch.histogram(x, torch.tensor([-1.0, 0.0, 0.5, 3.0], device=x.device)),
        lambda x: torch.histogramdd(x.reshape(-1, 2), [3, 4], range=[-1.0, 1.0, -2.0, 0.5], density=True),
        lambda x: torch.histogramdd(x.reshape(-1, 3), [torch.tensor([-1.0, 0.0, 1.0], device=x.device)] * 3),
    ],
    ids=["equal", "empty", "weighted-density", "edges", "dd-range-density", "dd-edges"],
)
def test_edge_rules(call: object) -> None:
    x = torch.randn(600)
    with fallback_disabled():
        expected, got = call(x), call(*to("neuron", (x,)))
    assert_same(expected.hist, got.hist)
    assert_same(
        list(expected.bin_edges) if isinstance(expected.bin_edges, tuple) else expected.bin_edges,
        list(got.bin_edges) if isinstance(got.bin_edges, tuple) else got.bin_edges,
    )


def test_reversed_range_is_refused() -> None:
    with pytest.raises(RuntimeError, match="min should not exceed max, but got min 3 max 1 for dimension 0"):
        torch.histogram(torch.ones(3, device="neuron"), 2, range=(3.0, 1.0))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("bins, lo, hi", [(100, 0, 0), (7, -2, 5), (100, -3.3, 7.1), (1, 0, 0), (33, 0, 0)])
def test_histc_bins_as_cpu(dtype: torch.dtype, bins: int, lo: float, hi: float) -> None:
    """CPU's histc: linspace edges in the dtype from double outer edges; each element's bin
    (x - first) * bins / (last - first) in the dtype, truncated; exact counts."""
    torch.manual_seed(0)
    for scale in (1, 7, 40):
        x = (torch.randn(500) * scale + scale / 3).to(dtype)
        with fallback_disabled():
            assert_same(torch.histc(x, bins, lo, hi), torch.histc(x.to("neuron"), bins, lo, hi), rtol=0, atol=0)
