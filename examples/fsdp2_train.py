"""FSDP2 training on `neuron`, one process per NeuronCore, launched with torchrun.

    torchrun --nproc-per-node 2 examples/fsdp2_train.py            # 30 steps
    torchrun --nproc-per-node 2 examples/fsdp2_train.py --quick    # 3 steps

Each process owns `neuron:0` (its core comes from `LOCAL_RANK`); the collectives run over the
`neuron` process-group backend. `fully_shard` splits every block's parameters across the
processes, each process trains on its slice of the batch, and FSDP2 averages the gradients, so
the run must follow single-process training on the whole batch: rank 0 runs that on CPU as the
reference.
"""

from __future__ import annotations

import argparse
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

VOCAB, WIDTH, LENGTH, BATCH = 64, 32, 16, 8


class Block(nn.Module):
    """A residual MLP block: the unit `fully_shard` shards."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(self.norm(x))))


class TinyLM(nn.Module):
    """Embedding, blocks, and a head predicting the next token."""

    def __init__(self, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(depth))
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits, one row per token (batch * length, vocab)."""
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        # a 2-D head: on 3-D input Linear returns a view, about which FSDP2 warns (on CPU alike)
        return self.head(x.flatten(0, 1))


def batch(step: int) -> torch.Tensor:
    """The whole batch of a step: sequences counting up from random starts (same on every rank)."""
    starts = torch.randint(0, VOCAB, (BATCH, 1), generator=torch.Generator().manual_seed(step))
    return (starts + torch.arange(LENGTH + 1)) % VOCAB


def train(model: nn.Module, steps: int, device: str, rank: int = 0, world: int = 1) -> list[float]:
    """Losses of the whole batch per step; each process trains on its `1/world` of the rows."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for step in range(steps):
        ids = batch(step).chunk(world)[rank].to(device)
        loss = nn.functional.cross_entropy(model(ids[:, :-1]), ids[:, 1:].flatten())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        whole = loss.detach().clone()
        if world > 1:
            dist.all_reduce(whole, op=dist.ReduceOp.AVG)  # equal slices: the mean of the means
        losses.append(whole.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 steps")
    steps = 3 if parser.parse_args().quick else 30
    dist.init_process_group("neuron")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    reference = TinyLM(depth=2)
    model = copy.deepcopy(reference).to("neuron")
    mesh = init_device_mesh("neuron", (world,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)  # one all-gather per block in forward and backward
    fully_shard(model, mesh=mesh)  # the embedding and the head
    local = sum(p.to_local().numel() for p in model.parameters())
    losses = train(model, steps, "neuron", rank, world)

    if rank == 0:
        total = sum(p.numel() for p in reference.parameters())
        print(f"{world} processes, {local} of {total} parameters on each")
        print(f"loss {' -> '.join(f'{loss:.4f}' for loss in losses)}")
        expected = train(reference, steps, "cpu")
        difference = max(abs(a - b) / abs(b) for a, b in zip(losses, expected))
        print(f"neuron (FSDP2) vs CPU (one process): max relative loss difference = {difference:.2e}")
        assert difference < 1e-3, (losses, expected)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
