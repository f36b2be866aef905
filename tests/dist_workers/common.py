"""Shared by the multi-process workers: process-group setup, a check runner that records results
per rank as JSON, and comparison helpers. Launched like torchrun (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT in the environment); results go to $DIST_RESULTS/rank<r>.json."""

from __future__ import annotations

import json
import os
import time
import traceback
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

warnings.filterwarnings("ignore", message="neuron: .* has no device lowering")

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))


def init(backend: str | None = "neuron", timeout_s: float = 90) -> None:
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


class Checks:
    """Run named checks, keep going after a failure, write {name: {ok, error, seconds}}."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}

    def __call__(self, name: str, fn: Callable[[], Any]) -> None:
        start = time.perf_counter()
        try:
            fn()
            entry: dict[str, Any] = {"ok": True}
        except Exception:
            entry = {"ok": False, "error": traceback.format_exc()}
        entry["seconds"] = round(time.perf_counter() - start, 2)
        self.results[name] = entry
        self.save()

    def save(self) -> None:
        out = Path(os.environ["DIST_RESULTS"]) / f"rank{RANK}.json"
        out.write_text(json.dumps(self.results, indent=1))


def rand(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    """Deterministic per (seed, rank) CPU data of any dtype, small integers for exact sums."""
    g = torch.Generator().manual_seed(1000 * seed + RANK)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(1, 5, shape, generator=g).to(dtype)


def neuron(tree: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda t: t.clone().to("neuron") if isinstance(t, torch.Tensor) else t, tree)


def clone(tree: Any) -> Any:
    return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, tree)


def assert_equal(
    expected: Any, actual: Any, rtol: float = 0.0, atol: float = 0.0, what: str = "", ulps: int = 0
) -> None:
    """Same structure; tensors equal in dtype, shape and value (exact unless tolerances given;
    `ulps`: floating-point values may differ by that many roundings at 4x the largest value)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), (what, type(actual))
        assert actual.device.type == "neuron", (what, actual.device)
        if ulps and expected.is_floating_point() and expected.numel():
            atol = max(atol, ulps * torch.finfo(expected.dtype).eps * 4 * expected.abs().max().item())
        torch.testing.assert_close(actual.cpu(), expected, rtol=rtol, atol=atol, msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert len(expected) == len(actual), (what, len(expected), len(actual))
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert_equal(e, a, rtol, atol, f"{what}[{i}]", ulps)
    else:
        assert expected == actual, (what, expected, actual)
