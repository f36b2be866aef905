"""`torch.autocast("neuron")`: PyTorch ships autocast kernels for CPU, CUDA, XPU and MPS but
none for PrivateUse1, so without these every op under autocast fails on the
AutocastPrivateUse1 key. We register PyTorch's shared policy lists (aten/src/ATen/autocast_mode.h,
the lists CUDA uses) as Python kernels on that key, and a fallthrough for every other op.

Policies, as in autocast_mode.h: `lower` casts floating neuron tensors (never float64) to the
autocast dtype; `fp32` casts them to float32; `fp32_dtype` passes dtype=float32 when the first
argument is eligible and no dtype was given; `promote` casts all eligible tensors to the widest
of them (float32 wins over the lower-precision dtype). No JAX import here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

LOWER = (
    "_convolution.deprecated _convolution conv1d conv2d conv3d conv_tbc conv_transpose1d "
    "conv_transpose2d.input conv_transpose3d.input convolution prelu addmm addmv addr matmul einsum mm mv "
    "linalg_vecdot linear addbmm baddbmm bmm chain_matmul linalg_multi_dot _thnn_fused_lstm_cell "
    "_thnn_fused_gru_cell lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell _scaled_dot_product_flash_attention "
    "scaled_dot_product_attention"
)
FP32 = (
    "acos asin cosh erfinv exp expm1 log log10 log2 log1p reciprocal rsqrt sinh tan pow.Tensor_Scalar "
    "pow.Tensor_Tensor pow.Scalar softplus layer_norm native_layer_norm rms_norm group_norm frobenius_norm.dim "
    "nuclear_norm nuclear_norm.dim cosine_similarity poisson_nll_loss cosine_embedding_loss nll_loss nll_loss2d "
    "hinge_embedding_loss kl_div l1_loss smooth_l1_loss huber_loss mse_loss margin_ranking_loss "
    "multilabel_margin_loss soft_margin_loss triplet_margin_loss multi_margin_loss "
    "binary_cross_entropy_with_logits dist pdist cdist renorm logsumexp upsample_nearest1d "
    "_upsample_nearest_exact1d upsample_nearest2d _upsample_nearest_exact2d upsample_nearest3d "
    "_upsample_nearest_exact3d upsample_linear1d upsample_bilinear2d _upsample_bilinear2d_aa "
    "upsample_trilinear3d upsample_bicubic2d _upsample_bicubic2d_aa norm.Scalar norm.ScalarOpt_dim"
)
FP32_DTYPE = (
    "prod prod.dim_int softmax.int log_softmax.int cumprod cumsum linalg_vector_norm linalg_matrix_norm "
    "linalg_matrix_norm.str_ord sum sum.dim_IntList"
)
PROMOTE = "addcdiv addcmul atan2 bilinear cross dot vdot grid_sampler index_put tensordot scatter_add"


def _eligible(x: Any) -> bool:
    return (
        isinstance(x, torch.Tensor) and x.device.type == "neuron" and x.is_floating_point() and x.dtype != torch.float64
    )


def _cast_to(dtype: torch.dtype) -> Callable[[Any], Any]:
    return lambda x: x.to(dtype) if _eligible(x) and x.dtype != dtype else x


def _widest(args: tuple, kwargs: dict) -> torch.dtype:
    dtype = torch.get_autocast_dtype("neuron")
    for x in torch.utils._pytree.tree_leaves((args, kwargs)):
        if _eligible(x) and x.dtype == torch.float32:
            dtype = torch.float32
    return dtype


def _with_float_dtype(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    names = [a.name for a in op._schema.arguments]
    if "dtype" not in names or not args or not _eligible(args[0]):
        return args, kwargs
    index = names.index("dtype")
    if index < len(args):
        return (*args[:index], torch.float32 if args[index] is None else args[index], *args[index + 1 :]), kwargs
    return args, {**kwargs, "dtype": kwargs.get("dtype") or torch.float32}


def _kernel(op: torch._ops.OpOverload, policy: str) -> Callable[..., Any]:
    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "fp32_dtype":
            args, kwargs = _with_float_dtype(op, args, kwargs)
        else:
            dtype = {"lower": torch.get_autocast_dtype("neuron"), "fp32": torch.float32}.get(policy)
            cast = _cast_to(dtype if dtype is not None else _widest(args, kwargs))
            args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*args, **kwargs)

    return kernel


def _banned(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(
        "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
        "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
        "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
        "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
        "safe to autocast."
    )


def register(libraries: list[torch.library.Library]) -> None:
    """Fallthrough for every op, then the policy kernels, on AutocastPrivateUse1."""
    fallthrough = torch.library.Library("_", "IMPL")
    fallthrough.fallback(torch.library.fallthrough_kernel, _KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for policy, names in (("lower", LOWER), ("fp32", FP32), ("fp32_dtype", FP32_DTYPE), ("promote", PROMOTE)):
        for name in names.split():
            packet, _, overload = name.partition(".")
            op = getattr(getattr(torch.ops.aten, packet, None), overload or "default", None)
            if op is not None:
                kernels.impl(name, _kernel(op, policy), _KEY)
    kernels.impl("binary_cross_entropy", _banned, _KEY)
    libraries.extend([fallthrough, kernels])
