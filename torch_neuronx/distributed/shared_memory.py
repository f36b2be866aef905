"""Collectives between the processes of one host through shared memory, in place of Gloo's TCP.

Where every rank of a group can open one shared-memory segment (same host, same `/dev/shm`), the
bandwidth-bound collectives (all-reduce, broadcast, all-gather and reduce-scatter into tensors)
move their data through it: each rank copies its piece into its own slot, tells every peer, and
once all have, reads the slots it needs. Data goes in pieces of at most `PIECE` bytes per rank,
through two banks of slots used in turn: a rank fills a bank only after every peer has filled the
other one, which each does only after it finished reading this one, so one signal per piece
orders everything. Signals are bytes (the sender's rank) written to each rank's FIFO, so a
waiting rank sleeps in the kernel instead of spinning on the cores its peers compute on, a peer
that exits closes its end, and the wait gives up at the group's timeout.

Reductions fold the ranks' pieces in rank order on every rank, so every rank gets bit-identical
results (with two ranks, the same bits as Gloo; with more, its ring adds in another order). The
other collectives, and reductions other than sum, product, min and max, stay on Gloo.
`TORCH_NEURONX_SHM_COLLECTIVES=0` keeps every collective on Gloo.
"""

from __future__ import annotations

import mmap
import os
import select
import time
import uuid
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

PIECE = 4 << 20  # bytes of data per rank and step
_HEADER_BYTES = 64  # before each slot's data: what the rank is doing (`_Header`)
_COLLECTIVES = ("all_reduce", "broadcast", "all_gather_into_tensor", "reduce_scatter_tensor")
_RedOp = dist.ReduceOp.RedOpType
_FOLD: dict[Any, Callable[..., torch.Tensor]] = {
    _RedOp.SUM: torch.add,
    _RedOp.PRODUCT: torch.mul,
    _RedOp.MIN: torch.minimum,
    _RedOp.MAX: torch.maximum,
}
_KEY = "neuron_shm"


