"""Streams and events. PJRT orders work per device, so there is one real queue; a Stream is a
handle on it and an Event records a point in it. Ordering one stream after another therefore
needs no wait: device work is ordered by the queue, and a collective's storages by
`deferred` (a collective waited on a side stream). The host waits only where CUDA's would:
`synchronize()` of the device, a stream or an event, and recording a timing event (its host
time when the queue reached it)."""

from __future__ import annotations

import time
from typing import Any

import torch

from . import checks, deferred
from .memory import wait_in_flight


def synchronize() -> None:
    """Wait for all device work queued so far and every collective storages wait for; raise a
    failed device-side check."""
    deferred.settle_all()
    wait_in_flight()
    checks.raise_failed()


class Stream:
    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        self.priority = priority

    @property
    def device(self) -> torch.device:
        return torch.device("neuron", 0)

    def synchronize(self) -> None:
        synchronize()

    def query(self) -> bool:
        synchronize()
        return True

    def wait_event(self, event: Event) -> None:
        """Nothing to wait for: the device's one queue already orders the work."""

    def wait_stream(self, stream: Stream) -> None:
        """Nothing to wait for: the device's one queue already orders the work."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream)

    def __hash__(self) -> int:
        return hash(Stream)

    def __repr__(self) -> str:
        return "<torch.neuron.Stream device=neuron:0>"


_DEFAULT = Stream()
_current = [_DEFAULT]


class Event:
    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Stream | None = None) -> None:
        if self.enable_timing:
            synchronize()
        self._time = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        """Nothing to wait for: the device's one queue already orders the work."""

    def query(self) -> bool:
        if self._time is None:
            return False
        synchronize()
        return True

    def synchronize(self) -> None:
        synchronize()

    def elapsed_time(self, end: Event) -> float:
        if not (self.enable_timing and end.enable_timing):
            raise RuntimeError("neuron Event.elapsed_time needs both events created with enable_timing=True")
        if self._time is None or end._time is None:
            raise RuntimeError("neuron Event.elapsed_time: both events must be recorded first")
        return (end._time - self._time) * 1000.0


def current_stream(device: Any = None) -> Stream:
    return _current[-1]


def default_stream(device: Any = None) -> Stream:
    return _DEFAULT


def set_stream(stream: Stream) -> None:
    _current[-1] = stream


class stream:  # noqa: N801 - mirrors torch.cuda.stream
    """Context manager selecting a stream (all streams share the device's one queue)."""

    def __init__(self, s: Stream | None) -> None:
        self.stream = s

    def __enter__(self) -> Stream | None:
        if self.stream is not None:
            _current.append(self.stream)
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            _current.pop()
