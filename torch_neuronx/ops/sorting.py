"""Sorting and selection: sort, topk, kthvalue, median/nanmedian, mode, searchsorted, bucketize,
isin.

Everything goes through one stable `lax.sort` whose keys order values as PyTorch does: NaN
above every number (so it sorts last ascending and first descending), -0.0 equal to 0.0, and
equal keys keep their original order in both directions. `unique` and `unique_consecutive`
have data-dependent output sizes: their size pass counts the distinct values first.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import torch
from jax import lax

from . import lowering
from ._common import wrap_dim
from ._dtypes import cast, promote
from .reduction import along

aten = torch.ops.aten


def _keys(x: Any, descending: bool) -> tuple[Any, ...]:
    """Sort keys whose ascending order is PyTorch's order of `x` (reversed if descending)."""
    if jnp.issubdtype(x.dtype, jnp.floating):
        nan = jnp.isnan(x)
        v = jnp.where(nan | (x == 0), jnp.zeros((), x.dtype), x)
        return ((~nan).astype(jnp.uint8), -v) if descending else (nan.astype(jnp.uint8), v)
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    return (~x,) if descending else (x,)  # bitwise not reverses integer order without overflow


def sort_axis(x: Any, axis: int, descending: bool = False) -> tuple[Any, Any]:
    """Stable sort along `axis`: (values, int64 indices)."""
    keys = _keys(x, descending)
    iota = lax.broadcasted_iota(jnp.int64, x.shape, axis)
    *_, values, indices = lax.sort((*keys, x, iota), dimension=axis, is_stable=True, num_keys=len(keys))
    return values, indices


