"""`torchneuron bench ops`: eager per-op time on neuron next to PyTorch CPU, measured side by side.

Each op's neuron and CPU timings alternate over rounds and the figures are medians, so both meet
the same drift of a noisy host; compare the ratio columns. The first row is the floor a
neuron op stands on: a cached bare `jax.jit` of the same add on the same device, timed alike.
The "add (custom op)" row is the same add as a `torch_neuronx.custom_op` with a JAX body, next
to PyTorch CPU's built-in add: a custom op should cost what a built-in op of its arity costs.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from .. import library

OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "add_ (in-place)": lambda a, b: a.add_(b),
    "exp": lambda a, b: a.exp(),
    "tanh": lambda a, b: a.tanh(),
    "relu": lambda a, b: torch.relu(a),
    "gelu": lambda a, b: torch.nn.functional.gelu(a),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "sum": lambda a, b: a.sum(),
    "sum(dim)": lambda a, b: a.sum(-1),
    "mean(dim)": lambda a, b: a.mean(-1),
    "amax(dim)": lambda a, b: a.amax(-1),
    "softmax": lambda a, b: torch.softmax(a, -1),
    "layer_norm": lambda a, b: torch.nn.functional.layer_norm(a, a.shape[-1:]),
    "matmul": lambda a, b: a @ b,
    "transpose+add": lambda a, b: a.t() + b,
    "slice write": lambda a, b: a[:, ::2].zero_(),
    "cat": lambda a, b: torch.cat([a, b]),
}


def _sample(fn: Callable[[], Any], sync: Callable[[], None], number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        fn()
    sync()
    return (time.perf_counter() - start) / number * 1e6


def _paired(dev: Callable[[], Any], cpu: Callable[[], Any], sync: Callable[[], None], rounds: int, number: int):
    """Median microseconds of `dev` and of `cpu`, their timings alternating over `rounds`."""
    dev(), cpu(), sync()
    samples: tuple[list, list] = ([], [])
    for _ in range(rounds):
        samples[0].append(_sample(dev, sync, number))
        samples[1].append(_sample(cpu, lambda: None, number))
    return statistics.median(samples[0]), statistics.median(samples[1])


def _bare_jax_add(n: int) -> tuple[Callable[[], Any], Callable[[], None]]:
    """A cached `jax.jit` add of two n x n float32 arrays on the neuron device's PJRT device, and
    the wait for its last result."""
    import jax
    import jax.numpy as jnp

    from ..runtime.platform import device

    x, y = (jax.device_put(jnp.ones((n, n), jnp.float32), device()) for _ in range(2))
    add = jax.jit(jnp.add)
    last: list = [None]

    def run() -> None:
        last[0] = add(x, y)

    return run, lambda: last[0].block_until_ready()


@functools.cache
def _custom_add() -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b

    return library.custom_op("torchneuron_bench::add", add, mutates_args=())


def op_table(sizes: tuple[int, ...] = (64, 1024), rounds: int = 15) -> list[dict[str, Any]]:
    """Per-op steady-state microseconds on neuron and CPU for square float32 inputs."""
    rows = []
    for n in sizes:
        number = 200 if n <= 128 else 10
        a_cpu, b_cpu = torch.randn(n, n), torch.randn(n, n)
        a_dev, b_dev = a_cpu.to("neuron"), b_cpu.to("neuron")
        bare, bare_sync = _bare_jax_add(n)
        pairs = {"jax.jit add (bare)": (bare, partial(OPS["add"], a_cpu, b_cpu), bare_sync)}
        for name, op in OPS.items():
            pairs[name] = (partial(op, a_dev, b_dev), partial(op, a_cpu, b_cpu), torch.neuron.synchronize)
            if name == "add":
                custom = partial(_custom_add(), a_dev, b_dev)
                pairs["add (custom op)"] = (custom, partial(op, a_cpu, b_cpu), torch.neuron.synchronize)
        for name, (dev_op, cpu_op, sync) in pairs.items():
            dev, cpu = _paired(dev_op, cpu_op, sync, rounds, number)
            rows.append({"op": name, "size": f"{n}x{n}", "neuron_us": dev, "cpu_us": cpu, "ratio": dev / cpu})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'op':18s} {'size':>10s} {'neuron us':>10s} {'cpu us':>10s} {'neuron/cpu':>10s}"]
    for r in rows:
        lines.append(f"{r['op']:18s} {r['size']:>10s} {r['neuron_us']:10.1f} {r['cpu_us']:10.1f} {r['ratio']:10.2f}")
    return "\n".join(lines)


def main(sizes: tuple[int, ...] = (64, 1024)) -> None:
    from ..runtime import native, platform

    dispatch = "asynchronous" if platform.async_dispatch() else "synchronous"
    print("Eager per-op time, float32, steady state (median of 15 alternated rounds), neuron vs PyTorch CPU")
    print(f"eager path: {native.status()}; {dispatch} dispatch")
    print(format_table(op_table(sizes)))
