"""Activations and their backward ops (autograd on neuron calls the `*_backward` ATen ops).

Each activation computes in its input's computation dtype (float32 for half inputs) and
returns the input's dtype; its Scalar parameters (slopes, thresholds) do not take part in
type promotion, as in PyTorch. The formulas follow PyTorch's CPU kernels, including which side
of a threshold the boundary falls on and how NaN passes through.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import lowering
from ._common import fail_unless, scalar_type_name, unsupported
from ._dtypes import cast, jax_dtype, promote, torch_dtype
from .elementwise import is_complex

aten = torch.ops.aten
Array = Any


def activation(
    *ops: Any, tensors: int = 1, integral: bool = False, validate: Callable[..., None] | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn(*arrays, *params)` for `ops`: the first `tensors` arguments are cast to their
    common computation dtype, float parameters (weak jax scalars) to the same dtype, and the
    result back to the result dtype; static parameters (ints, bools, strings) pass unchanged.
    Only floating-point (and complex) inputs are accepted unless `integral`. `validate` checks
    the float parameters' values on the host (`Lowering.validate`)."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        def lowered(*args: Any) -> Any:
            arrays, params = args[:tensors], args[tensors:]
            compute, result = promote(*arrays)
            if not (integral or compute.is_floating_point or compute.is_complex):
                unsupported(str(ops[0]), arrays[0], "it needs floating-point tensors")
            cast_params = [cast(p, compute) if hasattr(p, "dtype") else p for p in params]
            out = fn(*(cast(a, compute) for a in arrays), *cast_params)
            return jax.tree_util.tree_map(lambda o: cast(o, result), out)

        lowering(*ops, validate=validate)(lowered)
        return fn

    return register


def _softplus(x: Array, beta: Any = 1, threshold: Any = 20) -> Array:
    scaled = x * beta
    return jnp.where(scaled > threshold, x, jnp.log1p(jnp.exp(scaled)) / beta)


# ---- forward ------------------------------------------------------------------------------


@activation(aten.relu.default, integral=True)
def relu(x: Array) -> Array:
    if x.dtype == jnp.bool_:
        unsupported("relu", x, "it needs numeric tensors")
    return jnp.maximum(x, jnp.zeros((), x.dtype))  # NaN propagates


@activation(aten.threshold.default, integral=True)
def threshold(x: Array, threshold: Array, value: Array) -> Array:
    return jnp.where(x <= threshold, value, x)


@activation(aten.hardtanh.default, integral=True)
def hardtanh(x: Array, min_val: Array = -1, max_val: Array = 1) -> Array:
    return jnp.minimum(jnp.maximum(x, min_val), max_val)


@activation(aten.leaky_relu.default)
def leaky_relu(x: Array, negative_slope: Array = 0.01) -> Array:
    return jnp.where(x > 0, x, x * negative_slope)


@activation(aten.elu.default)
def elu(x: Array, alpha: Array = 1, scale: Array = 1, input_scale: Array = 1) -> Array:
    return jnp.where(x > 0, x * scale, jnp.expm1(x * input_scale) * (alpha * scale))


def _check_approximate(op: str, approximate: str, x: Array) -> None:
    fail_unless(approximate in ("none", "tanh"), op, "approximate argument must be either none or tanh.", x)


@activation(aten.gelu.default)
def gelu(x: Array, approximate: str = "none") -> Array:
    _check_approximate("gelu", approximate, x)
    if approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1 + jnp.tanh(inner))
    return x * 0.5 * (1 + jax.scipy.special.erf(x * math.sqrt(0.5)))


@activation(aten.silu.default)
def silu(x: Array) -> Array:
    return x * jax.nn.sigmoid(x)


@activation(aten.mish.default)
def mish(x: Array) -> Array:
    return x * jnp.tanh(_softplus(x))


@activation(aten.softplus.default)
def softplus(x: Array, beta: Array = 1, threshold: Array = 20) -> Array:
    return _softplus(x, beta, threshold)


def _shrink_lambda(x: Any, lambd: Any = 0.5) -> None:
    """softshrink's `validate`: lambda in [0, the input dtype's max] (NaN is not)."""
    dtype = torch_dtype(x)
    if dtype.is_floating_point and isinstance(lambd, (int, float)):
        high = torch.finfo(dtype).max
        if not 0 <= lambd <= high:
            raise RuntimeError(
                f"lambda must be in range [0, {high:g}] for input dtype {scalar_type_name(dtype)}, but found {lambd:g}"
            )


@activation(aten.softshrink.default, validate=_shrink_lambda)
def softshrink(x: Array, lambd: Array = 0.5) -> Array:
    return jnp.where(x > lambd, x - lambd, jnp.where(x < -lambd, x + lambd, x * 0))


@activation(aten.hardshrink.default)
def hardshrink(x: Array, lambd: Array = 0.5) -> Array:
    return jnp.where((x >= -lambd) & (x <= lambd), 0, x)


@activation(aten.hardsigmoid.default)
def hardsigmoid(x: Array) -> Array:
    return jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6


@activation(aten.hardswish.default)
def hardswish(x: Array) -> Array:
    return x * jnp.minimum(jnp.maximum(x + 3, 0), 6) / 6


@activation(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x: Array) -> tuple[Array, Array]:
    """(output, buffer); the buffer (exp(-|x|), as PyTorch CPU) is unused by our backward."""
    z = jnp.exp(-jnp.abs(x))
    return jnp.minimum(x, 0) - jnp.log1p(z), z


def _glu_halves(x: Array, dim: int) -> tuple[Array, Array]:
    size = x.shape[dim] if x.ndim else 0
    if x.ndim == 0 or size % 2:
        raise RuntimeError(f"neuron: glu: halving dimension must be even, but dimension {dim} is size {size}")
    return jnp.split(x, 2, axis=dim)


@activation(aten.glu.default)
def glu(x: Array, dim: int = -1) -> Array:
    a, b = _glu_halves(x, dim)
    return a * jax.nn.sigmoid(b)


@activation(aten._prelu_kernel.default, tensors=2)
def prelu(x: Array, weight: Array) -> Array:
    return jnp.where(x > 0, x, weight * x)


@lowering(aten.rrelu_with_noise.default, random=True)
def rrelu_with_noise(
    x: Any,
    noise: Any,
    lower: Any = 0.125,
    upper: Any = 1 / 3,
    training: bool = False,
    generator: Any = None,
    *,
    key: Any,
) -> tuple[Array, Array]:
    """Returns (new noise, output): in training each negative element gets a slope drawn
    uniformly from [lower, upper] (recorded in `noise`, 1 elsewhere)."""
    compute, result = promote(x)
    v, lo, hi = cast(x, compute), cast(lower, compute), cast(upper, compute)
    if not training:
        return noise, cast(jnp.where(v > 0, v, v * ((lo + hi) / 2)), result)
    slopes = jax.random.uniform(key, v.shape, jax_dtype(compute), lo, hi)
    slopes = jnp.where(v <= 0, slopes, 1)
    return cast(slopes, torch_dtype(noise)).reshape(noise.shape), cast(v * slopes, result)


# ---- backward -----------------------------------------------------------------------------


@activation(aten.threshold_backward.default, tensors=2, integral=True)
def threshold_backward(grad: Array, x: Array, threshold: Array) -> Array:
    return jnp.where(x <= threshold, 0, grad)


@activation(aten.hardtanh_backward.default, tensors=2)
def hardtanh_backward(grad: Array, x: Array, min_val: Array, max_val: Array) -> Array:
    return jnp.where((x <= min_val) | (x >= max_val), 0, grad)


@activation(aten.leaky_relu_backward.default, tensors=2)
def leaky_relu_backward(grad: Array, x: Array, negative_slope: Array, self_is_result: bool) -> Array:
    return jnp.where(x > 0, grad, grad * negative_slope)


@activation(aten.elu_backward.default, tensors=1)
def elu_backward(
    grad: Array, alpha: Array, scale: Array, input_scale: Array, is_result: bool, self_or_result: Array
) -> Array:
    x = self_or_result
    negative = (
        grad * input_scale * (x + alpha * scale)
        if is_result
        else grad * input_scale * alpha * scale * jnp.exp(x * input_scale)
    )
    return jnp.where(x <= 0, negative, grad * scale)


@activation(aten.gelu_backward.default, tensors=2)
def gelu_backward(grad: Array, x: Array, approximate: str = "none") -> Array:
    _check_approximate("gelu_backward", approximate, x)
    if approximate == "tanh":
        beta, kappa = math.sqrt(2 / math.pi), 0.044715
        inner = beta * (x + kappa * x * x * x)
        t = jnp.tanh(inner)
        left, right = 0.5 * x, 1 + t
        left_derivative, tanh_derivative = 0.5 * right, 1 - t * t
        right_derivative = left * tanh_derivative * beta * (1 + 3 * kappa * x * x)
        return grad * (left_derivative + right_derivative)
    cdf = 0.5 * (1 + jax.scipy.special.erf(x * math.sqrt(0.5)))
    pdf = jnp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return grad * (cdf + x * pdf)


@activation(aten.silu_backward.default, tensors=2)
def silu_backward(grad: Array, x: Array) -> Array:
    s = jax.nn.sigmoid(x)
    return grad * s * (1 + x * (1 - s))


@activation(aten.mish_backward.default, tensors=2)
def mish_backward(grad: Array, x: Array) -> Array:
    t = jnp.tanh(_softplus(x))
    return grad * (t + x * jax.nn.sigmoid(x) * (1 - t * t))


@activation(aten.softplus_backward.default, tensors=2)
def softplus_backward(grad: Array, x: Array, beta: Array, threshold: Array) -> Array:
    z = jnp.exp(x * beta)
    return jnp.where(x * beta > threshold, grad, grad * z / (z + 1))


@activation(aten.softshrink_backward.default, tensors=2)
def softshrink_backward(grad: Array, x: Array, lambd: Array) -> Array:
    return jnp.where((x >= -lambd) & (x <= lambd), 0, grad)


@activation(aten.hardshrink_backward.default, tensors=2)
def hardshrink_backward(grad: Array, x: Array, lambd: Array) -> Array:
    return jnp.where((x >= -lambd) & (x <= lambd), 0, grad)


@activation(aten.hardsigmoid_backward.default, tensors=2)
def hardsigmoid_backward(grad: Array, x: Array) -> Array:
    return jnp.where((x > -3) & (x < 3), grad / 6, 0)


@activation(aten.hardswish_backward.default, tensors=2)
def hardswish_backward(grad: Array, x: Array) -> Array:
    return jnp.where(x <= -3, 0, jnp.where(x < 3, grad * (x / 3 + 0.5), grad))


@activation(aten.sigmoid_backward.default, tensors=2)
def sigmoid_backward(grad: Array, y: Array) -> Array:
    return grad * jnp.conj((1 - y) * y) if is_complex(y) else grad * (1 - y) * y


@activation(aten.tanh_backward.default, tensors=2)
def tanh_backward(grad: Array, y: Array) -> Array:
    return grad * jnp.conj(1 - y * y) if is_complex(y) else grad * (1 - y * y)


@activation(aten.log_sigmoid_backward.default, tensors=3)
def log_sigmoid_backward(grad: Array, x: Array, buffer: Array) -> Array:
    z = jnp.exp(-jnp.abs(x))
    negative = x < 0
    return grad * (jnp.where(negative, 1, 0) - jnp.where(negative, 1, -1) * (z / (1 + z)))


@activation(aten.logit_backward.default, tensors=2)
def logit_backward(grad: Array, x: Array, eps: Array | None = None) -> Array:
    derivative = grad / (x * (1 - x))
    if eps is None:
        return jnp.where((x < 0) | (x > 1), jnp.nan, derivative)
    outside = jnp.where(eps < 0, (x < 0) | (x > 1), (x < eps) | (x > 1 - eps))
    return jnp.where(outside, jnp.where(eps < 0, jnp.nan, 0), derivative)


@activation(aten.glu_backward.default, tensors=2)
def glu_backward(grad: Array, x: Array, dim: int) -> Array:
    a, b = _glu_halves(x, dim)
    s = jax.nn.sigmoid(b)
    return jnp.concatenate([grad * s, grad * a * s * (1 - s)], axis=dim)


@activation(aten._prelu_kernel_backward.default, tensors=3)
def prelu_backward(grad: Array, x: Array, weight: Array) -> tuple[Array, Array]:
    positive = x > 0
    return jnp.where(positive, grad, weight * grad), jnp.where(positive, 0, x * grad)
