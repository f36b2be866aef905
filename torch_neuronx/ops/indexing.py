"""Indexing: advanced indexing (`index`, `index_put`), gather/scatter and the `index_*` family,
masked ops, `nonzero`, `take`/`put` and the `*_scatter` embeddings of views.

Indices are checked against their dimension with `ops.check` (an out-of-range index raises
PyTorch's error at the next host sync, like a CUDA device-side assert) and are clamped inside
the executable, so nothing reads or writes out of bounds. Ops whose output size depends on the
data (`nonzero`, `masked_select`, indexing with a bool mask) count on the device first and run
with that static size (the lowering's `size=` pass); a single bool mask being *assigned*
through (`x[mask] = v`) needs no count and stays asynchronous.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import torch
from jax import lax

from . import check, lowering
from ._common import scalar_type_name, wrap_dim
from ._dtypes import cast, torch_dtype
from .shape import check_in_bounds, view_geometry, write_view

aten = torch.ops.aten


def _bounded(index: Any, size: int, message: str, error: type[Exception] = IndexError, negative: bool = True) -> Any:
    """`index` with negative entries wrapped (when allowed), checked to lie in [-size, size)."""
    low = -size if negative else 0
    check((index >= low) & (index < size), error, message, index)
    return jnp.where(index < 0, index + size, index) if negative else index


def _oob(dim: int, size: int) -> str:
    return f"index {{}} is out of bounds for dimension {dim} with size {size}"


def _is_mask(index: Any) -> bool:
    return index is not None and index.dtype in (jnp.bool_, jnp.uint8)


def _same_dtype(name: str, self: Any, other: Any, what: str = "source") -> None:
    if self.dtype != other.dtype:
        raise RuntimeError(
            f"{name}(): Expected self.dtype to be equal to {what}.dtype"
            if what == "src"
            else f"{name}: self ({torch_dtype(self)}) and {what} ({torch_dtype(other)}) must have the same scalar type"
        )


# ---- advanced indexing ------------------------------------------------------------------


def _check_masks(self: Any, indices: Sequence[Any]) -> None:
    dim = 0
    for i, index in enumerate(indices):
        if _is_mask(index):
            if index.ndim == 0:
                raise IndexError("indexing with a 0-dim bool tensor must go through Tensor.__getitem__")
            want = self.shape[dim : dim + index.ndim]
            if tuple(index.shape) != tuple(want):
                raise IndexError(
                    f"The shape of the mask {list(index.shape)} at index {i} does not match the shape of the "
                    f"indexed tensor {list(self.shape)} at index {dim}"
                )
        dim += 1 if index is None or not _is_mask(index) else index.ndim
    if dim > self.ndim:
        raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {dim})")


def _key(self: Any, indices: Sequence[Any], counts: Sequence[int]) -> tuple:
    """A jnp index tuple for PyTorch's `indices` (None = whole dim, masks = their nonzero)."""
    _check_masks(self, indices)
    key: list[Any] = []
    dim = 0
    pending = iter(counts)
    for index in indices:
        if index is None:
            key.append(slice(None))
            dim += 1
        elif _is_mask(index):
            key.extend(jnp.nonzero(index, size=next(pending)))
            dim += index.ndim
        else:
            key.append(_bounded(index, self.shape[dim], _oob(dim, self.shape[dim])))
            dim += 1
    return tuple(key)


def _mask_counts(self: Any, indices: Sequence[Any], *rest: Any) -> tuple | None:
    counts = tuple(jnp.count_nonzero(i) for i in indices if _is_mask(i))
    return counts or None


@lowering(aten.index.Tensor, aten._unsafe_index.Tensor, size=_mask_counts)
def index(self: Any, indices: list, size: tuple | None = None) -> Any:
    return self[_key(self, indices, size or ())]


def _single_mask(indices: Sequence[Any]) -> int | None:
    """Position of the only index when it is a bool mask and every other index is None."""
    masks = [i for i, index in enumerate(indices) if _is_mask(index)]
    others = [index for index in indices if index is not None and not _is_mask(index)]
    return masks[0] if len(masks) == 1 and not others else None


