"""Rules every lowering family shares, stated once:

- opmath: PyTorch CPU computes float16 and bfloat16 in float32 (`accumulate`, `opmath_dtype`,
  `upcast` for one value, the `@opmath` decorator for a whole lowering, `linear_vjp`);
- errors for arguments a lowering rejects (`fail_unless`, `unsupported`), and PyTorch's error for
  one JAX raised while tracing a lowering (`torch_error`);
- dims: PyTorch's dim wrapping and its IndexError (`wrap_dim`), per-spatial-dim parameters
  (`per_dim`);
- scalar conversion: whether a Scalar fits a dtype as `c10::checked_convert` decides
  (`overflows` for a Python number, `fits` for a traced 0-d value) and its error (`overflow_error`).

Family modules import these from here; this module imports no family module.
"""

from __future__ import annotations

import ast
import functools
import inspect
import math
import os
import re
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import jax
import jax.numpy as jnp
import jaxlib
import torch
from jax import lax

from ._dtypes import jax_dtype, torch_dtype

Array = Any

# ---- opmath -----------------------------------------------------------------------------


def accumulate(dtype: torch.dtype) -> torch.dtype:
    """PyTorch CPU's opmath (accumulation) dtype: float32 for float16 and bfloat16, else `dtype`."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def opmath_dtype(x: Array) -> Any:
    """The jax dtype `x` computes in (`accumulate` of its dtype)."""
    return jax_dtype(accumulate(torch_dtype(x)))


def is_half(x: Array) -> bool:
    """Whether `x` computes in a wider dtype than its own (float16 and bfloat16)."""
    return x.dtype != opmath_dtype(x)


def upcast(x: Array) -> Array:
    """`x` in its opmath dtype; `x` itself (weak type kept) where that is its own dtype."""
    return x.astype(jnp.float32) if is_half(x) else x


def _upcast_leaf(value: Any) -> Any:
    return upcast(value) if isinstance(value, jax.Array) and jnp.issubdtype(value.dtype, jnp.floating) else value


def opmath(fn: Callable[..., Any] | None = None, *, like: str | None = None) -> Any:
    """Decorator for a lowering that computes in opmath: every float16/bfloat16 array argument
    arrives as float32, and every floating result is cast to the dtype argument `like` (by
    default the first) had on entry. Unlike `torch._decomp`'s `pw_cast_for_opmath`, arguments
    are not promoted to one dtype: each is widened on its own, as PyTorch CPU's kernels do.
    Use `@opmath` or `@opmath(like="x")`."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        name = like or next(iter(signature.parameters))

        @functools.wraps(fn)
        def lowered(*args: Any, **kwargs: Any) -> Any:
            dtype = signature.bind(*args, **kwargs).arguments[name].dtype
            out = fn(*jax.tree.map(_upcast_leaf, args), **jax.tree.map(_upcast_leaf, kwargs))
            return jax.tree.map(lambda r: r.astype(dtype) if jnp.issubdtype(r.dtype, jnp.floating) else r, out)

        return lowered

    return decorate if fn is None else decorate(fn)


def _round_to_half(t: Array) -> Array:
    """float32 `t` rounded to the nearest float16 value (ties to even), still float32, in
    integer and power-of-two steps: XLA:CPU computes float16 in float32 and drops a
    float32 -> float16 -> float32 round trip (excess precision), so a plain cast does not round."""
    bits = lax.bitcast_convert_type(t, jnp.uint32)
    bits = (bits + jnp.uint32(0x0FFF) + ((bits >> 13) & 1)) & jnp.uint32(0xFFFFE000)  # 10 mantissa bits
    normal = lax.bitcast_convert_type(bits, t.dtype)
    normal = jnp.where(jnp.abs(normal) > 65504.0, jnp.copysign(jnp.inf, t), normal)
    subnormal = jnp.round(t * 2.0**24) * 2.0**-24  # below 2**-14 float16 steps by 2**-24
    return jnp.where(jnp.isfinite(t), jnp.where(jnp.abs(t) < 2.0**-14, subnormal, normal), t)


def step_rounding(dtype: Any) -> Callable[[Array], Array]:
    """For a lowering that computes in opmath but follows a PyTorch CPU kernel that rounds every
    step to float16/bfloat16 (no opmath there): rounds a float32 value to `dtype`, kept float32.
    The identity for other dtypes."""
    if jnp.dtype(dtype) == jnp.float16:
        return _round_to_half
    if jnp.dtype(dtype) == jnp.bfloat16:  # XLA keeps bfloat16 casts
        return lambda t: t.astype(dtype).astype(jnp.float32)
    return lambda t: t


