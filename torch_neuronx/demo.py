"""`torchneuron demo`: train a small transformer language model on `neuron` and show that the
loss goes down, next to the same run on CPU, then print device and executable-cache statistics."""

from __future__ import annotations

import time
from typing import Any

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


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn(*args)
    return result, time.perf_counter() - start


def main(steps: int = 20) -> None:
    print(f"TorchNeuron demo: a 2-layer transformer LM trains on `neuron` ({torch.neuron.get_device_name()})")
    # Outside the timings: JAX's import and the PJRT client start (the first device op), and
    # torch._dynamo's import, which the first optimizer of a process pays on any device.
    torch.zeros(1, device="neuron").cpu()
    torch.optim.AdamW([nn.Parameter(torch.zeros(1))])
    neuron, neuron_s = timed(train, "neuron", steps)
    _, repeated_s = timed(train, "neuron", steps)
    cpu, cpu_s = timed(train, "cpu", steps)
    print(f"{'step':>4s} {'neuron loss':>12s} {'cpu loss':>12s}")
    for i, (a, b) in enumerate(zip(neuron, cpu)):
        print(f"{i:4d} {a:12.4f} {b:12.4f}")
    drift = max(abs(a - b) for a, b in zip(neuron, cpu))
    print(f"loss {neuron[0]:.3f} -> {neuron[-1]:.3f} on neuron; max |neuron - cpu| = {drift:.2e}")
    m = torch_neuronx.metrics()
    print(
        f"time: neuron {neuron_s:.2f}s the first time (building its executables), {repeated_s:.2f}s repeated; "
        f"cpu {cpu_s:.2f}s"
    )
    print(
        f"executables built: {m['cache_misses']} in {m['compile_seconds']:.2f}s "
        f"({m['executables_loaded']} loaded from the persistent cache); cache hits: {m['cache_hits']}"
    )
    print(f"CPU fallbacks: {sum(m['fallbacks'].values())} {sorted(m['fallbacks'])}")
    print(
        f"device memory: {torch.neuron.memory_allocated() / 2**20:.2f} MiB allocated, "
        f"peak {torch.neuron.max_memory_allocated() / 2**20:.2f} MiB"
    )
