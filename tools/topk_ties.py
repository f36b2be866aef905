"""CPU's `topk` with tied values in index order, the family sweeps' arbiter for models that select by top-k.

torch.topk's documentation leaves the indices of tied elements unspecified, and CPU's follow no rule
that a device could match: ATen's topk (TopKImpl.h) compares values only and selects with libstdc++'s
unstable std::partial_sort (k * 64 <= n) or std::nth_element and a std::sort of the first k - 1, so
topk(8) of 12 zeros is [6, 11, 10, 9, 8, 7, 3, 1]. Neuron's topk is a stable sort: ties lowest index
first. A model that picks tokens or experts by topk over scores with exact ties (ReLU'd indexer scores
of sparse attention) therefore attends to other tokens on the two devices; under this mode CPU breaks
ties as neuron does, and the mode counts the calls whose answer that changed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class IndexOrderedTopk(TorchDispatchMode):
    """While active: every CPU `aten.topk` returns its ties lowest index first; `changed` counts the
    calls where that differs from CPU's own answer."""

    def __init__(self) -> None:
        super().__init__()
        self.changed = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if func is not torch.ops.aten.topk.default or args[0].device.type != "cpu":
            return out
        named = dict(zip(("self", "k", "dim", "largest"), args), **(kwargs or {}))
        dim, k = named.get("dim", -1), named["k"]
        values, indices = torch.sort(named["self"], dim=dim, descending=named.get("largest", True), stable=True)
        if torch.equal(indices.narrow(dim, 0, k), out[1]):
            return out
        self.changed += 1
        return values.narrow(dim, 0, k), indices.narrow(dim, 0, k)
