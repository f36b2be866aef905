"""Exact memory accounting and out-of-memory behaviour (DESIGN 9)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import torch


def test_allocated_returns_to_start():
    gc.collect()
    start = torch.neuron.memory_allocated()
    x = torch.empty(1000, device="neuron")
    assert torch.neuron.memory_allocated() == start + 4000
    y = x[10:20]  # a view allocates nothing
    assert torch.neuron.memory_allocated() == start + 4000
    z = (x + 1).to(torch.float16)
    assert torch.neuron.memory_allocated() >= start + 4000 + 2000
    del x, y, z
    gc.collect()
    assert torch.neuron.memory_allocated() == start


def test_peak_and_reset():
    torch.neuron.reset_peak_memory_stats()
    base = torch.neuron.memory_allocated()
    big = torch.empty(10_000, device="neuron")
    del big
    assert torch.neuron.max_memory_allocated() >= base + 40_000
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    stats = torch.neuron.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.neuron.memory_allocated()


def test_oom_raises_and_keeps_live_tensors():
    code = """
import torch
keep = torch.arange(1000, dtype=torch.float32).to('neuron')
before = torch.neuron.memory_allocated()
try:
    torch.empty(2**28, device='neuron')
except torch.OutOfMemoryError as e:
    print('OOM', 'TORCH_NEURONX_MEMORY_GB' in str(e))
try:
    keep * 1e9 + torch.ones(2**27, device='neuron')
except torch.OutOfMemoryError:
    print('OOM2')
assert torch.neuron.memory_allocated() == before
assert keep.cpu().equal(torch.arange(1000, dtype=torch.float32))
print('intact', torch.neuron.memory_stats()['num_ooms'])
"""
    env = dict(os.environ, TORCH_NEURONX_MEMORY_GB="0.25")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.split() == ["OOM", "True", "OOM2", "intact", "2"]


def test_executable_cache_is_bounded(monkeypatch):
    """Growing shapes (generate's input_ids) keep at most MAX_EXECUTABLES_PER_OP per op, still correct."""
    from torch_neuronx.eager import dispatch, kernel

    monkeypatch.setattr(kernel, "MAX_EXECUTABLES_PER_OP", 4)
    for n in range(1, 11):
        x = torch.arange(float(n))
        assert (x.to("neuron") * 3).cpu().tolist() == (x * 3).tolist()
    assert len(dispatch.KERNELS[torch.ops.aten.mul.Tensor].cache) <= 4


def test_executables_are_bounded_across_ops(monkeypatch):
    """The process-wide bound drops the oldest executable of any op; every result stays right."""
    import torch_neuronx
    from torch_neuronx.eager import dispatch, kernel

    monkeypatch.setattr(kernel, "MAX_EXECUTABLES", 6)  # fewer than earlier tests left: those go first
    for n in range(1, 9):
        x = torch.arange(float(n))
        d = x.to("neuron")
        assert (d * 3).cpu().tolist() == (x * 3).tolist()
        assert (d - 1).cpu().tolist() == (x - 1).tolist()
    assert torch_neuronx.metrics()["live_executables"] <= 6
    mul = dispatch.KERNELS[torch.ops.aten.mul.Tensor].cache
    sub = dispatch.KERNELS[torch.ops.aten.sub.Tensor].cache
    assert 0 < len(mul) + len(sub) <= 6
    x = torch.arange(1.0, 4.0)  # a shape whose executables were dropped builds them again
    assert (x.to("neuron") * 3).cpu().tolist() == (x * 3).tolist()


def test_synchronize_waits_for_dropped_results():
    """A result dropped at once (a benchmark loop) may still be computing; synchronize waits for it."""
    from torch_neuronx.runtime.memory import memory

    a = torch.randn(512, 512, device="neuron")
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    for _ in range(3):
        a @ a
    pending = [buffer for buffer, _ in memory().retired]
    assert pending and torch.neuron.memory_allocated() == before  # dead storages are not counted
    torch.neuron.synchronize()
    assert all(buffer.is_ready() for buffer in pending)
    assert memory().retired == []


def test_buffers_still_computing_are_not_rescanned_on_every_allocation():
    from torch_neuronx.runtime.memory import _PRUNE_COUNT, DeviceMemory

    class Computing:  # a retired buffer whose work has not finished
        checks = 0

        def is_deleted(self) -> bool:
            return False

        def is_ready(self) -> bool:
            Computing.checks += 1
            return False

    memory = DeviceMemory()
    for _ in range(_PRUNE_COUNT):
        memory._retire(Computing(), 4)
    for _ in range(10):
        memory.allocate(4)
    assert Computing.checks == _PRUNE_COUNT  # one scan; the next after as many more retire
    for _ in range(_PRUNE_COUNT):
        memory._retire(Computing(), 4)
    memory.allocate(4)
    assert Computing.checks == 3 * _PRUNE_COUNT and len(memory.retired) == 2 * _PRUNE_COUNT


def test_in_place_ops_donate_their_storage_buffer():
    """An in-place op hands its target's old buffer to XLA to write over (donation): the new
    values land, work still reading the old values sees them, and storages the schema lets the
    op write but the lowering leaves alone (`_fused_adamw_`'s grads) stay readable."""
    from torch_neuronx.runtime.memory import memory

    x = torch.randn(256, 256, device="neuron")
    original = x.cpu()
    pending = [x @ x for _ in range(4)]  # queued reads of x's current buffer
    before = memory()[x.untyped_storage().data_ptr()].buffer
    x.add_(1.0)
    x[3:7].mul_(-2.0)
    want = original + 1.0
    want[3:7].mul_(-2.0)
    assert before.is_deleted()  # donated, not copied
    assert torch.equal(x.cpu(), want)
    for p in pending:
        torch.testing.assert_close(p.cpu(), original @ original, rtol=1e-4, atol=1e-3)
    params = [torch.randn(8, device="neuron") for _ in range(3)]
    grads = [torch.randn(8, device="neuron") for _ in range(3)]
    cpu_params = [p.cpu() for p in params]
    cpu_grads = [g.cpu() for g in grads]
    for group, fused in ((params, grads), (cpu_params, cpu_grads)):
        opt = torch.optim.AdamW(group, lr=0.1, fused=True)
        for p, g in zip(group, fused):
            p.grad = g
        opt.step()
        opt.step()
    for p, g, cp, cg in zip(params, grads, cpu_params, cpu_grads):
        torch.testing.assert_close(p.cpu(), cp)
        assert torch.equal(g.cpu(), cg)


def test_freed_memory_is_kept_for_reuse_until_empty_cache():
    """On the CPU platform device memory is the host heap: freed blocks stay for reuse (no page
    faults on the next executable's outputs) and `torch.neuron.empty_cache()` returns them."""
    code = """
import gc, torch
from torch_neuronx.runtime import host_heap
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 // 2**20
x = [torch.randn(1024, 1024, device="neuron") for _ in range(64)]  # 256 MiB
torch.neuron.synchronize()
del x
gc.collect()
kept = rss()
torch.neuron.empty_cache()
print(host_heap.retain_freed_blocks(), kept - rss())
"""
    env = {**os.environ, "TORCH_NEURONX_RETAIN_HOST_MEMORY": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    retained, released = out.stdout.split()
    assert retained == "True" and int(released) > 128, out.stdout
    env["TORCH_NEURONX_RETAIN_HOST_MEMORY"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False"
