"""Elementwise ops on neuron against PyTorch CPU: the family's OpInfo entries with the CPU
fallback disabled, and hand-written cases for promotion, integer exactness, in-place/out=
variants, PyTorch's NaN and rounding semantics, and bad input."""

from __future__ import annotations

import pytest
import torch
from compare import check
from families import MODES, elementwise_entries, run_elementwise
from opinfo import fallback_disabled

ENTRIES = elementwise_entries(activations=False)
IDS = [f"{o.name}.{o.variant_test_name}".rstrip(".") for o in ENTRIES]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("opinfo", ENTRIES, ids=IDS)
def test_opinfo(opinfo: object, mode: str) -> None:
    run_elementwise(opinfo, mode)


def _t(values: list, dtype: torch.dtype) -> torch.Tensor:
    return torch.tensor(values, dtype=dtype)


def test_promotion_with_python_scalars_and_zero_dim_tensors() -> None:
    with fallback_disabled():
        ints, halfs = _t([1, -2, 3], torch.int64), _t([1.5, -2.25, 3.0], torch.float16)
        assert check(lambda x: x + 2.5, ints).dtype == torch.float32
        assert check(lambda x: x * 3, halfs).dtype == torch.float16
        assert check(lambda x: x * 2.0, _t([1, 2], torch.int8)).dtype == torch.float32
        assert check(lambda x, s: x * s, halfs, torch.tensor(2.0, dtype=torch.float64)).dtype == torch.float16
        assert check(lambda x, s: x + s, _t([1, 2], torch.int8), torch.tensor(300)).dtype == torch.int8
        assert check(lambda x, s: x + s, _t([1, 2], torch.int8), torch.tensor(1.5)).dtype == torch.float32
        assert check(lambda x: x / 2, ints).dtype == torch.float32
        assert check(lambda x: x + 1, _t([True, False], torch.bool)).dtype == torch.int64
        assert check(lambda x: x + 300, _t([1, 2], torch.uint8)).dtype == torch.uint8  # wraps
        assert check(lambda x: x == 2.0, ints).dtype == torch.bool
        assert check(lambda x: 2**x, _t([0, 3, 10], torch.int32)).dtype == torch.int32
        # A CPU 0-d tensor joins a neuron op like a scalar does.
        out = torch.ones(3, device="neuron") + torch.tensor(2.0)
        assert out.device.type == "neuron" and out.cpu().tolist() == [3.0, 3.0, 3.0]


def test_int64_exact_with_large_values() -> None:
    big = _t([2**62 + 1, -(2**62) - 3, 2**53 + 1, -7, 9_007_199_254_740_993], torch.int64)
    small = _t([3, -5, 7, 2, -4], torch.int64)
    with fallback_disabled():
        check(lambda a, b: a + b, big, small)
        check(lambda a: a * 3 - 1, big)
        check(lambda a, b: torch.floor_divide(a, b), big, small)
        check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), big, small)
        check(lambda a, b: torch.remainder(a, b), big, small)
        check(lambda a, b: torch.fmod(a, b), big, small)
        check(lambda a, b: torch.maximum(a, b), big, small)
        check(lambda a: a.abs().neg(), big)
        check(lambda a: (a >> 3, a << 1, a & 0xFFFF, a ^ -1, ~a), big)
        check(lambda a: torch.pow(a, 2), _t([3_037_000_499, -(2**31)], torch.int64))
        check(lambda a, b: a == b + 0, big, big.clone())


