"""The native hit path (torch_neuronx/csrc/native.cpp) against PyTorch CPU, and the pure-Python path
(TORCH_NEURONX_NATIVE=0) on a representative slice of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

import torch_neuronx
from torch_neuronx.runtime import native

NATIVE = native.requested()
needs_native = pytest.mark.skipif(not NATIVE, reason="TORCH_NEURONX_NATIVE=0")


def test_the_requested_path_is_the_one_running() -> None:
    """CI must not fall back to the Python path silently when the module fails to build."""
    assert (native.module() is not None) == NATIVE, native.status()


def _calls(op: str) -> int:
    return torch_neuronx.metrics()["op_calls"].get(op, 0)


@needs_native
def test_repeated_calls_are_served_natively_and_counted() -> None:
    a, b = torch.randn(8, 8), torch.randn(8, 8)
    da, db = a.to("neuron"), b.to("neuron")
    before = dict(native.module().hit_counts())
    for _ in range(5):
        out = da * db + 0.5
    torch.testing.assert_close(out.cpu(), a * b + 0.5)
    hits = native.module().hit_counts()
    assert hits.get("aten.mul.Tensor", 0) - before.get("aten.mul.Tensor", 0) >= 3
    assert _calls("aten.mul.Tensor") >= 5  # metrics count native hits too
    assert torch_neuronx.metrics()["off_jax_fast_path"] == 0


@pytest.mark.parametrize("scalar", [2, 2.5, True, -0.0, float("inf")])
def test_scalars_change_without_stale_results(scalar: object) -> None:
    """Python numbers and CPU scalar tensors are executable inputs or key parts, never baked in."""
    x = torch.arange(6.0).reshape(2, 3)
    d = x.to("neuron")
    for value in (scalar, 3, 0.25, scalar):
        torch.testing.assert_close((d * value).cpu(), x * value, equal_nan=True)
        t = torch.tensor(value, dtype=torch.float32)
        torch.testing.assert_close((d + t).cpu(), x + t, equal_nan=True)
    assert torch.equal((d * -0.0).cpu().signbit(), (x * -0.0).signbit())


def test_complex_and_real_scalars_do_not_share_an_executable() -> None:
    """A complex Python scalar is a complex executable input: a call with a real one after it
    needs its own executable (it used to hit the complex one and fail JAX's argument check)."""
    x = torch.arange(4.0)
    d = x.to("neuron")
    for value in (1 + 0j, 2.5, 2j, -1.0):
        torch.testing.assert_close((d * value).cpu(), x * value)


def test_views_in_place_ops_and_aliases() -> None:
    x = torch.randn(6, 6)
    d = x.to("neuron")
    for _ in range(3):  # the second and third calls hit
        d[1:4, ::2].mul_(2.0)
        x[1:4, ::2].mul_(2.0)
        d.t()[0].add_(1)
        x.t()[0].add_(1)
    torch.testing.assert_close(d.cpu(), x)
    outs = torch.split(d, 2)
    assert [o.data_ptr() for o in outs] == [d.data_ptr() + i * 2 * 6 * 4 for i in range(3)]


def test_multiple_and_list_outputs() -> None:
    x = torch.randn(5, 7)
    d = x.to("neuron")
    for _ in range(3):
        values, indices = d.max(dim=1)
        torch.testing.assert_close(values.cpu(), x.max(dim=1).values)
        assert torch.equal(indices.cpu(), x.max(dim=1).indices)
        parts = torch._foreach_mul([d, d], 2.0)
        torch.testing.assert_close(parts[1].cpu(), x * 2)


def test_storage_memory_is_freed_when_the_tensor_dies() -> None:
    d = torch.randn(64, 64, device="neuron")
    torch.neuron.synchronize()
    before = torch.neuron.memory_allocated()
    for _ in range(3):
        out = d @ d
        assert torch.neuron.memory_allocated() == before + out.untyped_storage().nbytes()
        del out
        assert torch.neuron.memory_allocated() == before


def test_empty_matches_cpu_metadata() -> None:
    for make in (
        lambda dev: torch.empty(2, 3, 4, 5, device=dev, memory_format=torch.channels_last),
        lambda dev: torch.empty_strided((2, 3), (1, 2), device=dev, dtype=torch.int64),
        lambda dev: torch.empty(0, 3, device=dev, dtype=torch.bfloat16),
    ):
        got, want = make("neuron"), make("cpu")
        assert (got.shape, got.stride(), got.dtype) == (want.shape, want.stride(), want.dtype)
        assert got.untyped_storage().nbytes() == want.untyped_storage().nbytes()
    assert torch.equal(torch.zeros_like(got).cpu(), torch.zeros(0, 3, dtype=torch.bfloat16))


def test_errors_on_a_hit_path_op_keep_pytorch_types() -> None:
    d = torch.randn(3, device="neuron")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="shape '\\[4\\]' is invalid for input of size 3"):
            d.view(4)  # a view: the CPU kernel's error, through the native kernel
        index = torch.tensor([5], device="neuron")
        with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3"):
            d[index].cpu()  # a device-side check, raised at the sync
        with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 0 with size 3"):
            d.reshape(3, 1).gather(0, index.reshape(1, 1)).cpu()


def test_threads_issue_ops_at_once() -> None:
    """Four threads on their own tensors give what one thread gives."""
    inputs = [torch.randn(32, 32) for _ in range(4)]
    results: dict[int, torch.Tensor] = {}

    def work(i: int) -> None:
        d = inputs[i].to("neuron")
        for _ in range(50):
            d = torch.tanh(d @ d.t() * 0.01 + 1)
        results[i] = d.cpu()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        for _ in range(50):
            x = torch.tanh(x @ x.t() * 0.01 + 1)
        torch.testing.assert_close(results[i], x)


def test_kernels_built_before_the_first_device_op() -> None:
    """The native kernel takes over only once it is configured, whoever builds a kernel first."""
    code = (
        "import torch, torch_neuronx\n"
        "from torch_neuronx.eager import dispatch\n"
        "dispatch.kernel_for(torch.ops.aten.scalar_tensor.default)\n"
        "assert torch.scalar_tensor(2.5, device='neuron').cpu().item() == 2.5\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]


PYTHON_PATH_SLICE = [
    "test_views.py",
    "test_memory.py",
    "test_ops_factory_random.py",
    "test_training.py",
    "test_custom_ops.py::test_rms_norm_matches_torch",  # custom ops: the Python autograd kernel
    "test_custom_ops.py::test_gradients_from_jax_vjp_match_torch_autograd",
    "test_custom_ops.py::test_mutating_op_writes_through_views",
]


@pytest.mark.after_suite
@pytest.mark.skipif(not NATIVE, reason="this run is already the pure-Python path")
def test_pure_python_path_slice() -> None:
    """The pure-Python path stays complete: a representative slice of the suite runs on it."""
    tests = Path(__file__).parent
    env = {**os.environ, "TORCH_NEURONX_NATIVE": "0"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-x",
        "-p",
        "no:cacheprovider",
        *(str(tests / t) for t in PYTHON_PATH_SLICE),
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tests.parent)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
