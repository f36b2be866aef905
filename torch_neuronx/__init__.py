"""TorchNeuron: the accelerator as the native PyTorch device `neuron`.

`import torch` loads this package through the `torch.backends` entry point; importing it
directly does the same. Ops run eagerly through JAX/XLA lowerings (see ARCHITECTURE.md).
"""

from __future__ import annotations

from typing import Any

# torch first: if this import triggers torch's backend autoload, the entry point
# (torch_neuronx._register:register) must find this package importable, not half-built.
import torch  # noqa: F401

from ._register import register
from .runtime.debug import configure_logging

__version__ = "0.1.0"


def metrics() -> dict[str, Any]:
    """Executable-cache and coverage counters: hits, misses (executables built: compiled, or
    loaded from the persistent store), compile seconds, executables held now and how many of
    them have dropped off JAX's C++ fast path, per-op calls, CPU fallbacks and decompositions;
    torch.compile's under "compile"."""
    from . import compile as compiled
    from .eager import kernel
    from .eager import metrics as eager_metrics

    return {
        **eager_metrics.snapshot(),
        "live_executables": kernel.live_executables(),
        "off_jax_fast_path": kernel.off_fast_path(),
        "compile": compiled.metrics(),
    }


def reset_metrics() -> None:
    from . import compile as compiled
    from .eager import metrics as eager_metrics

    eager_metrics.reset()
    compiled.reset_metrics()


configure_logging()
register()


def __getattr__(name: str) -> Any:
    """`torch_neuronx.custom_op` and `pallas_interpret` (`library.py`), imported on first use:
    they need JAX, which `import torch` must not load."""
    if name in ("custom_op", "pallas_interpret"):
        from . import library

        return getattr(library, name)
    raise AttributeError(f"module 'torch_neuronx' has no attribute {name!r}")