def _put_counts(self: Any, indices: Sequence[Any], values: Any, *rest: Any) -> tuple | None:
    return None if _single_mask(indices) is not None else _mask_counts(self, indices)


def _combine(self: Any, values: Any, accumulate: bool) -> Any:
    if not accumulate:
        return values
    return self | values if self.dtype == jnp.bool_ else self + values


def _put_through_mask(self: Any, indices: Sequence[Any], values: Any, accumulate: bool) -> Any:
    """`self[mask] = values` without knowing the mask's count: the k-th True element takes
    the k-th slice of `values` (a cumsum), so shapes stay static."""
    _check_masks(self, indices)
    at = _single_mask(indices)
    mask = indices[at]
    lead, k = at, mask.ndim
    tail = self.shape[lead + k :]
    result_rank = lead + 1 + len(tail)
    if values.ndim > result_rank:
        raise RuntimeError(
            f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to indexing result"
        )
    values = values.reshape((1,) * (result_rank - values.ndim) + values.shape)
    rows = values.shape[lead]
    flat = mask.reshape(-1).astype(bool)
    count = jnp.count_nonzero(flat)
    check(
        (rows == 1) | (count == rows),
        RuntimeError,
        f"shape mismatch: value tensor with {rows} rows cannot be broadcast to an indexing result of {{}} rows",
        count,
    )
    position = jnp.clip(jnp.cumsum(flat) - 1, 0, rows - 1) if rows > 1 else jnp.zeros(flat.shape, jnp.int64)
    picked = jnp.take(values, position, axis=lead)  # lead dims, mask elements, tail dims
    picked = picked.reshape(picked.shape[:lead] + mask.shape + picked.shape[lead + 1 :])
    picked = jnp.broadcast_to(picked, self.shape)
    where = mask.astype(bool).reshape((1,) * lead + mask.shape + (1,) * len(tail))
    return jnp.where(where, _combine(self, picked, accumulate), self)


@lowering(aten.index_put.default, aten._index_put_impl.default, aten._unsafe_index_put.default, size=_put_counts)
def index_put(
    self: Any, indices: list, values: Any, accumulate: bool = False, unsafe: bool = False, size: tuple | None = None
) -> Any:
    if values.dtype != self.dtype:
        raise RuntimeError(
            f"Index put requires the source and destination dtypes match, got {torch_dtype(self)} for the "
            f"destination and {torch_dtype(values)} for the source."
        )
    if size is None and _single_mask(indices) is not None:
        return _put_through_mask(self, indices, values, accumulate)
    key = _key(self, indices, size or ())
    if not accumulate:
        return self.at[key].set(values)
    return self.at[key].max(values) if self.dtype == jnp.bool_ else self.at[key].add(values)


def _clamped(self: Any, indices: Sequence[Any]) -> tuple:
    """Index tuple for the `_unsafe_masked_*` ops: entries the mask hides may be out of range."""
    key: list[Any] = []
    for dim, index in enumerate(indices):
        if index is None:
            key.append(slice(None))
            continue
        size = self.shape[dim]
        key.append(jnp.clip(jnp.where(index < 0, index + size, index), 0, max(size - 1, 0)))
    return tuple(key)


@lowering(aten._unsafe_masked_index.default)
def unsafe_masked_index(self: Any, mask: Any, indices: list, fill: Any) -> Any:
    picked = self[_clamped(self, indices)] if self.size else jnp.zeros(jnp.broadcast_shapes(mask.shape), self.dtype)
    return jnp.where(mask, picked, cast(fill, torch_dtype(self)))


@lowering(aten._unsafe_masked_index_put_accumulate.default)
def unsafe_masked_index_put_accumulate(self: Any, mask: Any, indices: list, values: Any) -> Any:
    if not self.size:
        return self
    return self.at[_clamped(self, indices)].add(jnp.where(mask, values, jnp.zeros((), values.dtype)))


# ---- gather / scatter -------------------------------------------------------------------


