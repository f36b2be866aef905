"""Resampling and rearranging pixels: upsampling (nearest, nearest-exact, linear, bicubic and
the antialiased filters; 1-, 2- and 3-d, with backward), grid sampling (2- and 3-d, with
backward), and pixel and channel shuffles.

Upsampling follows PyTorch's CPU kernels: each axis is resampled in turn, last to first, by
static source indices and per-output weights, in the input's opmath dtype (the nearest modes
only gather, in the input's own dtype). The backward is the `jax.vjp` of the forward. Grid
sampling follows PyTorch's grid_sampler_compute_source_index (unnormalize, then clip for
"border" or reflect and clip for "reflection") and gathers the bilinear/trilinear corners or
the nearest pixel (rounded half to even), taps outside the input reading 0; bicubic pads each
of its 16 taps instead. Its backward is the `jax.vjp` of the forward, which gives CPU's
gradients: none through floor, round or a clipped coordinate. Shuffles are a reshape and a
transpose.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import lowering
from ._common import linear_vjp, opmath_dtype

aten = torch.ops.aten


# ---- grid sampling ----------------------------------------------------------------------

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2


def _reflect(x: Any, twice_low: int, twice_high: int) -> Any:
    if twice_low == twice_high:
        return jnp.zeros_like(x)
    low, span = twice_low / 2, (twice_high - twice_low) / 2
    x = jnp.abs(x - low)
    extra, flips = jnp.fmod(x, span), jnp.floor(x / span)
    return jnp.where(flips % 2 == 0, extra + low, span - extra + low)


def _clip(x: Any, size: int) -> Any:
    """PyTorch's clip_coordinates: a coordinate on a border gets no gradient (CPU counts borders
    as clipped; jnp.clip would pass half the gradient there), and NaN becomes 0 as in the 2-d
    CPU kernel."""
    return jnp.where(x > 0, jnp.where(x < size - 1, x, size - 1), 0)


def _pad_coordinate(x: Any, size: int, padding: int, align_corners: bool) -> Any:
    """PyTorch's compute_coordinates: a pixel coordinate moved inside the input by the padding
    mode ("zeros" leaves it, and its taps outside read 0)."""
    if padding == _REFLECTION:
        x = _reflect(x, 0, 2 * (size - 1)) if align_corners else _reflect(x, -1, 2 * size - 1)
    if padding in (_BORDER, _REFLECTION):
        x = _clip(x, size)
    return x


def _unnormalize(coord: Any, size: int, align_corners: bool) -> Any:
    """Where a normalized grid coordinate in [-1, 1] falls in an axis of `size` pixels."""
    return (coord + 1) / 2 * (size - 1) if align_corners else ((coord + 1) * size - 1) / 2


def _tap(flat: Any, spatial: Sequence[int], coords: Sequence[Any]) -> Any:
    """The input `flat` [n, c, prod(spatial)] at integral float coordinates `coords` (one
    [n, *points] array per axis, in the grid's order: x first); 0 outside the input."""
    n = flat.shape[0]
    inside, index = True, 0
    for size, coord in zip(spatial, reversed(coords)):
        inside = inside & (coord >= 0) & (coord < size)
        index = index * size + jnp.clip(coord, 0, size - 1).astype(jnp.int64)
    values = jnp.take_along_axis(flat, index.reshape(n, 1, -1), axis=2)
    return jnp.where(inside.reshape(n, 1, -1), values, 0)


def _grid_sample(x: Any, grid: Any, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Any:
    """grid_sampler_2d and _3d as PyTorch's CPU kernels compute them, in the input's opmath
    dtype; the gradients are this function's `jax.vjp` (floor and round pass none)."""
    n, c, *spatial = x.shape
    compute = opmath_dtype(x)
    g = grid.astype(compute)
    sizes = spatial[::-1]  # the grid's last dim is (x, y[, z])
    flat = x.reshape(n, c, -1).astype(compute)
    if interpolation_mode == _BICUBIC:
        # Bicubic taps the 4x4 pixels around the unpadded coordinate and pads each tap's
        # coordinate: padding the coordinate first would move the taps (CPU's note).
        coords = [_unnormalize(g[..., i], size, align_corners) for i, size in enumerate(sizes)]
        (ix, iy), (wx, wy) = zip(*((jnp.floor(v), _cubic_weights(v - jnp.floor(v))) for v in coords))
        out = 0
        for j in range(4):
            ty = _pad_coordinate(iy + (j - 1), sizes[1], padding_mode, align_corners)
            row = 0
            for i in range(4):
                tx = _pad_coordinate(ix + (i - 1), sizes[0], padding_mode, align_corners)
                row = row + wx[..., i].reshape(n, 1, -1) * _tap(flat, spatial, (tx, ty))
            out = out + wy[..., j].reshape(n, 1, -1) * row
    else:
        coords = [
            _pad_coordinate(_unnormalize(g[..., i], size, align_corners), size, padding_mode, align_corners)
            for i, size in enumerate(sizes)
        ]
        if interpolation_mode == _NEAREST:  # rounded half to even, as CPU's nearbyint
            out = _tap(flat, spatial, [jnp.round(v) for v in coords])
        else:  # the corners in CPU's order (x fastest), weights products of 1 - frac and frac
            low = [jnp.floor(v) for v in coords]
            frac = [v - lo for v, lo in zip(coords, low)]
            out = 0
            for corner in range(2 ** len(sizes)):
                bits = [(corner >> i) & 1 for i in range(len(sizes))]
                weight = 1
                for f, bit in zip(frac, bits):
                    weight = weight * (f if bit else 1 - f)
                out = out + _tap(flat, spatial, [lo + bit for lo, bit in zip(low, bits)]) * weight.reshape(n, 1, -1)
    return out.reshape(n, c, *grid.shape[1:-1]).astype(x.dtype)


@lowering(aten.grid_sampler_2d.default)
def grid_sampler_2d(x: Any, grid: Any, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Any:
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@lowering(aten.grid_sampler_3d.default)
def grid_sampler_3d(x: Any, grid: Any, interpolation_mode: int, padding_mode: int, align_corners: bool) -> Any:
    if interpolation_mode == _BICUBIC:
        raise RuntimeError("grid_sampler(): bicubic interpolation only supports 4D input")
    return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)


@lowering(aten.grid_sampler_2d_backward.default, aten.grid_sampler_3d_backward.default)
def grid_sampler_backward(
    grad: Any,
    x: Any,
    grid: Any,
    interpolation_mode: int,
    padding_mode: int,
    align_corners: bool,
    output_mask: Sequence[bool],
) -> tuple[Any, Any]:
    """The input's gradient where output_mask[0] asks for it, the grid's always (as CPU)."""

    def sample(x: Any, grid: Any) -> Any:
        return _grid_sample(x, grid, interpolation_mode, padding_mode, align_corners)

    if output_mask[0]:
        return jax.vjp(sample, x, grid)[1](grad)
    return None, jax.vjp(lambda grid: sample(x, grid), grid)[1](grad)[0]


# ---- upsampling -------------------------------------------------------------------------


def _scale(in_size: int, out_size: int, align_corners: bool, scale: Any, dtype: Any) -> Any:
    """PyTorch's area_pixel_compute_scale: input pixels per output pixel."""
    if align_corners:
        return jnp.asarray((in_size - 1) / (out_size - 1) if out_size > 1 else 0, dtype)
    ratio = jnp.asarray(in_size, dtype) / jnp.asarray(out_size, dtype)
    if scale is None:
        return ratio
    return jnp.where(scale > 0, (1.0 / jnp.where(scale > 0, scale, 1.0)).astype(dtype), ratio)


def _cubic_weights(t: Any) -> Any:
    a = -0.75

    def near(v: Any) -> Any:
        return ((a + 2) * v - (a + 3)) * v * v + 1

    def far(v: Any) -> Any:
        return ((a * v - 5 * a) * v + 8 * a) * v - 4 * a

    return jnp.stack([far(t + 1), near(t), near(1 - t), far(2 - t)], axis=-1)


def _aa_linear(x: Any) -> Any:
    x = jnp.abs(x)
    return jnp.where(x < 1, 1 - x, 0)


def _aa_cubic(x: Any) -> Any:
    a, x = -0.5, jnp.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return jnp.where(x < 1, near, jnp.where(x < 2, far, 0))


# mode -> (filter, interpolation size) of the antialiased (PIL-style) resampling.
_AA_FILTERS = {"aa-linear": (_aa_linear, 2), "aa-cubic": (_aa_cubic, 4)}


def _antialias_taps(
    mode: str, in_size: int, out_size: int, align_corners: bool, scale: Any, dtype: Any
) -> tuple[Any, Any]:
    """PyTorch's antialiased weights: a filter stretched by the downscale factor, normalized
    per output pixel, over a window of ceil(support) * 2 + 1 taps."""
    filter_fn, interp = _AA_FILTERS[mode]
    ratio = _scale(in_size, out_size, align_corners, scale, dtype)
    nominal = (in_size - 1) / (out_size - 1) if align_corners and out_size > 1 else in_size / out_size
    taps = math.ceil(interp * 0.5 * max(nominal, 1.0)) * 2 + 1
    support = jnp.where(ratio >= 1, interp * 0.5 * ratio, interp * 0.5)
    invscale = jnp.where(ratio >= 1, 1 / jnp.where(ratio >= 1, ratio, 1), 1).astype(dtype)
    center = ratio * (jnp.arange(out_size, dtype=dtype) + 0.5)
    low = jnp.maximum(jnp.trunc(center - support + 0.5).astype(jnp.int64), 0)
    high = jnp.minimum(jnp.trunc(center + support + 0.5).astype(jnp.int64), in_size)
    size = jnp.clip(high - low, 0, taps)
    j = jnp.arange(taps)
    weights = filter_fn((j[None, :] + low[:, None] - center[:, None] + 0.5) * invscale)
    weights = jnp.where(j[None, :] < size[:, None], weights, 0).astype(dtype)
    total = weights.sum(1, keepdims=True)
    weights = jnp.where(total != 0, weights / jnp.where(total != 0, total, 1), weights)
    return jnp.minimum(low[:, None] + j[None, :], in_size - 1), weights


def _taps(mode: str, in_size: int, out_size: int, align_corners: bool, scale: Any, dtype: Any) -> tuple[Any, Any]:
    """[out, taps] source indices and weights (None: a plain gather) along one axis."""
    o = jnp.arange(out_size)
    if mode in _AA_FILTERS:
        return _antialias_taps(mode, in_size, out_size, align_corners, scale, dtype)
    if mode == "nearest":
        if out_size == in_size:
            return o[:, None], None
        if out_size == 2 * in_size:
            return (o >> 1)[:, None], None
        src = jnp.floor(o.astype(jnp.float32) * _scale(in_size, out_size, False, scale, jnp.float32))
        return jnp.minimum(src.astype(jnp.int64), in_size - 1)[:, None], None
    if mode == "nearest-exact":
        ratio = _scale(in_size, out_size, False, scale, jnp.float32).astype(jnp.float64)
        src = jnp.floor(((o + 0.5) * ratio).astype(jnp.float32))
        return jnp.minimum(src.astype(jnp.int64), in_size - 1)[:, None], None
    ratio = _scale(in_size, out_size, align_corners, scale, dtype)
    od = o.astype(dtype)
    src = ratio * od if align_corners else ratio * (od + 0.5) - 0.5
    if mode == "linear":
        src = jnp.maximum(src, 0)
        i0 = jnp.minimum(jnp.floor(src).astype(jnp.int64), in_size - 1)
        l1 = jnp.clip(src - i0, 0, 1)
        return jnp.stack([i0, jnp.minimum(i0 + 1, in_size - 1)], -1), jnp.stack([1 - l1, l1], -1)
    base = jnp.floor(src)
    idx = base.astype(jnp.int64)[:, None] + jnp.arange(-1, 3)[None, :]
    return jnp.clip(idx, 0, in_size - 1), _cubic_weights(src - base)


def _resample(y: Any, axis: int, idx: Any, weights: Any) -> Any:
    taps = [jnp.take(y, idx[:, k], axis=axis) for k in range(idx.shape[1])]
    if weights is None:
        return taps[0]
    shape = (-1,) + (1,) * (y.ndim - axis - 1)
    total = taps[0] * weights[:, 0].reshape(shape)
    for k in range(1, len(taps)):
        total = total + taps[k] * weights[:, k].reshape(shape)
    return total


def _upsample(mode: str, nd: int, aligned: bool) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(forward, backward) lowerings of one upsample op; axes resample last to first, as the
    CPU kernels accumulate."""

    def forward(x: Any, output_size: Sequence[int], *rest: Any) -> Any:
        align_corners = bool(rest[0]) if aligned else False
        scales = list(rest[1:] if aligned else rest) + [None] * nd
        compute = x.dtype if mode.startswith("nearest") else opmath_dtype(x)
        y = x.astype(compute)
        for d in reversed(range(nd)):
            axis = x.ndim - nd + d
            idx, weights = _taps(mode, x.shape[axis], output_size[d], align_corners, scales[d], compute)
            y = _resample(y, axis, idx, weights)
        return y.astype(x.dtype)

    def backward(grad: Any, output_size: Sequence[int], input_size: Sequence[int], *rest: Any) -> Any:
        return linear_vjp(lambda v: forward(v, output_size, *rest), input_size, grad)

    return forward, backward


for _name, _mode, _nd, _aligned in (
    ("upsample_nearest1d", "nearest", 1, False),
    ("upsample_nearest2d", "nearest", 2, False),
    ("upsample_nearest3d", "nearest", 3, False),
    ("_upsample_nearest_exact1d", "nearest-exact", 1, False),
    ("_upsample_nearest_exact2d", "nearest-exact", 2, False),
    ("_upsample_nearest_exact3d", "nearest-exact", 3, False),
    ("upsample_linear1d", "linear", 1, True),
    ("upsample_bilinear2d", "linear", 2, True),
    ("upsample_trilinear3d", "linear", 3, True),
    ("upsample_bicubic2d", "cubic", 2, True),
    ("_upsample_bilinear2d_aa", "aa-linear", 2, True),
    ("_upsample_bicubic2d_aa", "aa-cubic", 2, True),
):
    _forward, _backward = _upsample(_mode, _nd, _aligned)
    lowering(getattr(aten, _name).default)(_forward)
    lowering(getattr(aten, _name + "_backward").default)(_backward)


# ---- shuffles ---------------------------------------------------------------------------


@lowering(aten.pixel_shuffle.default)
def pixel_shuffle(x: Any, upscale_factor: int) -> Any:
    r = upscale_factor
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c // (r * r), r, r, h, w)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return y.reshape(*lead, c // (r * r), h * r, w * r)


@lowering(aten.pixel_unshuffle.default)
def pixel_unshuffle(x: Any, downscale_factor: int) -> Any:
    r = downscale_factor
    *lead, c, h, w = x.shape
    y = x.reshape(*lead, c, h // r, r, w // r, r)
    n = len(lead)
    y = y.transpose(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return y.reshape(*lead, c * r * r, h // r, w // r)


@lowering(aten.channel_shuffle.default, aten.native_channel_shuffle.default)
def channel_shuffle(x: Any, groups: int) -> Any:
    n, c = x.shape[:2]
    return x.reshape(n, groups, c // groups, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape)
