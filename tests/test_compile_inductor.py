"""torch.compile as users call it: the default backend (Inductor), every mode, options,
fullgraph and dynamic shapes compile graphs on neuron with the neuron backend; graphs on CPU
still go to Inductor."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import pytest
import torch
from compare import assert_same, to

import torch_neuronx

ROUTED = "the neuron backend compiles it instead of Inductor"
MODES = [None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs", "lite"]


@pytest.fixture(autouse=True)
def _fresh(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.INFO, logger="torch_neuronx")
    torch._dynamo.reset()
    torch_neuronx.compile.reset_metrics()
    yield
    torch._dynamo.reset()


def graphs() -> int:
    return torch_neuronx.compile.metrics()["graphs"]


def routed_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if ROUTED in r.getMessage()]


def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x @ w, dim=-1).sum(0) + torch.sin(x).mean()


INPUTS = (torch.randn(4, 8), torch.randn(8, 5))


@pytest.mark.parametrize("mode", MODES)
def test_default_backend_compiles_neuron_graphs(mode: str | None, caplog: pytest.LogCaptureFixture) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = torch.compile(fn, mode=mode)(*to("neuron", INPUTS))
    assert not [w for w in caught if "mode" in str(w.message)]  # no mode is refused or warned about
    assert_same(fn(*INPUTS), got)
    assert graphs() == 1
    assert len(routed_lines(caplog)) == 1


def test_inductor_options_fullgraph_and_backend_name(caplog: pytest.LogCaptureFixture) -> None:
    for kwargs in ({"options": {"epilogue_fusion": False}}, {"fullgraph": True}, {"backend": "inductor"}):
        torch._dynamo.reset()
        assert_same(fn(*INPUTS), torch.compile(fn, **kwargs)(*to("neuron", INPUTS)))
    assert graphs() == 3
    assert "Inductor options {'epilogue_fusion': False} do not apply" in routed_lines(caplog)[0]


def test_graph_that_only_creates_neuron_tensors() -> None:
    got = torch.compile(lambda: torch.arange(6, device="neuron").reshape(2, 3) * 2)()
    assert_same(torch.arange(6).reshape(2, 3) * 2, got)
    assert graphs() == 1


def test_training_step_through_the_default_backend() -> None:
    def step(device: str) -> tuple:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 3)).to(device)
        loss = torch.compile(model)(INPUTS[0].to(device)).square().mean()
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    assert_same(step("cpu"), step("neuron"))
    assert graphs() == 1  # the neuron model's (forward and backward); the CPU model's went to Inductor


def test_mark_dynamic_specialises_per_shape(caplog: pytest.LogCaptureFixture) -> None:
    comp = torch.compile(lambda x: (x * 2).sum(-1) + 1)
    for rows in (4, 6, 4):
        x = torch.randn(rows, 8)
        moved = x.to("neuron")
        torch._dynamo.mark_dynamic(moved, 0)
        assert_same((x * 2).sum(-1) + 1, comp(moved))
    s = torch_neuronx.compile.metrics()
    assert s["graphs"] == 1, "one symbolic Dynamo graph for all row counts"
    assert s["compiles"] == 2 and s["recompiles"] == 1, s  # XLA: one executable per shape
    assert "(4, 8) -> (6, 8)" in s["recompile_reasons"][0]["reason"]


def test_cpu_graphs_still_go_to_inductor(caplog: pytest.LogCaptureFixture) -> None:
    x = torch.randn(5)
    assert torch.equal(torch.compile(lambda t: t * 3 + 1)(x), x * 3 + 1)
    assert graphs() == 0 and not routed_lines(caplog)


def test_neuron_backend_accepts_every_mode_quietly() -> None:
    x = torch.randn(3)
    for i, mode in enumerate(MODES):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.compile(lambda t, i=i: t + i, backend="neuron", mode=mode)(x.to("neuron"))
        assert_same(x + i, got)
        assert not [w for w in caught if "mode" in str(w.message)]


def test_unknown_mode_gets_inductors_error() -> None:
    with pytest.raises(RuntimeError, match="Unrecognized mode=fastest, should be one of: default"):
        torch.compile(lambda t: t + 1, mode="fastest")
    with pytest.raises(Exception, match="Unrecognized mode=fastest, should be one of: default"):
        torch.compile(lambda t: t + 1, backend="neuron", mode="fastest")(torch.ones(2, device="neuron"))
