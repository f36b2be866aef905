"""Reductions, scans and sorting on neuron, against PyTorch CPU.

OpInfo entries run with the CPU fallback disabled (float32 and bfloat16 forward, integer
dtypes where the entry supports them); backward runs with the fallback allowed only for ops
owned by other families (scatter, masked_fill, ...), which the test names. Hand-written cases
cover PyTorch's dtype rules, keepdim, negative dims, empty tensors, NaN and bad input.
"""

from __future__ import annotations

import math

import pytest
import torch
from compare import check
from opinfo import check_op, fallback_disabled, find, to_neuron

import torch_neuronx

MAX_SAMPLES = 6
BACKWARD_SAMPLES = 3
REDUCTIONS = [
    "sum",
    "mean",
    "prod",
    "amax",
    "amin",
    "max:reduction_no_dim",
    "max:reduction_with_dim",
    "min:reduction_no_dim",
    "min:reduction_with_dim",
    "argmax",
    "argmin",
    "all",
    "any",
    "var",
    "var:unbiased",
    "std",
    "std:unbiased",
    "var_mean",
    "std_mean",
    "logsumexp",
    "norm",
    "norm:fro",
    "norm:inf",
    "linalg.vector_norm",
    "count_nonzero",
    "aminmax",
    "nansum",
    "cumsum",
    "cumprod",
    "cummax",
    "cummin",
    "logcumsumexp",
    "dist",
    "sum_to_size",
]
SORTING = ["sort", "argsort", "topk", "kthvalue", "median", "nanmedian", "mode", "msort", "searchsorted", "bucketize"]
# PyTorch leaves the order of equal elements unspecified for these (CPU uses std::sort,
# partial_sort or quickselect); with ties (integers, bfloat16) only the values and the
# validity of the indices can be compared.
TIED_INDICES = {"sort", "argsort", "topk", "kthvalue", "mode"}
# Ops owned by other families that the backward formulas of this family call.
OTHER_FAMILIES = {
    "aten.masked_fill_.Scalar",
    "aten.masked_fill_.Tensor",
    "aten.masked_select.default",
    "aten.scatter.src",
    "aten.scatter.value",
    "aten.scatter_add.default",
    "aten.gather.default",
    "aten.sign.default",
    "aten.bitwise_and.Tensor",
    "aten.bitwise_or.Tensor",
    "aten.bitwise_not.default",
    "aten.ceil.default",
    "aten.flip.default",
    "aten.cat.default",
    "aten.nonzero.default",
}


def _entry(name: str):
    return find(*name.partition(":")[::2])


def _supports(opinfo, dtype: torch.dtype) -> bool:
    return dtype in opinfo.supported_dtypes("cpu")


@pytest.mark.parametrize("name", REDUCTIONS + SORTING)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opinfo_forward(name: str, dtype: torch.dtype) -> None:
    opinfo = _entry(name)
    if not _supports(opinfo, dtype):
        pytest.skip(f"{name} does not support {dtype} on CPU")
    with fallback_disabled():
        if dtype == torch.bfloat16 and name.partition(":")[0] in TIED_INDICES:
            assert check_ties(opinfo, dtype, MAX_SAMPLES) > 0
        else:
            assert check_op(opinfo, dtype, max_samples=MAX_SAMPLES) > 0


@pytest.mark.parametrize("name", REDUCTIONS + SORTING)
@pytest.mark.parametrize("dtype", [torch.int64], ids=str)
def test_opinfo_integer(name: str, dtype: torch.dtype) -> None:
    opinfo = _entry(name)
    if not _supports(opinfo, dtype):
        pytest.skip(f"{name} does not support {dtype} on CPU")
    with fallback_disabled():
        if name.partition(":")[0] in TIED_INDICES:
            assert check_ties(opinfo, dtype, MAX_SAMPLES) > 0
        else:
            assert check_op(opinfo, dtype, max_samples=MAX_SAMPLES) > 0


# logcumsumexp's backward is checked against float64 below: its samples with |x| up to 1e4 are
# ill-conditioned in float32, where CPU and neuron both err by ~1e-3. msort's backward is sort's.
@pytest.mark.parametrize(
    "name", [n for n in REDUCTIONS + SORTING if _entry(n).supports_autograd and n not in ("logcumsumexp", "msort")]
)
def test_opinfo_backward(name: str) -> None:
    torch_neuronx.reset_metrics()
    assert check_op(_entry(name), torch.float32, grad=True, max_samples=BACKWARD_SAMPLES) > 0
    foreign = set(torch_neuronx.metrics()["fallbacks"]) - OTHER_FAMILIES
    assert not foreign, f"fell back to CPU: {sorted(foreign)}"


