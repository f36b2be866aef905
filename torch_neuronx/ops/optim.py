"""The fused optimizer steps: `_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_`
and their functional twins (`_fused_adam`, ...), as `torch.optim`'s `fused=True` calls them.

They follow PyTorch's CPU kernels operation for operation (step-dependent coefficients in
float64, then rounded to the parameter's opmath dtype), so a neuron step matches a CPU step to
rounding. Each updates all its lists in one executable; hyperparameters are executable inputs,
so a learning-rate schedule never recompiles. With a GradScaler, `grad_scale` unscales the
gradients and a `found_inf` of 1 leaves every state as it was.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch

from . import lowering
from ._common import fail_unless, opmath_dtype

aten = torch.ops.aten


# ---- shared pieces of the fused steps -------------------------------------------------------


def _f64(x: Any) -> Any:
    return jnp.asarray(x, jnp.float64)


def _skip(found_inf: Any, old: Any, new: Any) -> Any:
    """CPU kernels return early when found_inf == 1: every state keeps its old value."""
    if found_inf is None or new is None:
        return new
    return jnp.where(found_inf.reshape(()) == 1.0, old, new)


def _load_grad(grad: Any, compute: Any, grad_scale: Any, maximize: bool) -> tuple[Any, Any]:
    """(gradient to use, unscaled gradient to store back or None if unchanged)."""
    g = grad.astype(compute)
    stored = None
    if grad_scale is not None:
        g = g / grad_scale.reshape(()).astype(compute)
        stored = g.astype(grad.dtype)
    return (-g if maximize else g), stored


def _scalar(x: Any, compute: Any, via: Any = None) -> Any:
    """A hyperparameter as the kernel sees it: a double cast to the compute dtype (first to
    `via`, the parameter dtype, where the CPU kernel rounds it there)."""
    x = _f64(x)
    return (x if via is None else x.astype(via)).astype(compute)


def _decay(g: Any, p: Any, weight_decay: Any) -> Any:
    # a branch on weight_decay != 0 as on CPU (0 * inf would otherwise poison the gradient)
    return jnp.where(weight_decay != 0, g + p * weight_decay, g)


def _check_lengths(name: str, *lists: list) -> None:
    sizes = [len(x) for x in lists]
    fail_unless(len(set(sizes)) <= 1, name, f"all tensor lists must have the same length, got {sizes}")


def _functional(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The functional twin of an in-place fused step (`_fused_adam` of `_fused_adam_`): it
    returns every mutable list, unchanged elements (None in the in-place form) as they came."""

    def lowered(*args: Any, **kwargs: Any) -> tuple:
        new = fn(*args, **kwargs)
        return tuple([o if v is None else v for o, v in zip(old, values)] for old, values in zip(args, new))

    return lowered


# ---- Adam / AdamW -------------------------------------------------------------------------


