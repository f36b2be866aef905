"""Reading and writing a tensor through its geometry (sizes, strides, storage offset) on the
flat buffer of its storage. Runs inside the traced executable; all index math is static.

The cheap forms come first: a dense window is a slice + reshape, a permuted or positively
strided window is a padded reshape of the buffer into a dense "base" block, a static slice
and a transpose; stride-0 (expanded) dims are a broadcast. Only overlapping geometry (e.g.
`unfold` windows) needs a gather or scatter with statically computed indices.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import lax


class Geometry(NamedTuple):
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


class _Plan(NamedTuple):
    """How a non-overlapping view sits in its buffer: the base block and how to cut it."""

    start: int
    base: tuple[int, ...]  # dense block shape, outermost first
    cut: tuple[slice | int, ...]  # indexes the base down to the kept dims (sorted order)
    order: tuple[int, ...]  # kept dims in sorted (outer->inner) order
    kept_shape: tuple[int, ...]


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def memory_order(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, ...] | None:
    """The dims from outermost to innermost in memory where (shape, strides) lays the elements
    out densely with no overlap (a permutation of a contiguous layout); None otherwise."""
    order = tuple(sorted(range(len(shape)), key=lambda d: -strides[d]))
    permuted = contiguous_strides(tuple(shape[d] for d in order))
    if any(shape[d] > 1 and strides[d] != s for d, s in zip(order, permuted)):
        return None
    return order


def _plan(geom: Geometry) -> _Plan | None:
    """Describe `geom` as a strided cut of a dense block, or None if elements overlap."""
    dims = [d for d, (n, s) in enumerate(zip(geom.shape, geom.strides)) if n > 1 and s != 0]
    order = tuple(sorted(dims, key=lambda d: -geom.strides[d]))
    base: list[int] = []
    cut: list[slice | int] = []
    for i, d in enumerate(order):
        stride, size = geom.strides[d], geom.shape[d]
        if stride < 0:
            return None
        if i == 0:
            base.append(size)
        else:
            outer = geom.strides[order[i - 1]]
            if outer % stride or size > outer // stride:
                return None
            base.append(outer // stride)
        cut.append(slice(0, size))
    inner = geom.strides[order[-1]] if order else 1
    base.append(inner)
    cut.append(0)
    return _Plan(geom.offset, tuple(base), tuple(cut), order, tuple(geom.shape[d] for d in order))


def _indices(geom: Geometry) -> np.ndarray:
    idx = np.full(geom.shape, geom.offset, dtype=np.int64)
    for d, (n, s) in enumerate(zip(geom.shape, geom.strides)):
        shape = [1] * len(geom.shape)
        shape[d] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return idx


def _block(buf: Any, plan: _Plan) -> Any:
    size = numel(plan.base)
    window = buf[plan.start : plan.start + size]
    if window.shape[0] < size:
        window = jnp.pad(window, (0, size - window.shape[0]))
    return window.reshape(plan.base)


def _kept_to_view(kept: Any, geom: Geometry, plan: _Plan) -> Any:
    """Arrange the kept (sorted, non-broadcast) dims into the view's shape."""
    rank = [d for d in range(len(geom.shape)) if d in plan.order]
    perm = [plan.order.index(d) for d in rank]
    arranged = jnp.transpose(kept, perm) if perm != sorted(perm) else kept
    return lax.broadcast_in_dim(arranged, geom.shape, tuple(rank)) if rank or geom.shape else arranged


def is_dense(geom: Geometry, size: int) -> bool:
    """True when the view is exactly the whole buffer in row-major order."""
    return geom.offset == 0 and numel(geom.shape) == size and _packed(geom)


def _packed(geom: Geometry) -> bool:
    expect = 1
    for n, s in zip(reversed(geom.shape), reversed(geom.strides)):
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def read(buf: Any, geom: Geometry) -> Any:
    """The view's elements as an array of shape `geom.shape`."""
    count = numel(geom.shape)
    if count == 0:
        return jnp.zeros(geom.shape, buf.dtype)
    if _packed(geom):
        flat = buf if (geom.offset == 0 and buf.shape[0] == count) else buf[geom.offset : geom.offset + count]
        return flat.reshape(geom.shape)
    plan = _plan(geom)
    if plan is None:
        return buf[_indices(geom)]
    kept = _block(buf, plan)[plan.cut]
    return _kept_to_view(kept, geom, plan)


def write(buf: Any, geom: Geometry, value: Any) -> Any:
    """A new buffer equal to `buf` with the view's elements replaced by `value`."""
    count = numel(geom.shape)
    value = jnp.broadcast_to(value, geom.shape).astype(buf.dtype)
    if count == 0:
        return buf
    if _packed(geom):
        if geom.offset == 0 and buf.shape[0] == count:
            return value.reshape(-1)
        return lax.dynamic_update_slice(buf, value.reshape(-1), (geom.offset,))
    plan = _plan(geom)
    if plan is None:
        return buf.at[_indices(geom).reshape(-1)].set(value.reshape(-1))
    rank = [d for d in range(len(geom.shape)) if d in plan.order]
    squeezed = value[tuple(slice(None) if d in plan.order else 0 for d in range(len(geom.shape)))]
    kept = jnp.transpose(squeezed, [rank.index(d) for d in plan.order]) if plan.order else squeezed
    size = numel(plan.base)
    have = min(size, buf.shape[0] - plan.start)
    block = _block(buf, plan).at[plan.cut].set(kept).reshape(-1)
    return lax.dynamic_update_slice(buf, block[:have], (plan.start,))
