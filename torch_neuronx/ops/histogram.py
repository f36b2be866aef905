"""Histograms: `histc`, `histogram` and `histogramdd`.

Transformers' mixture-of-experts layers count tokens per expert with `torch.histc` on integer
expert ids on accelerators (the CUDA path; PyTorch CPU has no integer histc, so the CPU
fallback cannot serve it). Integer inputs follow CUDA's rule (integer arithmetic
`(x - min) * bins // (max - min)`); floating inputs follow the CPU kernel (bin edges from
`linspace(min, max, bins + 1)` in the input dtype, each element in the bin whose edges enclose
it). Both: elements outside [min, max] are ignored, `max` falls in the last bin, and
`min == max` means the data's own range (widened by 1 each way if still empty).

`histogram`/`histogramdd` follow PyTorch's CPU kernel: per dimension the outer edges are the
given range or the data's min and max (0 and 1 for no data), widened by 0.5 each way when equal;
`bins` of them are `linspace` in the input dtype; each point counts (or adds its weight) in the
bin whose edges enclose it, the last bin closed on the right, points outside any edge ignored;
`density` divides by the total and each bin's volume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np
import torch

from . import lowering
from ._common import step_rounding, upcast
from ._dtypes import cast, torch_dtype
from .factory import _symmetric

aten = torch.ops.aten


def _linear_position(values: Any, edges: Any) -> Any:
    """CPU's histc bin (linear interpolation, no search: its edges are not returned):
    `(x - first) * bins / (last - first)` in the input dtype, each step rounded, truncated."""
    bins, r = edges.shape[0] - 1, step_rounding(edges.dtype)
    v, e = upcast(values), upcast(edges)
    estimate = r(r(r(v - e[0]) * bins) / r(e[-1] - e[0]))
    position = jnp.clip(jnp.nan_to_num(estimate), 0, bins).astype(jnp.int64)
    return jnp.where(position == bins, bins - 1, position)  # the last bin is closed on the right


@lowering(aten.histc.default)
def histc(x: Any, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    if bins <= 0:
        raise RuntimeError(f"neuron: histc: bins must be > 0, but got {bins}")
    dtype = torch_dtype(x)
    flat = x.reshape(-1)
    integer = not dtype.is_floating_point
    bound = jnp.int64 if integer else jnp.float64  # CPU picks the outer edges in double
    lo, hi = jnp.asarray(min).astype(bound), jnp.asarray(max).astype(bound)
    if flat.size:
        lo, hi = jnp.where(lo == hi, flat.min().astype(bound), lo), jnp.where(lo == hi, flat.max().astype(bound), hi)
    lo, hi = jnp.where(lo == hi, lo - 1, lo), jnp.where(lo == hi, hi + 1, hi)
    if integer:
        values = flat.astype(jnp.int64)
        position = (values - lo) * bins // (hi - lo)
    else:
        edges = _symmetric(lo, hi, bins + 1, dtype).astype(flat.dtype)  # linspace in the input dtype
        values, position = flat, _linear_position(flat, edges)
        lo, hi = edges[0], edges[-1]
    inside = (values >= lo) & (values <= hi)
    position = jnp.clip(position, 0, bins - 1)
    counts = jnp.zeros(bins, jnp.int64).at[jnp.where(inside, position, 0)].add(inside.astype(jnp.int64))
    return cast(counts, dtype)


def _outer_edges(column: Any, bounds: tuple[float, float] | None) -> tuple[Any, Any]:
    if bounds is not None:
        lo, hi = jnp.asarray(bounds[0], jnp.float64), jnp.asarray(bounds[1], jnp.float64)
    elif column.size:
        lo, hi = column.min().astype(jnp.float64), column.max().astype(jnp.float64)
    else:
        lo, hi = jnp.asarray(0.0, jnp.float64), jnp.asarray(1.0, jnp.float64)
    return jnp.where(lo == hi, lo - 0.5, lo), jnp.where(lo == hi, hi + 0.5, hi)


def _linear_edges(points: Any, bins: Sequence[int], bounds: Sequence[float] | None) -> list[Any]:
    """Per dimension, `bins[d] + 1` evenly spaced edges in the points' dtype."""
    if bounds is not None and len(bounds) != 2 * len(bins):
        raise RuntimeError(
            f"torch.histogramdd: for a {len(bins)}-dimensional histogram range should have {2 * len(bins)} elements, "
            f"but got {len(bounds)}"
        )
    edges = []
    for d, count in enumerate(bins):
        if count <= 0:
            raise RuntimeError(f"torch.histogramdd: bins must be > 0, but got {count} for dimension {d}")
        pair = None if bounds is None else (bounds[2 * d], bounds[2 * d + 1])
        if pair is not None and pair[0] > pair[1]:
            raise RuntimeError(
                f"torch.histogramdd: min should not exceed max, but got min {pair[0]:g} max {pair[1]:g} "
                f"for dimension {d}"
            )
        lo, hi = _outer_edges(points[:, d], pair)
        steps = jnp.arange(count + 1, dtype=jnp.float64) / count
        edges.append((lo + (hi - lo) * steps).astype(points.dtype).at[-1].set(hi.astype(points.dtype)))
    return edges


