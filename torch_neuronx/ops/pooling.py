"""Pooling (max, average, adaptive; 2-d and 3-d, with backward) and the sliding-window ops
built on the same windows (im2col/col2im).

Windows are gathered with static strided slices, so their geometry costs nothing at run time.
Averages compute in the input's opmath dtype. Backward ops are the `jax.vjp` of the forward
(average pooling, im2col) or a scatter of the gradient through the saved argmax indices (max
pooling), as PyTorch does.
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
from jax import lax

from . import lowering
from ._common import fail_unless, is_half, linear_vjp, opmath, per_dim, step_rounding, upcast

aten = torch.ops.aten
_HIGHEST = jax.lax.Precision.HIGHEST


# ---- pooling windows --------------------------------------------------------------------


def _pool_out(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """PyTorch's pooling_output_shape: in ceil mode the last window must start in the input."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def check_pooling(
    op: str, shape: Sequence[int], kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int],
    dilation: Sequence[int], ceil_mode: bool,
) -> None:  # fmt: skip
    """PyTorch's argument checks for pooling an input of `shape`, in its order: the rank, the
    parameters (`pooling_output_shape`), the non-batch sizes and the output size
    (`pool2d_shape_check`/`pool3d_shape_check`); before any window is computed."""
    nd, shape = len(kernel), list(shape)
    ranks = f"Expected {nd + 1}D or {nd + 2}D (batch mode) tensor with optional 0 dim batch size for input, but got:"
    fail_unless(len(shape) in (nd + 1, nd + 2), op, f"{ranks}{shape}")
    stride = stride or kernel
    for k, s, p, d in zip(kernel, stride, padding, dilation):
        fail_unless(k > 0, op, f"kernel size should be greater than zero, but got kernel_size={k}")
        fail_unless(s > 0, op, f"stride should be greater than zero, but got stride={s}")
        fail_unless(d > 0, op, f"dilation should be greater than zero, but got dilation={d}")
        fail_unless(p >= 0, op, f"pad must be non-negative, but got pad: {p}")
        fail_unless(
            p <= ((k - 1) * d + 1) // 2,
            op,
            f"pad should be at most half of effective kernel size, but got pad={p}, kernel_size={k} and dilation={d}",
        )
    fail_unless(
        all(n > 0 for n in shape[-nd - 1 :]),
        op,
        f"{ranks}{shape}"
        if nd == 2
        else f"Expected input's non-batch dimensions to have positive length, but input has a shape of {shape}",
    )
    size = shape[-nd:]
    out = [_pool_out(*args, ceil_mode) for args in zip(size, kernel, stride, padding, dilation)]
    fail_unless(
        all(o >= 1 for o in out),
        op,
        f"Given input size: ({'x'.join(map(str, [shape[-nd - 1], *size]))}). Calculated output size: "
        f"({'x'.join(map(str, [shape[-nd - 1], *out]))}). Output size is too small",
    )


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
        inside_only: bool = False,
    ) -> None:
        """`inside_only` leaves out the kernel offsets whose taps all fall in the padding, which a
        pool ignores: a kernel far larger than its input (EfficientNet pools a 2x2 map with a
        1280x1280 kernel) would otherwise slice, pad and stack all of its offsets."""
        nd = len(kernel)
        self.nd, self.kernel = nd, tuple(kernel)
        self.stride = tuple(stride) if stride else self.kernel
        self.padding, self.dilation = tuple(padding), tuple(dilation)
        self.size = tuple(shape[-nd:])
        self.out = tuple(
            _pool_out(n, k, s, p, d, ceil_mode)
            for n, k, s, p, d in zip(self.size, self.kernel, self.stride, self.padding, self.dilation)
        )
        # Per dim, the kernel offsets taken and the input coordinate of each (offset, output
        # position); a coordinate may fall outside the input.
        self.offsets, self.coords = [], []
        for n, k, s, p, d, o in zip(self.size, self.kernel, self.stride, self.padding, self.dilation, self.out):
            offsets = np.arange(k)
            coords = offsets[:, None] * d + np.arange(o)[None, :] * s - p
            if inside_only:
                touches = ((coords >= 0) & (coords < n)).any(axis=1)
                offsets, coords = offsets[touches], coords[touches]
            self.offsets.append(offsets)
            self.coords.append(coords)

    def patches(self, x: Any, fill: Any) -> Any:
        """x[..., *spatial] -> [..., K, *out] (K = the number of offset combinations, row-major)."""
        lead = x.ndim - self.nd
        pads = [(0, 0)] * lead
        for n, coords in zip(self.size, self.coords):
            pads.append((max(0, -int(coords.min())), max(0, int(coords.max()) + 1 - n)))
        xp = jnp.pad(x, pads, constant_values=fill)
        slices = []
        for combination in itertools.product(*(range(len(offsets)) for offsets in self.offsets)):
            index = [slice(None)] * lead
            for i, coords, s, (low, _) in zip(combination, self.coords, self.stride, pads[lead:]):
                start = int(coords[i, 0]) + low
                index.append(slice(start, start + (coords.shape[1] - 1) * s + 1, s))
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
        k = math.prod(len(offsets) for offsets in self.offsets)
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
        params = (
            per_dim(kernel_size, nd),
            per_dim(stride, nd) if stride else (),
            per_dim(padding, nd),
            per_dim(dilation, nd),
            ceil_mode,
        )
        check_pooling(f"max_pool{nd}d", x.shape, *params)
        return _argmax_pool(x, Windows(x.shape, *params, inside_only=True))

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
        params = (per_dim(kernel_size, nd), per_dim(stride, nd) if stride else (), per_dim(padding, nd), (1,) * nd)
        op = f"avg_pool{nd}d"
        ranks = f"{nd + 1}D or {nd + 2}D"
        fail_unless(x.ndim in (nd + 1, nd + 2), op, f"non-empty {ranks} (batch mode) tensor expected for input")
        fail_unless(divisor_override != 0, op, "divisor must be not zero")
        check_pooling(op, x.shape, *params, ceil_mode)
        windows = Windows(x.shape, *params, ceil_mode, inside_only=True)
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


