"""A training step compiled with `torch.compile(backend="neuron")`.

`torch.compile(model, backend="neuron")` hands Dynamo's graph to AOTAutograd, and the forward
and the backward each run as one XLA executable; `torch.compile(optimizer.step, ...)` makes the
AdamW update one more. After the first step every step reuses them (no recompiles while shapes
stay fixed). Losses are checked against the same training in eager mode on CPU.

    python examples/compile_train_step.py            # 4 blocks, 50 steps
    python examples/compile_train_step.py --quick    # 1 block, 4 steps
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn

import torch_neuronx

VOCAB, WIDTH, LENGTH, BATCH = 64, 64, 32, 8


class Block(nn.Module):
    """A pre-norm transformer block: causal self-attention and an MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, num_heads=4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attention(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        mask = torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool, device=ids.device).triu(1)
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


def batches(steps: int) -> list[torch.Tensor]:
    """Sequences counting up from random starts: the next token is learnable."""
    starts = torch.randint(0, VOCAB, (steps, BATCH, 1), generator=torch.Generator().manual_seed(0))
    return list((starts + torch.arange(LENGTH + 1)) % VOCAB)


def train(device: str, compiled: bool, depth: int, steps: int) -> list[float]:
    torch.manual_seed(0)
    model = TinyLM(depth).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    forward = torch.compile(model, backend="neuron") if compiled else model
    update = torch.compile(optimizer.step, backend="neuron") if compiled else optimizer.step

    def step(ids: torch.Tensor) -> torch.Tensor:
        logits = forward(ids[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
        loss.backward()
        update()
        optimizer.zero_grad()
        return loss.detach()

    losses = []
    for i, ids in enumerate(batches(steps)):
        start = time.perf_counter()
        losses.append(step(ids.to(device)).item())
        if compiled and i < 2:
            print(f"step {i}: {time.perf_counter() - start:.2f} s" + (" (compiles)" if i == 0 else ""))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1 block, 4 steps")
    depth, steps = (1, 4) if parser.parse_args().quick else (4, 50)
    losses = train("neuron", compiled=True, depth=depth, steps=steps)
    print(f"loss {' -> '.join(f'{loss:.4f}' for loss in losses[:: max(1, steps // 8)])}")
    metrics = torch_neuronx.metrics()["compile"]
    print(f"graphs {metrics['graphs']}, executables compiled {metrics['compiles']}, recompiles {metrics['recompiles']}")

    reference = train("cpu", compiled=False, depth=depth, steps=steps)
    difference = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    print(f"neuron (compiled) vs CPU (eager): max relative loss difference = {difference:.2e}")
    assert metrics["recompiles"] == 0 and difference < 1e-3, (losses, reference)


if __name__ == "__main__":
    main()
