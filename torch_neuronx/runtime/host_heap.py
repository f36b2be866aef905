"""The host heap as device memory: on the PJRT CPU platform every buffer is a block of this
process's glibc heap.

glibc's defaults return freed blocks to the OS quickly (blocks over 128 KiB are mmap'd and
unmapped on free; the heap top is trimmed past 128 KiB), so each executable's outputs and
temporaries land in freshly mapped pages and pay a page fault per 4 KiB on first write. A
device allocator keeps freed memory for reuse instead, as PyTorch's CUDA caching allocator
does: `retain_freed_blocks` tells glibc to serve blocks up to 32 MiB from the heap and to
keep up to 2 GiB of freed heap; `torch.neuron.empty_cache()` hands it back (`malloc_trim`).

`TORCH_NEURONX_RETAIN_HOST_MEMORY=0` keeps glibc's defaults. Other C libraries: no effect.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 * 2**20  # glibc's maximum on 64-bit
_TRIM_THRESHOLD = 2 * 2**30 - 1  # a C int


def _glibc() -> Any:
    libc = ctypes.CDLL(None)
    return libc if hasattr(libc, "gnu_get_libc_version") and hasattr(libc, "mallopt") else None


def retain_freed_blocks() -> bool:
    """Keep freed device memory in the heap for reuse; whether the setting took effect."""
    libc = _glibc()
    if libc is None or os.environ.get("TORCH_NEURONX_RETAIN_HOST_MEMORY", "1") == "0":
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and libc.mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def release_freed_blocks() -> None:
    """Return the heap's free memory to the OS."""
    libc = _glibc()
    if libc is not None:
        libc.malloc_trim(0)
