"""`torchneuron bench`: every benchmark section, neuron measured next to PyTorch CPU.

One module per section: `eager_ops` (per-op eager time), `torch_compile` (tiny Llama train step,
decode, cold vs warm persistent cache), `hf_serving` (`from_pretrained` to first token and
static-cache tokens/s), `collectives` (all-reduce bandwidth, FSDP2 step time); `models` holds
the Llama configs they share.
"""
