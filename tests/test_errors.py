"""Bad input gets a clear error that names the op, dtype or device, and loses nothing."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves


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
x = torch.randn(4, 3, device="neuron", requires_grad=True)
value = torch.tensor(2.0, device="neuron", requires_grad=True)
try:
    x.index_fill(0, torch.tensor([1, 3, 1], device="neuron"), value).sum().backward()
except NotImplementedError as e:
    print("error:", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "aten._unique.default" in out.stdout
    assert "TORCH_NEURONX_DISABLE_FALLBACK=1" in out.stdout


def test_fallback_runs_on_cpu_and_is_counted():
    import torch_neuronx

    torch_neuronx.reset_metrics()
    grads = []
    for device in ("cpu", "neuron"):
        x = torch.ones(4, 3, device=device, requires_grad=True)
        value = torch.tensor(2.0, device=device, requires_grad=True)
        x.index_fill(0, torch.tensor([1, 3, 1], device=device), value).sum().backward()
        grads.append(value.grad)
    assert grads[1].device.type == "neuron"  # its backward takes the unique indices: aten._unique has no lowering
    torch.testing.assert_close(grads[1].cpu(), grads[0])
    assert torch_neuronx.metrics()["fallbacks"]["aten._unique.default"] == 1


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


def _raises_as_cpu(call: Callable[..., Any], *tensors: torch.Tensor) -> None:
    """`call` on neuron copies of `tensors` raises CPU's exception type with a message ending in
    CPU's; the copies are unchanged after, and the device keeps working."""
    moved, tensors = [t.to("neuron") for t in tensors], [t.clone() for t in tensors]
    with pytest.raises(Exception) as cpu:
        call(*[t.clone() for t in tensors])
    with pytest.raises(Exception) as neuron:
        for leaf in tree_leaves(call(*moved)):  # a deferred device-side check raises at the copy
            if isinstance(leaf, torch.Tensor):
                leaf.cpu()
    assert type(neuron.value) is type(cpu.value), neuron.value
    assert str(neuron.value).endswith(str(cpu.value)), (str(neuron.value), str(cpu.value))
    for before, after in zip(tensors, moved):
        assert after.shape == before.shape
        torch.testing.assert_close(after.cpu().reshape(-1), before.reshape(-1), rtol=0, atol=0, equal_nan=True)
    assert torch.equal((torch.ones(2, device="neuron") + 1).cpu(), torch.full((2,), 2.0))


_DIMS_65 = torch.randn([1] * 65)


@pytest.mark.parametrize(
    "call",
    [
        lambda x: torch.amax(x, 0),
        lambda x: torch.amin(x, (0, 1)),
        lambda x: torch.aminmax(x, dim=0),
        lambda x: torch.sum(x, 0),
        lambda x: torch.argmax(x, 0),
        lambda x: torch.all(x, []),
    ],
    ids=["amax", "amin", "aminmax", "sum", "argmax", "all-empty-dims"],
)
def test_reducing_named_dims_of_more_than_64_dims(call):
    _raises_as_cpu(call, _DIMS_65)


def test_full_reductions_of_more_than_64_dims_still_work():
    torch.testing.assert_close(torch.amax(_DIMS_65.to("neuron")).cpu(), torch.amax(_DIMS_65))


@pytest.mark.parametrize(
    ("shape", "dim"), [((0,), None), ((2, 0), None), ((2, 0), 1), ((0,), 0)], ids=["0", "2x0", "2x0-dim1", "0-dim0"]
)
def test_aminmax_over_an_empty_dimension(shape, dim):
    _raises_as_cpu(lambda x: torch.aminmax(x, dim=dim), torch.empty(shape))


def _outs(*dtypes: torch.dtype) -> tuple[torch.Tensor, ...]:
    return tuple(torch.full((2,), 7, dtype=dtype) for dtype in dtypes)


@pytest.mark.parametrize(
    ("call", "outs"),
    [
        (lambda x, i, a, b: torch.aminmax(x, out=(a, b)), _outs(torch.float32, torch.float64)),
        (lambda x, i, o: torch.gather(x, 1, i, out=o), _outs(torch.float64)),
        (lambda x, i, o: torch.gather(x, 1, i, out=o), _outs(torch.int32)),
        (lambda x, i, v, j: torch.sort(x, out=(v, j)), _outs(torch.float32, torch.int32)),
        (lambda x, i, o: torch.argmax(x, 1, out=o), _outs(torch.int32)),
        (lambda x, i, v, j: torch.max(x, 1, out=(v, j)), _outs(torch.float16, torch.int64)),
        (lambda x, i, o: torch.mm(x, x.T, out=o), _outs(torch.bfloat16)),
        (lambda x, i, o: torch.tril(x, out=o), _outs(torch.complex64)),
        (lambda x, i, o: torch._softmax(x, 1, False, out=o), _outs(torch.float64)),
    ],
    ids=["aminmax", "gather", "gather-int", "sort", "argmax", "max.dim", "mm", "tril", "softmax"],
)
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")  # CPU's, before it refuses
def test_structured_out_of_another_dtype(call, outs):
    """Structured kernels fix their outputs' dtype; `out` of another dtype is refused, none written."""
    _raises_as_cpu(call, torch.randn(3, 4), torch.tensor([[0, 1]]), *outs)


