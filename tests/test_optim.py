"""torch.optim on neuron: every optimizer, in its default, foreach and fused forms, steps like
CPU from the same start with the same gradients; learning-rate schedules do not recompile;
gradient clipping and GradScaler match CPU."""

from __future__ import annotations

import copy
import inspect
from collections import Counter
from typing import Any

import pytest
import torch
from compare import assert_same

import torch_neuronx
from torch_neuronx.eager import metrics as eager_metrics

SHAPES = [(4, 5), (4,), (3, 4), (3,)]  # a small MLP's weights and biases
MATRICES = [(4, 5), (3, 4)]
STEPS = 6  # RAdam's rectified branch starts at step 6 with beta2=0.9

CASES = [
    ("SGD", {"lr": 0.1}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("SGD", {"lr": 0.1, "momentum": 0.9, "dampening": 0.2, "maximize": True}),
    ("Adam", {"lr": 0.01}),
    ("Adam", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1}),
    ("AdamW", {"lr": 0.01}),
    ("AdamW", {"lr": 0.01, "amsgrad": True, "maximize": True}),
    ("Adagrad", {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.1}),
    ("Adadelta", {"lr": 1.0, "weight_decay": 0.1}),
    ("Adamax", {"lr": 0.01, "weight_decay": 0.1}),
    ("ASGD", {"lr": 0.01, "t0": 2}),
    ("NAdam", {"lr": 0.01}),
    ("NAdam", {"lr": 0.01, "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RAdam", {"lr": 0.01, "betas": (0.9, 0.9)}),
    ("RAdam", {"lr": 0.01, "betas": (0.9, 0.9), "weight_decay": 0.1, "decoupled_weight_decay": True}),
    ("RMSprop", {"lr": 0.01}),
    ("RMSprop", {"lr": 0.01, "momentum": 0.9, "centered": True, "weight_decay": 0.1}),
    ("Rprop", {"lr": 0.01}),
    ("Adafactor", {"lr": 0.01}),
    ("Muon", {"lr": 0.02}),
]


def _forms(name: str) -> list[str]:
    accepted = inspect.signature(getattr(torch.optim, name)).parameters
    return ["default"] + [form for form in ("foreach", "fused") if form in accepted]


def _case_id(case: tuple) -> str:
    name, kwargs = case
    flags = [
        k for k in ("momentum", "nesterov", "amsgrad", "maximize", "centered", "decoupled_weight_decay") if k in kwargs
    ]
    return "-".join([name, *flags])


PARAMS = [(name, kwargs, form) for name, kwargs in CASES for form in _forms(name)]


def _init(shapes: list) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def _grads(shapes: list, step: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(100 + step)
    return [torch.randn(shape, generator=generator) for shape in shapes]


def _train(device: str, name: str, kwargs: dict, form: str, shapes: list) -> tuple[list, dict]:
    params = [torch.nn.Parameter(t.to(device)) for t in _init(shapes)]
    options = dict(kwargs)
    if form != "default":
        options[form] = True
    optimizer = getattr(torch.optim, name)(params, **options)
    for step in range(STEPS):
        for p, g in zip(params, _grads(shapes, step)):
            p.grad = g.to(device)
        optimizer.step()
    return params, optimizer.state_dict()["state"]


def _state_tensors(state: dict) -> list:
    return [v for index in sorted(state) for _, v in sorted(state[index].items()) if isinstance(v, torch.Tensor)]


@pytest.mark.parametrize(("name", "kwargs", "form"), PARAMS, ids=[f"{_case_id((n, k))}-{f}" for n, k, f in PARAMS])
def test_optimizer_steps_like_cpu(name: str, kwargs: dict, form: str) -> None:
    shapes = MATRICES if name == "Muon" else SHAPES
    cpu_params, cpu_state = _train("cpu", name, kwargs, form, shapes)
    dev_params, dev_state = _train("neuron", name, kwargs, form, shapes)
    # Muon orthogonalizes in bfloat16: its update carries bfloat16 rounding.
    rtol, atol = (2e-2, 1e-3) if name == "Muon" else (1e-4, 1e-5)
    assert_same([p.detach() for p in cpu_params], [p.detach() for p in dev_params], rtol, atol)
    cpu_tensors, dev_tensors = _state_tensors(cpu_state), _state_tensors(dev_state)
    assert len(cpu_tensors) == len(dev_tensors)
    for c, d in zip(cpu_tensors, dev_tensors):
        torch.testing.assert_close(d.cpu(), c, rtol=rtol, atol=atol)


def _quadratic(params: list, targets: list, scales: list) -> torch.Tensor:
    return sum(((p - t) ** 2 * s).sum() for p, t, s in zip(params, targets, scales))


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_like_cpu(line_search: str | None) -> None:
    targets, scales = _grads(SHAPES, 0), [g.abs() + 0.5 for g in _grads(SHAPES, 1)]
    results = []
    for device in ("cpu", "neuron"):
        params = [torch.nn.Parameter(t.to(device)) for t in _init(SHAPES)]
        ts, ss = [t.to(device) for t in targets], [s.to(device) for s in scales]
        optimizer = torch.optim.LBFGS(params, lr=0.5, max_iter=4, history_size=3, line_search_fn=line_search)

        def closure(params: list = params, ts: list = ts, ss: list = ss, optimizer: Any = optimizer) -> torch.Tensor:
            optimizer.zero_grad()
            loss = _quadratic(params, ts, ss)
            loss.backward()
            return loss

        losses = [optimizer.step(closure).item() for _ in range(3)]
        results.append((params, losses))
    (cpu_params, cpu_losses), (dev_params, dev_losses) = results
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    assert_same([p.detach() for p in cpu_params], [p.detach() for p in dev_params], 1e-4, 1e-5)


def test_sparse_adam_needs_sparse_gradients() -> None:
    """Sparse layouts do not exist on neuron: a sparse embedding (SparseAdam's input) fails
    with an error naming the op and what to do."""
    embedding = torch.nn.Embedding(6, 3, sparse=True).to("neuron")
    torch.optim.SparseAdam(embedding.parameters(), lr=0.1)
    with pytest.raises(
        NotImplementedError, match=r"neuron: aten\.\w*sparse\w*.*sparse layouts are not supported on the neuron device"
    ):
        embedding(torch.tensor([0, 2], device="neuron")).sum().backward()


# ---- schedules: hyperparameters are executable inputs --------------------------------------


def _schedule_run(device: str, name: str, form: str, measure: bool) -> tuple[list, int]:
    params = [torch.nn.Parameter(t.to(device)) for t in _init(SHAPES)]
    options = {"lr": 0.01, **({"momentum": 0.9} if name == "SGD" else {})}
    optimizer = getattr(torch.optim, name)(params, **options, **({form: True} if form != "default" else {}))
    # OneCycleLR moves the learning rate and the momentum (Adam's beta1) every step
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.05, total_steps=8)
    grads = [[g.to(device) for g in _grads(SHAPES, step)] for step in range(8)]
    misses = 0
    for step in range(8):
        if measure and step == 2:
            misses = torch_neuronx.metrics()["cache_misses"]
        for p, g in zip(params, grads[step]):
            p.grad = g
        optimizer.step()
        schedule.step()
    if measure:
        misses = torch_neuronx.metrics()["cache_misses"] - misses
    return params, misses


@pytest.mark.parametrize(
    ("name", "form"),
    [("Adam", "default"), ("Adam", "foreach"), ("Adam", "fused"), ("SGD", "default"), ("SGD", "fused")],
)
def test_schedule_does_not_recompile(name: str, form: str) -> None:
    cpu_params, _ = _schedule_run("cpu", name, form, False)
    dev_params, new_compiles = _schedule_run("neuron", name, form, True)
    assert new_compiles == 0, f"{new_compiles} executables compiled after warm-up"
    assert_same([p.detach() for p in cpu_params], [p.detach() for p in dev_params], 1e-4, 1e-5)


def test_tensor_lr_does_not_recompile() -> None:
    results = []
    for device in ("cpu", "neuron"):
        params = [torch.nn.Parameter(t.to(device)) for t in _init(SHAPES)]
        optimizer = torch.optim.AdamW(params, lr=torch.tensor(0.01), fused=True)
        schedule = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.5)
        for step in range(5):
            if step == 2:
                misses = torch_neuronx.metrics()["cache_misses"]
            for p, g in zip(params, _grads(SHAPES, step)):
                p.grad = g.to(device)
            optimizer.step()
            schedule.step()
        results.append((params, torch_neuronx.metrics()["cache_misses"] - misses))
    (cpu_params, _), (dev_params, new_compiles) = results
    assert new_compiles == 0
    assert_same([p.detach() for p in cpu_params], [p.detach() for p in dev_params], 1e-4, 1e-5)


