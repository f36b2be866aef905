"""Device activity for `torch.profiler` (`ProfilerActivity.PrivateUse1`).

The native module is a Kineto plugin (csrc/native.cpp): while a profiler session with device
activity records, every executable becomes one device activity, linked to the op that launched it,
so PyTorch adds its time to that op's device time (`self_device_time_total`, `.table()`) and the
chrome trace shows it on the device's own row. The native hit path records its launches itself;
the Python launch sites (eager kernels outside the native hit path, compiled graphs) call
`launched`. While recording, each executable is waited for: its device time runs from launch to
results ready, with the device running one executable at a time (as CUDA_LAUNCH_BLOCKING does).
Builds of executables are marked as host events (`neuron::compile <what>`, `neuron::recompile
<what>: <why>`). Without the native
module there is no plugin, and profiles show host time only.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from . import native


@functools.cache
def register() -> bool:
    """Give Kineto the plugin once, if the native module is active; whether it was given."""
    module = native.module()
    if module is None:
        return False
    module.register_profiler()
    return True


def recording() -> bool:
    """Whether a profiler session records device activity now."""
    module = native.module()
    return module is not None and module.profiling()


def now() -> int:
    """The clock device activities are timed on (Kineto's: nanoseconds since the epoch)."""
    return time.time_ns()


def launched(name: str, start: int, results: Any) -> None:
    """An executable named `name` was launched at `start` (`now()`) and returned `results` (its
    output arrays, in a sequence): wait for them and record the activity."""
    leaves = [r for r in results if hasattr(r, "block_until_ready")]
    if leaves:
        leaves[0].block_until_ready()
    native.module().record_activity(name, start, now())


@contextmanager
def compiling(label: str) -> Iterator[None]:
    """Mark building an executable in a running profile, as the host event `neuron::<label>`."""
    marker = (
        torch.profiler.record_function(f"neuron::{label}")
        if torch.autograd.profiler._is_profiler_enabled
        else nullcontext()
    )
    with marker:
        yield
