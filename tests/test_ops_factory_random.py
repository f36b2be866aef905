"""Factories and random ops on neuron: OpInfo entries natively (no CPU fallback); eager
`torch.zeros/ones/full/arange/linspace/logspace/eye(device="neuron")` land on lowerings and equal
CPU; random ops have the right shapes, dtypes, bounds and statistics and are reproducible under
`torch.manual_seed`, `torch.neuron.manual_seed` and `torch.neuron.get/set_rng_state`."""

from __future__ import annotations

import pytest
import torch
from opinfo import OPS, check_op, fallback_disabled, find

import torch_neuronx

d = "neuron"
FACTORY = [
    "arange",
    "linspace",
    "linspace.tensor_overload",
    "logspace",
    "logspace.tensor_overload",
    "full",
    "full_like",
    "zeros",
    "ones",
    "zeros_like",
    "ones_like",
    "new_full",
    "new_ones",
    "new_zeros",
    "eye",
    "scalar_tensor",
    "tril_indices",
    "triu_indices",
]
RANDOM = [
    "bernoulli",
    "normal",
    "normal.in_place",
    "normal.number_mean",
    "uniform",
    "rand_like",
    "randn_like",
    "randint_like",
    "randint",
    "randn",
    "multinomial",
    "cauchy",
    "exponential",
    "geometric",
    "log_normal",
]


def opinfo_of(entry: str) -> object:
    name, _, variant = entry.rpartition(".")
    return find(entry) if (entry, "") in OPS else find(name, variant)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=["f32", "bf16", "i64"])
@pytest.mark.parametrize("entry", FACTORY + RANDOM)
def test_opinfo(entry: str, dtype: torch.dtype) -> None:
    opinfo = opinfo_of(entry)
    if dtype not in opinfo.supported_dtypes("cpu"):
        pytest.skip(f"{entry} does not support {dtype}")
    with fallback_disabled():
        assert check_op(opinfo, dtype, max_samples=6) > 0


# ---- factories --------------------------------------------------------------------------


FACTORY_CALLS = {
    "zeros": lambda dev: torch.zeros(2, 3, device=dev),
    "ones_i64": lambda dev: torch.ones(4, dtype=torch.int64, device=dev),
    "full_bool": lambda dev: torch.full((2,), True, device=dev),
    "full_int": lambda dev: torch.full((2, 2), 7, device=dev),
    "full_float": lambda dev: torch.full((3,), -1.5, device=dev),
    "arange_int": lambda dev: torch.arange(7, device=dev),
    "arange_neg": lambda dev: torch.arange(5, -4, -3, device=dev),
    "arange_float": lambda dev: torch.arange(0, 1, 0.1, device=dev),
    "arange_float_to_int": lambda dev: torch.arange(0.5, 5, 1.5, dtype=torch.int64, device=dev),
    "arange_bf16": lambda dev: torch.arange(-2, 30, 0.7, dtype=torch.bfloat16, device=dev),
    "linspace": lambda dev: torch.linspace(-1, 3, 9, device=dev),
    "linspace_int": lambda dev: torch.linspace(-3.5, 10, 7, dtype=torch.int64, device=dev),
    "linspace_one": lambda dev: torch.linspace(2, 5, 1, device=dev),
    "logspace": lambda dev: torch.logspace(0, 3, 4, device=dev),
    "logspace_base2": lambda dev: torch.logspace(-2, 2, 5, base=2, dtype=torch.float64, device=dev),
    "eye": lambda dev: torch.eye(3, 5, device=dev),
    "tril_indices": lambda dev: torch.tril_indices(4, 3, -1, device=dev),
    "triu_indices": lambda dev: torch.triu_indices(3, 5, 1, dtype=torch.int32, device=dev),
    "scalar_tensor": lambda dev: torch.scalar_tensor(3, device=dev),
    "zeros_like": lambda dev: torch.zeros_like(torch.empty(2, 3, dtype=torch.bool, device=dev)),
    "full_like": lambda dev: torch.full_like(torch.empty(2, 3, device=dev), 4),
    "new_full": lambda dev: torch.empty(1, device=dev).new_full((2,), 9),
}


