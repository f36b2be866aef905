"""The CI slice of the causal-LM architecture sweep (tools/hf_sweep.py): eleven diverse
architectures built tiny, run on CPU and on neuron; logits, greedy tokens with the dynamic
cache and with the static cache (compiled by the neuron backend) must match CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.tiny_models import FAST_SLICE


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("sweep") / "records.json"
    cmd = [sys.executable, "-m", "tools.hf_sweep", "--fast", "--json", str(out), "--no-report"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return {r["model_type"]: r for r in json.loads(out.read_text())}


@pytest.mark.parametrize("model_type", FAST_SLICE)
def test_architecture_matches_cpu(records: dict[str, dict], model_type: str) -> None:
    record = records[model_type]
    assert record["status"] == "pass", record.get("cause")
    assert record["logits_max_diff"] <= 1e-4
    assert record["greedy"].startswith("same")
    assert record["static"].startswith("same"), record["static"]
