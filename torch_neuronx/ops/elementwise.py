"""Elementwise math: arithmetic, rounding, transcendental and special functions, comparisons,
logic and bit ops, selection (where, masked_fill, clamp), with PyTorch's semantics.

Every op goes through one wrapper, `elementwise(fn, kind)`: operands are cast to PyTorch's
computation dtype (float32 for half inputs), `fn` runs on jax arrays, and its result is cast to
PyTorch's result dtype. Python scalars are weak (they do not widen a tensor's dtype). Most ops
are registered from tables (op -> jax function, promotion kind); the rest are small functions
where PyTorch's semantics differ from JAX's: integer division and remainder signs, shifts past
the bit width, NaN propagation of clamp/maximum, sign of NaN, integer powers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np
import torch

from . import OpOverload, check, is_mutating, lowering
from ._common import broadcast_shape, fits, overflow_error, overflows, unsupported
from ._dtypes import (
    ALWAYS_BOOL,
    COMPLEX_TO_FLOAT,
    DEFAULT,
    INT_TO_FLOAT,
    NO_OPMATH,
    Complex32ResultError,
    cast,
    promote,
    torch_dtype,
)

aten = torch.ops.aten
lax = jax.lax
Array = Any


# ---- the generic wrapper -----------------------------------------------------------------


def apply(fn: Callable[..., Any], operands: tuple | list, kind: Any = DEFAULT) -> Any:
    """`fn` on `operands` cast to PyTorch's computation dtype; the result cast to the result
    dtype. `None` operands (absent optional arguments) pass through as `None`. Shapes that do
    not broadcast raise PyTorch's error before `fn` sees them."""
    broadcast_shape(*(a.shape for a in operands if hasattr(a, "shape")))
    compute, result = promote(*operands, kind=kind)
    return cast(fn(*(None if a is None else cast(a, compute) for a in operands)), result)


def elementwise(fn: Callable[..., Any], kind: Any = DEFAULT) -> Callable[..., Any]:
    """A lowering that runs `fn` on all its arguments through `apply`."""

    def lowered(*operands: Any) -> Any:
        return apply(fn, operands, kind)

    return lowered


def unary(*ops: Any, kind: Any = DEFAULT) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register `fn` (of one array) through `elementwise` for `ops`."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        lowering(*ops)(elementwise(fn, kind))
        return fn

    return register


def tensor_overloads(*packets: Any) -> list[OpOverload]:
    """The overloads of each packet that take a tensor and neither mutate nor write `out=`
    (those are derived); TorchScript's scalar overloads (`add.int`, ...) are left out."""
    chosen = []
    for packet in packets:
        for name in packet.overloads():
            op = getattr(packet, name)
            args = op._schema.arguments
            if not is_mutating(op) and any("Tensor" in str(a.type) for a in args):
                chosen.append(op)
    return chosen


def is_floating(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jnp.floating)


def is_complex(x: Any) -> bool:
    return jnp.issubdtype(x.dtype, jnp.complexfloating)


def is_integral(x: Any) -> bool:
    """Integer or bool."""
    return jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_


def _require_integral(op: str, *xs: Any) -> None:
    for x in xs:
        if hasattr(x, "dtype") and not is_integral(x):
            unsupported(op, x, "it needs integer or bool tensors")


def _is_float_scalar(alpha: Any) -> bool:
    """A float or complex Python scalar (these arrive as weakly typed jax scalars)."""
    return hasattr(alpha, "dtype") and not is_integral(alpha)


# ---- arithmetic ---------------------------------------------------------------------------


def _scaled(y: Array, alpha: Any) -> Array:
    """`alpha * y`, skipping the product for the (static) default alpha of 1."""
    if isinstance(alpha, (bool, int)) and alpha == 1:
        return y
    return y * cast(alpha, torch_dtype(y))


def _check_alpha(op: str, a: Any, b: Any, alpha: Any) -> None:
    _, result = promote(a, b)
    if _is_float_scalar(alpha) and not (result.is_floating_point or result.is_complex):
        raise RuntimeError(
            f"neuron: {op}: for integral input tensors, argument alpha must not be a floating point number"
        )


