"""Shared test setup: the backend is registered (autoload) before anything imports
torch.testing._internal, each test starts from a known device RNG state, and tests marked
`after_suite` run last."""

from __future__ import annotations

import pytest
import torch

import torch_neuronx  # noqa: F401  (explicit, in case autoload is disabled)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
    torch.neuron.manual_seed(0)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "after_suite: runs after every other test (it reruns part of the suite in a subprocess, "
        "which then loads the executables the suite built instead of compiling them again)",
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.get_closest_marker("after_suite") is not None)  # stable: order kept
