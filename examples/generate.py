"""Text generation on `neuron`: `generate` with a static KV cache, and a `text-generation` pipeline.

With `cache_implementation="static"` the KV cache has a fixed shape, so Transformers compiles
the decode step once (with the `neuron` backend) and every new token reuses that executable.
The model is built from a config and the tokenizer is a character-level one built here, so
nothing is downloaded and the text is gibberish; with a real model, load both with
`from_pretrained(name)`. Greedy tokens are checked against the same model on CPU.

    python examples/generate.py            # 32 new tokens
    python examples/generate.py --quick    # 6 new tokens
"""

from __future__ import annotations

import argparse
import string

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast, pipeline

import torch_neuronx


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per lowercase letter, space or punctuation mark, after four special tokens."""
    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    vocab = {token: i for i, token in enumerate(specials + list(string.ascii_lowercase + " .,!?"))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    backend.decoder = decoders.Fuse()  # characters join without spaces
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def build_model(tokenizer: PreTrainedTokenizerFast) -> torch.nn.Module:
    config = AutoConfig.for_model(
        "llama", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config).eval()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="6 new tokens")
    new_tokens = 6 if parser.parse_args().quick else 32
    tokenizer = char_tokenizer()
    prompt = "hello, neuron"
    greedy = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens, "do_sample": False}

    model = build_model(tokenizer).to("neuron")
    inputs = tokenizer(prompt, return_tensors="pt").to("neuron")
    tokens = model.generate(**inputs, cache_implementation="static", **greedy)
    print(f"generate (static cache): {tokenizer.decode(tokens[0])!r}")
    compiled = torch_neuronx.metrics()["compile"]  # the decode step: compiled once, then reused per token
    print(f"compiled graphs: {compiled['graphs']}, executions: {compiled['compiles'] + compiled['cache_hits']}, "
          f"recompiles: {compiled['recompiles']}")  # fmt: skip

    generator = pipeline("text-generation", model=model, tokenizer=tokenizer, device="neuron")
    text = generator(prompt, **greedy)[0]["generated_text"]
    print(f"pipeline:                {text!r}")

    reference = build_model(tokenizer).generate(**inputs.to("cpu"), **greedy)  # CPU, dynamic cache
    differing = int((tokens.cpu() != reference).sum())
    print(f"neuron vs CPU: tokens that differ = {differing} of {reference.numel()}")
    assert differing == 0 and text == tokenizer.decode(reference[0]), (tokens, reference, text)


if __name__ == "__main__":
    main()
