"""`torch.neuron`: the device module PyTorch, Accelerate and Transformers call into.

One device per process (DESIGN 7): index 0 is this process's NeuronCore.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NamedTuple

import torch

from .runtime import platform
from .runtime.memory import memory
from .runtime.rng import RNG
from .runtime.streams import Event, Stream, current_stream, default_stream, set_stream, stream, synchronize

__all__ = [
    "Event",
    "Stream",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "empty_cache",
    "get_amp_supported_dtype",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_peak_memory_stats",
    "seed",
    "seed_all",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "set_stream",
    "stream",
    "synchronize",
]


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> int:
    return 0


def _index(device: Any) -> int:
    if device is None:
        return 0
    index = device if isinstance(device, int) else torch.device(device).index or 0
    if index != 0:
        raise ValueError(
            f"neuron: device index {index} does not exist; each process owns one NeuronCore as neuron:0 "
            "(use torchrun with one process per core)"
        )
    return index


def set_device(device: Any) -> None:
    _index(device)


@contextlib.contextmanager
def device(device: Any) -> Iterator[None]:
    _index(device)
    yield


def is_initialized() -> bool:
    return platform.jax.cache_info().currsize > 0


def _lazy_init() -> None:
    platform.device()


def _is_in_bad_fork() -> bool:
    return False


def manual_seed(seed: int) -> None:
    RNG.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    RNG.manual_seed(seed)


def seed() -> None:
    RNG.fresh_seed()


def seed_all() -> None:
    RNG.fresh_seed()


def initial_seed() -> int:
    return RNG.seed


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    return RNG.get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    RNG.set_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    return [RNG.get_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for state in new_states:
        RNG.set_state(state)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.bfloat16, torch.float16, torch.float32]


class DeviceProperties(NamedTuple):
    name: str
    total_memory: int
    platform: str
    type: str = "neuron"
    index: int = 0


def get_device_name(device: Any = None) -> str:
    return get_device_properties(device).name


def get_device_properties(device: Any = None) -> DeviceProperties:
    _index(device)
    name = f"NeuronCore (PJRT {platform.platform_name()})"
    return DeviceProperties(name, memory().capacity, platform.platform_name())


def memory_allocated(device: Any = None) -> int:
    return memory().stats.allocated


def max_memory_allocated(device: Any = None) -> int:
    return memory().stats.peak


def memory_reserved(device: Any = None) -> int:
    return memory().stats.allocated


def max_memory_reserved(device: Any = None) -> int:
    return memory().stats.peak


def reset_peak_memory_stats(device: Any = None) -> None:
    memory().reset_peak()


def reset_max_memory_allocated(device: Any = None) -> None:
    memory().reset_peak()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    return memory().capacity - memory().stats.allocated, memory().capacity


def memory_stats(device: Any = None) -> dict[str, int]:
    stats = memory().stats
    return {
        "allocated_bytes.all.current": stats.allocated,
        "allocated_bytes.all.peak": stats.peak,
        "reserved_bytes.all.current": stats.allocated,
        "reserved_bytes.all.peak": stats.peak,
        "active_bytes.all.current": stats.allocated,
        "num_alloc_retries": 0,
        "num_ooms": stats.num_ooms,
        "allocation.all.allocated": stats.num_alloc,
        "allocation.all.freed": stats.num_free,
        "allocation.all.current": stats.num_alloc - stats.num_free,
    }


def empty_cache() -> None:
    """Return freed device memory to the system. Live tensors' buffers are never cached, but
    on the CPU platform device memory is the host heap, which keeps freed blocks for reuse;
    dead tensors' buffers still being computed are waited for first."""
    synchronize()
    if platform.platform_name() == "cpu":
        from .runtime.host_heap import release_freed_blocks

        release_freed_blocks()
