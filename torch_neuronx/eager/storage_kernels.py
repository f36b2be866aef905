"""Kernels that work on storages and the host directly, so are not lowerings: allocation
(`empty`, `empty_strided`, `resize_`, `set_`), host<->device copies (`copy_`, `_to_copy`'s
`ToCopy`) and reads to the host (`item`). `STORAGE_KERNELS` maps each overload to its kernel.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import torch

from .. import ops
from ..ops._dtypes import buffer_dtype
from ..ops.geometry import contiguous_strides, numel
from ..runtime.memory import memory
from .kernel import Kernel
from .tensor import _CPU, allocation, fills_storage, new_tensor, to_device, upload
from .transfer import download

aten = torch.ops.aten
STORAGE_KERNELS: dict[torch._ops.OpOverload, Callable[..., Any]] = {}


def storage_kernel(*overloads: torch._ops.OpOverload) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register `fn` as the kernel of these overloads."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op in overloads:
            STORAGE_KERNELS[op] = fn
        return fn

    return register


def _nbytes(shape: Any, strides: Any, dtype: torch.dtype) -> int:
    if any(n == 0 for n in shape):
        return 0
    return (1 + sum((n - 1) * s for n, s in zip(shape, strides))) * dtype.itemsize


@storage_kernel(aten.empty.memory_format)
def empty(
    size: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    memory_format: Any = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    buffer_dtype(dtype)
    size = [int(n) for n in size]
    if memory_format in (None, torch.contiguous_format, torch.preserve_format):
        return new_tensor(size, dtype)
    strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    return new_tensor(size, dtype, strides=strides)


@storage_kernel(aten.empty_strided.default)
def empty_strided(
    size: Any, stride: Any, dtype: Any = None, layout: Any = None, device: Any = None, pin_memory: Any = None
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    buffer_dtype(dtype)
    return new_tensor(size, dtype, strides=stride, nbytes=_nbytes(size, stride, dtype))


class ToCopy(Kernel):
    """`_to_copy`: a conversion on the device is the `_to_copy` lowering's keyed kernel (the native
    module serves its calls); a transfer between host and device is `transfer`."""

    def __call__(this, self: torch.Tensor, **options: Any) -> torch.Tensor:  # noqa: N805 - `self` is ATen's
        device = options.get("device")
        if self.device.type == "neuron" and (device is None or torch.device(device).type == "neuron"):
            return super().__call__(self, **options)
        return transfer(self, **options)


def transfer(
    self: torch.Tensor,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> torch.Tensor:
    dtype = dtype or self.dtype
    target = torch.device(device) if device is not None else self.device
    strides = _copy_strides(self, memory_format)
    if self.device.type == "neuron" and target.type == "cpu":
        out = download(self)
        out = out if out.dtype == dtype else out.to(dtype)
        return out if strides is None else torch.empty_strided(out.shape, strides, dtype=dtype).copy_(out)
    if self.device.type == "cpu":
        buffer_dtype(dtype)
        source = self if self.dtype == dtype else self.to(dtype)
        return to_device(source, strides)
    return _like(self, dtype, memory_format).copy_(self)


def _copy_strides(t: torch.Tensor, memory_format: Any) -> tuple | None:
    """The strides of a copy of `t` in `memory_format` (PyTorch's `empty_like` rule: preserve keeps
    a dense layout); None where that is contiguous."""
    if memory_format in (None, torch.preserve_format) and t.is_contiguous():
        return None
    like = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    strides = torch.empty_like(like, memory_format=memory_format or torch.preserve_format).stride()
    return None if strides == contiguous_strides(tuple(t.shape)) else strides


@storage_kernel(aten.copy_.default)
def copy_(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    if self.device.type == "cpu":
        self.copy_(download(src))
        return self
    if src.device.type == "cpu" and (src.dim() > 0 or self.dim() == 0):
        if src.shape == self.shape and src.dtype == self.dtype and fills_storage(self):
            # The upload becomes the storage's buffer: no device copy. The old buffer is never
            # written (a queued executable reading it keeps its own reference).
            allocation(self).buffer = upload(src)
            return self
        src = to_device(src)
    return _device_copy()(self, src)


@storage_kernel(aten._copy_from.default)
def copy_from(self: torch.Tensor, dst: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    return copy_(dst, self)


@storage_kernel(aten._copy_from_and_resize.default)
def copy_from_and_resize(self: torch.Tensor, dst: torch.Tensor) -> torch.Tensor:
    if dst.shape != self.shape:
        dst.resize_(self.shape)
    return copy_(dst, self)


@storage_kernel(aten._local_scalar_dense.default)
def local_scalar_dense(self: torch.Tensor) -> Any:
    return download(self).item()


@storage_kernel(aten.resize_.default)
def resize_(self: torch.Tensor, size: Any, memory_format: Any = None) -> torch.Tensor:
    size = [int(n) for n in size]
    strides = contiguous_strides(tuple(size))
    if memory_format not in (None, torch.contiguous_format, torch.preserve_format):
        strides = torch.empty(size, device="meta", memory_format=memory_format).stride()
    needed = _nbytes(size, strides, self.dtype) + self.storage_offset() * self.dtype.itemsize
    storage = self.untyped_storage()
    if needed > storage.nbytes():
        grown = new_tensor([needed // self.dtype.itemsize], self.dtype)
        if numel(tuple(self.shape)) and allocation(self).buffer is not None:
            count = storage.nbytes() // self.dtype.itemsize
            flat = aten.as_strided.default.redispatch(_CPU, self, [count], [1], 0)
            grown[: flat.numel()].copy_(flat)
        storage = grown.untyped_storage()
    aten.set_.source_Storage_storage_offset.redispatch(_CPU, self, storage, self.storage_offset(), size, list(strides))
    return self


def resize_storage(storage: torch.UntypedStorage, nbytes: int) -> None:
    """`UntypedStorage.resize_` for neuron storages (FSDP2 frees and re-allocates parameters this
    way). The C++ hook for it cannot be set from Python: allocate `nbytes`, keep the common prefix
    of the contents, and swap the new allocation into `storage` so every tensor on it sees it."""
    nbytes = int(nbytes)
    if nbytes < 0:
        raise RuntimeError(f"neuron: storage resize_ to a negative size ({nbytes})")
    old = memory()[storage.data_ptr()]
    dtype = old.dtype or torch.uint8
    count, partial = divmod(nbytes, dtype.itemsize)
    buffer = None
    if old.buffer is not None and count:
        if partial:
            raise NotImplementedError(
                f"neuron: resizing a storage of {dtype} elements to {nbytes} bytes (not a whole number of elements)"
            )
        buffer = old.buffer[:count]
        if buffer.shape[0] < count:
            buffer = _grow(buffer, count)
        if buffer is old.buffer:  # a full-length slice is the array itself: move it, never share it
            old.buffer = None  # (the new storage's in-place ops donate it)
    fresh = new_tensor([count if buffer is not None else 0], dtype, buffer, nbytes=nbytes).untyped_storage()
    if storage.nbytes() and nbytes:
        # PyTorch swaps data pointers only when one side is empty: go through an empty storage.
        _swap(storage, new_tensor([0], dtype).untyped_storage())
    _swap(storage, fresh)


def _swap(a: torch.UntypedStorage, b: torch.UntypedStorage) -> None:
    """Trade the allocations of two storages; each one's finalizer then frees what it holds."""
    addr_a, addr_b = a.data_ptr(), b.data_ptr()
    a._swap_data_ptr_(b)
    memory().swapped(addr_a, addr_b)