def test_second_step_builds_nothing() -> None:
    """AdamW's first step makes its state with `zeros_like`; from the second step on, the same
    kernels see computed state and no module may be lowered for XLA again (not even one our
    executable cache counts as a hit: JAX keys its own cache on more than shapes)."""
    params = [torch.nn.Parameter(t.to("neuron")) for t in _init(SHAPES)]
    optimizer = torch.optim.AdamW(params, lr=0.01, foreach=True)
    for step in range(3):
        grads = [g.to("neuron") for g in _grads(SHAPES, step)]
        before = Counter(eager_metrics.xla_lowerings)
        for p, g in zip(params, grads):
            p.grad = g
        optimizer.step()
        built = eager_metrics.xla_lowerings - before
        assert step == 0 or not built, f"step {step + 1} lowered {dict(built)}"


# ---- clipping and gradient scaling -------------------------------------------------------


@pytest.mark.parametrize("norm_type", [2.0, float("inf")])
def test_clip_grad_norm_foreach(norm_type: float) -> None:
    results = []
    for device in ("cpu", "neuron"):
        params = [torch.nn.Parameter(t.to(device)) for t in _init(SHAPES)]
        for p, g in zip(params, _grads(SHAPES, 0)):
            p.grad = g.to(device)
        total = torch.nn.utils.clip_grad_norm_(params, max_norm=1.0, norm_type=norm_type, foreach=True)
        results.append((total, [p.grad for p in params]))
    (cpu_total, cpu_grads), (dev_total, dev_grads) = results
    assert_same(cpu_total, dev_total, 1e-5, 1e-6)
    assert_same(cpu_grads, dev_grads, 1e-5, 1e-6)


