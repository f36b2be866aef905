"""Helpers that run the same code on CPU and on neuron and compare the numbers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

TOLERANCES = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-10, 1e-10),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.complex64: (1e-5, 1e-5),
}


def to(device: str, tree: Any) -> Any:
    return tree_map(lambda x: x.detach().clone().to(device) if isinstance(x, torch.Tensor) else x, tree)


def assert_same(cpu: Any, neuron: Any, rtol: float | None = None, atol: float | None = None) -> None:
    """Every tensor in `neuron` equals its CPU twin (dtype, shape, values within tolerance)."""
    if isinstance(cpu, torch.Tensor):
        assert isinstance(neuron, torch.Tensor), type(neuron)
        assert neuron.device.type == "neuron", neuron.device
        assert neuron.dtype == cpu.dtype, (neuron.dtype, cpu.dtype)
        assert neuron.shape == cpu.shape, (neuron.shape, cpu.shape)
        default_rtol, default_atol = TOLERANCES.get(cpu.dtype, (0, 0))
        torch.testing.assert_close(
            neuron.cpu(),
            cpu,
            rtol=rtol if rtol is not None else default_rtol,
            atol=atol if atol is not None else default_atol,
            equal_nan=True,
        )
    elif isinstance(cpu, (list, tuple)):
        assert len(cpu) == len(neuron)
        for c, n in zip(cpu, neuron):
            assert_same(c, n, rtol, atol)
    else:
        assert cpu == neuron, (cpu, neuron)


def check(fn: Callable[..., Any], *inputs: Any, rtol: float | None = None, atol: float | None = None) -> Any:
    """Run `fn` on CPU copies and neuron copies of `inputs`; compare outputs and (mutated) inputs."""
    cpu_in, dev_in = to("cpu", inputs), to("neuron", inputs)
    cpu_out, dev_out = fn(*cpu_in), fn(*dev_in)
    assert_same(cpu_out, dev_out, rtol, atol)
    assert_same(list(cpu_in), list(dev_in), rtol, atol)
    return dev_out
