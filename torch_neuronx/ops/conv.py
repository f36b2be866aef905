"""Convolution, pooling, upsampling and patch ops (im2col/col2im, pixel shuffle).

Convolutions are one `lax.conv_general_dilated` (HIGHEST precision; a transposed convolution
is the equivalent input-dilated convolution with the flipped kernel). Pooling windows are
gathered with static strided slices, so their geometry costs nothing at run time. Backward
ops are the `jax.vjp` of the forward (convolution, average pooling, upsampling, im2col) or a
scatter of the gradient through the saved argmax indices (max pooling), as PyTorch does.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from . import lowering
from ._common import fail_unless, linear_vjp, opmath, opmath_dtype, per_dim, upcast

aten = torch.ops.aten
_HIGHEST = jax.lax.Precision.HIGHEST


# ---- convolution ------------------------------------------------------------------------


def _check_conv(x: Any, w: Any, transposed: bool, groups: int) -> None:
    fail_unless(
        x.ndim == w.ndim and x.ndim >= 3,
        "convolution",
        f"Expected {w.ndim}-dimensional input for {w.ndim}-dimensional weight {list(w.shape)}, but got "
        f"{x.ndim}-dimensional input of size {list(x.shape)} instead",
        x,
    )
    expected = w.shape[0] if transposed else w.shape[1] * groups
    fail_unless(
        x.shape[1] == expected,
        "convolution",
        f"Given groups={groups}, weight of size {list(w.shape)}, expected input{list(x.shape)} to have "
        f"{expected} channels, but got {x.shape[1]} channels instead",
        x,
    )


def _conv(
    x: Any,
    w: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Any:
    """The convolution without bias, in the dtype of `x` and `w` (already the compute dtype)."""
    nd = x.ndim - 2
    stride, padding, dilation = per_dim(stride, nd), per_dim(padding, nd), per_dim(dilation, nd)
    kernel = w.shape[2:]
    if not transposed:
        pads = [(p, p) for p in padding]
        return jax.lax.conv_general_dilated(
            x, w, stride, pads, rhs_dilation=dilation, feature_group_count=groups, precision=_HIGHEST
        )
    # A transposed convolution is the convolution of the stride-dilated input with the
    # spatially flipped kernel whose in/out channels are swapped within each group.
    output_padding = per_dim(output_padding, nd)
    c_in, c_out_g = w.shape[0], w.shape[1]
    w = w.reshape(groups, c_in // groups, c_out_g, *kernel).swapaxes(1, 2)
    w = jnp.flip(w.reshape(groups * c_out_g, c_in // groups, *kernel), tuple(range(2, 2 + nd)))
    pads = [(d * (k - 1) - p, d * (k - 1) - p + op) for k, p, d, op in zip(kernel, padding, dilation, output_padding)]
    return jax.lax.conv_general_dilated(
        x,
        w,
        (1,) * nd,
        pads,
        lhs_dilation=stride,
        rhs_dilation=dilation,
        feature_group_count=groups,
        precision=_HIGHEST,
    )


@lowering(aten.convolution.default, aten.convolution_overrideable.default)
def convolution(
    x: Any,
    w: Any,
    bias: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Any:
    _check_conv(x, w, transposed, groups)
    compute = opmath_dtype(x)
    out = _conv(x.astype(compute), w.astype(compute), stride, padding, dilation, transposed, output_padding, groups)
    if bias is not None:
        out = out + bias.astype(compute).reshape((1, -1) + (1,) * (x.ndim - 2))
    return out.astype(x.dtype)


@lowering(aten.convolution_backward_overrideable.default)
def convolution_backward_overrideable(
    grad: Any,
    x: Any,
    w: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> tuple[Any, Any, Any]:
    compute = opmath_dtype(x)

    def forward(xc: Any, wc: Any) -> Any:
        return _conv(xc, wc, stride, padding, dilation, transposed, output_padding, groups)

    g = grad.astype(compute)
    _, vjp = jax.vjp(forward, x.astype(compute), w.astype(compute))
    dx, dw = vjp(g)
    return (
        dx.astype(x.dtype) if output_mask[0] else None,
        dw.astype(w.dtype) if output_mask[1] else None,
        g.sum([i for i in range(g.ndim) if i != 1]).astype(grad.dtype) if output_mask[2] else None,
    )


@lowering(aten.convolution_backward.default)
def convolution_backward(
    grad: Any,
    x: Any,
    w: Any,
    bias_sizes: Any,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
    output_mask: Sequence[bool],
) -> Any:
    return convolution_backward_overrideable(
        grad, x, w, stride, padding, dilation, transposed, output_padding, groups, output_mask
    )


# ---- pooling windows --------------------------------------------------------------------


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: in ceil mode the last window must start in the input."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class Windows:
    """The pooling windows over the last `nd` axes: static geometry plus a gather."""

    def __init__(
        self,
        shape: Sequence[int],
        kernel: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        ceil_mode: bool,
    ) -> None:
        nd = len(kernel)
        self.nd, self.kernel = nd, tuple(kernel)
        self.stride = tuple(stride) if stride else self.kernel
        self.padding, self.dilation = tuple(padding), tuple(dilation)
        self.size = tuple(shape[-nd:])
        self.out = tuple(
            _pool_out(n, k, s, p, d, ceil_mode)
            for n, k, s, p, d in zip(self.size, self.kernel, self.stride, self.padding, self.dilation)
        )
        # Per dim, the input coordinate of (kernel offset, output position); may fall outside.
        self.coords = [
            np.arange(k)[:, None] * d + np.arange(o)[None, :] * s - p
            for k, s, p, d, o in zip(self.kernel, self.stride, self.padding, self.dilation, self.out)
        ]

    def patches(self, x: Any, fill: Any) -> Any:
        """x[..., *spatial] -> [..., K, *out] (K = prod(kernel), kernel offsets row-major)."""
        pads = [(0, 0)] * (x.ndim - self.nd)
        for n, k, s, p, d, o in zip(self.size, self.kernel, self.stride, self.padding, self.dilation, self.out):
            pads.append((p, max(0, (o - 1) * s + d * (k - 1) + 1 - n - p)))
        xp = jnp.pad(x, pads, constant_values=fill)
        lead = x.ndim - self.nd
        slices = []
        for offsets in itertools.product(*(range(k) for k in self.kernel)):
            index = [slice(None)] * lead
            for off, s, d, o in zip(offsets, self.stride, self.dilation, self.out):
                index.append(slice(off * d, off * d + (o - 1) * s + 1, s))
            slices.append(xp[tuple(index)])
        return jnp.stack(slices, axis=lead)

    def table(self, per_dim: Callable[[int, Any], Any], combine: Callable[[Any, Any], Any]) -> np.ndarray:
        """A static [K, *out] table combining per-dim [k_d, o_d] tables over all dims."""
        result = None
        for dim, coords in enumerate(self.coords):
            value = per_dim(dim, coords)
            shape = [1] * (2 * self.nd)
            shape[dim], shape[self.nd + dim] = value.shape
            value = value.reshape(shape)
            result = value if result is None else combine(result, value)
        k = math.prod(self.kernel)
        return np.asarray(result).reshape((k, *self.out))

    def flat_index(self) -> np.ndarray:
        """[K, *out] flat input index (row-major over the spatial dims) of each window tap."""
        strides = [math.prod(self.size[d + 1 :]) for d in range(self.nd)]
        return self.table(lambda d, c: c * strides[d], np.add).astype(np.int64)

    def valid(self) -> np.ndarray:
        return self.table(lambda d, c: (c >= 0) & (c < self.size[d]), np.logical_and)


def _lowest(dtype: Any) -> Any:
    if jnp.issubdtype(dtype, jnp.floating):
        return -jnp.inf
    return jnp.iinfo(dtype).min


def _argmax_pool(x: Any, windows: Windows) -> tuple[Any, Any]:
    """Max over each window and the flat input index of the first maximum (NaN wins),
    as PyTorch's CPU kernels pick it."""
    lead = x.ndim - windows.nd
    patches = windows.patches(x, _lowest(x.dtype))
    choice = jnp.argmax(patches, axis=lead)
    valid = windows.valid()
    # A window whose valid taps are all -inf must still point at its first valid tap.
    first_valid = np.argmax(valid, axis=0)
    choice_valid = jnp.asarray(valid).reshape(-1)[_flat_choice(choice, windows)]
    choice = jnp.where(choice_valid, choice, first_valid)
    values = jnp.take_along_axis(patches, jnp.expand_dims(choice, lead), axis=lead).squeeze(lead)
    flat = jnp.asarray(windows.flat_index()).reshape(-1)[_flat_choice(choice, windows)]
    return values, flat


