"""Factories: arange, linspace/logspace, full/zeros/ones (and `*_like`), eye, scalar_tensor,
tril/triu_indices, _efficientzerotensor.

Eager `torch.zeros/ones/full(device="neuron")` arrive as `empty` + `fill_`/`zero_`; `arange`,
`linspace`, `logspace`, `eye`, `randperm` arrive as `.out` overloads on an `empty` of the
result dtype, which the dispatcher serves with these functional lowerings (`dtype=` = the out
dtype). The functional overloads themselves are what compile graphs call. Values follow
PyTorch CPU's kernels: arange in the accumulate type, linspace/logspace symmetric from both ends.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from . import lowering
from ._dtypes import cast, jax_dtype, torch_dtype

aten = torch.ops.aten


def _default(dtype: torch.dtype | None) -> torch.dtype:
    return dtype or torch.get_default_dtype()


def _inferred(value: Any) -> torch.dtype:
    """The dtype PyTorch gives a factory filled with a Python scalar (full, scalar_tensor)."""
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    if hasattr(value, "dtype") and not getattr(value, "weak_type", False):
        return torch_dtype(value)
    kind = np.dtype(value.dtype).kind if hasattr(value, "dtype") else "f"
    if kind == "c":
        return torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    return {"b": torch.bool, "i": torch.int64, "u": torch.int64}.get(kind, torch.get_default_dtype())


def _number(x: Any) -> Any:
    return x.item() if isinstance(x, torch.Tensor) else x


# ---- arange -----------------------------------------------------------------------------


def _accumulate(dtype: torch.dtype) -> Any:
    """PyTorch CPU's accumulate type for arange: int64 for integers, float32 for half types."""
    if not dtype.is_floating_point:
        return jnp.int64
    return jnp.float32 if dtype.itemsize < 4 else jnp.float64


@lowering(aten.arange.start_step, static=("start", "end", "step"))
def arange_start_step(start: Any, end: Any, step: Any = 1, dtype: Any = None, *_: Any) -> Any:
    start, end, step = _number(start), _number(end), _number(step)
    if dtype is None:
        dtype = torch.int64 if all(isinstance(v, int) for v in (start, end, step)) else torch.get_default_dtype()
    acc = _accumulate(dtype)
    integral = acc == jnp.int64
    xstart, xend, xstep = (int(v) if integral else float(v) for v in (start, end, step))
    if xstep == 0:
        raise ValueError("step must be nonzero")
    if not (math.isfinite(xstart) and math.isfinite(xend)):
        raise RuntimeError(f"unsupported range: {xstart} -> {xend}")
    if (xstep > 0 and xend < xstart) or (xstep < 0 and xend > xstart):
        raise RuntimeError("upper bound and larger bound inconsistent with step sign")
    if dtype == torch.int64:
        span = xend - xstart + xstep - (1 if xstep > 0 else -1)
        size = abs(span) // abs(xstep) * (1 if (span < 0) == (xstep < 0) else -1)  # C++ truncating division
    else:
        size = math.ceil((float(end) - float(start)) / float(step))
    index = jnp.arange(size, dtype=acc)
    return cast(jnp.asarray(xstart, acc) + jnp.asarray(xstep, acc) * index, dtype)


@lowering(aten.arange.start, static=("start", "end"))
def arange_start(start: Any, end: Any, dtype: Any = None, *_: Any) -> Any:
    return arange_start_step(start, end, 1, dtype)


@lowering(aten.arange.default, static=("end",))
def arange(end: Any, dtype: Any = None, *_: Any) -> Any:
    return arange_start_step(0, end, 1, dtype)


# ---- linspace / logspace ----------------------------------------------------------------


