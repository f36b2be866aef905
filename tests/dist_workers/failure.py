"""Two ranks: a peer that never joins a collective makes it fail at the group timeout, and a peer
that is killed makes the next collective fail at once; both with a clear error, never a hang.
Rank 0 writes what it saw to $DIST_RESULTS/failure.txt."""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import torch
import torch.distributed as dist
from common import RANK, Checks, init

SHORT_S, LONG_S = 5, 120


def failing_all_reduce(group: dist.ProcessGroup) -> tuple[float, str]:
    t = torch.ones(4, device="neuron")
    start = time.perf_counter()
    try:
        dist.all_reduce(t, group=group)
    except dist.DistBackendError as e:
        return time.perf_counter() - start, str(e)
    raise AssertionError("all_reduce succeeded although the peer is gone")


def main() -> None:
    init()
    checks = Checks()
    short = dist.new_group(timeout=timedelta(seconds=SHORT_S))
    long = dist.new_group(timeout=timedelta(seconds=LONG_S))
    t = torch.ones(4, device="neuron")
    dist.all_reduce(t, group=short)
    dist.all_reduce(t, group=long)
    report = Path(os.environ["DIST_RESULTS"]) / "failure.txt"

    def peer_late() -> None:
        if RANK == 0:
            seconds, message = failing_all_reduce(short)
            report.write_text(f"peer late ({SHORT_S} s group timeout): {seconds:.1f} s\n{message}\n\n")
            assert seconds < SHORT_S + 20, seconds
            assert "neuron: all_reduce failed on rank 0 of 2" in message and "timeout" in message.lower(), message
        else:
            time.sleep(SHORT_S + 3)

    def peer_killed() -> None:
        dist.all_reduce(t, group=long)
        if RANK == 1:
            time.sleep(2)  # rank 0 is inside its next all_reduce by now
            os.kill(os.getpid(), signal.SIGKILL)
        seconds, message = failing_all_reduce(long)
        with report.open("a") as f:
            f.write(f"peer killed ({LONG_S} s group timeout): {seconds:.1f} s\n{message}\n")
        assert seconds < LONG_S / 2, seconds
        assert "neuron: all_reduce failed on rank 0 of 2" in message and "peer process exited" in message, message

    checks("failure.peer_late", peer_late)
    checks("failure.peer_killed", peer_killed)
    os._exit(0)  # the default group cannot be torn down cleanly with a dead peer


if __name__ == "__main__":
    main()