def _flat_choice(choice: Any, windows: Windows) -> Any:
    """Index into a flattened [K, *out] table for each output position's chosen tap."""
    positions = math.prod(windows.out)
    return choice * positions + jnp.arange(positions).reshape(windows.out)


def _scatter_grad(grad: Any, indices: Any, shape: Sequence[int], nd: int) -> Any:
    """Add each output gradient into the input position its index names."""
    lead = tuple(shape[: len(shape) - nd])
    rows = math.prod(lead)
    positions = math.prod(grad.shape[len(lead) :])
    g = upcast(grad).reshape(rows, positions)
    idx = indices.reshape(rows, positions)
    out = jnp.zeros((rows, math.prod(shape[len(shape) - nd :])), g.dtype)
    out = out.at[jnp.arange(rows)[:, None], idx].add(g)
    return out.reshape(shape).astype(grad.dtype)


def _max_pool(nd: int) -> Callable[..., Any]:
    def max_pool_with_indices(
        x: Any,
        kernel_size: Sequence[int],
        stride: Sequence[int] = (),
        padding: Sequence[int] = (0,),
        dilation: Sequence[int] = (1,),
        ceil_mode: bool = False,
    ) -> Any:
        windows = Windows(
            x.shape,
            per_dim(kernel_size, nd),
            per_dim(stride, nd) if stride else (),
            per_dim(padding, nd),
            per_dim(dilation, nd),
            ceil_mode,
        )
        return _argmax_pool(x, windows)

    return max_pool_with_indices