class Finished:
    """A collective that completed inside its call, reported as Gloo reports its works."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error

    def wait(self, timeout: timedelta | None = None) -> bool:
        if self.error is not None:
            raise self.error
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return self.error is None

    def get_future(self) -> torch.futures.Future:
        future: torch.futures.Future = torch.futures.Future()
        if self.error is not None:
            future.set_exception(self.error)
        else:
            future.set_result(None)
        return future


def connect(store: Any, rank: int, world: int, timeout: timedelta) -> LocalGroup | None:
    """The group's shared-memory transport, or None (on every rank alike) where some rank cannot
    open it. Called by every rank of the group as the group is created."""
    if world < 2 or world > 255 or os.environ.get("TORCH_NEURONX_SHM_COLLECTIVES", "1") == "0":
        return None
    group: LocalGroup | None = None
    if rank == 0:  # makes the segment, then names it to the others
        path = f"/dev/shm/torchneuron-{uuid.uuid4().hex}"
        group = _opened(path, rank, world, timeout)
        store.set(f"{_KEY}/path", path if group else "")
    else:
        path = store.get(f"{_KEY}/path").decode()
        group = _opened(path, rank, world, timeout) if path else None
    store.set(f"{_KEY}/ready/{rank}", str(os.getpid() if group else 0))
    pids = [int(store.get(f"{_KEY}/ready/{r}")) for r in range(world)]
    if not all(pids):
        if group is not None:
            group.close()
        return None
    assert group is not None
    group.pids = pids
    group.open_peers()
    store.set(f"{_KEY}/open/{rank}", "1")
    for r in range(world):
        store.get(f"{_KEY}/open/{r}")
    group.unlink()  # the files go; the mapping and the open FIFOs stay
    return group


def _opened(path: str, rank: int, world: int, timeout: timedelta) -> LocalGroup | None:
    try:
        return LocalGroup(path, rank, world, timeout)
    except OSError:
        for made in (f"{path}.{rank}", *([path] if rank == 0 else [])):
            with suppress(FileNotFoundError):
                os.unlink(made)
        return None


class LocalGroup:
    """One process group's segment and FIFOs; its methods take what Gloo's do (host tensors and
    options) and return a `Finished`."""

    def __init__(self, path: str, rank: int, world: int, timeout: timedelta) -> None:
        self.path, self.rank, self.world, self.timeout = path, rank, world, timeout.total_seconds()
        self.peers = [r for r in range(world) if r != rank]
        self.pids: list[int] = []
        self.error: BaseException | None = None
        self.step = 0
        self.received = [0] * world
        self.writers: list[int] = []
        size = 2 * world * (_HEADER_BYTES + PIECE)
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if rank == 0 else 0), 0o600)
        try:
            if rank == 0:  # reserved now: a full /dev/shm fails here (-> Gloo), not with SIGBUS on a write
                os.posix_fallocate(fd, 0, size)
            elif os.fstat(fd).st_size != size:
                raise OSError(f"{path} is not the segment rank 0 made")
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        memory = torch.frombuffer(self.map, dtype=torch.uint8)
        self.banks = memory.view(2, world, _HEADER_BYTES + PIECE).unbind(0)
        os.mkfifo(self._fifo(rank), 0o600)
        self.reader = os.open(self._fifo(rank), os.O_RDONLY | os.O_NONBLOCK)

    def _fifo(self, rank: int) -> str:
        return f"{self.path}.{rank}"

    def open_peers(self) -> None:
        self.writers = [os.open(self._fifo(r), os.O_WRONLY | os.O_NONBLOCK) for r in self.peers]

    def unlink(self) -> None:
        for path in (self._fifo(self.rank), *([self.path] if self.rank == 0 else [])):
            with suppress(FileNotFoundError):
                os.unlink(path)

    def close(self) -> None:
        self.unlink()
        for fd in (self.reader, *self.writers):
            os.close(fd)

    @staticmethod
    def reduces(kind: Any) -> bool:
        return kind in _FOLD

    # ---- Gloo's signatures ----------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any) -> Finished:
        fold = _FOLD[opts.reduceOp.op]
        return self._run(lambda: [self._all_reduce(t, fold) for t in tensors])

    def broadcast(self, tensors: list[torch.Tensor], opts: Any) -> Finished:
        return self._run(lambda: self._broadcast(tensors[opts.rootTensor], opts.rootRank))

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Finished:
        return self._run(lambda: self._all_gather(output, input))

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Finished:
        return self._run(lambda: self._reduce_scatter(output, input, _FOLD[opts.reduceOp.op]))

    def _run(self, collective: Callable[[], Any]) -> Finished:
        if self.error is None:
            try:
                collective()
            except (OSError, RuntimeError) as e:  # the group is unusable from here on, as Gloo's
                self.error = RuntimeError(str(e))
        return Finished(self.error)

    # ---- collectives, one piece at a time (at least one, so that ranks compare headers) --------

    def _all_reduce(self, t: torch.Tensor, fold: Callable[..., torch.Tensor]) -> None:
        header = _Header("all_reduce", t)
        with _flat(t) as flat:
            for piece in _pieces(flat, PIECE // t.element_size()):
                _fold(fold, self._exchange(header, piece), piece)

    def _broadcast(self, t: torch.Tensor, root: int) -> None:
        header = _Header("broadcast", t, root)
        with _flat(t) as flat:
            for piece in _pieces(flat, PIECE // t.element_size()):
                slots = self._exchange(header, piece, send=self.rank == root)
                if self.rank != root:
                    piece.copy_(slots[root])

    def _all_gather(self, output: torch.Tensor, input: torch.Tensor) -> None:
        header = _Header("all_gather_into_tensor", input)
        with _flat(input) as mine, _flat(output) as out:
            parts, start = out.view(self.world, -1), 0
            for piece in _pieces(mine, PIECE // input.element_size()):
                slots = self._exchange(header, piece)
                for part, slot in zip(parts, slots):
                    part[start : start + piece.numel()].copy_(slot)
                start += piece.numel()

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, fold: Callable[..., torch.Tensor]) -> None:
        header = _Header("reduce_scatter_tensor", output)
        with _flat(input) as ins, _flat(output) as out:
            rows, start = ins.view(self.world, -1), 0
            for piece in _pieces(out, PIECE // input.element_size() // self.world):
                mine = rows[:, start : start + piece.numel()]
                slots = self._exchange(header, mine)
                _fold(fold, [slot[self.rank] for slot in slots], piece)
                start += piece.numel()

    def _exchange(self, header: _Header, data: torch.Tensor, send: bool = True) -> list[torch.Tensor]:
        """One step: put `data` in this rank's slot (`send`), signal every peer, and return every
        rank's slot viewed like `data` once each peer has filled its own for the same call."""
        self.step += 1
        bank = self.banks[self.step % 2]
        bank[self.rank, : header.values.numel() * 8].view(torch.int64).copy_(header.values)
        slots = [_like(slot[_HEADER_BYTES:], data) for slot in bank]
        if send:
            slots[self.rank].copy_(data)
        signal = bytes([self.rank])
        for fd in self.writers:
            os.write(fd, signal)
        self._wait(self.step)
        for r in self.peers:
            theirs = bank[r, : header.values.numel() * 8].view(torch.int64)
            if not torch.equal(theirs, header.values):
                raise RuntimeError(header.mismatch(self.rank, r, theirs.tolist()))
        return slots

    def _wait(self, step: int) -> None:
        deadline = time.monotonic() + self.timeout
        while any(self.received[r] < step for r in self.peers):
            if select.select([self.reader], [], [], 0.5)[0]:
                data = os.read(self.reader, 4096)
                if not data:  # every peer's end of this FIFO is closed
                    raise RuntimeError(_exited(self.peers))
                for sender in data:
                    self.received[sender] += 1
                continue
            late = [r for r in self.peers if self.received[r] < step]
            gone = [r for r in late if not _alive(self.pids[r])]
            if gone:
                raise RuntimeError(_exited(gone))
            if time.monotonic() > deadline:
                raise RuntimeError(f"timeout: rank {late[0]} did not join within {self.timeout:g} s")


