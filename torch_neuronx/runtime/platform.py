"""PJRT platform choice and lazy JAX initialisation.

`TORCH_NEURONX_PLATFORM` picks the JAX backend (`cpu` by default, `cuda` where jax[cuda] is
installed). JAX is imported and configured on first device use, never at `import torch`.

On the CPU platform XLA's threads are kept off the host's own cores except while large work
runs (`cores.py`).
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

from . import cache, cores
from .debug import request_xla_dumps
from .host_heap import retain_freed_blocks

_xla_threads: cores.XlaThreads | None = None  # XLA:CPU's threads, once its client started, if pinned


def platform_name() -> str:
    return os.environ.get("TORCH_NEURONX_PLATFORM", "cpu").lower()


@functools.cache
def jax() -> ModuleType:
    """Import and configure JAX once: x64 on, the chosen platform, the persistent cache."""
    request_xla_dumps()  # XLA reads its flags when its backend starts, after this
    import jax as _jax

    _jax.config.update("jax_enable_x64", True)
    _jax.config.update("jax_platforms", platform_name())
    _jax.config.update("jax_compilation_cache_dir", str(cache.directory()))
    _jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    _jax.monitoring.register_event_listener(cache.on_jax_event)  # its writes count towards the size limit
    if platform_name() == "cpu":
        _jax.config.update("jax_cpu_enable_async_dispatch", async_dispatch())
        retain_freed_blocks()
        global _xla_threads
        _xla_threads = cores.start(_jax.devices)  # starts the CPU client, and so its thread pools
    return _jax


def async_dispatch() -> bool:
    """Whether an executable's call returns before its results are computed. Always so on an
    accelerator; on the CPU platform `TORCH_NEURONX_ASYNC_DISPATCH` decides (default 1)."""
    if platform_name() != "cpu":
        return True
    return os.environ.get("TORCH_NEURONX_ASYNC_DISPATCH", "1") not in ("0", "false", "False", "")


def spread_until_ready(results: Any) -> None:
    """A large executable was just enqueued: XLA:CPU's threads may use every core of the host
    until its `results` are ready (`cores.py`)."""
    if _xla_threads is not None:
        _xla_threads.spread_until_ready(results, jax().block_until_ready)


def local_index() -> int:
    """Which of the platform's devices this process owns (DESIGN decision 7)."""
    visible = os.environ.get("NEURON_RT_VISIBLE_CORES", "")
    if visible and "," not in visible and "-" not in visible:
        return int(visible)
    return int(os.environ.get("LOCAL_RANK", "0"))


@functools.cache
def device() -> Any:
    """The PJRT device this process runs on."""
    devices = jax().devices()
    return devices[local_index() % len(devices)]
