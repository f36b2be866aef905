"""Hugging Face serving benchmark (for `torchneuron bench`): a tiny Llama saved to disk, loaded
with `from_pretrained(device_map=...)` and served with a static cache, on neuron next to CPU.

Load-to-first-token is measured from `from_pretrained` to the first generated token on the
host, in this process (on neuron it includes compiling the prefill and decode graphs unless the
persistent cache is warm). Tokens/s is a third `generate` of `tokens` new tokens, after an
identical warm-up one.
"""

from __future__ import annotations

import tempfile
import time
from typing import Any

import torch

from .models import tiny_llama


def serve(path: str, device: str, tokens: int = 32) -> dict[str, Any]:
    """Seconds from `from_pretrained` to the first token, and warm static-cache tokens/s."""
    from transformers import AutoModelForCausalLM

    torch._dynamo.reset()
    ids = torch.arange(1, 9).unsqueeze(0)
    kwargs = dict(do_sample=False, cache_implementation="static", max_cache_len=64)
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(path, device_map=device).eval()
    first = model.generate(ids.to(device), max_new_tokens=1, **kwargs).cpu()
    load_to_first_token = time.perf_counter() - start
    model.generate(ids.to(device), max_new_tokens=tokens + 1, **kwargs)  # warm-up, as in torch_compile
    start = time.perf_counter()
    out = model.generate(ids.to(device), max_new_tokens=tokens + 1, **kwargs).cpu()
    seconds = time.perf_counter() - start
    return {
        "load_to_first_token_s": load_to_first_token,
        "tokens_per_s": tokens / seconds,
        "first_token": first[0, -1].item(),
        "tokens": out[0, ids.shape[1] :].tolist(),
    }


def run(tokens: int = 32) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as path:
        tiny_llama("cpu").save_pretrained(path)
        results = {device: serve(path, device, tokens) for device in ("cpu", "neuron")}
    results["same_tokens"] = results["cpu"]["tokens"] == results["neuron"]["tokens"]
    return results


def format_results(results: dict[str, Any]) -> str:
    lines = [
        'tiny Llama from_pretrained(device_map=...) + generate(cache_implementation="static")',
        f"{'':8s} {'load to first token s':>22s} {'tokens/s':>9s}",
    ]
    for device in ("cpu", "neuron"):
        r = results[device]
        lines.append(f"{device:8s} {r['load_to_first_token_s']:22.2f} {r['tokens_per_s']:9.1f}")
    lines.append(f"same greedy tokens on both: {results['same_tokens']}")
    return "\n".join(lines)
