"""PrivateUse1 kernels for the `c10d::*` ops: neuron tensors through Gloo (or shared memory) on the host.

Every collective the Python API, DDP, FSDP2 and the functional collectives (`_c10d_functional`,
used by DTensor) issue on neuron tensors reaches one of these kernels through the dispatcher.
A kernel stages the device tensors as host tensors for the process group's `neuron` backend (a
`ProcessGroupGloo`): on the CPU platform the device memory itself, elsewhere copies (`_Staging`).
One thread per process, the lane, calls Gloo with them in call order, once the device has
computed them, so the calling thread never waits for device work. Where the group's ranks share
this host, the lane runs all-reduce, broadcast, all-gather and reduce-scatter into tensors itself
through the group's shared memory instead (`_via`; `shared_memory.py`), with Gloo's arguments. A collective issued with
`async_op` (as DDP, FSDP2 and the functional collectives issue them) returns a pending work at
once; the host results become the device tensors' contents on `wait()` or as its future
completes (DDP chains its bucket's next step on it). On a side stream a collective and its
`wait()` return at once, as NCCL's make only the stream wait: the next device use of its tensors
completes it (`runtime/deferred.py`; FSDP2's reduce-scatter). Any other collective completes
inside its call. `TORCH_NEURONX_ASYNC_COLLECTIVES=0` makes every collective complete inside its call.
Point-to-point goes to Gloo directly and stays asynchronous so that exchanges in any order
cannot deadlock: `send` returns Gloo's own work (the host copy lives in it) and `recv_` returns a
`_RecvWork` that makes the received data the device's on `wait()`.
A peer that dies makes Gloo (or the shared-memory wait) raise (connection closed, or the group
timeout) and the error propagates from the collective call.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import torch
import torch._C._distributed_c10d as _c10d
import torch.distributed as dist

from ..eager.tensor import adopt, fills_storage
from ..eager.transfer import download, host_buffer, host_view, owned_buffer
from ..runtime import deferred, streams
from . import shared_memory

_NEURON = torch.device("neuron")
_RedOp = dist.ReduceOp.RedOpType
Tensors = list[torch.Tensor]
Script = Any  # a torch.ScriptObject (boxed ProcessGroup / ReduceOp)
_lock = threading.Lock()
_library: list[torch.library.Library] = []
# `0`: every collective completes inside its call (to localize an error, or to measure overlap).
_ASYNC = os.environ.get("TORCH_NEURONX_ASYNC_COLLECTIVES", "1") != "0"
_LANE_SWITCH_INTERVAL_S = 5e-5


class _Later:
    """A host view of a device buffer (of `part` of it, a dense window of the tensor `like` that
    fills it), made on the lane once the device has computed the buffer."""

    __slots__ = ("buffer", "like", "part")

    def __init__(self, buffer: Any, like: torch.Tensor, part: torch.Tensor | None = None) -> None:
        self.buffer, self.like, self.part = buffer, like, part

    def view(self) -> torch.Tensor:
        if self.buffer.is_deleted():
            raise RuntimeError(
                "neuron: a tensor of an asynchronous collective was written in place before the collective "
                "started; call wait() on its work (or the future's wait()) before writing its tensors"
            )
        whole = host_view(self.buffer, self.like)
        if self.part is None:
            return whole
        start = self.part.storage_offset()
        return whole.view(-1)[start : start + self.part.numel()].view(self.part.shape)


class _Staging:
    """Host tensors for the device tensors of one call; `back()` makes host results device data.

    On the CPU platform a device tensor that is its whole storage is handed over as it is: inputs
    as read-only host views of its buffer, outputs as host views of its buffer taken from every
    earlier reader (`owned_buffer`), so the transport reads and writes device memory with no copy.
    These views are `_Later`s, made by `host()` on the lane once the device has computed them.
    Anything else is copied to a private host tensor, which `back()` adopts as the device buffer
    (or copies into a view)."""

    def __init__(self) -> None:
        self.storages: set[int] = set()  # addresses of the device storages the call reads or writes
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.held: list[Any] = []  # device buffers under host views, alive until the transport is done
        self.outputs: dict[int, tuple[Any, torch.Tensor]] = {}  # storage -> (its owned buffer, output)

    def _later(self, buffer: Any, t: torch.Tensor) -> _Later:
        self.held.append(buffer)
        return _Later(buffer, t)

    def put(self, t: torch.Tensor, view: bool = True) -> Any:
        """An input (`view=False`: always a copy, for a transport that reads after returning). An
        input that is a dense window of an output staged before it (FSDP2's in-place all-gather)
        is read from the output's memory."""
        if t.device.type != "neuron":
            return t
        address = t.untyped_storage().data_ptr()
        self.storages.add(address)
        if view and address in self.outputs:
            buffer, output = self.outputs[address]
            if t.dtype == output.dtype and t.is_contiguous() and not (t.is_conj() or t.is_neg()):
                return _Later(buffer, output, t)
        buffer = host_buffer(t) if view else None
        return self._later(buffer, t) if buffer is not None else download(t)

    def out(self, t: torch.Tensor, keep: bool = False) -> Any:
        """An output (`keep`: also an input)."""
        if t.device.type != "neuron":
            return t
        address = t.untyped_storage().data_ptr()
        self.storages.add(address)
        buffer = owned_buffer(t)
        if buffer is not None:
            self.outputs[address] = buffer, t
            return self._later(buffer, t)
        host = download(t) if keep else torch.empty(t.shape, dtype=t.dtype)
        self.pairs.append((t, host))
        return host

    def puts(self, ts: Sequence[torch.Tensor], view: bool = True) -> list[Any]:
        return [self.put(t, view) for t in ts]

    def outs(self, ts: Sequence[torch.Tensor], keep: bool = False) -> list[Any]:
        return [self.out(t, keep) for t in ts]

    @staticmethod
    def host(staged: Any) -> Any:
        """`put`/`out` results (or nested lists of them) as host tensors: waits for the device."""
        if isinstance(staged, list):
            return [_Staging.host(x) for x in staged]
        return staged.view() if isinstance(staged, _Later) else staged

    def back(self) -> None:
        for device_tensor, host in self.pairs:
            if fills_storage(device_tensor):
                adopt(device_tensor, host)
            else:
                device_tensor.copy_(host)
        self.pairs.clear()
        self.held.clear()
        self.outputs.clear()


class _Start:
    """One collective for the lane: `run()` (on the lane) makes the host tensors of its staged
    arguments and calls Gloo with them; `work()` (any thread) waits for that and returns Gloo's
    work, or raises the call's error."""

    def __init__(self, call: Callable[..., Any], *staged: Any) -> None:
        self.call, self.staged = call, list(staged)
        self.started = threading.Event()
        self.inner: Any = None
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.callbacks: list[Callable[[_Start], None]] | None = []

    def run(self) -> None:
        try:
            self.inner = self.call(*_Staging.host(self.staged))
        except BaseException as e:  # raised to whoever waits on the collective
            self.error = e
        self.call, self.staged = None, []  # type: ignore[assignment]
        with self.lock:
            self.started.set()
            callbacks, self.callbacks = self.callbacks or [], None
        for callback in callbacks:
            callback(self)

    def then(self, callback: Callable[[_Start], None]) -> None:
        """Call `callback(self)` once started: now if it has, else on the lane right after."""
        with self.lock:
            if self.callbacks is not None:
                self.callbacks.append(callback)
                return
        callback(self)

    def work(self, timeout: timedelta | None = None) -> Any:
        if not self.started.wait(timeout.total_seconds() if timeout else None):
            raise RuntimeError("neuron: timed out waiting for the device to compute a collective's inputs")
        if self.error is not None:
            raise self.error
        return self.inner


class _Lane:
    """The thread that hands this process's collectives to Gloo, one at a time in call order (every
    rank must issue a group's collectives in the same order), each once the device has computed
    its tensors: the calling thread never waits for device work, so a backward keeps queuing its
    next ops while earlier gradients are reduced. While collectives wait for it, the interpreter's
    switch interval is 50 µs: the lane takes the GIL to start each one (and between the steps of a
    shared-memory one), and a thread running Python would otherwise hold it 5 ms at a time."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.starts: queue.SimpleQueue[_Start] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.pending = 0
        self.interval = sys.getswitchinterval()
        threading.Thread(target=self._serve, name="neuron-collectives", daemon=True).start()

    def submit(self, begun: _Start) -> None:
        with self.lock:
            if not self.pending:
                self.interval = sys.getswitchinterval()
                sys.setswitchinterval(_LANE_SWITCH_INTERVAL_S)
            self.pending += 1
            self.starts.put(begun)

    def _serve(self) -> None:
        while True:
            self.starts.get().run()
            with self.lock:
                self.pending -= 1
                if not self.pending:
                    sys.setswitchinterval(self.interval)


_lane: list[_Lane] = []


def _submit(call: Callable[..., Any], *staged: Any) -> _Start:
    begun = _Start(call, *staged)
    with _lock:
        if not _lane or _lane[0].pid != os.getpid():  # a forked child has no lane thread
            _lane[:] = [_Lane()]
        lane = _lane[0]
    lane.submit(begun)
    return begun


_local: dict[int, tuple[Any, shared_memory.LocalGroup]] = {}  # id(Gloo backend) -> (it, its shared memory)


def attach(backend: Any, local: shared_memory.LocalGroup | None) -> None:
    """Route `backend`'s bandwidth-bound collectives through `local` (None: all through Gloo)."""
    if local is not None:
        _local[id(backend)] = backend, local


def _via(backend: Any, reduce_op: Any = None) -> Any:
    """What moves a collective's data: the group's shared memory where its ranks share this host
    (and it can reduce with `reduce_op`), else Gloo. Both take Gloo's arguments."""
    entry = _local.get(id(backend))
    if entry is None or (reduce_op is not None and not entry[1].reduces(reduce_op.op)):
        return backend
    return entry[1]


def set_asynchronous(enabled: bool) -> None:
    """What `TORCH_NEURONX_ASYNC_COLLECTIVES` says (1 or 0), changed while running: the benchmark
    alternates both modes in the same processes."""
    global _ASYNC
    _ASYNC = enabled


def _on_side_stream() -> bool:
    return streams.current_stream() is not streams.default_stream()


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


def _run(
    stage: _Staging, backend: Any, what: str, value: Any, async_op: bool, call: Callable[..., Any], *staged: Any
) -> Any:
    """Start `call(*staged)` on the lane; return the work a kernel returns, whose future holds
    `value`: pending while Gloo runs it (`async_op`, or any call on a side stream, which only
    that stream would wait for on CUDA), else completed."""
    begun = _submit(call, *staged)
    if _ASYNC and (async_op or _on_side_stream()):
        work = _PendingWork(backend, what, begun, stage, value)
        if not async_op:
            work.defer()
        return work.boxed()
    _wait(backend, what, begun.work())
    stage.back()
    return _done(value)


class _PendingWork(dist.Work):
    """A collective that the lane starts and Gloo runs on its own threads. Its host results become
    the device's once: on `wait()`, or as Gloo's future completes when the future was asked for
    (DDP chains its bucket's next step on it, so the all-reduce overlaps the rest of the backward)."""

    # Python works must outlive the dispatcher's reference: kept until waited or completed.
    live: set[_PendingWork] = set()

    def __init__(self, backend: Any, what: str, begun: _Start, stage: _Staging, value: Any) -> None:
        super().__init__()
        self.backend, self.what, self.begun, self.stage, self.value = backend, what, begun, stage, value
        self.finished = self.deferred = False
        self.lock = threading.Lock()
        _PendingWork.live.add(self)

    def _finish(self) -> None:
        with self.lock:
            if not self.finished:
                self.stage.back()
                self.finished = True
        _PendingWork.live.discard(self)

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """On a side stream, as CUDA's: the stream waits, not the host (`defer`). Else the host waits."""
        if _on_side_stream():
            self.defer()
            return True
        deferred.settle(self.stage.storages)  # deferred: completes it now
        self._complete(timeout)
        return True

    def defer(self) -> None:
        """Leave the result pending: the next device use of the call's tensors, or a synchronize,
        completes it."""
        if not self.deferred and not self.finished:
            self.deferred = True
            deferred.defer(self.stage.storages, self._complete)

    def _complete(self, timeout: timedelta = timedelta(0)) -> None:
        _wait(self.backend, self.what, self.begun.work(timeout or None), timeout or None)
        self._finish()

    def _started(self) -> Any:
        """Gloo's work, or None while the lane has not started it (or failed to)."""
        return self.begun.inner if self.begun.started.is_set() else None

    def is_completed(self) -> bool:
        inner = self._started()
        if self.finished or self.begun.error is not None:
            return True
        if inner is None:
            return False
        if inner.is_completed() and inner.is_success():
            self._finish()
        return self.finished or inner.is_completed()

    def is_success(self) -> bool:
        inner = self._started()
        return inner is not None and inner.is_success()

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()

        def done(inner_future: torch.futures.Future) -> None:
            # Runs on Gloo's thread as its future completes, before its work counts as completed:
            # the future, not the work, says how it ended (and waiting on the work would deadlock).
            try:
                inner_future.value()
            except RuntimeError as e:
                future.set_exception(_failure(self.backend, self.what, e))
                return
            self._finish()
            future.set_result(self.value)

        def waited() -> None:
            try:
                self.wait()
            except BaseException as e:
                future.set_exception(e)
                return
            future.set_result(self.value)

        def started(begun: _Start) -> None:  # on the lane, which must not wait for Gloo
            if begun.error is not None:
                future.set_exception(begun.error)
                return
            try:
                inner_future = begun.inner.get_future()
            except RuntimeError:  # a Gloo work without a future (reduce-scatter): a thread waits for it
                threading.Thread(target=waited, name="neuron-collective-wait", daemon=True).start()
                return
            inner_future.add_done_callback(done)

        self.begun.then(started)
        return future


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


def _each(call: Callable[..., Any], outputs: Tensors, inputs: Tensors, opts: Any) -> list[Any]:
    """`call` per (output, input) pair: Gloo has no coalesced form of it."""
    return [call(out, inp, opts) for out, inp in zip(outputs, inputs)]


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
    op = _reduce_op(reduce_op)
    opts = _options(_c10d.AllreduceOptions, timeout, reduceOp=op)
    backend = _backend(process_group)
    return tensors, _run(stage, backend, "all_reduce", tensors, async_op, _via(backend, op).allreduce, host, opts)


def allreduce_coalesced_(
    tensors: Tensors, process_group: Script, reduce_op: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host = stage.outs(tensors, keep=True)
    opts = _options(_c10d.AllreduceCoalescedOptions, timeout, reduceOp=_reduce_op(reduce_op))
    backend = _backend(process_group)
    return _run(stage, backend, "all_reduce_coalesced", tensors, async_op, backend.allreduce_coalesced, host, opts)


def broadcast_(
    tensors: Tensors, process_group: Script, root_rank: int, root_tensor: int, async_op: bool = True, timeout: int = -1
) -> Any:
    backend = _backend(process_group)
    stage = _Staging()
    host = stage.outs(tensors, keep=backend.rank() == root_rank)
    opts = _options(_c10d.BroadcastOptions, timeout, rootRank=root_rank, rootTensor=root_tensor)
    return tensors, _run(stage, backend, "broadcast", tensors, async_op, _via(backend).broadcast, host, opts)


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
    return _run(stage, backend, "reduce", tensors, async_op, backend.reduce, host, opts)


def allgather_(
    output_tensors: Any, input_tensors: Any, process_group: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host_out = [stage.outs(outs) for outs in output_tensors]
    host_in = stage.puts(input_tensors)
    opts = _options(_c10d.AllgatherOptions, timeout)
    backend = _backend(process_group)
    return output_tensors, _run(
        stage, backend, "all_gather", output_tensors, async_op, backend.allgather, host_out, host_in, opts
    )


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
    return output_tensor, _run(
        stage,
        backend,
        "all_gather_into_tensor",
        output_tensor,
        async_op,
        _via(backend)._allgather_base,
        host_out,
        host_in,
        opts,
    )


def allgather_coalesced_(
    output_lists: list[Tensors], input_list: Tensors, process_group: Script, async_op: bool = True
) -> Any:
    stage = _Staging()
    host_out = [stage.outs(outs) for outs in output_lists]
    host_in = stage.puts(input_list)
    backend = _backend(process_group)
    return _run(
        stage, backend, "all_gather_coalesced", output_lists, async_op, backend.allgather_coalesced, host_out, host_in
    )


def allgather_into_tensor_coalesced_(
    outputs: Tensors, inputs: Tensors, process_group: Script, async_op: bool = True
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.outs(outputs), stage.puts(inputs)
    backend = _backend(process_group)
    opts = _options(_c10d.AllgatherOptions)
    for work in _submit(_each, _via(backend)._allgather_base, host_out, host_in, opts).work():
        _wait(backend, "all_gather_into_tensor", work)
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
    return output_tensors, _run(
        stage, backend, "reduce_scatter", output_tensors, async_op, backend.reduce_scatter, host_out, host_in, opts
    )


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
    op = _reduce_op(reduce_op)
    opts = _options(_c10d.ReduceScatterOptions, timeout, reduceOp=op)
    backend = _backend(process_group)
    return output_tensor, _run(
        stage,
        backend,
        "reduce_scatter_tensor",
        output_tensor,
        async_op,
        _via(backend, op)._reduce_scatter_base,
        host_out,
        host_in,
        opts,
    )


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
    op = _reduce_op(reduce_op)
    opts = _options(_c10d.ReduceScatterOptions, timeout, reduceOp=op)
    backend = _backend(process_group)
    for work in _submit(_each, _via(backend, op)._reduce_scatter_base, host_out, host_in, opts).work():
        _wait(backend, "reduce_scatter_tensor", work)
    stage.back()
    return _done(outputs)


def alltoall_(
    output_tensors: Any, input_tensors: Any, process_group: Script, async_op: bool = True, timeout: int = -1
) -> Any:
    stage = _Staging()
    host_out, host_in = stage.outs(output_tensors), stage.puts(input_tensors)
    opts = _options(_c10d.AllToAllOptions, timeout)
    backend = _backend(process_group)
    return output_tensors, _run(
        stage, backend, "all_to_all", output_tensors, async_op, backend.alltoall, host_out, host_in, opts
    )


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
    return _run(
        stage,
        backend,
        "all_to_all_single",
        [output],
        async_op,
        backend.alltoall_base,
        host_out,
        host_in,
        output_split_sizes,
        input_split_sizes,
        opts,
    )


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
    return _run(stage, backend, "gather", output_tensors, async_op, backend.gather, host_out, host_in, opts)


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
    return output_tensors, _run(
        stage, backend, "scatter", output_tensors, async_op, backend.scatter, host_out, host_in, opts
    )


def barrier(
    tensor: torch.Tensor, process_group: Script, device_ids: list[int], async_op: bool = True, timeout: int = -1
) -> Any:
    opts = _options(_c10d.BarrierOptions, timeout, device_ids=list(device_ids))
    backend = _backend(process_group)
    return _run(_Staging(), backend, "barrier", [tensor], async_op, backend.barrier, opts)


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