@lowering(*tensor_overloads(aten.add))
def add(a: Any, b: Any, alpha: Any = 1) -> Any:
    _check_alpha("add", a, b, alpha)
    return apply(lambda x, y: x + _scaled(y, alpha), (a, b))


@lowering(*tensor_overloads(aten.sub))
def sub(a: Any, b: Any, alpha: Any = 1) -> Any:
    if any(isinstance(v, bool) or getattr(v, "dtype", None) == jnp.bool_ for v in (a, b)):
        raise RuntimeError(
            "neuron: sub: subtraction, the `-` operator, with a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    _check_alpha("sub", a, b, alpha)
    return apply(lambda x, y: x - _scaled(y, alpha), (a, b))


@lowering(*tensor_overloads(aten.rsub))
def rsub(a: Any, b: Any, alpha: Any = 1) -> Any:
    return sub(b, a, alpha)


@lowering(*tensor_overloads(aten.mul))
def mul(a: Any, b: Any) -> Any:
    return apply(jnp.multiply, (a, b))


def _floor_divide(x: Array, y: Array) -> Array:
    """PyTorch's floor division: Python semantics for integers; for floats c10's
    `div_floor_floating` (fmod-based, IEEE result for a zero divisor)."""
    if is_integral(x):
        return jnp.floor_divide(x, y)
    mod = jnp.fmod(x, y)
    div = (x - mod) / y
    div = jnp.where((mod != 0) & ((y < 0) != (mod < 0)), div - 1, div)
    floor = jnp.floor(div)
    floor = jnp.where(div - floor > 0.5, floor + 1, floor)
    floor = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), x / y), floor)
    return jnp.where(y == 0, x / y, floor)


def _trunc_divide(x: Array, y: Array, result: torch.dtype) -> Array:
    """C division for integers; for floats trunc(x / y), the quotient first rounded to the
    result dtype (PyTorch CPU's vectorized kernel does so for half types)."""
    if is_integral(x):
        return lax.div(*jnp.broadcast_arrays(x, y))
    return jnp.trunc(cast(x / y, result).astype(x.dtype))


def _remainder(x: Array, y: Array) -> Array:
    """The remainder with the divisor's sign (Python's `%`)."""
    if is_integral(x):
        return jnp.remainder(x, y)
    mod = jnp.fmod(x, y)
    return jnp.where((mod != 0) & ((y < 0) != (mod < 0)), mod + y, mod)


@lowering(aten.div.Tensor, aten.div.Scalar)
def div(a: Any, b: Any) -> Any:
    return apply(jnp.true_divide, (a, b), INT_TO_FLOAT)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def div_mode(a: Any, b: Any, rounding_mode: str | None = None) -> Any:
    if rounding_mode is None:
        return div(a, b)
    if rounding_mode == "floor":
        return apply(_floor_divide, (a, b))
    if rounding_mode == "trunc":
        _, result = promote(a, b)
        return apply(lambda x, y: _trunc_divide(x, y, result), (a, b))
    raise RuntimeError(
        f"neuron: div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
    )


def _int_power(x: Array, n: int) -> Array:
    """`x ** n` for a static integer `n` by repeated multiplication (as PyTorch for small n)."""
    return lax.integer_pow(x, n) if n >= 0 else 1 / lax.integer_pow(x, -n)


def _power(x: Array, y: Array) -> Array:
    if not is_integral(x):
        return jnp.power(x, y)
    # Integer powers: negative exponents give 0 except for bases 1 and -1 (as PyTorch).
    positive = jnp.power(x, jnp.maximum(y, 0))
    odd = (y & 1) == 1
    negative = jnp.where(x == 1, 1, jnp.where(x == -1, jnp.where(odd, -1, 1), 0)).astype(x.dtype)
    return jnp.where(y < 0, negative, positive)


@lowering(*tensor_overloads(aten.pow))
def power(base: Any, exponent: Any) -> Any:
    if isinstance(exponent, int) and not isinstance(exponent, bool) and hasattr(base, "dtype"):
        _, result = promote(base, exponent)
        if exponent < 0 and not (result.is_floating_point or result.is_complex):
            raise RuntimeError("neuron: pow: integers to negative integer powers are not allowed.")
        return apply(lambda x, _: _int_power(x, exponent), (base, exponent))
    return apply(_power, (base, exponent))


