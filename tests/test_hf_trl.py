"""TRL on neuron: SFTTrainer runs a few steps on a tiny text dataset with an offline tokenizer."""

from __future__ import annotations

import pytest
import torch

from tools.tiny_models import tiny_tokenizer

trl = pytest.importorskip("trl")


def test_sft_trainer(tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    words = torch.randint(4, len(tokenizer), (8, 15), generator=torch.Generator().manual_seed(0))
    dataset = Dataset.from_dict({"text": [" ".join(f"w{int(i)}" for i in row) for row in words]})
    args = trl.SFTConfig(
        output_dir=str(tmp_path), per_device_train_batch_size=4, max_steps=3, learning_rate=1e-2, logging_steps=1,
        report_to=[], save_strategy="no", max_length=32,
    )  # fmt: skip
    trainer = trl.SFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
    assert trainer.args.device.type == "neuron" and trainer.model.device.type == "neuron"
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == 3 and all(torch.isfinite(torch.tensor(losses)))
    assert trainer.state.global_step == 3
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach().cpu())]
    assert len(changed) == len(before)
