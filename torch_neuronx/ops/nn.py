"""Neural-network ops: softmax, normalization, losses, embedding, dropout, attention plumbing.

Every op computes in float32 for half inputs (PyTorch CPU's opmath: `@opmath` where the whole
lowering widens its inputs and casts back, `upcast` of single values elsewhere) and rounds once
to the result dtype. Backward ops (`*_backward`, `*_backward_data`) are lowered too, so autograd
stays on device: closed-form where PyTorch has one, `jax.vjp` of the forward where the
backward is the exact adjoint of a piecewise-smooth forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import check, lowering
from ._common import fail_unless, is_half, opmath, opmath_dtype, scalar_type_name, step_rounding, upcast, wrap_dim
from ._dtypes import cast, jax_dtype, promote, torch_dtype

aten = torch.ops.aten
NONE, MEAN, SUM = 0, 1, 2  # at::Reduction


def _reduce(loss: Any, reduction: int) -> Any:
    if reduction == MEAN:
        return loss.mean()
    if reduction == SUM:
        return loss.sum()
    return loss


def _reduce_grad(grad: Any, shape: Sequence[int], reduction: int) -> Any:
    """The cotangent of `_reduce` broadcast back to the unreduced loss shape."""
    grad = upcast(grad)
    if reduction == MEAN:
        grad = grad / math.prod(shape)
    return jnp.broadcast_to(grad, shape)


def _empty(dtype: Any) -> Any:
    return jnp.zeros((0,), dtype)


# ---- softmax ----------------------------------------------------------------------------


def _softmax_like(fn: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`_softmax`/`_log_softmax`: half inputs compute in float32; `half_to_float` keeps it."""

    def lowered(x: Any, dim: int, half_to_float: bool) -> Any:
        out_dtype = jnp.float32 if half_to_float else x.dtype
        y = upcast(x).reshape(x.shape or (1,))
        return fn(y, axis=wrap_dim(dim, x.ndim, name, x)).reshape(x.shape).astype(out_dtype)

    return lowered


lowering(aten._softmax.default)(_softmax_like(jax.nn.softmax, "_softmax"))
lowering(aten._log_softmax.default)(_softmax_like(jax.nn.log_softmax, "_log_softmax"))


def _softmax_grad_dtype(grad: Any, input_dtype: torch.dtype) -> Any:
    # PyTorch keeps the grad's dtype, except a float32 grad of a float16 softmax.
    if grad.dtype == jnp.float32 and input_dtype == torch.float16:
        return jnp.float16
    return grad.dtype


@lowering(aten._softmax_backward_data.default)
def softmax_backward_data(grad: Any, output: Any, dim: int, input_dtype: torch.dtype) -> Any:
    g, y = upcast(grad), upcast(output)
    axis = wrap_dim(dim, grad.ndim, "_softmax_backward_data", grad)
    if grad.ndim == 0:
        result = y * (g - g * y)
    else:
        result = y * (g - (g * y).sum(axis, keepdims=True))
    return result.astype(_softmax_grad_dtype(grad, input_dtype))


@lowering(aten._log_softmax_backward_data.default)
def log_softmax_backward_data(grad: Any, output: Any, dim: int, input_dtype: torch.dtype) -> Any:
    g, y = upcast(grad), upcast(output)
    total = g if grad.ndim == 0 else g.sum(wrap_dim(dim, grad.ndim, "_log_softmax_backward_data", grad), keepdims=True)
    return (g - jnp.exp(y) * total).astype(_softmax_grad_dtype(grad, input_dtype))


@lowering(aten._safe_softmax.default)
def safe_softmax(x: Any, dim: int, dtype: torch.dtype | None = None) -> Any:
    """Softmax whose fully masked (all -inf) rows give zeros instead of NaN. A row is fully
    masked exactly when its max is -inf, so the max softmax needs anyway tells (no `all`)."""
    if dtype is not None:
        x = cast(x, dtype)
    y = upcast(x).reshape(x.shape or (1,))
    axis = wrap_dim(dim, x.ndim, "_safe_softmax", x)
    top = jnp.max(y, axis=axis, keepdims=True)
    masked = top == -jnp.inf
    e = jnp.exp(y - jnp.where(masked, 0.0, top))
    out = jnp.where(masked, 0.0, e / e.sum(axis=axis, keepdims=True))
    return out.reshape(x.shape).astype(x.dtype)


# ---- normalization ----------------------------------------------------------------------


def _stat_dtype(x: Any, *params: Any) -> Any:
    """Dtype of saved mean/rstd: float32 when half inputs meet float32 parameters."""
    if is_half(x) and any(p is not None and p.dtype == jnp.float32 for p in params):
        return jnp.float32
    return x.dtype


def _normalize_grad(g: Any, xhat: Any, rstd: Any, axes: tuple[int, ...]) -> Any:
    """d(xhat)/dx applied to `g` (already scaled by the weight), for xhat = (x - mean) * rstd
    with mean and variance taken over `axes`."""
    mean_g = g.mean(axes, keepdims=True)
    mean_gx = (g * xhat).mean(axes, keepdims=True)
    return rstd * (g - mean_g - xhat * mean_gx)


def _affine(y: Any, weight: Any, bias: Any, shape: tuple[int, ...]) -> Any:
    if weight is not None:
        y = y * upcast(weight).reshape(shape)
    if bias is not None:
        y = y + upcast(bias).reshape(shape)
    return y


