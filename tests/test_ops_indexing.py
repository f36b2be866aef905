"""Indexing family on neuron vs CPU: OpInfo entries natively (no CPU fallback), advanced
indexing and assignment forms, the static KV-cache `index_copy_`, data-dependent sizes, and
out-of-range indices raising PyTorch's errors (at the next host sync, like CUDA)."""

from __future__ import annotations

import pytest
import torch
from compare import check
from opinfo import OPS, check_op, fallback_disabled, find

from torch_neuronx.eager.dispatch import kernel_for
from torch_neuronx.ops import load

aten = torch.ops.aten
ENTRIES = [
    "__getitem__",
    "index_put",
    "_unsafe_masked_index",
    "_unsafe_masked_index_put_accumulate",
    "gather",
    "scatter",
    "scatter_add",
    "scatter_reduce.sum",
    "scatter_reduce.prod",
    "scatter_reduce.mean",
    "scatter_reduce.amax",
    "scatter_reduce.amin",
    "index_select",
    "index_add",
    "index_copy",
    "index_fill",
    "index_reduce.prod",
    "index_reduce.mean",
    "index_reduce.amax",
    "index_reduce.amin",
    "masked_scatter",
    "masked_select",
    "nonzero",
    "nonzero_static",
    "argwhere",
    "take",
    "take_along_dim",
    "put",
    "select_scatter",
    "slice_scatter",
    "diagonal_scatter",
    "as_strided_scatter",
]
# Ops of other families that an entry's samples (NEEDS) or backward formula (NEEDS_GRAD) call;
# those cases are skipped until the family providing them is merged.
NEEDS = {
    "_unsafe_masked_index": [aten.bitwise_or.Tensor],
    "_unsafe_masked_index_put_accumulate": [aten.bitwise_or.Tensor],
    "take_along_dim": [aten.remainder.Tensor],
}
NEEDS_GRAD = {
    "index_put": [aten.sum.dim_IntList],
    "scatter_reduce.prod": [aten.masked_fill.Scalar],
    "scatter_reduce.mean": [aten.masked_fill.Scalar],
    "index_fill": [aten._unique.default],
    "index_reduce.prod": [aten.masked_fill.Scalar],
    "index_reduce.mean": [aten.masked_fill.Scalar],
    "masked_scatter": [aten.masked_fill.Scalar],
    "masked_select": [aten.sum.dim_IntList],
}
MODES = [
    pytest.param(torch.float32, False, id="f32"),
    pytest.param(torch.float32, True, id="f32-grad"),
    pytest.param(torch.bfloat16, False, id="bf16"),
    pytest.param(torch.int64, False, id="i64"),
]
d = "neuron"


def opinfo_of(entry: str) -> object:
    """`scatter_reduce.sum` -> the OpInfo named scatter_reduce with variant sum."""
    name, _, variant = entry.rpartition(".")
    return find(entry) if (entry, "") in OPS else find(name, variant)


def run_entry(entry: str, dtype: torch.dtype, grad: bool) -> None:
    opinfo = opinfo_of(entry)
    if dtype not in opinfo.supported_dtypes("cpu") or (grad and not opinfo.supports_autograd):
        pytest.skip(f"{entry} does not support {dtype}{' backward' if grad else ''}")
    needed = NEEDS.get(entry, []) + (NEEDS_GRAD.get(entry, []) if grad else [])
    missing = [str(op) for op in needed if op not in load()]
    if missing:
        pytest.skip(f"needs {missing} from another op family")
    with fallback_disabled():
        assert check_op(opinfo, dtype, grad=grad, max_samples=6) > 0


@pytest.mark.parametrize(("dtype", "grad"), MODES)
@pytest.mark.parametrize("entry", ENTRIES)
def test_opinfo(entry: str, dtype: torch.dtype, grad: bool) -> None:
    run_entry(entry, dtype, grad)


# ---- hand-written forms -----------------------------------------------------------------


def x34() -> torch.Tensor:
    return torch.arange(12.0).reshape(3, 4)


def test_advanced_getitem_forms() -> None:
    i, j = torch.tensor([2, 0, -1]), torch.tensor([1, 3, 0])
    with fallback_disabled():
        check(lambda x, i, j: (x[i], x[:, j], x[i, j], x[None, i], x[..., j]), x34(), i, j)
        check(lambda x, i: x[i[:, None], i[None, :1]], torch.arange(24.0).reshape(4, 6), torch.tensor([1, 3]))
        # non-adjacent advanced indices move the broadcast dims to the front, as in numpy
        check(lambda x, i: x[i, :, i], torch.arange(60.0).reshape(3, 4, 5), torch.tensor([0, 2]))
        check(lambda x: x[x > 4], x34())
        check(lambda x: x[torch.tensor([True, False, True])], x34())