def _adaptive_avg3d_rounded(x: Any, output_size: Sequence[int]) -> Any:
    """CPU's adaptive_avg_pool3d for float16/bfloat16 (no opmath there): each window summed tap by
    tap in (t, h, w) order, every sum rounded to the dtype, then divided by kT, kH and kW in turn."""
    r, lead = step_rounding(x.dtype), x.ndim - 3
    starts, sizes = zip(
        *((s, e - s) for s, e in (_adaptive_bounds(x.shape[lead + d], o) for d, o in enumerate(output_size)))
    )
    widest = [int(k.max()) for k in sizes]

    def tap(acc: Any, j: Any) -> Any:
        offsets = (j // (widest[1] * widest[2]), (j // widest[2]) % widest[1], j % widest[2])
        value, valid = upcast(x), True
        for d, (start, size, offset) in enumerate(zip(starts, sizes, offsets)):
            index = jnp.minimum(jnp.asarray(start) + offset, x.shape[lead + d] - 1)
            value = jnp.take(value, index, axis=lead + d)
            valid = valid & jnp.expand_dims(offset < jnp.asarray(size), tuple(i for i in range(3) if i != d))
        return r(acc + jnp.where(valid, value, 0)), None

    total = jnp.zeros((*x.shape[:lead], *output_size), jnp.float32)
    total = lax.scan(tap, total, jnp.arange(math.prod(widest)))[0]
    for d, size in enumerate(sizes):
        total = r(total / jnp.expand_dims(jnp.asarray(size, jnp.float32), tuple(i for i in range(3) if i != d)))
    return total.astype(x.dtype)


@lowering(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x: Any, output_size: Sequence[int]) -> Any:
    return (_adaptive_avg3d_rounded if is_half(x) else _adaptive_avg(3))(x, output_size)


lowering(aten._adaptive_avg_pool2d.default)(_adaptive_avg(2))
lowering(aten._adaptive_avg_pool2d_backward.default)(_adaptive_avg_backward(2))
lowering(aten._adaptive_avg_pool3d_backward.default)(_adaptive_avg_backward(3))


def _adaptive_max_args(x: Any, output_size: Sequence[int], nd: int) -> None:
    """The checks of PyTorch's adaptive_max_pool{2,3}d meta functions, in their order; the ATen
    op takes exactly `nd` output sizes (F.adaptive_max_pool* expands a single int first)."""
    name, sizes = f"adaptive_max_pool{nd}d()", list(x.shape)
    if x.ndim not in (nd + 1, nd + 2):
        raise RuntimeError(f"{name}: Expected {nd + 1}D or {nd + 2}D tensor, but got: {sizes}")
    for i in range(1, x.ndim):
        if x.shape[i] == 0:
            raise RuntimeError(
                f"{name}: Expected input to have non-zero size for non-batch dimensions, but input has sizes {sizes} "
                f"with dimension {i} being empty"
            )
    if len(output_size) != nd:
        raise RuntimeError(f"{name}: internal error: output_size.size() must be {nd}")
    out = [*sizes[:-nd], *output_size]
    negative = [s for s in out if s < 0]
    if negative:
        raise RuntimeError(f"Trying to create tensor with negative dimension {negative[0]}: {out}")


def _adaptive_max(nd: int) -> Callable[..., Any]:
    def adaptive_max_pool(x: Any, output_size: Sequence[int]) -> Any:
        _adaptive_max_args(x, output_size, nd)
        lead = x.ndim - nd
        size = x.shape[lead:]
        out = tuple(output_size)
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


# ---- fractional max pooling ---------------------------------------------------------------


def _fractional_starts(samples: Any, size: int, out: int, kernel: int, dtype: Any) -> Any:
    """Window starts along one dim, per plane, as PyTorch's generate_intervals computes them (in
    the input's float type): `int((i + u) * alpha) - int(u * alpha)`, alpha = (size - kernel) /
    (out - 1), the last window flush with the end."""
    u = samples.astype(dtype)[..., None]
    alpha = jnp.asarray((size - kernel) / (out - 1) if out > 1 else 0.0, dtype)
    i = jnp.arange(out, dtype=dtype)
    starts = ((i + u) * alpha).astype(jnp.int64) - (u * alpha).astype(jnp.int64)
    return starts.at[..., out - 1].set(size - kernel)


def _fractional_max(nd: int) -> Callable[..., Any]:
    def fractional_max_pool(x: Any, kernel_size: Sequence[int], output_size: Sequence[int], samples: Any) -> Any:
        batched = x.ndim == nd + 2
        x = x if batched else x[None]
        kernel, out = per_dim(kernel_size, nd), per_dim(output_size, nd)
        size = x.shape[2:]
        for d in range(nd):
            if out[d] + kernel[d] - 1 > size[d]:
                raise RuntimeError(
                    f"fractional_max_pool{nd}d_out(): pool {'thw'[d + 3 - nd] if nd == 3 else 'hw'[d]} ({kernel[d]}) "
                    f"too large relative to input ({size[d]}) and output ({out[d]})"
                )
        compute = x.dtype if x.dtype in (jnp.float32, jnp.float64) else jnp.float32
        y, flat = x, 0
        # PyTorch's samples are (w, h) per plane in 2-d but (t, h, w) in 3-d
        sample_of = (1, 0) if nd == 2 else (0, 1, 2)
        for d in range(nd):
            starts = _fractional_starts(samples[..., sample_of[d]], size[d], out[d], kernel[d], compute)  # [N, C, o]
            taps = (starts[..., None] + jnp.arange(kernel[d])).reshape(*starts.shape[:2], -1)  # [N, C, o*k]
            axis = 2 + 2 * d
            shape = [1] * y.ndim
            shape[:2], shape[axis] = taps.shape[:2], taps.shape[2]
            y = jnp.take_along_axis(y, taps.reshape(shape), axis=axis, mode="clip")
            y = y.reshape(*y.shape[:axis], out[d], kernel[d], *y.shape[axis + 1 :])
            position = taps.reshape(*taps.shape[:2], *([1] * (2 * d)), out[d], kernel[d], *([1] * (2 * (nd - d - 1))))
            flat = flat * size[d] + position
        # y: [N, C, o0, k0, o1, k1, ...] -> [N, C, o0, o1, ..., k0*k1*...]
        order = [0, 1] + [2 + 2 * d for d in range(nd)] + [3 + 2 * d for d in range(nd)]
        window = (*x.shape[:2], *out, math.prod(kernel))
        y = y.transpose(order).reshape(window)
        flat = jnp.broadcast_to(flat, (*x.shape[:2], *(s for d in range(nd) for s in (out[d], kernel[d])))).transpose(
            order
        )
        choice = jnp.argmax(y, axis=-1)[..., None]
        values = jnp.take_along_axis(y, choice, axis=-1)[..., 0]
        index = jnp.take_along_axis(flat.reshape(window), choice, axis=-1)[..., 0]
        return (values, index) if batched else (values[0], index[0])

    return fractional_max_pool


def _fractional_max_backward(nd: int) -> Callable[..., Any]:
    def fractional_max_pool_backward(
        grad: Any, x: Any, kernel_size: Sequence[int], output_size: Sequence[int], indices: Any
    ) -> Any:
        return _scatter_grad(grad, indices, x.shape, nd)

    return fractional_max_pool_backward


lowering(aten.fractional_max_pool2d.default)(_fractional_max(2))
lowering(aten.fractional_max_pool3d.default)(_fractional_max(3))
lowering(aten.fractional_max_pool2d_backward.default)(_fractional_max_backward(2))
lowering(aten.fractional_max_pool3d_backward.default)(_fractional_max_backward(3))


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