def test_clip_grad_value_foreach() -> None:
    grads = _grads(SHAPES, 0)
    cpu, dev = [g.clone() for g in grads], [g.to("neuron") for g in grads]
    for gs in (cpu, dev):
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in gs]
        for p, g in zip(params, gs):
            p.grad = g
        torch.nn.utils.clip_grad_value_(params, 0.5, foreach=True)
    assert_same(cpu, dev)


def _scaled_training(device: str, fused: bool, clip: bool, poison_step: int | None) -> tuple:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01, fused=fused)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**8, growth_interval=2)
    generator = torch.Generator().manual_seed(1)
    scales = []
    for step in range(4):
        x, y = torch.randn(8, 5, generator=generator).to(device), torch.randn(8, 3, generator=generator).to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        if step == poison_step:
            next(model.parameters()).grad[0, 0] = float("inf")
        if clip:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5, foreach=True)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        scales.append(scaler.get_scale())
    return [p.detach() for p in model.parameters()], scales


@pytest.mark.parametrize(
    ("fused", "clip", "poison_step"),
    [(False, True, None), (True, True, None), (True, False, None), (True, False, 1), (False, True, 2)],
    ids=["foreach-unscale-clip", "fused-unscale-clip", "fused-grad_scale", "fused-overflow", "foreach-overflow"],
)
def test_grad_scaler_like_cpu(fused: bool, clip: bool, poison_step: int | None) -> None:
    cpu_params, cpu_scales = _scaled_training("cpu", fused, clip, poison_step)
    dev_params, dev_scales = _scaled_training("neuron", fused, clip, poison_step)
    assert dev_scales == cpu_scales
    assert_same(cpu_params, dev_params, 1e-4, 1e-5)


# ---- the fused kernels directly: dtypes and bad input -------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adagrad", "SGD"])
def test_fused_dtypes(name: str, dtype: torch.dtype) -> None:
    if name == "SGD" and dtype == torch.bfloat16:
        # torch 2.13's CPU fused SGD skips the parameter update in its half-precision vector
        # loop; the reference is the single-tensor SGD, whose math the scalar loop follows.
        reference = {"foreach": False}
    else:
        reference = {"fused": True}
    kwargs = {"lr": 0.05, "weight_decay": 0.1}
    if name == "SGD":
        kwargs["momentum"] = 0.9
    results = []
    for device, options in (("cpu", reference), ("neuron", {"fused": True})):
        params = [torch.nn.Parameter(t.to(device, dtype)) for t in _init(SHAPES)]
        optimizer = getattr(torch.optim, name)(params, **kwargs, **options)
        for step in range(3):
            for p, g in zip(params, _grads(SHAPES, step)):
                p.grad = g.to(device, dtype)
            optimizer.step()
        results.append([p.detach() for p in params])
    assert_same(*results)