def _max_pool_backward(nd: int) -> Callable[..., Any]:
    def max_pool_with_indices_backward(
        grad: Any,
        x: Any,
        kernel_size: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        dilation: Sequence[int],
        ceil_mode: bool,
        indices: Any,
    ) -> Any:
        return _scatter_grad(grad, indices, x.shape, nd)

    return max_pool_with_indices_backward


lowering(aten.max_pool2d_with_indices.default)(_max_pool(2))
lowering(aten.max_pool3d_with_indices.default)(_max_pool(3))
lowering(aten.max_pool2d_with_indices_backward.default)(_max_pool_backward(2))
lowering(aten.max_pool3d_with_indices_backward.default)(_max_pool_backward(3))


def _avg_divisor(windows: Windows, count_include_pad: bool) -> np.ndarray:
    """[*out] number of taps each average divides by (PyTorch's pool_size rule)."""
    result = np.ones(windows.out)
    for d, (n, k, s, p, o) in enumerate(
        zip(windows.size, windows.kernel, windows.stride, windows.padding, windows.out)
    ):
        start = np.arange(o) * s - p
        end = np.minimum(start + k, n + p)
        if not count_include_pad:
            start, end = np.maximum(start, 0), np.minimum(end, n)
        shape = [1] * windows.nd
        shape[d] = o
        result = result * (end - start).reshape(shape)
    return result


def _avg_pool(nd: int) -> Callable[..., Any]:
    @opmath
    def avg_pool(
        x: Any,
        kernel_size: Sequence[int],
        stride: Sequence[int] = (),
        padding: Sequence[int] = (0,),
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ) -> Any:
        windows = Windows(
            x.shape,
            per_dim(kernel_size, nd),
            per_dim(stride, nd) if stride else (),
            per_dim(padding, nd),
            (1,) * nd,
            ceil_mode,
        )
        total = windows.patches(x, 0).sum(axis=x.ndim - nd)
        return total / (divisor_override or _avg_divisor(windows, count_include_pad).astype(x.dtype))

    return avg_pool


def _avg_pool_backward(nd: int) -> Callable[..., Any]:
    forward = _avg_pool(nd)

    def avg_pool_backward(
        grad: Any,
        x: Any,
        kernel_size: Sequence[int],
        stride: Sequence[int],
        padding: Sequence[int],
        ceil_mode: bool,
        count_include_pad: bool,
        divisor_override: int | None,
    ) -> Any:
        def fn(v: Any) -> Any:
            return forward(v, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)

        return linear_vjp(fn, x.shape, grad)

    return avg_pool_backward


lowering(aten.avg_pool2d.default)(_avg_pool(2))
lowering(aten.avg_pool3d.default)(_avg_pool(3))
lowering(aten.avg_pool2d_backward.default)(_avg_pool_backward(2))
lowering(aten.avg_pool3d_backward.default)(_avg_pool_backward(3))


# ---- adaptive pooling -------------------------------------------------------------------