@lowering(aten.neg.default)
def neg(x: Any) -> Any:
    if x.dtype == jnp.bool_:
        raise RuntimeError(
            "neuron: neg: Negation, the `-` operator, on a bool tensor is not supported. "
            "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead."
        )
    return -x


@lowering(aten.abs.default)
def absolute(x: Any) -> Any:
    return x if x.dtype == jnp.bool_ else apply(jnp.abs, (x,), COMPLEX_TO_FLOAT)


def _sign(x: Array) -> Array:
    """`(0 < x) - (x < 0)`: 0 for NaN and for -0.0, as PyTorch."""
    if x.dtype == jnp.bool_:
        return x
    return (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)


@lowering(aten.sign.default)
def sign(x: Any) -> Any:
    if is_complex(x):
        raise RuntimeError("neuron: sign is not implemented for complex tensors; use torch.sgn instead")
    return _sign(x)


@lowering(aten.sgn.default)
def sgn(x: Any) -> Any:
    if not is_complex(x):
        return _sign(x)
    magnitude = jnp.abs(x)
    return jnp.where(magnitude == 0, jnp.zeros_like(x), x / jnp.where(magnitude == 0, 1, magnitude))


@lowering(aten.signbit.default)
def signbit(x: Any) -> Any:
    if is_floating(x):
        return jnp.signbit(x)
    return x < 0 if x.dtype != jnp.bool_ else jnp.zeros_like(x)


@lowering(aten.conj_physical.default)
def conj_physical(x: Any) -> Any:
    return jnp.conj(x) if is_complex(x) else x


def _heaviside(x: Array, values: Array) -> Array:
    return jnp.where(x == 0, values, (x > 0).astype(x.dtype))


def _complex_parts(op: str, a: Any, b: Any) -> None:
    if a.dtype == b.dtype == jnp.float16:
        raise Complex32ResultError  # complex32 (CPU makes it with complex, refuses it with polar)
    if a.dtype != b.dtype or a.dtype not in (jnp.float32, jnp.float64):
        raise RuntimeError(
            f"neuron: {op} expects two float32, two float64 or two float16 tensors, got {torch_dtype(a)} and "
            f"{torch_dtype(b)}"
        )


@lowering(aten.complex.default)
def complex_(real: Any, imag: Any) -> Any:
    _complex_parts("complex", real, imag)
    return lax.complex(*jnp.broadcast_arrays(real, imag))


@lowering(aten.polar.default)
def polar(magnitude: Any, angle: Any) -> Any:
    _complex_parts("polar", magnitude, angle)
    return lax.complex(*jnp.broadcast_arrays(magnitude * jnp.cos(angle), magnitude * jnp.sin(angle)))


@lowering(aten.heaviside.default)
def heaviside(x: Any, values: Any) -> Any:
    if x.dtype != values.dtype:
        raise RuntimeError(
            f"neuron: heaviside is not yet implemented for tensors with different dtypes "
            f"({torch_dtype(x)} and {torch_dtype(values)})"
        )
    return apply(_heaviside, (x, values))


def _lerp(start: Array, end: Array, weight: Array) -> Array:
    """PyTorch's two-sided formula, exact at both ends."""
    diff = end - start
    return jnp.where(jnp.abs(weight) < 0.5, start + weight * diff, end - diff * (1 - weight))


@lowering(aten.lerp.Scalar, aten.lerp.Tensor)
def lerp(start: Any, end: Any, weight: Any) -> Any:
    for name, other in (("end", end), ("weight", weight)):
        if hasattr(other, "dtype") and not getattr(other, "weak_type", False) and other.dtype != start.dtype:
            raise RuntimeError(
                f"neuron: lerp expected dtype {torch_dtype(start)} for `{name}`, but got dtype {torch_dtype(other)}"
            )
    compute, result = promote(start, end)
    return cast(_lerp(cast(start, compute), cast(end, compute), cast(weight, compute)), result)


@lowering(aten.addcmul.default)
def addcmul(x: Any, t1: Any, t2: Any, value: Any = 1) -> Any:
    compute, _ = promote(x, t1, t2)
    v = cast(value, compute)
    return apply(lambda a, b, c: a + v * b * c, (x, t1, t2))


