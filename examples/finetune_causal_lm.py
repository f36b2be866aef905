"""Fine-tune a causal language model with Transformers' `Trainer` on `neuron`.

Nothing here names the device: with TorchNeuron installed, `Trainer` picks `neuron` the way it
picks `cuda` on a GPU machine. The model is built from a config (no download) and learns a
synthetic corpus of counting sequences, so its loss visibly falls; to fine-tune a real model,
load it with `AutoModelForCausalLM.from_pretrained(name)` and pass your tokenized dataset.
The same run on CPU (`use_cpu=True`) is the reference the losses are checked against.

    python examples/finetune_causal_lm.py            # 4-layer model, 30 steps
    python examples/finetune_causal_lm.py --quick    # 2-layer model, 4 steps
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from transformers import AutoConfig, AutoModelForCausalLM, Trainer, TrainingArguments

VOCAB = 256


def build_model(quick: bool) -> torch.nn.Module:
    config = AutoConfig.for_model(
        "llama",
        vocab_size=VOCAB,
        hidden_size=64 if quick else 256,
        intermediate_size=128 if quick else 688,
        num_hidden_layers=2 if quick else 4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config)


def corpus(rows: int, length: int) -> list[dict[str, torch.Tensor]]:
    """Sequences counting up from a random start, so the next token is always learnable. Any
    map-style dataset works the same, a `datasets.Dataset` of tokenized text included."""
    starts = torch.randint(0, VOCAB, (rows, 1), generator=torch.Generator().manual_seed(0))
    ids = (starts + torch.arange(length)) % VOCAB
    return [{"input_ids": row, "labels": row} for row in ids]


def fine_tune(quick: bool, use_cpu: bool) -> tuple[list[float], str]:
    with tempfile.TemporaryDirectory() as output_dir:
        args = TrainingArguments(
            output_dir=output_dir,
            max_steps=4 if quick else 30,
            per_device_train_batch_size=4,
            learning_rate=1e-3,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            use_cpu=use_cpu,  # the reference run; on neuron, bf16=True trains in bfloat16 as on a GPU
        )
        trainer = Trainer(model=build_model(quick), args=args, train_dataset=corpus(64, 32))
        trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, str(trainer.args.device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 2-layer model and 4 steps")
    quick = parser.parse_args().quick
    losses, device = fine_tune(quick, use_cpu=False)
    print(f"trained on {device}: loss {' -> '.join(f'{loss:.4f}' for loss in losses)}")
    reference, _ = fine_tune(quick, use_cpu=True)
    difference = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    print(f"neuron vs CPU: max relative loss difference = {difference:.2e}")
    assert device == "neuron:0" and difference < 1e-3, (losses, reference)


if __name__ == "__main__":
    main()
