"""Reductions and scans: sum/mean/prod, max/min and their indices, all/any, var/std, norms,
logsumexp, count_nonzero and the cumulative ops.

Every reduction resolves its dims through `axes` (None, an int or a list; negative dims; 0-d
tensors) and accumulates in PyTorch's accumulation dtype (float32 for float16/bfloat16) before
casting to PyTorch's result dtype: `sum`/`prod`/`cumsum` of integers or bool give int64, `mean`,
`var` and norms require a floating input, `all`/`any` give bool (uint8 for uint8 input).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import lowering
from ._common import accumulate, scalar_type_name, wrap_dim
from ._dtypes import cast, torch_dtype

aten = torch.ops.aten
Dim = int | Sequence[int] | None


# ---- shared helpers ---------------------------------------------------------------------


def axes(ndim: int, dim: Dim, name: str, empty_is_all: bool = True) -> tuple[int, ...]:
    """The axes a reduction runs over; `dim=None` (and `[]` where PyTorch says so) means all."""
    if dim is None or (empty_is_all and isinstance(dim, Sequence) and len(dim) == 0):
        return tuple(range(ndim))
    if ndim > 64:  # PyTorch marks the reduced dims in a 64-bit mask (dim_list_to_bitset)
        raise RuntimeError("only tensors with up to 64 dims are supported")
    dims = [dim] if isinstance(dim, int) else list(dim)
    wrapped: list[int] = []
    for d in dims:
        w = wrap_dim(d, ndim, name)
        if w in wrapped:
            raise RuntimeError(f"neuron: {name}: dim {w} appears multiple times in the list of dims")
        wrapped.append(w)
    return tuple(wrapped) if ndim else ()


def integral_to_long(x: Any, dtype: torch.dtype | None) -> torch.dtype:
    """Result dtype of sum/prod/cumsum: `dtype=` if given, int64 for integer and bool inputs."""
    if dtype is not None:
        return dtype
    t = torch_dtype(x)
    return t if t.is_floating_point or t.is_complex else torch.int64


def floating(x: Any, dtype: torch.dtype | None, name: str) -> torch.dtype:
    """Result dtype of an op that needs a floating input (mean, var, norms)."""
    result = dtype if dtype is not None else torch_dtype(x)
    if not (result.is_floating_point or result.is_complex):
        which = "Input" if dtype is None else "Optional"
        raise RuntimeError(
            f"neuron: {name}: could not infer output dtype. {which} dtype must be either a floating point "
            f"or complex dtype. Got: {scalar_type_name(result)}"
        )
    return result


def real(dtype: torch.dtype) -> torch.dtype:
    return dtype.to_real() if dtype.is_complex else dtype


def nonempty(x: Any, dims: tuple[int, ...], name: str) -> None:
    """Reductions without an identity (max, argmax, ...) reject empty reduced dims."""
    if x.size == 0 and not dims:
        raise IndexError(f"neuron: {name}: Expected reduction dim to be specified for input.numel() == 0.")
    for d in dims:
        if x.shape[d] == 0:
            raise IndexError(f"neuron: {name}: Expected reduction dim {d} to have non-zero size.")


def reduce(
    fn: Callable[..., Any], x: Any, dims: tuple[int, ...], keepdim: bool, compute: torch.dtype, result: torch.dtype
) -> Any:
    """`fn(x, axis=dims, keepdims=keepdim)` computed in `compute`, cast to `result`."""
    return cast(fn(cast(x, compute), axis=dims, keepdims=keepdim), result)


def along(fn: Callable[..., Any], x: Any, dim: int, name: str) -> Any:
    """Run a single-axis op `fn(x, axis)`; a 0-d tensor is treated as one element."""
    axis = wrap_dim(dim, x.ndim, name)
    if x.ndim:
        return fn(x, axis)
    return jax.tree_util.tree_map(lambda r: r.reshape(()), fn(x.reshape(1), 0))


# ---- sum, prod, mean ----------------------------------------------------------------------


def _accumulating(fn: Callable[..., Any], nan_as_zero: bool = False) -> Callable[..., Any]:
    def lowered(x: Any, dim: Dim = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
        result = integral_to_long(x, dtype)
        x = cast(x, result)
        if nan_as_zero and result.is_floating_point:
            x = jnp.where(jnp.isnan(x), jnp.zeros((), x.dtype), x)
        return reduce(fn, x, axes(x.ndim, dim, fn.__name__), keepdim, accumulate(result), result)

    return lowered


sum_ = _accumulating(jnp.sum)
prod = _accumulating(jnp.prod)
lowering(aten.sum.dim_IntList)(sum_)
lowering(aten.prod.dim_int)(prod)
lowering(aten.nansum.default)(_accumulating(jnp.sum, nan_as_zero=True))


@lowering(aten.sum.default)
def sum_all(x: Any, dtype: torch.dtype | None = None) -> Any:
    return sum_(x, None, False, dtype)


@lowering(aten.prod.default)
def prod_all(x: Any, dtype: torch.dtype | None = None) -> Any:
    return prod(x, None, False, dtype)


@lowering(aten.mean.dim)
def mean(x: Any, dim: Dim = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    result = floating(x, dtype, "mean()")
    x = cast(x, result)
    return reduce(jnp.mean, x, axes(x.ndim, dim, "mean()"), keepdim, accumulate(result), result)


@lowering(aten.mean.default)
def mean_all(x: Any, dtype: torch.dtype | None = None) -> Any:
    return mean(x, None, False, dtype)


# ---- max / min and their indices ------------------------------------------------------------


def _extremum(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def lowered(x: Any, dim: Dim = (), keepdim: bool = False) -> Any:
        dims = axes(x.ndim, dim, name)
        if x.size == 0 and dim in (None, (), []):
            raise RuntimeError(
                f"neuron: {name}: Expected reduction dim to be specified for input.numel() == 0. "
                "Specify the reduction dim with the 'dim' argument."
            )
        nonempty(x, dims, name)
        return fn(x, axis=dims, keepdims=keepdim)

    return lowered


amax = _extremum(jnp.max, "amax()")
amin = _extremum(jnp.min, "amin()")
lowering(aten.amax.default)(amax)
lowering(aten.amin.default)(amin)


@lowering(aten.max.default)
def max_all(x: Any) -> Any:
    return _extremum(jnp.max, "max()")(x)


@lowering(aten.min.default)
def min_all(x: Any) -> Any:
    return _extremum(jnp.min, "min()")(x)


@lowering(aten.aminmax.default)
def aminmax(x: Any, dim: int | None = None, keepdim: bool = False) -> tuple[Any, Any]:
    if dim is None and x.size == 0:
        raise RuntimeError(
            "aminmax(): cannot compute aminmax over an empty dimension as the operation has no identity."
        )
    dims = axes(x.ndim, dim, "aminmax")
    nonempty(x, dims, "aminmax")
    return jnp.min(x, axis=dims, keepdims=keepdim), jnp.max(x, axis=dims, keepdims=keepdim)


def _arg(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """argmax/argmin: the first extreme index (NaN counts as the extreme), as int64."""

    def lowered(x: Any, dim: int | None = None, keepdim: bool = False) -> Any:
        if dim is None:
            nonempty(x, (), name)
            out = fn(x.reshape(-1), axis=0)
            return out.reshape((1,) * x.ndim if keepdim else ()).astype(jnp.int64)
        nonempty(x, axes(x.ndim, dim, name), name)
        return along(lambda v, a: fn(v, axis=a, keepdims=keepdim), x, dim, name).astype(jnp.int64)

    return lowered


argmax = _arg(jnp.argmax, "argmax()")
argmin = _arg(jnp.argmin, "argmin()")
lowering(aten.argmax.default)(argmax)
lowering(aten.argmin.default)(argmin)


def _with_indices(values: Callable[..., Any], index: Callable[..., Any]) -> Callable[..., Any]:
    def lowered(x: Any, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
        return values(x, [dim], keepdim), index(x, dim, keepdim)

    return lowered


lowering(aten.max.dim)(_with_indices(_extremum(jnp.max, "max()"), argmax))
lowering(aten.min.dim)(_with_indices(_extremum(jnp.min, "min()"), argmin))


# ---- all / any / count_nonzero ---------------------------------------------------------------


def _logical(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def lowered(x: Any, dim: Dim = None, keepdim: bool = False) -> Any:
        # `all(x, dim=[])` reduces nothing, unlike sum.
        out = fn(x != 0, axis=axes(x.ndim, dim, name, empty_is_all=False), keepdims=keepdim)
        return out.astype(jnp.uint8) if x.dtype == jnp.uint8 else out

    return lowered


all_ = _logical(jnp.all, "all()")
any_ = _logical(jnp.any, "any()")
lowering(aten.all.default, aten.all.dim, aten.all.dims)(all_)
lowering(aten.any.default, aten.any.dim, aten.any.dims)(any_)


@lowering(aten.count_nonzero.dim_IntList, aten.count_nonzero.default)
def count_nonzero(x: Any, dim: Dim = None) -> Any:
    return jnp.sum(x != 0, axis=axes(x.ndim, dim, "count_nonzero()"), dtype=jnp.int64)


# ---- var / std ------------------------------------------------------------------------------


def _moments(x: Any, dim: Dim, correction: Any, keepdim: bool, name: str) -> tuple[Any, Any, torch.dtype]:
    """(variance, mean, result dtype): two-pass, in the accumulation dtype."""
    result = floating(x, None, name)
    dims = axes(x.ndim, dim, name)
    x = cast(x, accumulate(result))
    mu = jnp.mean(x, axis=dims, keepdims=True)
    count = 1
    for d in dims:
        count *= x.shape[d]
    correction = 1 if correction is None else correction
    squares = jnp.sum(jnp.abs(x - mu) ** 2, axis=dims, keepdims=keepdim)
    var = squares / jnp.maximum(count - correction, 0)
    return var, mu if keepdim else jnp.squeeze(mu, dims), result


@lowering(aten.var.correction)
def var(x: Any, dim: Dim = None, correction: Any = None, keepdim: bool = False) -> Any:
    v, _, result = _moments(x, dim, correction, keepdim, "var()")
    return cast(v, real(result))


@lowering(aten.std.correction)
def std(x: Any, dim: Dim = None, correction: Any = None, keepdim: bool = False) -> Any:
    v, _, result = _moments(x, dim, correction, keepdim, "std()")
    return cast(jnp.sqrt(v), real(result))


@lowering(aten.var_mean.correction)
def var_mean(x: Any, dim: Dim = None, correction: Any = None, keepdim: bool = False) -> tuple[Any, Any]:
    v, mu, result = _moments(x, dim, correction, keepdim, "var_mean()")
    return cast(v, real(result)), cast(mu, result)


@lowering(aten.std_mean.correction)
def std_mean(x: Any, dim: Dim = None, correction: Any = None, keepdim: bool = False) -> tuple[Any, Any]:
    v, mu, result = _moments(x, dim, correction, keepdim, "std_mean()")
    return cast(jnp.sqrt(v), real(result)), cast(mu, result)


# ---- logsumexp and norms ----------------------------------------------------------------------


@lowering(aten.logsumexp.default)
def logsumexp(x: Any, dim: Dim, keepdim: bool = False) -> Any:
    t = torch_dtype(x)
    result = t if t.is_floating_point or t.is_complex else torch.get_default_dtype()
    dims = axes(x.ndim, dim, "logsumexp()")
    x = cast(x, accumulate(result))
    if x.size == 0:
        return cast(jnp.log(jnp.sum(jnp.exp(x), axis=dims, keepdims=keepdim)), result)
    m = jnp.max(x, axis=dims, keepdims=True)
    m = jnp.where(jnp.isinf(m), jnp.zeros((), m.dtype), m)
    out = jnp.log(jnp.sum(jnp.exp(x - m), axis=dims, keepdims=True)) + m
    return cast(out if keepdim else jnp.squeeze(out, dims), result)


def _p_norm(a: Any, ord: Any, dims: tuple[int, ...], keepdim: bool) -> Any:
    """sum(|x|^p)^(1/p) and its limits, for `a = |x|`; `ord` may be a traced float scalar."""
    if isinstance(ord, int):
        if ord == 2:
            return jnp.sqrt(jnp.sum(a * a, axis=dims, keepdims=keepdim))
        if ord == 1:
            return jnp.sum(a, axis=dims, keepdims=keepdim)
        if ord == 0:
            return jnp.sum((a != 0).astype(a.dtype), axis=dims, keepdims=keepdim)
        return jnp.sum(a**ord, axis=dims, keepdims=keepdim) ** (1.0 / ord)
    general = jnp.sum(a**ord, axis=dims, keepdims=keepdim) ** (1.0 / ord)
    zero = jnp.sum((a != 0).astype(a.dtype), axis=dims, keepdims=keepdim)
    if a.size == 0:  # max/min have no identity; only finite orders are defined here
        return jnp.where(ord == 0, zero, general)
    top, bottom = jnp.max(a, axis=dims, keepdims=keepdim), jnp.min(a, axis=dims, keepdims=keepdim)
    return jnp.where(ord == jnp.inf, top, jnp.where(ord == -jnp.inf, bottom, jnp.where(ord == 0, zero, general)))


@lowering(aten.linalg_vector_norm.default)
def vector_norm(x: Any, ord: Any = 2, dim: Dim = None, keepdim: bool = False, dtype: torch.dtype | None = None) -> Any:
    name = "linalg.vector_norm()"
    t = torch_dtype(x)
    if not (t.is_floating_point or t.is_complex):
        raise RuntimeError(f"neuron: {name}: Expected a floating point or complex tensor as input. Got {t}")
    result = real(dtype if dtype is not None else t)
    dims = axes(x.ndim, dim, name)
    if isinstance(ord, int) and ord < 0 and any(x.shape[d] == 0 for d in dims):
        raise RuntimeError(f"neuron: {name}: cannot compute the {ord} norm on an empty tensor")
    a = jnp.abs(cast(x, dtype) if dtype is not None else x)
    return cast(_p_norm(cast(a, accumulate(result)), ord, dims, keepdim), result)


@lowering(aten.norm.ScalarOpt_dim, aten.norm.Scalar)
def norm(x: Any, p: Any = 2, dim: Dim = None, keepdim: bool = False) -> Any:
    return vector_norm(x, 2 if p is None else p, dim, keepdim)


@lowering(aten.norm.ScalarOpt_dim_dtype)
def norm_dtype(x: Any, p: Any, dim: Dim, keepdim: bool, dtype: torch.dtype) -> Any:
    return vector_norm(x, 2 if p is None else p, dim, keepdim, dtype)


# ---- scans ------------------------------------------------------------------------------------


def _scan(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    def lowered(x: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
        result = integral_to_long(x, dtype)
        x = cast(cast(x, result), accumulate(result))
        return cast(along(lambda v, a: fn(v, axis=a), x, dim, name), result)

    return lowered


lowering(aten.cumsum.default)(_scan(jax.lax.cumsum, "cumsum()"))
lowering(aten.cumprod.default)(_scan(jax.lax.cumprod, "cumprod()"))


@lowering(aten._logcumsumexp.default)
def logcumsumexp(x: Any, dim: int) -> Any:
    result = floating(x, None, "logcumsumexp()")
    x = cast(x, accumulate(result))
    return cast(along(lambda v, a: jax.lax.cumlogsumexp(v, axis=a), x, dim, "logcumsumexp()"), result)


def _running(later_wins: Callable[[Any, Any], Any], name: str) -> Callable[..., Any]:
    """cummax/cummin: running extreme and the index of its latest occurrence (NaN sticks)."""

    def combine(a: tuple[Any, Any], b: tuple[Any, Any]) -> tuple[Any, Any]:
        take = later_wins(a[0], b[0])
        return jnp.where(take, b[0], a[0]), jnp.where(take, b[1], a[1])

    def lowered(x: Any, values: Any, indices: Any, dim: int) -> tuple[Any, Any]:
        def scan(v: Any, axis: int) -> tuple[Any, Any]:
            shape = [1] * v.ndim
            shape[axis] = v.shape[axis]
            index = jnp.broadcast_to(jnp.arange(v.shape[axis], dtype=jnp.int64).reshape(shape), v.shape)
            return jax.lax.associative_scan(combine, (v, index), axis=axis)

        if x.size == 0:
            return x, jnp.zeros(x.shape, jnp.int64)
        return along(scan, x, dim, name)

    return lowered


def _nan(v: Any) -> Any:
    return jnp.isnan(v) if jnp.issubdtype(v.dtype, jnp.inexact) else jnp.zeros(v.shape, bool)


lowering(aten._cummax_helper.default)(_running(lambda a, b: _nan(b) | (~_nan(a) & (b >= a)), "cummax()"))
lowering(aten._cummin_helper.default)(_running(lambda a, b: _nan(b) | (~_nan(a) & (b <= a)), "cummin()"))


# ---- hash_tensor ----------------------------------------------------------------------------


@lowering(aten.hash_tensor.default)
def hash_tensor(x: Any, dim: Dim = (), keepdim: bool = False, mode: int = 0) -> Any:
    """mode 0, the only one: XOR of the elements' bits as uint64, floating values widened to
    float64 and integers (and bool) to int64 first."""
    if mode != 0:
        raise RuntimeError(f"hash_tensor only support mode=0 (xor_sum), but got mode={mode}")
    wide = jnp.float64 if jnp.issubdtype(x.dtype, jnp.floating) else jnp.int64
    bits = jax.lax.bitcast_convert_type(x.astype(wide), jnp.uint64)
    dims = axes(x.ndim, dim, "hash_tensor()")
    hashed = jax.lax.reduce(bits, jnp.uint64(0), jax.lax.bitwise_xor, dims)
    return jnp.expand_dims(hashed, dims) if keepdim else hashed


# ---- segment_reduce -------------------------------------------------------------------------

_SEGMENT_REDUCTIONS = ("sum", "mean", "max", "min", "prod")


class _Segments:
    """Which segment each position along `axis` falls in, for data [*batch, L, *inner] and
    lengths (or offsets) [*batch, S(+1)]: the data as [B, L, *inner] and global segment ids
    [B, L] into B * (S + 1) segments, the last of each row collecting positions past the end."""

    def __init__(self, data: Any, lengths: Any, offsets: Any, axis: int) -> None:
        if lengths is None and offsets is None:
            raise RuntimeError("segment_reduce(): Either lengths or offsets must be defined")
        if offsets is None:
            ends = jnp.cumsum(lengths, axis=-1)
            self.counts = lengths
        else:
            ends, self.counts = offsets[..., 1:], jnp.diff(offsets, axis=-1)
        self.batch, self.count = data.shape[:axis], self.counts.shape[-1]
        rows, length = math.prod(self.batch), data.shape[axis]
        self.inner = data.shape[axis + 1 :]
        self.data = data.reshape(rows, length, *self.inner)
        local = (ends.reshape(rows, self.count, 1) <= jnp.arange(length)).sum(-2)  # [B, L]
        self.ids = (jnp.arange(rows)[:, None] * (self.count + 1) + local).reshape(-1)
        self.total = rows * (self.count + 1)

    def reduce(self, fn: Callable[..., Any], values: Any) -> Any:
        """Per segment [*batch, S, *inner]."""
        out = fn(values.reshape(-1, *self.inner), self.ids, num_segments=self.total)
        return out.reshape(-1, self.count + 1, *self.inner)[:, :-1].reshape(*self.batch, self.count, *self.inner)

    def spread(self, per_segment: Any) -> Any:
        """Per position [B, L, *inner]: its segment's value (0 past the end)."""
        padded = jnp.pad(
            per_segment.reshape(-1, self.count, *self.inner), [(0, 0), (0, 1)] + [(0, 0)] * len(self.inner)
        )
        return padded.reshape(-1, *self.inner)[self.ids].reshape(self.data.shape)

    def counts_like(self, per_segment: Any) -> Any:
        """The segments' lengths, shaped and typed as `per_segment` [*batch, S, *inner]."""
        counts = self.counts.reshape(*self.counts.shape, *([1] * len(self.inner))).astype(per_segment.dtype)
        return jnp.broadcast_to(counts, per_segment.shape)


