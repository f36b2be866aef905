"""Device tensors: plain torch.Tensors whose storage is a device allocation (DESIGN 1-2).

`new_tensor` makes one around a fresh allocation, `to_device` one holding a copy of a CPU
tensor; `allocation` finds a tensor's allocation. With the native module the storage is made
there and frees its allocation when it dies; on the pure-Python path a weak-reference finalizer
on the storage does.
"""

from __future__ import annotations

import weakref
from typing import Any

import jax
import numpy as np
import torch

from ..ops._dtypes import HOST_VIEW, buffer_dtype
from ..ops.geometry import contiguous_strides, numel
from ..runtime import native
from ..runtime.memory import Allocation, memory
from ..runtime.platform import device

DEVICE = torch.device("neuron", 0)
_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
_set_storage = torch.ops.aten.set_.source_Storage_storage_offset._handle
_create = torch._C._acc.create_empty_tensor
_storage_at = torch._C._construct_storage_from_data_pointer
_MEMORY = memory()


class _StorageRef(weakref.ref):
    """Weak reference to a storage that frees its device allocation when the storage dies."""

    __slots__ = ("addr",)


def _release(ref: _StorageRef) -> None:
    _MEMORY.free(ref.addr)


def new_tensor(
    shape: Any,
    dtype: torch.dtype,
    buffer: Any = None,
    strides: Any = None,
    nbytes: int | None = None,
) -> torch.Tensor:
    """A neuron tensor on a new storage of `nbytes` (default: exactly its elements), holding
    `buffer` (flat jax.Array of the storage's elements) or nothing yet."""
    shape = tuple(shape)
    if strides is None:
        strides = contiguous_strides(shape)
    if nbytes is None:
        nbytes = numel(shape) * dtype.itemsize
    return tensor_on_new_storage(shape, dtype, tuple(strides), nbytes, buffer)


def _python_tensor_on_new_storage(
    shape: tuple, dtype: torch.dtype, strides: tuple, nbytes: int, buffer: Any
) -> torch.Tensor:
    addr, alloc = _MEMORY.allocate(nbytes, buffer, dtype)
    storage = _storage_at(addr, DEVICE, nbytes)
    alloc.ref = ref = _StorageRef(storage, _release)
    ref.addr = addr
    t = _create(shape, dtype)
    _set_storage.redispatch_boxed(_CPU, t, storage, 0, shape, strides)
    return t


# `new_tensor` with every argument given: the eager hot path, which computes them once per executable.
tensor_on_new_storage = (
    _python_tensor_on_new_storage if native.module() is None else native.module().tensor_on_new_storage
)


def allocation(t: torch.Tensor) -> Allocation:
    try:
        return _MEMORY[t.untyped_storage().data_ptr()]
    except KeyError:
        raise RuntimeError(
            f"neuron: tensor of shape {tuple(t.shape)} has no live device storage "
            "(was it freed or created outside torch_neuronx?)"
        ) from None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU numpy array (same bits) of a contiguous CPU tensor."""
    host = HOST_VIEW.get(t.dtype)
    if host is not None:
        return t.view(host[0]).numpy().view(host[1])
    return t.numpy()


def upload(cpu: torch.Tensor, strides: tuple | None = None) -> Any:
    """A flat device buffer holding a copy of a CPU tensor's elements in row-major order, or in
    the memory order of `strides` (a dense layout of its shape)."""
    buffer_dtype(cpu.dtype)  # clear error for unsupported dtypes
    # One copy, into memory no one else holds: PJRT CPU aliases aligned host memory (torch's
    # allocator aligns to 64 bytes) instead of copying it again, and keeps the array alive.
    if strides is None:
        private = torch.empty(cpu.shape, dtype=cpu.dtype)
        flat = private.view(-1)
    else:
        private = torch.empty_strided(cpu.shape, strides, dtype=cpu.dtype)
        flat = private.as_strided((private.numel(),), (1,))
    private.copy_(cpu.detach())
    return jax.device_put(to_numpy(flat), device())


def fills_storage(t: torch.Tensor) -> bool:
    """`t` covers its storage exactly, in row-major order, as a buffer of its own dtype."""
    return (
        t.is_contiguous()
        and t.storage_offset() == 0
        and t.numel() * t.element_size() == t.untyped_storage().nbytes()
        and not (t.is_conj() or t.is_neg())
        and allocation(t).dtype == t.dtype
    )


def adopt(t: torch.Tensor, host: torch.Tensor) -> None:
    """A contiguous CPU tensor of `t`'s shape and dtype that nothing else holds becomes the buffer
    of `t`, which `fills_storage`: PJRT CPU takes the aligned host memory as it is; other
    platforms copy it once."""
    allocation(t).buffer = jax.device_put(to_numpy(host.view(-1)), device())


def to_device(cpu: torch.Tensor, strides: tuple | None = None) -> torch.Tensor:
    """A new neuron tensor equal to a CPU tensor: contiguous, or laid out as `strides` say (a
    dense layout of its shape)."""
    return new_tensor(cpu.shape, cpu.dtype, upload(cpu, strides), strides)
