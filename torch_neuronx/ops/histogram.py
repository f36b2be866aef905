"""Histograms: `histc`.

Transformers' mixture-of-experts layers count tokens per expert with `torch.histc` on integer
expert ids on accelerators (the CUDA path; PyTorch CPU has no integer histc, so the CPU
fallback cannot serve it). Integer inputs follow CUDA's rule (integer arithmetic
`(x - min) * bins // (max - min)`); floating inputs follow the CPU kernel (bin edges from
`linspace(min, max, bins + 1)` in the input dtype, each element in the bin whose edges enclose
it). Both: elements outside [min, max] are ignored, `max` falls in the last bin, and
`min == max` means the data's own range (widened by 1 each way if still empty).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from . import lowering
from ._dtypes import cast, torch_dtype

aten = torch.ops.aten


@lowering(aten.histc.default)
def histc(x: Any, bins: int = 100, min: Any = 0, max: Any = 0) -> Any:
    if bins <= 0:
        raise RuntimeError(f"neuron: histc: bins must be > 0, but got {bins}")
    dtype = torch_dtype(x)
    flat = x.reshape(-1)
    integer = not dtype.is_floating_point
    bound = jnp.int64 if integer else flat.dtype
    lo, hi = jnp.asarray(min).astype(bound), jnp.asarray(max).astype(bound)
    if flat.size:
        lo, hi = jnp.where(lo == hi, flat.min().astype(bound), lo), jnp.where(lo == hi, flat.max().astype(bound), hi)
    lo, hi = jnp.where(lo == hi, lo - 1, lo), jnp.where(lo == hi, hi + 1, hi)
    if integer:
        values = flat.astype(jnp.int64)
        position = (values - lo) * bins // (hi - lo)
    else:
        values = flat
        edges = lo + (hi - lo) * (jnp.arange(bins + 1, dtype=jnp.float64) / bins).astype(flat.dtype)
        position = jnp.searchsorted(edges, values, side="right") - 1
    inside = (values >= lo) & (values <= hi)
    position = jnp.clip(position, 0, bins - 1)
    counts = jnp.zeros(bins, jnp.int64).at[jnp.where(inside, position, 0)].add(inside.astype(jnp.int64))
    return cast(counts, dtype)
