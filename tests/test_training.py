"""Foundation acceptance: small models train on neuron and follow CPU's loss curve.

An MLP, a CNN (conv, batch norm, pooling) and a 2-layer transformer (embedding, layer norm,
scaled_dot_product_attention, GELU, cross-entropy) train with AdamW from the same weights on
the same batch on CPU and on neuron; the losses and final weights agree to float rounding.
Ops without a lowering yet fall back to CPU, which changes speed, not numbers; the last test
asks for a transformer step with no fallback at all.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from compare import assert_same
from torch import nn
from torch.nn import functional

import torch_neuronx

STEPS = 4


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        # convolutions feeding batch norm take no bias (batch norm cancels it: a zero gradient
        # that Adam would amplify from rounding noise, as for the transformer's key bias)
        self.features = nn.Sequential(
            nn.Conv2d(3, 6, 3, padding=1, bias=False),
            nn.BatchNorm2d(6),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 8, 3, padding=1, bias=False),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.AvgPool2d(2),
        )
        self.head = nn.Linear(8 * 2 * 2, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        # no qkv bias: the key bias has a zero gradient in exact arithmetic, which Adam would
        # turn into full-size updates that follow each device's rounding noise
        self.qkv, self.proj = nn.Linear(width, 3 * width, bias=False), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=-1)
        q, k, v = (t.view(batch, length, self.heads, width // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        return x + self.down(functional.gelu(self.up(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, vocab: int = 32, width: int = 16, heads: int = 2, layers: int = 2, length: int = 8) -> None:
        super().__init__()
        self.embed, self.position = nn.Embedding(vocab, width), nn.Embedding(length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(width), nn.Linear(width, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def _mlp_batch(generator: torch.Generator) -> tuple:
    return torch.randn(8, 12, generator=generator), torch.randint(0, 5, (8,), generator=generator)


def _cnn_batch(generator: torch.Generator) -> tuple:
    return torch.randn(4, 3, 8, 8, generator=generator), torch.randint(0, 5, (4,), generator=generator)


def _tokens(generator: torch.Generator) -> tuple:
    tokens = torch.randint(0, 32, (2, 9), generator=generator)
    return tokens[:, :-1], tokens[:, 1:]


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[torch.Generator], tuple]]] = {
    "mlp": (MLP, _mlp_batch),
    "cnn": (CNN, _cnn_batch),
    "transformer": (Transformer, _tokens),
}


def _train(name: str, device: str, autocast: bool = False) -> tuple[list[float], list[torch.Tensor]]:
    make, batch = MODELS[name]
    torch.manual_seed(0)
    model = make().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    inputs, targets = (t.to(device) for t in batch(torch.Generator().manual_seed(1)))
    losses = []
    for _ in range(STEPS):
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            logits = model(inputs)
            loss = functional.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("name", list(MODELS))
def test_training_follows_cpu(name: str) -> None:
    cpu_losses, cpu_params = _train(name, "cpu")
    dev_losses, dev_params = _train(name, "neuron")
    assert cpu_losses[-1] < cpu_losses[0]  # it learns at all
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=1e-4, atol=1e-5)
    for c, d in zip(cpu_params, dev_params):
        torch.testing.assert_close(d, c, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_autocast_bf16_training_stays_close_to_cpu(name: str) -> None:
    cpu_losses, _ = _train(name, "cpu", autocast=True)
    dev_losses, _ = _train(name, "neuron", autocast=True)
    torch.testing.assert_close(dev_losses, cpu_losses, rtol=3e-2, atol=3e-2)


def test_autocast_runs_matmuls_in_bf16() -> None:
    layer, x = nn.Linear(4, 3), torch.randn(2, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = layer(x)
    with torch.autocast("neuron", dtype=torch.bfloat16):
        out = layer.to("neuron")(x.to("neuron"))
    assert out.dtype == torch.bfloat16
    assert_same(want, out)


def test_transformer_step_without_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NEURONX_DISABLE_FALLBACK", "1")
    torch_neuronx.reset_metrics()
    losses, _ = _train("transformer", "neuron")
    assert torch_neuronx.metrics()["fallbacks"] == {}
    torch.testing.assert_close(losses, _train("transformer", "cpu")[0], rtol=1e-4, atol=1e-5)
