"""Bessel functions of orders 0 and 1 and the Airy function Ai, `torch.special.*`: bessel_j0/j1
(first kind), bessel_y0/y1 (second kind), modified_bessel_k0/k1, their exponentially scaled forms
scaled_modified_bessel_k0/k1, and airy_ai. (I0 and I1 are in elementwise.py, from jax.scipy.)

Each computes in the input's computation dtype, as CPU does (float32 for float32, half and
integer inputs); float32 stays within a quarter of the suite's float32 tolerance of CPU, so
nothing needs float64. Two regions, split at |x| = 2:

- |x| <= 2: the power series. J_n and I_n sum (-+x^2/4)^k / (k! (k+n)!); Y_n and K_n add
  log(x/2) times those and the same sum weighted by psi(k+1) + psi(k+n+1) (DLMF 10.8.1,
  10.31.1). Ai is its Maclaurin series: Ai(0) and Ai'(0) times the two solutions of y'' = xy.
  16 terms reach float64 precision; cancellation costs at most a factor ~40 (Ai near x = 2).
- |x| > 2: one integral, the steepest-descent form of the modified Bessel function,
      e^w K_nu(w) = int_0^inf exp(-2 s^2) cosh(nu t) 2 / sqrt(w + s^2) ds,  t = 2 asinh(s / sqrt(w)),
  which is K_nu(w) = int_0^inf exp(-w cosh t) cosh(nu t) dt after w (cosh t - 1) = 2 s^2; it holds
  for |arg w| < pi. The integrand is even in s, Gaussian, and analytic in a strip of half-width
  sqrt(|w|) for real w, sqrt(|w| / 2) for imaginary w, so the trapezoid rule (step 0.15, 32
  nodes) is accurate to ~1e-15 relative for every |w| >= 1.5 up to inf: unlike an asymptotic
  series, it leaves no range where neither it nor the power series is accurate. Real w gives
  K0, K1, and Ai(x) = sqrt(x/3) / pi K_{1/3}(zeta) for x > 0 (zeta = 2/3 x^{3/2}); w = -ix
  gives the Hankel function H1_nu(x) = J_nu(x) + i Y_nu(x) = 2 / (pi i) e^{-i nu pi / 2} K_nu(-ix),
  and Ai(-x) = 2 / pi sqrt(x/3) Im K_{1/3}(-i zeta).

Where a result oscillates, its phase (x - pi/4, x - 3pi/4, and zeta + pi/4 with
zeta = 2 x sqrt(x) / 3) is rounded in the input's precision, as on CPU, and so decides the value
for large |x|: CPU's float32 Ai(-1000) and float64 Ai(-1e10) are 1.4e-4 off the true values.
The phases are computed in the same order with the same roundings here, so results match CPU's.

PyTorch defines no derivative for these ops, so only the forward is lowered. Each region still
gets a harmless stand-in input where it is not selected, so no branch turns a finite input
into inf or NaN.
"""

from __future__ import annotations

import cmath
import math
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from . import lowering
from ._common import unsupported
from ._dtypes import INT_TO_FLOAT
from .elementwise import apply, is_complex

aten = torch.ops.aten
Array = Any

_SMALL = 2.0  # |x| up to here: power series; beyond: the integral
_TERMS = 16
_EULER = 0.5772156649015329  # Euler's constant gamma = -psi(1)


def _psi(m: int) -> float:
    """The digamma function at a positive integer: -gamma + 1 + 1/2 + ... + 1/(m-1)."""
    return -_EULER + math.fsum(1 / j for j in range(1, m))


def _bessel_coefficients(n: int, sign: int) -> tuple[list[float], list[float]]:
    """In q = x^2/4: the coefficients of sum (sign q)^k / (k! (k+n)!), and of the same sum with
    each term weighted by psi(k+1) + psi(k+n+1)."""
    plain = [sign**k / (math.factorial(k) * math.factorial(k + n)) for k in range(_TERMS)]
    return plain, [(_psi(k + 1) + _psi(k + n + 1)) * c for k, c in enumerate(plain)]


