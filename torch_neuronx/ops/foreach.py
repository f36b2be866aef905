"""The `_foreach_*` family, AMP grad-scaling ops and the fused optimizer steps.

`_foreach_*` ops are not written one by one. Once every family is loaded, `derive_foreach`
walks the functional `_foreach_<op>` overloads and pairs each with the single-tensor overload
of `<op>` that PyTorch's own loop calls per element (`_foreach_add.List` -> `add.Tensor`,
`.Scalar`/`.ScalarList` -> `add.Scalar`, `.Tensor` -> `add.Tensor`): arguments are matched by
name, then by position, a `T[]` list feeds its i-th element, anything else is passed to every
element. Where that op has a lowering, the list op gets one that applies it to every element
inside one executable; without one it keeps PyTorch's composite loop (eager/dispatch.py). The
dispatcher derives the in-place forms (`_foreach_add_`) from these.

The fused optimizer steps (`_fused_adam_`, `_fused_adamw_`, `_fused_sgd_`, `_fused_adagrad_`)
follow PyTorch's CPU kernels operation for operation (step-dependent coefficients in float64,
then rounded to the parameter's compute dtype), so a neuron step matches a CPU step to
rounding. Each updates all its lists in one executable; hyperparameters are executable inputs,
so a learning-rate schedule never recompiles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax.numpy as jnp
import torch

from . import LOWERINGS, Lowering, derived, is_mutating, lowering
from ._common import fail_unless, opmath_dtype

aten = torch.ops.aten
OpOverload = torch._ops.OpOverload

# ---- the `_foreach_*` family, derived ----------------------------------------------------

# `_foreach_<name>` whose per-element op has another name (PyTorch's loop calls these).
_RENAMED = {"norm": "linalg_vector_norm", "powsum": "linalg__powsum"}
_ELEMENT = {"List[Tensor]": "Tensor", "List[number]": "number"}


def _foreach_overloads() -> Iterator[OpOverload]:
    for qualified in torch._C._dispatch_get_all_op_names():
        if qualified.startswith("aten::_foreach_"):
            name, _, overload = qualified[len("aten::") :].partition(".")
            op = getattr(getattr(aten, name), overload or "default")
            if not is_mutating(op):
                yield op


def _compatible(given: str, wanted: str) -> int | None:
    """0: same type; 1: a Scalar where a Tensor is taken (a wrapped number); None: no match."""
    if wanted in (given, f"Optional[{given}]"):
        return 0
    if given == "number" and wanted == "Tensor":
        return 1
    return None


def _match(op: OpOverload, single: OpOverload) -> tuple[int, list] | None:
    """How `single` is called per element of `op`: (cost, per single argument either
    (index of op argument, takes its i-th element) or None for the default)."""
    params = op._schema.arguments
    wanted = single._schema.arguments
    names = [a.name for a in wanted]
    source: dict[int, int] = {}
    unnamed = []
    for i, a in enumerate(params):
        if a.name in names:
            source[names.index(a.name)] = i
        else:
            unnamed.append(i)
    free = [j for j in range(len(wanted)) if j not in source]
    if len(unnamed) > len(free):
        return None
    source.update(zip(free, unnamed))
    cost, plan = 0, []
    for j, a in enumerate(wanted):
        if j not in source:
            if not a.has_default_value():
                return None
            plan.append(None)
            continue
        given = str(params[source[j]].type)
        each = given in _ELEMENT
        step = _compatible(_ELEMENT.get(given, given), str(a.type))
        if step is None:
            return None
        cost += step
        plan.append((source[j], each))
    return cost, plan


def _mapped(name: str, fn: Callable[..., Any], plan: list, defaults: list, lists: list[int]) -> Callable[..., Any]:
    """The lowering of a list op: `fn` applied to each element, in one executable."""

    def lowered(*args: Any) -> list:
        sizes = [len(args[i]) for i in lists]
        fail_unless(len(set(sizes)) == 1, name, f"all lists must have the same length, got {sizes}")
        count = sizes[0]
        fail_unless(count > 0, name, "Tensor list must have at least one tensor.")
        results = []
        for k in range(count):
            call = [
                default if source is None else args[source[0]][k] if source[1] else args[source[0]]
                for source, default in zip(plan, defaults)
            ]
            results.append(fn(*call))
        return results

    return lowered


@derived
def derive_foreach() -> None:
    """Give every functional `_foreach_*` overload the lowering of its per-element op."""
    for op in _foreach_overloads():
        if op in LOWERINGS:
            continue
        base = op._schema.name.split("::")[1][len("_foreach_") :]
        packet = getattr(aten, _RENAMED.get(base, base), None)
        if packet is None:
            continue
        options = []
        for overload in packet.overloads():
            single = getattr(packet, overload)
            found = LOWERINGS.get(single)
            if found is None or found.random or is_mutating(single):
                continue
            match = _match(op, single)
            if match is not None:
                options.append((match[0], overload, single, found, match[1]))
        if not options:
            continue
        _, _, single, found, plan = min(options, key=lambda o: o[:2])
        defaults = [a.default_value if a.has_default_value() else None for a in single._schema.arguments]
        lists = [i for i, a in enumerate(op._schema.arguments) if str(a.type) in _ELEMENT]
        LOWERINGS[op] = Lowering(_mapped(str(op), found.fn, plan, defaults, lists))


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


# ---- AMP gradient scaling (torch.amp.GradScaler) ------------------------------------------


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
