"""Counters for the executable cache and the coverage ladder (DESIGN 4-5), and of every module
JAX lowers for XLA in the process: each is then compiled or loaded from the persistent cache, so
more lowerings than our caches' misses means something is being built behind their backs."""

from __future__ import annotations

from collections import Counter
from typing import Any

from ..runtime import native

hits: Counter = Counter()
misses: Counter = Counter()
loaded: Counter = Counter()  # misses served by the executable store
compile_seconds: Counter = Counter()
fallbacks: Counter = Counter()
decompositions: Counter = Counter()
xla_lowerings: Counter = Counter()  # by module name
_LOWERING = "/jax/core/compile/jaxpr_to_mlir_module_duration"


def miss(op: str, seconds: float, loaded_from_store: bool = False) -> None:
    misses[op] += 1
    loaded[op] += loaded_from_store
    compile_seconds[op] += seconds


def snapshot() -> dict[str, Any]:
    """The counters now; hits include those the native module served."""
    served = hits + Counter(native.module().hit_counts() if native.module() else {})
    calls = served + misses
    return {
        "cache_hits": sum(served.values()),
        "cache_misses": sum(misses.values()),
        "executables_loaded": sum(loaded.values()),
        "compile_seconds": round(sum(compile_seconds.values()), 4),
        "op_calls": dict(calls.most_common()),
        "fallbacks": dict(fallbacks),
        "decompositions": dict(decompositions),
        "xla_lowerings": sum(xla_lowerings.values()),
    }


def reset() -> None:
    for counter in (hits, misses, loaded, compile_seconds, fallbacks, decompositions, xla_lowerings):
        counter.clear()
    if native.module():
        native.module().reset_hit_counts()


def count_lowering(event: str, seconds: float, **metadata: Any) -> None:
    """A `jax.monitoring` listener: counts each module lowered for XLA."""
    if event == _LOWERING:
        xla_lowerings[metadata.get("fun_name", "?")] += 1
