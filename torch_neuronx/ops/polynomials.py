"""Classical orthogonal polynomials `torch.special.*_polynomial_*(x, n)`: Chebyshev T/U/V/W and
their shifted forms, Hermite H/He, Laguerre L, Legendre P.

Each is the three-term recurrence P_{k+1} = step(k, P_k, P_{k-1}) from P_0 = 1, run elementwise
to each element's own degree (`n` truncated to an integer) in one loop up to the largest
degree. PyTorch CPU's special cases are kept, since they decide the exact values: degree < 0
gives 0, the interval ends have closed forms, and Chebyshev polynomials of high degree inside
(-1, 1) use their trigonometric form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from . import lowering
from ._dtypes import INT_TO_FLOAT
from .elementwise import elementwise, tensor_overloads

aten = torch.ops.aten

Step = Callable[[Any, Any, Any], Any]  # (k, P_k, P_{k-1}) -> P_{k+1}


def _recurrence(n: Any, first: Any, step: Step) -> Any:
    """P_n for n >= 0, from P_0 = 1 and P_1 = `first`."""
    one = jnp.ones_like(first)

    def body(k: Any, pq: tuple[Any, Any]) -> tuple[Any, Any]:
        p, q = pq
        live = k < n
        return jnp.where(live, q, p), jnp.where(live, step(k.astype(first.dtype), q, p), q)

    _, q = lax.fori_loop(jnp.int64(1), jnp.max(n, initial=1), body, (one, first))
    return jnp.where(n == 0, one, q)


def _polynomial(body: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """Broadcast x and n, truncate n to an integer degree, and give 0 for negative degrees."""

    def fn(x: Any, n: Any) -> Any:
        x, n = jnp.broadcast_arrays(x, n)
        degree = jnp.trunc(n).astype(jnp.int64)
        return jnp.where(degree < 0, jnp.zeros_like(x), body(x, degree))

    return fn


def _sign(n: Any, x: Any) -> Any:
    """(-1)^n in x's dtype."""
    return jnp.where(n % 2 == 1, -1, 1).astype(x.dtype)


def _chebyshev(kind: str, y: Any, n: Any, trig_from: int) -> Any:
    """Chebyshev polynomial of the first to fourth kind (T, U, V, W) at y, with PyTorch's
    closed forms at y = +-1 and its trigonometric form for n > trig_from inside (-1, 1)."""
    f = n.astype(y.dtype)
    first = {"t": y, "u": y + y, "v": y + y - 1, "w": y + y + 1}[kind]
    value = _recurrence(n, first, lambda k, q, p: (y + y) * q - p)
    theta = jnp.arccos(jnp.clip(y, -1, 1))
    one, sign = jnp.ones_like(y), _sign(n, y)
    if kind == "t":
        ends, trig = jnp.where(y > 0, one, sign), jnp.cos(f * theta)
    elif kind == "u":
        ends = jnp.where(y > 0, f + 1, sign * (f + 1))
        sin = jnp.sin(theta)
        trig = jnp.where(sin != 0, jnp.sin((f + 1) * theta) / sin, (f + 1) * jnp.cos((f + 1) * theta) / y)
    elif kind == "v":
        ends = jnp.where(y > 0, one, sign * (f + f + 1))
        trig = jnp.where(jnp.sin(theta / 2) != 1, jnp.cos((f + 0.5) * theta) / jnp.cos(theta / 2), sign * (f + f + 1))
    else:
        ends = jnp.where(y > 0, f + f + 1, sign)
        trig = jnp.where(jnp.cos(theta / 2) != 1, jnp.sin((f + 0.5) * theta) / jnp.sin(theta / 2), ends)
    value = jnp.where((n > trig_from) & (jnp.abs(y) < 1), trig, value)
    return jnp.where(jnp.abs(y) == 1, ends, value)


def chebyshev(kind: str, trig_from: int) -> Callable[[Any, Any], Any]:
    return _polynomial(lambda x, n: _chebyshev(kind, x, n, trig_from))


def shifted_chebyshev(kind: str, trig_from: int) -> Callable[[Any, Any], Any]:
    """The kind's polynomial at 2x - 1 (x = 0 and x = 1 map exactly onto the ends)."""
    return _polynomial(lambda x, n: _chebyshev(kind, x + x - 1, n, trig_from))


def _hermite(first: Callable[[Any], Any], step: Callable[[Any], Step]) -> Callable[[Any, Any], Any]:
    def body(x: Any, n: Any) -> Any:
        limit = 512 if x.dtype == jnp.float64 else 128  # PyTorch CPU gives NaN above these degrees
        return jnp.where(n > limit, jnp.nan, _recurrence(n, first(x), step(x)))

    return _polynomial(body)


def _laguerre(x: Any, n: Any) -> Any:
    value = _recurrence(n, 1 - x, lambda k, q, p: ((k + k + (1 - x)) * q - k * p) / (k + 1))
    return jnp.where(x == 0, jnp.ones_like(x), value)


def _legendre(x: Any, n: Any) -> Any:
    value = _recurrence(n, x, lambda k, q, p: ((k + k + 1) * x * q - k * p) / (k + 1))
    return jnp.where(jnp.abs(x) == 1, jnp.where(x > 0, jnp.ones_like(x), _sign(n, x)), value)


POLYNOMIALS: dict[Any, Callable[[Any, Any], Any]] = {
    aten.special_chebyshev_polynomial_t: chebyshev("t", 6),
    aten.special_chebyshev_polynomial_u: chebyshev("u", 8),
    aten.special_chebyshev_polynomial_v: chebyshev("v", 8),
    aten.special_chebyshev_polynomial_w: chebyshev("w", 8),
    aten.special_shifted_chebyshev_polynomial_t: shifted_chebyshev("t", 6),
    aten.special_shifted_chebyshev_polynomial_u: shifted_chebyshev("u", 6),
    aten.special_shifted_chebyshev_polynomial_v: shifted_chebyshev("v", 6),
    aten.special_shifted_chebyshev_polynomial_w: shifted_chebyshev("w", 4),
    aten.special_hermite_polynomial_h: _hermite(lambda x: x + x, lambda x: lambda k, q, p: (x + x) * q - (k + k) * p),
    aten.special_hermite_polynomial_he: _hermite(lambda x: x, lambda x: lambda k, q, p: x * q - k * p),
    aten.special_laguerre_polynomial_l: _polynomial(_laguerre),
    aten.special_legendre_polynomial_p: _polynomial(_legendre),
}
for _packet, _fn in POLYNOMIALS.items():
    lowering(*tensor_overloads(_packet))(elementwise(_fn, INT_TO_FLOAT))
