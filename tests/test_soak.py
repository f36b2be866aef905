"""A fast slice of `torchneuron bench soak` (torch_neuronx/bench/soak.py): a smaller Llama trained
in-process for a few dozen AdamW steps, eager and compiled. After warm-up every step must leave
exactly the same bytes allocated and build no executable, and the losses must follow CPU's."""

from __future__ import annotations

import gc

import pytest
import torch
from compare import TOLERANCES

import torch_neuronx
from torch_neuronx.bench.models import LLAMA
from torch_neuronx.bench.torch_compile import make_train_step

SMALL = dict(LLAMA, hidden_size=32, intermediate_size=64, num_hidden_layers=1, vocab_size=64)
BATCH, SEQ = 2, 16
STEPS = 25
WARMUP = 3  # the first step builds the executables, the first `opt.step` the optimizer state


def _losses(device: str, backend: str | None) -> tuple[list[float], list[int], list[int], list[int]]:
    """Per step: the loss, then `memory_allocated`, live eager executables and graph compiles."""
    step = make_train_step(device, backend, batch=BATCH, seq=SEQ, config=SMALL)
    gc.collect()  # what earlier tests left in cycles must not be freed in the middle of the run
    losses, allocated, live, compiles = [], [], [], []
    for _ in range(STEPS):
        losses.append(step())
        if device == "neuron":
            m = torch_neuronx.metrics()
            allocated.append(torch.neuron.memory_allocated())
            live.append(m["live_executables"])
            compiles.append(m["compile"]["compiles"])
    return losses, allocated, live, compiles


@pytest.mark.parametrize("backend", [None, "neuron"], ids=["eager", "compiled"])
def test_steps_leave_nothing_behind_and_follow_cpu(backend: str | None) -> None:
    losses, allocated, live, compiles = _losses("neuron", backend)
    after = slice(WARMUP - 1, None)
    assert set(allocated[after]) == {allocated[WARMUP - 1]}, allocated
    assert set(live[after]) == {live[WARMUP - 1]}, live
    assert set(compiles[after]) == {compiles[WARMUP - 1]}, compiles
    cpu_losses = _losses("cpu", None)[0]
    assert cpu_losses[-1] < cpu_losses[0]  # it learns at all
    rtol, atol = TOLERANCES[torch.float32]
    torch.testing.assert_close(losses, cpu_losses, rtol=rtol, atol=atol)
