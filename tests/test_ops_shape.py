"""Shape family on neuron vs CPU: OpInfo entries natively (no CPU fallback), cat's promotion and
legacy empty tensors, padding backward ops, the `*_copy` forms compile graphs use, bad input."""

from __future__ import annotations

import re

import pytest
import torch
from compare import check
from opinfo import OPS, check_op, fallback_disabled, find

from torch_neuronx.ops import load

aten = torch.ops.aten
ENTRIES = [
    "cat",
    "stack",
    "hstack",
    "vstack",
    "dstack",
    "column_stack",
    "flip",
    "fliplr",
    "flipud",
    "rot90",
    "roll",
    "constant_pad_nd",
    "nn.functional.pad.constant",
    "nn.functional.pad.reflect",
    "nn.functional.pad.replicate",
    "nn.functional.pad.replicate_negative",
    "nn.functional.pad.circular",
    "tril",
    "triu",
    "repeat",
    "repeat_interleave",
    "tile",
    "diag",
    "diag_embed",
    "diagflat",
    "diagonal_copy",
    "split_with_sizes_copy",
    "unbind_copy",
    "narrow_copy",
    "expand_copy",
    "permute_copy",
    "view_copy",
    "t_copy",
    "transpose_copy",
    "squeeze_copy",
    "unsqueeze_copy",
    "unfold_copy",
    "as_strided_copy",
    "alias_copy",
    "block_diag",
]
# Ops of other families that an entry's backward formula calls (skipped until merged).
NEEDS_GRAD = {
    "repeat_interleave": [aten.sum.dim_IntList],
    "block_diag": [aten.sum.dim_IntList],
    "repeat": [aten.sum.dim_IntList],
    "tile": [aten.sum.dim_IntList],
    "expand_copy": [aten.sum.dim_IntList],
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


@pytest.mark.parametrize(("dtype", "grad"), MODES)
@pytest.mark.parametrize("entry", ENTRIES)
def test_opinfo(entry: str, dtype: torch.dtype, grad: bool) -> None:
    opinfo = opinfo_of(entry)
    if dtype not in opinfo.supported_dtypes("cpu") or (grad and not opinfo.supports_autograd):
        pytest.skip(f"{entry} does not support {dtype}{' backward' if grad else ''}")
    missing = [str(op) for op in (NEEDS_GRAD.get(entry, []) if grad else []) if op not in load()]
    if missing:
        pytest.skip(f"needs {missing} from another op family")
    with fallback_disabled():
        assert check_op(opinfo, dtype, grad=grad, max_samples=6) > 0


def test_cat_promotes_and_skips_legacy_empty() -> None:
    with fallback_disabled():
        check(lambda a, b: torch.cat([a, b]), torch.arange(3), torch.ones(2, dtype=torch.bfloat16))
        check(lambda a, b: torch.cat([a, b], dim=1), torch.ones(2, 2, dtype=torch.bool), torch.arange(4).view(2, 2))
        check(lambda a, b: torch.cat([a, b, a]), torch.zeros(0, dtype=torch.float64), torch.ones(2, 3))
        check(lambda a: torch.cat([a, a], dim=-1), torch.zeros(2, 0))
        check(lambda a, b: torch.stack([a, b], dim=-1), torch.ones(2, 3), torch.arange(6).view(2, 3))


def test_chunk_cat_pads_chunks_and_joins_them() -> None:
    """FSDP2's reduce-scatter copy-in: one executable, `out=` included, CPU's errors."""
    cat = torch.ops.aten._chunk_cat
    with fallback_disabled():
        check(lambda a, b: cat([a, b], 0, 2), torch.randn(5, 3), torch.arange(9.0).view(3, 3))
        check(lambda a, b: cat([a, b], 1, 3), torch.randn(2, 4, 3), torch.randn(2, 7))
        check(
            lambda a, b: cat([a, b], -1, 4),
            torch.randn(3, 5, dtype=torch.bfloat16),
            torch.randn(3, 8, dtype=torch.bfloat16),
        )
        check(
            lambda a, b, out: cat.out([a, b], 0, 2, out=out), torch.randn(1024, 6), torch.randn(7), torch.empty(2, 3076)
        )
        check(lambda a, b, out: cat.out([a, b], 0, 2, out=out), torch.randn(4, 2), torch.randn(3), torch.empty(0))
    cases = [
        (([torch.ones(2)], 0, 0), RuntimeError, "_chunk_cat expects positive num_chunks"),
        (([], 0, 2), RuntimeError, "_chunk_cat expects a non-empty input tensor list"),
        (([torch.ones(0)], 0, 2), RuntimeError, "_chunk_cat expects non-empty tensor"),
        (([torch.ones(2), torch.ones(2, dtype=torch.float64)], 0, 2), RuntimeError, "with the same dtype"),
        (([torch.ones(2, 3), torch.ones(3, 3)], 1, 2), RuntimeError, "same sizes of 0,...,dim-1 dimensions"),
        (([torch.ones(2, 3), torch.ones(3)], -1, 2), RuntimeError, "non-negative dim when input tensors have"),
        (([torch.ones(2, 3), torch.ones(3)], 1, 2), RuntimeError, "dim < ndim for all input tensors"),
        (([torch.ones(2, 3)], 2, 2), IndexError, "Dimension out of range"),
    ]
    for (tensors, dim, chunks), error, message in cases:
        for device in ("cpu", "neuron"):
            with pytest.raises(error, match=re.escape(message)):
                cat([t.to(device) for t in tensors], dim, chunks)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
def test_pad_backward_native(mode: str) -> None:
    def padded(x: torch.Tensor, g: torch.Tensor) -> tuple:
        x = x.requires_grad_()
        y = torch.nn.functional.pad(x, (2, 1, 1, 2), mode=mode)
        (grad,) = torch.autograd.grad(y, x, g)
        return y.detach(), grad

    with fallback_disabled():
        check(padded, torch.randn(2, 3, 4, 5), torch.randn(2, 3, 7, 8))


def test_copy_forms_direct() -> None:
    x = torch.arange(24.0).reshape(2, 3, 4)
    with fallback_disabled():
        check(lambda x: aten.select_copy.int(x, 1, -1), x)
        check(lambda x: aten.slice_copy.Tensor(x, 2, 1, 4, 2), x)
        check(lambda x: aten.split_copy.Tensor(x, 2, 2), x)
        check(lambda x: aten.detach_copy.default(x), x)
        check(lambda x: aten.view_copy.dtype(x, torch.int32), x)
        check(lambda x: aten.view_copy.dtype(x, torch.bfloat16), x)
        check(lambda x: aten.expand_copy.default(x[:, :1], [2, 3, 4]), x)
        check(lambda x: aten.as_strided_copy.default(x, [2, 2], [1, 5], 3), x)


def test_view_ops_after_inplace_metadata() -> None:
    def ops(x: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y.t_()
        y.unsqueeze_(0)
        return y * 2

    with fallback_disabled():
        check(ops, torch.arange(6.0).reshape(2, 3))


def test_bad_input() -> None:
    with pytest.raises(RuntimeError, match="Sizes of tensors must match except in dimension 0"):
        torch.cat([torch.ones(2, 3, device=d), torch.ones(2, 4, device=d)])
    with pytest.raises(RuntimeError, match="zero-dimensional tensor"):
        torch.cat([torch.ones((), device=d), torch.ones((), device=d)])
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        torch.nn.functional.pad(torch.ones(1, 2, 3, device=d), (3, 3), mode="reflect")
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device=d)).cpu()
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.tril(torch.ones(3, device=d))