@pytest.mark.parametrize("name", list(FACTORY_CALLS))
def test_factories_native(name: str) -> None:
    torch_neuronx.reset_metrics()
    with fallback_disabled():
        got = FACTORY_CALLS[name](d)
    expect = FACTORY_CALLS[name]("cpu")
    assert got.device.type == "neuron" and got.dtype == expect.dtype
    torch.testing.assert_close(got.cpu(), expect, rtol=1.6e-2 if got.dtype == torch.bfloat16 else 1e-6, atol=1e-6)
    assert not torch_neuronx.metrics()["fallbacks"]


def test_out_overloads() -> None:
    out = torch.empty(0, dtype=torch.int32, device=d)
    with fallback_disabled():
        torch.arange(2, 11, 3, out=out)
        assert out.dtype == torch.int32 and out.cpu().tolist() == [2, 5, 8]
        lin = torch.empty(5, device=d)
        torch.linspace(0, 1, 5, out=lin)
        torch.testing.assert_close(lin.cpu(), torch.linspace(0, 1, 5))


@pytest.mark.parametrize(
    "make",
    [
        lambda device, v: torch.arange(v, device=device),
        lambda device, v: torch.full((2,), v, device=device),
        lambda device, v: torch.tensor([True, False], device=device) + v,
        lambda device, v: torch.tensor([3, 4], device=device).mul(v),
    ],
    ids=["arange", "full", "bool_add", "int_mul"],
)
def test_equal_numbers_of_other_types_do_not_share_an_executable(make: object) -> None:
    """4.0 == 4 == True as cache keys: each must still give its own dtype and values."""
    for value in (4.0, 4, True, 1, 1.0, False):
        got, expect = make(d, value), make("cpu", value)
        assert got.dtype == expect.dtype, value
        assert got.cpu().tolist() == expect.tolist(), value


def test_factory_errors() -> None:
    with pytest.raises(RuntimeError, match="upper bound and larger bound inconsistent with step sign"):
        torch.arange(0, 5, -1, device=d)
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        torch.linspace(0, 1, -2, device=d)


# ---- random: shapes, dtypes, bounds, statistics ------------------------------------------

N = 40_000


def stats(x: torch.Tensor) -> tuple[float, float]:
    x = x.cpu().double()
    return x.mean().item(), x.std().item()


def test_normal_and_uniform_statistics() -> None:
    with fallback_disabled():
        mean, std = stats(torch.randn(N, device=d))
        assert abs(mean) < 0.03 and abs(std - 1) < 0.03
        mean, std = stats(torch.empty(N, device=d).normal_(3.0, 0.5))
        assert abs(mean - 3) < 0.02 and abs(std - 0.5) < 0.02
        mean, std = stats(torch.normal(torch.full((N,), -2.0, device=d), 2.0))
        assert abs(mean + 2) < 0.06 and abs(std - 2) < 0.06
        u = torch.rand(N, device=d).cpu()
        assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01
        u = torch.empty(N, device=d).uniform_(-3, -1).cpu()
        assert -3 <= u.min() and u.max() < -1 and abs(u.mean() + 2) < 0.02
        b = torch.randn(N, dtype=torch.bfloat16, device=d)
        assert b.dtype == torch.bfloat16 and abs(stats(b)[1] - 1) < 0.05


