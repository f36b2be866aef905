"""Random sampling: the in-place distributions (`normal_`, `uniform_`, `bernoulli_`, `random_`,
`exponential_`, `geometric_`, `log_normal_`, `cauchy_`), `normal`/`bernoulli` overloads,
`multinomial`, `randperm`, and the functional `rand`/`randn`/`randint`(`_like`) factories.

Every lowering gets `key=`, derived from the device RNG state (seed, offset) and advanced once
per call, so `torch.manual_seed`, `torch.neuron.manual_seed` and `get/set_rng_state` reproduce
draws exactly. Half types draw in float32 and round, like PyTorch CPU. Parameter checks on
Python values raise at once, before anything is drawn or written (`validate=`, on the host, for
float parameters, which the lowering receives traced); those on tensor values (a probability
outside [0, 1]) use `ops.check`. Eager `torch.rand/randn/randint(device="neuron")` arrive as `empty` plus the
in-place op; the functional factories serve compile graphs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import check, lowering
from ._dtypes import cast, jax_dtype, promote, torch_dtype

aten = torch.ops.aten


def _no_generator(generator: Any) -> None:
    if generator is not None:
        raise RuntimeError(
            "random ops on neuron take their stream from the device RNG state (torch.manual_seed / "
            f"torch.neuron.manual_seed); an explicit generator ({getattr(generator, 'device', 'cpu')}) is not supported"
        )


def _float_only(name: str, x: Any) -> torch.dtype:
    dtype = torch_dtype(x)
    if not dtype.is_floating_point:
        cpp_name = torch.empty((), dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")
        raise NotImplementedError(f"\"{name}\" not implemented for '{cpp_name}'")
    return dtype


def _compute(dtype: torch.dtype) -> Any:
    return jnp.float64 if dtype == torch.float64 else jnp.float32


def _uniform01(key: Any, shape: tuple, dtype: torch.dtype) -> Any:
    return jax.random.uniform(key, shape, _compute(dtype))


def _normal01(key: Any, shape: tuple, dtype: torch.dtype) -> Any:
    return jax.random.normal(key, shape, _compute(dtype))


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(message)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _positive(name: str, param: str, position: int) -> Callable[..., None]:
    """A `validate`: the float argument at `position` after `self`, `param` in PyTorch's message,
    must be > 0 (formatted as C++ prints a double)."""

    def validate(self: Any, *rest: Any) -> None:
        value = rest[position]
        if _number(value):
            _require(value > 0, f"{name} expects {param} > 0.0, but found {param}={value:g}")

    return validate


def _normal_args(self: Any, mean: Any = 0.0, std: Any = 1.0, generator: Any = None) -> None:
    if _number(std):
        _require(std >= 0, f"normal expects std >= 0.0, but found std {std:g}")


def _uniform_args(self: Any, low: Any = 0.0, high: Any = 1.0, generator: Any = None) -> None:
    if _number(low) and _number(high):
        _require(low <= high, f"uniform_ expects to return a [from, to) range, but found from={low:g} > to={high:g}")


def _geometric_args(self: Any, p: Any, generator: Any = None) -> None:
    if _number(p):
        _require(0 < p < 1, f"geometric_ expects p to be in (0, 1), but got p={p:g}")


def _bernoulli_args(self: Any, p: Any = 0.5, generator: Any = None) -> None:
    if _number(p):
        _require(0 <= p <= 1, f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")


# ---- in-place distributions -------------------------------------------------------------


@lowering(aten.normal_.default, aten.normal_functional.default, random=True, validate=_normal_args)
def normal_(self: Any, mean: Any = 0.0, std: Any = 1.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    dtype = _float_only("normal_kernel_cpu", self)
    return cast(mean + std * _normal01(key, self.shape, dtype), dtype)


@lowering(aten.uniform_.default, aten.uniform.default, random=True, validate=_uniform_args)
def uniform_(self: Any, low: Any = 0.0, high: Any = 1.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    dtype = _float_only("check_uniform_bounds", self)
    return cast(low + (high - low) * _uniform01(key, self.shape, dtype), dtype)


@lowering(
    aten.exponential_.default, aten.exponential.default, random=True, validate=_positive("exponential_", "lambda", 0)
)
def exponential_(self: Any, lambd: Any = 1.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    dtype = _float_only("exponential_cpu", self)
    return cast(jax.random.exponential(key, self.shape, _compute(dtype)) / lambd, dtype)


@lowering(aten.log_normal_.default, aten.log_normal.default, random=True, validate=_positive("log_normal_", "std", 1))
def log_normal_(self: Any, mean: Any = 1.0, std: Any = 2.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    dtype = _float_only("log_normal_cpu", self)
    return cast(jnp.exp(mean + std * _normal01(key, self.shape, dtype)), dtype)


@lowering(aten.cauchy_.default, aten.cauchy.default, random=True, validate=_positive("cauchy_", "sigma", 1))
def cauchy_(self: Any, median: Any = 0.0, sigma: Any = 1.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    dtype = _float_only("cauchy_cpu", self)
    u = _uniform01(key, self.shape, dtype)
    return cast(median + sigma * jnp.tan(jnp.pi * (u - 0.5)), dtype)


@lowering(aten.geometric_.default, aten.geometric.default, random=True, validate=_geometric_args)
def geometric_(self: Any, p: Any, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    u = jax.random.uniform(key, self.shape, jnp.float64, minval=jnp.finfo(jnp.float64).tiny)
    return cast(jnp.ceil(jnp.log(u) / jnp.log1p(-jnp.asarray(p, jnp.float64))), torch_dtype(self))


def _bernoulli(key: Any, shape: tuple, p: Any, dtype: torch.dtype) -> Any:
    check((p >= 0) & (p <= 1), RuntimeError, "bernoulli expects p to be in [0, 1]")
    compute = jnp.float64 if getattr(p, "dtype", None) == jnp.float64 else jnp.float32
    p = jnp.broadcast_to(jnp.asarray(p, compute), shape)
    return cast(jax.random.uniform(key, shape, compute) < p, dtype)


@lowering(
    aten.bernoulli_.float,
    aten.bernoulli_.Tensor,
    aten.bernoulli.p,
    aten.bernoulli.Tensor,
    random=True,
    validate=_bernoulli_args,
)
def bernoulli_(self: Any, p: Any = 0.5, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    if hasattr(p, "shape") and jnp.broadcast_shapes(p.shape, self.shape) != tuple(self.shape):
        raise RuntimeError(f"bernoulli_: p of shape {list(p.shape)} does not broadcast to self {list(self.shape)}")
    return _bernoulli(key, self.shape, p, torch_dtype(self))


@lowering(aten.bernoulli.default, random=True)
def bernoulli(self: Any, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    return _bernoulli(key, self.shape, self, _float_only("bernoulli_tensor_cpu_self_", self))


# ---- random_ (integers) -----------------------------------------------------------------


def _upper(dtype: torch.dtype) -> int:
    """Exclusive upper bound of random_() for `dtype`: 2**digits + 1 for floats, max + 1 for ints."""
    if dtype == torch.bool:
        return 2
    if dtype.is_floating_point:
        return int(2 / torch.finfo(dtype).eps) + 1
    return torch.iinfo(dtype).max + 1


def _integers(key: Any, shape: tuple, low: int, high: int) -> Any:
    """Uniform integers in [low, high) as int64 (any range up to 2**64), like PyTorch's
    `random() % range + from`."""
    span = high - low
    bits = jax.random.bits(key, shape, jnp.uint64)
    if span < 2**64:
        bits = bits % jnp.uint64(span)
    return (bits + jnp.uint64(low % 2**64)).view(jnp.int64)


def _random(self: Any, low: int, high: int | None, generator: Any, key: Any) -> Any:
    _no_generator(generator)
    dtype = torch_dtype(self)
    if high is None:
        high = _upper(dtype)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")
    bound = _upper(dtype)
    lowest = 0 if dtype == torch.bool or dtype.is_floating_point else torch.iinfo(dtype).min
    if dtype.is_floating_point:
        lowest = -bound + 1
    if low < lowest or high > bound:
        raise RuntimeError(
            f"random_ expects 'from' and 'to' - 1 to be within [{lowest}, {bound - 1}] for {dtype}, "
            f"but got from={low}, to={high}"
        )
    return cast(_integers(key, self.shape, low, high), dtype)


@lowering(aten.random_.default, aten.random.default, random=True)
def random_(self: Any, generator: Any = None, *, key: Any) -> Any:
    return _random(self, 0, None, generator, key)


@lowering(aten.random_.to, aten.random.to, random=True)
def random_to(self: Any, to: int, generator: Any = None, *, key: Any) -> Any:
    return _random(self, 0, to, generator, key)


@lowering(getattr(aten.random_, "from"), getattr(aten.random, "from"), random=True)
def random_from(self: Any, low: int, high: int | None, generator: Any = None, *, key: Any) -> Any:
    return _random(self, low, high, generator, key)


# ---- normal with tensor parameters ------------------------------------------------------


def _normal(key: Any, mean: Any, std: Any) -> Any:
    tensors = [x for x in (mean, std) if hasattr(x, "shape") and not getattr(x, "weak_type", False)]
    dtype = promote(*tensors)[1]
    _float_only("normal", jnp.zeros((), jax_dtype(dtype)))
    shape = jnp.broadcast_shapes(*(x.shape for x in tensors))
    check(jnp.asarray(std) >= 0, RuntimeError, "normal expects all elements of std >= 0.0")
    return cast(mean + std * _normal01(key, shape, dtype), dtype)


@lowering(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, random=True)
def normal(mean: Any, std: Any = 1.0, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    return _normal(key, mean, std)


@lowering(aten.normal.float_float, random=True)
def normal_float_float(
    mean: Any, std: Any, size: list, generator: Any = None, dtype: Any = None, *_: Any, key: Any
) -> Any:
    return normal_(jnp.zeros(tuple(size), jax_dtype(dtype or torch.get_default_dtype())), mean, std, generator, key=key)


# ---- multinomial, randperm --------------------------------------------------------------


@lowering(aten.multinomial.default, random=True)
def multinomial(self: Any, num_samples: int, replacement: bool = False, generator: Any = None, *, key: Any) -> Any:
    _no_generator(generator)
    if self.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if not torch_dtype(self).is_floating_point:
        raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {torch_dtype(self)}")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    categories = self.shape[-1]
    if not replacement and num_samples > categories:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without replacement")
    if categories > 2**24:
        raise RuntimeError("number of categories cannot exceed 2^24")
    probs = self.astype(jnp.float64 if self.dtype == jnp.float64 else jnp.float32).reshape(-1, categories)
    if replacement:  # PyTorch's two kernels word their checks differently
        check(probs >= 0, RuntimeError, "invalid multinomial distribution (encountering probability entry < 0)")
        check(
            jnp.isfinite(probs),
            RuntimeError,
            "invalid multinomial distribution (encountering probability entry = infinity or NaN)",
        )
    else:
        check(
            jnp.isfinite(probs) & (probs >= 0),
            RuntimeError,
            "probability tensor contains either `inf`, `nan` or element < 0",
        )
    check(probs.sum(-1) > 0, RuntimeError, "invalid multinomial distribution (sum of probabilities <= 0)")
    rows = probs.shape[0]
    if replacement:
        logits = jnp.where(probs > 0, jnp.log(probs), -jnp.inf)
        picked = jax.random.categorical(key, logits, axis=-1, shape=(num_samples, rows)).T
    else:
        # PyTorch's own trick: the top `num_samples` of p / Exp(1) are a sample without replacement.
        scores = probs / jax.random.exponential(key, probs.shape, probs.dtype)
        picked = jax.lax.top_k(scores, num_samples)[1]
    picked = picked.astype(jnp.int64)
    return picked.reshape(num_samples) if self.ndim == 1 else picked


def _permutation(n: int, dtype: Any, key: Any) -> Any:
    dtype = dtype or torch.int64
    if n < 0:
        raise RuntimeError(f"n must be non-negative, got{n}")
    if not dtype.is_floating_point and dtype != torch.bool and n > torch.iinfo(dtype).max + 1:
        raise RuntimeError(f"n must be less than or equal to {torch.iinfo(dtype).max + 1} for dtype {dtype}")
    return cast(jax.random.permutation(key, n), dtype)


@lowering(aten.randperm.default, random=True)
def randperm(n: int, dtype: Any = None, *_: Any, key: Any) -> Any:
    return _permutation(n, dtype, key)


@lowering(aten.randperm.generator, random=True)
def randperm_generator(n: int, generator: Any, dtype: Any = None, *_: Any, key: Any) -> Any:
    _no_generator(generator)
    return _permutation(n, dtype, key)


# ---- functional factories (compile graphs) ----------------------------------------------


def _sized(size: list, dtype: Any) -> Any:
    return jnp.zeros(tuple(size), jax_dtype(dtype or torch.get_default_dtype()))


def _like(self: Any, dtype: Any) -> Any:
    return jnp.zeros(self.shape, jax_dtype(dtype)) if dtype is not None else self


@lowering(aten.rand.default, random=True)
def rand(size: list, dtype: Any = None, *_: Any, key: Any) -> Any:
    return uniform_(_sized(size, dtype), key=key)


@lowering(aten.randn.default, random=True)
def randn(size: list, dtype: Any = None, *_: Any, key: Any) -> Any:
    return normal_(_sized(size, dtype), key=key)


@lowering(aten.rand_like.default, random=True)
def rand_like(self: Any, dtype: Any = None, *_: Any, key: Any) -> Any:
    return uniform_(_like(self, dtype), key=key)


@lowering(aten.randn_like.default, random=True)
def randn_like(self: Any, dtype: Any = None, *_: Any, key: Any) -> Any:
    return normal_(_like(self, dtype), key=key)


@lowering(aten.randint.default, random=True)
def randint(high: int, size: list, dtype: Any = None, *_: Any, key: Any) -> Any:
    return _random(_sized(size, dtype or torch.int64), 0, high, None, key)


@lowering(aten.randint.low, random=True)
def randint_low(low: int, high: int, size: list, dtype: Any = None, *_: Any, key: Any) -> Any:
    return _random(_sized(size, dtype or torch.int64), low, high, None, key)


@lowering(aten.randint_like.default, random=True)
def randint_like(self: Any, high: int, dtype: Any = None, *_: Any, key: Any) -> Any:
    return _random(_like(self, dtype), 0, high, None, key)


@lowering(aten.randint_like.low_dtype, random=True)
def randint_like_low(self: Any, low: int, high: int, dtype: Any = None, *_: Any, key: Any) -> Any:
    return _random(_like(self, dtype), low, high, None, key)
