"""Distributed benchmarks for `torchneuron bench`: all-reduce bus bandwidth, FSDP2 and DDP training
step time on neuron tensors next to Gloo on plain CPU tensors, for several process counts (FSDP2
also with neuron's collectives all over Gloo instead of shared memory, DDP also with every
collective synchronous, to show what overlap buys).

Each measurement spawns its own processes (loopback TCPStore, one `neuron:0` per process) and
returns plain dicts. `python -m torch_neuronx.bench.collectives` prints a table.
"""

from __future__ import annotations

import os
import resource
import socket
import statistics
import time
from typing import Any

MB = 2**20
DEFAULT_SIZES_MB = (1, 4, 16, 64, 256)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(fn: Any, world: int, *args: Any) -> Any:
    """Run fn(rank, world, port, queue, *args) on `world` processes; return rank 0's result."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    mp.start_processes(fn, args=(world, port, queue, *args), nprocs=world, join=True, start_method="spawn")
    return queue.get()


def _init(rank: int, world: int, port: int, backend: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank)
    )
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    import torch.distributed as dist

    dist.init_process_group(backend)


def _time(fn: Any, iters: int) -> float:
    """Median seconds of `fn()` over `iters` runs after one warm-up (collectives synchronize)."""
    fn()
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def _allreduce_worker(rank: int, world: int, port: int, queue: Any, sizes_mb: tuple[int, ...], iters: int) -> None:
    import torch
    import torch.distributed as dist

    _init(rank, world, port, "cpu:gloo,neuron:neuron")
    for device in ("neuron", "cpu"):  # the transports' first use (threads, pages) stays out of the rows
        dist.all_reduce(torch.ones(4 * MB, device=device))
    rows = []
    for size in sizes_mb:
        numel = size * MB // 4
        row = {"world": world, "size_mb": size}
        for device in ("neuron", "cpu"):
            t = torch.ones(numel, device=device)
            dist.all_reduce(t)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            seconds = _time(lambda t=t: dist.all_reduce(t), iters if size < 64 else max(1, iters // 2))
            peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 / MB  # ru_maxrss: KiB
            algbw = size * MB / seconds / 1e9
            row[device] = {
                "ms": seconds * 1e3,
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * 2 * (world - 1) / world,
                "peak_rss_growth_mb": peak,
            }
            del t
        rows.append(row)
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def allreduce_bandwidth(
    worlds: tuple[int, ...] = (2, 4), sizes_mb: tuple[int, ...] = DEFAULT_SIZES_MB, iters: int = 5
) -> list[dict[str, Any]]:
    """All-reduce (SUM, float32) time and bus bandwidth per size and process count, neuron
    tensors (staged through host) next to Gloo on CPU tensors."""
    rows: list[dict[str, Any]] = []
    for world in worlds:
        rows += _spawn(_allreduce_worker, world, tuple(sizes_mb), iters)
    return rows


def _mlp(dim: int, depth: int, device: str) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    blocks = [nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim)) for _ in range(depth)]
    return nn.Sequential(*blocks).to(device)


def _train_step(model: Any, x: Any) -> Any:
    import torch
    import torch.nn.functional as F  # noqa: N812

    def step() -> None:
        loss = F.mse_loss(model(x), x)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p.sub_(p.grad * 1e-3)
                p.grad = None
        loss.item()  # wait for the step's device work

    return step


def _no_all_reduce(state, bucket):  # unannotated: DDP rejects a bucket annotation but dist.GradBucket
    """A DDP comm hook that skips the gradient all-reduce: the step's compute alone."""
    import torch

    future: torch.futures.Future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def _alternated(steps: dict[str, Any], rounds: int, per_round: int = 3) -> dict[str, float]:
    """Median milliseconds of each step function, timed in turns inside the same processes (so
    that a noisy host weighs on every variant alike): two warm-up calls each, then `rounds`
    rounds of `per_round` calls of each, every call after a barrier."""
    import torch.distributed as dist

    for step in steps.values():
        step()
        step()
    samples: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            for _ in range(per_round):
                dist.barrier()
                start = time.perf_counter()
                step()
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) * 1e3 for name, times in samples.items()}


def _ddp_worker(
    rank: int, world: int, port: int, queue: Any, device: str, dim: int, depth: int, batch: int, rounds: int
) -> None:
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from torch_neuronx.distributed import kernels

    _init(rank, world, port, "neuron" if device == "neuron" else "gloo")
    x = torch.randn(batch, dim, device=device)
    asynchronous = {"async": True, "sync": False, "compute": True} if device == "neuron" else {"async": True}
    steps = {}
    for mode, enabled in asynchronous.items():
        model = DistributedDataParallel(_mlp(dim, depth, device))
        if mode == "compute":
            model.register_comm_hook(None, _no_all_reduce)
        step = _train_step(model, x)

        def run(step: Any = step, enabled: bool = enabled) -> None:
            kernels.set_asynchronous(enabled)
            step()

        steps[mode] = run
    ms = _alternated(steps, rounds)
    if rank == 0:
        queue.put(ms)
    import torch.distributed as dist

    dist.destroy_process_group()