def _symmetric(start: Any, end: Any, steps: int, dtype: torch.dtype, opmath: bool = False) -> Any:
    """PyTorch CPU's linspace values: start + i*step for the first half, end - (n-1-i)*step after;
    the ends are rounded to `dtype` (integers truncate), the arithmetic is in float64 for
    integers and in the dtype itself, or float32 for half types when `opmath` (logspace)."""
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    integral = not (dtype.is_floating_point or dtype.is_complex)
    compute = jnp.float64 if integral else jax_dtype(dtype)
    if opmath and dtype.itemsize < 4 and not integral:
        compute = jnp.float32
    start = cast(start, torch.int64) if integral else cast(start, dtype)
    end = cast(end, torch.int64) if integral else cast(end, dtype)
    start, end = start.astype(compute), end.astype(compute)
    if steps == 1:
        return start.reshape(1)
    step = (end - start) / (steps - 1) if steps > 1 else jnp.zeros((), compute)
    index = jnp.arange(steps)
    first = start + step * index.astype(compute)
    second = end - step * (steps - 1 - index).astype(compute)
    return jnp.where(index < steps // 2, first, second)


def _zero_dim(name: str, start: Any, end: Any) -> None:
    ranks = [getattr(v, "ndim", 0) for v in (start, end)]
    if any(ranks):
        raise RuntimeError(
            f"{name} only supports 0-dimensional start and end tensors, but got start with {ranks[0]} dimension(s) "
            f"and end with {ranks[1]} dimension(s)."
        )


@lowering(aten.linspace.default, aten.linspace.Tensor_Tensor, aten.linspace.Tensor_Scalar, aten.linspace.Scalar_Tensor)
def linspace(start: Any, end: Any, steps: int, dtype: Any = None, *_: Any) -> Any:
    _zero_dim("linspace", start, end)
    dtype = _default(dtype)
    return cast(_symmetric(start, end, steps, dtype), dtype)


@lowering(aten.logspace.default, aten.logspace.Tensor_Tensor, aten.logspace.Tensor_Scalar, aten.logspace.Scalar_Tensor)
def logspace(start: Any, end: Any, steps: int, base: Any = 10.0, dtype: Any = None, *_: Any) -> Any:
    _zero_dim("logspace", start, end)
    dtype = _default(dtype)
    if steps == 1:  # PyTorch raises base to the unrounded start
        return cast(jnp.power(jnp.asarray(base, jnp.float64), jnp.asarray(start, jnp.float64)).reshape(1), dtype)
    exponent = _symmetric(start, end, steps, dtype, opmath=True).astype(jnp.float64)
    return cast(jnp.power(jnp.asarray(base, jnp.float64), exponent), dtype)


# ---- filled tensors ---------------------------------------------------------------------


@lowering(aten.full.default)
def full(size: list, fill_value: Any, dtype: Any = None, *_: Any) -> Any:
    return jnp.full(tuple(size), cast(fill_value, dtype or _inferred(fill_value)))


@lowering(aten.full_like.default)
def full_like(self: Any, fill_value: Any, dtype: Any = None, *_: Any) -> Any:
    return jnp.full(self.shape, cast(fill_value, dtype or torch_dtype(self)))


def _constant(value: int) -> Any:
    def sized(size: list, dtype: Any = None, *_: Any) -> Any:
        return jnp.full(tuple(size), value, jax_dtype(_default(dtype)))

    def like(self: Any, dtype: Any = None, *_: Any) -> Any:
        return jnp.full(self.shape, value, jax_dtype(dtype or torch_dtype(self)))

    return sized, like


_zeros, _zeros_like = _constant(0)
_ones, _ones_like = _constant(1)
lowering(aten.zeros.default, aten._efficientzerotensor.default)(_zeros)
lowering(aten.ones.default)(_ones)
lowering(aten.zeros_like.default)(_zeros_like)
lowering(aten.ones_like.default)(_ones_like)


@lowering(aten.scalar_tensor.default)
def scalar_tensor(s: Any, dtype: Any = None, *_: Any) -> Any:
    return cast(s, _default(dtype))


# ---- eye, triangle indices --------------------------------------------------------------


@lowering(aten.eye.m)
def eye_m(n: int, m: int, dtype: Any = None, *_: Any) -> Any:
    if n < 0:
        raise RuntimeError(f"n must be greater or equal to 0, got {n}")
    if m < 0:
        raise RuntimeError(f"m must be greater or equal to 0, got {m}")
    return jnp.eye(n, m, dtype=jax_dtype(_default(dtype)))


@lowering(aten.eye.default)
def eye(n: int, dtype: Any = None, *_: Any) -> Any:
    return eye_m(n, n, dtype)


def _triangle_indices(row: int, col: int, offset: int, dtype: Any, lower: bool) -> Any:
    if row < 0 or col < 0:
        raise RuntimeError(
            f"row must be non-negative, got {row}" if row < 0 else f"col must be non-negative, got {col}"
        )
    r = np.arange(row)[:, None]
    c = np.arange(col)[None, :]
    count = int(np.count_nonzero(c - r <= offset if lower else c - r >= offset))
    ri = jnp.arange(row)[:, None]
    ci = jnp.arange(col)[None, :]
    mask = (ci - ri <= offset) if lower else (ci - ri >= offset)
    rows, cols = jnp.nonzero(mask, size=count)
    return jnp.stack([rows, cols]).astype(jax_dtype(dtype or torch.int64))


@lowering(aten.tril_indices.default)
def tril_indices(row: int, col: int, offset: int = 0, dtype: Any = None, *_: Any) -> Any:
    return _triangle_indices(row, col, offset, dtype, lower=True)


@lowering(aten.triu_indices.default)
def triu_indices(row: int, col: int, offset: int = 0, dtype: Any = None, *_: Any) -> Any:
    return _triangle_indices(row, col, offset, dtype, lower=False)