def test_logcumsumexp_backward_accuracy() -> None:
    """Neuron's gradient is as close to the float64 gradient as CPU's float32 gradient is."""
    for sample in find("logcumsumexp").sample_inputs("cpu", torch.float32):
        dim = sample.args[0]
        cotangent = torch.randn(sample.input.shape)
        exact = _logcumsumexp_grad(sample.input.double(), cotangent.double(), dim)
        cpu_error = (_logcumsumexp_grad(sample.input, cotangent, dim) - exact).abs().max().item()
        dev = _logcumsumexp_grad(sample.input.to("neuron"), cotangent.to("neuron"), dim)
        dev_error = (dev - exact).abs().max().item()
        assert dev_error <= 4 * cpu_error + 1e-5, (dev_error, cpu_error)


def _logcumsumexp_grad(x: torch.Tensor, cotangent: torch.Tensor, dim: int) -> torch.Tensor:
    x = x.detach().clone().requires_grad_()
    torch.logcumsumexp(x, dim).backward(cotangent)
    return x.grad.cpu().double()


def check_ties(opinfo, dtype: torch.dtype, max_samples: int) -> int:
    """Values equal CPU's exactly; indices may order ties differently but must point at them."""
    count = 0
    for sample in opinfo.sample_inputs("cpu", dtype):
        if count >= max_samples:
            break
        dev = sample.transform(to_neuron)
        cpu_out = opinfo(sample.input, *sample.args, **sample.kwargs)
        dev_out = opinfo(dev.input, *dev.args, **dev.kwargs)
        if opinfo.name == "argsort":  # indices only: compare what they select
            dim = _dim_of(opinfo.name, sample)
            cpu_out = (_gather(sample.input, cpu_out, dim), cpu_out)
            dev_out = (_gather(sample.input, dev_out.cpu(), dim), dev_out)
        values, indices = dev_out[0].cpu(), dev_out[1].cpu()
        assert indices.dtype == cpu_out[1].dtype and indices.shape == cpu_out[1].shape
        torch.testing.assert_close(values, cpu_out[0], rtol=0, atol=0, equal_nan=True)
        if sample.input.dim():
            dim = _dim_of(opinfo.name, sample)
            index = indices if indices.dim() == sample.input.dim() else indices.unsqueeze(dim)
            value = values if values.dim() == sample.input.dim() else values.unsqueeze(dim)
            torch.testing.assert_close(_gather(sample.input, index, dim), value, rtol=0, atol=0, equal_nan=True)
        count += 1
    return count


def _gather(x: torch.Tensor, index: torch.Tensor, dim: int) -> torch.Tensor:
    return torch.take_along_dim(x, index, dim) if x.dim() else x


def _dim_of(name: str, sample) -> int:
    position = 1 if name in ("topk", "kthvalue") else 0
    args = sample.args
    return args[position] if len(args) > position else sample.kwargs.get("dim", -1)


# ---- dtype rules ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.uint8, torch.bool])
def test_sum_prod_cumsum_of_integers_give_int64(dtype: torch.dtype) -> None:
    x = torch.tensor([[1, 0, 1], [1, 1, 1]]).to(dtype)
    with fallback_disabled():
        for fn in (torch.sum, lambda t: t.sum(1), torch.prod, lambda t: t.cumsum(0), lambda t: t.cumprod(1)):
            out = check(fn, x)
            assert out.dtype == torch.int64


def test_dtype_argument() -> None:
    x = torch.randn(4, 5)
    with fallback_disabled():
        assert check(lambda t: t.sum(1, dtype=torch.float64), x).dtype == torch.float64
        assert check(lambda t: t.to(torch.int32).sum(dtype=torch.int16), x * 10).dtype == torch.int16
        assert check(lambda t: t.mean(0, dtype=torch.bfloat16), x).dtype == torch.bfloat16
        assert check(lambda t: t.cumsum(1, dtype=torch.float64), x).dtype == torch.float64
        assert check(lambda t: torch.linalg.vector_norm(t, dtype=torch.float64), x).dtype == torch.float64


def test_bfloat16_accumulates_in_float32() -> None:
    x = torch.full((4096,), 1.0, dtype=torch.bfloat16)
    with fallback_disabled():
        out = check(torch.sum, x)  # a bfloat16 accumulator would stop at 256
        assert out.item() == 4096
        check(lambda t: t.mean(), x)
        check(lambda t: t.cumsum(0), x)


def test_mean_of_integers_is_an_error() -> None:
    x = torch.arange(6).to("neuron")
    with fallback_disabled(), pytest.raises(RuntimeError, match=r"mean\(\).*floating point.*Got: Long"):
        x.mean()