@lowering(aten.addcdiv.default)
def addcdiv(x: Any, t1: Any, t2: Any, value: Any = 1) -> Any:
    if is_integral(t1) and is_integral(t2):
        raise RuntimeError(
            "neuron: addcdiv: integer division with addcdiv is no longer supported; "
            "use (input + value * tensor1 / tensor2) or floor_divide instead"
        )
    compute, _ = promote(x, t1, t2)
    v = cast(value, compute)
    return apply(lambda a, b, c: a + v * b / c, (x, t1, t2))


def _xlogy(x: Array, y: Array) -> Array:
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log(y)))


def _xlog1py(x: Array, y: Array) -> Array:
    return jnp.where(jnp.isnan(y), jnp.nan, jnp.where(x == 0, 0, x * jnp.log1p(y)))


def _logaddexp(x: Array, y: Array) -> Array:
    if not is_complex(x):
        return jnp.logaddexp(x, y)
    # PyTorch's complex formula: log1p(exp(min - max)) + max, ordered by real part, NaN infectious.
    nan_x, nan_y = jnp.isnan(x.real) | jnp.isnan(x.imag), jnp.isnan(y.real) | jnp.isnan(y.imag)
    y_is_max = ~nan_y & (nan_x | (x.real < y.real))
    low, high = jnp.where(y_is_max, x, y), jnp.where(y_is_max, y, x)
    infinite = ~jnp.isfinite(low.real) & (low.real == high.real)
    out = jnp.where(
        infinite,
        jnp.where(low.real < 0, low, jnp.log(jnp.exp(low) + jnp.exp(high))),
        jnp.log1p(jnp.exp(low - high)) + high,
    )
    return jnp.where(nan_x | nan_y, jnp.nan + 0j, out).astype(x.dtype)


def _clamp(x: Array, low: Array | None, high: Array | None) -> Array:
    """min(max(x, low), high) with NaN in any operand propagating (jnp's max/min do)."""
    if low is not None:
        x = jnp.maximum(x, low)
    if high is not None:
        x = jnp.minimum(x, high)
    return x


@lowering(aten.clamp.default, aten.clamp.Tensor)
def clamp(x: Any, low: Any = None, high: Any = None) -> Any:
    if low is None and high is None:
        raise RuntimeError("neuron: clamp: at least one of 'min' or 'max' must not be None")
    return apply(_clamp, (x, low, high))


@lowering(*tensor_overloads(aten.clamp_min))
def clamp_min(x: Any, low: Any) -> Any:
    return apply(_clamp, (x, low, None))


@lowering(*tensor_overloads(aten.clamp_max))
def clamp_max(x: Any, high: Any) -> Any:
    return apply(_clamp, (x, None, high))


@lowering(aten.nan_to_num.default)
def nan_to_num(x: Any, nan: Any = None, posinf: Any = None, neginf: Any = None) -> Any:
    if is_complex(x):
        real = nan_to_num(jnp.real(x), nan, posinf, neginf)
        return lax.complex(real, nan_to_num(jnp.imag(x), nan, posinf, neginf))
    if not is_floating(x):
        return x
    info = jnp.finfo(x.dtype)

    def value(v: Any, default: Any) -> Array:
        return jnp.asarray(default if v is None else v).astype(x.dtype)

    x = jnp.where(jnp.isnan(x), value(nan, 0.0), x)
    x = jnp.where(x == jnp.inf, value(posinf, info.max), x)
    return jnp.where(x == -jnp.inf, value(neginf, info.min), x)


@lowering(aten.frexp.Tensor)
def frexp(x: Any) -> Any:
    if not is_floating(x):
        unsupported("frexp", x, "it only supports floating-point dtypes")
    return jnp.frexp(x)


@lowering(aten.ldexp.Tensor)
def ldexp(x: Any, exponent: Any) -> Any:
    return apply(lambda a, e: a * jnp.exp2(e), (x, exponent), INT_TO_FLOAT)


