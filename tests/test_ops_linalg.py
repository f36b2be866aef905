"""Matrix products, linear algebra and distances on neuron against PyTorch CPU
(torch_neuronx/ops/linalg.py), natively: a slice of the OpInfo entries, forward and backward."""

from __future__ import annotations

import pytest
import torch
from compare import assert_same
from families import check_family
from opinfo import fallback_disabled, find

ENTRIES = [
    "mm",
    "addmm",
    "baddbmm",
    "matmul",
    "nn.functional.bilinear",
    "cdist",
    "cov",
    "corrcoef",
    "linalg.cholesky",
    "linalg.qr",
    "linalg.solve",
    "linalg.inv",
    "linalg.det",
    "linalg.eigh",
    "linalg.eig",
    "linalg.eigvals",
    "linalg.householder_product",
    "ormqr",
]


@pytest.mark.parametrize("name", ENTRIES)
def test_opinfo_float32_forward_backward(name: str) -> None:
    assert check_family(("linalg",), find(name), torch.float32, grad=True, max_samples=3) > 0


def test_geqrf_is_lapacks_compact_qr() -> None:
    assert check_family(("linalg",), find("geqrf"), torch.float64, grad=False, max_samples=3) > 0


def test_matrix_exp() -> None:
    """float64 (forward and backward) equals CPU's. In float32 XLA's Pade approximant and
    PyTorch's Taylor polynomials each err by up to ~1e-3 relative on OpInfo's batch sample, so
    there neuron must be at least as close to the float64 result as CPU is."""
    assert check_family(("linalg",), find("matrix_exp"), torch.float64, grad=True, max_samples=3) > 0
    for sample in list(find("matrix_exp").sample_inputs("cpu", torch.float32))[:3]:
        exact = torch.linalg.matrix_exp(sample.input.double())
        scale = exact.abs().amax((-2, -1), keepdim=True)
        cpu_error = ((torch.linalg.matrix_exp(sample.input) - exact).abs() / scale).max()
        dev_error = ((torch.linalg.matrix_exp(sample.input.to("neuron")).cpu() - exact).abs() / scale).max()
        assert dev_error <= max(cpu_error, 1e-6), (dev_error, cpu_error)


@pytest.mark.parametrize("p", [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")])
def test_cdist_norms_and_zero_distances(p: float) -> None:
    a = torch.randn(2, 5, 3)
    b = torch.cat([a[:, :2], torch.randn(2, 3, 3)], 1)  # rows 0-1 coincide: distance 0, gradient 0
    cpu = [a.clone().requires_grad_(), b.clone().requires_grad_()]
    dev = [t.detach().to("neuron").requires_grad_() for t in cpu]
    with fallback_disabled():
        got = torch.cdist(*dev, p=p)
        got.sum().backward()
    want = torch.cdist(*cpu, p=p)
    want.sum().backward()
    assert_same(want.detach(), got.detach())
    for d, c in zip(dev, cpu):
        torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=1e-4, atol=1e-5)


def test_equal() -> None:
    x = torch.tensor([1.0, float("nan"), 3.0])
    with fallback_disabled():
        for a, b in [(x[::2], x[::2]), (x, x), (x[:2], x[:1]), (torch.arange(3), torch.arange(3.0))]:
            assert torch.equal(a.to("neuron"), b.to("neuron")) == torch.equal(a, b)
        assert torch.equal(torch.empty(0, device="neuron"), torch.empty(0, device="neuron"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["NN", "TN", "NT", "TT"])
def test_products_of_transposed_operands(layout: str, dtype: torch.dtype) -> None:
    """Each operand read as stored or through a transpose (weight gradients are x^T @ g,
    attention's backward p^T @ dO): eager and compiled match CPU."""

    def operand(x: torch.Tensor, transposed: str) -> torch.Tensor:
        return x.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed == "T" else x

    def products(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, ab: torch.Tensor, bb: torch.Tensor) -> list:
        a, b, ab, bb = operand(a, layout[0]), operand(b, layout[1]), operand(ab, layout[0]), operand(bb, layout[1])
        return [a @ b, torch.addmm(c, a, b, beta=0.5), ab @ bb, torch.baddbmm(c, ab, bb, alpha=2.0)]

    make = torch.Generator().manual_seed(0)
    shapes = [(48, 40), (40, 24), (48, 24), (3, 48, 40), (3, 40, 24)]
    inputs = [torch.randn(s, generator=make).to(dtype) for s in shapes]
    want = products(*inputs)
    rtol, atol = (1e-5, 1e-4) if dtype == torch.float32 else (1.6e-2, 5e-2)
    with fallback_disabled():
        eager = products(*[x.to("neuron") for x in inputs])
        compiled = torch.compile(products, backend="neuron", fullgraph=True)(*[x.to("neuron") for x in inputs])
    for w, e, c in zip(want, eager, compiled):
        torch.testing.assert_close(e.cpu(), w, rtol=rtol, atol=atol)
        torch.testing.assert_close(c.cpu(), w, rtol=rtol, atol=atol)