def test_all_any_dtypes() -> None:
    x = torch.tensor([[0, 2, 3], [1, 1, 1]], dtype=torch.uint8)
    with fallback_disabled():
        assert check(lambda t: t.all(1), x).dtype == torch.uint8
        assert check(lambda t: t.float().any(0), x).dtype == torch.bool
        check(lambda t: torch.ops.aten.all.dims(t, []), x.float())  # dim=[] reduces nothing


# ---- dims, keepdim, empty ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn",
    [
        lambda t: t.sum((-1, 0), keepdim=True),
        lambda t: t.amax(-2),
        lambda t: t.amin((0, 2), keepdim=True),
        lambda t: t.max(-1, keepdim=True),
        lambda t: t.argmin(-3, keepdim=True),
        lambda t: t.var(-1, correction=0),
        lambda t: t.std((1, 2), correction=2, keepdim=True),
        lambda t: torch.var_mean(t, -2, correction=0.5),
        lambda t: t.logsumexp((-1, -2)),
        lambda t: t.norm(p=3, dim=-1),
        lambda t: torch.aminmax(t, dim=-1, keepdim=True),
        lambda t: t.cummin(-1),
        lambda t: t.logcumsumexp(-2),
        lambda t: t.sort(-2, descending=True),
        lambda t: t.topk(2, -1, largest=False),
        lambda t: t.median(-1),
        lambda t: t.kthvalue(3, 1, keepdim=True),
    ],
)
def test_negative_dims_and_keepdim(fn) -> None:
    with fallback_disabled():
        check(fn, torch.randn(3, 4, 5))


def test_zero_dim_tensors() -> None:
    x = torch.tensor(2.5)
    with fallback_disabled():
        for fn in (
            lambda t: t.sum(0),
            lambda t: t.max(-1),
            lambda t: t.argmax(0, keepdim=True),
            lambda t: t.cumsum(0),
            lambda t: t.cummax(0),
            lambda t: t.sort(0),
            lambda t: t.topk(1),
            lambda t: t.median(0),
        ):
            check(fn, x)


def test_empty_reductions() -> None:
    x = torch.zeros(0, 3)
    with fallback_disabled():
        check(lambda t: t.sum(0), x)
        check(lambda t: t.prod(0), x)
        check(lambda t: t.mean(0), x)
        check(lambda t: t.var(0), x)
        check(lambda t: t.amax(1), x)
        check(lambda t: t.cumsum(0), x)
        check(lambda t: t.sort(0), x)
        check(lambda t: torch.linalg.vector_norm(t), x)
        with pytest.raises(IndexError, match=r"amax\(\).*reduction dim 0"):
            x.to("neuron").amax(0)
        with pytest.raises(IndexError, match=r"max\(\)"):
            x.to("neuron").max(0)
        with pytest.raises(IndexError, match=r"argmax\(\)"):
            x.to("neuron").argmax()


def test_bad_dim_names_the_op() -> None:
    x = torch.randn(2, 3).to("neuron")
    with fallback_disabled():
        with pytest.raises(IndexError, match=r"sum\.*.*Dimension out of range"):
            x.sum(2)
        with pytest.raises(RuntimeError, match="appears multiple times"):
            x.sum((1, -1))
        with pytest.raises(RuntimeError, match=r"topk\(\).*out of range"):
            x.topk(4)


# ---- NaN and ordering -------------------------------------------------------------------------

NAN = math.nan


def test_nan_propagation() -> None:
    x = torch.tensor([[1.0, NAN, 3.0, NAN], [4.0, 2.0, -1.0, 0.0]])
    with fallback_disabled():
        for fn in (
            lambda t: t.amax(1),
            lambda t: t.max(1),
            lambda t: t.min(1),
            lambda t: t.argmax(1),
            lambda t: t.argmin(),
            lambda t: t.cummax(1),
            lambda t: t.cummin(1),
            lambda t: t.median(1),
            lambda t: t.nanmedian(1),
            lambda t: t.nanmedian(),
            lambda t: t.nansum(1),
            lambda t: t.sort(1),
            lambda t: t.sort(1, descending=True),
            lambda t: t.topk(2, 1),
        ):
            check(fn, x)


def test_sort_is_stable_both_ways_and_ignores_zero_sign() -> None:
    x = torch.tensor([0.0, -0.0, 1.0, 0.0, -0.0, 1.0, -1.0, NAN, 1.0])
    with fallback_disabled():
        check(lambda t: t.sort(stable=True), x)
        check(lambda t: t.sort(stable=True, descending=True), x)
        check(lambda t: t.int().sort(stable=True, descending=True), x.nan_to_num())
        check(lambda t: t.argsort(stable=True, descending=True), x > 0)


def test_mode_and_median_of_small_slices() -> None:
    x = torch.tensor([[1, 3, 3, 1, 2, 2], [5, 5, 1, 1, 1, 0]])
    with fallback_disabled():
        check(lambda t: t.mode(1), x)
        check(lambda t: t.median(1), x)
        check(lambda t: t.median(), x)


