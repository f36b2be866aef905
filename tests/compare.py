"""Helpers that run the same code on CPU and on neuron and compare the numbers, within the
suite's one table of tolerances per dtype."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._pytree import tree_map

# (rtol, atol) by which a result on neuron may differ from PyTorch CPU's, for every comparison in
# the suite (this file and opinfo.py); any other dtype (integers, bool) must match exactly.
TOLERANCES = {
    # ~110 ulp (eps 1.2e-7): XLA sums in another order and has its own exp/log/erf approximations.
    torch.float32: (1.3e-5, 1e-5),
    torch.complex64: (1.3e-5, 1e-5),
    # Far below float32's eps, so a float64 op that computes in float32 fails (PyTorch's default,
    # 1e-7, would pass it); still ~5e5 ulp of float64 (eps 2.2e-16) for summation order.
    torch.float64: (1e-10, 1e-10),
    torch.complex128: (1e-10, 1e-10),
    # 1-2 ulp (eps 9.8e-4 and 7.8e-3): neuron computes in float32 and rounds once, PyTorch CPU's
    # kernels may round intermediates; atol covers results that cancel to near zero.
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
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