def _segment_args(reduce: str, indices: Any = None) -> None:
    if indices is not None:
        raise RuntimeError("segment_reduce(): indices based reduction is not supported yet.")
    if reduce not in _SEGMENT_REDUCTIONS:
        raise RuntimeError(f"segment_reduce(): reduction {reduce} is not supported")


@lowering(aten.segment_reduce.default)
def segment_reduce(
    data: Any,
    reduce: str,
    lengths: Any = None,
    indices: Any = None,
    offsets: Any = None,
    axis: int = 0,
    unsafe: bool = False,
    initial: Any = None,
) -> Any:
    _segment_args(reduce, indices)
    segments = _Segments(data, lengths, offsets, wrap_dim(axis, data.ndim))
    values = segments.data
    if reduce in ("sum", "mean"):
        total = segments.reduce(jax.ops.segment_sum, values)
        total = total if initial is None else total + initial
        if reduce == "sum":
            return total.astype(data.dtype)
        counts = segments.counts_like(total)
        empty = jnp.nan if initial is None else initial
        return jnp.where(counts == 0, empty, total / counts).astype(data.dtype)
    fn = {"max": jax.ops.segment_max, "min": jax.ops.segment_min, "prod": jax.ops.segment_prod}[reduce]
    out = segments.reduce(fn, values)
    if initial is not None:
        out = {"max": jnp.maximum, "min": jnp.minimum, "prod": jnp.multiply}[reduce](out, initial)
    return out.astype(data.dtype)


