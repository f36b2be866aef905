"""`torchneuron bench ops`: eager per-op time on neuron next to PyTorch CPU, measured side by side.

Figures are medians of repeated timings; the machine is noisy, so compare the ratio columns.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

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


def _time(fn: Callable[[], Any], sync: Callable[[], None], repeat: int, number: int) -> float:
    fn()
    sync()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples) * 1e6


def op_table(sizes: tuple[int, ...] = (64, 1024), repeat: int = 5) -> list[dict[str, Any]]:
    """Per-op steady-state microseconds on neuron and CPU for square float32 inputs."""
    rows = []
    for n in sizes:
        number = 200 if n <= 128 else 10
        a_cpu, b_cpu = torch.randn(n, n), torch.randn(n, n)
        a_dev, b_dev = a_cpu.to("neuron"), b_cpu.to("neuron")
        for name, op in OPS.items():
            cpu = _time(partial(op, a_cpu, b_cpu), lambda: None, repeat, number)
            dev = _time(partial(op, a_dev, b_dev), torch.neuron.synchronize, repeat, number)
            rows.append({"op": name, "size": f"{n}x{n}", "neuron_us": dev, "cpu_us": cpu, "ratio": dev / cpu})
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'op':18s} {'size':>10s} {'neuron us':>10s} {'cpu us':>10s} {'neuron/cpu':>10s}"]
    for r in rows:
        lines.append(f"{r['op']:18s} {r['size']:>10s} {r['neuron_us']:10.1f} {r['cpu_us']:10.1f} {r['ratio']:10.2f}")
    return "\n".join(lines)


def main(sizes: tuple[int, ...] = (64, 1024)) -> None:
    print("Eager per-op time, float32, steady state (median of 5 runs), neuron vs PyTorch CPU")
    print(format_table(op_table(sizes)))