def _histogramdd(points: Any, edges: Sequence[Any], weight: Any, density: bool) -> Any:
    """Counts (or summed weights) of `points` [N, D] in the bins `edges` describe, as [bins...]."""
    shape = tuple(e.shape[0] - 1 for e in edges)
    flat = jnp.zeros((), jnp.int64)
    inside = jnp.ones(points.shape[0], bool)
    for d, e in enumerate(edges):
        value = points[:, d]
        position = jnp.clip(jnp.searchsorted(e, value, side="right") - 1, 0, shape[d] - 1)
        inside = inside & (value >= e[0]) & (value <= e[-1])
        flat = flat * shape[d] + position
    amount = inside.astype(points.dtype) if weight is None else jnp.where(inside, weight.reshape(-1), 0)
    hist = jnp.zeros(int(np.prod(shape)), points.dtype).at[jnp.where(inside, flat, 0)].add(amount.astype(points.dtype))
    hist = hist.reshape(shape)
    if density:
        volume = jnp.ones(shape, points.dtype)
        for d, e in enumerate(edges):
            volume = volume * jnp.diff(e).reshape([-1 if i == d else 1 for i in range(len(shape))])
        hist = hist / (hist.sum() * volume)
    return hist


def _points(x: Any, dims: int, name: str) -> Any:
    if name == "histogramdd" and (x.ndim == 0 or x.shape[-1] != dims):
        raise RuntimeError("histogramdd: The size of bins must be equal to the innermost dimension of the input.")
    if not torch_dtype(x).is_floating_point:
        raise RuntimeError(
            f"torch.{name}: input tensor and bins tensors should have the same dtype, but got input {torch_dtype(x)}"
        )
    return x.reshape(-1, dims)


@lowering(aten.histogram.bin_ct)
def histogram(
    x: Any, bins: int = 100, range: Sequence[float] | None = None, weight: Any = None, density: bool = False
) -> tuple[Any, Any]:
    points = _points(x, 1, "histogram")
    edges = _linear_edges(points, [bins], range)
    return _histogramdd(points, edges, weight, density), edges[0]


@lowering(aten.histogram.bins_tensor)
def histogram_edges(x: Any, bins: Any, weight: Any = None, density: bool = False) -> tuple[Any, Any]:
    points = _points(x, 1, "histogram")
    return _histogramdd(points, [bins], weight, density), bins


@lowering(aten._histogramdd_bin_edges.default)
def histogramdd_bin_edges(
    x: Any, bins: Sequence[int], range: Sequence[float] | None = None, weight: Any = None, density: bool = False
) -> list[Any]:
    return _linear_edges(_points(x, len(bins), "histogramdd"), bins, range)


@lowering(aten._histogramdd_from_bin_cts.default)
def histogramdd_from_counts(
    x: Any, bins: Sequence[int], range: Sequence[float] | None = None, weight: Any = None, density: bool = False
) -> Any:
    points = _points(x, len(bins), "histogramdd")
    return _histogramdd(points, _linear_edges(points, bins, range), weight, density)


@lowering(aten._histogramdd_from_bin_tensors.default)
def histogramdd_from_edges(x: Any, bins: Sequence[Any], weight: Any = None, density: bool = False) -> Any:
    return _histogramdd(_points(x, len(bins), "histogramdd"), list(bins), weight, density)
