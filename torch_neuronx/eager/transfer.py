"""Host <-> device copies. Device memory is a separate space: every crossing is a real copy."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
import torch

from ..ops import Lowering
from ..ops._dtypes import HOST_VIEW, jax_dtype
from ..ops.geometry import Geometry, is_dense
from ..runtime.platform import device
from .kernel import Kernel, raise_failed_checks
from .tensor import allocation, new_tensor

_gather = Kernel(torch.ops.aten.clone.default, Lowering(lambda x, memory_format=None: x))


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU numpy array (same bits) of a contiguous CPU tensor."""
    host = HOST_VIEW.get(t.dtype)
    if host is not None:
        return t.view(host[0]).numpy().view(host[1])
    return t.numpy()


def upload(cpu: torch.Tensor) -> Any:
    """A flat device buffer holding a copy of a CPU tensor's elements in row-major order."""
    jax_dtype(cpu.dtype)  # clear error for unsupported dtypes
    flat = cpu.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    # PJRT CPU may alias aligned host memory even with may_alias=False: hand it a private copy.
    return jax.device_put(np.array(to_numpy(flat), copy=True), device())


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
    raise_failed_checks()
    out = torch.empty(t.shape, dtype=t.dtype)
    out.view(-1).copy_(torch.from_dlpack(dense_buffer(t)))
    return out


def to_device(cpu: torch.Tensor) -> torch.Tensor:
    """A new contiguous neuron tensor equal to a CPU tensor."""
    return new_tensor(cpu.shape, cpu.dtype, upload(cpu))
