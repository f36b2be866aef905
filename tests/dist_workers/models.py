"""Training on neuron with DDP, FSDP2, DTensor, Tensor Parallel, FSDP2+TP and distributed
checkpointing gives the numbers of a single-process CPU run (or of the same program on CPU)."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.nn.functional as F  # noqa: N812
from common import RANK, WORLD, Checks
from torch import nn
from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

STEPS = 3
LR = 0.2
TOL = {"rtol": 1e-4, "atol": 1e-5}


# --- models -----------------------------------------------------------------------------------


class Stack(nn.Module):
    """A few MLP blocks and a head: the unit FSDP2 shards block by block."""

    def __init__(self, dim: int = 8, hidden: int = 16, out: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, hidden), nn.Tanh(), nn.Linear(hidden, dim)) for _ in range(depth)
        )
        self.head = nn.Linear(dim, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class Attention(nn.Module):
    """Llama-style attention; the head count comes from the (possibly sharded) projections."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape

        def heads(y: torch.Tensor) -> torch.Tensor:
            return y.view(b, t, -1, self.head_dim).transpose(1, 2)

        out = F.scaled_dot_product_attention(heads(self.q(x)), heads(self.k(x)), heads(self.v(x)), is_causal=True)
        return self.o(out.transpose(1, 2).reshape(b, t, -1))


class GatedMLP(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, dim: int = 16, heads: int = 4, hidden: int = 32) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.RMSNorm(dim), nn.RMSNorm(dim)
        self.attn, self.mlp = Attention(dim, heads), GatedMLP(dim, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Llama(nn.Module):
    def __init__(self, depth: int = 2) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Block() for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


TP_PLAN = {
    "attn.q": ColwiseParallel(),
    "attn.k": ColwiseParallel(),
    "attn.v": ColwiseParallel(),
    "attn.o": RowwiseParallel(),
    "mlp.gate": ColwiseParallel(),
    "mlp.up": ColwiseParallel(),
    "mlp.down": RowwiseParallel(),
}


# --- training helpers -------------------------------------------------------------------------


def batches(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(shape, generator=g), torch.randn(out_shape, generator=g)) for _ in range(STEPS)]


def train(
    model: nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], device: str, part: int = 0, parts: int = 1
) -> list[float]:
    """SGD on `part` of `parts` equal slices of every batch; returns the mean loss over all parts.
    The update is written out (p -= lr * grad) so that only the parallelism is under test here."""
    losses = []
    for x, y in data:
        rows = x.shape[0] // parts
        sl = slice(part * rows, (part + 1) * rows)
        loss = F.mse_loss(model(x[sl].to(device)), y[sl].to(device))
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * LR)
                p.grad = None
        total = loss.detach().clone()
        if parts > 1:
            dist.all_reduce(total, op=dist.ReduceOp.AVG)
        losses.append(total.item())
    return losses


def full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def assert_params(reference: nn.Module, model: nn.Module, **tol: Any) -> None:
    ref = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        name = name.replace("module.", "")
        torch.testing.assert_close(full(p).float(), full(ref[name]).float(), msg=lambda m, n=name: f"{n}: {m}", **tol)


def assert_losses(expected: list[float], actual: list[float], rtol: float = 1e-4) -> None:
    torch.testing.assert_close(torch.tensor(actual), torch.tensor(expected), rtol=rtol, atol=1e-6)


# --- checks -----------------------------------------------------------------------------------


def ddp() -> None:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    reference = Stack()
    model = DistributedDataParallel(copy.deepcopy(reference).to("neuron"))
    data = batches((4 * WORLD, 8), (4 * WORLD, 4))
    expected = train(reference, data, "cpu")
    assert_losses(expected, train(model, data, "neuron", RANK, WORLD))
    assert_params(reference, model, **TOL)


