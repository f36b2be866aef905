"""Accelerate on neuron: device choice, bf16 autocast, backward, gradient accumulation,
save_state/load_state (with RNG states), set_seed, and its dynamo plugin's default backend."""

from __future__ import annotations

import pytest
import torch
from compare import assert_same

accelerate = pytest.importorskip("accelerate")
from accelerate import Accelerator  # noqa: E402
from accelerate.state import AcceleratorState  # noqa: E402
from accelerate.utils import set_seed  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_state():
    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))


BATCHES = [(torch.randn(4, 8, generator=torch.Generator().manual_seed(i)), torch.randn(4, 4)) for i in range(4)]


def test_accelerator_picks_neuron():
    accelerator = Accelerator()
    assert accelerator.device.type == "neuron"
    assert accelerator.distributed_type == accelerate.DistributedType.NO
    model = accelerator.prepare(_model())
    assert all(p.device.type == "neuron" for p in model.parameters())


def test_mixed_precision_bf16_autocasts():
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare(_model())
    x = BATCHES[0][0]
    seen = []
    model[0].register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    out = model(x.to(accelerator.device))
    assert seen == [torch.bfloat16]  # the prepared forward runs under torch.autocast("neuron")
    assert out.dtype == torch.float32  # and Accelerate converts its outputs back to float32
    with accelerator.autocast():
        inner = model[0](x.to(accelerator.device))
        assert inner.dtype == torch.bfloat16
        assert torch.softmax(inner, -1).dtype == torch.float32  # softmax is a float32 op under autocast
    cpu = _model()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = cpu(x).float()
    assert_same(ref, out, rtol=1.6e-2, atol=1e-2)


def _reference_training(steps: int, accumulation: int) -> list[torch.Tensor]:
    """The same loop on CPU by hand: loss / accumulation, step every `accumulation` micro-batches."""
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for i, (x, y) in enumerate(BATCHES[:steps]):
        (torch.nn.functional.mse_loss(model(x), y) / accumulation).backward()
        if (i + 1) % accumulation == 0:
            optimizer.step()
            optimizer.zero_grad()
    return [p.detach() for p in model.parameters()]


def test_backward_and_gradient_accumulation():
    accelerator = Accelerator(gradient_accumulation_steps=2)
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    start = [p.detach().cpu() for p in model.parameters()]
    for i, (x, y) in enumerate(BATCHES):
        with accelerator.accumulate(model):
            loss = torch.nn.functional.mse_loss(model(x.to(accelerator.device)), y.to(accelerator.device))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
        if i == 0:  # first micro-batch: gradients kept, no update yet
            assert not accelerator.sync_gradients
            assert all(p.grad is not None and p.grad.device.type == "neuron" for p in model.parameters())
            assert all(torch.equal(a, p.detach().cpu()) for a, p in zip(start, model.parameters()))
    for ref, p in zip(_reference_training(4, 2), model.parameters()):
        assert_same(ref, p.detach(), rtol=1e-4, atol=1e-5)


def test_dynamo_backend_inductor_compiles_with_neuron():
    import torch_neuronx

    torch_neuronx.compile.reset_metrics()
    accelerator = Accelerator(dynamo_backend="inductor")
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x, y in BATCHES[:2]:
        accelerator.backward(torch.nn.functional.mse_loss(model(x.to(accelerator.device)), y.to(accelerator.device)))
        optimizer.step()
        optimizer.zero_grad()
    assert torch_neuronx.compile.metrics()["graphs"] >= 1
    for ref, p in zip(_reference_training(2, 1), model.parameters()):
        assert_same(ref, p.detach(), rtol=1e-4, atol=1e-5)


def test_save_state_and_load_state(tmp_path):
    accelerator = Accelerator()
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    x, y = BATCHES[0]
    accelerator.backward(torch.nn.functional.mse_loss(model(x.to("neuron")), y.to("neuron")))
    optimizer.step()
    saved = [p.detach().cpu().clone() for p in model.parameters()]
    torch.neuron.manual_seed(1234)
    accelerator.save_state(tmp_path)
    draws = torch.rand(5, device="neuron").cpu(), torch.rand(5)
    neuron_state = torch.neuron.get_rng_state()

    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    optimizer.step()
    torch.neuron.manual_seed(99)
    torch.manual_seed(99)

    accelerator.load_state(tmp_path)
    for a, p in zip(saved, model.parameters()):
        assert torch.equal(a, p.detach().cpu())
    assert torch.equal(torch.rand(5, device="neuron").cpu(), draws[0])  # device RNG restored
    assert torch.equal(torch.rand(5), draws[1])  # host RNG restored
    assert torch.equal(torch.neuron.get_rng_state(), neuron_state)


def test_set_seed_seeds_the_device():
    set_seed(123)
    assert torch.neuron.initial_seed() == 123
    state = torch.neuron.get_rng_state()
    first = torch.rand(6, device="neuron").cpu()
    torch.neuron.manual_seed(7)
    set_seed(123)
    assert torch.equal(torch.neuron.get_rng_state(), state)
    assert torch.equal(torch.rand(6, device="neuron").cpu(), first)