def _as_1d(x: Any) -> Any:
    return x.reshape(1) if x.ndim == 0 else x


def _check_gather_shapes(name: str, self: Any, index: Any, dim: int, other: Any = None) -> None:
    if max(index.ndim, 1) != max(self.ndim, 1):
        what = "input" if other is None and name.startswith("gather") else "self"
        raise RuntimeError(f"{name}: Index tensor must have the same number of dimensions as {what} tensor")
    if other is not None and max(index.ndim, 1) != max(other.ndim, 1):
        raise RuntimeError(f"{name}: Index tensor must have the same number of dimensions as src tensor")
    for d in range(index.ndim):
        if d != dim and index.shape[d] > _as_1d(self).shape[d]:
            raise RuntimeError(
                f"Size does not match at dimension {d} expected index {list(index.shape)} to be no larger than "
                f"self {list(self.shape)} apart from dimension {dim}"
            )
        if other is not None and index.shape[d] > _as_1d(other).shape[d]:
            raise RuntimeError(
                f"Expected index {list(index.shape)} to be no larger than src {list(other.shape)} in any dimension"
            )


@lowering(aten.gather.default)
def gather(self: Any, dim: int, index: Any, sparse_grad: bool = False) -> Any:
    dim = wrap_dim(dim, self.ndim)
    if not index.size:
        return jnp.zeros(index.shape, self.dtype)
    _check_gather_shapes("gather()", self, index, dim)
    src, idx = _as_1d(self), _as_1d(index)
    size = src.shape[dim]
    idx = _bounded(idx, size, _oob(dim, size), RuntimeError, negative=False)
    src = src[tuple(slice(None) if d == dim else slice(0, n) for d, n in enumerate(idx.shape))]
    return jnp.take_along_axis(src, idx, axis=dim).reshape(index.shape)


_IDENTITY = {"sum": 0, "prod": 1, "mean": 0}


