"""complex32 (`chalf`) on neuron, against PyTorch CPU on the same inputs.

complex32 is a storage dtype on neuron (JAX has none): storages hold each element's bits, the
conversions, transfers, views, factories and in-place fills run on device, and every other op runs
PyTorch's CPU kernel, so it computes what CPU computes or raises CPU's own error."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch

DEV = "neuron"
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # CPU: "ComplexHalf support is experimental"


def _values(shape: tuple = (5, 7), dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Random values plus the edges of float16: overflow to inf, subnormals, signed zero, inf, nan."""
    x = torch.randn(shape, dtype=torch.float64) * 3
    flat = x.view(-1)
    flat[:8] = torch.tensor([70000.0, -65520.0, 1e-6, 3e-8, -0.0, float("inf"), float("nan"), 65504.0])
    if dtype.is_complex:
        return torch.complex(x, torch.randn(shape, dtype=torch.float64).flip(0) * 5).to(dtype)
    return x.to(dtype)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same dtype, shape and values (complex32 compared part by part, nan equal to nan)."""
    assert actual.device.type == "cpu" and actual.dtype == expected.dtype and actual.shape == expected.shape
    if expected.dtype == torch.complex32:
        actual, expected = torch.view_as_real(actual).float(), torch.view_as_real(expected).float()
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True)


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever runs under it stays on device: the CPU fallback is an error."""
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK", "1")


SOURCES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.int64, torch.bool]


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("source", SOURCES, ids=str)
def test_to_complex32_on_device(source: torch.dtype) -> None:
    x = _values(dtype=source) if source != torch.bool else torch.rand(5, 7) > 0.5
    if source == torch.int64:
        x = (torch.randn(5, 7) * 1e5).long()
    on_device = x.to(DEV)
    assert_same(on_device.chalf().cpu(), x.chalf())
    assert_same(on_device.to(torch.complex32).cpu(), x.to(torch.complex32))
    assert_same(on_device.t().chalf().cpu(), x.t().chalf())  # a permuted source
    out = torch.empty(7, 5, dtype=torch.complex32, device=DEV)
    assert_same(out.copy_(on_device.t()).cpu(), torch.empty(7, 5, dtype=torch.complex32).copy_(x.t()))


TARGETS = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.complex64, torch.complex128, torch.bool]


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("target", TARGETS, ids=str)
def test_from_complex32_on_device(target: torch.dtype) -> None:
    c = _values(dtype=torch.complex64).chalf()
    on_device = c.to(DEV)
    assert_same(on_device.to(target).cpu(), c.to(target))
    assert_same(on_device[1:, ::2].to(target).cpu(), c[1:, ::2].to(target))  # a strided view
    assert_same(on_device.conj().to(target).cpu(), c.conj().to(target))  # a lazy conjugate
    out = torch.empty(5, 7, dtype=target, device=DEV)
    assert_same(out.copy_(on_device).cpu(), torch.empty(5, 7, dtype=target).copy_(c))


@pytest.mark.usefixtures("no_fallback")
def test_transfers_keep_the_bits() -> None:
    c = _values(dtype=torch.complex64).chalf()
    on_device = c.to(DEV)
    assert on_device.dtype == torch.complex32 and on_device.element_size() == 4
    assert torch.equal(on_device.cpu().view(torch.int32), c.view(torch.int32))
    assert torch.equal(on_device.t().cpu().view(torch.int32), c.t().contiguous().view(torch.int32))
    assert torch.equal(on_device[::2, 1:3].cpu().view(torch.int32), c[::2, 1:3].contiguous().view(torch.int32))
    host = torch.empty(5, 7, dtype=torch.complex32)
    assert torch.equal(host.copy_(on_device).view(torch.int32), c.view(torch.int32))
    into = torch.empty(5, 7, dtype=torch.complex32, device=DEV)
    assert torch.equal(into.copy_(c).cpu().view(torch.int32), c.view(torch.int32))
    assert on_device[2, 3].item() == c[2, 3].item()
    assert on_device.tolist()[1] == c.tolist()[1]
    assert torch.equal(on_device.conj().cpu().view(torch.int32), c.conj().resolve_conj().view(torch.int32))


