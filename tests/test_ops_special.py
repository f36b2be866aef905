"""Bessel and Airy functions `torch.special.*` (torch_neuronx/ops/bessel.py) on neuron against
PyTorch CPU, natively: every OpInfo sample, a dense grid over [-50, 50] with the edge values CPU
defines (+-0, negatives where Y and K are NaN, +-inf, NaN, |x| up to 1e30), integer and bool
promotion, `out=`, and float64 accuracy against mpmath, since CPU's own float64 results are off."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
from compare import check
from opinfo import OPS, check_op, fallback_disabled

NAMES = [
    "airy_ai",
    "bessel_j0",
    "bessel_j1",
    "bessel_y0",
    "bessel_y1",
    "modified_bessel_k0",
    "modified_bessel_k1",
    "scaled_modified_bessel_k0",
    "scaled_modified_bessel_k1",
]
MAGNITUDES = [1e-30, 2.0, 1e3, 1e10, 1e30, math.inf]
EDGES = [*MAGNITUDES, *(-m for m in MAGNITUDES), 0.0, -0.0, 1e-5, 5.0, math.nan]
DECADES = torch.logspace(0, 10, 201, dtype=torch.float64)
GRID = torch.cat([torch.linspace(-50, 50, 20001, dtype=torch.float64), torch.tensor(EDGES), DECADES, -DECADES])

# PyTorch CPU's float64 results for 2 < |x| < 12 are off by up to these (absolute; mpmath agrees
# with ours to 1e-13, test_float64_accuracy): its approximations that take over at |x| = 5
# (J, Y; x = -2.09 for Ai) carry errors up to ~1e-6. Its K0 and K1 are exact to float64.
CPU_FLOAT64_ERROR = {"airy_ai": 5e-6, "bessel_j0": 1e-6, "bessel_j1": 1e-6, "bessel_y0": 1e-6, "bessel_y1": 2e-6}


def _fn(name: str) -> Callable[..., torch.Tensor]:
    return getattr(torch.special, name)


def _with_out(name: str) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    fn = _fn(name)
    return lambda x, out: fn(x, out=out)


@pytest.mark.parametrize("name", NAMES)
def test_opinfo_float32(name: str) -> None:
    with fallback_disabled():
        assert check_op(OPS[(f"special.{name}", "")], torch.float32) > 0


@pytest.mark.parametrize("name", NAMES)
def test_grid_float32(name: str) -> None:
    """Within the suite's float32 tolerance (rtol 1.3e-5, atol 1e-5) everywhere, including
    |x| up to 1e10, where CPU's phase (rounded to float32) decides the value."""
    with fallback_disabled():
        check(_fn(name), GRID.float())


@pytest.mark.parametrize("name", NAMES)
def test_grid_float64(name: str) -> None:
    """The suite's float64 tolerance (1e-10) everywhere but 2 < |x| < 12, where CPU's own error
    is the atol."""
    inexact = (GRID.abs() > 2) & (GRID.abs() < 12)
    with fallback_disabled():
        check(_fn(name), GRID[~inexact])
        check(_fn(name), GRID[inexact], rtol=1e-10, atol=CPU_FLOAT64_ERROR.get(name, 1e-10))


# mpmath's functions, as f(mpmath, x)
REFERENCE = {
    "airy_ai": lambda m, x: m.airyai(x),
    "bessel_j0": lambda m, x: m.besselj(0, x),
    "bessel_j1": lambda m, x: m.besselj(1, x),
    "bessel_y0": lambda m, x: m.bessely(0, x),
    "bessel_y1": lambda m, x: m.bessely(1, x),
    "modified_bessel_k0": lambda m, x: m.besselk(0, x),
    "modified_bessel_k1": lambda m, x: m.besselk(1, x),
    "scaled_modified_bessel_k0": lambda m, x: m.exp(x) * m.besselk(0, x),
    "scaled_modified_bessel_k1": lambda m, x: m.exp(x) * m.besselk(1, x),
}


@pytest.mark.parametrize("name", NAMES)
def test_float64_accuracy(name: str) -> None:
    """Against mpmath at 30 digits: within 1e-13 of the value, and where the function
    oscillates (J, Y, Ai at x < 0) within 1e-13 absolutely near its zeros. Ai(x < 0) is off
    from the true value by ~1e-14 at x = -50 because its phase is rounded as on CPU."""
    mpmath = pytest.importorskip("mpmath")
    x = torch.cat([torch.linspace(-50, 50, 401, dtype=torch.float64), torch.tensor([1.999, 2.001, 1e-3, 1e-20])])
    if name not in ("airy_ai", "bessel_j0", "bessel_j1"):
        x = x[x > 0]  # NaN below 0
    with mpmath.workdps(30):
        want = torch.tensor([float(REFERENCE[name](mpmath, mpmath.mpf(v))) for v in x.tolist()], dtype=torch.float64)
    with fallback_disabled():
        got = _fn(name)(x.to("neuron")).cpu()
    oscillates = x < 0 if name == "airy_ai" else torch.full_like(x, name.startswith("bessel"), dtype=torch.bool)
    torch.testing.assert_close(got[oscillates], want[oscillates], rtol=1e-13, atol=1e-13)
    torch.testing.assert_close(got[~oscillates], want[~oscillates], rtol=1e-13, atol=0)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_integer_inputs_promote(dtype: torch.dtype) -> None:
    x = torch.tensor([0, 1, 2, 3, 7, 100]).to(dtype)
    with fallback_disabled():
        for name in NAMES:
            assert check(_fn(name), x).dtype == torch.float32


def test_out_and_signed_zero() -> None:
    x = torch.tensor([-3.0, -0.0, 0.5, 2.5, 40.0])
    with fallback_disabled():
        for name in NAMES:
            check(_with_out(name), x, torch.empty(5))
        assert torch.special.bessel_j1(torch.tensor([-0.0], device="neuron")).cpu().signbit().item()  # as CPU


def test_complex_rejected() -> None:
    with fallback_disabled(), pytest.raises(RuntimeError, match="needs real tensors"):
        torch.special.bessel_j0(torch.ones(2, dtype=torch.complex64, device="neuron"))
