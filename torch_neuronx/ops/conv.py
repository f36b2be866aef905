"""Convolution and its backward, forward and transposed, in 1, 2 and 3 spatial dims.

A convolution is one `lax.conv_general_dilated` (HIGHEST precision) in the input's opmath
dtype; a transposed convolution is the equivalent input-dilated convolution with the flipped
kernel. The backward is the `jax.vjp` of the forward, the bias gradient a sum over all but the
channel axis.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import torch

from . import lowering
from ._common import fail_unless, opmath_dtype, per_dim

aten = torch.ops.aten
_HIGHEST = jax.lax.Precision.HIGHEST


def _check_conv(
    x: Any, w: Any, stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], transposed: bool,
    groups: int,
) -> None:  # fmt: skip
    """PyTorch's checks of a convolution's arguments (ConvUtils' check_shape_forward), in its order."""
    fail_unless(w.ndim >= 3, "convolution", "weight should have at least three dimensions", x)
    fail_unless(all(p >= 0 for p in padding), "convolution", "negative padding is not supported", x)
    fail_unless(all(s > 0 for s in stride), "convolution", "non-positive stride is not supported", x)
    fail_unless(all(d > 0 for d in dilation), "convolution", "dilation should be greater than zero", x)
    if not transposed:
        fail_unless(
            w.shape[0] >= groups,
            "convolution",
            f"Given groups={groups}, expected weight to be at least {groups} at dimension 0, but got weight of size "
            f"{list(w.shape)} instead",
            x,
        )
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
    _check_conv(x, w, stride, padding, dilation, transposed, groups)
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
