"""The `neuron` device as PyTorch sees it: registration, torch.neuron, accelerator, RNG, memory."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
import torch


def test_plain_import_torch_autoloads_backend():
    code = "import torch; x = torch.randn(2, 3, device='neuron') * 2; print(x.device, tuple(x.shape))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "neuron:0 (2, 3)"


def test_import_torch_does_not_import_jax():
    code = "import sys, torch; print('jax' in sys.modules, torch.neuron.is_available())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False True"


def test_autoload_disabled_still_allows_explicit_import():
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    code = "import torch, torch_neuronx; print(torch.ones(2, device='neuron').sum().item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert out.stdout.strip() == "2.0"


def test_device_module_api():
    n = torch.neuron
    assert n.is_available() and n.device_count() == 1 and n.current_device() == 0
    assert torch.get_device_module("neuron") is n
    n.set_device(0)
    with n.device(0):
        pass
    with pytest.raises(ValueError, match="neuron:0"):
        n.set_device(1)
    assert n.is_bf16_supported()
    assert torch.bfloat16 in n.get_amp_supported_dtype()
    props = n.get_device_properties(0)
    assert props.total_memory > 0 and "NeuronCore" in props.name == n.get_device_name()
    free, total = n.mem_get_info()
    assert 0 < free <= total
    assert not n._is_in_bad_fork()
    n._lazy_init()
    assert n.is_initialized()


def test_accelerator_resolves_to_neuron():
    assert torch.accelerator.current_accelerator().type == "neuron"
    assert torch.accelerator.device_count() == 1
    assert torch.accelerator.current_device_index() == 0
    torch.accelerator.synchronize()


def test_tensor_module_storage_methods():
    x = torch.randn(3)
    d = x.neuron()
    assert d.is_neuron and d.device == torch.device("neuron", 0)
    m = torch.nn.Linear(2, 2).neuron()
    assert m.weight.device.type == "neuron"
    assert d.untyped_storage().is_neuron
    torch.testing.assert_close(d.cpu(), x)


def test_rng_reproducible_and_state_round_trip():
    torch.manual_seed(123)
    a = torch.randn(5, device="neuron")
    torch.manual_seed(123)
    b = torch.randn(5, device="neuron")
    torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    c = torch.rand(7, device="neuron")
    torch.neuron.set_rng_state(state)
    d = torch.rand(7, device="neuron")
    torch.testing.assert_close(c.cpu(), d.cpu(), rtol=0, atol=0)
    torch.neuron.set_rng_state_all(torch.neuron.get_rng_state_all())
    torch.neuron.manual_seed_all(5)
    assert torch.neuron.initial_seed() == 5
    with pytest.raises(ValueError, match="16 bytes"):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_streams_and_events():
    s = torch.neuron.Stream()
    start, end = torch.neuron.Event(enable_timing=True), torch.neuron.Event(enable_timing=True)
    with torch.neuron.stream(s):
        start.record()
        y = torch.ones(64, 64, device="neuron") + 1
        end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0 and end.query()
    assert torch.neuron.current_stream() == torch.neuron.default_stream()
    assert float(y.sum()) == 64 * 64 * 2


def test_autocast_bf16():
    a, b = torch.randn(4, 8), torch.randn(8, 3)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = a.to("neuron") @ b.to("neuron")
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu().float(), a @ b, rtol=2e-2, atol=2e-2)


def test_concurrent_transfers_from_threads():
    tensors = [torch.randn(256) for _ in range(32)]
    results: dict[int, torch.Tensor] = {}

    def move(i: int) -> None:
        results[i] = tensors[i].to("neuron")

    threads = [threading.Thread(target=move, args=(i,)) for i in range(32)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(tensors):
        torch.testing.assert_close(results[i].cpu(), x)
    addresses = {r.data_ptr() for r in results.values()}
    assert len(addresses) == 32


def test_pin_memory_and_dataloader():
    x = torch.randn(4)
    pinned = x.pin_memory()
    assert pinned.is_pinned() and not x.is_pinned() and torch.equal(pinned, x)
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    batches = [b.to("neuron", non_blocking=True) for (b,) in torch.utils.data.DataLoader(data, 2, pin_memory=True)]
    torch.testing.assert_close(torch.cat([b.cpu() for b in batches]), torch.arange(8.0).reshape(4, 2))


def _thread_affinity() -> dict[str, set[int]]:
    """This process's threads by name (their /proc comm): the union of the CPUs they may use."""
    seen: dict[str, set[int]] = {}
    for tid in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{tid}/comm") as f:
            name = f.read().strip()
        seen.setdefault(name, set()).update(os.sched_getaffinity(int(tid)))
    return seen


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to keep one for the host")
def test_xla_threads_leave_the_host_a_core():
    torch.ones(1, device="neuron").cpu()  # the CPU client and its threads exist
    allowed = os.sched_getaffinity(0)
    host = max(allowed)  # TORCH_NEURONX_HOST_CORES=1 keeps the last allowed core
    xla = {name: cpus for name, cpus in _thread_affinity().items() if name.startswith("tf_XLA")}
    assert xla, "found no XLA:CPU threads"
    assert all(host not in cpus for cpus in xla.values()), xla
    assert os.sched_getaffinity(0) == allowed  # the Python thread keeps every core


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores to keep one for the host")
def test_large_work_spreads_xla_threads_until_ready():
    from torch_neuronx.runtime import platform

    torch.ones(1, device="neuron").cpu()
    threads = platform._xla_threads
    allowed = os.sched_getaffinity(0)

    def xla_cores() -> set[int]:
        return set().union(*(os.sched_getaffinity(t) for t in threads.threads))

    assert xla_cores() == allowed - {max(allowed)}
    running = threading.Event()
    threads.spread_until_ready(None, lambda _: running.wait())  # a large executable in flight
    assert xla_cores() == allowed
    running.set()
    threads.waiter.submit(lambda: None).result()  # the waiter saw it finish
    assert xla_cores() == allowed - {max(allowed)}


