"""PJRT platform choice and lazy JAX initialisation.

`TORCH_NEURONX_PLATFORM` picks the JAX backend (`cpu` by default, `cuda` where jax[cuda] is
installed). JAX is imported and configured on first device use, never at `import torch`.

On the CPU platform the host keeps cores of its own (`TORCH_NEURONX_HOST_CORES`, default 1):
XLA's worker threads are started off them, as a GPU's work runs off the CPU thread that
enqueues it. Otherwise XLA's threads and the Python thread dispatching the next ops contend
for the same cores.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

from .debug import request_xla_dumps
from .host_heap import retain_freed_blocks


def platform_name() -> str:
    return os.environ.get("TORCH_NEURONX_PLATFORM", "cpu").lower()


def cache_dir() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "torchneuron" / "xla"
    return Path(os.environ.get("TORCH_NEURONX_CACHE_DIR", default))


@functools.cache
def jax() -> ModuleType:
    """Import and configure JAX once: x64 on, the chosen platform, the persistent cache."""
    request_xla_dumps()  # XLA reads its flags when its backend starts, after this
    import jax as _jax

    _jax.config.update("jax_enable_x64", True)
    _jax.config.update("jax_platforms", platform_name())
    _jax.config.update("jax_compilation_cache_dir", str(cache_dir()))
    _jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    _jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    if platform_name() == "cpu":
        _jax.config.update("jax_cpu_enable_async_dispatch", async_dispatch())
        retain_freed_blocks()
        with _off_host_cores():
            _jax.devices()  # starts the CPU client, and so its thread pools
    return _jax


def async_dispatch() -> bool:
    """Whether an executable's call returns before its results are computed. Always so on an
    accelerator; on the CPU platform `TORCH_NEURONX_ASYNC_DISPATCH` decides (default 1)."""
    if platform_name() != "cpu":
        return True
    return os.environ.get("TORCH_NEURONX_ASYNC_DISPATCH", "1") not in ("0", "false", "False", "")


def host_cores() -> int:
    """Cores kept free of XLA:CPU's threads for the host (`TORCH_NEURONX_HOST_CORES`)."""
    value = os.environ.get("TORCH_NEURONX_HOST_CORES", "1")
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"TORCH_NEURONX_HOST_CORES must be a whole number of cores, got {value!r}") from None


@contextlib.contextmanager
def _off_host_cores() -> Iterator[None]:
    """Run the block with this thread's CPU affinity minus the host's cores (the last allowed
    ones), then restore it. XLA:CPU sizes its thread pools from the creating thread's
    affinity and its threads inherit it, so they never run on the host's cores; the Python
    threads keep every core. No-op where that would leave XLA no core."""
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    keep = host_cores()
    if not keep or len(allowed) <= keep:
        yield
        return
    os.sched_setaffinity(0, allowed[:-keep])
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def local_index() -> int:
    """Which of the platform's devices this process owns (DESIGN decision 7)."""
    cores = os.environ.get("NEURON_RT_VISIBLE_CORES", "")
    if cores and "," not in cores and "-" not in cores:
        return int(cores)
    return int(os.environ.get("LOCAL_RANK", "0"))


@functools.cache
def device() -> Any:
    """The PJRT device this process runs on."""
    devices = jax().devices()
    return devices[local_index() % len(devices)]
