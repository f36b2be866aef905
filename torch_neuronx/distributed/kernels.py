"""PrivateUse1 kernels for the `c10d::*` ops: neuron tensors through Gloo on the host.

Every collective the Python API, DDP, FSDP2 and the functional collectives (`_c10d_functional`,
used by DTensor) issue on neuron tensors reaches one of these kernels through the dispatcher.
A kernel hands the device tensors to the process group's `neuron` backend (a `ProcessGroupGloo`)
as host tensors (`_Staging`: on the CPU platform the device memory itself, elsewhere copies) and
makes the host results the device tensors' contents.

Collectives finish inside the kernel and return a completed `Work` whose future holds the device
tensors (DDP reads its bucket from that future). Point-to-point stays asynchronous so that
exchanges in any order cannot deadlock: `send` returns Gloo's own work (the host copy lives in it)
and `recv_` returns a `_RecvWork` that makes the received data the device's on `wait()`.
A peer that dies makes Gloo raise (connection closed, or the group timeout) and the error
propagates from the collective call.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import torch
import torch._C._distributed_c10d as _c10d
import torch.distributed as dist

from ..eager.tensor import adopt, fills_storage
from ..eager.transfer import download, host_owned, host_view

_NEURON = torch.device("neuron")
_RedOp = dist.ReduceOp.RedOpType
Tensors = list[torch.Tensor]
Script = Any  # a torch.ScriptObject (boxed ProcessGroup / ReduceOp)
_lock = threading.Lock()
_library: list[torch.library.Library] = []
# `0`: every collective completes inside its call (to localize an error, or to measure overlap).
_ASYNC = os.environ.get("TORCH_NEURONX_ASYNC_COLLECTIVES", "1") != "0"


class _Staging:
    """Host tensors for the device tensors of one call; `back()` makes host results device data.

    On the CPU platform a device tensor that is its whole storage is handed over as it is: inputs
    as read-only host views, outputs as host views of its buffer taken from every earlier reader
    (`host_owned`), so the transport reads and writes device memory with no copy. Anything else
    is copied to a private host tensor, which `back()` adopts as the device buffer (or copies into
    a view)."""

    def __init__(self) -> None:
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.held: list[Any] = []  # device buffers under host views, alive until the transport is done

    def _held(self, view: tuple[torch.Tensor, Any] | None) -> torch.Tensor | None:
        if view is None:
            return None
        self.held.append(view[1])
        return view[0]

    def put(self, t: torch.Tensor, view: bool = True) -> torch.Tensor:
        """An input (`view=False`: always a copy, for a transport that reads after returning)."""
        if t.device.type != "neuron":
            return t
        host = self._held(host_view(t)) if view else None
        return host if host is not None else download(t)

    def out(self, t: torch.Tensor, keep: bool = False) -> torch.Tensor:
        """An output (`keep`: also an input)."""
        if t.device.type != "neuron":
            return t
        host = self._held(host_owned(t))
        if host is None:
            host = download(t) if keep else torch.empty(t.shape, dtype=t.dtype)
            self.pairs.append((t, host))
        return host

    def puts(self, ts: Sequence[torch.Tensor], view: bool = True) -> list[torch.Tensor]:
        return [self.put(t, view) for t in ts]

    def outs(self, ts: Sequence[torch.Tensor], keep: bool = False) -> list[torch.Tensor]:
        return [self.out(t, keep) for t in ts]

    def back(self) -> None:
        for device_tensor, host in self.pairs:
            if fills_storage(device_tensor):
                adopt(device_tensor, host)
            else:
                device_tensor.copy_(host)
        self.pairs.clear()
        self.held.clear()


def _backend(process_group: Any) -> Any:
    pg = dist.ProcessGroup.unbox(process_group)
    try:
        return pg._get_backend(_NEURON)
    except RuntimeError as e:
        raise RuntimeError(
            f"neuron: process group {pg.group_name!r} has no backend for neuron tensors; create it with "
            'backend="neuron" (or "cpu:gloo,neuron:neuron")'
        ) from e


def _options(cls: type, timeout: int = -1, **fields: Any) -> Any:
    opts = cls()
    for name, value in fields.items():
        setattr(opts, name, value)
    if timeout >= 0:
        opts.timeout = timedelta(milliseconds=timeout)
    return opts


def _reduce_op(reduce_op: Any) -> Any:
    kind = _RedOp(reduce_op.op())
    if kind == _RedOp.PREMUL_SUM:
        # The factor lives in the C++ ReduceOp and is not readable from a Python kernel.
        raise NotImplementedError(
            "neuron: ReduceOp.PREMUL_SUM is not supported by the neuron c10d backend; use SUM and scale "
            "the tensor (FSDP2 with set_gradient_divide_factor: also call "
            "model.set_force_sum_reduction_for_comms(True), which divides on device and reduces with SUM)"
        )
    return dist.ReduceOp(kind)


def _done(value: Any) -> Any:
    """A completed work whose future holds `value` (boxed for the dispatcher)."""
    future: torch.futures.Future = torch.futures.Future()
    future.set_result(value)
    return _c10d._create_work_from_future(future).boxed()


def _wait(backend: Any, what: str, work: Any, timeout: timedelta | None = None) -> None:
    """Wait for Gloo's work; a failure names the collective, the rank and the likely cause."""
    try:
        if timeout:
            work.wait(timeout)
        else:
            work.wait()
    except RuntimeError as e:
        raise _failure(backend, what, e) from e