def _airy_coefficients(offset: int) -> list[float]:
    """In z = x^3: the Maclaurin solution of y'' = xy that is 1 (offset 0) or x times this
    series (offset 1) at x = 0; each term is the last divided by (3k - 1 + offset)(3k + offset)."""
    return [1 / math.prod((3 * j - 1 + offset) * (3 * j + offset) for j in range(1, k + 1)) for k in range(_TERMS)]


_SERIES = {(n, modified): _bessel_coefficients(n, 1 if modified else -1) for n in (0, 1) for modified in (False, True)}
_AIRY = (_airy_coefficients(0), _airy_coefficients(1))
_AI_0 = 1 / (3 ** (2 / 3) * math.gamma(2 / 3))  # Ai(0)
_AI_PRIME_0 = -1 / (3 ** (1 / 3) * math.gamma(1 / 3))  # Ai'(0)

_STEP = 0.15
_NODES = 32  # s = 0, 0.15, ..., 4.65: exp(-2 s^2) < 1e-18 past the last
_EIGHTH_TURN = cmath.exp(-0.25j * math.pi)  # e^{-i pi/4}


def _divide(x: Array, d: float) -> Array:
    """x / d rounded as IEEE division: XLA turns a division by a constant into a multiplication
    by its reciprocal, which can round the other way; a phase one ulp off moves Ai(-1e10) by 1e-4."""
    return x / lax.optimization_barrier(jnp.full_like(x, d))