def _integer_only(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def lowered(*operands: Any) -> Any:
        _require_integral(name, *operands)
        return apply(fn, operands)

    return lowered


# ---- rounding -----------------------------------------------------------------------------


def _rounding(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Rounding is the identity on integers."""
    return lambda x: fn(x) if is_floating(x) else x


for _op, _fn in (
    (aten.ceil.default, jnp.ceil),
    (aten.floor.default, jnp.floor),
    (aten.trunc.default, jnp.trunc),
    (aten.round.default, jnp.round),  # half to even, as nearbyint
):
    unary(_op)(_rounding(_fn))


@lowering(aten.round.decimals)
def round_decimals(x: Any, decimals: int = 0) -> Any:
    if not is_floating(x):
        return x
    scale = 10.0 ** abs(decimals)
    if decimals < 0:
        return apply(lambda v: jnp.round(v / scale) * scale, (x,))
    return apply(lambda v: jnp.round(v * scale) / scale, (x,))


@lowering(aten.frac.default)
def frac(x: Any) -> Any:
    if not is_floating(x):
        unsupported("frac", x, "it needs floating-point tensors")
    return apply(lambda v: v - jnp.trunc(v), (x,))


# ---- transcendental and special functions ------------------------------------------------


def _digamma(x: Array) -> Array:
    """digamma with PyTorch's poles: -inf at +0, +inf at -0 (NaN at negative integers)."""
    return jnp.where(x == 0, jnp.copysign(jnp.inf, -x), jss.digamma(x))


def _entr(x: Array) -> Array:
    inner = jnp.where(x > 0, x, 1)
    return jnp.where(jnp.isnan(x), x, jnp.where(x > 0, -inner * jnp.log(inner), jnp.where(x == 0, 0, -jnp.inf)))


def _spherical_bessel_j0(x: Array) -> Array:
    safe = jnp.where(x == 0, 1, x)
    return jnp.where(x == 0, 1, jnp.sin(safe) / safe)


def _angle(x: Array) -> Array:
    if is_complex(x):
        return jnp.angle(x)
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.pi, 0).astype(x.dtype))


def _logit(x: Array, eps: Any) -> Array:
    if eps is not None:
        e = cast(eps, torch_dtype(x))
        x = jnp.where(e < 0, x, jnp.clip(x, e, 1 - e))
    return jnp.log(x / (1 - x))


# Int inputs compute in the default float dtype (INT_TO_FLOAT).
FLOAT_UNARY: dict[Any, Callable[[Array], Array]] = {
    aten.exp: jnp.exp,
    aten.exp2: jnp.exp2,
    aten.expm1: jnp.expm1,
    aten.log: jnp.log,
    aten.log2: jnp.log2,
    aten.log10: jnp.log10,
    aten.log1p: jnp.log1p,
    aten.sqrt: jnp.sqrt,
    aten.rsqrt: lax.rsqrt,
    aten.reciprocal: jnp.reciprocal,
    aten.sin: jnp.sin,
    aten.cos: jnp.cos,
    aten.tan: jnp.tan,
    aten.asin: jnp.arcsin,
    aten.acos: jnp.arccos,
    aten.atan: jnp.arctan,
    aten.sinh: jnp.sinh,
    aten.cosh: jnp.cosh,
    aten.tanh: jnp.tanh,
    aten.asinh: jnp.arcsinh,
    aten.acosh: jnp.arccosh,
    aten.atanh: jnp.arctanh,
    aten.sigmoid: jax.nn.sigmoid,
    aten.sinc: jnp.sinc,
    aten.deg2rad: jnp.deg2rad,
    aten.rad2deg: jnp.rad2deg,
    aten.erf: jss.erf,
    aten.erfc: jss.erfc,
    aten.erfinv: jss.erfinv,
    aten.lgamma: jss.gammaln,
    aten.digamma: _digamma,
    aten.i0: jss.i0,
    aten.special_i0e: jss.i0e,
    aten.special_i1: jss.i1,
    aten.special_i1e: jss.i1e,
    aten.special_modified_bessel_i0: jss.i0,
    aten.special_modified_bessel_i1: jss.i1,
    aten.special_spherical_bessel_j0: _spherical_bessel_j0,
    aten.special_ndtr: jss.ndtr,
    aten.special_ndtri: jss.ndtri,
    aten.special_log_ndtr: jss.log_ndtr,
    aten.special_erfcx: jss.erfcx,
    aten.special_entr: _entr,
}
for _packet, _fn in FLOAT_UNARY.items():
    unary(_packet.default, kind=INT_TO_FLOAT)(_fn)