def _failure(backend: Any, what: str, error: BaseException) -> dist.DistBackendError:
    return dist.DistBackendError(
        f"neuron: {what} failed on rank {backend.rank()} of {backend.size()}: {error}\nA peer process exited, or "
        f"did not reach this collective within the process group's timeout ({backend.options._timeout})."
    )


def _finish(stage: _Staging, backend: Any, what: str, work: Any, value: Any, async_op: bool) -> Any:
    """The work a collective kernel returns: pending while Gloo runs it on its own threads
    (`async_op`, as DDP, FSDP2 and the functional collectives issue them), else completed."""
    if async_op and _ASYNC:
        try:
            return _PendingWork(backend, what, work, stage, value).boxed()
        except RuntimeError:  # a Gloo work without a future (reduce_scatter of a list)
            pass
    _wait(backend, what, work)
    stage.back()
    return _done(value)


class _PendingWork(dist.Work):
    """A collective that Gloo runs on its own threads. Its host results become the device's once:
    on `wait()`, or as Gloo's future completes when the future was asked for (DDP chains its
    bucket's next step on it, so the all-reduce overlaps the rest of the backward)."""

    # Python works must outlive the dispatcher's reference: kept until waited or completed.
    live: set[_PendingWork] = set()

    def __init__(self, backend: Any, what: str, inner: Any, stage: _Staging, value: Any) -> None:
        super().__init__()
        self.inner_future = inner.get_future()
        self.backend, self.what, self.inner, self.stage, self.value = backend, what, inner, stage, value
        self.finished = False
        self.lock = threading.Lock()
        _PendingWork.live.add(self)

    def _finish(self) -> None:
        with self.lock:
            if not self.finished:
                self.stage.back()
                self.finished = True
        _PendingWork.live.discard(self)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        _wait(self.backend, self.what, self.inner, timeout or None)
        self._finish()
        return True

    def is_completed(self) -> bool:
        if not self.finished and self.inner.is_completed() and self.inner.is_success():
            self._finish()
        return self.finished or self.inner.is_completed()

    def is_success(self) -> bool:
        return self.inner.is_success()

    def get_future(self) -> torch.futures.Future:
        def finished(future: torch.futures.Future) -> Any:
            # Runs on Gloo's thread as its future completes, before its work counts as
            # completed: the future, not the work, says how it ended.
            try:
                future.value()
            except RuntimeError as e:
                raise _failure(self.backend, self.what, e) from e
            self._finish()
            return self.value

        return self.inner_future.then(finished)


class _RecvWork(dist.Work):
    """A pending receive: waits once on Gloo's work, then copies the host buffers to the device."""

    # Python works must outlive the dispatcher's reference: kept here until waited.
    pending: set[_RecvWork] = set()

    def __init__(self, backend: Any, inner: Any, stage: _Staging, tensors: list[torch.Tensor]) -> None:
        super().__init__()
        self.backend, self.inner, self.stage, self.tensors = backend, inner, stage, tensors
        self.finished = False
        self.lock = threading.Lock()
        _RecvWork.pending.add(self)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        with self.lock:
            if not self.finished:
                # Gloo's receive work is not idempotent: each wait() waits for a new message.
                _wait(self.backend, "recv", self.inner, timeout)
                self.stage.back()
                self.finished = True
                _RecvWork.pending.discard(self)
        return True

    def is_completed(self) -> bool:
        return self.finished

    def is_success(self) -> bool:
        return self.finished

    def _source_rank(self) -> int:
        """The sender (receives from any source); Python callers reach this method directly."""
        return self.inner._source_rank()

    def get_future(self) -> torch.futures.Future:
        """Completes the receive first: the future is already done when returned."""
        self.wait()
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(self.tensors)
        return future


