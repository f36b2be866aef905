"""Discrete Fourier transforms on neuron against PyTorch CPU (torch_neuronx/ops/fft.py),
natively: a slice of the `torch.fft` OpInfo entries (complex, real-to-complex and
complex-to-real, 1-d and n-d, forward and backward), every normalization, and `out=`."""

from __future__ import annotations

import pytest
import torch
from opinfo import fallback_disabled, find
from test_ops_nn import check_family

ENTRIES = ["fft.fft", "fft.ifft2", "fft.rfft", "fft.irfftn", "fft.hfft", "fft.ihfft2", "stft"]


@pytest.mark.parametrize("name", ENTRIES)
def test_opinfo_float32_forward_backward(name: str) -> None:
    assert check_family(find(name), torch.float32, grad=True, max_samples=3) > 0


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
        got = fn(x.to("neuron"), norm).cpu()
    torch.testing.assert_close(got, fn(x, norm), rtol=1.3e-5, atol=1e-5)


def test_out_and_errors() -> None:
    x = torch.randn(8)
    out = torch.empty(5, dtype=torch.complex64, device="neuron")
    with fallback_disabled():
        torch.fft.rfft(x.to("neuron"), out=out)
    torch.testing.assert_close(out.cpu(), torch.fft.rfft(x), rtol=1.3e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        torch.fft.fft(torch.randn(4, device="neuron"), n=0)
