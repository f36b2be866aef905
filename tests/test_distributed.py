"""The c10d backend `neuron`: registration, process-to-core mapping, and real multi-process runs
on loopback (TCPStore rendezvous) where every collective must equal Gloo on CPU, and DDP, FSDP2,
DTensor, Tensor Parallel, FSDP2+TP, distributed checkpointing and Accelerate must train like a
single-process CPU run. Each multi-process launch runs many checks; one test reports each check.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).parent / "dist_workers"))

import collectives
import models
from launch import REPO, Run, free_port, launch

# Checks that fail only because of a known gap outside this package: (error signature, reason).
KNOWN_GAPS = {
    "collectives.all_reduce_complex": (
        "bitcast_convert_type",
        "core: reading view_as_real() of a complex storage on neuron fails (eager/kernel.py _typed bitcasts "
        "complex64 -> float32); dist.all_reduce hands the backend that view",
    ),
}
QUAD_COLLECTIVES = [
    "all_reduce_async_and_views",
    "side_stream_waits_like_cuda",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "point_to_point",
    "gather_scatter",
    "barrier_and_groups",
    "functional",
    "shared_memory_transport",
]


def _report(run: Run, name: str) -> None:
    entries = [res.get(name) for res in run.results]
    if any(entry is None for entry in entries):
        pytest.fail(f"check {name} did not run on every rank\n{run.describe()}")
    failed = [(rank, e["error"]) for rank, e in enumerate(entries) if not e["ok"]]
    if failed:
        signature, reason = KNOWN_GAPS.get(name, (None, ""))
        if signature and all(signature in error for _, error in failed):
            pytest.xfail(reason)
        rank, error = failed[0]
        pytest.fail(f"{name} failed on rank {rank}:\n{error}")


# --- in-process ------------------------------------------------------------------------------


def test_backend_registered_for_neuron() -> None:
    assert dist.Backend.NEURON == "neuron"
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert dist.Backend.backend_capability["neuron"] == ["cpu", "neuron"]


@pytest.mark.parametrize(
    ("env", "index"),
    [
        ({}, 0),
        ({"LOCAL_RANK": "3"}, 3),
        ({"NEURON_RT_VISIBLE_CORES": "5", "LOCAL_RANK": "1"}, 5),
        ({"NEURON_RT_VISIBLE_CORES": "0-3", "LOCAL_RANK": "2"}, 2),
        ({"NEURON_RT_VISIBLE_CORES": "4,5", "LOCAL_RANK": "1"}, 1),
    ],
)
def test_local_index(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], index: int) -> None:
    from torch_neuronx.runtime.platform import local_index

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("NEURON_RT_VISIBLE_CORES", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert local_index() == index


def test_fresh_process_import_and_core_mapping() -> None:
    """`import torch` leaves the c10d kernels uninstalled; LOCAL_RANK picks the PJRT device."""
    code = (
        "import sys, torch\n"
        "assert 'torch_neuronx.distributed.kernels' not in sys.modules\n"
        "from torch_neuronx.runtime import platform\n"
        "x = torch.arange(4.0, device='neuron') * 2\n"
        "assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0]\n"
        "assert len(platform.jax().devices()) == 4, platform.jax().devices()\n"
        "print(platform.device().id)\n"
    )
    env = dict(os.environ, LOCAL_RANK="2", XLA_FLAGS="--xla_force_host_platform_device_count=4", PYTHONPATH=str(REPO))
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "2"


def test_storage_resize_keeps_accounting_exact() -> None:
    """FSDP2 frees and re-allocates parameter storages with `untyped_storage().resize_`."""
    before = torch.neuron.memory_allocated()
    t = torch.arange(6.0, device="neuron")
    view = t[2:]
    storage = t.untyped_storage()
    storage.resize_(0)
    assert storage.nbytes() == 0 and t.untyped_storage().nbytes() == 0
    assert torch.neuron.memory_allocated() == before
    storage.resize_(24)
    assert torch.neuron.memory_allocated() == before + 24
    t.copy_(torch.arange(6.0) * 2)
    assert view.cpu().tolist() == [4.0, 6.0, 8.0, 10.0]
    storage.resize_(32)  # grows, keeps the contents
    assert t.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    assert torch.neuron.memory_allocated() == before + 32
    del t, view, storage
    assert torch.neuron.memory_allocated() == before
    cpu = torch.ones(2)
    cpu.untyped_storage().resize_(16)
    assert cpu.untyped_storage().nbytes() == 16


@pytest.fixture
def single_process_group() -> object:
    """A one-rank world for in-process checks; torn down afterwards."""
    yield lambda backend, **kw: dist.init_process_group(
        backend, store=dist.HashStore(), rank=0, world_size=1, timeout=timedelta(seconds=30), **kw
    )
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.mark.parametrize("backend", ["neuron", "cpu:gloo,neuron:neuron", None])
def test_backend_strings(single_process_group: object, backend: str | None) -> None:
    single_process_group(backend)
    expected = {"neuron": "cpu:neuron,neuron:neuron", None: "neuron:neuron"}.get(backend, backend)
    assert dist.get_backend_config() == expected
    t = torch.arange(4.0, device="neuron")
    dist.all_reduce(t)
    out = torch.empty(4, device="neuron")
    dist.all_gather_single(out, t)
    assert out.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    if backend is not None:
        c = torch.arange(3)
        dist.all_reduce(c)
        assert c.tolist() == [0, 1, 2]


def test_errors_are_clear(single_process_group: object) -> None:
    single_process_group("neuron")
    t = torch.ones(2, device="neuron")
    with pytest.raises(NotImplementedError, match="PREMUL_SUM"):
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    gloo_only = dist.new_group(backend="gloo")
    with pytest.raises(RuntimeError, match='backend="neuron"'):
        dist.all_reduce(t, group=gloo_only)


# --- multi-process ---------------------------------------------------------------------------

PAIR_GROUPS = ["collectives", "ddp", "fsdp", "dtensor", "tp", "dcp"]
PAIR_CHECKS = ["platform", *(f"collectives.{f.__name__}" for f in collectives.ALL)] + [
    f"models.{name}" for group in PAIR_GROUPS[1:] for name, _ in models.GROUPS[group]
]
QUAD_CHECKS = ["platform", *(f"collectives.{n}" for n in QUAD_COLLECTIVES), "models.fsdp_tp"]


@pytest.fixture(scope="module")
def pair() -> Run:
    return launch("suite.py", 2, PAIR_GROUPS, timeout=1200)


@pytest.fixture(scope="module")
def quad() -> Run:
    return launch("suite.py", 4, ["collectives", "fsdp_tp", "--", *QUAD_COLLECTIVES], timeout=1200)


@pytest.mark.parametrize("name", PAIR_CHECKS)
def test_two_processes(pair: Run, name: str) -> None:
    _report(pair, name)


@pytest.mark.parametrize("name", QUAD_CHECKS)
def test_four_processes(quad: Run, name: str) -> None:
    _report(quad, name)


def test_accelerate_launch_trains_multi_neuron(tmp_path: Path) -> None:
    accelerate = Path(sys.executable).parent / "accelerate"
    if not accelerate.exists():
        pytest.skip("accelerate is not installed")
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        DIST_RESULTS=str(tmp_path),
        GLOO_SOCKET_IFNAME="lo",
        PYTHONWARNINGS="ignore",
        # Accelerate hands DDP device_ids=[local_process_index]; with one neuron:0 per process
        # (DESIGN 7) that is neuron:1 on rank 1. Accelerate's own switch keeps DDP's default.
        ACCELERATE_BYPASS_DEVICE_MAP="true",
    )
    cmd = [str(accelerate), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1"]
    cmd += ["--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    out = subprocess.run(
        [*cmd, str(Path(__file__).parent / "dist_workers" / "accel.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    import json

    for rank in range(2):
        results = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert set(results) == {"accelerate.state", "accelerate.train", "accelerate.objects"}
        for name, entry in results.items():
            assert entry["ok"], f"rank {rank} {name}:\n{entry.get('error')}"


def test_dead_or_late_peer_raises_instead_of_hanging() -> None:
    run = launch("failure.py", 2, [], timeout=600)
    assert not run.timed_out, run.describe()
    assert run.returncodes[1] == -9, run.describe()  # rank 1 killed itself mid-run
    results = run.results[0]
    for name in ("failure.peer_late", "failure.peer_killed"):
        assert name in results, run.describe()
        assert results[name]["ok"], results[name].get("error")