def _polynomial(coefficients: list[float], z: Array) -> Array:
    """sum_k coefficients[k] z^k, by Horner's rule."""
    total = jnp.full_like(z, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        total = total * z + c
    return total


def _scaled_k(nu: float, w: Array) -> Array:
    """e^w K_nu(w) for |w| >= 1.5, |arg w| < pi: the trapezoid rule on the steepest-descent
    integral (module docstring). A loop over the nodes, not 32 unrolled copies of the complex
    arithmetic, which XLA takes seconds to compile."""
    root = jnp.sqrt(w)

    def add_node(k: Array, total: Array) -> Array:
        s = k.astype(jnp.real(w).dtype) * _STEP  # a float32 w stays float32
        term = jnp.exp(-2 * s * s) * 2 / jnp.sqrt(w + s * s)
        if nu == 1:
            term = term * (1 + 2 * s * s / w)  # cosh t
        elif nu:
            term = term * jnp.cosh(2 * nu * jnp.arcsinh(s / root))
        return total + jnp.where(k == 0, _STEP / 2, _STEP) * term

    return lax.fori_loop(0, _NODES, add_node, jnp.zeros_like(w))


def _regular(n: int, modified: bool, x: Array) -> Array:
    """J_n(x) or, modified, I_n(x) from the power series (|x| <= 2)."""
    h = x / 2
    value = _polynomial(_SERIES[n, modified][0], h * h)
    return h * value if n else value


def _singular(n: int, modified: bool, x: Array) -> Array:
    """Y_n(x) or, modified, K_n(x) from the power series (0 < x <= 2)."""
    h = x / 2
    weighted = _polynomial(_SERIES[n, modified][1], h * h) * (h if n else 1)
    log = jnp.log(h) * _regular(n, modified, x)
    if modified:  # K_n = (-1)^(n+1) log(x/2) I_n + (-1)^n / 2 (x/2)^n sum... (+ 1/x for n = 1)
        return (log - weighted / 2 + 1 / x) if n else (weighted / 2 - log)
    return (2 * log - weighted - (1 / h if n else 0)) / math.pi


def _hankel(n: int, x: Array) -> Array:
    """H1_n(x) = J_n(x) + i Y_n(x) for x > 2, from its phase x - (2n+1) pi/4 as CPU rounds it."""
    phase = x - (2 * n + 1) * math.pi / 4
    return (2 / math.pi * _EIGHTH_TURN) * jnp.exp(1j * phase) * _scaled_k(n, -1j * x)


def _first_kind(n: int) -> Callable[[Array], Array]:
    def j(x: Array) -> Array:
        small = jnp.abs(x) <= _SMALL
        series = _regular(n, False, jnp.where(small, x, 0))  # J_1 is odd: its series keeps -0.0
        large = _hankel(n, jnp.where(small, 3, jnp.abs(x))).real
        return jnp.where(small, series, jnp.where(x < 0, -large, large) if n else large)

    return j


def _positive_only(
    series: Callable[[Array], Array], integral: Callable[[Array], Array], at_zero: float
) -> Callable[[Array], Array]:
    """Y and K: `series` on (0, 2], `integral` beyond (each given 1 or 3 elsewhere); `at_zero`
    at +-0 and NaN below, as on CPU."""

    def defined(x: Array) -> Array:
        small = (x > 0) & (x <= _SMALL)
        large = x > _SMALL
        value = jnp.where(small, series(jnp.where(small, x, 1)), integral(jnp.where(large, x, 3)))
        return jnp.where(x > 0, value, jnp.where(x == 0, at_zero, jnp.nan))

    return defined


def _second_kind(n: int) -> Callable[[Array], Array]:
    return _positive_only(lambda x: _singular(n, False, x), lambda x: _hankel(n, x).imag, at_zero=-jnp.inf)


def _modified_second_kind(n: int, scaled: bool) -> Callable[[Array], Array]:
    def series(x: Array) -> Array:
        return _singular(n, True, x) * (jnp.exp(x) if scaled else 1)

    def integral(x: Array) -> Array:
        return _scaled_k(n, x) * (1 if scaled else jnp.exp(-x))

    return _positive_only(series, integral, at_zero=jnp.inf)


def _airy_ai(x: Array) -> Array:
    small = jnp.abs(x) <= _SMALL
    near = jnp.where(small, x, 0)
    cube = near * near * near
    series = _AI_0 * _polynomial(_AIRY[0], cube) + _AI_PRIME_0 * near * _polynomial(_AIRY[1], cube)
    far = jnp.where(small, 3, jnp.abs(x))
    zeta = _divide(2 * far * jnp.sqrt(far), 3)  # rounded as on CPU, as is theta
    theta = zeta + math.pi / 4
    scaled = _scaled_k(1 / 3, jnp.where(x > 0, zeta + 0j, -1j * zeta))  # one quadrature for both sides
    scale = jnp.sqrt(far / 3) / math.pi
    decaying = scale * jnp.exp(-zeta) * scaled.real
    oscillating = 2 * scale * (jnp.exp(1j * theta) * _EIGHTH_TURN * scaled).imag
    value = jnp.where(small, series, jnp.where(x > 0, decaying, oscillating))
    return jnp.where(jnp.isinf(x), jnp.nan, value)  # CPU gives NaN at both infinities


BESSEL: dict[Any, Callable[[Array], Array]] = {
    aten.special_airy_ai: _airy_ai,
    aten.special_bessel_j0: _first_kind(0),
    aten.special_bessel_j1: _first_kind(1),
    aten.special_bessel_y0: _second_kind(0),
    aten.special_bessel_y1: _second_kind(1),
    aten.special_modified_bessel_k0: _modified_second_kind(0, scaled=False),
    aten.special_modified_bessel_k1: _modified_second_kind(1, scaled=False),
    aten.special_scaled_modified_bessel_k0: _modified_second_kind(0, scaled=True),
    aten.special_scaled_modified_bessel_k1: _modified_second_kind(1, scaled=True),
}


def _real_unary(name: str, fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Integer and bool inputs compute in the default float dtype (INT_TO_FLOAT); complex ones are
    rejected, as CPU implements these for real dtypes only."""

    def lowered(x: Array) -> Array:
        if is_complex(x):
            unsupported(name, x, "it needs real tensors")
        return apply(fn, (x,), INT_TO_FLOAT)

    return lowered


for _packet, _fn in BESSEL.items():
    lowering(_packet.default)(_real_unary(_packet.__name__, _fn))