def _adam_step(
    p: Any,
    grad: Any,
    m: Any,
    v: Any,
    v_max: Any,
    step: Any,
    lr: Any,
    beta1: Any,
    beta2: Any,
    weight_decay: Any,
    eps: Any,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Any,
    decoupled: bool,
) -> tuple:
    """One parameter of ATen's CPU fused Adam (FusedAdamKernel.cpp)."""
    compute = opmath_dtype(p)
    step = _f64(step)
    lr, beta1, beta2 = _f64(lr), _f64(beta1), _f64(beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2_sqrt = jnp.sqrt(1 - beta2**step)
    step_size = _scalar(lr / bias_correction1, compute)
    g, stored = _load_grad(grad, compute, grad_scale, maximize)
    param = p.astype(compute)
    if decoupled:
        param = jnp.where(weight_decay != 0, param * _scalar(1 - lr * weight_decay, compute), param)
    else:
        g = _decay(g, param, _scalar(weight_decay, compute))
    # exp_avg.lerp_(grad, 1 - beta1), in PyTorch's two-sided form
    w = _scalar(1 - beta1, compute)
    m32 = m.astype(compute)
    m_new = jnp.where(jnp.abs(w) < 0.5, m32 + w * (g - m32), g - (g - m32) * (1 - w))
    v_new = v.astype(compute) * _scalar(beta2, compute) + _scalar(1 - beta2, compute) * g * g
    v_max_new = jnp.maximum(v_max.astype(compute), v_new) if amsgrad else None
    root = jnp.sqrt(v_max_new if amsgrad else v_new)
    denom = root / _scalar(bias_correction2_sqrt, compute) + _scalar(eps, compute)
    p_new = param - step_size * m_new / denom
    return (
        p_new.astype(p.dtype),
        stored,
        m_new.astype(m.dtype),
        v_new.astype(v.dtype),
        None if v_max_new is None else v_max_new.astype(v_max.dtype),
    )


def _adam(decoupled: bool) -> Callable[..., Any]:
    def lowered(
        params: list,
        grads: list,
        exp_avgs: list,
        exp_avg_sqs: list,
        max_exp_avg_sqs: list,
        state_steps: list,
        lr: Any,
        beta1: Any,
        beta2: Any,
        weight_decay: Any,
        eps: Any,
        amsgrad: bool,
        maximize: bool,
        grad_scale: Any = None,
        found_inf: Any = None,
    ) -> tuple:
        name = "_fused_adamw_" if decoupled else "_fused_adam_"
        _check_lengths(name, params, grads, exp_avgs, exp_avg_sqs, state_steps, *([max_exp_avg_sqs] if amsgrad else []))
        olds = (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs if amsgrad else [None] * len(params))
        news: tuple[list, ...] = ([], [], [], [], [])
        for i, p in enumerate(params):
            v_max = max_exp_avg_sqs[i] if amsgrad else None
            one = _adam_step(
                p, grads[i], exp_avgs[i], exp_avg_sqs[i], v_max, state_steps[i],
                lr, beta1, beta2, weight_decay, eps, amsgrad, maximize, grad_scale, decoupled,
            )  # fmt: skip
            for new, old, value in zip(news, olds, one):
                new.append(_skip(found_inf, old[i], value))
        if not amsgrad:
            news = (*news[:4], [])
        return news

    return lowered


for _in_place, _pure, _decoupled in (
    (aten._fused_adam_, aten._fused_adam, False),
    (aten._fused_adamw_, aten._fused_adamw, True),
):
    lowering(_in_place.default, _in_place.tensor_lr)(_adam(_decoupled))
    lowering(_pure.default, _pure.tensor_lr)(_functional(_adam(_decoupled)))


# ---- SGD ----------------------------------------------------------------------------------


def _sgd(
    params: list,
    grads: list,
    momentum_buffer_list: list,
    weight_decay: Any,
    momentum: Any,
    lr: Any,
    dampening: Any,
    nesterov: bool,
    maximize: bool,
    is_first_step: bool,
    grad_scale: Any = None,
    found_inf: Any = None,
) -> tuple:
    """ATen's CPU fused SGD (FusedSGDKernel.cpp); an empty buffer list means momentum == 0. For
    half types this is the kernel's scalar loop: its vector loop (torch 2.13) skips the update."""
    _check_lengths("_fused_sgd_", params, grads, *([momentum_buffer_list] if momentum_buffer_list else []))
    new_params, new_grads, new_bufs = [], [], []
    for i, p in enumerate(params):
        compute = opmath_dtype(p)
        g, stored = _load_grad(grads[i], compute, grad_scale, maximize)
        param = p.astype(compute)
        g = _decay(g, param, _scalar(weight_decay, compute))
        if momentum_buffer_list:
            mu = _scalar(momentum, compute)
            old = momentum_buffer_list[i]
            buf = g if is_first_step else old.astype(compute) * mu + g * _scalar(1 - _f64(dampening), compute)
            new_bufs.append(_skip(found_inf, old, buf.astype(old.dtype)))
            g = g + buf * mu if nesterov else buf
        new_params.append(_skip(found_inf, p, (param - g * _scalar(lr, compute)).astype(p.dtype)))
        new_grads.append(_skip(found_inf, grads[i], stored))
    return new_params, new_grads, new_bufs


lowering(aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr)(_sgd)
lowering(aten._fused_sgd.default, aten._fused_sgd.tensor_lr)(_functional(_sgd))


# ---- Adagrad ------------------------------------------------------------------------------


def _adagrad(
    params: list,
    grads: list,
    state_sums: list,
    state_steps: list,
    lr: Any,
    lr_decay: Any,
    weight_decay: Any,
    eps: Any,
    maximize: bool,
    grad_scale: Any = None,
    found_inf: Any = None,
) -> tuple:
    """ATen's CPU fused Adagrad (FusedAdagradKernel.cpp), whose vector loop rounds its scalars to
    the parameter dtype; state_steps are read, not written."""
    _check_lengths("_fused_adagrad_", params, grads, state_sums, state_steps)
    new_params, new_grads, new_sums = [], [], []
    for i, p in enumerate(params):
        compute = opmath_dtype(p)
        clr = _scalar(_f64(lr) / (1 + (_f64(state_steps[i]) - 1) * _f64(lr_decay)), compute, p.dtype)
        g, stored = _load_grad(grads[i], compute, grad_scale, maximize)
        param = p.astype(compute)
        g = _decay(g, param, _scalar(weight_decay, compute, p.dtype))
        total = state_sums[i].astype(compute) + g * g
        std = jnp.sqrt(total) + _scalar(eps, compute, p.dtype)
        new_params.append(_skip(found_inf, p, (param - clr * g / std).astype(p.dtype)))
        new_grads.append(_skip(found_inf, grads[i], stored))
        new_sums.append(_skip(found_inf, state_sums[i], total.astype(state_sums[i].dtype)))
    return new_params, new_grads, new_sums, [None] * len(params)


lowering(aten._fused_adagrad_.default, aten._fused_adagrad_.tensor_lr)(_adagrad)
lowering(aten._fused_adagrad.default, aten._fused_adagrad.tensor_lr)(_functional(_adagrad))