def test_other_distributions() -> None:
    with fallback_disabled():
        mean, std = stats(torch.empty(N, device=d).exponential_(2.0))
        assert abs(mean - 0.5) < 0.02 and abs(std - 0.5) < 0.03
        g = torch.empty(N, device=d).geometric_(0.25).cpu()
        assert g.min() >= 1 and torch.equal(g, g.round()) and abs(g.mean() - 4) < 0.1
        ln = torch.empty(N, device=d).log_normal_(0.0, 0.5).cpu()
        assert ln.min() > 0 and abs(ln.log().mean()) < 0.02 and abs(ln.log().std() - 0.5) < 0.02
        c = torch.empty(N, device=d).cauchy_(1.0, 2.0).cpu()
        assert abs(c.median() - 1) < 0.1
        bern = torch.empty(N, device=d).bernoulli_(0.3).cpu()
        assert set(bern.unique().tolist()) <= {0.0, 1.0} and abs(bern.mean() - 0.3) < 0.01
        p = torch.tensor([0.0, 1.0, 0.5]).repeat(N // 3).to(d)
        drawn = torch.bernoulli(p).cpu().view(-1, 3)
        assert drawn[:, 0].sum() == 0 and drawn[:, 1].all() and abs(drawn[:, 2].mean() - 0.5) < 0.02


def test_integer_draws() -> None:
    with fallback_disabled():
        r = torch.randint(-3, 5, (N,), device=d)
        assert r.dtype == torch.int64
        assert set(r.cpu().unique().tolist()) == set(range(-3, 5))
        r = torch.randint(10, (3, 4), dtype=torch.int32, device=d)
        assert r.dtype == torch.int32 and r.shape == (3, 4)
        like = torch.randint_like(torch.empty(N, dtype=torch.float32, device=d), 2, 4).cpu()
        assert like.dtype == torch.float32 and set(like.unique().tolist()) == {2.0, 3.0}
        full = torch.empty(N, dtype=torch.int64, device=d).random_().cpu()
        assert full.min() >= 0 and full.float().mean() > 2**61
        small = torch.empty(N, dtype=torch.uint8, device=d).random_().cpu()
        assert small.min() == 0 and small.max() == 255
        f = torch.empty(N, device=d).random_(0, 2**24 + 1).cpu()
        assert f.max() <= 2**24 and torch.equal(f, f.round())
        bools = torch.empty(N, dtype=torch.bool, device=d).random_().cpu()
        assert bools.any() and not bools.all()


def test_multinomial_and_randperm() -> None:
    with fallback_disabled():
        probs = torch.tensor([[0.0, 1.0, 3.0, 0.0], [1.0, 1.0, 1.0, 1.0]], device=d)
        with_r = torch.multinomial(probs, 2000, replacement=True).cpu()
        assert with_r.dtype == torch.int64 and with_r.shape == (2, 2000)
        assert set(with_r[0].unique().tolist()) == {1, 2} and abs((with_r[0] == 2).float().mean() - 0.75) < 0.04
        without = torch.multinomial(probs[1], 4).cpu()
        assert sorted(without.tolist()) == [0, 1, 2, 3]
        picks = torch.multinomial(probs, 2).cpu()
        assert sorted(picks[0].tolist()) == [1, 2] and len(set(picks[1].tolist())) == 2
        perm = torch.randperm(100, device=d).cpu()
        assert perm.dtype == torch.int64 and sorted(perm.tolist()) == list(range(100))
        assert not torch.equal(perm, torch.arange(100))
        assert torch.randperm(0, device=d).shape == (0,)


def draws() -> list[torch.Tensor]:
    return [
        torch.randn(5, device=d).cpu(),
        torch.rand(5, device=d).cpu(),
        torch.randint(0, 100, (5,), device=d).cpu(),
        torch.bernoulli(torch.full((5,), 0.5, device=d)).cpu(),
        torch.randperm(7, device=d).cpu(),
        torch.multinomial(torch.ones(6, device=d), 3).cpu(),
    ]


@pytest.mark.parametrize("seed", [torch.manual_seed, torch.neuron.manual_seed])
def test_reproducible_under_seed(seed: object) -> None:
    with fallback_disabled():
        seed(1234)
        first = draws()
        second = draws()
        seed(1234)
        again = draws()
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(first[0], second[0])


def test_rng_state_round_trip() -> None:
    with fallback_disabled():
        torch.neuron.manual_seed(7)
        draws()
        state = torch.neuron.get_rng_state()
        first = draws()
        torch.neuron.set_rng_state(state)
        again = draws()
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_random_errors() -> None:
    with pytest.raises(RuntimeError, match="'from' to be less than 'to'"):
        torch.empty(3, dtype=torch.int64, device=d).random_(5, 5)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.empty(3, dtype=torch.int64, device=d).normal_()
    with pytest.raises(RuntimeError, match=r"cannot sample n_sample > prob_dist\.size"):
        torch.multinomial(torch.ones(3, device=d), 4)
    with pytest.raises(RuntimeError, match="bernoulli expects p to be in"):
        torch.empty(3, device=d).bernoulli_(torch.full((3,), 1.5, device=d)).cpu()
    with pytest.raises(RuntimeError, match="invalid multinomial distribution"):
        torch.multinomial(torch.zeros(3, device=d), 1).cpu()
    with pytest.raises(RuntimeError, match="generator"):
        torch.randn(3, device=d).normal_(generator=torch.Generator())
