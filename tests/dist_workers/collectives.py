"""Every collective on neuron tensors equals the same collective run by Gloo on CPU tensors."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from common import RANK, WORLD, Checks, assert_equal, clone, neuron, rand

from torch_neuronx.distributed import kernels, shared_memory

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTS = [torch.int32, torch.int64, torch.uint8]
PEER_NEXT, PEER_PREV = (RANK + 1) % WORLD, (RANK - 1) % WORLD


def vs_gloo(cpu_group: Any, fn: Callable[..., Any], *inputs: Any) -> None:
    """fn(group, *tensors) on CPU tensors with Gloo and on neuron copies with the neuron group;
    returned values and (mutated) inputs must be identical. With more than two ranks, floating-point
    reductions may differ by a rounding at the sums' magnitude: the neuron group's shared memory
    adds the ranks' values in rank order, Gloo's ring in another."""
    cpu_in, dev_in = clone(inputs), neuron(inputs)
    expected = fn(cpu_group, *cpu_in)
    actual = fn(None, *dev_in)
    ulps = 0 if WORLD <= 2 else 2
    assert_equal(expected, actual, what="result", ulps=ulps)
    assert_equal(list(cpu_in), list(dev_in), what="inputs", ulps=ulps)


def _all_reduce(op: Any, async_op: bool = False) -> Callable[..., Any]:
    def fn(group: Any, t: torch.Tensor) -> None:
        work = dist.all_reduce(t, op=op, group=group, async_op=async_op)
        if async_op:
            assert work.wait()
            assert work.is_completed()

    return fn


def all_reduce(cpu: Any) -> None:
    for dtype in [*FLOATS, *INTS]:
        ops = [R.SUM, R.MIN, R.MAX, R.PRODUCT]
        if not dtype.is_floating_point:
            ops += [R.BAND, R.BOR, R.BXOR]
        else:
            ops += [R.AVG]
        for op in ops:
            vs_gloo(cpu, _all_reduce(op), rand(5, 3, dtype=dtype))
    vs_gloo(cpu, _all_reduce(R.SUM), rand(4, dtype=torch.bool))
    vs_gloo(cpu, _all_reduce(R.SUM), rand(dtype=torch.float32))  # 0-d


def all_reduce_complex(cpu: Any) -> None:
    # dist.all_reduce hands the backend view_as_real(t): a float view of a complex storage
    vs_gloo(cpu, _all_reduce(R.SUM), rand(5, 3, dtype=torch.complex64))


def all_reduce_async_and_views(cpu: Any) -> None:
    vs_gloo(cpu, _all_reduce(R.SUM, async_op=True), rand(5, 3))

    def into_view(group: Any, t: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(t[1:3], group=group)  # a contiguous window of a bigger storage
        return t

    vs_gloo(cpu, into_view, rand(5, 3))

    def future(group: Any, t: torch.Tensor) -> Any:
        fut = dist.all_reduce(t, group=group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0] * 2).wait()

    vs_gloo(cpu, future, rand(5, 3))


def staging_and_device_work(cpu: Any) -> None:
    """The transport reads and writes device memory directly where it can (CPU platform, a
    tensor that is its whole storage): work queued before a collective sees the old values,
    views and later in-place ops the new ones, on either path."""

    def around(group: Any, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        before = t * 2  # queued before the collective: reads the values it started with
        row = t.view(4, -1)[1]
        dist.all_reduce(t, group=group)
        t.add_(1)
        dist.all_reduce(t, op=R.MAX, group=group)
        return before, row.clone(), t.clone()

    vs_gloo(cpu, around, rand(64, 32))

    def in_place_all_gather(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = t.new_zeros((WORLD * t.shape[0], *t.shape[1:]))
        mine = out[RANK * t.shape[0] : (RANK + 1) * t.shape[0]]
        mine.copy_(t)
        dist.all_gather_into_tensor(out, mine, group=group)  # input is a view of the output (FSDP2)
        return out

    vs_gloo(cpu, in_place_all_gather, rand(8, 5))

    def same_tensor_twice(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=group)
        dist.all_to_all_single(t, t.clone(), group=group)
        return out

    vs_gloo(cpu, same_tensor_twice, rand(4 * WORLD, 3))


def lane_order_and_futures(cpu: Any) -> None:
    """Collectives start in call order once the device has computed their tensors, while the
    caller goes on: one rank queues much more device work before its first collective than the
    other, then an asynchronous all-reduce, a synchronous broadcast and an asynchronous
    reduce-scatter complete with Gloo's results."""

    def mixed(group: Any, t: torch.Tensor, m: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for _ in range(20 if RANK == 0 else 1):
            m = (m @ m).remainder(7)  # exact in float32; rank 0's tensors are computed later than rank 1's
        summed = t + m.sum()
        first = dist.all_reduce(summed, group=group, async_op=True)
        dist.broadcast(m, src=WORLD - 1, group=group)
        out = t.new_empty(t.shape[0] // WORLD, *t.shape[1:])
        scattered = dist.reduce_scatter_tensor(out, t * 2, group=group, async_op=True)
        first.wait()
        scattered.wait()
        if group is None:  # Gloo's reduce-scatter work has no future; ours has, through a waiting thread
            again = torch.empty_like(out)
            future = dist.reduce_scatter_tensor(again, t * 2, async_op=True).get_future()
            assert_equal(out.cpu(), future.wait(), what="reduce-scatter future")
        return summed, m, out

    vs_gloo(cpu, mixed, rand(4 * WORLD, 3), rand(64, 64, dtype=torch.int64).remainder(7).float())


def side_stream_waits_like_cuda(cpu: Any) -> None:
    """A collective waited on a side stream (FSDP2's reduce-scatter, `async_op=False`) returns
    while the peer has not joined yet; the next device use of its tensors, or a synchronize,
    completes it: reads see Gloo's result, an in-place write waits for the read of its input."""
    import time

    from torch_neuronx.runtime import deferred

    def scattered(group: Any, t: torch.Tensor, first: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if RANK == WORLD - 1:
            time.sleep(1.0)  # the others' calls return before this rank joins
        out, again = t.new_empty(t.shape[0] // WORLD, *t.shape[1:]), t.new_empty(t.shape[0] // WORLD, *t.shape[1:])
        side = torch.neuron.Stream()
        with torch.neuron.stream(side):
            dist.reduce_scatter_tensor(out, t, group=group)
            if group is None and RANK != WORLD - 1:
                assert deferred.active(), "returned only once the collective was done"
            dist.all_reduce(first, group=group)
            event = side.record_event()
        torch.neuron.current_stream().wait_event(event)
        doubled = out * 2  # a device use: completes the reduce-scatter first
        t.add_(1)  # an in-place write to its input: likewise
        dist.reduce_scatter_tensor(again, t, group=group)
        torch.neuron.synchronize()
        assert not deferred.active()
        return out, doubled, again, first

    vs_gloo(cpu, scattered, rand(4 * WORLD, 3), rand(5))


def broadcast_reduce(cpu: Any) -> None:
    for src in (0, WORLD - 1):
        vs_gloo(cpu, lambda g, t, s=src: dist.broadcast(t, src=s, group=g), rand(4, 3, dtype=torch.bfloat16))
        vs_gloo(cpu, lambda g, t, s=src: dist.broadcast(t, src=s, group=g), rand(7, dtype=torch.int64))

    def reduce(group: Any, t: torch.Tensor) -> torch.Tensor | None:
        dist.reduce(t, dst=WORLD - 1, op=R.MAX, group=group)
        return t if RANK == WORLD - 1 else None

    vs_gloo(cpu, reduce, rand(6))


def all_gather(cpu: Any) -> None:
    def listed(group: Any, t: torch.Tensor) -> list[torch.Tensor]:
        outs = [torch.empty_like(t) for _ in range(WORLD)]
        dist.all_gather(outs, t, group=group)
        return outs

    def into_tensor(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = t.new_empty((WORLD * t.shape[0], *t.shape[1:]))
        dist.all_gather_into_tensor(out, t, group=group)
        return out

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        vs_gloo(cpu, listed, rand(3, 2, dtype=dtype))
        vs_gloo(cpu, into_tensor, rand(3, 2, dtype=dtype))


def reduce_scatter(cpu: Any) -> None:
    def listed(group: Any, ins: list[torch.Tensor]) -> torch.Tensor:
        out = torch.empty_like(ins[0])
        dist.reduce_scatter(out, ins, group=group)
        return out

    def tensor(group: Any, t: torch.Tensor, op: Any = R.SUM) -> torch.Tensor:
        out = t.new_empty((t.shape[0] // WORLD, *t.shape[1:]))
        dist.reduce_scatter_tensor(out, t, op=op, group=group)
        return out

    vs_gloo(cpu, listed, [rand(3, 2, seed=i) for i in range(WORLD)])
    for dtype in (torch.float32, torch.bfloat16):
        vs_gloo(cpu, tensor, rand(2 * WORLD, 3, dtype=dtype))
        vs_gloo(cpu, lambda g, t: tensor(g, t, R.AVG), rand(2 * WORLD, 3, dtype=dtype))


def all_to_all(cpu: Any) -> None:
    def listed(group: Any, ins: list[torch.Tensor]) -> list[torch.Tensor]:
        outs = [torch.empty_like(t) for t in ins]
        dist.all_to_all(outs, ins, group=group)
        return outs

    vs_gloo(cpu, listed, [rand(2, 2, seed=dst) for dst in range(WORLD)])

    def single_even(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(t)
        dist.all_to_all_single(out, t, group=group)
        return out

    vs_gloo(cpu, single_even, rand(2 * WORLD, 3))

    # uneven: rank r sends (r + d + 1) rows to rank d
    send = [RANK + d + 1 for d in range(WORLD)]
    recv = [s + RANK + 1 for s in range(WORLD)]

    def single_uneven(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = t.new_empty((sum(recv), 3))
        dist.all_to_all_single(out, t, output_split_sizes=recv, input_split_sizes=send, group=group)
        return out

    vs_gloo(cpu, single_uneven, rand(sum(send), 3))


def point_to_point(cpu: Any) -> None:
    def ring(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(t)
        if RANK % 2 == 0:
            dist.send(t, PEER_NEXT, group=group)
            dist.recv(out, PEER_PREV, group=group)
        else:
            dist.recv(out, PEER_PREV, group=group)
            dist.send(t, PEER_NEXT, group=group)
        return out

    vs_gloo(cpu, ring, rand(4, 2))

    def irecv_first(group: Any, t: torch.Tensor) -> torch.Tensor:
        # Every rank posts its receive before its send: blocking receives would deadlock.
        out = torch.empty_like(t)
        recv = dist.irecv(out, PEER_PREV, group=group)
        send = dist.isend(t, PEER_NEXT, group=group)
        send.wait()
        recv.wait()
        return out

    vs_gloo(cpu, irecv_first, rand(4, 2, dtype=torch.bfloat16))

    def batched(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(t)
        ops = [dist.P2POp(dist.irecv, out, PEER_PREV, group), dist.P2POp(dist.isend, t, PEER_NEXT, group)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        return out

    vs_gloo(cpu, batched, rand(3, 3))

    def any_source(group: Any, t: torch.Tensor) -> Any:
        if RANK == 0:
            got = []
            for _ in range(WORLD - 1):
                out = torch.empty_like(t)
                got.append((dist.recv(out, group=group), out))
            return sorted(got, key=lambda p: p[0])
        dist.send(t, 0, group=group)
        return None

    vs_gloo(cpu, any_source, rand(2, 2))


def gather_scatter(cpu: Any) -> None:
    root = WORLD - 1

    def gather(group: Any, t: torch.Tensor) -> Any:
        outs = [torch.empty_like(t) for _ in range(WORLD)] if RANK == root else None
        dist.gather(t, outs, dst=root, group=group)
        return outs

    def scatter(group: Any, ins: list[torch.Tensor]) -> torch.Tensor:
        out = torch.empty_like(ins[0])
        dist.scatter(out, ins if RANK == root else None, src=root, group=group)
        return out

    vs_gloo(cpu, gather, rand(3, 2))
    vs_gloo(cpu, scatter, [rand(3, 2, seed=i) for i in range(WORLD)])


def coalesced(cpu: Any) -> None:
    def all_reduces(group: Any, a: torch.Tensor, b: torch.Tensor) -> None:
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.all_reduce(a, group=group)
            dist.all_reduce(b, group=group)
        cm.wait()

    vs_gloo(cpu, all_reduces, rand(3), rand(2, 2, seed=1))

    def all_gathers(group: Any, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        outs = [a.new_empty(WORLD * a.numel()), b.new_empty(WORLD * b.numel())]
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.all_gather_into_tensor(outs[0], a, group=group)
            dist.all_gather_into_tensor(outs[1], b, group=group)
        cm.wait()
        return outs

    vs_gloo(cpu, all_gathers, rand(3), rand(4, seed=1))

    def reduce_scatters(group: Any, a: torch.Tensor, b: torch.Tensor) -> list[torch.Tensor]:
        outs = [a.new_empty(a.numel() // WORLD), b.new_empty(b.numel() // WORLD)]
        with dist._coalescing_manager(group=group, async_ops=True) as cm:
            dist.reduce_scatter_tensor(outs[0], a, group=group)
            dist.reduce_scatter_tensor(outs[1], b, group=group)
        cm.wait()
        return outs

    vs_gloo(cpu, reduce_scatters, rand(2 * WORLD), rand(3 * WORLD, seed=1))


def objects(cpu: Any) -> None:
    mine = {"rank": RANK, "payload": list(range(RANK + 3))}
    gathered: list[Any] = [None] * WORLD
    dist.all_gather_object(gathered, mine)
    assert gathered == [{"rank": r, "payload": list(range(r + 3))} for r in range(WORLD)], gathered

    objs = [{"a": 1}, "text", 3.5] if RANK == 0 else [None, None, None]
    dist.broadcast_object_list(objs, src=0, device=torch.device("neuron"))
    assert objs == [{"a": 1}, "text", 3.5], objs

    out = [None] * WORLD if RANK == 0 else None
    dist.gather_object(("r", RANK), out, dst=0)
    if RANK == 0:
        assert out == [("r", r) for r in range(WORLD)], out

    got: list[Any] = [None]
    dist.scatter_object_list(got, [f"to{r}" for r in range(WORLD)] if RANK == 0 else None, src=0)
    assert got == [f"to{RANK}"], got
    assert pickle.loads(pickle.dumps(gathered)) == gathered


def barrier_and_groups(cpu: Any) -> None:
    dist.barrier()
    dist.barrier(async_op=True).wait()
    # a subgroup of the even ranks, created with the default (neuron) backend
    evens = list(range(0, WORLD, 2))
    sub = dist.new_group(evens)
    t = torch.full((2,), float(RANK + 1), device="neuron")
    if RANK in evens:
        dist.all_reduce(t, group=sub)
        assert t.cpu().tolist() == [float(sum(r + 1 for r in evens))] * 2, t.cpu()


def functional(cpu: Any) -> None:
    c10d = torch.ops._c10d_functional

    def run(group: Any, name: str, *args: Any) -> torch.Tensor:
        group_name = (group or dist.group.WORLD).group_name
        return c10d.wait_tensor(getattr(c10d, name)(*args, group_name))

    x = rand(2 * WORLD, 3)
    vs_gloo(cpu, lambda g, t: run(g, "all_reduce", t, "sum"), x)
    vs_gloo(cpu, lambda g, t: run(g, "all_reduce", t, "avg"), x)
    vs_gloo(cpu, lambda g, t: run(g, "all_gather_into_tensor", t, WORLD), x)
    vs_gloo(cpu, lambda g, t: run(g, "reduce_scatter_tensor", t, "sum", WORLD), x)
    vs_gloo(cpu, lambda g, t: run(g, "all_to_all_single", t, [2] * WORLD, [2] * WORLD), x)
    vs_gloo(cpu, lambda g, t: run(g, "broadcast", t, WORLD - 1), x)

    def inplace(group: Any, t: torch.Tensor) -> torch.Tensor:
        group_name = (group or dist.group.WORLD).group_name
        c10d.wait_tensor(c10d.all_reduce_(t, "max", group_name))
        return t

    vs_gloo(cpu, inplace, x)

    # the Python wrappers DTensor uses (AsyncCollectiveTensor), and autograd through all_gather
    def py_wrappers(group: Any, t: torch.Tensor) -> list[torch.Tensor]:
        group = group or dist.group.WORLD
        return [
            funcol.all_reduce(t, "sum", group) * 1,
            funcol.all_gather_tensor(t, 0, group) * 1,
            funcol.reduce_scatter_tensor(t, "sum", 0, group) * 1,
        ]

    vs_gloo(cpu, py_wrappers, x)

    def autograd(group: Any, t: torch.Tensor) -> torch.Tensor:
        t = t.detach().requires_grad_()
        out = funcol.all_gather_tensor_autograd(t, 0, group or dist.group.WORLD)
        (out * out).sum().backward()
        return t.grad

    vs_gloo(cpu, autograd, x)


def errors(cpu: Any) -> None:
    t = torch.ones(3, device="neuron")
    try:
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    except NotImplementedError as e:
        assert "PREMUL_SUM" in str(e), e
    else:
        raise AssertionError("PREMUL_SUM did not raise")
    try:
        dist.all_reduce(t, group=cpu)
    except RuntimeError as e:
        assert "neuron" in str(e), e
    else:
        raise AssertionError("a Gloo-only group accepted neuron tensors")


def shared_memory_transport(cpu: Any) -> None:
    """The neuron group moves all-reduce, broadcast, all-gather and reduce-scatter through shared
    memory, in several pieces for large tensors; ranks that disagree on sizes get an error naming
    both; where rank 0 cannot reserve the segment, or with TORCH_NEURONX_SHM_COLLECTIVES=0, a new
    group stays on Gloo."""
    neuron_backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("neuron"))
    assert isinstance(kernels._via(neuron_backend), shared_memory.LocalGroup)
    n = 2 * shared_memory.PIECE // 4 + 5  # float32 elements: three pieces per rank

    def all_reduce_(group: Any, t: torch.Tensor, op: Any = R.SUM) -> None:
        dist.all_reduce(t, op=op, group=group)

    def gathered(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(WORLD * t.numel(), dtype=t.dtype, device=t.device)
        dist.all_gather_into_tensor(out, t, group=group)
        return out

    def scattered(group: Any, t: torch.Tensor) -> torch.Tensor:
        out = torch.empty(t.numel() // WORLD, dtype=t.dtype, device=t.device)
        dist.reduce_scatter_tensor(out, t, group=group)
        return out

    def broadcast(group: Any, t: torch.Tensor) -> None:
        dist.broadcast(t, src=WORLD - 1, group=group)

    vs_gloo(cpu, all_reduce_, rand(n))
    vs_gloo(cpu, lambda group, t: all_reduce_(group, t, R.MAX), rand(n, dtype=torch.bfloat16))
    vs_gloo(cpu, all_reduce_, rand(7, 5).t())  # not contiguous
    vs_gloo(cpu, gathered, rand(n))
    vs_gloo(cpu, scattered, rand(WORLD * n, dtype=torch.float16))
    vs_gloo(cpu, broadcast, rand(n, dtype=torch.int64))
    vs_gloo(cpu, all_reduce_, rand(0))

    mismatched = dist.new_group()  # its shared memory is unusable after the error
    try:
        dist.all_reduce(torch.ones(4 + RANK, device="neuron"), group=mismatched)
    except dist.DistBackendError as e:
        assert f"all_reduce failed on rank {RANK} of {WORLD}" in str(e), e
        assert "every rank must pass tensors of the same size" in str(e), e
    else:
        raise AssertionError("all_reduce accepted tensors of different sizes")

    def full(fd: int, offset: int, size: int) -> None:
        raise OSError(28, "No space left on device")

    reserve, shared_memory.os.posix_fallocate = shared_memory.os.posix_fallocate, full
    try:
        no_room = dist.new_group()  # a full /dev/shm on rank 0: every rank stays on Gloo
    finally:
        shared_memory.os.posix_fallocate = reserve
    os.environ["TORCH_NEURONX_SHM_COLLECTIVES"] = "0"
    try:
        over_gloo = dist.new_group()
    finally:
        del os.environ["TORCH_NEURONX_SHM_COLLECTIVES"]
    for group in (no_room, over_gloo):
        assert not isinstance(kernels._via(group._get_backend(torch.device("neuron"))), shared_memory.LocalGroup)
        vs_gloo(cpu, lambda cpu_group, t, group=group: all_reduce_(cpu_group or group, t), rand(5, 3))
        vs_gloo(cpu, lambda cpu_group, t, group=group: gathered(cpu_group or group, t), rand(n))


ALL = [
    all_reduce,
    staging_and_device_work,
    all_reduce_complex,
    all_reduce_async_and_views,
    lane_order_and_futures,
    side_stream_waits_like_cuda,
    broadcast_reduce,
    all_gather,
    reduce_scatter,
    all_to_all,
    point_to_point,
    gather_scatter,
    coalesced,
    objects,
    barrier_and_groups,
    functional,
    errors,
    shared_memory_transport,
]


def run(checks: Checks, names: list[str] | None = None) -> None:
    cpu = dist.new_group(backend="gloo")
    for fn in ALL:
        if names is None or fn.__name__ in names:
            checks(f"collectives.{fn.__name__}", lambda fn=fn: fn(cpu))