@lowering(aten.angle.default)
def angle(x: Any) -> Any:
    return apply(_angle, (x,), COMPLEX_TO_FLOAT if is_complex(x) else INT_TO_FLOAT)


@lowering(aten.logit.default)
def logit(x: Any, eps: Any = None) -> Any:
    return apply(lambda v: _logit(v, eps), (x,), INT_TO_FLOAT)


# Cephes' Euler-Maclaurin denominators for the Hurwitz zeta function (PyTorch's `zeta`).
_ZETA_A = (
    12.0,
    -720.0,
    30240.0,
    -1209600.0,
    47900160.0,
    -1.8924375803183791606e9,
    7.47242496e10,
    -2.950130727918164224e12,
    1.1646782814350067249e14,
    -4.5979787224074726105e15,
    1.8152105401943546773e17,
    -7.1661652561756670113e18,
)


def _zeta(x: Array, q: Array) -> Array:
    """Hurwitz zeta(x, q) as Cephes computes it: sum terms (q + k)^-x until q + k > 9 (and at
    least 9 of them), then Euler-Maclaurin. Unlike jax's fixed 9-term shift this stays exact
    for negative non-integer q, which polygamma of negative arguments needs."""
    pole = (x == 1) | ((q <= 0) & (q == jnp.floor(q)))
    domain_error = (x < 1) | ((q <= 0) & (x != jnp.floor(x))) | jnp.isnan(x) | jnp.isnan(q)
    start = jnp.where(pole | domain_error | ~jnp.isfinite(q), 10, q)

    def more(state: tuple) -> Array:
        i, a, _, _ = state
        return (i < 9) | jnp.any(a <= 9)

    def step(state: tuple) -> tuple:
        i, a, s, b = state
        active = (i < 9) | (a <= 9)
        a = jnp.where(active, a + 1, a)
        b = jnp.where(active, a**-x, b)
        return i + 1, a, jnp.where(active, s + b, s), b

    _, w, s, b = lax.while_loop(more, step, (0, start, start**-x, jnp.zeros_like(start)))
    s = s + b * w / (x - 1) - 0.5 * b
    coefficient, k = jnp.ones_like(s), 0.0
    for a in _ZETA_A:
        coefficient = coefficient * (x + k)
        b = b / w
        s = s + coefficient * b / a
        coefficient = coefficient * (x + k + 1)
        b = b / w
        k += 2
    s = jnp.where(q == jnp.inf, 0, s)
    return jnp.where(domain_error, jnp.nan, jnp.where(pole, jnp.inf, s))


def _trigamma(x: Array) -> Array:
    """PyTorch's trigamma: reflection below 1/2, six recurrence steps, asymptotic series."""
    reflect = x < 0.5
    sin_pi_x = jnp.sin(np.pi * x)
    result = jnp.where(reflect, -(np.pi * np.pi) / (sin_pi_x * sin_pi_x), 0)
    x = jnp.where(reflect, 1 - x, x)
    for _ in range(6):
        result = result + 1 / (x * x)
        x = x + 1
    ixx = 1 / (x * x)
    result = result + (1 + 1 / (2 * x) + ixx * (1.0 / 6 - ixx * (1.0 / 30 - ixx * (1.0 / 42)))) / x
    return jnp.where(reflect, -result, result)


def _polygamma(n: int, x: Array) -> Array:
    if n == 0:
        return _digamma(x)
    if n == 1:
        return _trigamma(x)
    factorial = float(np.prod(np.arange(1, n + 1)))
    return (1 if n % 2 else -1) * factorial * _zeta(jnp.asarray(n + 1, x.dtype), x)


@lowering(aten.polygamma.default)
def polygamma(n: int, x: Any) -> Any:
    if n < 0:
        raise RuntimeError("neuron: polygamma(n, x) does not support negative n")
    return apply(lambda v: _polygamma(n, v), (x,), INT_TO_FLOAT)


