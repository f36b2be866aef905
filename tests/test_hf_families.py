"""The CI slices of the other families' architecture sweep (tools/hf_families.py, `python -m
tools.hf_sweep --family F --fast`): per family two or three diverse architectures built tiny, run
on CPU and on neuron; the head's main output and the base model's must match CPU, generative heads
their greedy tokens, and one AdamW training step its loss, gradients and updated parameters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import hf_families

SLICE = [(family, model_type) for family, models in hf_families.FAST.items() for model_type in models]


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], dict]:
    out = tmp_path_factory.mktemp("families") / "records.json"  # records_<family>.json beside it
    # "all" would add the Diffusers slice, which tests/test_hf_diffusers.py runs
    families = ",".join(hf_families.FAMILIES)
    cmd = [sys.executable, "-m", "tools.hf_sweep", "--family", families, "--fast", "--json", str(out), "--no-report"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=Path(__file__).parents[1])
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[tuple[str, str], dict] = {}
    for family in hf_families.FAMILIES:
        records = json.loads(out.with_name(f"records_{family}.json").read_text())
        found.update({(family, r["model_type"]): r for r in records})
    return found


@pytest.mark.parametrize(("family", "model_type"), SLICE)
def test_family_architecture_matches_cpu(records: dict[tuple[str, str], dict], family: str, model_type: str) -> None:
    record = records[(family, model_type)]
    assert record["status"] == "pass", record.get("cause")
    assert record["max_diff"] <= 1e-4
    if "base_max_diff" in record:
        assert record["base_max_diff"] <= 1e-4
    if family in hf_families.GENERATIVE and "greedy" in record:
        assert record["greedy"].startswith("same")
    train = record["train"]
    assert train["status"] == "pass", train.get("cause")
    assert train["loss_max_diff"] <= 1e-4 * (1 + abs(train["cpu_losses"][0]))
    assert record["fallback_calls"] == 0, record["fallbacks"]


def test_family_rules() -> None:
    encoders = hf_families.model_types("encoders")
    assert "bert" in encoders and "roberta" in encoders  # masked LMs, though their decoders are causal LMs
    assert "llama" not in encoders  # a causal LM's sequence-classification head: the causal sweep's
    assert "whisper" not in hf_families.model_types("seq2seq")  # audio input: the speech family
    assert "whisper" in hf_families.model_types("speech")


def test_the_tie_arbiter_gives_cpu_neurons_order_of_tied_topk_values() -> None:
    import torch

    from tools.topk_ties import IndexOrderedTopk

    scores = torch.tensor(
        [[0.0, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0] * 2]
    )
    ties = IndexOrderedTopk()
    with ties:
        values, indices = scores.topk(8)
        distinct = torch.arange(6.0).topk(3)
    device = scores.to("neuron").topk(8)
    assert torch.equal(indices, device.indices.cpu()) and torch.equal(values, device.values.cpu())
    assert indices[0].tolist() == [1, 4, 0, 2, 3, 5, 6, 7]
    assert distinct.indices.tolist() == [5, 4, 3]
    assert ties.changed == 1  # the call with ties, not the one without