@lowering(aten.native_layer_norm.default)
def native_layer_norm(x: Any, normalized_shape: Sequence[int], weight: Any, bias: Any, eps: Any) -> Any:
    shape = list(normalized_shape)
    fail_unless(
        len(shape) >= 1,
        "native_layer_norm",
        "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, but got "
        f"normalized_shape = {shape}",
        x,
    )
    fail_unless(
        len(shape) <= x.ndim and list(x.shape[x.ndim - len(shape) :]) == shape,
        "native_layer_norm",
        f"Given normalized_shape={shape}, expected input with shape [*, {', '.join(map(str, shape))}], "
        f"but got input of size {list(x.shape)}",
        x,
    )
    for name, param in (("weight", weight), ("bias", bias)):
        fail_unless(
            param is None or list(param.shape) == shape,
            "native_layer_norm",
            f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
            f"{list(param.shape) if param is not None else None} and normalized_shape = {shape}",
            x,
        )
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xc = upcast(x)
    mean = xc.mean(axes, keepdims=True)
    var = jnp.square(xc - mean).mean(axes, keepdims=True)
    rstd = jax.lax.rsqrt(var + eps)
    out = _affine((xc - mean) * rstd, weight, bias, tuple(normalized_shape))
    stat = _stat_dtype(x, weight, bias)
    return out.astype(x.dtype), mean.astype(stat), rstd.astype(stat)


@lowering(aten.native_layer_norm_backward.default)
def native_layer_norm_backward(
    grad: Any,
    x: Any,
    normalized_shape: Sequence[int],
    mean: Any,
    rstd: Any,
    weight: Any,
    bias: Any,
    output_mask: Sequence[bool],
) -> Any:
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    batch_axes = tuple(range(x.ndim - len(normalized_shape)))
    g, rstd = upcast(grad), upcast(rstd)
    xhat = (upcast(x) - upcast(mean)) * rstd
    gw = g if weight is None else g * upcast(weight)
    dx = _normalize_grad(gw, xhat, rstd, axes).astype(x.dtype) if output_mask[0] else None
    dw = (g * xhat).sum(batch_axes).astype(weight.dtype) if output_mask[1] and weight is not None else None
    db = g.sum(batch_axes).astype(bias.dtype) if output_mask[2] and bias is not None else None
    return dx, dw, db


