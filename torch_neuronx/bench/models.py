"""The Llama configurations and builder the benchmarks share: a tiny Llama (`LLAMA`), a 4-layer
256-wide one (`LARGER_LLAMA`) whose train step is big enough to use every core, and a 58M-parameter
one (`MID_LLAMA`) where the model's work, not the per-token overhead, dominates decoding."""

from __future__ import annotations

import torch

LLAMA = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=256,
    max_position_embeddings=256,
)

LARGER_LLAMA = dict(
    LLAMA, hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=8
)

MID_LLAMA = dict(
    hidden_size=512,
    intermediate_size=1408,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=8,
    vocab_size=32000,
    max_position_embeddings=512,
)


def tiny_llama(device: str, config: dict | None = None) -> torch.nn.Module:
    """A `LlamaForCausalLM` of `config` (default `LLAMA`) with seed-0 random weights, on `device`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**(config or LLAMA))).to(device)
