"""`torchneuron demo`: train a small transformer language model on `neuron` and show that the
loss goes down, next to the same run on CPU, then print device and executable-cache statistics."""

from __future__ import annotations

import time

import torch
from torch import nn

import torch_neuronx


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 128, dim: int = 64, heads: int = 4, layers: int = 2, seq: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(seq, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        self.register_buffer("mask", nn.Transformer.generate_square_subsequent_mask(seq), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]
        x = self.blocks(x, mask=self.mask[: tokens.shape[1], : tokens.shape[1]], is_causal=True)
        return self.head(self.norm(x))


def batches(steps: int, batch: int = 8, seq: int = 32, vocab: int = 128) -> list[torch.Tensor]:
    """A learnable synthetic language: each sequence counts upward from a random start."""
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(0, vocab, (steps, batch, 1), generator=g)
    return list((starts + torch.arange(seq + 1)) % vocab)


def train(device: str, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = TinyLM().to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for data in batches(steps):
        data = data.to(device)
        logits = model(data[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), data[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def main(steps: int = 20) -> None:
    print(f"TorchNeuron demo: a 2-layer transformer LM trains on `neuron` ({torch.neuron.get_device_name()})")
    start = time.perf_counter()
    neuron = train("neuron", steps)
    neuron_s = time.perf_counter() - start
    start = time.perf_counter()
    cpu = train("cpu", steps)
    cpu_s = time.perf_counter() - start
    print(f"{'step':>4s} {'neuron loss':>12s} {'cpu loss':>12s}")
    for i, (a, b) in enumerate(zip(neuron, cpu)):
        print(f"{i:4d} {a:12.4f} {b:12.4f}")
    drift = max(abs(a - b) for a, b in zip(neuron, cpu))
    print(f"loss {neuron[0]:.3f} -> {neuron[-1]:.3f} on neuron; max |neuron - cpu| = {drift:.2e}")
    m = torch_neuronx.metrics()
    print(f"time: neuron {neuron_s:.1f}s (incl. compiles), cpu {cpu_s:.1f}s")
    print(f"executables compiled: {m['cache_misses']} ({m['compile_seconds']:.1f}s), cache hits: {m['cache_hits']}")
    print(f"CPU fallbacks: {sum(m['fallbacks'].values())} {sorted(m['fallbacks'])}")
    print(
        f"device memory: {torch.neuron.memory_allocated() / 2**20:.2f} MiB allocated, "
        f"peak {torch.neuron.max_memory_allocated() / 2**20:.2f} MiB"
    )