def fsdp(reshard_after_forward: bool | int = True) -> None:
    torch.manual_seed(0)
    reference = Stack()
    model = copy.deepcopy(reference).to("neuron")
    mesh = init_device_mesh("neuron", (WORLD,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    for p in model.parameters():
        assert isinstance(p, DTensor) and p.device_mesh.device_type == "neuron" and p.to_local().device.type == "neuron"
    data = batches((4 * WORLD, 8), (4 * WORLD, 4))
    expected = train(reference, data, "cpu")
    assert_losses(expected, train(model, data, "neuron", RANK, WORLD))
    assert_params(reference, model, **TOL)


def _sharded_stack(device: str, **options: Any) -> Stack:
    """The seeded Stack on `device`, each block and the whole fully_shard-ed over all ranks."""
    torch.manual_seed(0)
    model = Stack().to(device)
    mesh = init_device_mesh(device, (WORLD,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh, **options)
    fully_shard(model, mesh=mesh, **options)
    return model


def fsdp_mixed_precision() -> None:
    """bf16 parameters, fp32 gradient reduction: same numbers as the same FSDP2 program on CPU."""
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    data = batches((4 * WORLD, 8), (4 * WORLD, 4))
    runs = {}
    for device in ("cpu", "neuron"):
        model = _sharded_stack(device, mp_policy=policy)
        runs[device] = (train(model, data, device, RANK, WORLD), model)
    assert_losses(runs["cpu"][0], runs["neuron"][0], rtol=2e-2)
    assert_params(runs["cpu"][1], runs["neuron"][1], rtol=2e-2, atol=2e-2)


def fsdp_divide_factor() -> None:
    """A custom gradient divide factor: FSDP2 would reduce with PREMUL_SUM, which Gloo lacks;
    with sum-only reductions (the workaround the backend's error names) it divides on device,
    and trains as the same FSDP2 program on CPU does."""
    data = batches((4 * WORLD, 8), (4 * WORLD, 4))
    runs = {}
    for device in ("cpu", "neuron"):
        model = _sharded_stack(device)
        model.set_gradient_divide_factor(3.0 * WORLD)
        model.set_force_sum_reduction_for_comms(True)
        runs[device] = (train(model, data, device, RANK, WORLD), model)
    assert_losses(runs["cpu"][0], runs["neuron"][0])
    assert_params(runs["cpu"][1], runs["neuron"][1], **TOL)


def dtensor() -> None:
    mesh = init_device_mesh("neuron", (WORLD,))
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(4 * WORLD, 6, generator=g), torch.randn(6, 2 * WORLD, generator=g)
    d = distribute_tensor(x.to("neuron"), mesh, [Shard(0)])
    assert d.to_local().device.type == "neuron"
    torch.testing.assert_close(d.to_local().cpu(), x.chunk(WORLD)[RANK])
    torch.testing.assert_close(d.full_tensor().cpu(), x)
    torch.testing.assert_close(d.redistribute(mesh, [Replicate()]).to_local().cpu(), x)
    torch.testing.assert_close(d.redistribute(mesh, [Shard(1)]).to_local().cpu(), x.chunk(WORLD, 1)[RANK])
    r = distribute_tensor(x.to("neuron"), mesh, [Replicate()])
    torch.testing.assert_close(r.redistribute(mesh, [Shard(1)]).to_local().cpu(), x.chunk(WORLD, 1)[RANK])
    partial = DTensor.from_local(x.to("neuron") * (RANK + 1), mesh, [Partial()])
    scale = sum(range(1, WORLD + 1))
    torch.testing.assert_close(partial.redistribute(mesh, [Replicate()]).to_local().cpu(), x * scale)
    partial = DTensor.from_local(x.to("neuron") * (RANK + 1), mesh, [Partial()])
    torch.testing.assert_close(partial.redistribute(mesh, [Shard(0)]).to_local().cpu(), (x * scale).chunk(WORLD)[RANK])
    # sharded matmul: row-sharded activations times column-sharded weight
    y = d @ distribute_tensor(w.to("neuron"), mesh, [Shard(1)])
    torch.testing.assert_close(y.full_tensor().cpu(), x @ w, rtol=1e-5, atol=1e-5)


def tensor_parallel() -> None:
    torch.manual_seed(0)
    reference = Block()
    model = copy.deepcopy(reference).to("neuron")
    mesh = init_device_mesh("neuron", (WORLD,))
    parallelize_module(model, mesh, TP_PLAN)
    assert isinstance(model.attn.q.weight, DTensor) and model.attn.q.weight.to_local().shape[0] == 16 // WORLD
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    expected = reference(x)
    actual = model(x.to("neuron"))
    torch.testing.assert_close(actual.cpu(), expected.detach(), **TOL)
    expected.pow(2).mean().backward()
    actual.pow(2).mean().backward()
    ref = dict(reference.named_parameters())
    for name, p in model.named_parameters():
        torch.testing.assert_close(full(p.grad), ref[name].grad, msg=lambda m, n=name: f"grad {n}: {m}", **TOL)


def fsdp_tp() -> None:
    """2-D: FSDP2 over `dp`, Tensor Parallel over `tp` on a (2, 2) neuron mesh."""
    assert WORLD == 4
    mesh = init_device_mesh("neuron", (2, 2), mesh_dim_names=("dp", "tp"))
    torch.manual_seed(0)
    reference = Llama()
    model = copy.deepcopy(reference).to("neuron")
    for layer in model.layers:
        parallelize_module(layer, mesh["tp"], TP_PLAN)
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    data = batches((4, 5, 16), (4, 5, 16))
    expected = train(reference, data, "cpu")
    dp_rank = mesh["dp"].get_local_rank()
    assert_losses(expected, train(model, data, "neuron", dp_rank, 2))
    assert_params(reference, model, **TOL)


def checkpoint() -> None:
    """Save an FSDP2 model with torch.distributed.checkpoint and load it into a fresh one."""
    mesh = init_device_mesh("neuron", (WORLD,))

    def build(seed: int) -> nn.Module:
        torch.manual_seed(seed)
        model = Stack().to("neuron")
        for block in model.blocks:
            fully_shard(block, mesh=mesh)
        return fully_shard(model, mesh=mesh)

    path = Path(os.environ["DIST_RESULTS"]) / "ckpt"
    saved = build(0)
    train(saved, batches((4 * WORLD, 8), (4 * WORLD, 4))[:1], "neuron", RANK, WORLD)
    dcp.save(get_model_state_dict(saved), checkpoint_id=str(path))
    loaded = build(1)
    state = get_model_state_dict(loaded)
    dcp.load(state, checkpoint_id=str(path))
    set_model_state_dict(loaded, state)
    for (name, a), b in zip(saved.named_parameters(), loaded.parameters()):
        assert b.to_local().device.type == "neuron", name
        torch.testing.assert_close(full(b), full(a), rtol=0, atol=0, msg=lambda m, n=name: f"{n}: {m}")


GROUPS: dict[str, list[tuple[str, Callable[[], None]]]] = {
    "ddp": [("ddp", ddp)],
    "fsdp": [
        ("fsdp.reshard", fsdp),
        ("fsdp.no_reshard", lambda: fsdp(False)),
        ("fsdp.mixed_precision", fsdp_mixed_precision),
        ("fsdp.divide_factor", fsdp_divide_factor),
    ],
    "dtensor": [("dtensor", dtensor)],
    "tp": [("tensor_parallel", tensor_parallel)],
    "dcp": [("checkpoint", checkpoint)],
    "fsdp_tp": [("fsdp_tp", fsdp_tp)],
}


def run(checks: Checks, groups: list[str]) -> None:
    for group in groups:
        for name, fn in GROUPS[group]:
            checks(f"models.{name}", fn)
