"""PEFT on neuron: LoRA on a tiny Llama trains (loss falls, as on CPU, base weights frozen) and
the adapter saves and reloads equal."""

from __future__ import annotations

import pytest
import torch
from compare import assert_same

peft = pytest.importorskip("peft")
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig  # noqa: E402

CONFIG = LlamaConfig(
    hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
    vocab_size=256, max_position_embeddings=64,
)  # fmt: skip
IDS = torch.randint(4, 256, (4, 16), generator=torch.Generator().manual_seed(0))
STEPS = 4


def _base() -> AutoModelForCausalLM:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIG)


def _lora(device: str):
    torch.manual_seed(1)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return get_peft_model(_base(), lora).to(device)


def _train(model, device: str) -> list[float]:
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, losses = IDS.to(device), []
    for _ in range(STEPS):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_lora_trains_and_reloads(tmp_path):
    model = _lora("neuron")
    frozen = {n: p.detach().cpu().clone() for n, p in model.named_parameters() if not p.requires_grad}
    losses = _train(model, "neuron")
    assert losses[-1] < losses[0]
    assert losses == pytest.approx(_train(_lora("cpu"), "cpu"), rel=1e-4, abs=1e-4)
    for name, p in model.named_parameters():
        if not p.requires_grad:
            assert torch.equal(frozen[name], p.detach().cpu()), name

    model.save_pretrained(tmp_path)
    adapter = {n: p.detach().cpu() for n, p in model.named_parameters() if p.requires_grad}
    reloaded = PeftModel.from_pretrained(_base().to("neuron"), tmp_path)
    weights = {n: p for n, p in reloaded.named_parameters() if "lora_" in n}
    assert weights.keys() == adapter.keys()
    for name, value in adapter.items():
        assert weights[name].device.type == "neuron"
        assert torch.equal(value, weights[name].detach().cpu()), name
    with torch.no_grad():
        assert_same(model(input_ids=IDS.to("neuron")).logits.cpu(), reloaded(input_ids=IDS.to("neuron")).logits)
