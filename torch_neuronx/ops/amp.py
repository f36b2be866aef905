"""AMP gradient scaling, the two ops `torch.amp.GradScaler` calls:
`_amp_foreach_non_finite_check_and_unscale_` (flag non-finite gradients, unscale them) and
`_amp_update_scale_` (back off on overflow, grow after a run of clean steps), with their
functional twins. Gradients are unscaled in their opmath dtype; the scale is updated in float64.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from . import lowering
from ._common import opmath_dtype

aten = torch.ops.aten


@lowering(
    aten._amp_foreach_non_finite_check_and_unscale_.default, aten._amp_foreach_non_finite_check_and_unscale.default
)
def non_finite_check_and_unscale(grads: list, found_inf: Any, inv_scale: Any) -> tuple:
    """Flag non-finite gradients in found_inf (never cleared here) and multiply by inv_scale."""
    bad = found_inf.reshape(())
    new_grads = []
    for g in grads:
        compute = opmath_dtype(g)
        bad = jnp.where(jnp.any(~jnp.isfinite(g)), jnp.ones_like(bad), bad)
        scale = inv_scale.reshape(()).astype(compute)
        scaled = jnp.where(scale == 1, g.astype(compute), g.astype(compute) * scale)
        new_grads.append(scaled.astype(g.dtype))
    return new_grads, bad.reshape(found_inf.shape)


@lowering(aten._amp_update_scale_.default, aten._amp_update_scale.default)
def amp_update_scale(
    scale: Any, growth_tracker: Any, found_inf: Any, growth_factor: Any, backoff_factor: Any, growth_interval: int
) -> tuple:
    """GradScaler.update: back off on overflow, grow after `growth_interval` clean steps."""
    current = scale.astype(jnp.float64)
    successful = growth_tracker + 1
    grown = (current * growth_factor).astype(scale.dtype)
    grow = successful == growth_interval
    clean_scale = jnp.where(grow & jnp.isfinite(grown), grown, scale)
    clean_tracker = jnp.where(grow, jnp.zeros_like(successful), successful)
    overflow = found_inf.reshape(()) != 0
    new_scale = jnp.where(overflow, (current * backoff_factor).astype(scale.dtype), clean_scale)
    return new_scale, jnp.where(overflow, jnp.zeros_like(growth_tracker), clean_tracker)