def test_integer_division_signs_and_powers() -> None:
    a, b = _t([7, -7, 7, -7, 0], torch.int32), _t([2, 2, -2, -2, 3], torch.int32)
    with fallback_disabled():
        check(lambda x, y: (x // y, x % y, torch.fmod(x, y), torch.div(x, y, rounding_mode="trunc")), a, b)
        check(lambda x, y: x**y, _t([2, 1, -1, -1, 0, 3], torch.int64), _t([-1, -5, -3, -2, 0, 4], torch.int64))
        check(lambda x: (x << 70, x >> 70, x << -1, x >> 200), _t([-8, 8, 1], torch.int64))
        check(lambda x: (x >> 9, x << 3), _t([200, 7], torch.uint8))


def test_float_division_edge_cases() -> None:
    x = _t([5.0, -5.0, 0.0, 7.0, -0.0, float("inf"), 1.0, -1.0], torch.float32)
    y = _t([0.0, 0.0, 0.0, -0.5, 3.0, 2.0, float("inf"), float("inf")], torch.float32)
    with fallback_disabled():
        check(lambda a, b: (a // b, a % b, torch.fmod(a, b), torch.div(a, b, rounding_mode="trunc")), x, y)


def test_nan_semantics() -> None:
    nan = float("nan")
    x, y = _t([1.0, nan, 3.0, nan], torch.float32), _t([nan, 2.0, 1.0, nan], torch.float32)
    with fallback_disabled():
        check(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.fmax(a, b), torch.fmin(a, b)), x, y)
        check(lambda a, b: torch.clamp(a, min=b), _t([1.0, 5.0, 0.0, 2.0], torch.float32), y)
        check(lambda a: (torch.sign(a), torch.sgn(a), torch.signbit(a)), _t([nan, -0.0, 0.0, -2.0], torch.float32))
        check(lambda a: torch.nan_to_num(a, posinf=7.0), _t([nan, float("inf"), -float("inf"), 1.0], torch.float16))
        check(lambda a: torch.clamp(a, min=nan), _t([1.0, 2.0], torch.float32))


def test_inplace_and_out_variants() -> None:
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    with fallback_disabled():
        check(lambda a, b: a.add_(b, alpha=2), x, y)
        check(lambda a, b: a.mul_(b).clamp_(min=-0.5, max=0.5), x, y)
        check(lambda a, b: a[:, 1].sub_(b[:, 2]), x, y)  # in-place on a strided view
        check(lambda a: a.t().exp_(), x)
        check(lambda a, b: torch.atan2(a, b, out=torch.empty(4, 5, device=a.device)), x, y)
        check(lambda a, b: torch.mul(a, b, out=torch.empty(0, device=a.device)), x, y)  # out resized
        check(lambda a: torch.eq(a, 0.5, out=torch.empty(4, 5, dtype=torch.float32, device=a.device)), x)
        check(
            lambda a: torch.floor_divide(a, 3, out=torch.empty(0, dtype=torch.int64, device=a.device)),
            _t([7, -7], torch.int64),
        )
        check(lambda a, m: a.masked_fill_(m, -1.5), x, x > 0)
        check(lambda a, m: torch.where(m, a, 0.0), x, x > 0)


def test_complex64() -> None:
    z, w = torch.randn(6, dtype=torch.complex64), torch.randn(6, dtype=torch.complex64)
    with fallback_disabled():
        check(lambda a, b: (a + b, a * b, a / b, a - 2.0 * b), z, w)
        check(lambda a: (a.abs(), a.exp(), a.sgn(), a.sqrt(), a.angle(), a.conj_physical(), a == a), z)


def test_bad_input_errors() -> None:
    with fallback_disabled():
        floats = torch.ones(3, device="neuron")
        with pytest.raises(RuntimeError, match=r"bitwise_and.*float32.*neuron"):
            torch.bitwise_and(floats, floats)
        with pytest.raises(RuntimeError, match=r"sub.*bool"):
            torch.ones(3, device="neuron") - torch.ones(3, dtype=torch.bool, device="neuron")
        with pytest.raises(RuntimeError, match=r"neg.*bool"):
            -torch.ones(3, dtype=torch.bool, device="neuron")
        with pytest.raises(RuntimeError, match=r"where expected condition to be a boolean tensor.*float32"):
            torch.where(floats, floats, floats)
        with pytest.raises(RuntimeError, match=r"can't be cast to the desired output type"):
            torch.ones(3, dtype=torch.int64, device="neuron").add_(1.5)
        with pytest.raises(RuntimeError, match=r"negative integer powers"):
            torch.ones(3, dtype=torch.int64, device="neuron") ** -1
