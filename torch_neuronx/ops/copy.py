"""Copies and dtype conversion: copy_, clone, _to_copy on device."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import torch

from . import lowering
from ._dtypes import cast, torch_dtype

aten = torch.ops.aten


# Conversions to and from complex32 on device (`.chalf()`, `.to()`, `copy_`) are copies.
@lowering(aten.copy_.default, complex32=True)
def copy_(self: Any, src: Any, non_blocking: bool = False) -> Any:
    return jnp.broadcast_to(cast(src, torch_dtype(self)), self.shape)


@lowering(aten.clone.default)
def clone(x: Any, memory_format: Any = None) -> Any:
    return x


@lowering(aten.copy.default)
def copy(self: Any, src: Any, non_blocking: bool = False) -> Any:
    return copy_(self, src)


@lowering(aten._to_copy.default)
def to_copy(
    x: Any,
    dtype: Any = None,
    layout: Any = None,
    device: Any = None,
    pin_memory: Any = None,
    non_blocking: bool = False,
    memory_format: Any = None,
) -> Any:
    """A conversion on the device (eager's special kernel handles transfers; compiled graphs
    run nodes that change device eagerly)."""
    return cast(x, dtype) if dtype is not None else x
