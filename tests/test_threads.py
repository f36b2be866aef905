"""Several Python threads using the device at once, each on its own tensors, as Transformers does
when it loads weights from several threads and a DataLoader does when its pinning thread copies
batches: host -> device transfers (from pinned memory too, non-blocking), eager ops with in-place
and view writes, device -> host copies, and `load_state_dict` into modules on neuron. Every
thread's results must equal the same work run on one thread, and PyTorch CPU's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch
from compare import TOLERANCES, assert_same
from torch import nn

THREADS = 4
ROUNDS = 10  # per thread, so that the threads' transfers and ops interleave


def _at_once(work: Callable[[int], Any]) -> list[Any]:
    """`work(i)` on THREADS threads released together by a barrier; their results, in order.
    An exception in a thread fails the test."""
    barrier = threading.Barrier(THREADS)
    results: list[Any] = [None] * THREADS
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = work(i)
        except BaseException as error:  # re-raised on the main thread below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def _inputs(i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Thread i's host weights, bias and batch."""
    g = torch.Generator().manual_seed(i)
    return torch.randn(48, 32, generator=g), torch.randn(48, generator=g), torch.randn(16, 32, generator=g)


def _ops(device: str, i: int) -> list[torch.Tensor]:
    """Thread i's work: its weights uploaded from plain and pinned memory (non-blocking), eager
    ops with an in-place op and writes through views, and the results copied back to the host,
    the last one non-blocking into pinned memory."""
    w, b, x = _inputs(i)
    results = []
    for r in range(ROUNDS):
        dw = w.to(device)
        db = b.pin_memory().to(device, non_blocking=True)
        dx = x.pin_memory().to(device, non_blocking=True)
        y = torch.addmm(db, dx, dw.t())
        y.tanh_()
        y[:, ::2] = y[:, ::2] * 2  # a write through a strided view
        y[r].add_(1.0)  # an in-place op on a row view
        z = (y @ dw).softmax(-1)
        host = torch.empty(z.shape).pin_memory()
        host.copy_(z, non_blocking=True)
        if device == "neuron":
            torch.neuron.synchronize()
        results += [y.cpu(), host]
    return results


def test_transfers_and_eager_ops_from_threads_at_once() -> None:
    threaded = _at_once(lambda i: _ops("neuron", i))
    for i in range(THREADS):
        alone = _ops("neuron", i)
        for got, want in zip(threaded[i], alone):
            assert torch.equal(got, want), i  # the same executables on the same bytes
        rtol, atol = TOLERANCES[torch.float32]
        for got, want in zip(threaded[i], _ops("cpu", i)):
            torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def _module() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.LayerNorm(64), nn.GELU(), nn.Linear(64, 8))


def _state_dict(i: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(100 + i)
    return _module().state_dict()


@pytest.mark.parametrize("assign", [False, True], ids=["copy", "assign"])
def test_load_state_dict_from_threads_at_once(assign: bool) -> None:
    """copy: each parameter on neuron copies its host value in place; assign: the state dict is
    moved to neuron first (non-blocking) and its tensors become the parameters."""
    x = torch.randn(4, 32)
    states = [_state_dict(i) for i in range(THREADS)]

    def load(i: int) -> tuple[nn.Module, torch.Tensor]:
        module = _module().to("neuron")
        state = {k: v.to("neuron", non_blocking=True) for k, v in states[i].items()} if assign else states[i]
        module.load_state_dict(state, assign=assign)
        return module, module(x.to("neuron"))

    for i, (module, out) in enumerate(_at_once(load)):
        for name, value in module.state_dict().items():
            assert torch.equal(value.cpu(), states[i][name]), name
        cpu = _module()
        cpu.load_state_dict(states[i])
        assert_same(cpu(x), out)


_FIRST_OPS = """
import threading, torch
barrier = threading.Barrier(4)
errors = []
def ops(x, i):
    y = (x @ x).tanh_() + i
    y[:, ::2] = 1.5
    return y
def work(i):
    try:
        barrier.wait()
        x = torch.full((8, 8), i / 8)
        torch.testing.assert_close(ops(x.to("neuron"), i).cpu(), ops(x, i))
    except BaseException as error:
        errors.append(error)
threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
for t in threads: t.start()
for t in threads: t.join()
if errors: raise errors[0]
"""


@pytest.mark.parametrize("native", ["1", "0"], ids=["native", "python"])
def test_first_device_ops_from_threads_at_once(native: str) -> None:
    """In a fresh process the first device ops come from four threads at once: they load the
    lowering registry and build their kernels concurrently (a DataLoader's pinning thread or
    Transformers' loading threads can be first to touch the device)."""
    env = {**os.environ, "TORCH_NEURONX_NATIVE": native}
    out = subprocess.run([sys.executable, "-c", _FIRST_OPS], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
