"""The c10d backend `neuron`: `init_process_group(backend="neuron")`, DDP, FSDP2, DTensor, TP.

Transport is Gloo over the host: the backend registered as `neuron` is a `ProcessGroupGloo` serving
the devices `cpu` and `neuron`, and `kernels.py` installs PrivateUse1 kernels for the `c10d::*` ops
that stage neuron tensors on the host and run the collective there: through Gloo, or, between the
ranks of one host, through the group's shared memory (`shared_memory.py`) for the collectives it
moves. Each process
owns its `neuron:0` (DESIGN decision 7); pin it with `LOCAL_RANK` or `NEURON_RT_VISIBLE_CORES`.

`register()` runs at `import torch` and only records the backend name; the kernels are installed
when the first `neuron` process group is created.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

BACKEND = "neuron"
_registered = False


def register() -> None:
    """Idempotent: make `neuron` a c10d backend name and the default backend of `neuron` tensors."""
    global _registered
    if _registered:
        return
    import torch.distributed as dist

    if not dist.is_available():
        return
    _registered = True
    dist.Backend.register_backend(BACKEND, _create, devices=["cpu", "neuron"])


def _create(store: Any, rank: int, world_size: int, timeout: timedelta) -> Any:
    """Backend creator: Gloo on the host for both devices, shared memory between the ranks of one
    host, plus the staging kernels."""
    import torch.distributed as dist

    from . import kernels, shared_memory

    kernels.install()
    gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    kernels.attach(gloo, shared_memory.connect(store, rank, world_size, timeout))
    return gloo
