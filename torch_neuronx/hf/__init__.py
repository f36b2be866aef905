"""Hugging Face integration helpers: tiny models for any architecture (`tiny`), the causal-LM
architecture sweep (`sweep`, `python -m torch_neuronx.hf.sweep`) and the load/generate benchmark
(`bench`).

Nothing here is needed to run Hugging Face libraries on neuron: they work unchanged with
`device="neuron"` / `device_map="neuron"`.
"""
