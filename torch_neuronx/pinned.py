"""Pinned host memory for `neuron` (`tensor.pin_memory()`, `DataLoader(pin_memory=True)`).

PyTorch's `_pin_memory`/`is_pinned` are composite kernels that ask the accelerator's C++ hooks
for a pinned-memory allocator, which a Python backend cannot provide, so they raise for
`neuron`. PJRT copies from any host memory, so a pinned tensor here is a private host copy that
`is_pinned` recognises. These kernels take the CPU slot of the two ops (this process has no
other accelerator to pin for).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_pinned: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_libraries: list[torch.library.Library] = []


def _pin_memory(self: torch.Tensor, device: Any = None) -> torch.Tensor:
    out = self.clone()
    storage = out.untyped_storage()
    _pinned[storage.data_ptr()] = storage
    return out


def _is_pinned(self: torch.Tensor, device: Any = None) -> bool:
    return _pinned.get(self.untyped_storage().data_ptr()) is not None


def register() -> None:
    if torch.cuda.is_available():
        return
    library = torch.library.Library("aten", "IMPL")
    library.impl("_pin_memory", _pin_memory, "CPU")
    library.impl("is_pinned", _is_pinned, "CPU")
    _libraries.append(library)