def linear_vjp(fn: Callable[[Array], Array], shape: Sequence[int], grad: Array) -> Array:
    """The adjoint of the linear map `fn` (on inputs of `shape`) applied to `grad`: computed in
    the grad's opmath dtype, returned in the grad's dtype."""
    compute = opmath_dtype(grad)
    _, vjp = jax.vjp(fn, jnp.zeros(tuple(shape), compute))
    return vjp(grad.astype(compute))[0].astype(grad.dtype)


# ---- errors -----------------------------------------------------------------------------


def _context(op: str | None, x: Array | None) -> str:
    """The prefix naming the failing op (and its input's dtype) in an error message."""
    if op is None:
        return ""
    if x is None:
        return f"neuron: {op}: "
    return f"neuron: {op} ({torch_dtype(x)} on neuron): "


def fail_unless(ok: bool, op: str, message: str, x: Array | None = None, error: type[Exception] = RuntimeError) -> None:
    """Raise `error` with PyTorch's `message` for bad arguments, naming the op (and the dtype of
    `x`, when given)."""
    if not ok:
        raise error(_context(op, x) + message)


def scalar_type_name(dtype: torch.dtype) -> str:
    """PyTorch's C++ name of `dtype` (Float, Long, BFloat16, ...), as its error messages print it."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


# C++ type names (caffe2::TypeMeta) of the dtypes whose name is not `c10::` + the ScalarType's
_TYPE_META_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.int64: "long int", torch.int32: "int",
    torch.int16: "short int", torch.int8: "signed char", torch.uint8: "unsigned char", torch.bool: "bool",
    torch.uint16: "short unsigned int", torch.uint32: "unsigned int", torch.uint64: "long unsigned int",
    torch.complex64: "c10::complex<float>", torch.complex128: "c10::complex<double>",
    torch.complex32: "c10::complex<c10::Half>",
}  # fmt: skip


def type_meta_name(dtype: torch.dtype) -> str:
    """The name PyTorch prints for a tensor's TypeMeta (`float`, `long int`, `c10::Half`), as
    in structured kernels' out= checks; not the ScalarType name (`Float`, `Long`, `Half`)."""
    return _TYPE_META_NAMES.get(dtype) or f"c10::{scalar_type_name(dtype)}"


def unsupported(op: str, x: Array, needs: str) -> NoReturn:
    """Reject a dtype the op does not take; `needs` says what it takes."""
    raise RuntimeError(f"neuron: {op} is not supported for {torch_dtype(x)} tensors on the neuron device; {needs}")


_JAX_SOURCES = tuple(os.path.dirname(m.__file__) + os.sep for m in (jax, jaxlib))
_AXIS = re.compile(r"axis (-?\d+) is out of bounds for array of dimension (\d+)")
_BROADCAST = re.compile(r"Incompatible shapes for broadcasting: shapes=(\[[\d\s,()]*\])")


def raised_by_jax(error: BaseException) -> bool:
    """Whether `error` was raised inside JAX (its innermost frame), not by a lowering's check."""
    tb, where = error.__traceback__, ""
    while tb is not None:
        where, tb = tb.tb_frame.f_code.co_filename, tb.tb_next
    return where.startswith(_JAX_SOURCES)


def torch_error(error: Exception) -> Exception:
    """The exception PyTorch CPU raises for the bad arguments JAX rejected with `error` while a
    lowering was traced: an axis out of range is PyTorch's IndexError, shapes that do not
    broadcast its RuntimeError, each with PyTorch's message; anything else a RuntimeError that
    keeps JAX's reason."""
    message = str(error)
    try:
        if axis := _AXIS.search(message):
            wrap_dim(int(axis[1]), int(axis[2]))
        if shapes := _BROADCAST.search(message):
            broadcast_shape(*ast.literal_eval(shapes[1]))
    except (IndexError, RuntimeError) as torch_raised:
        return torch_raised
    return RuntimeError(f"invalid arguments for this op ({type(error).__name__} from the lowering: {message})")


# ---- dims -------------------------------------------------------------------------------


def wrap_dim(dim: int, ndim: int, op: str | None = None, x: Array | None = None) -> int:
    """PyTorch's dim wrapping (`maybe_wrap_dim`): `dim` in [-n, n) as a non-negative axis, with
    n = max(ndim, 1), so a 0-d tensor takes 0 and -1. Out of range it raises PyTorch's IndexError,
    prefixed as `fail_unless` does when `op` is given."""
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            _context(op, x) + f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})"
        )
    return dim % n


