"""`torchneuron cache` (torch_neuronx/runtime/cache.py, cli.py): a real cache, filled by a fresh
process running eager ops and a small torch.compile, is listed by kind with its exact sizes,
cleared, pruned least recently used first and kept under `TORCH_NEURONX_CACHE_MAX_SIZE`; after
each, a fresh process still computes what CPU does."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_neuronx import cli
from torch_neuronx.runtime import cache

# Three eager ops (mul, add, sum: three store entries, each with XLA's copy of its module) and
# one compiled graph (one XLA module); prints the results and the eager executables built/loaded.
# The process also leaves its sequence (the order it used the store's entries in): one entry.
_SCRIPT = """
import json, torch, torch_neuronx
x = torch.arange(12.0).reshape(3, 4).to("neuron")
y = (x * 2 + 1).sum(0)
z = torch.compile(lambda a: torch.sin(a) @ a.t(), backend="neuron")(x)
m = torch_neuronx.metrics()
print(json.dumps({"y": y.cpu().tolist(), "z": z.cpu().tolist(),
                  "built": m["cache_misses"] - m["executables_loaded"], "loaded": m["executables_loaded"]}))
"""
EAGER_OPS, GRAPHS, SEQUENCES = 3, 1, 1
ENTRIES = EAGER_OPS + GRAPHS + SEQUENCES


def _expected() -> dict:
    x = torch.arange(12.0).reshape(3, 4)
    return {"y": (x * 2 + 1).sum(0), "z": torch.sin(x) @ x.t()}


def _run(root: Path, **env: str) -> dict:
    """The script in a fresh process on cache `root`; its results checked against CPU."""
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env={**os.environ, "TORCH_NEURONX_CACHE_DIR": str(root), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    for name, value in _expected().items():
        torch.testing.assert_close(torch.tensor(result[name]), value)
    return result


def _show(root: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> dict:
    monkeypatch.setenv("TORCH_NEURONX_CACHE_DIR", str(root))
    capsys.readouterr()
    cli.main(["cache", "--json"])
    return json.loads(capsys.readouterr().out)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def filled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("filled") / "cache"
    first = _run(root)
    assert first["built"] == EAGER_OPS and first["loaded"] == 0
    return root


@pytest.fixture
def root(filled: Path, tmp_path: Path) -> Path:
    """A copy of the filled cache, times included, for a test to change."""
    copy = tmp_path / "cache"
    shutil.copytree(filled, copy)
    return copy


def test_show_lists_every_file_by_kind(root: Path, monkeypatch, capsys) -> None:
    files = _files(root)
    shown = _show(root, monkeypatch, capsys)
    assert shown["directory"] == str(root)
    assert shown["bytes"] == sum(files.values())
    assert shown["entries"] == ENTRIES
    stored = [name for name in files if name.startswith("executables/")]
    copies = [name for name in files if name.startswith("jit_aten_")]
    graphs = [name for name in files if name.startswith("jit_neuron_")]
    assert len(stored) == len(copies) == EAGER_OPS and len(graphs) == GRAPHS
    assert shown["kinds"]["eager"] == {"entries": EAGER_OPS, "bytes": sum(files[n] for n in stored + copies)}
    assert shown["kinds"]["graph"] == {"entries": GRAPHS, "bytes": sum(files[n] for n in graphs)}
    sequences = [name for name in files if name.startswith("sequences/")]
    assert shown["kinds"]["sequence"] == {"entries": SEQUENCES, "bytes": sum(files[n] for n in sequences)}
    assert shown["kinds"]["eager_xla"]["entries"] == shown["kinds"]["other"]["entries"] == 0
    assert shown["unrecognized"] == [] and shown["max_bytes"] is None
    cli.main(["cache"])  # the table a user reads
    table = capsys.readouterr().out
    assert f"entries:   {ENTRIES}" in table and "limit:     none" in table


def test_clear_removes_every_entry_and_the_cache_refills(root: Path, monkeypatch, capsys) -> None:
    (root / "notes.txt").write_text("not the cache's")
    monkeypatch.setenv("TORCH_NEURONX_CACHE_DIR", str(root))
    cli.main(["cache", "clear"])
    assert capsys.readouterr().out.startswith(f"removed {ENTRIES} entries")
    assert set(_files(root)) == {"notes.txt"}  # files neither writer made are kept
    shown = _show(root, monkeypatch, capsys)
    assert shown["entries"] == 0 and shown["unrecognized"] == [str(root / "notes.txt")]
    again = _run(root)
    assert again["built"] == EAGER_OPS and again["loaded"] == 0
    assert _show(root, monkeypatch, capsys)["entries"] == ENTRIES


def test_prune_removes_least_recently_used_first(root: Path, monkeypatch, capsys) -> None:
    contents = cache.scan(root)
    # make the order known: the graph used longest ago, then the eager ops in turn
    order = sorted(contents.entries, key=lambda e: (e.kind != "graph", e.paths))
    for age, entry in enumerate(reversed(order), start=1):
        for path in entry.paths:
            os.utime(path, (1e9 - age * 100, 1e9 - age * 100))
    oldest, second = order[0], order[1]
    keep = contents.size - oldest.size - second.size
    monkeypatch.setenv("TORCH_NEURONX_CACHE_DIR", str(root))
    cli.main(["cache", "prune", "--max-size", str(keep)])
    assert capsys.readouterr().out.startswith("removed 2 least recently used entries")
    assert not any(os.path.exists(p) for p in oldest.paths + second.paths)
    shown = _show(root, monkeypatch, capsys)
    assert shown["bytes"] == keep and shown["kinds"]["graph"]["entries"] == 0
    assert shown["kinds"]["eager"]["entries"] == EAGER_OPS - 1
    # the pruned eager op lost its XLA copy too, so the store saves it again
    again = _run(root)
    assert again["built"] == 1 and again["loaded"] == EAGER_OPS - 1
    assert _show(root, monkeypatch, capsys)["entries"] == ENTRIES
    cli.main(["cache", "prune", "--max-size", "1G"])
    assert capsys.readouterr().out.startswith("removed 0 ")


def test_the_runtime_keeps_the_size_limit(tmp_path: Path, monkeypatch, capsys) -> None:
    limit = 20 * 1024  # below what the script writes (about 40 KiB)
    _run(tmp_path, TORCH_NEURONX_CACHE_MAX_SIZE="20K")  # checked once, as the process exits
    shown = _show(tmp_path, monkeypatch, capsys)
    assert 0 < shown["bytes"] <= limit
    assert shown["entries"] < ENTRIES


def test_sizes_parse_and_bad_ones_name_the_setting(monkeypatch, capsys) -> None:
    assert cache.parse_size("2G") == 2 * 2**30
    assert cache.parse_size("1.5GiB") == 3 * 2**29
    assert cache.parse_size("500m") == 500 * 2**20
    assert cache.parse_size("4096") == 4096
    with pytest.raises(ValueError, match="'ten' is not a size"):
        cache.parse_size("ten")
    monkeypatch.setenv("TORCH_NEURONX_CACHE_MAX_SIZE", "10 gigs")
    with pytest.raises(ValueError, match="TORCH_NEURONX_CACHE_MAX_SIZE: '10 gigs' is not a size"):
        cache.max_size()
    with pytest.raises(SystemExit):
        cli.main(["cache", "prune", "--max-size", "lots"])
    assert "'lots' is not a size" in capsys.readouterr().err


def test_kinds_by_name_and_checks_every_few_writes(tmp_path: Path, monkeypatch) -> None:
    """Files laid out as the two writers name them (no process needed), and the limit checked
    after `_interval` writes while a process runs."""
    name = "ab" * 32
    files = {
        f"executables/{name}": 100,  # a stored eager op ...
        f"jit_aten_mul_Tensor_{name[:12]}-{'1' * 64}-cache": 10,  # ... and XLA's copy of its module
        f"jit_aten_add_Tensor-{'2' * 64}-cache": 20,  # an eager op in XLA's cache only
        f"jit_aten_add_Tensor-{'2' * 64}-atime": 8,  # (JAX's own eviction was on once)
        f"jit_neuron_forward-{'3' * 64}-cache": 30,
        f"jit__lambda-{'4' * 64}-cache": 40,
        "executables/tmpk2j4": 50,  # an unfinished store write
        f"sequences/{'cd' * 32}": 5,  # a program's sequence
        ".lockfile": 0,  # JAX's, not an entry
    }
    for path, size in files.items():
        (tmp_path / path).parent.mkdir(exist_ok=True)
        (tmp_path / path).write_bytes(b"x" * size)
    contents = cache.scan(tmp_path)
    assert contents.by_kind() == {
        "eager": (1, 110),
        "graph": (1, 30),
        "eager_xla": (1, 28),
        "sequence": (1, 5),
        "other": (2, 90),
    }
    assert contents.unrecognized == [str(tmp_path / ".lockfile")]
    eager = next(e for e in contents.entries if e.kind == "eager")
    assert eager.paths[-1].endswith(f"executables/{name}")  # XLA's copy goes first

    monkeypatch.setenv("TORCH_NEURONX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_CACHE_MAX_SIZE", "200")
    monkeypatch.setattr(cache, "_unchecked", 0)
    monkeypatch.setattr(cache, "_interval", 3)
    cache.note_write()
    cache.note_write()
    assert cache.scan(tmp_path).size == 263
    cache.note_write()
    assert cache.scan(tmp_path).size <= 200
    assert cache._unchecked == 0
