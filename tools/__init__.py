"""Developer tools that users of TorchNeuron do not need; not installed with the package.

Run from the repository root: `python -m tools.hf_sweep` (or `./dev hf-sweep`); `--train` for training parity.
"""