@lowering(aten.sort.stable)
def sort(x: Any, stable: bool | None = None, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    return along(lambda v, a: sort_axis(v, a, descending), x, dim, "sort()")


@lowering(aten.sort.default)
def sort_default(x: Any, dim: int = -1, descending: bool = False) -> tuple[Any, Any]:
    return sort(x, None, dim, descending)


def _size(x: Any, dim: int, name: str) -> int:
    return x.shape[wrap_dim(dim, x.ndim, name)] if x.ndim else 1


@lowering(aten.topk.default)
def topk(x: Any, k: int, dim: int = -1, largest: bool = True, sorted: bool = True) -> tuple[Any, Any]:
    if not 0 <= k <= _size(x, dim, "topk()"):
        raise RuntimeError(f"neuron: topk(): selected index k out of range (k={k}, size {_size(x, dim, 'topk()')})")

    def first_k(v: Any, axis: int) -> tuple[Any, Any]:
        values, indices = sort_axis(v, axis, descending=largest)
        return lax.slice_in_dim(values, 0, k, axis=axis), lax.slice_in_dim(indices, 0, k, axis=axis)

    return along(first_k, x, dim, "topk()")


def _pick(position: Callable[[Any, int], Any], keepdim: bool, with_index: bool = True) -> Callable[[Any, int], Any]:
    """Sort along the axis and take, per slice, the element at `position(sorted, axis)`."""

    def pick(v: Any, axis: int) -> Any:
        values, indices = sort_axis(v, axis)
        where = jnp.expand_dims(position(values, axis), axis)
        chosen = jnp.take_along_axis(values, where, axis), jnp.take_along_axis(indices, where, axis)
        if not keepdim:
            chosen = tuple(jnp.squeeze(c, axis) for c in chosen)
        return chosen if with_index else chosen[0]

    return pick


def _isnan(v: Any) -> Any:
    return jnp.isnan(v) if jnp.issubdtype(v.dtype, jnp.floating) else jnp.zeros(v.shape, bool)


def _lower_median(values: Any, axis: int) -> Any:
    """The lower median's sorted position; the first NaN's if the slice has one (NaN wins)."""
    valid = jnp.sum(~_isnan(values), axis=axis)
    n = values.shape[axis]
    return jnp.where(valid < n, valid, (n - 1) // 2)


def _nan_median(values: Any, axis: int) -> Any:
    valid = jnp.sum(~_isnan(values), axis=axis)
    return jnp.maximum(valid - 1, 0) // 2


def _nonempty_dim(x: Any, dim: int, name: str) -> None:
    if x.ndim and x.shape[wrap_dim(dim, x.ndim, name)] == 0:
        raise IndexError(f"neuron: {name}: Expected reduction dim {wrap_dim(dim, x.ndim, name)} to have non-zero size.")


@lowering(aten.kthvalue.default)
def kthvalue(x: Any, k: int, dim: int = -1, keepdim: bool = False) -> tuple[Any, Any]:
    size = _size(x, dim, "kthvalue()")
    if not 1 <= k <= size:
        raise RuntimeError(f"neuron: kthvalue(): selected number k out of range for dimension {dim}")
    return along(_pick(lambda v, a: jnp.full(v.shape[:a] + v.shape[a + 1 :], k - 1), keepdim), x, dim, "kthvalue()")


def _median_dim(position: Callable[[Any, int], Any], name: str) -> Callable[..., Any]:
    def lowered(x: Any, dim: int, keepdim: bool = False) -> tuple[Any, Any]:
        _nonempty_dim(x, dim, name)
        return along(_pick(position, keepdim), x, dim, name)

    return lowered


def _median_all(position: Callable[[Any, int], Any]) -> Callable[[Any], Any]:
    def lowered(x: Any) -> Any:
        if x.size == 0:
            return jnp.full((), jnp.nan, x.dtype)
        return _pick(position, False, with_index=False)(x.reshape(-1), 0)

    return lowered


lowering(aten.median.dim)(_median_dim(_lower_median, "median()"))
lowering(aten.nanmedian.dim)(_median_dim(_nan_median, "nanmedian()"))
lowering(aten.median.default)(_median_all(_lower_median))
lowering(aten.nanmedian.default)(_median_all(_nan_median))


@lowering(aten.mode.default)
def mode(x: Any, dim: int = -1, keepdim: bool = False) -> tuple[Any, Any]:
    """The most frequent value (the smallest on ties) and the index of its last occurrence."""
    _nonempty_dim(x, dim, "mode()")

    def most_frequent(v: Any, axis: int) -> tuple[Any, Any]:
        values, indices = sort_axis(v, axis)
        pos = lax.broadcasted_iota(jnp.int64, v.shape, axis)
        first = lax.slice_in_dim(values, 0, 1, axis=axis)
        starts = jnp.concatenate([jnp.ones_like(first, bool), _differs(values, axis)], axis=axis)
        ends = jnp.concatenate([_differs(values, axis), jnp.ones_like(first, bool)], axis=axis)
        run_start = lax.cummax(jnp.where(starts, pos, 0), axis=axis)
        lengths = jnp.where(ends, pos - run_start + 1, 0)
        best = jnp.expand_dims(jnp.argmax(lengths, axis=axis), axis)  # first max: the smallest value
        out = jnp.take_along_axis(values, best, axis), jnp.take_along_axis(indices, best, axis)
        return out if keepdim else tuple(jnp.squeeze(o, axis) for o in out)

    return along(most_frequent, x, dim, "mode()")


def _differs(values: Any, axis: int) -> Any:
    """Whether each sorted element differs from the next one along `axis` (NaNs count equal)."""
    a = lax.slice_in_dim(values, 0, values.shape[axis] - 1, axis=axis)
    b = lax.slice_in_dim(values, 1, values.shape[axis], axis=axis)
    return (a != b) & ~(_isnan(a) & _isnan(b))


# ---- searchsorted / bucketize -------------------------------------------------------------------


def _search(boundaries: Any, values: Any, right: bool, out_int32: bool, sorter: Any = None) -> Any:
    """Insertion points of `values` in `boundaries` (1-D, or batched over leading dims)."""
    compute, _ = promote(boundaries, values)
    boundaries, values = cast(boundaries, compute), cast(values, compute)
    if sorter is not None:
        boundaries = jnp.take_along_axis(boundaries, sorter, axis=-1)
    side = "right" if right else "left"
    out_dtype = jnp.int32 if out_int32 else jnp.int64
    if boundaries.ndim == 1:
        return jnp.searchsorted(boundaries, values, side=side).astype(out_dtype)
    rows = boundaries.reshape(-1, boundaries.shape[-1])
    queries = values.reshape(rows.shape[0], -1)
    found = jax.vmap(lambda b, v: jnp.searchsorted(b, v, side=side))(rows, queries)
    return found.reshape(values.shape).astype(out_dtype)


def _check_search(boundaries: Any, values: Any, sorter: Any) -> None:
    if boundaries.ndim > 1 and boundaries.shape[:-1] != values.shape[:-1]:
        raise RuntimeError(
            "neuron: searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
            f"boundaries tensor and input value tensor must match, but we got boundaries tensor "
            f"{list(boundaries.shape)} and input value tensor {list(values.shape)}"
        )
    if sorter is not None and sorter.shape != boundaries.shape:
        raise RuntimeError("neuron: searchsorted(): boundary and sorter must have the same size")


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def searchsorted(
    boundaries: Any,
    values: Any,
    out_int32: bool = False,
    right: bool = False,
    side: str | None = None,
    sorter: Any = None,
) -> Any:
    values = jnp.asarray(values)
    _check_search(boundaries, values, sorter)
    return _search(boundaries, values, right or side == "right", out_int32, sorter)


@lowering(aten.bucketize.Tensor, aten.bucketize.Scalar)
def bucketize(values: Any, boundaries: Any, out_int32: bool = False, right: bool = False) -> Any:
    if boundaries.ndim != 1:
        raise RuntimeError(
            f"neuron: bucketize(): boundaries tensor must be 1 dimension, but got dim({boundaries.ndim})"
        )
    return _search(boundaries, jnp.asarray(values), right, out_int32)


@lowering(aten.isin.Tensor_Tensor, aten.isin.Tensor_Scalar, aten.isin.Scalar_Tensor)
def isin(elements: Any, test_elements: Any, assume_unique: bool = False, invert: bool = False) -> Any:
    """`torch.isin`: membership by equality after promoting both sides (NaN is in nothing)."""
    compute, _ = promote(elements, test_elements)
    found = jnp.isin(cast(elements, compute), cast(test_elements, compute), assume_unique, invert)
    return jnp.asarray(found)


# ---- unique -------------------------------------------------------------------------------


def _starts(rows: Any) -> Any:
    """True where a row differs from the one before (NaN differs from everything, as on CPU)."""
    if not rows.shape[0]:
        return jnp.zeros(0, bool)
    changed = jnp.any((rows[1:] != rows[:-1]).reshape(rows.shape[0] - 1, math.prod(rows.shape[1:])), axis=1)
    return jnp.concatenate([jnp.ones(1, bool), changed])


def _groups(rows: Any, starts: Any, size: int, return_inverse: bool, return_counts: bool) -> tuple[Any, Any, Any]:
    """(first row of each group, group of each row, rows per group); unrequested parts empty."""
    group = jnp.cumsum(starts) - 1
    values = rows[jnp.nonzero(starts, size=size)[0]]
    inverse = group if return_inverse else jnp.zeros(0, jnp.int64)
    counts = jnp.zeros(size, jnp.int64).at[group].add(1) if return_counts else jnp.zeros(0, jnp.int64)
    return values, inverse.astype(jnp.int64), counts


def _sorted_rows(rows: Any) -> tuple[Any, Any]:
    """Rows (n, ...) in lexicographic order, stable, and the order that sorts them."""
    flat = rows.reshape(rows.shape[0], math.prod(rows.shape[1:]))
    keys = [k for column in flat.T for k in _keys(column, False)]
    if not keys or not rows.shape[0]:
        return rows, jnp.arange(rows.shape[0])
    order = lax.sort((*keys, jnp.arange(rows.shape[0])), num_keys=len(keys), is_stable=True)[-1]
    return rows[order], order


def _unique_rows(rows: Any, size: int, return_inverse: bool, return_counts: bool) -> tuple[Any, Any, Any]:
    """Distinct rows in sorted order, each input row's group, and rows per group."""
    ordered, order = _sorted_rows(rows)
    out, group, counts = _groups(ordered, _starts(ordered), size, return_inverse, return_counts)
    inverse = jnp.zeros(rows.shape[0], jnp.int64).at[order].set(group) if return_inverse else group
    return out, inverse, counts


def _count_unique(x: Any, *_: Any) -> Any:
    return jnp.sum(_starts(_sorted_rows(x.reshape(-1))[0]))


@lowering(aten._unique2.default, size=_count_unique)
def unique(x: Any, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, *, size: int) -> Any:
    """Sorted distinct values (PyTorch CPU sorts whatever `sorted` says); -0.0 and 0.0 are one."""
    out, inverse, counts = _unique_rows(x.reshape(-1), size, return_inverse, return_counts)
    return out, inverse.reshape(x.shape) if return_inverse else inverse, counts


def _count_unique_rows(x: Any, dim: int, *_: Any) -> Any:
    return jnp.sum(_starts(_sorted_rows(_rows(x, dim))[0]))


@lowering(aten.unique_dim.default, size=_count_unique_rows)
def unique_dim(
    x: Any, dim: int, sorted: bool = True, return_inverse: bool = False, return_counts: bool = False, *, size: int
) -> Any:
    axis = wrap_dim(dim, x.ndim, "unique_dim")
    out, inverse, counts = _unique_rows(_rows(x, axis), size, return_inverse, return_counts)
    return jnp.moveaxis(out, 0, axis), inverse, counts


def _rows(x: Any, dim: int | None) -> Any:
    return x.reshape(-1) if dim is None else jnp.moveaxis(x, wrap_dim(dim, x.ndim, "unique_consecutive"), 0)


def _count_consecutive(
    x: Any, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None
) -> Any:
    return jnp.sum(_starts(_rows(x, dim))) if x.size else 0


@lowering(aten.unique_consecutive.default, size=_count_consecutive)
def unique_consecutive(
    x: Any, return_inverse: bool = False, return_counts: bool = False, dim: int | None = None, *, size: int
) -> Any:
    rows = _rows(x, dim)
    values, inverse, counts = _groups(rows, _starts(rows), size, return_inverse, return_counts)
    if dim is not None:
        values = jnp.moveaxis(values, 0, wrap_dim(dim, x.ndim, "unique_consecutive"))
    elif return_inverse:
        inverse = inverse.reshape(x.shape)
    return values, inverse, counts
