"""Device memory: one flat PJRT buffer per storage, keyed by a unique device address.

An address is handed out per storage and never reused. The runtime maps it to the storage's
buffer (a 1-D jax.Array of the storage's elements, or None until first written) and accounts
its bytes exactly from allocation until the storage dies. `memory()` is the process's device
memory, chosen on first use: the native module's (whose storages free themselves when they die)
or `DeviceMemory`, its pure-Python twin (whose storages carry a finalizer that frees them).
"""

from __future__ import annotations

import functools
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from . import native, platform

_ALIGN = 512
_BASE = 0x1000_0000_0000
_PRUNE_COUNT, _PRUNE_BYTES = 64, 64 * 2**20  # retired buffers held before letting finished ones go


class Allocation:
    """One storage's device memory (a slotted class: one is made per eager op's result)."""

    __slots__ = ("buffer", "dtype", "nbytes", "ref")

    def __init__(self, nbytes: int, buffer: Any = None, dtype: Any = None) -> None:
        self.nbytes = nbytes
        self.buffer = buffer  # jax.Array, flat, or None while never written
        self.dtype = dtype  # torch dtype of the buffer's elements
        self.ref: Any = None  # weak reference to the storage; frees this allocation when it dies


@dataclass
class MemoryStats:
    allocated: int = 0
    peak: int = 0
    num_alloc: int = 0
    num_free: int = 0
    num_ooms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def capacity_bytes() -> int:
    """Device capacity: `TORCH_NEURONX_MEMORY_GB`, else 16 GiB (a NeuronCore's HBM share)."""
    return int(float(os.environ.get("TORCH_NEURONX_MEMORY_GB", "16")) * 2**30)


class DeviceMemory:
    """Address -> Allocation table with exact accounting and a capacity limit.

    `memory[addr]` is the allocation of a live storage (KeyError otherwise), `memory.get(addr)`
    the same or None."""

    def __init__(self) -> None:
        self.table: dict[int, Allocation] = {}
        self.stats = MemoryStats()
        self.capacity = capacity_bytes()
        self._next = _BASE
        self.retired: list = []  # (buffer, nbytes) of dead storages, possibly still being computed
        self._retired_bytes = 0
        self._prune_at = (_PRUNE_COUNT, _PRUNE_BYTES)  # retired count or bytes that trigger a prune

    def __getitem__(self, addr: int) -> Allocation:
        return self.table[addr]

    def get(self, addr: int) -> Allocation | None:
        return self.table.get(addr)

    def allocate(self, nbytes: int, buffer: Any = None, dtype: Any = None) -> tuple[int, Allocation]:
        stats = self.stats
        with stats.lock:
            self._prune_retired()
            if stats.allocated + nbytes > self.capacity:
                stats.num_ooms += 1
                raise torch.OutOfMemoryError(
                    f"neuron: out of memory allocating {_fmt(nbytes)} "
                    f"({_fmt(stats.allocated)} of {_fmt(self.capacity)} in use). Free tensors, "
                    "use smaller batches, or raise TORCH_NEURONX_MEMORY_GB."
                )
            stats.allocated += nbytes
            stats.num_alloc += 1
            if stats.allocated > stats.peak:
                stats.peak = stats.allocated
            addr = self._next
            self._next += max(_ALIGN, -(-nbytes // _ALIGN) * _ALIGN)
        alloc = self.table[addr] = Allocation(nbytes, buffer, dtype)
        return addr, alloc

    def free(self, addr: int) -> None:
        alloc = self.table.pop(addr, None)
        if alloc is None:
            return
        with self.stats.lock:
            self.stats.allocated -= alloc.nbytes
            self.stats.num_free += 1
            if alloc.buffer is not None:
                self._retire(alloc.buffer, alloc.nbytes)

    def _retire(self, buffer: Any, nbytes: int) -> None:
        """Keep a dead storage's buffer until it is computed: a result dropped at once (`a @ b`
        in a loop) may still be in flight, and `synchronize()` must wait for it too."""
        self.retired.append((buffer, nbytes))
        self._retired_bytes += nbytes

    def _prune_retired(self) -> None:
        """Let finished retired buffers go, once _PRUNE_COUNT buffers or _PRUNE_BYTES bytes
        more than the last prune kept are retired. Called when allocating, never from `free`:
        that runs in a storage's finalizer, where calling into JAX is not safe."""
        if len(self.retired) >= self._prune_at[0] or self._retired_bytes >= self._prune_at[1]:
            self.retired = [(b, n) for b, n in self.retired if not (b.is_deleted() or b.is_ready())]
            self._retired_bytes = sum(n for _, n in self.retired)
            # Those still computing are looked at again only after as many more retire, so
            # in-flight intermediates are not rescanned on every allocation.
            self._prune_at = (len(self.retired) + _PRUNE_COUNT, self._retired_bytes + _PRUNE_BYTES)

    def in_flight(self) -> list:
        """Buffers whose work may still be running: live storages' and retired ones."""
        with self.stats.lock:
            retired, self.retired, self._retired_bytes = self.retired, [], 0
            self._prune_at = (_PRUNE_COUNT, _PRUNE_BYTES)
        live = [a.buffer for a in list(self.table.values()) if a.buffer is not None]
        return [b for b in live + [b for b, _ in retired] if not b.is_deleted()]

    def reset_peak(self) -> None:
        with self.stats.lock:
            self.stats.peak = self.stats.allocated

    def swapped(self, addr_a: int, addr_b: int) -> None:
        """Two storages traded their addresses: each one's finalizer now frees what it holds."""
        alloc_a, alloc_b = self.table[addr_a], self.table[addr_b]
        alloc_a.ref, alloc_b.ref = alloc_b.ref, alloc_a.ref
        alloc_a.ref.addr, alloc_b.ref.addr = addr_a, addr_b


def _fmt(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


@functools.cache
def memory() -> DeviceMemory:
    """The device memory of this process (the native module's when it is active)."""
    module = native.module()
    return DeviceMemory() if module is None else module.init(capacity_bytes(), platform.async_dispatch())


def wait_in_flight() -> None:
    """Wait for every buffer still being computed, including those of storages already dead."""
    for buffer in memory().in_flight():
        try:
            buffer.block_until_ready()
        except Exception:
            # Another thread donated it after the snapshot: its work goes on in the outputs of the
            # executable that took it, which that thread waits for.
            if not buffer.is_deleted():
                raise