def test_setitem_forms() -> None:
    def assign(x: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        x[i] = v
        x[:, i[:2]] = 7.0
        x[x > 9] = -1.0
        x[x < 0] = torch.tensor(5.0, device=x.device)
        x.index_put_((i,), v, accumulate=True)
        return x

    with fallback_disabled():
        check(assign, torch.arange(20.0).reshape(4, 5), torch.tensor([0, 2, -1]), torch.ones(5))
        check(lambda x, v: x.__setitem__(x > 5, v) or x, x34(), torch.arange(6.0) * 10)


def test_mask_mixed_with_index() -> None:
    def fn(x: torch.Tensor, m: torch.Tensor, i: torch.Tensor, v: torch.Tensor) -> tuple:
        x[m, i] = v
        return x[m, i], x[m][:, :2]

    mask = torch.tensor([[True, False, True], [False, True, True]])
    with fallback_disabled():
        check(fn, torch.arange(24.0).reshape(2, 3, 4), mask, torch.tensor([1, 3, 0, 2]), -torch.arange(4.0))


def test_unsafe_masked_index_forms() -> None:
    """Eager runs PyTorch's composite of these; compile graphs reach the lowerings directly."""

    def fn(x: torch.Tensor, m: torch.Tensor, i: torch.Tensor, j: torch.Tensor, v: torch.Tensor) -> tuple:
        get, put = aten._unsafe_masked_index.default, aten._unsafe_masked_index_put_accumulate.default
        if x.device.type == "neuron":
            get, put = kernel_for(get), kernel_for(put)
        return get(x, m, [i, j], -1.0), put(x, m, [i, j], v)

    mask = torch.tensor([[True, False, True], [True, True, False]])
    rows = torch.tensor([[0, 9, 2], [-1, 1, -7]])  # out of range only where the mask is False
    cols = torch.tensor([[3, 0, 1], [2, 0, 8]])
    with fallback_disabled():
        check(fn, x34(), mask, rows, cols, torch.arange(6.0).view(2, 3))


def test_static_kv_cache_index_copy() -> None:
    def update(cache: torch.Tensor, position: torch.Tensor, new: torch.Tensor, seen: int) -> torch.Tensor:
        cache.index_copy_(2, position, new)
        return cache[:, :, :seen]

    cache = torch.zeros(1, 2, 8, 4)
    with fallback_disabled():
        check(update, cache, torch.tensor([3]), torch.randn(1, 2, 1, 4), 4)
        check(update, cache, torch.tensor([0, 1, 2]), torch.randn(1, 2, 3, 4), 3)


def test_data_dependent_sizes() -> None:
    with fallback_disabled():
        check(lambda x: (torch.nonzero(x), torch.argwhere(x), x.nonzero(as_tuple=True)), torch.tensor([[0, 1], [2, 0]]))
        check(lambda x: x.masked_select(x > 3), x34())
        check(lambda x, m: torch.masked_select(x, m), x34(), torch.tensor([True, False, True, True]))
        check(lambda r: torch.repeat_interleave(r), torch.tensor([2, 0, 3]))
        check(lambda x, r: x.repeat_interleave(r, dim=0), x34(), torch.tensor([1, 0, 2]))
        check(lambda x: torch.nonzero(x), torch.zeros(3, 0))


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_include_self(reduce: str, include_self: bool) -> None:
    def fn(x: torch.Tensor, index: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.scatter_reduce(0, index, src, reduce, include_self=include_self)

    index = torch.tensor([0, 1, 0, 1, 2, 1])
    with fallback_disabled():
        check(fn, torch.full((4,), 2.0), index, torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))
        check(fn, torch.tensor([5, -3, 7, 1]), index, torch.tensor([-1, 4, 9, 2, -6, 3]))


# ---- bad input --------------------------------------------------------------------------


def test_out_of_range_indices_raise_at_sync() -> None:
    x = x34().to(d)
    bad = torch.tensor([5]).to(d)
    cases = [
        (IndexError, "index 5 is out of bounds for dimension 0 with size 3", lambda: x[bad]),
        (IndexError, "aten.index.Tensor", lambda: x[:, torch.tensor([-5]).to(d)]),
        (RuntimeError, "aten.gather.default: index 5", lambda: x.gather(0, bad[None])),
        (RuntimeError, "index 5 is out of bounds", lambda: x.scatter(0, bad[None], 1.0)),
        (RuntimeError, "id=5 axis_dim=3", lambda: x.index_select(0, bad)),
        (IndexError, "index_copy_(): index 5", lambda: x.clone().index_copy_(0, bad, torch.ones(1, 4).to(d))),
        (RuntimeError, "aten.index_add", lambda: x.clone().index_add_(0, bad, torch.ones(1, 4).to(d))),
        (IndexError, "tried to access index 12", lambda: x.take(torch.tensor([12]).to(d))),
        (IndexError, "tried to access index -13", lambda: x.clone().put_(torch.tensor([-13]).to(d), x[0, :1])),
    ]
    for error, message, fn in cases:
        with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
            fn().cpu()
    assert torch.equal(x[torch.tensor([2]).to(d)].cpu(), x34()[[2]])  # later work is unaffected


def test_out_of_range_write_leaves_tensor_and_reports() -> None:
    x = x34().to(d)
    x[torch.tensor([1, 7]).to(d)] = 0.0
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 0 with size 3"):
        torch.neuron.synchronize()
    expect = x34()
    expect[1] = 0.0
    assert torch.equal(x.cpu(), expect)  # the in-range row was written, nothing out of bounds


def test_static_errors() -> None:
    x = x34().to(d)
    with pytest.raises(IndexError, match="shape of the mask"):
        x[torch.tensor([True, False]).to(d)]
    with pytest.raises(RuntimeError, match="same scalar type"):
        x.index_add(0, torch.tensor([0]).to(d), torch.ones(1, 4, dtype=torch.int64).to(d))
    with pytest.raises(RuntimeError, match="source and destination dtypes match"):
        x.index_put_((torch.tensor([0]).to(d),), torch.ones(4, dtype=torch.float64).to(d))
    with pytest.raises(RuntimeError, match="Index tensor must have the same number of dimensions"):
        x.gather(0, torch.tensor([0]).to(d))
    with pytest.raises(RuntimeError, match="Number of elements of source < number of ones in mask"):
        x.masked_scatter(x > 0, torch.ones(3).to(d)).cpu()
