"""`torch.compile(backend="neuron")`: each Dynamo graph goes through AOTAutograd and runs as
one cached jax.jit executable built from the same lowerings eager uses.

Importing this package is cheap (no JAX, no Dynamo); the backend loads them on first use.
Options: `options={"fallback_execution": bool}` (default: on unless
TORCH_NEURONX_DISABLE_FALLBACK=1) runs nodes without a lowering eagerly between compiled
regions instead of raising. `metrics()` has compiles, cache hits, recompiles with reasons.
"""

from __future__ import annotations

from typing import Any

from . import counters


def neuron_backend(gm: Any, example_inputs: list, **kwargs: Any) -> Any:
    """The TorchDynamo backend registered as "neuron"."""
    from .dynamo import compile_graph

    return compile_graph(gm, example_inputs, **kwargs)


def metrics() -> dict[str, Any]:
    """Backend counters: graphs, compiles, cache hits, compile seconds, recompiles (with the
    reason: which input's shape/dtype changed), nodes run eagerly."""
    return counters.snapshot()


def reset_metrics() -> None:
    counters.reset()
