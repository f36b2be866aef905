"""TRL on neuron: SFTTrainer trains a tiny Llama for a few steps on a tiny text dataset (offline
tokenizer) as it does on CPU from the same weights, data and seeds."""

from __future__ import annotations

import pytest
import torch
from compare import TOLERANCES, assert_same

from tools.tiny_models import tiny_tokenizer

trl = pytest.importorskip("trl")


def _sft(output_dir: str, **args: object) -> tuple[trl.SFTTrainer, dict[str, torch.Tensor]]:
    """SFTTrainer after 3 steps on 8 texts from seed 0's tiny Llama, and the weights it started from."""
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
    # SFTConfig defaults to bf16 autocast, whose kernels round differently on each device: float32.
    sft_args = trl.SFTConfig(
        output_dir=output_dir, per_device_train_batch_size=4, max_steps=3, learning_rate=1e-2, logging_steps=1,
        report_to=[], save_strategy="no", max_length=32, bf16=False, **args,
    )  # fmt: skip
    trainer = trl.SFTTrainer(model=model, args=sft_args, train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    return trainer, before


def _losses(trainer: trl.SFTTrainer) -> list[float]:
    return [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_sft_trainer_matches_cpu(tmp_path):
    trainer, before = _sft(str(tmp_path / "neuron"))
    assert trainer.args.device.type == "neuron" and trainer.model.device.type == "neuron"
    assert trainer.state.global_step == 3
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p.detach().cpu())]
    assert len(changed) == len(before)
    # On neuron TRL pads every batch to a multiple of 128 (static shapes); the CPU run pads the same.
    assert trainer.args.pad_to_multiple_of == 128
    cpu, _ = _sft(str(tmp_path / "cpu"), use_cpu=True, pad_to_multiple_of=128)
    assert cpu.args.device.type == "cpu"
    losses = _losses(trainer)
    assert len(losses) == 3
    rtol, atol = TOLERANCES[torch.float32]
    torch.testing.assert_close(losses, _losses(cpu), rtol=rtol, atol=atol)
    # AdamW divides each update by the root of its own squared-gradient average: where a gradient
    # is near zero, its last-bit difference moves the weight past float32's tolerance (a few
    # weights in 1e5, by up to 2.5e-5 here); tests/test_training.py's AdamW runs allow the same.
    for c, d in zip(cpu.model.parameters(), trainer.model.parameters()):
        assert_same(c.detach(), d.detach(), rtol=1e-3, atol=1e-4)
