"""Ops Transformers' mixture-of-experts layers need on an accelerator: integer `histc`
(tokens per expert; PyTorch CPU has no integer histc, so the CPU fallback cannot serve it)."""

from __future__ import annotations

import pytest
import torch
from opinfo import check_op, fallback_disabled, find


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc_opinfo(dtype):
    with fallback_disabled():
        assert check_op(find("histc"), dtype, max_samples=12) > 0


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_histc_integer_expert_counts(dtype):
    # as transformers.integrations.moe.grouped_mm_experts_forward calls it: ids sorted, max = experts - 1
    ids = torch.tensor([0, 0, 1, 3, 3, 3, 5, 7, 7, 9, -1], dtype=dtype)
    with fallback_disabled():
        counts = torch.histc(ids.to("neuron"), bins=8, min=0, max=7)
    expected = torch.histc(ids.double(), bins=8, min=0, max=7).to(dtype)  # CUDA's integer rule agrees here
    assert counts.dtype == dtype and counts.device.type == "neuron"
    assert torch.equal(counts.cpu(), expected)


def test_histc_data_range_and_edges():
    with fallback_disabled():
        for x in (torch.full((5,), 2.0), torch.linspace(0, 1, 11), torch.randn(300), torch.tensor([])):
            for bins, lo, hi in ((4, 0, 0), (10, 0, 1), (7, -0.5, 0.25)):
                assert torch.equal(torch.histc(x.to("neuron"), bins, lo, hi).cpu(), torch.histc(x, bins, lo, hi))


def test_histc_bad_bins():
    with pytest.raises(RuntimeError, match="histc: bins must be > 0"):
        torch.histc(torch.ones(3, device="neuron"), bins=0)
