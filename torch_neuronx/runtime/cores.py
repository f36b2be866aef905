"""Which of the host's cores XLA:CPU's threads run on.

As a GPU's work runs off the CPU thread that enqueues it, XLA's threads are kept off some of the
host's cores (`TORCH_NEURONX_HOST_CORES`, default 1) so that the Python thread dispatching the
next ops does not wait behind them. That pays for small executables, where the host's dispatch
is the work, and costs large ones half their compute on a 2-core host. So XLA:CPU starts with
every core (its thread pools are sized from the starting thread's affinity and keep their size),
its threads are then narrowed to the cores left to XLA, and spread over every core while an
executable marked large (`spread_until_ready`) is in flight. The Python threads keep every core.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

# An executable that does this much arithmetic, or moves this many bytes, runs spread over every
# core. A tiny Llama's train step (0.13 + 0.26 GFLOP, 63 + 47 MB) is faster narrow; a 4-layer
# 256-wide one's (3.6 + 7.2 GFLOP) and a 58M-parameter decode step (0.09 GFLOP, 520 MB) spread.
LARGE_FLOPS = 2e9
LARGE_BYTES = 2e8


def large(cost: dict[str, float] | None) -> bool:
    """Whether an executable with XLA's `cost_analysis()` of `cost` counts as large."""
    cost = cost or {}
    return cost.get("flops", 0.0) >= LARGE_FLOPS or cost.get("bytes accessed", 0.0) >= LARGE_BYTES


def host_cores() -> int:
    """Cores kept free of XLA:CPU's threads for the host (`TORCH_NEURONX_HOST_CORES`)."""
    value = os.environ.get("TORCH_NEURONX_HOST_CORES", "1")
    try:
        return max(0, int(value))
    except ValueError:
        raise ValueError(f"TORCH_NEURONX_HOST_CORES must be a whole number of cores, got {value!r}") from None


class XlaThreads:
    """The threads XLA:CPU started, narrowed to the cores left to XLA except while large work runs."""

    def __init__(self, threads: set[int], narrow: set[int], wide: set[int]) -> None:
        self.threads, self.narrow, self.wide = threads, narrow, wide
        self.in_flight = 0  # large executables enqueued and not yet done
        self.lock = threading.Lock()
        self.waiter = ThreadPoolExecutor(1, thread_name_prefix="torch_neuronx-cores")
        self._pin(narrow)

    def spread_until_ready(self, results: Any, wait: Callable[[Any], Any]) -> None:
        """A large executable was enqueued with `results`: XLA's threads use every core until
        `wait(results)` returns (on the waiter thread)."""
        with self.lock:
            self.in_flight += 1
            if self.in_flight == 1:
                self._pin(self.wide)
        self.waiter.submit(self._done, results, wait)

    def _done(self, results: Any, wait: Callable[[Any], Any]) -> None:
        try:
            wait(results)
        except Exception:  # a result donated to a later call or a failed execution: done either way
            pass
        with self.lock:
            self.in_flight -= 1
            if not self.in_flight:
                self._pin(self.narrow)

    def _pin(self, cores: set[int]) -> None:
        for thread in list(self.threads):
            try:
                os.sched_setaffinity(thread, cores)
            except OSError:  # the thread has exited
                self.threads.discard(thread)


def start(client: Callable[[], Any]) -> XlaThreads | None:
    """Call `client()` (which starts XLA:CPU and its threads) and take charge of the threads it
    starts; None where no core is kept for the host or the platform cannot pin threads."""
    if not hasattr(os, "sched_getaffinity") or not os.path.isdir("/proc/self/task"):
        client()
        return None
    before = _threads()
    client()
    wide = set(os.sched_getaffinity(0))
    keep = host_cores()
    if not keep or len(wide) <= keep:
        return None
    return XlaThreads(_threads() - before, set(sorted(wide)[:-keep]), wide)


def _threads() -> set[int]:
    return {int(t) for t in os.listdir("/proc/self/task")}
