"""Bad input gets a clear error that names the op, dtype or device, and loses nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch


def test_device_mismatch_in_binary_op():
    x = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match=r"aten\.add\.Tensor.*same device.*neuron:0 and cpu"):
        x + torch.ones(3)
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (4, 3)), ((5, 1, 3), (2, 4))])
def test_shapes_that_do_not_broadcast_raise_pytorchs_error(shapes):
    """Not JAX's TypeError (which Python's `+` turns into "unsupported operand type(s)")."""
    a, b = (torch.ones(s) for s in shapes)
    with pytest.raises(RuntimeError) as cpu:
        a + b
    for op in (torch.add, torch.mul, torch.maximum):
        with pytest.raises(RuntimeError) as neuron:
            op(a.to("neuron"), b.to("neuron"))
        assert str(neuron.value).endswith(str(cpu.value)), str(neuron.value)
    with pytest.raises(RuntimeError, match=r"aten\.add\.Tensor.*must match the size"):
        a.to("neuron") + b.to("neuron")


def test_cpu_scalar_tensor_is_allowed_like_cuda():
    x = torch.ones(3, device="neuron")
    y = x * torch.tensor(2.0)
    assert y.device.type == "neuron" and y.cpu().tolist() == [2.0, 2.0, 2.0]


def test_unsupported_dtype_conversion():
    x = torch.ones(3)
    with pytest.raises(TypeError, match=r"dtype torch\.uint1 is not supported on the neuron device"):
        torch.empty(3, dtype=torch.uint1, device="neuron")
    with pytest.raises(TypeError, match=r"not supported on the neuron device"):
        x.to(device="neuron", dtype=torch.uint2)


def test_disabled_fallback_names_the_op():
    code = """
import os, torch
os.environ["TORCH_NEURONX_DISABLE_FALLBACK"] = "1"
x = torch.ones(4, device="neuron")
try:
    torch.special.bessel_j0(x)
except NotImplementedError as e:
    print("error:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "aten.special_bessel_j0.default" in out.stdout
    assert "TORCH_NEURONX_DISABLE_FALLBACK=1" in out.stdout


def test_fallback_runs_on_cpu_and_is_counted():
    import torch_neuronx

    torch_neuronx.reset_metrics()
    a = torch.randn(3, 2)
    d = torch.special.bessel_j0(a.to("neuron"))
    assert d.device.type == "neuron"
    torch.testing.assert_close(d.cpu(), torch.special.bessel_j0(a))
    assert torch_neuronx.metrics()["fallbacks"]["aten.special_bessel_j0.default"] == 1


def test_item_and_print():
    x = torch.tensor([1.5, -2.0]).to("neuron")
    assert x[0].item() == 1.5
    assert "device='neuron:0'" in repr(x)
    assert int(torch.tensor(7).to("neuron")) == 7
    assert bool(torch.tensor(True).to("neuron"))


def test_opinfo_error_inputs_slice():
    """The suite's slice of `tests/sweep_errors.py`: every OpInfo error case of these entries
    raises CPU's exception type and message on neuron (with the fallback disabled)."""
    from sweep_errors import FAST, run

    rows = run(FAST)
    assert [r for r in rows if r["outcome"] not in ("same", "skip")] == []
    assert sum(r["outcome"] == "same" for r in rows) >= 60


def test_what_jax_rejects_while_tracing_is_pytorchs_error():
    cond, a, b = torch.ones(3, dtype=torch.bool), torch.ones(4), torch.ones(3)
    with pytest.raises(RuntimeError) as cpu:
        torch.where(cond, a, b)
    with pytest.raises(RuntimeError, match=r"neuron: aten\.where\.self") as neuron:
        torch.where(cond.to("neuron"), a.to("neuron"), b.to("neuron"))
    assert str(cpu.value) in str(neuron.value)
    assert type(neuron.value) is RuntimeError  # not JAX's ValueError, which `except RuntimeError` misses


def test_torch_error_maps_jax_messages():
    from torch_neuronx.ops._common import torch_error

    axis = torch_error(ValueError("axis 5 is out of bounds for array of dimension 2"))
    assert isinstance(axis, IndexError)
    assert str(axis) == "Dimension out of range (expected to be in range of [-2, 1], but got 5)"
    shapes = torch_error(ValueError("Incompatible shapes for broadcasting: shapes=[(3,), (4,)]"))
    assert type(shapes) is RuntimeError
    assert str(shapes) == "The size of tensor a (3) must match the size of tensor b (4) at non-singleton dimension 0"
    other = torch_error(TypeError("take_along_axis indices must be of integer type"))
    assert type(other) is RuntimeError and "take_along_axis indices must be of integer type" in str(other)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: x.normal_(0, -1),
        lambda x: x.normal_(0, float("nan")),
        lambda x: x.uniform_(3, -1),
        lambda x: x.exponential_(0),
        lambda x: x.geometric_(1.5),
        lambda x: x.log_normal_(1, 0),
        lambda x: x.cauchy_(0, -2),
        lambda x: x.bernoulli_(1.5),
    ],
    ids=["normal", "normal-nan", "uniform", "exponential", "geometric", "log_normal", "cauchy", "bernoulli"],
)
def test_random_ops_check_float_arguments_before_writing(call):
    cpu, dev = torch.arange(4.0), torch.arange(4.0, device="neuron")
    with pytest.raises(RuntimeError) as expected:
        call(cpu)
    with pytest.raises(RuntimeError) as got:
        call(dev)
    assert str(got.value).endswith(str(expected.value)), (got.value, expected.value)
    assert torch.equal(dev.cpu(), cpu)  # nothing written
    assert torch.equal((dev + 1).cpu(), cpu + 1)  # the device keeps working


def test_multinomial_out_dtype_is_checked_before_sampling():
    out = torch.full((1, 2), 7.0, dtype=torch.float64, device="neuron")
    with pytest.raises(RuntimeError, match="multinomial expects Long tensor out, got: Double"):
        torch.multinomial(torch.ones(1, 2, dtype=torch.float64, device="neuron"), 2, out=out)
    assert out.cpu().eq(7).all()


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.eye(3, device="neuron").to_sparse(),
        lambda: torch.eye(3, device="neuron").to_sparse_csr(),
        lambda: torch.eye(3).to_sparse().to("neuron"),
        lambda: torch.sparse_coo_tensor(
            torch.tensor([[0, 1], [1, 0]]), torch.tensor([1.0, 2.0]), (2, 2), device="neuron"
        ),
        lambda: torch.eye(3).to_sparse_csr().to("neuron").to_dense(),  # a compressed one is refused on first use
        lambda: torch.eye(3).to_sparse_csr().to("neuron") @ torch.ones(3, 1, device="neuron"),
    ],
    ids=["to_sparse", "to_sparse_csr", "coo-to-neuron", "coo-factory", "csr-to_dense", "csr-matmul"],
)
def test_sparse_layouts_are_refused_with_what_to_do(call):
    with pytest.raises(NotImplementedError, match="sparse layouts are not supported on the neuron device: keep"):
        call()
    assert torch.equal((torch.ones(2, device="neuron") + 1).cpu(), torch.full((2,), 2.0))