def test_large_compiled_graph_runs_spread(monkeypatch):
    from torch_neuronx.compile import executable
    from torch_neuronx.runtime import cores

    spread = []
    monkeypatch.setattr(cores, "LARGE_FLOPS", 0.0)  # every graph counts as large
    monkeypatch.setattr(executable, "spread_until_ready", spread.append)
    torch._dynamo.reset()
    x = torch.randn(8, 8)
    out = torch.compile(lambda t: (t @ t).relu(), backend="neuron")(x.to("neuron"))
    torch.testing.assert_close(out.cpu(), (x @ x).relu())
    assert len(spread) == 1


def test_large_eager_op_runs_spread_on_every_call(monkeypatch):
    """A large eager executable (a 1024x1024 matmul) spreads XLA's threads on every call, so
    its calls stay on the Python path, which does that, rather than the native hit path."""
    from torch_neuronx.eager import kernel
    from torch_neuronx.runtime import cores

    spread = []
    monkeypatch.setattr(cores, "LARGE_FLOPS", 0.0)  # every new executable counts as large
    monkeypatch.setattr(kernel, "spread_until_ready", spread.append)
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    da, db = a.to("neuron"), b.to("neuron")
    for _ in range(3):
        out = torch.mm(da, db)
    torch.testing.assert_close(out.cpu(), a @ b)
    assert len(spread) == 3


def test_host_cores_setting(monkeypatch):
    from torch_neuronx.runtime import cores

    started = []
    allowed = os.sched_getaffinity(0)
    for keep in ("0", str(len(allowed))):  # none kept; or all, which would leave XLA nothing
        monkeypatch.setenv("TORCH_NEURONX_HOST_CORES", keep)
        assert cores.start(lambda: started.append(1)) is None
    assert started == [1, 1]
    monkeypatch.setenv("TORCH_NEURONX_HOST_CORES", "all")
    with pytest.raises(ValueError, match="TORCH_NEURONX_HOST_CORES must be a whole number of cores, got 'all'"):
        cores.host_cores()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.complex64])
def test_host_copy_into_whole_storage(dtype: torch.dtype) -> None:
    """copy_ from host into a tensor that is its whole storage: views see the new values, work
    queued before the copy reads the old ones, the device copy is private (the host tensor may
    change at once), and later in-place ops write it without touching the host tensor."""
    a = torch.arange(12).to(dtype).to("neuron")
    row = a.view(3, 4)[1]
    before = a * 2
    src = torch.full((12,), 7).to(dtype)
    a.copy_(src)
    src.fill_(0)
    a.add_(1)
    assert torch.equal(a.cpu(), torch.full((12,), 8).to(dtype))
    assert torch.equal(row.cpu(), torch.full((4,), 8).to(dtype))
    assert torch.equal(before.cpu(), torch.arange(12).to(dtype) * 2)
    assert torch.equal(src, torch.zeros(12, dtype=dtype))
    part = torch.zeros(12, dtype=dtype).to("neuron")
    part[2:6].copy_(torch.ones(4, dtype=dtype))  # a part of its storage: a device copy
    assert torch.equal(part.cpu(), torch.tensor([0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0]).to(dtype))
    bits = torch.zeros(4, device="neuron").view(torch.int32)  # its buffer holds float32 elements
    bits.copy_(torch.tensor([1065353216] * 4, dtype=torch.int32))
    assert torch.equal(bits.view(torch.float32).cpu(), torch.ones(4))
