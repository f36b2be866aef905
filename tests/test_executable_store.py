"""The executable store (torch_neuronx/eager/executable_store.py): a fresh process loads the eager
executables an earlier one built, with the same results as CPU; damaged entries and a changed
environment cost a build, never a wrong or failed op."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_neuronx.eager import executable_store

# Views, an in-place write through a view, a dynamic scalar, a reduction, two storages of one
# size viewed alike, and a random op: each prints its result and the store's counters.
_SCRIPT = """
import json, torch, torch_neuronx
from torch_neuronx.runtime import platform
torch.manual_seed(0)
x = torch.arange(24.0).reshape(4, 6)
d = x.to("neuron")
d[1:3, ::2].mul_(2.5)
y = (d.t() * 0.5).sum(0)
big = torch.arange(40.0).to("neuron")[:6] + 1
small = torch.arange(8.0).to("neuron")[:6] + 1
r = torch.rand(5, device="neuron")
m = torch_neuronx.metrics()
print(json.dumps({"d": d.cpu().tolist(), "y": y.cpu().tolist(), "big": big.cpu().tolist(),
                  "small": small.cpu().tolist(), "r": r.cpu().tolist(),
                  "built": m["cache_misses"], "loaded": m["executables_loaded"], "device": platform.device().id}))
"""


def _run(cache: Path, script: str = _SCRIPT, **env: str) -> dict:
    """`script` in a fresh process on cache `cache`; the JSON it prints last."""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "TORCH_NEURONX_CACHE_DIR": str(cache), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _expected() -> dict:
    x = torch.arange(24.0).reshape(4, 6)
    x[1:3, ::2].mul_(2.5)
    return {
        "d": x.tolist(),
        "y": (x.t() * 0.5).sum(0).tolist(),
        "big": (torch.arange(6.0) + 1).tolist(),
        "small": (torch.arange(6.0) + 1).tolist(),
    }


def test_a_fresh_process_loads_what_an_earlier_one_built(tmp_path: Path) -> None:
    cold = _run(tmp_path)
    warm = _run(tmp_path)
    assert cold["loaded"] == 0 and cold["built"] > 0
    assert warm["loaded"] == warm["built"] == cold["built"]
    for result in (cold, warm):
        for name, value in _expected().items():
            torch.testing.assert_close(torch.tensor(result[name]), torch.tensor(value))
    assert warm["r"] == cold["r"]  # the same random stream from a loaded executable


def test_damaged_entries_are_rebuilt(tmp_path: Path) -> None:
    cold = _run(tmp_path)
    for entry in (tmp_path / "executables").iterdir():
        entry.write_bytes(entry.read_bytes()[:100])
    again = _run(tmp_path)
    assert again["loaded"] == 0 and again["built"] == cold["built"]
    assert again["d"] == cold["d"] and again["r"] == cold["r"]


def test_a_changed_environment_misses(tmp_path: Path) -> None:
    """XLA's flags are part of every entry's fingerprint (as the versions and sources are)."""
    _run(tmp_path)
    changed = _run(tmp_path, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    assert changed["loaded"] == 0


def test_each_device_loads_its_own(tmp_path: Path) -> None:
    """A process owns one of the platform's devices (LOCAL_RANK); an executable runs on the
    device it was compiled for, so ranks sharing a cache keep one entry per device."""
    four = "--xla_force_host_platform_device_count=4"
    first = _run(tmp_path, XLA_FLAGS=four, LOCAL_RANK="1")
    other = _run(tmp_path, XLA_FLAGS=four, LOCAL_RANK="2")
    again = _run(tmp_path, XLA_FLAGS=four, LOCAL_RANK="2")
    assert (first["device"], other["device"], again["device"]) == (1, 2, 2)
    assert other["loaded"] == 0 and again["loaded"] == again["built"]
    assert first["d"] == other["d"] == again["d"]


def test_the_debug_directory_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    assert not executable_store.enabled()
    monkeypatch.delenv("TORCH_NEURONX_DEBUG_DIR")
    assert executable_store.enabled()


_LAPACK = """
import json, torch, torch_neuronx
a = torch.tensor([[4.0, 2.0], [2.0, 3.0]])
print(json.dumps({"l": torch.linalg.cholesky(a.to("neuron")).cpu().tolist(),
                  "loaded": torch_neuronx.metrics()["executables_loaded"]}))
"""


def test_a_loaded_executable_that_calls_lapack_runs_first_thing(tmp_path: Path) -> None:
    """A warm process whose first op is a stored LAPACK-backed executable (cholesky): jaxlib binds
    its LAPACK kernels only when it lowers such an op, so loading must bind them first."""

    expected = torch.linalg.cholesky(torch.tensor([[4.0, 2.0], [2.0, 3.0]])).tolist()
    cold, warm = _run(tmp_path, _LAPACK), _run(tmp_path, _LAPACK)
    assert cold["loaded"] == 0 and warm["loaded"] >= 1
    torch.testing.assert_close(torch.tensor(warm["l"]), torch.tensor(expected))


_AHEAD = """
import json, threading, torch, torch_neuronx
from torch_neuronx.eager import executable_store
x = torch.arange(6.0).to("neuron")
first = x + 1  # the process's first look-up starts loading its program's last sequence ahead
for thread in threading.enumerate():
    if thread.name == "torchneuron-load-ahead":
        thread.join()
ahead = sum(f.done() and f.result() is not None for f in executable_store._ahead.values())
rest = [x * 2, x.sin(), x.exp(), x.sum()]
print(json.dumps({"values": [t.cpu().tolist() for t in [first, *rest]], "ahead": ahead,
                  "loaded": torch_neuronx.metrics()["executables_loaded"]}))
"""


def test_a_warm_run_loads_its_programs_executables_ahead(tmp_path: Path) -> None:
    """Each run writes down the order in which it used entries; the next run of the same command
    line loads them on a background thread, so an op finds its executable already loaded."""

    cold, warm = _run(tmp_path, _AHEAD), _run(tmp_path, _AHEAD)
    assert len(list((tmp_path / "sequences").iterdir())) == 1
    assert cold["ahead"] == cold["loaded"] == 0
    assert warm["ahead"] == 4 and warm["loaded"] == 5  # every op but the first found its executable loaded
    x = torch.arange(6.0)
    expected = [x + 1, x * 2, x.sin(), x.exp(), x.sum()]
    for got in (cold, warm):
        for value, want in zip(got["values"], expected):
            torch.testing.assert_close(torch.tensor(value), want)
