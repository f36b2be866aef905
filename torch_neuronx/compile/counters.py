"""Counters of the `neuron` Dynamo backend, readable from Python and merged into
`torch_neuronx.metrics()` under "compile". Imports nothing heavy."""

from __future__ import annotations

from collections import Counter
from typing import Any

_counts: Counter = Counter()
_seconds = [0.0]
_recompiles: list[dict[str, str]] = []
eager_nodes: Counter = Counter()  # op -> nodes that run eagerly between compiled regions


def graph() -> None:
    """Dynamo handed the backend a graph."""
    _counts["graphs"] += 1


def compiled(seconds: float) -> None:
    """An executable was traced and compiled (a miss of the in-memory cache)."""
    _counts["compiles"] += 1
    _seconds[0] += seconds


def hit() -> None:
    _counts["cache_hits"] += 1


def eager_calls(count: int) -> None:
    _counts["eager_node_calls"] += count


def recompile(where: str, reason: str) -> None:
    _recompiles.append({"where": where, "reason": reason})


def snapshot() -> dict[str, Any]:
    return {
        "graphs": _counts["graphs"],
        "compiles": _counts["compiles"],
        "cache_hits": _counts["cache_hits"],
        "compile_seconds": round(_seconds[0], 4),
        "recompiles": len(_recompiles),
        "recompile_reasons": [dict(r) for r in _recompiles],
        "eager_nodes": dict(eager_nodes),
        "eager_node_calls": _counts["eager_node_calls"],
    }


def reset() -> None:
    _counts.clear()
    _seconds[0] = 0.0
    _recompiles.clear()
    eager_nodes.clear()
