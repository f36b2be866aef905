"""Device -> host: copies, and on the CPU platform (where a device buffer is host memory) views.

`download` copies. `host_view` and `host_owned` hand a synchronous host-side consumer (a
collective's transport) the device memory itself: `host_view` to read, `host_owned` to write,
after an identity executable that donates the buffer has taken it from every earlier reader.
Elsewhere both return None and the caller copies."""

from __future__ import annotations

import functools
from typing import Any

import jax
import torch

from ..ops import Lowering
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
    out.view(-1).copy_(torch.from_dlpack(dense_buffer(t)))
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


def host_view(t: torch.Tensor) -> torch.Tensor | None:
    """A CPU tensor on `t`'s device memory, to read while no device op writes it (donation
    leaves a buffer that a view holds untouched); None where a copy is needed."""
    buffer = _host_buffer(t)
    if buffer is None:
        return None
    buffer.block_until_ready()
    return torch.from_dlpack(buffer).view(t.shape)


def host_owned(t: torch.Tensor) -> torch.Tensor | None:
    """A CPU tensor on `t`'s device memory that the caller may write: the buffer went through an
    executable that donated it, which ran after every earlier reader, so no queued work sees the
    writes. None where a copy is needed (not host memory, or the donation did not happen because
    something else holds the buffer)."""
    buffer = _host_buffer(t)
    if buffer is None:
        return None
    owned = _take()(buffer)
    if not buffer.is_deleted():
        return None
    owned.block_until_ready()
    allocation(t).buffer = owned
    return torch.from_dlpack(owned).view(t.shape)
