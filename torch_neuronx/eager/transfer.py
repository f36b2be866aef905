"""Device -> host: copies, and on the CPU platform (where a device buffer is host memory) views.

`download` copies. On the CPU platform a host-side consumer (a collective's transport) may use
the device memory itself instead: `host_buffer` to read, `owned_buffer` to write (after an
identity executable that donates the buffer has taken it from every earlier reader), both
without waiting for the device, then `host_view` once it must touch the memory. Elsewhere the
buffer getters return None and the caller copies."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

import jax
import torch

from ..ops import Lowering
from ..ops._dtypes import BITS, HOST_VIEW
from ..ops.geometry import Geometry, is_dense
from ..runtime import checks, platform
from .kernel import Kernel
from .tensor import allocation, fills_storage

_gather = Kernel(torch.ops.aten.clone.default, Lowering(lambda x, memory_format=None: x))


def dense_buffer(t: torch.Tensor) -> Any:
    """The tensor's elements as a flat row-major device buffer (a gather unless already so)."""
    alloc = allocation(t)
    buf = alloc.buffer
    geom = Geometry(tuple(t.shape), t.stride(), t.storage_offset())
    if buf is not None and alloc.dtype == t.dtype and is_dense(geom, buf.shape[0]):
        return buf
    return allocation(_gather(t)).buffer


def download(t: torch.Tensor) -> torch.Tensor:
    """A new contiguous CPU tensor equal to a neuron tensor."""
    checks.raise_failed()
    out = torch.empty(t.shape, dtype=t.dtype)
    dense = out.view(-1)
    if t.dtype in BITS:  # storage-only dtypes come over as their bits, which no op reads as values
        bits = HOST_VIEW[t.dtype][0]
        t, dense = t.view(bits), dense.view(bits)
    buffer = dense_buffer(t)
    if platform.platform_name() == "cpu":  # the buffer is host memory: one memcpy once it is computed
        buffer.block_until_ready()
        if out.numel():
            ctypes.memmove(dense.data_ptr(), buffer.unsafe_buffer_pointer(), dense.numel() * dense.element_size())
    else:
        dense.copy_(torch.from_dlpack(buffer))
    return out


@functools.cache
def _take() -> Any:
    return jax.jit(lambda buffer: buffer, donate_argnums=0)


def host_buffer(t: torch.Tensor) -> Any:
    """`t`'s device buffer where it is all of `t` and host memory (the CPU platform), for a host-side
    consumer to read through `host_view`; None where a copy is needed."""
    if platform.platform_name() != "cpu" or not fills_storage(t):
        return None
    checks.raise_failed()
    return allocation(t).buffer


def owned_buffer(t: torch.Tensor) -> Any:
    """`t`'s device buffer taken from every earlier reader, for a host-side consumer to write through
    `host_view`: an identity executable donates it, and PJRT runs a donating execution after the
    buffer's readers, so no work queued before sees the writes. The result becomes `t`'s buffer.
    None where a copy is needed (not host memory, or something else holds the buffer)."""
    buffer = host_buffer(t)
    if buffer is None:
        return None
    owned = _take()(buffer)
    if not buffer.is_deleted():
        return None
    allocation(t).buffer = owned
    return owned


def host_view(buffer: Any, t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of `t`'s shape and dtype on `buffer`'s memory, once the device has computed it.
    It holds no reference to the buffer (a DLPack view would, and a buffer with an outside reference
    is never donated again, so a view a transport keeps a moment too long would cost later in-place
    ops their donation): the caller keeps `buffer` alive while it uses the view."""
    buffer.block_until_ready()
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    memory = (ctypes.c_char * nbytes).from_address(buffer.unsafe_buffer_pointer())
    return torch.frombuffer(memory, dtype=t.dtype).view(t.shape)