# --- kernels, in the c10d schema's argument order ------------------------------------------


def allreduce_(
    tensors: Tensors,
    process_group: Script,
    reduce_op: Script,
    sparse_indices: torch.Tensor | None = None,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    if sparse_indices is not None:
        raise NotImplementedError("neuron: all_reduce of sparse tensors is not supported")
    stage = _Staging()
    host = stage.outs(tensors, keep=True)
    opts = _options(_c10d.AllreduceOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    work = backend.allreduce(host, opts)
    return tensors, _finish(stage, backend, "all_reduce", work, tensors, async_op)


def allreduce_coalesced_(
    tensors: Tensors, process_group: Script, reduce_op: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host = stage.outs(tensors, keep=True)
    opts = _options(_c10d.AllreduceCoalescedOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    work = backend.allreduce_coalesced(host, opts)
    return _finish(stage, backend, "all_reduce_coalesced", work, tensors, async_op)


def broadcast_(
    tensors: Tensors, process_group: Script, root_rank: int, root_tensor: int, async_op: bool = True, timeout: int = -1
) -> Any:
    backend = _backend(process_group)
    stage = _Staging()
    host = stage.outs(tensors, keep=backend.rank() == root_rank)
    opts = _options(_c10d.BroadcastOptions, timeout, rootRank=root_rank, rootTensor=root_tensor)
    work = backend.broadcast(host, opts)
    return tensors, _finish(stage, backend, "broadcast", work, tensors, async_op)


def reduce_(
    tensors: Tensors,
    process_group: Script,
    reduce_op: Script,
    root_rank: int,
    root_tensor: int,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host = stage.outs(tensors, keep=True)
    opts = _options(
        _c10d.ReduceOptions, timeout, reduceOp=_reduce_op(reduce_op), rootRank=root_rank, rootTensor=root_tensor
    )
    backend = _backend(process_group)
    work = backend.reduce(host, opts)
    return _finish(stage, backend, "reduce", work, tensors, async_op)


def allgather_(
    output_tensors: Any, input_tensors: Any, process_group: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host_out = [stage.outs(outs) for outs in output_tensors]
    host_in = stage.puts(input_tensors)
    opts = _options(_c10d.AllgatherOptions, timeout)
    backend = _backend(process_group)
    work = backend.allgather(host_out, host_in, opts)
    return output_tensors, _finish(stage, backend, "all_gather", work, output_tensors, async_op)


def _allgather_base_(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    process_group: Script,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.out(output_tensor), stage.put(input_tensor)
    opts = _options(_c10d.AllgatherOptions, timeout)
    backend = _backend(process_group)
    work = backend._allgather_base(host_out, host_in, opts)
    return output_tensor, _finish(stage, backend, "all_gather_into_tensor", work, output_tensor, async_op)


def allgather_coalesced_(
    output_lists: list[Tensors], input_list: Tensors, process_group: Script, async_op: bool = True
) -> Any:
    stage = _Staging()
    host_out = [stage.outs(outs) for outs in output_lists]
    host_in = stage.puts(input_list)
    backend = _backend(process_group)
    work = backend.allgather_coalesced(host_out, host_in)
    return _finish(stage, backend, "all_gather_coalesced", work, output_lists, async_op)


def allgather_into_tensor_coalesced_(
    outputs: Tensors, inputs: Tensors, process_group: Script, async_op: bool = True
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.outs(outputs), stage.puts(inputs)
    backend = _backend(process_group)
    opts = _options(_c10d.AllgatherOptions)
    for out, inp in zip(host_out, host_in):
        _wait(backend, "all_gather_into_tensor", backend._allgather_base(out, inp, opts))
    stage.back()
    return _done(outputs)


def reduce_scatter_(
    output_tensors: Any,
    input_tensors: Any,
    process_group: Script,
    reduce_op: Script,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out = stage.outs(output_tensors)
    host_in = [stage.puts(ins) for ins in input_tensors]
    opts = _options(_c10d.ReduceScatterOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    work = backend.reduce_scatter(host_out, host_in, opts)
    return output_tensors, _finish(stage, backend, "reduce_scatter", work, output_tensors, async_op)


def _reduce_scatter_base_(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    process_group: Script,
    reduce_op: Script,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.out(output_tensor), stage.put(input_tensor)
    opts = _options(_c10d.ReduceScatterOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    work = backend._reduce_scatter_base(host_out, host_in, opts)
    return output_tensor, _finish(stage, backend, "reduce_scatter_tensor", work, output_tensor, async_op)


def reduce_scatter_tensor_coalesced_(
    outputs: Tensors,
    inputs: Tensors,
    process_group: Script,
    reduce_op: Script,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.outs(outputs), stage.puts(inputs)
    opts = _options(_c10d.ReduceScatterOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    for out, inp in zip(host_out, host_in):
        _wait(backend, "reduce_scatter_tensor", backend._reduce_scatter_base(out, inp, opts))
    stage.back()
    return _done(outputs)


def alltoall_(
    output_tensors: Any, input_tensors: Any, process_group: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.outs(output_tensors), stage.puts(input_tensors)
    opts = _options(_c10d.AllToAllOptions, timeout)
    backend = _backend(process_group)
    work = backend.alltoall(host_out, host_in, opts)
    return output_tensors, _finish(stage, backend, "all_to_all", work, output_tensors, async_op)


def alltoall_base_(
    output: torch.Tensor,
    input: torch.Tensor,
    process_group: Script,
    output_split_sizes: list[int],
    input_split_sizes: list[int],
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.out(output), stage.put(input)
    opts = _options(_c10d.AllToAllOptions, timeout)
    backend = _backend(process_group)
    work = backend.alltoall_base(host_out, host_in, output_split_sizes, input_split_sizes, opts)
    return _finish(stage, backend, "all_to_all_single", work, [output], async_op)


def gather_(
    output_tensors: Any,
    input_tensors: Any,
    process_group: Script,
    root_rank: int,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out = [stage.outs(outs) for outs in output_tensors]
    host_in = stage.puts(input_tensors)
    opts = _options(_c10d.GatherOptions, timeout, rootRank=root_rank)
    backend = _backend(process_group)
    work = backend.gather(host_out, host_in, opts)
    return _finish(stage, backend, "gather", work, output_tensors, async_op)


def scatter_(
    output_tensors: Any,
    input_tensors: Any,
    process_group: Script,
    root_rank: int,
    async_op: bool = True,
    timeout: int = -1,
) -> Any:
    stage = _Staging()
    host_out = stage.outs(output_tensors)
    host_in = [stage.puts(ins) for ins in input_tensors]
    opts = _options(_c10d.ScatterOptions, timeout, rootRank=root_rank)
    backend = _backend(process_group)
    work = backend.scatter(host_out, host_in, opts)
    return output_tensors, _finish(stage, backend, "scatter", work, output_tensors, async_op)


def barrier(
    tensor: torch.Tensor, process_group: Script, device_ids: list[int], async_op: bool = True, timeout: int = -1
) -> Any:
    opts = _options(_c10d.BarrierOptions, timeout, device_ids=list(device_ids))
    return _backend(process_group).barrier(opts).boxed()


def send(tensors: Tensors, process_group: Script, dst: int, tag: int) -> Any:
    host = _Staging().puts(tensors, view=False)  # Gloo sends after returning: a private copy
    return _backend(process_group).send(host, dst, tag).boxed()


def recv_(tensors: Tensors, process_group: Script, src: int, tag: int) -> Any:
    stage = _Staging()
    host = stage.outs(tensors)
    backend = _backend(process_group)
    return _RecvWork(backend, backend.recv(host, src, tag), stage, list(tensors)).boxed()


def recv_any_source_(tensors: Tensors, process_group: Script, tag: int) -> Any:
    stage = _Staging()
    host = stage.outs(tensors)
    backend = _backend(process_group)
    return _RecvWork(backend, backend.recv_anysource(host, tag), stage, list(tensors)).boxed()


_KERNELS = [
    allreduce_,
    allreduce_coalesced_,
    broadcast_,
    reduce_,
    allgather_,
    _allgather_base_,
    allgather_coalesced_,
    allgather_into_tensor_coalesced_,
    reduce_scatter_,
    _reduce_scatter_base_,
    reduce_scatter_tensor_coalesced_,
    alltoall_,
    alltoall_base_,
    gather_,
    scatter_,
    barrier,
    send,
    recv_,
    recv_any_source_,
]


def install() -> None:
    """Idempotent: route the `c10d::*` ops on neuron tensors to the kernels above."""
    with _lock:
        if _library:
            return
        lib = torch.library.Library("c10d", "IMPL")
        with warnings.catch_warnings():
            # PyTorch's own PrivateUse1 kernels (which hand device pointers to the backend) are replaced.
            warnings.filterwarnings("ignore", message="(?s).*Overriding a previously registered kernel")
            for kernel in _KERNELS:
                lib.impl(kernel.__name__, kernel, "PrivateUse1")
        _library.append(lib)
