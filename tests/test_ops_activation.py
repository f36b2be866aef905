"""Activations and their backward ops on neuron against PyTorch CPU: the OpInfo entries with
the CPU fallback disabled, each `*_backward` ATen op called directly, in-place variants, and
rrelu's random training mode."""

from __future__ import annotations

import pytest
import torch
from compare import check
from families import MODES, elementwise_entries, run_elementwise
from opinfo import fallback_disabled
from torch.nn import functional as nnf

aten = torch.ops.aten
# rrelu's training samples draw from the RNG; it is checked by hand below.
ENTRIES = [o for o in elementwise_entries(activations=True) if o.name != "nn.functional.rrelu"]
IDS = [
    o.name.removeprefix("nn.functional.") + (f".{o.variant_test_name}" if o.variant_test_name else "") for o in ENTRIES
]


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("opinfo", ENTRIES, ids=IDS)
def test_opinfo(opinfo: object, mode: str) -> None:
    run_elementwise(opinfo, mode)


def _x(*shape: int) -> torch.Tensor:
    # Values on both sides of every activation's kinks (0, +-0.5, +-3, +-6) and exactly on them.
    x = torch.randn(*shape) * 4
    flat = x.view(-1)
    flat[:9] = torch.tensor([0.0, 0.5, -0.5, 3.0, -3.0, 6.0, -6.0, 1.0, -1.0])
    return x


BACKWARD = {
    "threshold": lambda g, x: aten.threshold_backward(g, x, 0.5),
    "hardtanh": lambda g, x: aten.hardtanh_backward(g, x, -1.0, 1.0),
    "leaky_relu": lambda g, x: aten.leaky_relu_backward(g, x, 0.2, False),
    "elu": lambda g, x: aten.elu_backward(g, 1.5, 1.0507, 1.0, False, x),
    "elu_result": lambda g, x: aten.elu_backward(g, 1.0, 1.0, 1.0, True, nnf.elu(x)),
    "gelu": lambda g, x: aten.gelu_backward(g, x),
    "gelu_tanh": lambda g, x: aten.gelu_backward(g, x, approximate="tanh"),
    "silu": lambda g, x: aten.silu_backward(g, x),
    "sigmoid": lambda g, x: aten.sigmoid_backward(g, torch.sigmoid(x)),
    "tanh": lambda g, x: aten.tanh_backward(g, torch.tanh(x)),
    "softplus": lambda g, x: aten.softplus_backward(g, x, 2.0, 5.0),
    "softshrink": lambda g, x: aten.softshrink_backward(g, x, 0.5),
    "hardshrink": lambda g, x: aten.hardshrink_backward(g, x, 0.5),
    "hardsigmoid": lambda g, x: aten.hardsigmoid_backward(g, x),
    "hardswish": lambda g, x: aten.hardswish_backward(g, x),
    "log_sigmoid": lambda g, x: aten.log_sigmoid_backward(g, x, aten.log_sigmoid_forward(x)[1]),
    "logit": lambda g, x: aten.logit_backward(g, torch.sigmoid(x)),
    "logit_eps": lambda g, x: aten.logit_backward(g, torch.sigmoid(x), 0.2),
    "glu": lambda g, x: aten.glu_backward(g[:, :4], x, 1),
    "prelu": lambda g, x: aten._prelu_kernel_backward(g, x, x[-1] / 4),
}


@pytest.mark.parametrize("name", list(BACKWARD))
def test_backward_op(name: str) -> None:
    with fallback_disabled():
        check(BACKWARD[name], torch.randn(6, 8), _x(6, 8))


def test_forward_outputs_match_including_log_sigmoid_buffer() -> None:
    with fallback_disabled():
        check(lambda x: aten.log_sigmoid_forward(x), _x(5, 7))
        check(lambda x: (nnf.relu6(x), nnf.hardtanh(x, -2.0, 2.5), nnf.threshold(x, 0.5, -3.0)), _x(5, 7))
        check(lambda x: (nnf.selu(x), nnf.celu(x, 0.7), nnf.elu(x, 0.3)), _x(5, 7))
        check(lambda x: (nnf.relu(x), nnf.hardtanh(x, -2, 5)), torch.randint(-9, 9, (5, 7)))


def test_inplace_activations_on_views() -> None:
    with fallback_disabled():
        check(lambda x: nnf.relu_(x[:, ::2]), _x(4, 6))
        check(lambda x: nnf.leaky_relu_(x.t(), 0.3), _x(4, 6))
        check(lambda x: (nnf.hardtanh_(x[1], -0.5, 0.5), nnf.elu_(x[2]), nnf.threshold_(x[3], 0.1, 9.0)), _x(4, 6))
        check(lambda x: torch.sigmoid_(x[:, 1:3]), _x(4, 6))
        check(lambda x: nnf.silu(x, inplace=True), _x(4, 6))
        check(lambda x: torch.nn.functional.gelu(x, approximate="tanh"), _x(4, 6).bfloat16())


def test_backward_through_autograd() -> None:
    # One backward pass through a chain of activations: every *_backward op runs on neuron.
    def chain(x: torch.Tensor) -> torch.Tensor:
        x = x.requires_grad_()
        y = nnf.mish(nnf.hardswish(nnf.softplus(nnf.silu(nnf.gelu(x)), beta=2.0)))
        y = nnf.glu(nnf.logsigmoid(nnf.hardsigmoid(y) + nnf.leaky_relu(y)), dim=0)
        (grad,) = torch.autograd.grad(y, x, torch.ones_like(y))
        return grad

    with fallback_disabled():
        check(chain, _x(4, 6))


def test_rrelu_eval_and_training() -> None:
    with fallback_disabled():
        check(lambda x: nnf.rrelu(x, 0.1, 0.3, training=False), _x(4, 6))
        x = torch.linspace(-3, 3, 601).to("neuron")
        noise = torch.empty_like(x)
        out = aten.rrelu_with_noise(x, noise, 0.1, 0.3, True)
        x, out, noise = x.cpu(), out.cpu(), noise.cpu()
        negative = x <= 0
        assert ((noise[negative] >= 0.1) & (noise[negative] <= 0.3)).all()
        assert (noise[~negative] == 1).all() and noise[negative].std() > 0.03
        torch.testing.assert_close(out, x * noise)


def test_bad_input_errors() -> None:
    with fallback_disabled():
        with pytest.raises(RuntimeError, match=r"glu: halving dimension must be even"):
            nnf.glu(torch.ones(3, 5, device="neuron"), dim=1)
        with pytest.raises(RuntimeError, match=r"gelu.*int64.*neuron"):
            nnf.gelu(torch.ones(3, dtype=torch.int64, device="neuron"))
