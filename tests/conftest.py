"""Shared test setup: the backend is registered (autoload) before anything imports
torch.testing._internal, and each test starts from a known device RNG state."""

from __future__ import annotations

import pytest
import torch

import torch_neuronx  # noqa: F401  (explicit, in case autoload is disabled)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.neuron.manual_seed(0)
