"""Convolution, pooling, upsampling and patch ops on neuron against PyTorch CPU
(torch_neuronx/ops/conv.py), natively: OpInfo entries plus hand-written cases."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as nnf
from compare import assert_same, check
from families import check_accuracy, check_family
from opinfo import fallback_disabled, find

# The torch_neuronx.ops modules whose ops never fall back or decompose here (families.natively).
FAMILY = ("nn", "conv")

CONV_ENTRIES = [
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "max_pool2d_with_indices_backward",
    "nn.functional.avg_pool1d",
    "nn.functional.avg_pool2d",
    "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool1d",
    "nn.functional.adaptive_max_pool2d",
    "nn.functional.adaptive_max_pool3d",
    "nn.functional.interpolate:nearest",
    "nn.functional.interpolate:nearest-exact",
    "nn.functional.interpolate:linear",
    "nn.functional.interpolate:bilinear",
    "nn.functional.interpolate:bicubic",
    "nn.functional.interpolate:trilinear",
    "nn.functional.interpolate:area",
    "nn.functional.upsample_bilinear",
    "nn.functional.upsample_nearest",
    "_upsample_bilinear2d_aa",
    "nn.functional.unfold",
    "nn.functional.pixel_shuffle",
    "nn.functional.pixel_unshuffle",
    "nn.functional.channel_shuffle",
    "nn.functional.local_response_norm",
    "nn.functional.grid_sample",
    "grid_sampler_2d",
    "grid_sampler_3d",
]
# PyTorch CPU's bfloat16 kernels of these round partial sums to bfloat16 (im2col + gemm +
# col2im for transposed convolution, a bfloat16 running sum for 3-d adaptive pooling, grid
# sampling's coordinates and weights); neuron accumulates in float32 and rounds once, so both
# are judged against the float32 result.
ACCUMULATES_IN_BF16_ON_CPU = {
    "nn.functional.conv_transpose1d",
    "nn.functional.conv_transpose2d",
    "nn.functional.conv_transpose3d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.grid_sample",
    "grid_sampler_2d",
    "grid_sampler_3d",
}


def _opinfo(key: str) -> Any:
    name, _, variant = key.partition(":")
    return find(name, variant)


# XLA's 3-d transposed convolution sums each gradient element's kernel-volume x channel terms in
# another order than PyTorch's col2im; PyTorch's own OpInfo loosens float32 for it too (1e-4).
# grid_sampler_3d's grid gradient sums 8 corners x 21 channels of differences that cancel, and
# CPU's scalar kernel groups each corner's weight factors otherwise than the vjp does: one of
# 79200 elements is 3e-5 apart (relative), as before the lowering shared the 2-d code.
SUMS_IN_ANOTHER_ORDER = {"nn.functional.conv_transpose3d", "grid_sampler_3d"}


@pytest.mark.parametrize("key", CONV_ENTRIES)
def test_opinfo_float32_forward_backward(key: str) -> None:
    assert check_family(FAMILY, _opinfo(key), torch.float32, grad=True, loose=key in SUMS_IN_ANOTHER_ORDER) > 0


@pytest.mark.parametrize("key", CONV_ENTRIES)
def test_opinfo_bfloat16_forward(key: str) -> None:
    opinfo = _opinfo(key)
    if torch.bfloat16 not in opinfo.supported_dtypes("cpu"):
        pytest.skip("PyTorch CPU has no bfloat16 kernel for this op")
    if key in ACCUMULATES_IN_BF16_ON_CPU:
        assert check_accuracy(FAMILY, opinfo, torch.bfloat16, torch.float32) > 0
    else:
        assert check_family(FAMILY, opinfo, torch.bfloat16, grad=False) > 0


# ---- convolution ------------------------------------------------------------------------


CONV_CASES = [
    # (dims, transposed, in_channels, out_channels, kernel, stride, padding, dilation, groups, output_padding)
    (1, False, 4, 6, 3, 2, 1, 1, 2, 0),
    (2, False, 3, 4, (3, 2), (2, 1), (1, 0), (2, 1), 1, 0),
    (2, False, 4, 4, 3, 1, 2, 1, 4, 0),
    (3, False, 2, 4, 2, 1, 0, 1, 1, 0),
    (1, True, 4, 2, 3, 2, 1, 1, 1, 1),
    (2, True, 4, 6, (3, 2), (2, 3), (1, 2), (1, 2), 2, (1, 0)),
    (2, True, 3, 2, 3, 1, 3, 1, 1, 0),
    (3, True, 2, 2, 2, 2, 0, 1, 2, 1),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_convolution_and_backward_match_cpu(case: tuple) -> None:
    dims, transposed, c_in, c_out, kernel, stride, padding, dilation, groups, output_padding = case
    kernel = (kernel,) * dims if isinstance(kernel, int) else kernel
    expand = lambda v: [v] * dims if isinstance(v, int) else list(v)  # noqa: E731
    x = torch.randn(2, c_in, *[7 - d for d in range(dims)])
    w_shape = (c_in, c_out // groups, *kernel) if transposed else (c_out, c_in // groups, *kernel)
    w, b = torch.randn(w_shape), torch.randn(c_out)
    args = (expand(stride), expand(padding), expand(dilation), transposed, expand(output_padding), groups)

    def fn(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> Any:
        out = torch.ops.aten.convolution(x, w, b, *args)
        grad = torch.ones_like(out) + out.detach() * 0.01
        grads = torch.ops.aten.convolution_backward(grad, x, w, [c_out], *args, [True, True, True])
        return out, grads

    with fallback_disabled():
        check(fn, x, w, b, rtol=1e-4, atol=1e-4)


def test_conv2d_module_training_step() -> None:
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2)
    dev = torch.nn.Conv2d(3, 8, 3, padding=1, stride=2).to("neuron")
    dev.load_state_dict(conv.state_dict())
    x = torch.randn(4, 3, 9, 9)
    conv(x).square().mean().backward()
    with fallback_disabled():
        out = dev(x.to("neuron"))
    out.square().mean().backward()
    assert_same(conv.weight.grad, dev.weight.grad, rtol=1e-4, atol=1e-5)
    assert_same(conv.bias.grad, dev.bias.grad, rtol=1e-4, atol=1e-5)


def test_convolution_bad_input_names_op_dtype_device() -> None:
    x, w = torch.randn(1, 4, 5, 5).to("neuron"), torch.randn(2, 3, 3, 3).to("neuron")
    with fallback_disabled(), pytest.raises(RuntimeError, match=r"convolution \(torch.float32 on neuron\).*3 channels"):
        nnf.conv2d(x, w)


# ---- pooling ----------------------------------------------------------------------------


def test_max_pool_indices_with_padding_ties_infinities_and_nan() -> None:
    x = torch.randn(2, 3, 9, 8)
    x[0, 0, :3, :3] = -math.inf
    x[0, 1, 2, 2] = math.nan
    x[1, 0, :4, :4] = 1.0
    for kwargs in ({"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, {"kernel_size": 2, "dilation": 2}):
        with fallback_disabled():
            check(lambda t, kw=kwargs: nnf.max_pool2d(t, return_indices=True, **kw), x)


def test_max_pool_backward_scatters_through_indices() -> None:
    x = torch.randn(2, 2, 6, 6)

    def fn(t: torch.Tensor) -> torch.Tensor:
        t = t.detach().requires_grad_()
        out = nnf.max_pool2d(t, 3, stride=1, padding=1)  # overlapping windows share maxima
        cotangent = torch.arange(out.numel(), dtype=t.dtype).reshape(out.shape).to(t.device)
        return torch.autograd.grad(out, t, cotangent)[0]

    with fallback_disabled():
        check(fn, x)


@pytest.mark.parametrize("count_include_pad, divisor", [(True, None), (False, None), (True, 5)])
def test_avg_pool_divisors(count_include_pad: bool, divisor: int | None) -> None:
    x = torch.randn(2, 3, 7, 6)
    with fallback_disabled():
        check(
            lambda t: nnf.avg_pool2d(
                t, 3, 2, 1, ceil_mode=True, count_include_pad=count_include_pad, divisor_override=divisor
            ),
            x,
        )


@pytest.mark.parametrize(
    "shape, kwargs",
    [
        ((2, 3, 2, 2), {"kernel_size": 1280, "ceil_mode": True}),  # EfficientNet's pooler on its tiny map
        ((2, 3, 3, 4), {"kernel_size": 9, "stride": 1, "padding": 4}),
        ((1, 2, 5, 3), {"kernel_size": (7, 3), "stride": (2, 5), "padding": (3, 1), "ceil_mode": True}),
    ],
)
def test_pools_with_kernels_larger_than_the_input(shape: tuple, kwargs: dict) -> None:
    x = torch.randn(*shape)

    def pools(t: torch.Tensor) -> list:
        t = t.detach().requires_grad_()
        avg = nnf.avg_pool2d(t, **kwargs)
        values, indices = nnf.max_pool2d(t, return_indices=True, **kwargs)
        (avg.sum() + (values * 2).sum()).backward()
        return [avg.detach(), values.detach(), indices, t.grad]

    with fallback_disabled():
        check(pools, x)


def test_pool_windows_gather_only_offsets_that_reach_the_input() -> None:
    """A 1280x1280 kernel over a 2x2 map gathers 4 taps, not 1.6 million slices of a padded
    1280x1280 map (minutes of tracing: EfficientNet's pooler timed out the vision sweep)."""
    from torch_neuronx.ops.pooling import Windows

    windows = Windows((2, 3, 2, 2), (1280, 1280), (), (0, 0), (1, 1), True, inside_only=True)
    assert windows.patches(np.zeros((2, 3, 2, 2)), 0).shape == (2, 3, 4, 1, 1)
    padded = Windows((1, 1, 3), (9,), (1,), (4,), (1,), False, inside_only=True)
    assert padded.offsets[0].tolist() == [2, 3, 4, 5, 6]  # offsets 0, 1, 7 and 8 read only padding


# ---- upsampling and patches -------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, align_corners, antialias",
    [
        ("nearest", None, False),
        ("nearest-exact", None, False),
        ("bilinear", False, False),
        ("bilinear", True, False),
        ("bicubic", False, False),
        ("bilinear", False, True),
        ("bicubic", True, True),
    ],
)
def test_interpolate_scale_factor_and_backward(mode: str, align_corners: bool | None, antialias: bool) -> None:
    x = torch.randn(2, 3, 5, 7)

    def fn(t: torch.Tensor) -> Any:
        t = t.detach().requires_grad_()
        out = nnf.interpolate(t, scale_factor=(1.7, 0.45), mode=mode, align_corners=align_corners, antialias=antialias)
        return out.detach(), torch.autograd.grad(out, t, torch.ones_like(out) + out.detach())[0]

    with fallback_disabled():
        check(fn, x)


def test_fold_is_col2im() -> None:
    cols = torch.randn(2, 3 * 2 * 3, 18)
    with fallback_disabled():
        check(lambda c: nnf.fold(c, (5, 6), (2, 3), dilation=1, padding=1, stride=(2, 1)), cols)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize(
    "shape, size", [((8, 8, 8, 8), (5, 7, 4)), ((2, 3, 7, 9, 5), (3, 2, 5)), ((2, 5, 5, 5), (1, 1, 1))]
)
def test_adaptive_avg_pool3d_half(dtype: torch.dtype, shape: tuple, size: tuple) -> None:
    """CPU sums each window tap by tap in the dtype and divides by kT, kH, kW in turn: bit-exact."""
    torch.manual_seed(0)
    x = (torch.randn(*shape) * 5).to(dtype)
    with fallback_disabled():
        assert_same(nnf.adaptive_avg_pool3d(x, size), nnf.adaptive_avg_pool3d(x.to("neuron"), size), rtol=0, atol=0)