def _grow(buffer: Any, count: int) -> Any:
    return jnp.concatenate([buffer, jnp.zeros(count - buffer.shape[0], buffer.dtype)])


@storage_kernel(aten.set_.default)
def set_empty(self: torch.Tensor) -> torch.Tensor:
    empty_storage = new_tensor([0], self.dtype).untyped_storage()
    return aten.set_.source_Storage_storage_offset.redispatch(_CPU, self, empty_storage, 0, [0], [1])


class CpuKernel:
    """Runs the op's CPU kernel on neuron tensors: exact where the op changes metadata only
    (views, `set_`), or is a composite whose pieces dispatch back to neuron."""

    def __init__(self, op: torch._ops.OpOverload) -> None:
        self.handle = op._handle

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.handle.redispatch_boxed(_CPU, *args, **kwargs)


for _op in (
    aten.set_.source_Storage_storage_offset,
    aten.set_.source_Storage,
    aten.set_.source_Tensor,
    aten.set_.source_Tensor_storage_offset,
):
    storage_kernel(_op)(CpuKernel(_op))


@storage_kernel(aten.record_stream.default)
def record_stream(self: torch.Tensor, stream: Any) -> None:
    return None


# Fresh complex32 tensors: no lowering makes one (a JAX result has no complex32 type), so for
# calls naming complex32 these ops allocate the tensor and write it in place (`copy_`, `fill_`,
# `zero_` write complex32: `Lowering.complex32`). Other ops so called run PyTorch's CPU kernel.
def _like(self: torch.Tensor, dtype: Any, memory_format: Any) -> torch.Tensor:
    return torch.empty_like(self, dtype=dtype, memory_format=memory_format or torch.preserve_format)


def _clone(self: torch.Tensor, memory_format: Any = None) -> torch.Tensor:
    return _like(self, None, memory_format).copy_(self)


def _full(size: Any, fill_value: Any, dtype: Any = None, **options: Any) -> torch.Tensor:
    return empty(size, dtype).fill_(fill_value)


def _full_like(self: torch.Tensor, fill_value: Any, dtype: Any = None, **options: Any) -> torch.Tensor:
    return _like(self, dtype, options.get("memory_format")).fill_(fill_value)


def _complex(real: torch.Tensor, imag: torch.Tensor) -> torch.Tensor:
    """torch.complex of two float16 tensors: their values into the parts of a new complex32 tensor."""
    out = empty(torch.broadcast_shapes(real.shape, imag.shape), torch.complex32)
    parts = torch.view_as_real(out)
    parts[..., 0].copy_(real)
    parts[..., 1].copy_(imag)
    return out


COMPLEX32_KERNELS: dict[torch._ops.OpOverload, Callable[..., Any]] = {
    aten.clone.default: _clone,
    aten.complex.default: _complex,
    aten.full.default: _full,
    aten.zeros.default: lambda size, dtype=None, **options: empty(size, dtype).zero_(),
    aten.ones.default: lambda size, dtype=None, **options: _full(size, 1, dtype),
    aten.full_like.default: _full_like,
    aten.zeros_like.default: lambda self, dtype=None, **options: _full_like(self, 0, dtype, **options),
    aten.ones_like.default: lambda self, dtype=None, **options: _full_like(self, 1, dtype, **options),
}


@functools.cache
def _device_copy() -> Kernel:
    return Kernel(aten.copy_.default, ops.load()[aten.copy_.default])