def _reduce_identity(reduce: str, dtype: Any) -> Any:
    if reduce in _IDENTITY:
        return jnp.asarray(_IDENTITY[reduce], dtype)
    if dtype == jnp.bool_:
        return jnp.asarray(reduce == "amin")
    info = jnp.finfo(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jnp.asarray(jnp.inf if reduce == "amin" else -jnp.inf, dtype)
    return jnp.asarray(info.max if reduce == "amin" else info.min, dtype)


def _reduce_into(self: Any, key: tuple, values: Any, reduce: str | None, include_self: bool = True) -> Any:
    """`self` with `values` reduced into the positions `self[key]` (duplicates combine)."""
    if reduce is None:
        return self.at[key].set(values)
    reduce = {"add": "sum", "multiply": "prod"}.get(reduce, reduce)
    boolean = self.dtype == jnp.bool_
    if not include_self:
        touched = jnp.zeros(self.shape, bool).at[key].set(True)
        self = jnp.where(touched, _reduce_identity(reduce, self.dtype), self)
    at = self.at[key]
    if reduce in ("sum", "mean"):
        total = at.max(values) if boolean else at.add(values)
    elif reduce == "prod":
        total = at.min(values) if boolean else at.multiply(values)
    elif reduce == "amax":
        total = at.max(values)
    elif reduce == "amin":
        total = at.min(values)
    else:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
    if reduce != "mean":
        return total
    count = jnp.zeros(self.shape, jnp.int64).at[key].add(1) + int(include_self)
    count = jnp.maximum(count, 1).astype(self.dtype)
    if jnp.issubdtype(self.dtype, jnp.integer):
        return jnp.floor_divide(total, count)
    return (total.astype(jnp.float32) / count.astype(jnp.float32)).astype(self.dtype)


def _scatter(
    name: str, self: Any, dim: int, index: Any, src: Any, reduce: str | None = None, include_self: bool = True
) -> Any:
    dim = wrap_dim(dim, self.ndim)
    tensor_src = hasattr(src, "ndim") and not getattr(src, "weak_type", False)
    if tensor_src:
        _same_dtype(name, self, src, "src")
    if not index.size:
        return self
    _check_gather_shapes(f"{name}()", self, index, dim, src if tensor_src else None)
    out, idx = _as_1d(self), _as_1d(index)
    size = out.shape[dim]
    idx = _bounded(idx, size, _oob(dim, size), RuntimeError, negative=False)
    key = tuple(idx if d == dim else lax.broadcasted_iota(jnp.int64, idx.shape, d) for d in range(idx.ndim))
    if tensor_src:
        values = _as_1d(src)[tuple(slice(0, n) for n in idx.shape)]
    else:
        values = jnp.broadcast_to(cast(src, torch_dtype(self)), idx.shape)
    return _reduce_into(out, key, values, reduce, include_self).reshape(self.shape)


@lowering(aten.scatter.src, aten.scatter.value)
def scatter(self: Any, dim: int, index: Any, src: Any) -> Any:
    return _scatter("scatter", self, dim, index, src)


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def scatter_with_reduce(self: Any, dim: int, index: Any, src: Any, reduce: str) -> Any:
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
    return _scatter("scatter", self, dim, index, src, reduce)


@lowering(aten.scatter_add.default)
def scatter_add(self: Any, dim: int, index: Any, src: Any) -> Any:
    return _scatter("scatter_add", self, dim, index, src, "sum")


@lowering(aten.scatter_reduce.two)
def scatter_reduce(self: Any, dim: int, index: Any, src: Any, reduce: str, include_self: bool = True) -> Any:
    return _scatter("scatter_reduce", self, dim, index, src, reduce, include_self)


# ---- index_* along one dimension --------------------------------------------------------


def _along(self: Any, dim: int, index: Any, message: str, negative: bool, error: type[Exception]) -> tuple:
    """(self as >=1-d, key selecting `index` along `dim`)."""
    out = _as_1d(self)
    size = out.shape[dim]
    idx = _bounded(_as_1d(index), size, message, error, negative)
    return out, (slice(None),) * dim + (idx,)


def _check_index_vector(name: str, index: Any) -> None:
    if index.ndim > 1:
        raise IndexError(f"{name}: Index is supposed to be a vector")
    if index.dtype not in (jnp.int64, jnp.int32):
        raise IndexError(f"{name}: Expected dtype int32/int64 for index but got {torch_dtype(index)}")


@lowering(aten.index_select.default)
def index_select(self: Any, dim: int, index: Any) -> Any:
    _check_index_vector("index_select()", index)
    dim = wrap_dim(dim, self.ndim)
    src = _as_1d(self)
    size = src.shape[dim]
    if self.ndim == 0 and index.size != 1:
        raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {index.size} value(s)")
    message = f"INDICES element is out of DATA bounds, id={{}} axis_dim={size}"
    idx = _bounded(_as_1d(index), size, message, RuntimeError, negative=False)
    out = jnp.take(src, idx, axis=dim)
    return out.reshape(()) if self.ndim == 0 else out


def _check_source(name: str, self: Any, dim: int, index: Any, source: Any) -> None:
    _check_index_vector(name, index)
    _same_dtype(name, self, source)
    want = list(_as_1d(self).shape)
    want[dim] = index.size
    if self.ndim and tuple(_as_1d(source).shape) != tuple(want):
        raise RuntimeError(f"{name}: source shape {list(source.shape)} does not match {want} (index along dim {dim})")


def _index_func_args(name: str, self: Any, dim: int, index: Any, source: Any) -> None:
    """index_add_'s and index_reduce_'s checks (PyTorch's index_func_meta_impl), in its order;
    `dim` is wrapped."""
    if index.ndim > 1:
        raise IndexError(
            f"{name}(): Index is supposed to be a vector, but got dim: {index.ndim} with type: "
            f"{scalar_type_name(torch_dtype(index))} and size: {list(index.shape)}"
        )
    if index.dtype not in (jnp.int64, jnp.int32):
        raise RuntimeError(
            f"{name}(): Expected dtype int32/int64 for index but got: {scalar_type_name(torch_dtype(index))}"
        )
    if self.dtype != source.dtype:
        raise RuntimeError(
            f"{name}(): self ({scalar_type_name(torch_dtype(self))}) and source "
            f"({scalar_type_name(torch_dtype(source))}) must have the same scalar type"
        )
    if dim != 0 and dim >= source.ndim:
        raise RuntimeError(f"{name}(): Indexing dim {dim} is out of bounds of the source tensor with dim {source.ndim}")
    if source.ndim == 0 and index.size != 1:
        # CPU's message for this check reads source.size(dim), which itself fails on a 0-d source
        raise IndexError(f"Dimension specified as {dim} but tensor has no dimensions")
    if source.ndim and index.size != source.shape[dim]:
        raise RuntimeError(
            f"{name}(): Number of indices ({index.size}) should be equal to source.size(dim): ({source.shape[dim]}), "
            f"for dim: {dim}"
        )
    self_sizes, source_sizes = list(self.shape), list(source.shape)
    if self.ndim and source.ndim:
        del self_sizes[dim], source_sizes[dim]
    if self_sizes != source_sizes:
        raise RuntimeError(
            "source tensor shape must match self tensor shape, excluding the specified dimension. Got self.shape = "
            f"{list(self.shape)} source.shape = {list(source.shape)}"
        )


@lowering(aten.index_add.default)
def index_add(self: Any, dim: int, index: Any, source: Any, alpha: Any = 1) -> Any:
    dim = wrap_dim(dim, self.ndim)
    _index_func_args("index_add_", self, dim, index, source)
    out, key = _along(self, dim, index, _oob(dim, _as_1d(self).shape[dim]), False, RuntimeError)
    values = _as_1d(source)
    if not (isinstance(alpha, int) and alpha == 1):
        values = values * cast(alpha, torch_dtype(self))
    total = out.at[key].max(values) if self.dtype == jnp.bool_ else out.at[key].add(values)
    return total.reshape(self.shape)


@lowering(aten.index_copy.default)
def index_copy(self: Any, dim: int, index: Any, source: Any) -> Any:
    dim = wrap_dim(dim, self.ndim)
    _check_source("index_copy()", self, dim, index, source)
    message = f"index_copy_(): {_oob(dim, _as_1d(self).shape[dim])}"
    out, key = _along(self, dim, index, message, False, IndexError)
    return out.at[key].set(_as_1d(source)).reshape(self.shape)


@lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(self: Any, dim: int, index: Any, value: Any) -> Any:
    dim = wrap_dim(dim, self.ndim)
    _check_index_vector("index_fill_()", index)
    if hasattr(value, "ndim") and value.ndim:
        raise RuntimeError(
            f"index_fill_ only supports a 0-dimensional value tensor, but got tensor with {value.ndim} dimension(s)."
        )
    out, key = _along(self, dim, index, _oob(dim, _as_1d(self).shape[dim]), True, IndexError)
    return out.at[key].set(cast(value, torch_dtype(self))).reshape(self.shape)


@lowering(aten.index_reduce.default)
def index_reduce(self: Any, dim: int, index: Any, source: Any, reduce: str, include_self: bool = True) -> Any:
    dim = wrap_dim(dim, self.ndim)
    _index_func_args("index_reduce_", self, dim, index, source)
    if reduce not in ("prod", "mean", "amax", "amin"):
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got {reduce}.")
    out, key = _along(self, dim, index, "index out of range in self", False, IndexError)
    return _reduce_into(out, key, _as_1d(source), reduce, include_self).reshape(self.shape)


# ---- masks, nonzero ---------------------------------------------------------------------


@lowering(aten.masked_scatter.default)
def masked_scatter(self: Any, mask: Any, source: Any) -> Any:
    if mask.dtype != jnp.bool_:
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with dtype {torch_dtype(mask)}")
    _same_dtype("masked_scatter", self, source)
    shape = jnp.broadcast_shapes(self.shape, mask.shape)
    flat = jnp.broadcast_to(mask, shape).reshape(-1)
    count = jnp.count_nonzero(flat)
    check(count <= source.size, RuntimeError, "Number of elements of source < number of ones in mask")
    if not source.size:
        return jnp.broadcast_to(self, shape)
    position = jnp.clip(jnp.cumsum(flat) - 1, 0, source.size - 1)
    picked = source.reshape(-1)[position].reshape(shape)
    return jnp.where(flat.reshape(shape), picked, jnp.broadcast_to(self, shape))


def _masked_count(self: Any, mask: Any) -> Any:
    return jnp.count_nonzero(jnp.broadcast_to(mask, jnp.broadcast_shapes(self.shape, mask.shape)))


@lowering(aten.masked_select.default, size=_masked_count)
def masked_select(self: Any, mask: Any, size: int = 0) -> Any:
    if mask.dtype != jnp.bool_:
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {torch_dtype(mask)}")
    shape = jnp.broadcast_shapes(self.shape, mask.shape)
    (where,) = jnp.nonzero(jnp.broadcast_to(mask, shape).reshape(-1), size=size)
    return jnp.broadcast_to(self, shape).reshape(-1)[where]


def _positions(x: Any, size: int, fill_value: int = -1) -> Any:
    if x.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    if x.size == 0:
        return jnp.full((size, x.ndim), fill_value, jnp.int64)
    return jnp.stack(jnp.nonzero(x, size=size, fill_value=fill_value), axis=1).astype(jnp.int64)


@lowering(aten.nonzero.default, size=jnp.count_nonzero)
def nonzero(self: Any, size: int = 0) -> Any:
    return _positions(self, size)


@lowering(aten.nonzero_static.default)
def nonzero_static(self: Any, size: int, fill_value: int = -1) -> Any:
    return _positions(self, size, fill_value)


# ---- flat take / put --------------------------------------------------------------------


def _flat_bounded(self: Any, index: Any) -> Any:
    message = f"out of range: tried to access index {{}} on a tensor of {self.size} elements."
    return _bounded(index, self.size, message)


@lowering(aten.take.default)
def take(self: Any, index: Any) -> Any:
    if self.size == 0 and index.size:
        raise IndexError("take(): tried to take from an empty tensor")
    if not index.size:
        return jnp.zeros(index.shape, self.dtype)
    return self.reshape(-1)[_flat_bounded(self, index)]


@lowering(aten.put.default)
def put(self: Any, index: Any, source: Any, accumulate: bool = False) -> Any:
    _same_dtype("put_()", self, source)
    if index.size != source.size:
        raise RuntimeError(
            f"put_(): Expected source and index to have the same number of elements, but got source.numel() = "
            f"{source.size}, index.numel() = {index.size}"
        )
    if not index.size:
        return self
    flat, idx, values = self.reshape(-1), _flat_bounded(self, index).reshape(-1), source.reshape(-1)
    if not accumulate:
        return flat.at[idx].set(values).reshape(self.shape)
    total = flat.at[idx].max(values) if self.dtype == jnp.bool_ else flat.at[idx].add(values)
    return total.reshape(self.shape)


# ---- embedding a tensor into a view of another -----------------------------------------


def _view_scatter(name: str, view: Any) -> Any:
    def lowered(self: Any, src: Any, *args: Any) -> Any:
        geometry = view_geometry(view, self.shape, *args)
        check_in_bounds(geometry, self)
        if tuple(src.shape) != geometry.shape:
            raise RuntimeError(
                f"{name}: expected src to have a size equal to the slice of self. src size = "
                f"{list(src.shape)}, slice size = {list(geometry.shape)}"
            )
        return write_view(self, geometry, src.astype(self.dtype))

    return lowered


for _op, _view in (
    (aten.select_scatter.default, aten.select.int),
    (aten.slice_scatter.default, aten.slice.Tensor),
    (aten.diagonal_scatter.default, aten.diagonal.default),
    (aten.as_strided_scatter.default, aten.as_strided.default),
):
    lowering(_op)(_view_scatter(_op._schema.name.split("::")[1], _view))
