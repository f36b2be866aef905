"""LoRA fine-tuning with PEFT on `neuron`: only the adapter trains, the base model stays frozen.

The base model is built from a config (no download); with a real one, load it with
`AutoModelForCausalLM.from_pretrained(name, device_map="neuron")` and wrap it the same way.
The same loop on CPU is the reference the losses are checked against.

    python examples/lora_peft.py            # 20 steps
    python examples/lora_peft.py --quick    # 4 steps
"""

from __future__ import annotations

import argparse
import tempfile

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM

CONFIG = AutoConfig.for_model(
    "llama", vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
)  # fmt: skip


def base_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(CONFIG)


def lora_model(device: str) -> PeftModel:
    torch.manual_seed(1)  # the adapter's initial weights
    adapter = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], lora_dropout=0.0)
    return get_peft_model(base_model(), adapter).to(device)


def train(model: PeftModel, device: str, steps: int) -> list[float]:
    ids = torch.randint(4, 256, (4, 16), generator=torch.Generator().manual_seed(0)).to(device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="4 steps")
    steps = 4 if parser.parse_args().quick else 20
    model = lora_model("neuron")
    model.print_trainable_parameters()
    losses = train(model, "neuron", steps)
    print(f"loss {' -> '.join(f'{loss:.4f}' for loss in losses)}")

    with tempfile.TemporaryDirectory() as path:  # the adapter saves from the device and reloads onto it
        model.save_pretrained(path)
        reloaded = PeftModel.from_pretrained(base_model().to("neuron"), path)
    ids = torch.arange(4, 20).unsqueeze(0).to("neuron")
    with torch.no_grad():
        same = torch.equal(model(input_ids=ids).logits.cpu(), reloaded(input_ids=ids).logits.cpu())
    print(f"reloaded adapter gives the same logits: {same}")

    reference = train(lora_model("cpu"), "cpu", steps)
    difference = max(abs(a - b) / abs(b) for a, b in zip(losses, reference))
    print(f"neuron vs CPU: max relative loss difference = {difference:.2e}")
    assert same and losses[-1] < losses[0] and difference < 1e-3, (losses, reference)


if __name__ == "__main__":
    main()
