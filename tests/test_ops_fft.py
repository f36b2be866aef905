"""Discrete Fourier transforms on neuron against PyTorch CPU (torch_neuronx/ops/fft.py),
natively: a slice of the `torch.fft` OpInfo entries (complex, real-to-complex and
complex-to-real, 1-d and n-d, forward and backward), every normalization, and `out=`."""

from __future__ import annotations

import pytest
import torch
from compare import check
from families import check_family
from opinfo import fallback_disabled, find

ENTRIES = ["fft.fft", "fft.ifft2", "fft.rfft", "fft.irfftn", "fft.hfft", "fft.ihfft2", "stft"]


@pytest.mark.parametrize("name", ENTRIES)
def test_opinfo_float32_forward_backward(name: str) -> None:
    assert check_family(("fft",), find(name), torch.float32, grad=True, max_samples=3) > 0


@pytest.mark.parametrize("norm", [None, "forward", "ortho", "backward"])
@pytest.mark.parametrize(
    "fn",
    [
        lambda x, norm: torch.fft.fftn(x.to(torch.complex64), dim=(0, 2), norm=norm),
        lambda x, norm: torch.fft.ifft(x, n=7, norm=norm),
        lambda x, norm: torch.fft.rfft2(x, s=(4, 6), norm=norm),
        lambda x, norm: torch.fft.irfft(torch.fft.rfft(x), n=5, norm=norm),
    ],
    ids=["fftn_c2c", "ifft_padded", "rfft2_cropped", "irfft_odd"],
)
def test_normalizations(fn: object, norm: str | None) -> None:
    x = torch.randn(3, 4, 5)
    with fallback_disabled():
        check(lambda t: fn(t, norm), x)


def test_out_and_errors() -> None:
    x = torch.randn(8)
    with fallback_disabled():
        check(lambda t: torch.fft.rfft(t, out=torch.empty(5, dtype=torch.complex64, device=t.device)), x)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.randn(4, device="neuron"), n=0)
