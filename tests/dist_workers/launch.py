"""Start N worker processes the way torchrun does (env:// rendezvous on a loopback TCPStore),
wait for them with a deadline, and collect each rank's check results."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
REPO = HERE.parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, world: int, port: int, results: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
        DIST_RESULTS=results,
        PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        PYTHONWARNINGS="ignore",
        OMP_NUM_THREADS="1",
    )
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    env.update(extra or {})
    return env


@dataclass
class Run:
    returncodes: list[int | None]
    outputs: list[str]
    results: list[dict[str, Any]]
    seconds: float
    timed_out: bool = False
    files: dict[str, str] = field(default_factory=dict)

    def failures(self) -> dict[str, str]:
        """check name -> first rank's error, for every check that failed on some rank."""
        bad: dict[str, str] = {}
        for rank, res in enumerate(self.results):
            for name, entry in res.items():
                if not entry["ok"] and name not in bad:
                    bad[name] = f"rank {rank}: {entry['error']}"
        return bad

    def describe(self) -> str:
        tail = "\n".join(
            f"--- rank {r} (rc={rc}) ---\n{out[-3000:]}"
            for r, (rc, out) in enumerate(zip(self.returncodes, self.outputs))
        )
        return f"timed_out={self.timed_out} seconds={self.seconds:.0f}\n{tail}"


def launch(script: str, world: int, args: list[str], timeout: float, extra_env: dict[str, str] | None = None) -> Run:
    """Run `python script args...` on `world` ranks; kill all of them at the deadline."""
    results = tempfile.mkdtemp(prefix="neuron-dist-")
    port = free_port()
    start = time.perf_counter()
    logs = [tempfile.TemporaryFile(mode="w+") for _ in range(world)]
    procs = [
        subprocess.Popen(
            [sys.executable, str(HERE / script), *args],
            env=worker_env(rank, world, port, results, extra_env),
            stdout=logs[rank],
            stderr=subprocess.STDOUT,
        )
        for rank in range(world)
    ]
    timed_out = False
    deadline = start + timeout
    for p in procs:
        try:
            p.wait(timeout=max(deadline - time.perf_counter(), 0.1))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    outputs = []
    for log in logs:
        log.seek(0)
        outputs.append(log.read())
        log.close()
    per_rank = []
    for rank in range(world):
        path = Path(results) / f"rank{rank}.json"
        per_rank.append(json.loads(path.read_text()) if path.exists() else {})
    files = {p.name: p.read_text() for p in Path(results).iterdir() if p.suffix == ".txt"}
    return Run([p.returncode for p in procs], outputs, per_rank, time.perf_counter() - start, timed_out, files)