@pytest.mark.parametrize(
    ("dtype", "value"),
    [
        (torch.float32, 1j),
        (torch.int64, torch.tensor(1j)),
        (torch.int8, 300),
        (torch.uint8, -1.0),
        (torch.float16, 1e6),
        (torch.float16, torch.tensor(1e6)),
        (torch.int64, float("nan")),
        (torch.float32, torch.ones(1)),
    ],
    ids=["complex", "complex-tensor", "int8", "uint8-negative-float", "half", "half-tensor", "nan-int", "1-d-value"],
)
def test_masked_fill_value_that_does_not_convert(dtype, value):
    mask = torch.tensor([True, False])
    if isinstance(value, torch.Tensor):
        _raises_as_cpu(lambda x, m, v: x.masked_fill_(m, v), torch.zeros(2, dtype=dtype), mask, value)
    else:
        _raises_as_cpu(lambda x, m: x.masked_fill_(m, value), torch.zeros(2, dtype=dtype), mask)


@pytest.mark.parametrize(
    ("dtype", "lambd"),
    [(torch.float32, -0.5), (torch.float64, float("nan")), (torch.float16, 70000.0), (torch.bfloat16, float("inf"))],
)
def test_softshrink_lambda_out_of_range(dtype, lambd):
    x = torch.randn(4, dtype=dtype)
    _raises_as_cpu(lambda t: torch.nn.functional.softshrink(t, lambd), x)
    _raises_as_cpu(lambda t, o: torch._C._nn.softshrink(t, lambd, out=o), x, torch.zeros(4, dtype=dtype))


def test_softshrink_checks_lambda_on_every_call():
    """An op with a `validate` stays off the native hit path, which runs no Python."""
    x = torch.randn(4, device="neuron")
    for _ in range(3):
        torch.nn.functional.softshrink(x, 0.5)
    with pytest.raises(RuntimeError, match=r"but found -0\.5$"):
        torch.nn.functional.softshrink(x, -0.5)


@pytest.mark.parametrize(
    ("shape", "dim", "start", "length"),
    [
        ((), 0, 0, 1),
        ((3, 4, 10), 3, 0, 1),
        ((3, 4, 10), -4, 0, 1),
        ((3, 4, 10), 2, 11, 1),
        ((3, 4, 10), 2, -11, 1),
        ((3, 4, 10), 2, 0, -1),
        ((3, 4, 10), 2, 5, 6),
        ((3, 4, 10), 2, -1, 2),
    ],
)
def test_narrow_copy_arguments(shape, dim, start, length):
    """narrow_copy's own checks, which differ from narrow's (a dim past the end is a bare check)."""
    _raises_as_cpu(lambda x: torch.narrow_copy(x, dim, start, length), torch.randn(shape))


@pytest.mark.parametrize(
    ("op", "shape", "output_size"),
    [
        (torch.ops.aten.adaptive_max_pool2d, (1, 2, 3, 4), ()),
        (torch.ops.aten.adaptive_max_pool2d, (1, 1, 4, 4), (2,)),
        (torch.ops.aten.adaptive_max_pool2d, (1, 1, 1, 1), (-1, 0)),
        (torch.ops.aten.adaptive_max_pool2d, (4, 4), (2, 2)),
        (torch.ops.aten.adaptive_max_pool2d, (1, 0, 4, 4), (2, 2)),
        (torch.ops.aten.adaptive_max_pool3d, (2, 3, 4), (2, 2, 2)),
        (torch.ops.aten.adaptive_max_pool3d, (1, 1, 1, 1, 1), (-1, 0, 2)),
        (torch.ops.aten.adaptive_max_pool3d, (1, 1, 4, 4, 4), (2, 2)),
        (torch.nn.functional.adaptive_max_pool1d, (1, 1, 1), (-1,)),
    ],
)
def test_adaptive_max_pool_arguments(op, shape, output_size):
    _raises_as_cpu(lambda x: op(x, output_size), torch.randn(shape))


_LONG = torch.int64


