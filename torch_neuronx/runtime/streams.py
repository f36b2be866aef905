"""Streams and events. PJRT orders work per device, so there is one real queue; a Stream is a
handle on it and an Event records a point in it (host time when the queue reached it)."""

from __future__ import annotations

import time
from typing import Any

import torch

from . import checks
from .memory import wait_in_flight


def synchronize() -> None:
    """Wait for all device work queued so far; raise a failed device-side check."""
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
        event.synchronize()

    def wait_stream(self, stream: Stream) -> None:
        stream.synchronize()

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
        synchronize()
        self._time = time.perf_counter()

    def wait(self, stream: Stream | None = None) -> None:
        self.synchronize()

    def query(self) -> bool:
        return self._time is not None

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
