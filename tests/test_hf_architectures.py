"""The CI slices of the causal-LM architecture sweeps (tools/hf_sweep.py). Inference: eleven
diverse architectures built tiny, run on CPU and on neuron; logits, greedy tokens with the dynamic
cache and with the static cache (compiled by the neuron backend) must match CPU. Training
(tools/hf_training.py): three architectures take three AdamW steps, eagerly and compiled; losses,
first-step gradients and the trained parameters must match CPU's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import hf_training
from tools.tiny_models import FAST_SLICE, TRAIN_SLICE


def _sweep(out: Path, *args: str) -> list[dict]:
    cmd = [sys.executable, "-m", "tools.hf_sweep", "--fast", "--json", str(out), "--no-report", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    return {r["model_type"]: r for r in _sweep(tmp_path_factory.mktemp("sweep") / "records.json")}


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    out = tmp_path_factory.mktemp("train") / "records.json"
    return {r["model_type"]: r for r in _sweep(out, "--train")}


@pytest.mark.parametrize("model_type", FAST_SLICE)
def test_architecture_matches_cpu(records: dict[str, dict], model_type: str) -> None:
    record = records[model_type]
    assert record["status"] == "pass", record.get("cause")
    assert record["logits_max_diff"] <= 1e-4
    assert record["greedy"].startswith("same")
    assert record["static"].startswith("same"), record["static"]


@pytest.mark.parametrize("mode", hf_training.MODES)
@pytest.mark.parametrize("model_type", TRAIN_SLICE)
def test_training_matches_cpu(training: dict[str, dict], model_type: str, mode: str) -> None:
    record = training[model_type][mode]
    assert record["status"] == "pass", record.get("cause")
    cpu = training[model_type]["cpu_losses"]
    assert cpu[-1] < cpu[0]  # it learns at all
    assert record["loss_max_diff"] <= hf_training.LOSS_ATOL + hf_training.LOSS_RTOL * max(cpu)
    assert record["grad_max_diff"] <= hf_training.GRAD_TOL * record["grad_scale"]
    assert record["param_max_diff"] <= hf_training.PARAM_TOL
    assert record["fallback_calls"] == 0
    if mode == "compiled":
        assert record["graphs"] >= 1


def test_training_config_draws_no_random_numbers() -> None:
    from tools.tiny_models import tiny_config

    config = tiny_config("gpt2", train=True)
    assert config.resid_pdrop == config.embd_pdrop == config.attn_pdrop == 0.0
    assert tiny_config("gpt2").resid_pdrop == 0.1  # inference keeps the architecture's own settings