def _adaptive_bounds(size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


def _adaptive_avg(nd: int) -> Callable[..., Any]:
    @opmath
    def adaptive_avg_pool(x: Any, output_size: Sequence[int]) -> Any:
        y = x
        counts = np.ones(())
        for d, out in enumerate(per_dim(output_size, nd)):
            axis = x.ndim - nd + d
            start, end = _adaptive_bounds(x.shape[axis], out)
            taps = np.arange(x.shape[axis])
            member = ((taps >= start[:, None]) & (taps < end[:, None])).astype(np.float64)
            y = jnp.moveaxis(
                jnp.tensordot(y, jnp.asarray(member, x.dtype), ((axis,), (1,)), precision=_HIGHEST), -1, axis
            )
            counts = np.multiply.outer(counts, end - start)
        return y / jnp.asarray(counts, x.dtype)

    return adaptive_avg_pool


def _adaptive_avg_backward(nd: int) -> Callable[..., Any]:
    forward = _adaptive_avg(nd)

    def adaptive_avg_pool_backward(grad: Any, x: Any) -> Any:
        return linear_vjp(lambda v: forward(v, grad.shape[-nd:]), x.shape, grad)

    return adaptive_avg_pool_backward


lowering(aten._adaptive_avg_pool2d.default)(_adaptive_avg(2))
lowering(aten._adaptive_avg_pool3d.default)(_adaptive_avg(3))
lowering(aten._adaptive_avg_pool2d_backward.default)(_adaptive_avg_backward(2))
lowering(aten._adaptive_avg_pool3d_backward.default)(_adaptive_avg_backward(3))


def _adaptive_max(nd: int) -> Callable[..., Any]:
    def adaptive_max_pool(x: Any, output_size: Sequence[int]) -> Any:
        lead = x.ndim - nd
        size = x.shape[lead:]
        out = per_dim(output_size, nd)
        # Gather a fixed number of taps per window, repeating the last one in short windows
        # (a repeat never changes the max nor which tap is first).
        y = x
        coords = []
        for d, (n, o) in enumerate(zip(size, out)):
            start, end = _adaptive_bounds(n, o)
            kmax = int((end - start).max()) if o else 1
            idx = np.minimum(start[:, None] + np.arange(kmax)[None, :], end[:, None] - 1)
            y = jnp.take(y, jnp.asarray(idx.reshape(-1)), axis=lead + 2 * d).reshape(
                y.shape[: lead + 2 * d] + idx.shape + y.shape[lead + 2 * d + 1 :]
            )
            coords.append(idx)
        # y: [..., o0, k0, o1, k1, ...] -> [..., o0, o1, ..., k0*k1*...]
        order = list(range(lead)) + [lead + 2 * d for d in range(nd)] + [lead + 2 * d + 1 for d in range(nd)]
        taps = math.prod(idx.shape[1] for idx in coords)
        y = y.transpose(order).reshape((*x.shape[:lead], *out, taps))
        choice = jnp.argmax(y, axis=-1)
        values = jnp.take_along_axis(y, choice[..., None], axis=-1)[..., 0]
        strides = [math.prod(size[d + 1 :]) for d in range(nd)]
        flat = 0
        for d, idx in enumerate(coords):
            shape = [1] * (2 * nd)
            shape[d], shape[nd + d] = idx.shape
            flat = flat + idx.reshape(shape) * strides[d]
        flat = np.asarray(flat).reshape((*out, taps))
        index = jnp.take_along_axis(jnp.broadcast_to(jnp.asarray(flat), y.shape), choice[..., None], axis=-1)
        return values, index[..., 0].astype(jnp.int64)

    return adaptive_max_pool


def _adaptive_max_backward(nd: int) -> Callable[..., Any]:
    def adaptive_max_pool_backward(grad: Any, x: Any, indices: Any) -> Any:
        return _scatter_grad(grad, indices, x.shape, nd)

    return adaptive_max_pool_backward


lowering(aten.adaptive_max_pool2d.default)(_adaptive_max(2))
lowering(aten.adaptive_max_pool3d.default)(_adaptive_max(3))
lowering(aten.adaptive_max_pool2d_backward.default)(_adaptive_max_backward(2))
lowering(aten.adaptive_max_pool3d_backward.default)(_adaptive_max_backward(3))


# ---- sliding windows as columns ---------------------------------------------------------


@lowering(aten.im2col.default)
def im2col(
    x: Any, kernel_size: Sequence[int], dilation: Sequence[int], padding: Sequence[int], stride: Sequence[int]
) -> Any:
    windows = Windows(
        x.shape, per_dim(kernel_size, 2), per_dim(stride, 2), per_dim(padding, 2), per_dim(dilation, 2), False
    )
    patches = windows.patches(x, 0)  # [..., C, K, oh, ow]
    lead = patches.shape[:-4]
    return patches.reshape((*lead, patches.shape[-4] * patches.shape[-3], math.prod(windows.out)))


@lowering(aten.col2im.default)
def col2im(
    cols: Any,
    output_size: Sequence[int],
    kernel_size: Sequence[int],
    dilation: Sequence[int],
    padding: Sequence[int],
    stride: Sequence[int],
) -> Any:
    channels = cols.shape[-2] // math.prod(per_dim(kernel_size, 2))
    shape = (*cols.shape[:-2], channels, *per_dim(output_size, 2))
    return linear_vjp(lambda v: im2col(v, kernel_size, dilation, padding, stride), shape, cols)


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