@lowering(aten.mvlgamma.default)
def mvlgamma(x: Any, p: int) -> Any:
    if p < 1:
        raise RuntimeError("neuron: mvlgamma: p has to be greater than or equal to 1")

    def fn(v: Array) -> Array:
        terms = jss.gammaln(v[..., None] - jnp.arange(p - 1, -1, -1, dtype=v.dtype) / 2)
        return terms.sum(-1) + p * (p - 1) * math.log(math.pi) / 4

    return apply(fn, (x,), INT_TO_FLOAT)


# Binary ops that compute in the promoted dtype (ints stay ints).
BINARY: dict[Any, Callable[[Array, Array], Array]] = {
    aten.remainder: _remainder,
    aten.fmod: jnp.fmod,
    aten.floor_divide: _floor_divide,
    aten.maximum: jnp.maximum,  # NaN propagates
    aten.minimum: jnp.minimum,
    aten.fmax: jnp.fmax,  # NaN ignored
    aten.fmin: jnp.fmin,
}
# Binary ops that compute in floating point (ints promote to the default float dtype).
FLOAT_BINARY: dict[Any, Callable[[Array, Array], Array]] = {
    aten.atan2: jnp.arctan2,
    aten.copysign: jnp.copysign,
    aten.hypot: jnp.hypot,
    aten.logaddexp: _logaddexp,
    aten.logaddexp2: jnp.logaddexp2,
    aten.xlogy: _xlogy,
    aten.special_xlog1py: _xlog1py,
    aten.special_zeta: _zeta,
    aten.igamma: jss.gammainc,
    aten.igammac: jss.gammaincc,
}
for _packet, _fn in BINARY.items():
    lowering(*tensor_overloads(_packet))(elementwise(_fn))
for _packet, _fn in FLOAT_BINARY.items():
    lowering(*tensor_overloads(_packet))(elementwise(_fn, INT_TO_FLOAT))
# nextafter steps in the tensor's own dtype, never in a wider one.
lowering(aten.nextafter.default)(elementwise(jnp.nextafter, NO_OPMATH))


# ---- bit ops and logic --------------------------------------------------------------------


def _shift_left(x: Array, y: Array) -> Array:
    """`x << y`; 0 when y is negative or at least the bit width (as PyTorch)."""
    bits = np.dtype(x.dtype).itemsize * 8
    out = jnp.left_shift(x, jnp.clip(y, 0, bits - 1))
    return jnp.where((y < 0) | (y >= bits), jnp.zeros_like(x), out)


def _shift_right(x: Array, y: Array) -> Array:
    """`x >> y`, arithmetic for signed types; a shift that is negative or too wide gives the
    sign fill (signed) or 0 (unsigned), as PyTorch."""
    bits = np.dtype(x.dtype).itemsize * 8
    if jnp.issubdtype(x.dtype, jnp.signedinteger):
        return jnp.right_shift(x, jnp.where((y < 0) | (y >= bits - 1), bits - 1, y))
    return jnp.where(y >= bits, jnp.zeros_like(x), jnp.right_shift(x, jnp.clip(y, 0, bits - 1)))


BITWISE: dict[Any, Callable[[Array, Array], Array]] = {
    aten.bitwise_and: jnp.bitwise_and,
    aten.bitwise_or: jnp.bitwise_or,
    aten.bitwise_xor: jnp.bitwise_xor,
    aten.bitwise_left_shift: _shift_left,
    aten.bitwise_right_shift: _shift_right,
    aten.__lshift__: _shift_left,
    aten.__rshift__: _shift_right,
    aten.gcd: jnp.gcd,
    aten.lcm: jnp.lcm,
}
for _packet, _fn in BITWISE.items():
    lowering(*tensor_overloads(_packet))(_integer_only(_packet.__name__, _fn))


@lowering(aten.bitwise_not.default)
def bitwise_not(x: Any) -> Any:
    _require_integral("bitwise_not", x)
    return jnp.invert(x)


def _truth(x: Any) -> Array:
    return jnp.asarray(x) != 0


LOGICAL: dict[Any, Callable[[Array, Array], Array]] = {
    aten.logical_and: jnp.logical_and,
    aten.logical_or: jnp.logical_or,
    aten.logical_xor: jnp.logical_xor,
}
for _packet, _fn in LOGICAL.items():
    lowering(*tensor_overloads(_packet))(lambda a, b, _fn=_fn: _fn(_truth(a), _truth(b)))


