"""Device RNG state: 16 bytes, (seed, offset) as two little-endian uint64.

Every random op derives its key from (seed, offset) and advances offset by one, in eager and
compiled code alike, so both draw the same streams.
"""

from __future__ import annotations

import random
import threading

import torch

_MASK = 2**64 - 1


class RNGState:
    def __init__(self, seed: int = 67280421310721) -> None:
        self.seed = seed & _MASK
        self.offset = 0
        self.lock = threading.Lock()

    def manual_seed(self, seed: int) -> None:
        with self.lock:
            self.seed = int(seed) & _MASK
            self.offset = 0

    def next(self, count: int = 1) -> tuple[int, int]:
        """Return (seed, offset) for the next `count` random ops and advance."""
        with self.lock:
            offset = self.offset
            self.offset += count
        return self.seed, offset

    def get_state(self) -> torch.Tensor:
        return torch.tensor([self.seed, self.offset], dtype=torch.uint64).view(torch.uint8).clone()

    def set_state(self, state: torch.Tensor) -> None:
        if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8 or state.numel() != 16:
            raise ValueError("neuron RNG state must be a uint8 tensor of 16 bytes (seed, offset)")
        seed, offset = state.cpu().contiguous().view(torch.uint64).tolist()
        with self.lock:
            self.seed, self.offset = seed, offset

    def fresh_seed(self) -> int:
        seed = random.SystemRandom().getrandbits(63)
        self.manual_seed(seed)
        return seed


RNG = RNGState()