def ddp_step_time(world: int = 2, dim: int = 512, depth: int = 8, batch: int = 8, rounds: int = 5) -> dict[str, Any]:
    """DDP forward + backward + SGD step, three copies of the model in the same processes, timed
    in turns: neuron with asynchronous collectives (the gradient all-reduce overlapping the rest of
    the backward), with every collective synchronous, and with no all-reduce at all (the compute
    alone, the floor overlap could reach); then the same model on CPU tensors with Gloo."""
    neuron = _spawn(_ddp_worker, world, "neuron", dim, depth, batch, rounds)
    cpu = _spawn(_ddp_worker, world, "cpu", dim, depth, batch, rounds)
    params = sum(p.numel() for p in _mlp(dim, depth, "cpu").parameters())
    return {
        "world": world,
        "params": params,
        "neuron_ms": neuron["async"],
        "neuron_sync_ms": neuron["sync"],
        "neuron_compute_ms": neuron["compute"],
        "gloo_cpu_ms": cpu["async"],
    }


def _fsdp_worker(
    rank: int, world: int, port: int, queue: Any, dim: int, depth: int, batch: int, rounds: int, device: str
) -> None:
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard

    _init(rank, world, port, "neuron" if device == "neuron" else "gloo")
    groups = {"step": dist.group.WORLD}
    if device == "neuron" and world > 1:  # the same group's collectives all over Gloo
        os.environ["TORCH_NEURONX_SHM_COLLECTIVES"] = "0"
        groups["over_gloo_step"] = dist.new_group()
        del os.environ["TORCH_NEURONX_SHM_COLLECTIVES"]
    steps = {}
    for name, group in groups.items():
        model = _mlp(dim, depth, device)
        mesh = DeviceMesh.from_group(group, device)
        for block in model:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        steps[name] = _train_step(model, torch.randn(batch, dim, device=device))
    ms = _alternated(steps, rounds)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())  # DTensors: the whole model's counts
        queue.put({"world": world, "params": params, "batch_per_rank": batch, **{f"{k}_ms": v for k, v in ms.items()}})
    dist.destroy_process_group()


def fsdp_step_time(
    worlds: tuple[int, ...] = (1, 2, 4), dim: int = 256, depth: int = 4, batch: int = 8, rounds: int = 5
) -> list[dict[str, Any]]:
    """FSDP2 (`fully_shard` per block) forward + backward + SGD step time per process count: on
    neuron, its collectives through shared memory and (another copy of the model, timed in turns
    in the same processes) all over Gloo; and on CPU tensors with Gloo."""
    rows = []
    for world in worlds:
        row = _spawn(_fsdp_worker, world, dim, depth, batch, rounds, "neuron")
        row["gloo_cpu_step_ms"] = _spawn(_fsdp_worker, world, dim, depth, batch, rounds, "cpu")["step_ms"]
        rows.append(row)
    return rows


def run(worlds: tuple[int, ...] = (2, 4), sizes_mb: tuple[int, ...] = DEFAULT_SIZES_MB) -> dict[str, Any]:
    """Both benchmarks, as `torchneuron bench` reports them."""
    return {
        "allreduce": allreduce_bandwidth(worlds, sizes_mb),
        "fsdp2": fsdp_step_time((1, *worlds)),
        "ddp": [ddp_step_time(world) for world in worlds],
        "cpu_count": os.cpu_count(),
    }


def format_table(result: dict[str, Any]) -> str:
    lines = [
        f"all-reduce float32 (host cores: {result['cpu_count']})",
        "procs  size    neuron ms  busbw GB/s  peak RSS +MB   gloo-cpu ms  busbw GB/s  ratio",
    ]
    for row in result["allreduce"]:
        n, c = row["neuron"], row["cpu"]
        lines.append(
            f"{row['world']:>5}  {row['size_mb']:>4}MB {n['ms']:>10.1f} {n['busbw_gbs']:>11.3f} "
            f"{n['peak_rss_growth_mb']:>12.0f} {c['ms']:>13.1f} {c['busbw_gbs']:>11.3f} "
            f"{n['busbw_gbs'] / c['busbw_gbs']:>6.2f}"
        )
    lines += [
        "",
        "FSDP2 step (fwd+bwd+update); neuron's collectives through shared memory, and all over Gloo (in turns)",
        "procs  params     neuron ms  over Gloo ms  gloo-cpu ms  ratio",
    ]
    for row in result["fsdp2"]:
        over_gloo = row.get("over_gloo_step_ms", float("nan"))  # one process: no collectives
        lines.append(
            f"{row['world']:>5}  {row['params']:>9,} {row['step_ms']:>10.1f} {over_gloo:>13.1f}"
            f" {row['gloo_cpu_step_ms']:>12.1f} {row['step_ms'] / row['gloo_cpu_step_ms']:>6.2f}"
        )
    lines += [
        "",
        "DDP step (fwd+bwd+update), neuron's modes in turns; overlap: the step's saving against all-sync,",
        "and the share of the all-sync step's communication (all-sync minus no all-reduce) it hides",
        "procs  params     neuron ms  all-sync ms  no all-reduce ms  gloo-cpu ms  saving  comm hidden",
    ]
    for row in result["ddp"]:
        run, sync, compute = row["neuron_ms"], row["neuron_sync_ms"], row["neuron_compute_ms"]
        hidden = (sync - run) / (sync - compute) if sync > compute else float("nan")
        lines.append(
            f"{row['world']:>5}  {row['params']:>9,} {run:>10.1f} {sync:>12.1f} {compute:>17.1f}"
            f" {row['gloo_cpu_ms']:>12.1f} {1 - run / sync:>7.0%} {hidden:>12.0%}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(format_table(run()))