@lowering(aten.logical_not.default)
def logical_not(x: Any) -> Any:
    return ~_truth(x)


# ---- comparisons and classification ------------------------------------------------------

COMPARE: dict[Any, Callable[[Array, Array], Array]] = {
    aten.eq: jnp.equal,
    aten.ne: jnp.not_equal,
    aten.lt: jnp.less,
    aten.le: jnp.less_equal,
    aten.gt: jnp.greater,
    aten.ge: jnp.greater_equal,
}
for _packet, _fn in COMPARE.items():
    lowering(*tensor_overloads(_packet))(elementwise(_fn, ALWAYS_BOOL))


@lowering(aten.equal.default)
def equal(a: Array, b: Array) -> Array:
    """`torch.equal`: the same sizes and the same values after promotion (NaN equals nothing)."""
    return jnp.all(a == b) if a.shape == b.shape else jnp.asarray(False)


def _real_only(fn: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """Float classification; integers and bools are always finite."""
    return lambda x: fn(x) if is_floating(x) or is_complex(x) else jnp.zeros(x.shape, jnp.bool_)


CLASSIFY: dict[Any, Callable[[Array], Array]] = {
    aten.isnan: jnp.isnan,
    aten.isinf: jnp.isinf,
    aten.isposinf: jnp.isposinf,
    aten.isneginf: jnp.isneginf,
}
for _packet, _fn in CLASSIFY.items():
    lowering(_packet.default)(_real_only(_fn))


# ---- selection and filling ----------------------------------------------------------------


def _require_bool(op: str, what: str, x: Any) -> None:
    if x.dtype != jnp.bool_:
        raise RuntimeError(
            f"neuron: {op} expected {what} to be a boolean tensor, but got a tensor with dtype {torch_dtype(x)}"
        )


@lowering(aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther, aten.where.Scalar)
def where(condition: Any, a: Any, b: Any) -> Any:
    _require_bool("where", "condition", condition)
    _, result = promote(a, b)
    return jnp.where(condition, cast(a, result), cast(b, result))


def _fill_value(x: Any, mask: Any, value: Any) -> None:
    """masked_fill's `validate`: the Scalar must convert to `x`'s dtype (`c10::checked_convert`),
    whatever the mask selects; a complex value with an imaginary part fits no real dtype."""
    dtype = torch_dtype(x)
    if isinstance(value, (bool, int, float, complex)) and overflows(value, dtype):
        raise overflow_error(dtype)


def _masked(x: Any, mask: Any, value: Any) -> Any:
    _require_bool("masked_fill", "mask", mask)
    return jnp.where(mask, cast(value, torch_dtype(x)), x)


@lowering(aten.masked_fill.Scalar, validate=_fill_value)
def masked_fill(x: Any, mask: Any, value: Any) -> Any:
    return _masked(x, mask, value)


@lowering(aten.masked_fill.Tensor)
def masked_fill_tensor(x: Any, mask: Any, value: Any) -> Any:
    if value.ndim != 0:
        raise RuntimeError(
            f"masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s)."
        )
    # CPU reads the value as a Scalar (`.item()`) and converts it checked; here the check is
    # deferred (a device-side assert), and `x` is kept where it fails, so nothing is written.
    ok = fits(value, torch_dtype(x))
    check(ok, RuntimeError, str(overflow_error(torch_dtype(x))))
    return jnp.where(ok, _masked(x, mask, value), x)


# fill_ and zero_ write complex32 tensors too (`Lowering.complex32`): torch.zeros/ones/full
# and their _like twins on complex32 come down to them.
# No `validate` for fill_'s checked conversion of its value: it would keep the op, which
# torch.full and friends call, off the native hit path.
@lowering(aten.fill.Scalar, complex32=True)
def fill(x: Any, value: Any) -> Any:
    return jnp.full(x.shape, cast(value, torch_dtype(x)))


@lowering(aten.fill.Tensor, complex32=True)
def fill_tensor(x: Any, value: Any) -> Any:
    if value.ndim != 0:
        raise RuntimeError(f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.")
    return jnp.full(x.shape, cast(value, torch_dtype(x)))


@lowering(aten.zero.default, complex32=True)
def zero(x: Any) -> Any:
    return jnp.zeros_like(x)