@pytest.mark.usefixtures("no_fallback")
def test_views() -> None:
    c = _values(dtype=torch.complex64).chalf()
    on_device = c.to(DEV)
    assert_same(torch.view_as_real(on_device).cpu(), torch.view_as_real(c))
    assert_same(on_device.real.cpu(), c.real)
    assert_same(on_device.imag.cpu(), c.imag)
    assert_same(on_device.view(torch.float16).cpu(), c.view(torch.float16))
    assert_same(on_device.view(torch.int32).cpu(), c.view(torch.int32))
    assert_same(on_device.t()[1].cpu(), c.t()[1])
    pairs = torch.randn(4, 3, 2).half()
    assert_same(torch.view_as_complex(pairs.to(DEV)).cpu(), torch.view_as_complex(pairs))
    assert_same(pairs.to(DEV).view(torch.complex32).cpu(), pairs.view(torch.complex32))
    # a write through a float16 view is seen by the complex32 tensor, and the other way round
    expected = c.clone()
    torch.view_as_real(expected)[..., 1].fill_(2.5)
    torch.view_as_real(on_device)[..., 1].fill_(2.5)
    assert_same(on_device.cpu(), expected)
    expected[1:3].fill_(1 - 3j)
    on_device[1:3].fill_(1 - 3j)
    assert_same(torch.view_as_real(on_device).cpu(), torch.view_as_real(expected))


FACTORIES: dict[str, Callable[[str], torch.Tensor]] = {
    "empty_zero_": lambda d: torch.empty(3, 4, dtype=torch.complex32, device=d).zero_(),
    "zeros": lambda d: torch.zeros(3, 4, dtype=torch.complex32, device=d),
    "ones": lambda d: torch.ones(3, 4, dtype=torch.complex32, device=d),
    "full": lambda d: torch.full((3, 4), 1.5 - 70000j, dtype=torch.complex32, device=d),
    "zeros_like": lambda d: torch.zeros_like(torch.ones(2, 3, device=d), dtype=torch.complex32),
    "ones_like": lambda d: torch.ones_like(torch.ones(2, 3, dtype=torch.complex32, device=d)),
    "full_like": lambda d: torch.full_like(torch.ones(2, 3, dtype=torch.complex32, device=d), 0.1 + 2j),
    "fill_": lambda d: torch.empty(3, 4, dtype=torch.complex32, device=d).fill_(0.3 + 0.7j),
    "fill_tensor": lambda d: torch.empty(3, dtype=torch.complex32, device=d).fill_(torch.tensor(2 - 1j, device=d)),
}


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("name", list(FACTORIES))
def test_factories(name: str) -> None:
    assert_same(FACTORIES[name](DEV).cpu(), FACTORIES[name]("cpu"))


@pytest.mark.usefixtures("no_fallback")
def test_complex_of_float16_parts() -> None:
    real, imag = _values((3, 4), torch.float16), torch.randn(4).half()
    assert_same(torch.complex(real.to(DEV), imag.to(DEV)).cpu(), torch.complex(real, imag))


@pytest.mark.usefixtures("no_fallback")
def test_clone_and_contiguous() -> None:
    c = _values(dtype=torch.complex64).chalf()
    on_device = c.to(DEV)
    assert_same(on_device.clone().cpu(), c.clone())
    assert_same(on_device.t().contiguous().cpu(), c.t().contiguous())
    assert on_device.t().clone().stride() == c.t().clone().stride()
    assert_same(on_device.conj().resolve_conj().cpu(), c.conj().resolve_conj())
    clone = on_device.clone()
    clone.zero_()
    assert_same(on_device.cpu(), c)  # the clone has storage of its own


