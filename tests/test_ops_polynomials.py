"""Orthogonal polynomials `torch.special.*_polynomial_*` on neuron against PyTorch CPU
(torch_neuronx/ops/polynomials.py), natively: every OpInfo sample, plus the special cases
(negative and fractional degrees, the interval ends, high degrees, Hermite's degree limit)."""

from __future__ import annotations

import pytest
import torch
from compare import check
from opinfo import OPS, check_op, fallback_disabled

NAMES = sorted(name for name, _ in OPS if "polynomial" in name)


@pytest.mark.parametrize("name", NAMES)
def test_opinfo_float32(name: str) -> None:
    with fallback_disabled():
        assert check_op(OPS[(name, "")], torch.float32) > 0


@pytest.mark.parametrize("name", NAMES)
def test_special_cases(name: str) -> None:
    fn = getattr(torch.special, name.removeprefix("special."))
    x = torch.tensor([-1.0, -0.999, -0.5, 0.0, 1e-9, 0.3, 0.5, 0.999, 1.0, 1.5])[:, None]
    n = torch.tensor([-2.0, 0.0, 1.0, 2.5, 5.0, 7.0, 9.0, 20.0, 200.0])
    with fallback_disabled():
        got = fn(x.to("neuron"), n.to("neuron")).cpu()
    want = fn(x, n)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
    with fallback_disabled():
        check(lambda t: fn(t, 3), x)