def test_fused_list_length_mismatch() -> None:
    params = [torch.zeros(3, device="neuron"), torch.zeros(2, device="neuron")]
    steps = [torch.ones((), device="neuron")] * 2
    with pytest.raises(RuntimeError, match=r"_fused_adam_.*same length"):
        torch._fused_adam_(
            params, params[:1], params, params, [], steps,
            lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.0, eps=1e-8, amsgrad=False, maximize=False,
        )  # fmt: skip


def test_foreach_list_length_mismatch() -> None:
    a = [torch.ones(2, device="neuron"), torch.ones(3, device="neuron")]
    with pytest.raises(RuntimeError, match=r"same number of|same length"):
        torch._foreach_add(a, a[:1])


# ---- the `_foreach_*` OpInfo entries ---------------------------------------------------------


def _kind(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return "list:" + ",".join(sorted({_kind(v) for v in value}))
    return "tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def _one_per_overload(opinfo: Any, rejected: list) -> Any:
    """A copy of a foreach OpInfo with lists of 3 tensors and one sample per argument signature
    (one per overload and scalar type). Samples CPU rejects go to `rejected` with their error."""
    view = copy.copy(opinfo)

    def sample_inputs(device: str, dtype: torch.dtype, **kwargs: Any) -> Any:
        seen = set()
        for sample in opinfo.sample_inputs(device, dtype, num_input_tensors=[3], **kwargs):
            key = (tuple(_kind(a) for a in sample.args), tuple(sorted((k, _kind(v)) for k, v in sample.kwargs.items())))
            if key in seen:
                continue
            seen.add(key)
            try:
                opinfo(sample.input, *sample.args, **sample.kwargs)
            except Exception as error:
                rejected.append((sample, type(error)))
                continue
            yield sample

    view.sample_inputs = sample_inputs
    return view


def _foreach_db() -> list:
    from torch.testing._internal import common_methods_invocations as db

    return [
        *db.foreach_unary_op_db,
        *db.foreach_binary_op_db,
        *db.foreach_pointwise_op_db,
        *db.foreach_reduce_op_db,
        *db.foreach_other_op_db,
    ]


@pytest.mark.parametrize("opinfo", _foreach_db(), ids=lambda o: o.name)
def test_foreach_opinfo(opinfo: Any) -> None:
    """Every sample form matches CPU. Where every functional overload of the op has a derived
    lowering (its single-tensor op is lowered), it must also run with no CPU fallback."""
    from opinfo import check_op, fallback_disabled

    rejected: list = []
    view = _one_per_overload(opinfo, rejected)
    lowered = torch_neuronx.ops.load()
    packet = getattr(torch.ops.aten, opinfo.name)
    overloads = [getattr(packet, o) for o in packet.overloads() if not o.endswith("out")]
    if all(o in lowered for o in overloads):
        with fallback_disabled():
            assert check_op(view, torch.float32) > 0
    else:
        assert check_op(view, torch.float32) > 0
    for sample, error in rejected:  # what CPU rejects, neuron rejects too
        on_device = sample.transform(lambda t: t.to("neuron") if isinstance(t, torch.Tensor) else t)
        with pytest.raises(error):
            opinfo(on_device.input, *on_device.args, **on_device.kwargs)


def test_foreach_runs_as_one_executable() -> None:
    tensors = [torch.randn(3, 4, device="neuron"), torch.randn(5, device="neuron"), torch.randn(2, 2, device="neuron")]
    torch_neuronx.reset_metrics()
    torch._foreach_mul_(tensors, [0.5, 2.0, 3.0])
    torch._foreach_add_(tensors, tensors, alpha=2)
    calls = torch_neuronx.metrics()["op_calls"]
    assert calls == {"aten._foreach_mul_.ScalarList": 1, "aten._foreach_add_.List": 1}