@pytest.mark.parametrize(
    ("shape", "target", "kwargs"),
    [
        ((5, 0), torch.zeros(5, dtype=_LONG), {}),
        ((0,), torch.zeros(5, dtype=_LONG), {}),
        ((2, 5, 4), torch.zeros(2, dtype=_LONG), {}),
        ((5, 4), torch.zeros(5, 4, dtype=_LONG), {}),
        ((4,), torch.zeros(2, dtype=_LONG), {}),
        ((5, 4), torch.zeros(5), {}),
        ((5, 4), torch.zeros(5, dtype=torch.int32), {}),
        ((5, 4), torch.zeros(5), {"weight": torch.ones(5)}),
        ((5, 4), torch.zeros(5, dtype=_LONG), {"weight": torch.ones(1, 4)}),
        ((5, 4), torch.zeros(5, dtype=_LONG), {"weight": torch.ones(4, dtype=torch.float64)}),
        ((5, 4), torch.zeros(5, dtype=_LONG), {"p": 3}),
        ((5, 4), torch.full((5,), 4, dtype=_LONG), {}),
        ((5, 4), torch.full((5,), -1, dtype=_LONG), {}),
    ],
)
def test_multi_margin_loss_arguments(shape, target, kwargs):
    """PyTorch's checks in its order, not JAX's TypeError from take_along_axis."""
    weight = kwargs.pop("weight", None)
    args = (torch.randn(shape), target) + ((weight,) if weight is not None else ())
    _raises_as_cpu(lambda x, t, *w: torch.ops.aten.multi_margin_loss(x, t, weight=w[0] if w else None, **kwargs), *args)


def test_multi_margin_loss_takes_p_as_an_int():
    x, target = torch.randn(5, 4), torch.tensor([0, 1, 2, 3, 1])
    for p in (2.0, 2.9, 1.5):
        got = torch.ops.aten.multi_margin_loss(x.to("neuron"), target.to("neuron"), p)
        torch.testing.assert_close(got.cpu(), torch.ops.aten.multi_margin_loss(x, target, p))


@pytest.mark.parametrize(
    ("shape", "target"),
    [
        ((5, 0), torch.zeros(5, 4, dtype=_LONG)),
        ((0,), torch.zeros(0, dtype=_LONG)),
        ((5, 4), torch.zeros(4, dtype=_LONG)),
        ((5, 4), torch.zeros((), dtype=_LONG)),
        ((4,), torch.zeros(1, 4, dtype=_LONG)),
        ((5, 4), torch.zeros(5, 4)),
        ((5, 4), torch.full((5, 4), 4, dtype=_LONG)),
        ((5, 4), torch.full((5, 4), -2, dtype=_LONG)),
    ],
)
def test_multilabel_margin_loss_arguments(shape, target):
    _raises_as_cpu(lambda x, t: torch.nn.functional.multilabel_margin_loss(x, t), torch.randn(shape), target)


def test_soft_margin_loss_broadcast_names_input_first():
    _raises_as_cpu(torch.nn.functional.soft_margin_loss, torch.randn(5, 4), torch.randn(5))


@pytest.mark.parametrize("op", ["index_add", "index_reduce"])
@pytest.mark.parametrize(
    ("self_shape", "dim", "index", "source_shape"),
    [
        ((3, 2), 0, torch.tensor([0, 1]), (2,)),
        ((3, 2), 0, torch.tensor([0, 1]), (3, 2)),
        ((3, 2), 0, torch.tensor([0, 1]), ()),
        ((3,), 0, torch.tensor([0]), ()),
        ((), 0, torch.tensor([0]), (1,)),
        ((3, 2), 1, torch.tensor([0, 1]), (2,)),
        ((3, 2), 0, torch.tensor([[0, 1]]), (2, 2)),
        ((3, 2), 0, torch.tensor([0.0, 1.0]), (2, 2)),
    ],
)
def test_index_add_and_reduce_source_shape(op, self_shape, dim, index, source_shape):
    """index_add_'s and index_reduce_'s shared checks (index_func_meta_impl), in its order."""
    extra = ("prod",) if op == "index_reduce" else ()
    call = getattr(torch, op)
    _raises_as_cpu(
        lambda s, i, src: call(s, dim, i, src, *extra), torch.zeros(self_shape), index, torch.ones(source_shape)
    )


@pytest.mark.parametrize(("size", "stride", "offset"), [([2, 2], [200, 200], 0), ([2, 2], [1, 1], 15), ([], [], 16)])
def test_as_strided_copy_and_scatter_out_of_bounds(size, stride, offset):
    x = torch.arange(16.0).reshape(4, 4)
    _raises_as_cpu(lambda t, s: torch.as_strided_scatter(t, s, size, stride, offset), x, torch.ones(size))
    _raises_as_cpu(lambda t: torch.as_strided_copy(t, size, stride, offset), x)