@lowering(aten._segment_reduce_backward.default)
def segment_reduce_backward(
    grad: Any,
    output: Any,
    data: Any,
    reduce: str,
    lengths: Any = None,
    offsets: Any = None,
    axis: int = 0,
    initial: Any = None,
) -> Any:
    """sum: the segment's gradient; mean: divided by the count; max/min: shared equally by the
    elements equal to the result; prod: times the product of the others (initial included)."""
    _segment_args(reduce)
    axis = wrap_dim(axis, data.ndim)
    segments = _Segments(data, lengths, offsets, axis)
    values, g = segments.data, segments.spread(grad)
    if reduce == "mean":
        g = segments.spread(grad / jnp.maximum(segments.counts_like(grad), 1))
    elif reduce in ("max", "min"):
        hit = (values == segments.spread(output)).astype(grad.dtype)
        ties = segments.spread(segments.reduce(jax.ops.segment_sum, hit))
        g = jnp.where(hit > 0, g / jnp.maximum(ties, 1), 0)
    elif reduce == "prod":
        zero = values == 0
        zeros = segments.spread(segments.reduce(jax.ops.segment_sum, zero.astype(jnp.int64)))
        others = segments.reduce(jax.ops.segment_prod, jnp.where(zero, 1, values))
        others = segments.spread(others if initial is None else others * initial)
        g = jnp.where(
            zero, jnp.where(zeros == 1, g * others, 0), g * segments.spread(output) / jnp.where(zero, 1, values)
        )
    return g.reshape(data.shape).astype(data.dtype)
