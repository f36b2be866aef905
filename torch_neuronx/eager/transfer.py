"""Device -> host copies. Device memory is a separate space: every crossing is a real copy."""

from __future__ import annotations

from typing import Any

import torch

from ..ops import Lowering
from ..ops.geometry import Geometry, is_dense
from ..runtime import checks
from .kernel import Kernel
from .tensor import allocation

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