class _Header:
    """A step's collective, element count, dtype and root: equal on every rank, or the ranks'
    calls do not match."""

    def __init__(self, what: str, t: torch.Tensor, root: int = -1) -> None:
        self.what, self.t, self.root = what, t, root
        dtype = zlib.crc32(str(t.dtype).encode())
        self.values = torch.tensor([_COLLECTIVES.index(what), t.numel(), dtype, root], dtype=torch.int64)

    def mismatch(self, rank: int, peer: int, theirs: list[int]) -> str:
        kind, numel, dtype, root = theirs
        if kind != _COLLECTIVES.index(self.what):
            return f"rank {rank} called {self.what} where rank {peer} called {_COLLECTIVES[kind]}"
        if root != self.root:
            return f"rank {rank} named root {self.root}, rank {peer} root {root}"
        theirs_dtype = "" if dtype == int(self.values[2]) else " of another dtype"
        return (
            f"rank {rank} passed {self.t.numel()} elements of {self.t.dtype}, rank {peer} {numel}{theirs_dtype}: "
            "every rank must pass tensors of the same size and dtype"
        )


def _pieces(flat: torch.Tensor, size: int) -> tuple[torch.Tensor, ...]:
    return flat.split(size) if flat.numel() else (flat,)


@contextmanager
def _flat(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """`t` as one flat contiguous tensor, written back afterwards where it had to be a copy."""
    flat = t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)
    yield flat
    if not t.is_contiguous():
        t.copy_(flat.view(t.shape))


def _like(slot: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
    return slot[: data.numel() * data.element_size()].view(data.dtype).view(data.shape)


def _fold(fold: Callable[..., torch.Tensor], parts: list[torch.Tensor], out: torch.Tensor) -> None:
    fold(parts[0], parts[1], out=out)
    for part in parts[2:]:
        fold(out, part, out=out)


def _exited(ranks: list[int]) -> str:
    if len(ranks) == 1:
        return f"the process of rank {ranks[0]} exited"
    return f"the processes of ranks {', '.join(map(str, ranks))} exited"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
