"""Counters for the executable cache and the coverage ladder (DESIGN 4-5)."""

from __future__ import annotations

from collections import Counter
from typing import Any

hits: Counter = Counter()
misses: Counter = Counter()
compile_seconds: Counter = Counter()
fallbacks: Counter = Counter()
decompositions: Counter = Counter()


def miss(op: str, seconds: float) -> None:
    misses[op] += 1
    compile_seconds[op] += seconds


def snapshot() -> dict[str, Any]:
    calls = hits + misses
    return {
        "cache_hits": sum(hits.values()),
        "cache_misses": sum(misses.values()),
        "compile_seconds": round(sum(compile_seconds.values()), 4),
        "op_calls": dict(calls.most_common()),
        "fallbacks": dict(fallbacks),
        "decompositions": dict(decompositions),
    }


def reset() -> None:
    for counter in (hits, misses, compile_seconds, fallbacks, decompositions):
        counter.clear()
