"""Storage-level methods for `neuron` (`UntypedStorage.neuron()`, `.is_neuron`, `clone`).

PyTorch's generic versions allocate with `torch.UntypedStorage(n, device=...)`, which needs a
C++ allocator a Python backend cannot register; ours allocate through `torch.empty` instead.
Used by `copy.deepcopy`, `torch.load` onto neuron, `storage.to("neuron")`, `storage.clone()` and
`storage.resize_()`.
"""

from __future__ import annotations

from typing import Any

import torch

from .runtime import deferred

_StorageBase = torch.storage._StorageBase


def _bytes_view(storage: Any) -> torch.Tensor:
    """A uint8 tensor over all of `storage`'s bytes (no copy)."""
    nbytes = storage.nbytes()
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (nbytes,), (1,))


def new_device_storage(source: Any) -> torch.UntypedStorage:
    """A fresh neuron storage holding a copy of `source`'s bytes (any device)."""
    out = torch.empty(source.nbytes(), dtype=torch.uint8, device="neuron")
    out.copy_(_bytes_view(source))
    return out.untyped_storage()


def _to_neuron(self: Any, device: Any = None, non_blocking: bool = False) -> Any:
    if device not in (None, 0) and torch.device(device).index not in (None, 0):
        raise ValueError(f"neuron: device {device} does not exist; each process owns neuron:0")
    if self.device.type == "neuron":
        return self
    return new_device_storage(self)


def register() -> None:
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=False, for_module=False, for_packed_sequence=False, for_storage=True
    )
    _StorageBase.neuron = _to_neuron
    original_clone = _StorageBase.clone

    def clone(self: Any) -> Any:
        """Return a copy of this storage."""
        if self.device.type == "neuron":
            return new_device_storage(self)
        return original_clone(self)

    _StorageBase.clone = clone
    original_to = _StorageBase.to

    def to(self: Any, *, device: Any, non_blocking: bool = False) -> Any:
        if torch.device(device).type == "neuron":
            return _to_neuron(self, torch.device(device).index, non_blocking)
        return original_to(self, device=device, non_blocking=non_blocking)

    _StorageBase.to = to
    original_resize = torch.UntypedStorage.resize_

    def resize_(self: torch.UntypedStorage, size: int) -> torch.UntypedStorage:
        """PyTorch would call the C++ hook `resizePrivateUse1Bytes`, which a Python backend cannot
        provide (FSDP2 frees and re-allocates unsharded parameters this way)."""
        if self.device.type != "neuron":
            return original_resize(self, size)
        from .eager.storage_kernels import resize_storage

        deferred.settle([self.data_ptr()])  # a collective may still read or write it
        resize_storage(self, size)
        return self

    torch.UntypedStorage.resize_ = resize_