def test_cummax_takes_the_latest_tie() -> None:
    x = torch.tensor([1.0, 3.0, 3.0, 2.0, NAN, 5.0, NAN])
    with fallback_disabled():
        check(lambda t: t.cummax(0), x)
        check(lambda t: t.cummin(0), x)
        check(lambda t: t.int().cummax(0), x.nan_to_num())


def test_logsumexp_infinities() -> None:
    x = torch.tensor([[-math.inf, -math.inf], [math.inf, 1.0], [0.0, 1.0]])
    with fallback_disabled():
        check(lambda t: t.logsumexp(1), x)
        check(lambda t: t.logcumsumexp(1), x)


@pytest.mark.parametrize("ord", [0, 1, 2, 3, -1, 0.5, math.inf, -math.inf, 2.0])
def test_vector_norm_orders(ord) -> None:
    x = torch.tensor([[0.0, -2.0, 3.0], [1.0, 0.5, -4.0]])
    with fallback_disabled():
        check(lambda t: torch.linalg.vector_norm(t, ord, dim=1), x)


def test_var_corrections() -> None:
    x = torch.randn(4, 6)
    with fallback_disabled():
        for correction in (0, 1, 2, 0.5, 6):
            check(lambda t, c=correction: t.var(1, correction=c), x)
            check(lambda t, c=correction: torch.std_mean(t, 0, correction=c), x)


# ---- searchsorted / bucketize -----------------------------------------------------------------


def test_searchsorted_variants() -> None:
    seq = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, 6.0, 8.0]])
    values = torch.tensor([[3.0, 6.0, 9.0], [1.0, 4.0, 8.0]])
    unsorted = torch.tensor([5.0, 1.0, 7.0, 3.0])
    with fallback_disabled():
        check(lambda s, v: torch.searchsorted(s, v), seq, values)
        check(lambda s, v: torch.searchsorted(s, v, right=True), seq, values)
        check(lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True), seq, values)
        check(lambda s, v: torch.searchsorted(s[0], v), seq, values)
        check(lambda s: torch.searchsorted(s, s.argsort(), sorter=s.argsort()), unsorted)
        check(lambda s, v: torch.searchsorted(s, v, sorter=s.argsort()), unsorted, values)
        check(lambda s: torch.searchsorted(s[0], 4.0), seq)
        check(lambda v, b: torch.bucketize(v, b, right=True), values, seq[0])
        check(lambda b: torch.bucketize(3, b), seq[0])


# ---- out= and in-place variants go through the same lowerings ---------------------------------


def test_out_variants() -> None:
    x = torch.randn(3, 4)

    def with_out(t):
        total = torch.empty(0, device=t.device)
        values = torch.empty(0, device=t.device)
        indices = torch.empty(0, dtype=torch.long, device=t.device)
        torch.sum(t, 1, out=total)
        torch.max(t, 0, out=(values, indices))
        return total, values, indices

    with fallback_disabled():
        check(with_out, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.int8, torch.bool])
def test_hash_tensor_matches_cpu_bit_for_bit(dtype: torch.dtype) -> None:
    with fallback_disabled():
        assert check_op(find("hash_tensor"), dtype) > 0


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("initial", [None, 2.5])
def test_segment_reduce_forward_backward(reduce: str, initial: float | None) -> None:
    """Empty segments, ties (max/min share the gradient), a zero (prod), positions past the last
    segment (unsafe), lengths and offsets, and a batched axis."""
    data = torch.tensor([1.0, 3.0, 3.0, 2.0, 0.0, 5.0, 4.0, 7.0], dtype=torch.float64)
    lengths = torch.tensor([3, 0, 2, 2])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    batched, batched_lengths = torch.arange(12.0, dtype=torch.float64).reshape(2, 6), torch.tensor([[2, 4], [3, 0]])

    def run(data: torch.Tensor, lengths: torch.Tensor, offsets: torch.Tensor, batched: torch.Tensor, bl: torch.Tensor):
        outs, inputs = [], [data.requires_grad_(), batched.requires_grad_()]
        for x, kwargs in [
            (data, {"lengths": lengths}),
            (data, {"offsets": offsets}),
            (batched, {"lengths": bl, "axis": 1}),
        ]:
            outs.append(torch.segment_reduce(x, reduce, unsafe=True, initial=initial, **kwargs))
        grads = torch.autograd.grad(
            [o for o in outs],
            inputs,
            [torch.arange(1.0, o.numel() + 1, dtype=o.dtype, device=o.device).view_as(o) for o in outs],
        )
        return [o.detach() for o in outs] + list(grads)

    with fallback_disabled():
        check(run, data, lengths, offsets, batched, batched_lengths)
