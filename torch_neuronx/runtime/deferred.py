"""Storages whose contents wait for work outside the device queue: a collective on a side stream.

On CUDA, a collective's `wait()` under a side stream (FSDP2 reduce-scatters gradients so, with
`async_op=False`) makes that stream wait and returns at once: the host goes on queuing the
backward while the collective runs. Device work here is one queue in issue order, so stream
order needs nothing, except for a collective, which Gloo runs on the host beside the queue. Such
a collective registers the storages it reads and writes (`defer`); a later device use of one of
them (`settle`: the dispatcher's entry and compiled graphs' launch ask) first completes it, and
`settle_all` (every synchronize) completes them all. While any storage waits, the native hit
path hands its ops to Python, which asks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import torch

from . import native

_lock = threading.Lock()
_waiting: dict[int, Callable[[], None]] = {}  # storage address -> completes the work it waits for


def active() -> bool:
    return bool(_waiting)


def defer(addresses: Iterable[int], complete: Callable[[], None]) -> None:
    """Until `complete()` has run, a device use of these storages must run it first."""
    with _lock:
        for address in addresses:
            _waiting[address] = complete
        _route_to_python(True)


def settle(addresses: Iterable[int]) -> None:
    """Complete the work any of these storages waits for (each once; raises its error)."""
    with _lock:
        due = {_waiting[a] for a in addresses if a in _waiting}
        if not due:
            return
        for address in [a for a, complete in _waiting.items() if complete in due]:
            del _waiting[address]
        _route_to_python(bool(_waiting))
    for complete in due:
        complete()


def settle_uses(values: Iterable[Any]) -> None:
    """`settle` the storages of the neuron tensors among `values` (and in lists among them)."""
    addresses = []
    for value in values:
        for t in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(t, torch.Tensor) and t.device.type == "neuron":
                addresses.append(t.untyped_storage().data_ptr())
    settle(addresses)


def settle_all() -> None:
    if _waiting:
        settle(list(_waiting))


def _route_to_python(on: bool) -> None:
    module = native.module()
    if module is not None:
        module.route_to_python(on)
