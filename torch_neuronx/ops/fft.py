"""Discrete Fourier transforms: the three ATen primitives every `torch.fft` function (and the
autograd formulas of each) reduces to.

`normalization` is ATen's enum: 0 none, 1 by 1/sqrt(n), 2 by 1/n, where n is the number of
signal elements (the complex-to-real output's sizes for `_fft_c2r`). The transforms here are
unscaled in both directions and the scale is applied once.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import torch

from . import lowering

aten = torch.ops.aten


def _scaled(y: Any, normalization: int, sizes: list[int]) -> Any:
    n = math.prod(sizes)
    scale = {0: 1.0, 1: 1 / math.sqrt(n), 2: 1 / n}[normalization] if n else 1.0
    return y if scale == 1.0 else y * jnp.asarray(scale, y.real.dtype)


def _complex(x: Any) -> Any:
    return x if jnp.iscomplexobj(x) else x.astype(jnp.result_type(x.dtype, jnp.complex64))


@lowering(aten._fft_c2c.default)
def fft_c2c(x: Any, dim: list[int], normalization: int, forward: bool) -> Any:
    axes = tuple(dim)
    y = jnp.fft.fftn(x, axes=axes) if forward else jnp.fft.ifftn(x, axes=axes, norm="forward")
    return _scaled(y, normalization, [x.shape[d] for d in dim])


@lowering(aten._fft_r2c.default)
def fft_r2c(x: Any, dim: list[int], normalization: int, onesided: bool) -> Any:
    axes = tuple(dim)
    y = jnp.fft.rfftn(x, axes=axes) if onesided else jnp.fft.fftn(_complex(x), axes=axes)
    return _scaled(y, normalization, [x.shape[d] for d in dim])


@lowering(aten._fft_c2r.default)
def fft_c2r(x: Any, dim: list[int], normalization: int, last_dim_size: int) -> Any:
    sizes = [x.shape[d] for d in dim[:-1]] + [last_dim_size]
    y = jnp.fft.irfftn(x, s=sizes, axes=tuple(dim), norm="forward")
    return _scaled(y, normalization, sizes)
