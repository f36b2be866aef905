"""Device -> host: copies, and on the CPU platform (where a device buffer is host memory) views.

`download` copies. `host_view` and `host_owned` hand a synchronous host-side consumer (a
collective's transport) the device memory itself: `host_view` to read, `host_owned` to write,
after an identity executable that donates the buffer has taken it from every earlier reader.
Elsewhere both return None and the caller copies."""

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
    dense.copy_(torch.from_dlpack(dense_buffer(t)))
    return out


@functools.cache
def _take() -> Any:
    return jax.jit(lambda buffer: buffer, donate_argnums=0)


def _host_buffer(t: torch.Tensor) -> Any:
    """`t`'s buffer where it is all of `t` and host memory, else None."""
    if platform.platform_name() != "cpu" or not fills_storage(t):
        return None
    checks.raise_failed()
    return allocation(t).buffer


def _view(buffer: Any, t: torch.Tensor) -> torch.Tensor:
    """A CPU tensor of `t`'s shape and dtype on `buffer`'s memory. It holds no reference to the
    buffer (a DLPack view would, and a buffer with an outside reference is never donated again,
    so a view a transport keeps a moment too long would cost later in-place ops their donation):
    the caller keeps `buffer` alive while it uses the view."""
    nbytes = t.numel() * t.element_size()
    if nbytes == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    memory = (ctypes.c_char * nbytes).from_address(buffer.unsafe_buffer_pointer())
    return torch.frombuffer(memory, dtype=t.dtype).view(t.shape)


def host_view(t: torch.Tensor) -> tuple[torch.Tensor, Any] | None:
    """(view, buffer): a CPU tensor on `t`'s device memory to read while the caller holds the
    buffer and no device op writes it; None where a copy is needed."""
    buffer = _host_buffer(t)
    if buffer is None:
        return None
    buffer.block_until_ready()
    return _view(buffer, t), buffer


def host_owned(t: torch.Tensor) -> tuple[torch.Tensor, Any] | None:
    """(view, buffer): a CPU tensor on `t`'s device memory that the caller may write while it
    holds the buffer: the buffer went through an executable that donated it, which ran after
    every earlier reader, so no queued work sees the writes. None where a copy is needed (not
    host memory, or the donation did not happen because something else holds the buffer)."""
    buffer = _host_buffer(t)
    if buffer is None:
        return None
    owned = _take()(buffer)
    if not buffer.is_deleted():
        return None
    owned.block_until_ready()
    allocation(t).buffer = owned
    return _view(owned, t), owned