UNSUPPORTED: dict[str, Callable[[torch.Tensor], object]] = {
    "sum": lambda c: c.sum(),
    "sum_dim": lambda c: c.sum(0),
    "mean": lambda c: c.mean(),
    "exp": torch.exp,
    "sqrt": torch.sqrt,
    "div": lambda c: c / c,
    "angle": torch.angle,
    "mm": lambda c: c @ c.t(),
    "cumsum": lambda c: c.cumsum(0),
    "gather": lambda c: c.gather(0, torch.zeros(1, 7, dtype=torch.long, device=c.device)),
    "lt": lambda c: c < c,
    "clamp": lambda c: c.clamp(0, 1),
    "arange": lambda c: torch.arange(3, dtype=torch.complex32, device=c.device),
    "polar_of_float16": lambda c: torch.polar(c.real.contiguous(), c.imag.contiguous()),
    "exp_": lambda c: c.clone().exp_(),
    "selu": torch.selu,  # a decomposition on neuron, whose pieces CPU would compute
}


@pytest.mark.parametrize("name", list(UNSUPPORTED))
def test_unsupported_ops_raise_cpus_error(name: str) -> None:
    """Ops CPU does not implement for complex32 raise CPU's exception and message, never a
    result computed on the bits."""
    c = _values(dtype=torch.complex64).chalf()
    with pytest.raises(Exception) as on_cpu:
        UNSUPPORTED[name](c)
    with pytest.raises(type(on_cpu.value)) as on_device:
        UNSUPPORTED[name](c.to(DEV))
    assert str(on_device.value) == str(on_cpu.value)


SUPPORTED_ON_CPU: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "add": lambda c: c + c,
    "mul": lambda c: c * c,
    "sub_scalar": lambda c: c - 1,
    "neg": lambda c: -c,
    "abs": torch.abs,
    "conj_physical": torch.conj_physical,
    "cat": lambda c: torch.cat([c, c[:2]]),
    "cat_with_complex64": lambda c: torch.cat([c, c[:2].to(torch.complex64)]),
    "eq": lambda c: c == c.flip(0),
    "where": lambda c: torch.where(c.real > 0, c, c.conj()),
    "index": lambda c: c[[0, 3]],
    "add_": lambda c: c.clone().add_(c),
    "add_out": lambda c: torch.add(c, c, out=torch.empty_like(c)),
}


@pytest.mark.parametrize("name", list(SUPPORTED_ON_CPU))
def test_ops_cpu_supports_compute_as_cpu(name: str) -> None:
    """The rest of what CPU implements for complex32 runs PyTorch's CPU kernel (the fallback)."""
    c = _values(dtype=torch.complex64).chalf()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        actual = SUPPORTED_ON_CPU[name](c.to(DEV))
    assert actual.device.type == DEV
    assert_same(actual.cpu(), SUPPORTED_ON_CPU[name](c))


@pytest.mark.usefixtures("no_fallback")
@pytest.mark.parametrize("source", [torch.float32, torch.complex64])
def test_gradient_of_chalf(source: torch.dtype) -> None:
    x = _values(dtype=source).to(torch.float32 if source == torch.float32 else source)
    x[0, :8] = 0.5  # finite gradients
    grad = _values(dtype=torch.complex64).chalf()
    cpu = x.clone().requires_grad_()
    cpu.chalf().backward(grad)
    on_device = x.to(DEV).requires_grad_()
    on_device.chalf().backward(grad.to(DEV))
    assert_same(on_device.grad.cpu(), cpu.grad)
    # through view_as_real, as a loss on complex32 values reaches them
    cpu.grad = on_device.grad = None
    torch.view_as_real(cpu.chalf()).float().pow(2).sum().backward()
    torch.view_as_real(on_device.chalf()).float().pow(2).sum().backward()
    assert_same(on_device.grad.cpu(), cpu.grad)


def test_compiled_graph_with_complex32() -> None:
    """A graph's complex32 nodes run eagerly (the eager rule), the rest compiles."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        c = (x * 2).chalf()
        return torch.view_as_real(c).float()[..., 0] + c.to(torch.complex64).imag

    x = torch.randn(4, 5)
    compiled = torch.compile(fn, backend="neuron")
    assert_same(compiled(x.to(DEV)).cpu(), fn(x))
    with pytest.raises(NotImplementedError, match="not implemented for 'ComplexHalf'"):
        torch.compile(lambda c: c.sum(), backend="neuron")(x.chalf().to(DEV))