def _groups(x: Any, n: int, c: int, group: int) -> Any:
    return upcast(x).reshape(n, group, x.size // max(n * group, 1))


@lowering(aten.native_group_norm.default)
def native_group_norm(x: Any, weight: Any, bias: Any, n: int, c: int, hxw: int, group: int, eps: Any) -> Any:
    fail_unless(
        group > 0 and c % group == 0 and x.size == n * c * hxw,
        "native_group_norm",
        f"Expected number of channels in input to be divisible by num_groups, but got input of shape "
        f"{list(x.shape)} and num_groups={group}",
        x,
    )
    xg = _groups(x, n, c, group)
    mean = xg.mean(2, keepdims=True)
    rstd = jax.lax.rsqrt(jnp.square(xg - mean).mean(2, keepdims=True) + eps)
    y = ((xg - mean) * rstd).reshape(n, c, hxw)
    out = _affine(y, weight, bias, (1, c, 1)).reshape(x.shape)
    stat = _stat_dtype(x, weight, bias)
    return out.astype(x.dtype), mean.reshape(n, group).astype(stat), rstd.reshape(n, group).astype(stat)


@lowering(aten._weight_norm_interface_backward.default)
def weight_norm_interface_backward(grad_w: Any, v: Any, g: Any, norms: Any, dim: int) -> Any:
    """Gradients of w = v * g / ||v|| (norm over every dim but `dim`), PyTorch's closed form:
    grad_g = sum(grad_w * v) / ||v||, grad_v = g / ||v|| * (grad_w - v * sum(grad_w * v) / ||v||^2)."""
    axis = wrap_dim(dim, v.ndim, "_weight_norm_interface_backward", v)
    axes = tuple(i for i in range(v.ndim) if i != axis)
    gw, vv = upcast(grad_w), upcast(v)
    norm = upcast(norms).reshape([v.shape[i] if i == axis else 1 for i in range(v.ndim)])
    gg = upcast(g).reshape(norm.shape)
    dot = (gw * vv).sum(axes, keepdims=True)
    grad_v = gg / norm * (gw - vv * (dot / (norm * norm)))
    grad_g = dot / norm
    return grad_v.astype(v.dtype), grad_g.reshape(g.shape).astype(g.dtype)


@lowering(aten.native_group_norm_backward.default)
def native_group_norm_backward(
    grad: Any,
    x: Any,
    mean: Any,
    rstd: Any,
    weight: Any,
    n: int,
    c: int,
    hxw: int,
    group: int,
    output_mask: Sequence[bool],
) -> Any:
    g = upcast(grad).reshape(n, c, hxw)
    rstd = upcast(rstd).reshape(n, group, 1)
    xhat = ((_groups(x, n, c, group) - upcast(mean).reshape(n, group, 1)) * rstd).reshape(n, c, hxw)
    gw = g if weight is None else g * upcast(weight).reshape(1, c, 1)
    dx = None
    if output_mask[0]:
        per_group = (c // group) * hxw
        dxg = _normalize_grad(gw.reshape(n, group, per_group), xhat.reshape(n, group, per_group), rstd, (2,))
        dx = dxg.reshape(x.shape).astype(x.dtype)
    param_dtype = x.dtype if weight is None else weight.dtype
    dw = (g * xhat).sum((0, 2)).astype(param_dtype) if output_mask[1] else None
    db = g.sum((0, 2)).astype(param_dtype) if output_mask[2] else None
    return dx, dw, db


def _batch_norm(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool, momentum: Any, eps: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """(out, save_mean, save_invstd, new_running_mean, new_running_var); the saved stats are
    empty in eval mode and the new running stats None when there are none to update."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    xc = upcast(x)
    stat = _stat_dtype(x, weight, bias, running_mean, running_var)
    if training or running_mean is None:
        # In float16 CPU saves the batch mean and invstd rounded to it and normalizes with those
        # saved values (bit-exact here). Its bfloat16 saved invstd follows another rounding, not
        # matched yet: bfloat16 keeps the float32 statistics, closer to it on average.
        half = jnp.dtype(stat) == jnp.float16
        r, count = step_rounding(stat) if half else (lambda t: t), x.size // x.shape[1]
        mean = xc.mean(axes)
        var = jnp.square(xc - mean.reshape(shape)).mean(axes)
        mean, invstd = r(mean), r(jax.lax.rsqrt(var + eps))
        new_mean = new_var = None
        if training and running_mean is not None:
            unbiased = var * (count / max(count - 1, 1))
            new_mean = (1 - momentum) * upcast(running_mean) + momentum * mean
            new_var = (1 - momentum) * upcast(running_var) + momentum * unbiased
        saved = (mean.astype(stat), invstd.astype(stat))
        if half:  # CPU's contiguous kernel: x * alpha + beta, alpha = invstd * weight
            alpha = _affine(invstd, weight, None, (-1,))
            beta = _affine(-mean * alpha, None, bias, (-1,))
            out = (xc * alpha.reshape(shape) + beta.reshape(shape)).astype(x.dtype)
            return out, saved[0], saved[1], new_mean, new_var
    else:
        mean = upcast(running_mean)
        invstd = jax.lax.rsqrt(upcast(running_var) + eps)
        new_mean = new_var = None
        saved = (_empty(stat), _empty(stat))
    y = (xc - mean.reshape(shape)) * invstd.reshape(shape)
    out = _affine(y, weight, bias, shape).astype(x.dtype)
    return out, saved[0], saved[1], new_mean, new_var


@lowering(aten.native_batch_norm.default, mutates=("running_mean", "running_var"))
def native_batch_norm(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool, momentum: Any, eps: Any
) -> Any:
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    return (new_mean, new_var), (out, save_mean, save_invstd)


@lowering(aten._native_batch_norm_legit.default)
def native_batch_norm_legit(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool, momentum: Any, eps: Any
) -> Any:
    return native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps)


@lowering(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(x: Any, weight: Any, bias: Any, training: bool, momentum: Any, eps: Any) -> Any:
    return _batch_norm(x, weight, bias, None, None, training, momentum, eps)[:3]


@lowering(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_legit_no_training(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any, eps: Any
) -> Any:
    return _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)[:3]


@lowering(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, training: bool, momentum: Any, eps: Any
) -> Any:
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    if new_mean is None:
        new_mean, new_var = running_mean, running_var
    return out, save_mean, save_invstd, new_mean.astype(running_mean.dtype), new_var.astype(running_var.dtype)


_RESERVE = jnp.uint8


@lowering(aten._batch_norm_with_update.default)
def batch_norm_with_update(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any, eps: Any
) -> Any:
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return (new_mean, new_var), (out, save_mean, save_invstd, _empty(_RESERVE))


@lowering(aten._batch_norm_with_update_functional.default)
def batch_norm_with_update_functional(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any, eps: Any
) -> Any:
    out, save_mean, save_invstd, new_mean, new_var = _batch_norm(
        x, weight, bias, running_mean, running_var, True, momentum, eps
    )
    return (
        out,
        save_mean,
        save_invstd,
        _empty(_RESERVE),
        new_mean.astype(running_mean.dtype),
        new_var.astype(running_var.dtype),
    )


@lowering(aten._batch_norm_no_update.default)
def batch_norm_no_update(
    x: Any, weight: Any, bias: Any, running_mean: Any, running_var: Any, momentum: Any, eps: Any
) -> Any:
    out, save_mean, save_invstd, _, _ = _batch_norm(x, weight, bias, running_mean, running_var, False, momentum, eps)
    return out, save_mean, save_invstd, _empty(_RESERVE)


@lowering(aten.native_batch_norm_backward.default)
def native_batch_norm_backward(
    grad: Any,
    x: Any,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_invstd: Any,
    train: bool,
    eps: Any,
    output_mask: Sequence[bool],
) -> Any:
    axes = tuple(i for i in range(x.ndim) if i != 1)
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    g = upcast(grad)
    if train:
        mean, invstd = upcast(save_mean), upcast(save_invstd)
    else:
        mean, invstd = upcast(running_mean), jax.lax.rsqrt(upcast(running_var) + eps)
    mean, invstd = mean.reshape(shape), invstd.reshape(shape)
    xhat = (upcast(x) - mean) * invstd
    w = jnp.ones(shape, g.dtype) if weight is None else upcast(weight).reshape(shape)
    dx = None
    if output_mask[0]:
        dx = _normalize_grad(g * w, xhat, invstd, axes) if train else g * w * invstd
        dx = dx.astype(x.dtype)
    param_dtype = x.dtype if weight is None else weight.dtype
    dw = (g * xhat).sum(axes).astype(param_dtype) if output_mask[1] else None
    db = g.sum(axes).astype(param_dtype) if output_mask[2] else None
    return dx, dw, db


@lowering(aten.batch_norm_backward.default)
def batch_norm_backward(
    grad: Any,
    x: Any,
    weight: Any,
    running_mean: Any,
    running_var: Any,
    save_mean: Any,
    save_var: Any,
    update: bool,
    eps: Any,
    output_mask: Sequence[bool],
    reserve: Any,
) -> Any:
    # `save_var` holds the saved inverse std; `update` says the forward used batch stats.
    train = update or running_mean is None
    return native_batch_norm_backward(
        grad, x, weight, running_mean, running_var, save_mean, save_var, train, eps, output_mask
    )


# ---- dropout ----------------------------------------------------------------------------


@lowering(aten.native_dropout.default, random=True)
@opmath
def native_dropout(x: Any, p: Any, train: bool | None, *, key: Any) -> Any:
    if train is False:
        return x, jnp.ones(x.shape, jnp.bool_)
    keep = 1 - p
    mask = jax.random.uniform(key, x.shape, jnp.float32) < keep
    scale = jnp.where(keep == 0, 0.0, 1 / jnp.where(keep == 0, 1.0, keep))
    return x * mask * scale, mask


@lowering(aten.native_dropout_backward.default)
@opmath
def native_dropout_backward(grad: Any, mask: Any, scale: Any) -> Any:
    return grad * mask * scale


# ---- embedding --------------------------------------------------------------------------


@lowering(aten.embedding.default)
def embedding(
    weight: Any, indices: Any, padding_idx: int = -1, scale_grad_by_freq: bool = False, sparse: bool = False
) -> Any:
    fail_unless(weight.ndim == 2, "embedding", "'weight' must be 2-D", weight)
    return jnp.take(weight, indices, axis=0)


@lowering(aten.embedding_dense_backward.default)
@opmath
def embedding_dense_backward(
    grad: Any, indices: Any, num_weights: int, padding_idx: int, scale_grad_by_freq: bool
) -> Any:
    flat = indices.reshape(-1)
    rows = grad.reshape(flat.shape[0], grad.shape[-1])
    rows = jnp.where((flat == padding_idx)[:, None], 0, rows)
    if scale_grad_by_freq:
        counts = jnp.zeros(num_weights, rows.dtype).at[flat].add(1)
        rows = rows / counts[flat][:, None]
    return jnp.zeros((num_weights, rows.shape[1]), rows.dtype).at[flat].add(rows)


@lowering(aten.embedding_renorm_.default, aten.embedding_renorm.default)
@opmath
def embedding_renorm(weight: Any, indices: Any, max_norm: Any, norm_type: Any) -> Any:
    """Rescale each referenced row whose p-norm exceeds max_norm to max_norm (in place for
    embedding_renorm_)."""
    used = jnp.zeros(weight.shape[0], jnp.bool_).at[indices.reshape(-1)].set(True)
    norm = jnp.sum(jnp.abs(weight) ** norm_type, axis=1) ** (1 / norm_type)
    scale = jnp.where(used & (norm > max_norm), max_norm / (norm + 1e-7), 1)
    return weight * scale[:, None]


_BAG_SUM, _BAG_MEAN, _BAG_MAX = 0, 1, 2


def _bags(indices: Any, offsets: Any, include_last_offset: bool) -> tuple[Any, int]:
    """offset2bag (the bag of each index; indices past the last bag get `count`) and count."""
    count = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    positions = jnp.arange(indices.shape[0])
    offset2bag = jnp.searchsorted(offsets, positions, side="right") - 1
    return jnp.where(offset2bag < count, offset2bag, count), count


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default)
def embedding_bag(
    weight: Any,
    indices: Any,
    offsets: Any,
    scale_grad_by_freq: bool = False,
    mode: int = _BAG_SUM,
    sparse: bool = False,
    per_sample_weights: Any = None,
    include_last_offset: bool = False,
    padding_idx: int = -1,
) -> Any:
    offset2bag, count = _bags(indices, offsets, include_last_offset)
    used = indices != padding_idx
    rows = upcast(jnp.take(weight, indices, axis=0))
    if per_sample_weights is not None:
        rows = rows * upcast(per_sample_weights)[:, None]
    segments = jnp.where(used, offset2bag, count)
    bag_size = jax.ops.segment_sum(used.astype(jnp.int64), segments, num_segments=count)
    if mode == _BAG_MAX:
        best = jax.ops.segment_max(jnp.where(used[:, None], rows, -jnp.inf), segments, num_segments=count)
        positions = jnp.arange(indices.shape[0])[:, None]
        first = jax.ops.segment_min(
            jnp.where(rows == best[jnp.minimum(segments, count - 1)], positions, indices.shape[0]),
            segments,
            num_segments=count,
        )
        empty = (bag_size == 0)[:, None]
        output = jnp.where(empty, 0, best)
        max_indices = jnp.where(empty, -1, jnp.take(indices, jnp.minimum(first, indices.shape[0] - 1)))
    else:
        output = jax.ops.segment_sum(rows, segments, num_segments=count)
        if mode == _BAG_MEAN:
            output = output / jnp.maximum(bag_size, 1)[:, None]
        max_indices = jnp.zeros((count,), indices.dtype)
    return output.astype(weight.dtype), offset2bag.astype(indices.dtype), bag_size.astype(indices.dtype), max_indices


def _bag_rows_grad(grad: Any, indices: Any, offset2bag: Any, bag_size: Any, mode: int, per_sample_weights: Any) -> Any:
    """The gradient each index position sends to its weight row (sum and mean modes)."""
    count = grad.shape[0]
    g = upcast(grad)[jnp.minimum(offset2bag, count - 1)]
    g = jnp.where((offset2bag < count)[:, None], g, 0)
    if mode == _BAG_MEAN:
        g = g / jnp.maximum(bag_size, 1)[jnp.minimum(offset2bag, count - 1)][:, None].astype(g.dtype)
    if per_sample_weights is not None:
        g = g * upcast(per_sample_weights)[:, None]
    return g


@lowering(aten._embedding_bag_dense_backward.default)
def embedding_bag_dense_backward(
    grad: Any,
    indices: Any,
    offset2bag: Any,
    bag_size: Any,
    maximum_indices: Any,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    per_sample_weights: Any,
    padding_idx: int = -1,
) -> Any:
    if mode == _BAG_MAX:
        dims = jnp.arange(grad.shape[1])[None, :]
        valid = maximum_indices >= 0
        out = jnp.zeros((num_weights, grad.shape[1]), opmath_dtype(grad))
        out = out.at[jnp.where(valid, maximum_indices, num_weights), dims].add(upcast(grad), mode="drop")
        return out.astype(grad.dtype)
    rows = _bag_rows_grad(grad, indices, offset2bag, bag_size, mode, per_sample_weights)
    return embedding_dense_backward(rows.astype(grad.dtype), indices, num_weights, padding_idx, scale_grad_by_freq)


@lowering(aten._embedding_bag_backward.default)
def embedding_bag_backward(
    grad: Any,
    indices: Any,
    offsets: Any,
    offset2bag: Any,
    bag_size: Any,
    maximum_indices: Any,
    num_weights: int,
    scale_grad_by_freq: bool,
    mode: int,
    sparse: bool,
    per_sample_weights: Any,
    padding_idx: int = -1,
) -> Any:
    if sparse:
        raise NotImplementedError("neuron: _embedding_bag_backward: sparse gradients are not supported on neuron")
    return embedding_bag_dense_backward(
        grad,
        indices,
        offset2bag,
        bag_size,
        maximum_indices,
        num_weights,
        scale_grad_by_freq,
        mode,
        per_sample_weights,
        padding_idx,
    )


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
@opmath
def embedding_bag_per_sample_weights_backward(
    grad: Any, weight: Any, indices: Any, offsets: Any, offset2bag: Any, mode: int, padding_idx: int = -1
) -> Any:
    rows = _bag_rows_grad(grad, indices, offset2bag, None, _BAG_SUM, None)
    dots = (rows * jnp.take(weight, indices, axis=0)).sum(1)
    return jnp.where(indices == padding_idx, 0, dots)


# ---- losses -----------------------------------------------------------------------------


def _loss_dtypes(x: Any, target: Any) -> tuple[Any, Any]:
    compute, result = promote(x, target)
    return jax_dtype(compute), jax_dtype(result)


def _pointwise_loss(
    forward: Callable[..., Any],
    backward: Callable[..., Any],
    forward_op: Any,
    backward_op: Any,
    rounded: bool = False,
) -> None:
    """Register a pointwise loss `forward(x, t, *extra)` on `forward_op` and its derivative
    `backward(x, t, *extra)` (d loss / d x) on `backward_op`. With `rounded`, the forward
    takes `r=` (`step_rounding` of the result dtype) and rounds each step as CPU's kernel does."""

    def loss(x: Any, target: Any, reduction: int = MEAN, *extra: Any) -> Any:
        compute, result = _loss_dtypes(x, target)
        rounding = {"r": step_rounding(result)} if rounded else {}
        value = forward(x.astype(compute), target.astype(compute), *extra, **rounding)
        return _reduce(value, reduction).astype(result)

    def loss_backward(grad: Any, x: Any, target: Any, reduction: int, *extra: Any) -> Any:
        compute, _ = _loss_dtypes(x, target)
        shape = jnp.broadcast_shapes(x.shape, target.shape)
        g = _reduce_grad(grad, shape, reduction)
        return (g * backward(x.astype(compute), target.astype(compute), *extra)).astype(x.dtype)

    lowering(forward_op)(loss)
    lowering(backward_op)(loss_backward)


def _safe(value: Any) -> Any:
    return jnp.where(value == 0, 1, value)


_pointwise_loss(  # CPU's mse kernel: the difference, then its square, each in the dtype
    lambda x, t, r: r(jnp.square(r(x - t))),
    lambda x, t: 2 * (x - t),
    aten.mse_loss.default,
    aten.mse_loss_backward.default,
    rounded=True,
)
_pointwise_loss(
    lambda x, t, beta: jnp.where(
        jnp.abs(x - t) < beta, 0.5 * jnp.square(x - t) / _safe(beta), jnp.abs(x - t) - 0.5 * beta
    ),
    lambda x, t, beta: jnp.where(beta == 0, jnp.sign(x - t), jnp.clip((x - t) / _safe(beta), -1, 1)),
    aten.smooth_l1_loss.default,
    aten.smooth_l1_loss_backward.default,
)


def _huber(x: Any, t: Any, delta: Any) -> Any:
    check(delta > 0, RuntimeError, "huber_loss does not support non-positive values for delta.")
    return jnp.where(jnp.abs(x - t) < delta, 0.5 * jnp.square(x - t), delta * (jnp.abs(x - t) - 0.5 * delta))


_pointwise_loss(
    _huber,
    lambda x, t, delta: jnp.clip(x - t, -delta, delta),
    aten.huber_loss.default,
    aten.huber_loss_backward.default,
)
_pointwise_loss(  # CPU: neg, mul_, exp_, log1p_ in place, each rounded to the dtype (exp overflows in float16)
    lambda x, t, r: r(jnp.log1p(r(jnp.exp(r(-x * t))))),  # input first: CPU's broadcast error names it tensor a
    lambda x, t: -t * jnp.exp(-t * x) / (1 + jnp.exp(-t * x)),
    aten.soft_margin_loss.default,
    aten.soft_margin_loss_backward.default,
    rounded=True,
)


@lowering(aten.binary_cross_entropy.default)
@opmath
def binary_cross_entropy(x: Any, target: Any, weight: Any = None, reduction: int = MEAN) -> Any:
    loss = (target - 1) * jnp.maximum(jnp.log1p(-x), -100) - target * jnp.maximum(jnp.log(x), -100)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@lowering(aten.binary_cross_entropy_backward.default)
@opmath(like="x")
def binary_cross_entropy_backward(grad: Any, x: Any, target: Any, weight: Any = None, reduction: int = MEAN) -> Any:
    g = _reduce_grad(grad, x.shape, reduction) * (x - target) / jnp.maximum((1 - x) * x, 1e-12)
    if weight is not None:
        g = g * weight
    return g


@lowering(aten.binary_cross_entropy_with_logits.default)
@opmath(like="target")
def binary_cross_entropy_with_logits(
    x: Any, target: Any, weight: Any = None, pos_weight: Any = None, reduction: int = MEAN
) -> Any:
    log_sigmoid = jax.nn.log_sigmoid(x)
    if pos_weight is not None:
        loss = (1 - target) * x - ((pos_weight - 1) * target + 1) * log_sigmoid
    else:
        loss = (1 - target) * x - log_sigmoid
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def _nll(x: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> tuple[Any, Any]:
    """Per-element losses (shape of target) and the weights that count toward the mean."""
    batched = x.ndim >= 2
    valid = target != ignore_index
    safe = jnp.where(valid, target, 0)
    picked = jnp.take_along_axis(x, jnp.expand_dims(safe, 1 if batched else 0), axis=1 if batched else 0)
    picked = jnp.squeeze(picked, 1 if batched else 0)
    w = jnp.ones_like(picked) if weight is None else weight[safe]
    w = jnp.where(valid, w, 0)
    return -picked * w, w


@opmath
def _nll_forward(x: Any, target: Any, weight: Any, reduction: int, ignore_index: int) -> Any:
    losses, w = _nll(x, target, weight, reduction, ignore_index)
    total = w.sum()
    if reduction == NONE:
        total = total if x.ndim < 2 else jnp.zeros((), total.dtype)
        return losses, total
    out = losses.sum()
    if reduction == MEAN:
        out = out / total
    return out, total


@opmath(like="x")
def _nll_backward(
    grad: Any, x: Any, target: Any, weight: Any, reduction: int, ignore_index: int, total_weight: Any
) -> Any:
    _, w = _nll(x, target, weight, reduction, ignore_index)
    if reduction == MEAN:
        grad = grad / total_weight
    scale = -w * grad
    batched = x.ndim >= 2
    axis = 1 if batched else 0
    safe = jnp.where(target != ignore_index, target, 0)
    classes = jnp.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    hit = jnp.expand_dims(safe, axis) == classes
    return jnp.where(hit, jnp.expand_dims(scale, axis), 0)


lowering(aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)(_nll_forward)
lowering(aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)(_nll_backward)


def _margin_input(x: Any) -> tuple[int, int]:
    """(samples, classes) of a multi(label) margin loss's input: a non-empty vector or a matrix
    with non-empty rows (PyTorch's *margin_loss_shape_check); a 0-d input is one class."""
    if not ((x.ndim == 2 and x.shape[1] != 0) or (x.ndim == 1 and x.shape[0] != 0) or x.ndim == 0):
        raise RuntimeError(
            f"Expected non-empty vector or matrix with optional 0-dim batch size, but got: {list(x.shape)}"
        )
    return (x.shape[0], x.shape[1]) if x.ndim == 2 else (1, x.shape[0] if x.ndim else 1)


def _expect_dtype(x: Any, dtype: torch.dtype) -> None:
    """The error of CPU's typed data access (`data_ptr<int64_t>()`) on a tensor of another dtype."""
    found = torch_dtype(x)
    if found != dtype:
        raise RuntimeError(f"expected scalar type {scalar_type_name(dtype)} but found {scalar_type_name(found)}")


def _multi_margin_args(x: Any, target: Any, p: Any, weight: Any) -> None:
    """multi_margin_loss's checks, in CPU's order; then a deferred check of the target classes."""
    if p not in (1, 2):
        raise RuntimeError("only p == 1 and p == 2 supported")
    samples, classes = _margin_input(x)
    if target.ndim > 1 or target.size != samples:
        raise RuntimeError(
            "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch "
            f"size). Expected target size [{samples}], but got {list(target.shape)}. Input has shape {list(x.shape)}."
        )
    if weight is not None and (weight.ndim > 1 or weight.size != classes):
        raise RuntimeError(f"inconsistent weight size, expected {classes} but got {list(weight.shape)}")
    _expect_dtype(target, torch.int64)
    if weight is not None:
        _expect_dtype(weight, torch_dtype(x))
    check((target >= 0) & (target < classes), RuntimeError, "target out of range")


def _multi_margin(x: Any, target: Any, p: Any, margin: Any, weight: Any, reduction: int) -> Any:
    xc = jnp.atleast_2d(x)
    t = jnp.atleast_1d(target)[:, None]
    z = margin - jnp.take_along_axis(xc, t, axis=1) + xc
    z = jnp.where(z > 0, z, 0)
    z = z if p == 1 else z * z
    if weight is not None:
        z = z * weight[t]
    z = jnp.where(jnp.arange(xc.shape[1]) != t, z, 0)
    if reduction == MEAN:
        return z.mean()
    if reduction == SUM:
        return z.sum() / z.shape[1]
    return z.mean(1).reshape(target.shape)


# `p` is static: CPU takes it as an int (2.9 is 2), and it picks the formula.
@lowering(aten.multi_margin_loss.default, static=("p",))
@opmath
def multi_margin_loss(
    x: Any, target: Any, p: Any = 1, margin: Any = 1, weight: Any = None, reduction: int = MEAN
) -> Any:
    p = int(p)
    _multi_margin_args(x, target, p, weight)
    return _multi_margin(x, target, p, margin, weight, reduction)


@lowering(aten.multi_margin_loss_backward.default, static=("p",))
@opmath(like="x")
def multi_margin_loss_backward(
    grad: Any, x: Any, target: Any, p: Any, margin: Any, weight: Any = None, reduction: int = MEAN
) -> Any:
    p = int(p)
    _multi_margin_args(x, target, p, weight)
    _, vjp = jax.vjp(lambda v: _multi_margin(v, target, p, margin, weight, reduction), x)
    return vjp(grad)[0]


def _multilabel_margin_args(x: Any, target: Any) -> None:
    """multilabel_margin_loss's checks, in CPU's order; then a deferred check of the labels."""
    samples, classes = _margin_input(x)
    if x.ndim == 2:
        fits = tuple(target.shape) == (samples, classes)
    else:
        fits = target.ndim <= 1 and target.size == classes
    if not fits:
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of size: {list(x.shape)}")
    _expect_dtype(target, torch.int64)
    check((target >= -1) & (target < classes), RuntimeError, "argument #2 'target' is out of range")


def _multilabel_margin(x: Any, target: Any, reduction: int) -> tuple[Any, Any]:
    xc, t = jnp.atleast_2d(x), jnp.atleast_2d(target)
    dim = xc.shape[1]
    idx = jnp.arange(dim)
    end = jnp.min(jnp.where(t == -1, idx, dim), axis=-1, keepdims=True)
    in_list = idx < end
    u = jnp.take_along_axis(xc, jnp.where(in_list, t, 0), axis=-1)
    is_target = jnp.any(idx == jnp.where(in_list, t, -1)[..., None], axis=1)
    z = 1.0 - u.T[..., None] + xc
    z = jnp.where(z > 0, z, 0) / dim
    z = jnp.where(is_target | ~in_list.T[..., None], 0, z)
    if reduction == MEAN:
        loss = z.sum((0, 2)).mean()
    elif reduction == SUM:
        loss = z.sum()
    else:
        loss = z.sum((0, 2)).reshape(x.shape[:-1] if x.ndim == 2 else ())
    return loss, is_target.astype(xc.dtype).reshape(target.shape)


@lowering(aten.multilabel_margin_loss_forward.default)
@opmath
def multilabel_margin_loss_forward(x: Any, target: Any, reduction: int) -> Any:
    _multilabel_margin_args(x, target)
    return _multilabel_margin(x, target, reduction)


@lowering(aten.multilabel_margin_loss_backward.default)
@opmath(like="x")
def multilabel_margin_loss_backward(grad: Any, x: Any, target: Any, reduction: int, is_target: Any) -> Any:
    _multilabel_margin_args(x, target)
    _, vjp = jax.vjp(lambda v: _multilabel_margin(v, target, reduction)[0], x)
    return vjp(grad)[0]


def _logsumexp(*terms: Any) -> Any:
    """log(sum(exp(terms))) that is -inf, with zero gradient, where every term is -inf."""
    stacked = jnp.stack(terms)
    top = jnp.max(stacked, axis=0)
    shift = jnp.where(jnp.isfinite(top), top, 0)
    total = jnp.sum(jnp.exp(stacked - shift), axis=0)
    return jnp.where(total > 0, jnp.log(jnp.where(total > 0, total, 1)) + shift, -jnp.inf)


def _ctc(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int) -> tuple[Any, Any]:
    """CTC forward (alpha) recursion: per-sequence negative log likelihood and log_alpha."""
    lp = log_probs
    lengths_static = isinstance(target_lengths, (list, tuple))
    il, tl = jnp.asarray(input_lengths), jnp.asarray(target_lengths)
    if lengths_static:
        longest = max(target_lengths, default=0)
    else:
        longest = targets.shape[1] if targets.ndim == 2 else targets.shape[0]
    steps, batch, _ = lp.shape
    width = 2 * longest + 1
    positions = jnp.arange(longest)
    if targets.ndim == 2:
        labels = jnp.take(targets, jnp.minimum(positions, max(targets.shape[1] - 1, 0)), axis=1)
    else:
        starts = jnp.cumsum(tl) - tl
        labels = targets[jnp.clip(starts[:, None] + positions[None, :], 0, max(targets.shape[0] - 1, 0))]
    labels = jnp.where(positions[None, :] < tl[:, None], labels, blank).reshape(batch, longest)
    ext = jnp.full((batch, width), blank, labels.dtype).at[:, 1::2].set(labels)
    lp_ext = jnp.take_along_axis(lp, jnp.broadcast_to(ext[None], (steps, batch, width)), axis=2)
    s = jnp.arange(width)
    previous = jnp.concatenate([jnp.full((batch, 2), -1, ext.dtype), ext[:, :-2]], axis=1)
    skip = (s % 2 == 1) & (s >= 2) & (ext != previous)
    start = jnp.where((s == 0) | ((s == 1) & (tl[:, None] > 0)), lp_ext[0], -jnp.inf)
    none = jnp.full((batch, 1), -jnp.inf, lp.dtype)

    def step(alpha: Any, t: Any) -> tuple[Any, Any]:
        one = jnp.concatenate([none, alpha[:, :-1]], axis=1)
        two = jnp.where(skip, jnp.concatenate([none, none, alpha[:, :-2]], axis=1), -jnp.inf)
        new = _logsumexp(alpha, one, two) + lp_ext[t]
        alpha = jnp.where((t < il)[:, None], new, alpha)
        return alpha, alpha

    final, history = jax.lax.scan(step, start, jnp.arange(1, steps))
    log_alpha = jnp.concatenate([start[None], history], axis=0).swapaxes(0, 1)
    end = jnp.take_along_axis(final, (2 * tl)[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(final, jnp.maximum(2 * tl - 1, 0)[:, None], axis=1)[:, 0]
    nll = -_logsumexp(end, jnp.where(tl > 0, before, -jnp.inf))
    return nll, log_alpha


def _batched_ctc(log_probs: Any, targets: Any) -> tuple[Any, Any]:
    if log_probs.ndim == 2:
        return log_probs[:, None], targets[None] if targets.ndim == 1 else targets
    return log_probs, targets


@lowering(aten._ctc_loss.default, aten._ctc_loss.Tensor)
@opmath
def ctc_loss(
    log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0, zero_infinity: bool = False
) -> Any:
    lp, tg = _batched_ctc(log_probs, targets)
    nll, log_alpha = _ctc(lp, tg, input_lengths, target_lengths, blank)
    if zero_infinity:
        nll = jnp.where(jnp.isinf(nll), 0, nll)
    if log_probs.ndim == 2:
        nll, log_alpha = nll[0], log_alpha[0]
    return nll, log_alpha


@lowering(aten._ctc_loss_backward.default, aten._ctc_loss_backward.Tensor)
@opmath(like="log_probs")
def ctc_loss_backward(
    grad: Any,
    log_probs: Any,
    targets: Any,
    input_lengths: Any,
    target_lengths: Any,
    neg_log_likelihood: Any,
    log_alpha: Any,
    blank: int,
    zero_infinity: bool = False,
) -> Any:
    """PyTorch's CTC gradient (Graves eq. 16): exp(lp) - occupancy / likelihood, i.e. the
    gradient with respect to the activations before log_softmax, zero past each input length."""
    lp, tg = _batched_ctc(log_probs, targets)
    g = grad.reshape(-1)
    nll, vjp = jax.vjp(lambda v: _ctc(v, tg, input_lengths, target_lengths, blank)[0], lp)
    (d_lp,) = vjp(g)
    result = jnp.exp(lp) * g[None, :, None] + d_lp
    live = jnp.arange(lp.shape[0])[:, None] < jnp.asarray(input_lengths)[None, :]
    if zero_infinity:
        live = live & ~jnp.isinf(nll)[None, :]
    result = jnp.where(live[:, :, None], result, 0)
    return result.reshape(log_probs.shape)


# ---- attention --------------------------------------------------------------------------

_SDP_MATH = 0  # sdp::SDPBackend::math


@lowering(aten._fused_sdp_choice.default)
def fused_sdp_choice(
    query: Any,
    key: Any,
    value: Any,
    attn_mask: Any = None,
    dropout_p: Any = 0.0,
    is_causal: bool = False,
    scale: Any = None,
    enable_gqa: bool = False,
) -> int:
    """The neuron device has no fused attention kernel: scaled_dot_product_attention takes
    the math path, which decomposes into lowered ops."""
    return _SDP_MATH