def broadcast_shape(*shapes: Sequence[int]) -> tuple[int, ...]:
    """PyTorch's broadcasting (`infer_size`) of `shapes`, left to right, with its RuntimeError
    where two sizes differ and neither is 1."""
    out: tuple[int, ...] = ()
    for shape in shapes:
        ndim = max(len(out), len(shape))
        a, b = (1,) * (ndim - len(out)) + tuple(out), (1,) * (ndim - len(shape)) + tuple(shape)
        for dim, (x, y) in enumerate(zip(a, b)):
            if x != y and x != 1 and y != 1:
                raise RuntimeError(
                    f"The size of tensor a ({x}) must match the size of tensor b ({y}) at non-singleton dimension {dim}"
                )
        out = tuple(y if x == 1 else x for x, y in zip(a, b))
    return out


def per_dim(values: Sequence[int], n: int) -> tuple[int, ...]:
    """A per-spatial-dim parameter (kernel size, stride, ...) for `n` dims: a single value
    stands for every dim."""
    values = tuple(values)
    return values * n if len(values) == 1 else values


# ---- scalar conversion ---------------------------------------------------------------------

# The names `c10::checked_convert` prints: the C++ types of Scalar's accessors (`int8_t`, `int`)
_ACCESSOR_NAMES = {
    torch.uint8: "uint8_t", torch.int8: "int8_t", torch.int16: "int16_t", torch.int32: "int", torch.int64: "int64_t",
    torch.uint16: "uint16_t", torch.uint32: "uint32_t", torch.uint64: "uint64_t",
}  # fmt: skip


def overflow_error(dtype: torch.dtype) -> RuntimeError:
    name = _ACCESSOR_NAMES.get(dtype) or type_meta_name(dtype)
    return RuntimeError(f"value cannot be converted to type {name} without overflow")


def _limits(dtype: torch.dtype) -> tuple[float, float]:
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    return float(info.min), float(info.max)


def overflows(value: bool | int | float | complex, dtype: torch.dtype) -> bool:
    """`c10::overflows`: whether a Python number (a Scalar: bool, int64, double or complex
    double) cannot be converted to `dtype`. A complex value with an imaginary part does not fit a
    real dtype; infinities and NaN fit a floating dtype; a negative int fits an unsigned dtype
    where it wraps (-1 is 255 for uint8). bool takes anything."""
    if dtype == torch.bool or isinstance(value, bool):
        return False
    if isinstance(value, complex):
        if not dtype.is_complex and value.imag != 0:
            return True
        return overflows(value.real, dtype) or (dtype.is_complex and overflows(value.imag, dtype))
    real = dtype.to_real() if dtype.is_complex else dtype
    low, high = _limits(real)
    if isinstance(value, int):
        return value > high or (value < -high if low == 0 else value < low)
    if math.isnan(value) or math.isinf(value):
        return not real.is_floating_point
    return not low <= value <= high


def fits(value: Array, dtype: torch.dtype) -> Array:
    """`not overflows` for a traced 0-d value, read as the Scalar `.item()` gives (int64,
    double or complex double by its dtype's kind): a traced bool."""
    source = torch_dtype(value)
    if dtype == torch.bool or source == torch.bool:
        return jnp.asarray(True)
    real = dtype.to_real() if dtype.is_complex else dtype
    if source.is_complex:
        parts = (jnp.real(value), jnp.imag(value)) if dtype.is_complex else (jnp.real(value),)
        ok = jnp.asarray(True) if dtype.is_complex else jnp.imag(value) == 0
        return functools.reduce(jnp.logical_and, (_fits_real(p, real, False) for p in parts), ok)
    return _fits_real(value, real, not source.is_floating_point)


def _fits_real(value: Array, dtype: torch.dtype, integral: bool) -> Array:
    low, high = _limits(dtype)
    if integral:
        if dtype == torch.int64 or dtype == torch.uint64:
            return jnp.asarray(True)  # an int64 Scalar: within range, or wraps into uint64
        v = value.astype(jnp.float64)
        return (v <= high) & (v >= (-high if low == 0 else low))
    v = value.astype(jnp.float64)
    special = (jnp.isnan(v) | jnp.isinf(v)) if dtype.is_floating_point else jnp.asarray(False)
    return special | ((v >= low) & (v <= high))
