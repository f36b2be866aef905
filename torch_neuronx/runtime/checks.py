"""Deferred device-side checks: the failed `ops.check`s of calls already launched.

A checked executable returns one flag row per check; the row is inspected only at a host sync
(a copy to the host, `.item()`, `torch.neuron.synchronize()`) or once MAX_PENDING checked
calls are pending, like a CUDA device-side assert. The native module appends to PENDING
itself. Nothing here imports JAX.
"""

from __future__ import annotations

from typing import Any

import numpy as np

PENDING: list = []  # (flags, [(error type, message)], op name) of checked calls not yet inspected
MAX_PENDING = 64


def defer(flags: Any, checks: list, op: str) -> None:
    """Queue one call's check flags (a [n, 2] device array: ok, offending value)."""
    PENDING.append((flags, checks, op))
    if len(PENDING) > MAX_PENDING:
        raise_failed()


def raise_failed() -> None:
    """Raise the first failed check of the calls run so far, naming the op."""
    if not PENDING:
        return
    pending = PENDING[:]
    PENDING.clear()
    for flags, checks, op in pending:
        for (ok, value), (error, message) in zip(np.asarray(flags).tolist(), checks):
            if not ok:
                raise error(f"neuron: {op}: {message.format(value)}")
